"""Benchmark 8: the rules bundle's cost in a real Prometheus, old bundle against new, side by side.

Three Debian Prometheus 2.42 processes scrape the same synthetic fleet at the same time: one without rules (what
scraping costs), one with the old bundle (the rules file of git revision --old, default the last commit before the
rework), one with the new (the rules file this tree generates). The fleet is one asyncio server: N pods, each a vLLM
target serving a recorded vLLM 0.32.0 exposition (tests/fixtures/vllm-0.32.0/<scenario>/snapshot.prom, the five
scenarios dealt round-robin; their counters and histograms grow every tick, so rates and windows see traffic) and a
sidecar target serving our sidecar's /metrics for the same exposition (its series, `target` a loopback URL, as in
vLLM's pod). Targets carry pod labels (namespace, pod, a pod IP as `instance`), like a PodMonitor's.

After a warm-up long enough to fill every 5-minute window, it measures over the same wall-clock interval in all three:

- rule evaluation: the rise of prometheus_rule_group_duration_seconds_sum (every group's evaluation time; on a
  shared machine wall time, which includes waiting for a core) and prometheus_rule_group_last_duration_seconds per
  group at the end;
- process CPU (utime + stime from /proc), and that CPU minus the no-rules Prometheus': the bundle's own CPU;
- recorded series (`count({__name__=~".+:.+:.+"})`) per pod.

Each figure is per pod per 30 s evaluation (scrape and evaluation interval 30 s, as kube-prometheus-stack ships).
    python -m bench.b8_rules_cost [--pods 100 500] [--warmup 420] [--measure 240] [--old REV]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml  # type: ignore[import-untyped]
from prometheus_client import generate_latest

from exporter.expose.server import Sidecar
from exporter.pipeline.target import Settings, one_shot
from grafana.config import DEFAULT
from grafana.generate import RULES_WIDTH, to_yaml
from grafana.rules import rule_groups
from tests import fixtures

from .common import FIXTURES, REPO, cpu_seconds, free_port, loadavg, quick, save, spawn, wait_http

SCENARIOS = ("idle", "false-full", "kv-full", "preemption", "head-of-line")
INTERVAL = 30.0  # scrape and evaluation interval, seconds
OLD_REV = "8c658ca"  # the last commit with the old bundle (135 KB, promtool suite committed)
COUNTER = re.compile(r"^((?:vllm:[a-z_]+(?:_total|_count|_sum|_bucket))(?:\{[^}]*\})?) ([0-9.e+-]+)$", re.M)


def sidecar_body(scenario: str) -> bytes:
    """Our sidecar's /metrics for one recorded exposition, its target the loopback vLLM of its pod."""
    t = one_shot(Settings("http://127.0.0.1:8000", vllm_args=fixtures.vllm_argv(scenario), discover_cmdline=False))
    t.last = t.observe(1.0, fixtures.snapshot(scenario))
    t.known_engines = {(e.model_name, e.engine) for e in t.last.engines}
    return generate_latest(Sidecar([t], 5.0).registry)


def grown(text: str, factor: float) -> bytes:
    """The exposition with every counter and histogram series scaled by `factor` (monotone, buckets consistent)."""
    return COUNTER.sub(lambda m: f"{m.group(1)} {float(m.group(2)) * factor:.17g}", text).encode()


def response(body: bytes) -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


class Fleet:
    """One port; /p/<i>/vllm and /p/<i>/sidecar. Bodies are rebuilt once per tick for the five scenarios."""

    def __init__(self) -> None:
        self.port = free_port()
        self.snapshots = {s: (FIXTURES / s / "snapshot.prom").read_text() for s in SCENARIOS}
        self.sidecars = {s: response(sidecar_body(s)) for s in SCENARIOS}
        self.started = time.monotonic()
        self.vllm: dict[str, bytes] = {}
        self._tick()

    def _tick(self) -> None:
        factor = 1.0 + (time.monotonic() - self.started) / 600.0  # +10 % of the recorded counts per minute
        self.vllm = {s: response(grown(text, factor)) for s, text in self.snapshots.items()}

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                path = line.split()[1].decode() if len(line.split()) > 1 else "/"
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                parts = path.split("/")  # ['', 'p', i, kind]
                scenario = SCENARIOS[int(parts[2]) % len(SCENARIOS)]
                writer.write(self.vllm[scenario] if parts[3] == "vllm" else self.sidecars[scenario])
                await writer.drain()
        except (ConnectionError, IndexError, ValueError):
            pass
        finally:
            writer.close()

    async def _serve(self) -> None:
        server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        async with server:
            while True:
                await asyncio.sleep(INTERVAL / 2)
                self._tick()

    def start(self) -> None:
        threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True).start()


def prometheus_config(fleet: Fleet, pods: int, rules: Path | None) -> dict[str, Any]:
    def targets(kind: str, port: int) -> list[dict[str, Any]]:
        return [{"targets": [f"127.0.0.1:{fleet.port}"],
                 "labels": {"__metrics_path__": f"/p/{i}/{kind}", "namespace": "bench", "pod": f"vllm-{i}",
                            "instance": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}:{port}"}}
                for i in range(pods)]

    config: dict[str, Any] = {
        "global": {"scrape_interval": f"{INTERVAL:g}s", "evaluation_interval": f"{INTERVAL:g}s",
                   "scrape_timeout": "10s"},
        "scrape_configs": [{"job_name": "bench/vllm", "static_configs": targets("vllm", 8000)},
                           {"job_name": "bench/vllm-headroom", "static_configs": targets("sidecar", 9478)}],
    }
    if rules is not None:
        config["rule_files"] = [str(rules)]
    return config


def scrape_own(url: str) -> dict[str, float]:
    """Prometheus' own rule-evaluation figures from its /metrics."""
    out: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(("prometheus_rule_group_duration_seconds_sum", "prometheus_rule_group_duration_seconds_count",
                            "prometheus_rule_evaluation_failures_total")):
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0]] = out.get(name.split("{")[0], 0.0) + float(value)
        elif line.startswith("prometheus_rule_group_last_duration_seconds{"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def query(url: str, expr: str) -> float:
    body = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=30).json()
    result = body["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def phase(pods: int, old_rules: Path, new_rules: Path, warmup: float, measure: float, tmp: Path) -> dict[str, Any]:
    fleet = Fleet()
    fleet.start()
    load_before = loadavg()
    variants = {"none": None, "old": old_rules, "new": new_rules}
    with contextlib.ExitStack() as stack:
        urls, pids = {}, {}
        for name, rules in variants.items():
            port = free_port()
            folder = tmp / f"{pods}-{name}"
            folder.mkdir()
            (folder / "prometheus.yml").write_text(yaml.safe_dump(prometheus_config(fleet, pods, rules)))
            proc = stack.enter_context(spawn(
                ["prometheus", f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], log=folder / "prometheus.log"))
            urls[name], pids[name] = f"http://127.0.0.1:{port}", proc.pid
        for url in urls.values():
            wait_http(f"{url}/-/ready", 60)
        print(f"  {pods} pods: warming up {warmup:.0f} s (load {loadavg()})", flush=True)
        time.sleep(warmup)
        t0, cpu0 = time.monotonic(), {n: cpu_seconds(p) for n, p in pids.items()}
        own0 = {n: scrape_own(u) for n, u in urls.items() if n != "none"}
        time.sleep(measure)
        t1, cpu1 = time.monotonic(), {n: cpu_seconds(p) for n, p in pids.items()}
        own1 = {n: scrape_own(u) for n, u in urls.items() if n != "none"}
        span = t1 - t0
        up = {n: query(u, "sum(up)") for n, u in urls.items()}
        per_eval = INTERVAL / span / pods * 1e3  # seconds over the span -> ms per pod per evaluation
        out: dict[str, Any] = {"pods": pods, "span_s": span, "targets_up": up, "load_before": load_before,
                               "load_after": loadavg(), "process_cpu_ms_per_pod": {}, "bundle_cpu_ms_per_pod": {},
                               "rule_eval_ms_per_pod": {}, "recorded_series_per_pod": {}, "slowest_groups": {},
                               "rule_failures": {}}
        for name in variants:
            out["process_cpu_ms_per_pod"][name] = (cpu1[name] - cpu0[name]) * per_eval
        for name in ("old", "new"):
            out["bundle_cpu_ms_per_pod"][name] = ((cpu1[name] - cpu0[name]) - (cpu1["none"] - cpu0["none"])) * per_eval
            key = "prometheus_rule_group_duration_seconds_sum"
            out["rule_eval_ms_per_pod"][name] = (own1[name][key] - own0[name][key]) * per_eval
            out["rule_failures"][name] = own1[name].get("prometheus_rule_evaluation_failures_total", 0.0)
            out["recorded_series_per_pod"][name] = query(urls[name], 'count({__name__=~".+:.+:.+"})') / pods
            groups = {k.split('rule_group="', 1)[1].split('"', 1)[0].rsplit(";", 1)[-1]: v * 1e3
                      for k, v in own1[name].items() if k.startswith("prometheus_rule_group_last_duration_seconds{")}
            out["slowest_groups"][name] = dict(sorted(groups.items(), key=lambda kv: -kv[1]))
        print(f"  {pods} pods: bundle CPU per pod per evaluation old {out['bundle_cpu_ms_per_pod']['old']:.3f} ms, "
              f"new {out['bundle_cpu_ms_per_pod']['new']:.3f} ms; rule evaluation old "
              f"{out['rule_eval_ms_per_pod']['old']:.3f} ms, new {out['rule_eval_ms_per_pod']['new']:.3f} ms",
              flush=True)
        return out


def old_rules_file(rev: str, folder: Path) -> Path:
    text = subprocess.run(["git", "show", f"{rev}:deploy/prometheus/vllm-headroom-rules.yaml"], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout
    path = folder / "old-rules.yaml"
    path.write_text(text)
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.b8_rules_cost", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--pods", type=int, nargs="+", default=[100, 500])
    ap.add_argument("--warmup", type=float, default=150.0 if quick() else 420.0)
    ap.add_argument("--measure", type=float, default=120.0 if quick() else 240.0)
    ap.add_argument("--old", default=OLD_REV, help="git revision whose rules file is the old bundle")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="b8-") as tmp_s:
        tmp = Path(tmp_s)
        old = old_rules_file(args.old, tmp)
        new = tmp / "new-rules.yaml"
        new.write_text(to_yaml(rule_groups(DEFAULT), width=RULES_WIDTH))
        sizes = {"old": {"bytes": len(old.read_bytes()), "label_replace": old.read_text().count("label_replace")},
                 "new": {"bytes": len(new.read_bytes()), "label_replace": new.read_text().count("label_replace")}}
        version = subprocess.run(["prometheus", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        phases = [phase(n, old, new, args.warmup, args.measure, tmp) for n in args.pods]
    save("b8_rules_cost", {"prometheus": version, "old_rev": args.old, "interval_s": INTERVAL, "sizes": sizes,
                           "phases": phases})
    json.dump({p["pods"]: p["bundle_cpu_ms_per_pod"] for p in phases}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
