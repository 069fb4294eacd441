"""A real Prometheus scrapes vLLM (the recorded false-full replay) and the sidecar, evaluating the shipped rules.

(1) every dashboard query returns a series, (2) the recording rules agree with the sidecar's own gauges, (3)
VLLMKVFalseFull reaches `firing` through the rules API, (4) on the budget-bound recording the sidecar's verdict
pages VLLMHeadroomBudgetFull and keeps the false-full page silent. Everything runs on 127.0.0.1 free ports and is
killed at the end. Tolerances: static quantities (capacity, block size, profile, W, max concurrency) must match
exactly; used/free blocks change every 0.5 s in the recording and the two scrapers sample different instants, so
their 20 s averages must agree within 4 blocks; safe headroom within 1 request.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.core.units import parse_duration
from grafana.config import DEFAULT
from grafana.generate import to_yaml
from grafana.rules import rule_groups
from tests.monitoring.promql import dashboard_queries, require, substitute
from tests.net import free_port

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "fixtures" / "vllm-0.32.0" / "false-full"
DEADLINE = 45.0
NAMESPACE, POD = "e2e", "vllm-0"


@dataclass
class Stack:
    prom: str
    sidecar: str
    logs: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def value(self, expr: str) -> float | None:
        res = self.query(expr)
        return float(res[0]["value"][1]) if res else None

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.prom}{path}", timeout=5) as r:
            return json.load(r)


@dataclass(frozen=True)
class Scrape:
    """One scrape job of the test Prometheus: its name, which of our targets ("vllm", "sidecar"), target labels."""

    job: str
    targets: tuple[str, ...]
    labels: dict[str, str]


def _wait(what: str, check: Callable[[], bool], stack: Stack, deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            if check():
                return
        except (OSError, AssertionError):
            pass
        time.sleep(0.5)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(stack.logs.glob("*.log")))
    pytest.fail(f"timed out after {deadline:.0f} s waiting for {what}\n{logs}")


@contextlib.contextmanager
def run_stack(tmp: Path, vllm_url: str, sidecar_args: list[str], replay: list[str] | None = None,
              for_: dict[str, str] | None = None, scrape_interval: str = "1s",
              alertmanager: str | None = None, sidecar_interval: float = 1.0,
              scrapes: list[Scrape] | None = None, startup_limit: str | None = None) -> Iterator[Stack]:
    """Prometheus scraping vLLM (real, or a replay started here) and our sidecar, with the shipped rules.

    By default both targets carry the labels a PodMonitor gives one pod (namespace, pod), as in Kubernetes;
    operator-style job names, so nothing depends on the job. `scrapes` replaces those two scrape jobs (e.g. the
    same pod scraped by two jobs). `alertmanager` (host:port) receives the alerts."""
    prometheus = require("prometheus")
    vllm_port = int(vllm_url.rsplit(":", 1)[1])
    sidecar_port, prom_port = free_port(), free_port()
    # The config group every other evaluation (not its 2m default), so the capacity is there within the deadlines.
    cfg = replace(DEFAULT, for_=for_ if for_ is not None else {"VLLMKVFalseFull": "3s"},
                  config_interval=f"{2 * parse_duration(scrape_interval):g}s",
                  startup_limit=startup_limit or DEFAULT.startup_limit)
    groups = rule_groups(cfg)
    for g in groups["groups"]:
        # The profile group too (its shipped 1m, grafana.rules.PROFILE_INTERVAL): at once a minute its first answer
        # could come after the deadline on a loaded machine (Prometheus offsets each group within its interval).
        if g["name"] == "vllm-headroom.profile.rules":
            g["interval"] = cfg.config_interval
    (tmp / "rules.yaml").write_text(to_yaml(groups))
    pod = {"namespace": NAMESPACE, "pod": POD}
    if scrapes is None:
        scrapes = [Scrape(f"{NAMESPACE}/vllm", ("vllm",), pod), Scrape(f"{NAMESPACE}/vllm-headroom", ("sidecar",), pod)]
    address = {"vllm": f"127.0.0.1:{vllm_port}", "sidecar": f"127.0.0.1:{sidecar_port}"}
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval,
                   "scrape_timeout": "1s" if scrape_interval == "1s" else "10s"},
        "rule_files": [str(tmp / "rules.yaml")],
        "scrape_configs": [{"job_name": sc.job, "static_configs": [{
            "targets": [address[t] for t in sc.targets], "labels": dict(sc.labels)}]} for sc in scrapes],
    }
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    commands: dict[str, list[str]] = {}
    if replay is not None:
        commands["replay"] = [*replay, "--web.listen-address", f"127.0.0.1:{vllm_port}"]
    commands["sidecar"] = [sys.executable, "-m", "exporter", "serve", "--target", vllm_url,
                           "--web.listen-address", f"127.0.0.1:{sidecar_port}",
                           "--scrape.interval", f"{sidecar_interval:g}s",
                           "--scrape.timeout", f"{round(sidecar_interval * 800)}ms",
                           *sidecar_args]
    commands["prometheus"] = [prometheus, f"--config.file={tmp / 'prometheus.yml'}",
                              f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, cmd in commands.items():
            log = (tmp / f"{name}.log").open("wb")
            procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
        s = Stack(f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{sidecar_port}", tmp)
        targets = sum(len(sc.targets) for sc in scrapes)
        _wait(f"all {targets} scrape targets up", lambda: s.value("sum(up)") == targets, s)
        yield s
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("prom")
    url = f"http://127.0.0.1:{free_port()}"
    argv = " ".join(json.loads((RECORDING / "meta.json").read_text())["server_argv"])
    replay = [sys.executable, "-m", "exporter", "replay", str(RECORDING), "--speed", "1", "--loop"]
    sidecar = ["--vllm-args", argv, "--verdict.false-full-hold", "2s", "--no-vllm-cmdline-discovery"]
    with run_stack(tmp, url, sidecar, replay) as s:  # the incident loops every ~27 s
        _wait("the recording rules", lambda: bool(s.query("instance_engine:vllm_worst_case_blocks_per_request:ceil")),
              s)
        # The profile group (every other evaluation here, see run_stack): until it answers the worst case rests on
        # the max_model_len bound.
        _wait("the profile group", lambda: bool(s.query(
            "instance_engine:vllm_request_prompt_tokens_observed:bucket_quantile")), s)
        yield s


def all_dashboard_queries_answered(stack: Stack, deadline: float = DEADLINE, pod: str | None = None,
                                   rate_interval: str = "1m") -> set[tuple[str, str, str]]:
    """Poll until every dashboard query returns a series (All, or one pod picked); the ones that never did."""
    pending = {(uid, title, substitute(expr, pod=pod, rate_interval=rate_interval))
               for uid, title, expr in dashboard_queries()}
    end = time.monotonic() + deadline
    while time.monotonic() < end and pending:
        for item in sorted(pending):
            if stack.query(item[2]):
                pending.discard(item)
        if pending:
            time.sleep(1)
    return pending


def test_every_dashboard_query_returns_a_series(stack: Stack) -> None:
    for pod in (None, POD):  # All, and the one pod picked
        pending = all_dashboard_queries_answered(stack, pod=pod)
        assert not pending, f"pod={pod}: queries with no series:\n" + "\n".join(
            f"{u} / {t}: {e}" for u, t, e in sorted(pending))
    # The picker filters: another pod's name leaves the pod's panels empty.
    expr = next(e for _u, t, e in dashboard_queries() if t == "Admission headroom")
    assert stack.query(substitute(expr, pod=POD)) and not stack.query(substitute(expr, pod="other-pod"))


EXACT = [
    ("instance_engine:vllm_kv_capacity_blocks:usable", "vllm_headroom_kv_capacity_blocks"),
    ("instance_engine:vllm_block_size_tokens:max", "vllm_headroom_block_size_tokens"),
    ("instance_engine:vllm_request_prompt_tokens:bucket_quantile",
     'vllm_headroom_request_profile_tokens{kind="prompt"}'),
    ("instance_engine:vllm_request_max_tokens:bucket_quantile",
     'vllm_headroom_request_profile_tokens{kind="max_tokens"}'),
    ("instance_engine:vllm_prompt_blocks:ceil", "vllm_headroom_prompt_blocks"),
    ("instance_engine:vllm_worst_case_blocks_per_request:ceil",
     'vllm_headroom_worst_case_blocks_per_request{basis="profile"}'),
]


def test_recording_rules_agree_with_the_sidecar(stack: Stack) -> None:
    _wait("20 s of history", lambda: (stack.value("count_over_time(vllm_headroom_up[20s])") or 0) >= 15, stack, 40)
    for rule, ours in EXACT[:2]:
        assert stack.value(f"max({rule})") == stack.value(f"max({ours})"), (rule, ours)
    assert stack.value("max(instance_engine:vllm_kv_capacity_blocks:usable)") == 39
    # Profile figures: the rules only see bucket bounds, so theirs is the bucket holding the sidecar's quantile,
    # and the worst case built from it is never smaller (concurrency never larger).
    bounds = [1, 2, 5, 10, 20, 50, 100, 200, 500]
    for rule, ours in EXACT[2:4]:
        a, b = stack.value(f"max({rule})"), stack.value(f"max({ours})")
        assert a is not None and b is not None and a == min(x for x in bounds if x >= b), (rule, a, ours, b)
    for (rule, ours), sign in zip(EXACT[4:], (1, 1), strict=True):
        a, b = stack.value(f"max({rule})"), stack.value(f"max({ours})")
        assert a is not None and b is not None and sign * (a - b) >= 0, (rule, a, ours, b)
    assert stack.value("max(instance_engine:vllm_worst_case_blocks_per_request:ceil)") == 4
    for rule, ours, tol in (("instance_engine:vllm_kv_used_blocks:round", "vllm_headroom_kv_used_blocks", 4),
                            ("instance_engine:vllm_kv_free_blocks:sub", "vllm_headroom_kv_free_blocks", 4)):
        a = stack.value(f"avg(avg_over_time({rule}[20s]))")
        b = stack.value(f"avg(avg_over_time({ours}[20s]))")
        assert a is not None and b is not None and abs(a - b) <= tol, (rule, a, ours, b)
    # With the bucket-bound worst case the rules' safe headroom is the more cautious one.
    a = stack.value("avg(avg_over_time(instance_engine:vllm_safe_headroom_requests:floor[20s]))")
    b = stack.value("avg(avg_over_time(vllm_headroom_safe_headroom_requests[20s]))")
    assert a is not None and b is not None and a <= b + 1, (a, b)
    # Both see the incident: false-full within the last 20 s, and no preemption at all.
    assert stack.value("max(max_over_time(instance_engine:vllm_kv_false_full:bool[20s]))") == 1
    assert stack.value("max(max_over_time(vllm_headroom_false_full[20s]))") == 1
    assert stack.value("max(max_over_time(instance_engine:vllm_num_preemptions:rate5m[20s]))") == 0
    assert stack.value("max(max_over_time(vllm_headroom_preemptions_per_second[20s]))") == 0


def test_false_full_alert_fires_through_the_rules_api(stack: Stack) -> None:
    def firing() -> bool:
        groups = stack.get("/api/v1/rules?type=alert")["data"]["groups"]
        return any(r["name"] == "VLLMKVFalseFull" and r["state"] == "firing"
                   and any(a["labels"].get("model_name") == "tiny-llama" for a in r["alerts"])
                   for g in groups for r in g["rules"])

    _wait("VLLMKVFalseFull firing", firing, stack, 40)
    alerts = stack.get("/api/v1/alerts")["data"]["alerts"]
    ff = [a for a in alerts if a["labels"]["alertname"] == "VLLMKVFalseFull" and a["state"] == "firing"]
    assert ff and ff[0]["labels"]["severity"] == "warning"
    assert ff[0]["annotations"]["runbook_url"].endswith("docs/runbook.md#vllmkvfalsefull")
    endpoint = stack.query("vllm:num_requests_running")[0]["metric"]["instance"]  # the replayed vLLM's address
    assert ff[0]["annotations"]["description"].startswith(f"{POD} at {endpoint} (tiny-llama, engine 0): ")
    assert ff[0]["labels"]["pod"] == POD and "job" not in ff[0]["labels"]
    assert ff[0]["labels"]["vllm_endpoint"] == endpoint
    # The healthy-path alerts stay quiet on this incident.
    quiet = {"VLLMKVCacheFull", "VLLMPreemptionStorm", "VLLMSchedulerStuck", "VLLMHeadroomTargetDown",
             "VLLMHeadroomSidecarDown", "VLLMMetricsAbsent", "VLLMStartupSlow", "VLLMEngineAsleepWithQueue",
             "VLLMHeadroomVllmNotScraped"}
    assert not [a for a in alerts if a["labels"]["alertname"] in quiet and a["state"] == "firing"]


def test_budget_full_pages_as_itself_not_as_false_full(tmp_path: Path) -> None:
    """The sidecar-verdict alerts on real series: the recorded budget-bound incident (max_num_batched_tokens 256)
    pages VLLMHeadroomBudgetFull, and VLLMKVFalseFull, which the rules' own flag would raise, stays silent."""
    recording = RECORDING.parent / "budget-bound"
    url = f"http://127.0.0.1:{free_port()}"
    argv = " ".join(json.loads((recording / "meta.json").read_text())["server_argv"])
    replay = [sys.executable, "-m", "exporter", "replay", str(recording), "--speed", "1", "--loop"]
    sidecar = ["--vllm-args", argv, "--verdict.false-full-hold", "0s", "--no-vllm-cmdline-discovery"]
    # The rules' flag rises with the queue; the sidecar names budget_full one sidecar scrape and one Prometheus
    # scrape after it (1 s each), a gap in which false-full is pending and unsuppressed on every loop of the
    # replay. A for: of 5 s (2.5 times the gap, under the ~12 s the queue stands in each loop) keeps that from
    # paging here, as for: 5m does in production, while without the verdict's suppression it pages.
    for_ = {"VLLMHeadroomBudgetFull": "3s", "VLLMKVFalseFull": "5s"}
    with run_stack(tmp_path, url, sidecar, replay, for_=for_) as s:
        def firing(name: str) -> bool:
            return any(r["name"] == name and r["state"] == "firing"
                       for g in s.get("/api/v1/rules?type=alert")["data"]["groups"] for r in g["rules"])

        _wait("VLLMHeadroomBudgetFull firing", lambda: firing("VLLMHeadroomBudgetFull"), s, 60)
        alerts = s.get("/api/v1/alerts")["data"]["alerts"]
        bf = [a for a in alerts if a["labels"]["alertname"] == "VLLMHeadroomBudgetFull" and a["state"] == "firing"]
        assert bf[0]["labels"]["pod"] == POD and bf[0]["labels"]["model_name"] == "tiny-llama", bf
        endpoint = url.split("//", 1)[1]  # the sidecar's --target: the replayed vLLM's host:port
        assert bf[0]["labels"]["vllm_endpoint"] == endpoint, bf
        text = bf[0]["annotations"]["description"]
        assert text.startswith(f"{POD} at {endpoint} (tiny-llama, engine 0): "), text
        assert not firing("VLLMKVFalseFull")
        # Everything Prometheus stored: the rules' false-full flag held for longer than the alert's for: (8
        # evaluations in a row, 1 s apart, against for: 5s), so only the verdict can have kept the page out.
        def longest_run() -> int:
            best = 0
            for r in s.query("instance_engine:vllm_kv_false_full:bool[5m]"):
                run = 0
                for _t, v in r["values"]:
                    run = run + 1 if v == "1" else 0
                    best = max(best, run)
            return best

        _wait("the rules' false-full flag held 8 evaluations in a row", lambda: longest_run() >= 8, s, 90)
        assert s.value('max(max_over_time(ALERTS{alertname="VLLMKVFalseFull",alertstate="firing"}[5m]))') is None
