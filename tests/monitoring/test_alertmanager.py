"""A real Alertmanager with the shipped inhibit rules, fed by a real Prometheus evaluating the shipped rules.

vLLM is a small HTTP server holding the recorded real false-full exposition (vLLM 0.32.0), its engine counters
moving so the engine is not judged stuck; our sidecar scrapes it. Fault 1: false-full (a steady state) must
deliver exactly one notification, VLLMKVFalseFull. Fault 2: vLLM stops answering for longer than the start-up limit
(shortened to 10 s): exactly one firing notification, VLLMHeadroomTargetDown (warning). While it fires, an engine
alert of the same pod posted to Alertmanager is inhibited by the shipped inhibit rules, also when it carries a
`cluster` label the sidecar's series lack, and the same alert of another pod, or of a second vLLM in the same pod on
another port (another `vllm_endpoint`), is delivered.
Alertmanager groups by alert and pod (group_wait 1 s); the webhook receiver is a local HTTP server.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from grafana.rules import alertmanager_example
from tests import fixtures
from tests.monitoring.promql import require
from tests.monitoring.test_real_prometheus import NAMESPACE, POD, Stack, _wait, run_stack
from tests.net import free_port

SNAPSHOT = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.32.0" / "false-full" / "snapshot.prom"
FAST = {name: "2s" for name in ("VLLMKVFalseFull", "VLLMKVCacheFull", "VLLMSchedulerStuck", "VLLMMetricsAbsent",
                                "VLLMStartupSlow", "VLLMHeadroomSidecarDown")}
FAST["VLLMHeadroomTargetDown"] = "8s"  # longer than a slow scrape on a loaded machine: only a real outage fires
STARTUP_LIMIT = "10s"  # the grace for a reload, measured from the sidecar's first failed scrape


class FakeVllm:
    """Serves the recorded exposition with moving step counters; `down` makes every request fail."""

    def __init__(self) -> None:
        self.port = free_port()
        self.down = False
        self.started = time.monotonic()
        base = SNAPSHOT.read_text()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if outer.down:
                    self.send_response(503)
                    self.end_headers()
                    return
                if not self.path.startswith(("/metrics", "/v1/models")):
                    self.send_response(404)
                    self.end_headers()
                    return
                if self.path.startswith("/v1/models"):
                    body = json.dumps({"object": "list", "data": [{"id": "tiny-llama", "object": "model",
                                                                   "max_model_len": 512}]}).encode()
                else:
                    ticks = int((time.monotonic() - outer.started) * 100)

                    def bump(m: re.Match[str]) -> str:
                        return f"{m.group(1)} {float(m.group(2)) + ticks}"

                    body = re.sub(r"^((?:vllm:iteration_tokens_total_count|vllm:generation_tokens_total)\{[^}]*\})"
                                  r" ([0-9.e+]+)$", bump, base, flags=re.M).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Webhook:
    """Alertmanager's webhook receiver: keeps every notification body."""

    def __init__(self) -> None:
        self.port = free_port()
        self.received: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                outer.received.append(json.loads(self.rfile.read(n)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def firing(self, alertname: str | None = None) -> list[dict[str, Any]]:
        """Notifications (not alerts) with status firing, of one alert name or all."""
        return [n for n in self.received if n["status"] == "firing"
                and (alertname is None or n["groupLabels"].get("alertname") == alertname)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _alertmanager(tmp: Path, webhook: Webhook) -> Iterator[str]:
    binary = require("prometheus-alertmanager")
    config = alertmanager_example(f"http://127.0.0.1:{webhook.port}/")
    config["route"].update({"group_wait": "1s", "group_interval": "2s", "repeat_interval": "1h"})
    (tmp / "alertmanager.yml").write_text(yaml.safe_dump(config))
    done = subprocess.run([require("amtool"), "check-config", str(tmp / "alertmanager.yml")], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    port = free_port()
    log = (tmp / "alertmanager.log").open("wb")
    proc = subprocess.Popen([binary, f"--config.file={tmp / 'alertmanager.yml'}", f"--storage.path={tmp / 'am'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2)
                break
            except OSError:
                time.sleep(0.3)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _post_alert(am: str, labels: dict[str, str]) -> None:
    body = json.dumps([{"labels": labels, "annotations": {"summary": "posted by the test"}}]).encode()
    req = urllib.request.Request(f"http://{am}/api/v2/alerts", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=5)


def test_one_notification_per_fault(tmp_path: Path) -> None:
    vllm, hook = FakeVllm(), Webhook()
    am_gen = _alertmanager(tmp_path, hook)
    am = next(am_gen)
    sidecar = ["--vllm-args", " ".join(fixtures.vllm_argv("false-full")), "--verdict.false-full-hold", "0s",
               "--no-vllm-cmdline-discovery"]
    try:
        with run_stack(tmp_path, f"http://127.0.0.1:{vllm.port}", sidecar, for_=FAST, alertmanager=am,
                       sidecar_interval=2.0, startup_limit=STARTUP_LIMIT) as stack:
            # Fault 1: false-full.
            _wait("the VLLMKVFalseFull notification", lambda: bool(hook.firing("VLLMKVFalseFull")), stack, 90)
            time.sleep(8)  # four group intervals: a second notification would have come by now
            assert [n["groupLabels"]["alertname"] for n in hook.firing()] == ["VLLMKVFalseFull"], hook.received
            alert = hook.firing("VLLMKVFalseFull")[0]["alerts"][0]
            assert alert["labels"]["pod"] == POD and alert["labels"]["severity"] == "warning"

            # Fault 2: vLLM stops answering.
            vllm.down = True
            _wait("the VLLMHeadroomTargetDown notification", lambda: bool(hook.firing("VLLMHeadroomTargetDown")),
                  stack, 90)
            engine = {"alertname": "VLLMKVCacheFull", "namespace": NAMESPACE, "pod": POD,
                      "vllm_endpoint": f"127.0.0.1:{vllm.port}",
                      "model_name": "tiny-llama", "engine": "0", "severity": "warning"}
            target_down = hook.firing("VLLMHeadroomTargetDown")[0]["alerts"][0]["labels"]
            assert target_down["severity"] == "warning" and "job" not in target_down, target_down
            _post_alert(am, engine)  # same pod: inhibited by VLLMHeadroomTargetDown
            _post_alert(am, {**engine, "cluster": "a"})  # `cluster` on vLLM's series only: inhibited all the same
            _post_alert(am, {**engine, "pod": "other-pod"})  # another pod: delivered
            # A second vLLM of the same pod on another port (another endpoint): delivered, not silenced by this outage.
            _post_alert(am, {**engine, "vllm_endpoint": f"127.0.0.1:{vllm.port + 1}"})

            def delivered() -> list[dict[str, str]]:
                return [a["labels"] for n in hook.firing("VLLMKVCacheFull") for a in n["alerts"]]

            _wait("the other pod's and the other endpoint's notifications",
                  lambda: {(lb["pod"], lb["vllm_endpoint"]) for lb in delivered()} == {
                      ("other-pod", engine["vllm_endpoint"]), (POD, f"127.0.0.1:{vllm.port + 1}")}, stack, 30)
            time.sleep(8)
            names = [n["groupLabels"]["alertname"] for n in hook.firing()]
            assert names.count("VLLMKVFalseFull") == 1 and names.count("VLLMHeadroomTargetDown") == 1, names
            assert sorted((lb["pod"], lb["vllm_endpoint"]) for lb in delivered()) == sorted([
                ("other-pod", engine["vllm_endpoint"]), (POD, f"127.0.0.1:{vllm.port + 1}")]), delivered()
            assert _stored_once(stack)
    finally:
        with pytest.raises(StopIteration):
            next(am_gen)
        vllm.close()
        hook.close()


def _stored_once(stack: Stack) -> bool:
    """Prometheus' own record agrees: each alert fired as one series (no flapping into a second alert)."""
    for name in ("VLLMKVFalseFull", "VLLMHeadroomTargetDown"):
        series = stack.query(f'ALERTS{{alertname="{name}",alertstate="firing"}}[10m]')
        assert len(series) == 1, (name, series)
    return True
