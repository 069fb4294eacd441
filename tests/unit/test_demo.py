"""`vllm-headroom demo`: the recorded incident, replayed over real HTTP through the real sidecar."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import httpx

from exporter.replay import demo
from tests.net import free_port

DEMO = [sys.executable, "-m", "exporter", "demo"]


def test_demo_once_json_prints_only_the_json_diagnosis() -> None:
    proc = subprocess.run([*DEMO, "--once", "--json"], capture_output=True, text=True, timeout=120, check=True)
    doc = json.loads(proc.stdout)  # nothing but the document: `| python -m json.tool` works
    engine = doc["targets"][0]["engines"][0]
    assert doc["targets"][0]["target"] == "recording false-full (vLLM 0.32.0)"  # not the replay's random port
    assert engine["verdict"] == "slots_full"
    assert engine["false_full"] is True
    assert engine["panel_usage_ratio"] < 0.8 and engine["requests_waiting"] > 50
    assert engine["admission_headroom_requests"] == 0
    assert (engine["unreachable_pool_ratio"], engine["binding_limit"]) == (1.0, "slots")
    assert engine["effective_usage_ratio"] == engine["unreachable_pool_ratio"]  # the deprecated alias
    assert "slots of max_num_seqs=8 are taken" in engine["explanation"]
    assert engine["config"]["max_num_seqs"] == {"value": 8, "source": "vllm_args"}
    tool = subprocess.run([sys.executable, "-m", "json.tool"], input=proc.stdout, capture_output=True, text=True,
                          check=False)
    assert tool.returncode == 0


def test_demo_once_fits_80_columns_with_legend_basis_and_sparklines() -> None:
    out = subprocess.run([*DEMO, "--once"], capture_output=True, text=True, timeout=120, check=True,
                         env={**os.environ, "COLUMNS": "80", "PYTHONIOENCODING": "utf-8"}).stdout
    lines = out.splitlines()
    too_wide = [ln for ln in lines if len(ln) > 80]
    assert not too_wide, too_wide
    header = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("t  panel"))
    assert lines[header - 3:header] == list(demo.LEGEND)  # three lines define the columns
    assert "  W basis: max_model_len (no finished request yet)" in lines
    assert any(ln.startswith("  W basis: profile") for ln in lines)  # the switch is shown where it happens
    assert any("slots_full   YES" in ln for ln in lines) and any("ok           no" in ln for ln in lines)
    assert "100% slots" in out  # what binds, next to the share a new request cannot get
    sparks = {ln.split("  ")[0]: ln for ln in lines if any(c in ln for c in demo.SPARKS)}
    assert set(sparks) == {"KV usage %", "waiting", "worst-case W", "free blocks", "false_full"}
    assert sparks["waiting"].endswith("0..92") and sparks["false_full"].endswith("0..1")
    assert "verdict: slots_full    false_full: yes" in out
    assert "wait for a slot, not for memory" in out
    assert "recording false-full (vLLM 0.32.0)  model=tiny-llama engine=0" in out
    assert "http://127.0.0.1" not in out  # no random replay port, and --once serves nothing


def test_sparkline_scales_and_fits() -> None:
    assert demo.sparkline([0, 1, 2, 3, 4, 5, 6, 7], 8) == "▁▂▃▄▅▆▇█"
    assert demo.sparkline([5, 5, 5], 10) == "▁▁▁"
    assert len(demo.sparkline(list(range(1000)), 40)) == 40
    lines = demo.sparklines({"a": [float(i) for i in range(500)], "longer name": [1.0, 2.0]}, 80)
    assert all(len(ln) <= 80 for ln in lines) and lines[0].endswith("0..499")


def test_demo_serves_the_page_during_the_replay_and_until_interrupted() -> None:
    port = free_port()
    proc = subprocess.Popen([*DEMO, "--speed", "2", "--web.listen-address", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith(f"Status page: http://127.0.0.1:{port}/"), first  # the URL comes first
        # During the replay (the incident lasts ~11 s at speed 2) the page already answers, mid-incident.
        deadline = time.monotonic() + 30
        seen: set[str] = set()
        while time.monotonic() < deadline and "slots_full" not in seen:
            try:
                history = httpx.get(f"http://127.0.0.1:{port}/api/v1/history", timeout=2).json()
                seen.update(v for e in history["targets"][0]["engines"] for v in e["verdict"])
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        assert "slots_full" in seen, "the page's history never showed the incident during the replay"
        assert proc.poll() is None
        body = httpx.get(f"http://127.0.0.1:{port}/", timeout=2).text
        assert "<h2>recording false-full (vLLM 0.32.0)</h2>" in body and "<svg" in body
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("The sidecar stays up"):
                break
        else:
            raise AssertionError("the replay never finished")
        doc = httpx.get(f"http://127.0.0.1:{port}/api/v1/diagnosis", timeout=2).json()
        assert doc["targets"][0]["engines"][0]["verdict"] == "slots_full"
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
        slots_full = (r'vllm_headroom_verdict\{engine="0",model_name="tiny-llama",target="[^"]+",'
                      r'verdict="slots_full"\} 1\.0')
        assert re.search(slots_full, metrics), metrics
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_demo_checks_its_port_before_the_replay() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([*DEMO, "--web.listen-address", f"127.0.0.1:{port}"], capture_output=True, text=True,
                              timeout=60, check=False)
    assert proc.returncode == 1
    assert proc.stdout == ""  # nothing replayed, no URL promised
    assert proc.stderr == (f"vllm-headroom: port {port} on 127.0.0.1 is already in use (another vllm-headroom?): "
                           "stop it or pick another with --web.listen-address HOST:PORT\n")
