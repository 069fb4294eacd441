"""Every dashboard query against a real Prometheus that scrapes one pod under two jobs, as a cluster does when
vLLM's own PodMonitor and a cluster-wide pod scrape both find it.

The replay is frozen on one frame of the recorded false-full incident (92 waiting, 8 running), so every scrape of
every job sees the same numbers and nothing depends on when each job scraped. The same vLLM and sidecar are scraped
three ways, told apart by a `cluster` label: `double` (vLLM and sidecar each under two jobs), `single` (once each,
the reference) and `bare` (once each, without namespace/pod labels: vLLM outside Kubernetes). Each query of the
generated dashboards, with All and with the pod picked, must give on `double` exactly what it gives on `single`
(labels other than cluster and job, and values); so a new panel is covered without touching this file.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from grafana.dashboards import dashboards
from tests.monitoring.promql import dashboard_queries, substitute
from tests.monitoring.test_real_prometheus import NAMESPACE, POD, RECORDING, Scrape, Stack, _wait, run_stack
from tests.net import free_port

FRAME = "4s"  # seconds into the false-full recording: 92 waiting, 8 running, usage 0.41
POD_LABELS = {"namespace": NAMESPACE, "pod": POD}
SCRAPES = [
    Scrape(f"{NAMESPACE}/vllm", ("vllm",), {"cluster": "double", **POD_LABELS}),
    Scrape(f"{NAMESPACE}/vllm-headroom", ("sidecar",), {"cluster": "double", **POD_LABELS}),
    Scrape("kubernetes-pods", ("vllm", "sidecar"), {"cluster": "double", **POD_LABELS}),
    Scrape("single/vllm", ("vllm",), {"cluster": "single", **POD_LABELS}),
    Scrape("single/vllm-headroom", ("sidecar",), {"cluster": "single", **POD_LABELS}),
    Scrape("vllm", ("vllm", "sidecar"), {"cluster": "bare"}),
]
Answer = list[tuple[tuple[tuple[str, str], ...], str]]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("double")
    url = f"http://127.0.0.1:{free_port()}"
    argv = " ".join(json.loads((RECORDING / "meta.json").read_text())["server_argv"])
    replay = [sys.executable, "-m", "exporter", "replay", str(RECORDING), "--speed", "1e-9", "--start-at", FRAME,
              "--no-loop"]
    sidecar = ["--vllm-args", argv, "--verdict.false-full-hold", "2s", "--no-vllm-cmdline-discovery"]
    with run_stack(tmp, url, sidecar, replay, scrapes=SCRAPES) as s:
        _wait("every scrape and the recording rules of every cluster, two seconds back", lambda: _settled(s), s)
        yield s


SETTLE_EVALUATIONS = 5  # rules over a rate need two samples, and a rule over a recorded series one cycle more


def _settled(stack: Stack) -> bool:
    """Every job's targets up since `SETTLE_EVALUATIONS` intervals (1 s each) before `time.time() - 2`, the instant
    the tests query, and the recording rules answering for every cluster then. pytest-xdist may run each test of
    this module in its own worker, each with its own stack that the test would otherwise query in its first seconds."""
    at = time.time() - 2
    up = {r["metric"]["cluster"]: r["value"][1]
          for r in _at(stack, "count by (cluster) (up == 1)", at - SETTLE_EVALUATIONS)}
    want: dict[str, str] = {}
    for scrape in SCRAPES:
        cluster = scrape.labels["cluster"]
        want[cluster] = str(int(want.get(cluster, "0")) + len(scrape.targets))
    rules = {r["metric"]["cluster"] for r in _at(
        stack, "count by (cluster) (instance_engine:vllm_worst_case_blocks_per_request:ceil)", at)}
    return up == want and rules == set(want)


def _at(stack: Stack, expr: str, at: float) -> list[dict[str, Any]]:
    url = f"{stack.prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", (expr, body)
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _query(expr: str, cluster: str, pod: str | None) -> str:
    return substitute(expr.replace("$cluster", cluster), pod=pod)


def _answer(result: list[dict[str, Any]]) -> Answer:
    """A query's series without the labels that tell the scrapes apart, and their values."""
    return sorted((tuple(sorted((k, v) for k, v in r["metric"].items() if k not in ("cluster", "job"))),
                   r["value"][1]) for r in result)


def test_a_pod_scraped_by_two_jobs_counts_once(stack: Stack) -> None:
    queries = sorted({(uid, title, expr) for uid, title, expr in dashboard_queries()})
    differ: dict[tuple[str, str, str, str | None], tuple[Answer, Answer]] = {}
    end = time.monotonic() + 60
    while True:  # the sidecar's verdict settles within seconds of its first scrapes; then nothing changes
        at = time.time() - 2  # every scrape of the last second is in
        differ = {}
        for uid, title, expr in queries:
            for pod in (None, POD):
                single = _answer(_at(stack, _query(expr, "single", pod), at))
                double = _answer(_at(stack, _query(expr, "double", pod), at))
                if not single or single != double:
                    differ[uid, title, expr, pod] = (single, double)
        if not differ or time.monotonic() > end:
            break
        time.sleep(2)
    assert not differ, "answers differ between the pod scraped once and twice (or are empty):\n" + "\n".join(
        f"{uid} / {title} (pod={pod}): {expr}\n  once:  {a}\n  twice: {b}"
        for (uid, title, expr, pod), (a, b) in sorted(differ.items(), key=str))
    # The numbers of the SRE's report, on the doubled pod: 92 waiting (not 184), one engine (not 2).
    by_title = {(uid, title): expr for uid, title, expr in dashboard_queries()}
    now = time.time() - 2
    for key, pod, want in ((("vllm-kv-fleet", "Waiting requests"), None, "92"),
                           (("vllm-kv-fleet", "Engines"), None, "1"),
                           (("vllm-kv-admission", "Waiting requests"), POD, "92")):
        got = _at(stack, _query(by_title[key], "double", pod), now)
        assert [r["value"][1] for r in got] == [want], (key, got)


def _render(legend: str, labels: dict[str, str]) -> str:
    """Grafana's legendFormat: {{label}} becomes the label's value, or nothing when the series has no such label."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), legend)


def test_legends_name_the_pod_or_the_instance_outside_kubernetes(stack: Stack) -> None:
    """Per-engine legends read `namespace/pod` in Kubernetes and `host:port` elsewhere, never both glued."""
    targets = [(uid, p["title"], t) for uid, d in dashboards().items() for p in d["panels"]
               for t in p.get("targets", []) if re.search(r"\{\{(who|pod|instance)\}\}", t.get("legendFormat", ""))]
    assert len(targets) >= 10
    at = time.time() - 2
    for uid, title, t in targets:
        for cluster, pod, want in (("double", POD, f"{NAMESPACE}/{POD} "), ("bare", None, "127.0.0.1:")):
            result = _at(stack, _query(t["expr"], cluster, pod), at)
            assert result, (uid, title, cluster, t["expr"])
            for r in result:
                text = _render(t["legendFormat"], r["metric"])
                assert want in text and "  " not in text and not text.endswith(" "), (uid, title, cluster, text)
                assert ("127.0.0.1" in text) == (cluster == "bare"), (uid, title, cluster, text)


def _variable_answer(stack: Stack, query: str, values: dict[str, str], at: float) -> set[str]:
    """Grafana's label_values(selector, label), as Prometheus answers it, with `values` for the variables."""
    m = re.fullmatch(r"label_values\((.*), (\w+)\)", query)
    assert m, query
    selector, label = m.groups()
    for name, value in values.items():
        selector = selector.replace(f"${name}", value)
    selector = re.sub(r"\$\{?([a-z_]+)\}?", ".*", selector)
    return {r["metric"].get(label, "") for r in _at(stack, f"group by ({label}) ({selector})", at)}


def test_variables_follow_the_pod_picker(stack: Stack) -> None:
    """Picking a pod lists only that pod's jobs, models and engines; another pod lists none."""
    at = time.time() - 2
    adm = {v["name"]: v for v in dashboards()["vllm-kv-admission"]["templating"]["list"]}
    picked = {"cluster": "double", "pod": POD}
    assert _variable_answer(stack, adm["job"]["query"], {"cluster": "double"}, at) == {
        f"{NAMESPACE}/vllm", "kubernetes-pods"}
    assert _variable_answer(stack, adm["pod"]["query"], {"cluster": "double", "job": "kubernetes-pods"}, at) == {POD}
    assert _variable_answer(stack, adm["model_name"]["query"], picked, at) == {"tiny-llama"}
    assert _variable_answer(stack, adm["engine"]["query"], picked, at) == {"0"}
    for name in ("model_name", "engine"):
        assert _variable_answer(stack, adm[name]["query"], {**picked, "pod": "other-pod"}, at) == set(), name
