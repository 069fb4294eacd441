"""`vllm-headroom demo`: the recorded incident, replayed over real HTTP through the real sidecar."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx

from tests.net import free_port


def test_demo_once_prints_a_slots_full_false_full_verdict() -> None:
    out = subprocess.run([sys.executable, "-m", "exporter", "demo", "--once", "--json"], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    doc = json.loads(out[out.index("\n{") + 1:])
    engine = doc["targets"][0]["engines"][0]
    assert engine["verdict"] == "slots_full"
    assert engine["false_full"] is True
    assert engine["panel_usage_ratio"] < 0.8 and engine["requests_waiting"] > 50
    assert engine["admission_headroom_requests"] == 0
    assert "slots of max_num_seqs=8 are taken" in engine["explanation"]
    assert engine["config"]["max_num_seqs"] == {"value": 8, "source": "vllm_args"}
    # The live table was printed too, with the flag rising during the replay.
    assert "slots_full    YES" in out and "ok            no" in out


def test_demo_text_mode_explains() -> None:
    out = subprocess.run([sys.executable, "-m", "exporter", "demo", "--once"], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert "verdict: slots_full    false_full: yes" in out
    assert "wait for a slot, not for memory" in out


def test_demo_leaves_the_sidecar_up_until_interrupted() -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "demo", "--speed", "50", "--web.listen-address",
                             f"127.0.0.1:{port}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        doc = None
        while time.monotonic() < deadline:
            try:
                doc = httpx.get(f"http://127.0.0.1:{port}/api/v1/diagnosis", timeout=2).json()
                break
            except httpx.HTTPError:
                time.sleep(0.3)
        assert doc is not None, "the demo's sidecar never served /api/v1/diagnosis"
        assert doc["targets"][0]["engines"][0]["verdict"] == "slots_full"
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
        assert 'vllm_headroom_verdict{engine="0",model_name="tiny-llama",verdict="slots_full"} 1.0' in metrics
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
