"""`vllm-headroom probe` against the real vLLM 0.32.0 servers the suite already runs (no server of its own).

Three shapes, each a real subprocess of the CLI with --yes: slots-bound (max_num_seqs binds), KV-bound (the pool
binds) and long prompts (a prompt of 125 blocks: two fit in 320). The queue point and the most that ran come from
the engine's own gauges at each step; the prediction from the pipeline before the load. They agree within one
request. Then: the probe stops at --max-requests (the engine counts no more), without --yes it sends nothing (the
engine's token counters stand still), and a real SIGINT stops it, cancels what it sent (no request reaches its
max_tokens) and exits 130.

This file runs after test_scenarios.py (file order), whose first test needs a server nobody has loaded yet.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from .load import engine_state, metric_value
from .test_scenarios import REPORT
from .vllm_server import VllmServer

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
# A step: the engine holds the step's requests, then 6 scrapes 0.25 s apart.
STEP = ["--step.interval", "0.25s", "--step.scrapes", "6", "--step.settle", "20s"]


def probe(url: str, *args: str, timeout: float = 300.0) -> tuple[int, dict[str, Any] | None, str]:
    """Run the CLI's probe as a subprocess; (exit code, its JSON or None, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_HEADROOM_")}
    out = subprocess.run([sys.executable, "-m", "exporter", "probe", url, *args, "--json"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=timeout)
    doc = json.loads(out.stdout) if out.stdout.strip().startswith("{") else None
    return out.returncode, doc, out.stderr


def _wait_idle(url: str, timeout: float = 60.0) -> dict[str, float | None]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = engine_state(httpx.get(url + "/metrics", timeout=5).text)
        if not state["running"] and not state["waiting"]:
            return state
        time.sleep(0.25)
    raise AssertionError(f"{url} did not go idle: {state}")


def _requests_counted(url: str) -> float:
    """Requests the engine has finished for any reason (stop, length, abort, ...)."""
    return metric_value(httpx.get(url + "/metrics", timeout=5).text, "vllm:request_success_total") or 0.0


def _completed(url: str) -> tuple[float, float]:
    """(requests that ran to max_tokens, tokens generated), from the engine's counters. vLLM 0.32.0 counts a request
    its client cancelled in neither `request_success_total` reason (not even "abort")."""
    text = httpx.get(url + "/metrics", timeout=5).text
    return (metric_value(text, "vllm:request_success_total", finished_reason="length") or 0.0,
            metric_value(text, "vllm:generation_tokens_total") or 0.0)


SHAPES = {
    # name: (server fixture, prompt, max_tokens, ramp, the limit the prediction must rest on)
    # 16 + 1000 tokens = 32 blocks at the end; 8 x 32 = 256 <= 320: max_num_seqs (8) binds, not the pool.
    "slots-bound": ("vllm_hol", 16, 1000, "6:10", "slots"),
    # 321 + 63 tokens: 383 tokens of KV = 12 blocks at the end, 11 at admission; floor(39 / 12) = floor(39 / 11) = 3
    # < 8 slots: the pool binds. 63 output tokens keep each request in the engine long enough that the clients'
    # turnaround (the API server, loaded cores) does not empty the queue between two scrapes.
    "kv-bound": ("vllm_main", 321, 63, "1:6", "blocks"),
    # 4000 tokens = 125 blocks, 126 with the output; floor(320 / 126) = 2: a third prompt cannot be admitted.
    "long-prompts": ("vllm_hol", 4000, 16, "1:4", "blocks"),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_probe_finds_the_queue_where_the_pipeline_predicts_it(shape: str, request: pytest.FixtureRequest) -> None:
    fixture, prompt, max_tokens, ramp, binding = SHAPES[shape]
    server: VllmServer = request.getfixturevalue(fixture)
    _wait_idle(server.url)
    started = time.monotonic()
    code, doc, err = probe(server.url, "--prompt-tokens", str(prompt), "--max-tokens", str(max_tokens),
                           "--concurrency", ramp, "--max-requests", "2000", "--yes", *STEP)
    seconds = time.monotonic() - started
    assert code == 0, err
    assert doc is not None and doc["stopped"] is None and doc["prompt_kind"] == "token_ids"
    predicted, observed = doc["predicted"], doc["observed"]
    engine = predicted["engines"][0]
    # max_num_seqs read from vLLM's own command line (/proc), not assumed.
    assert engine["max_num_seqs"] == server.max_num_seqs and engine["max_num_seqs_source"] == "cmdline"
    assert engine["binding"] == binding
    assert observed["queue_point"] is not None, doc["steps"]
    assert abs(observed["queue_point"] - predicted["queue_point"]) <= 1, doc["steps"]
    assert abs(observed["max_concurrency"] - predicted["max_concurrency"]) <= 1, doc["steps"]
    queued = next(s for s in doc["steps"] if s["queued"])
    # The verdict is the pipeline's (the probe judges nothing itself): the slot cap, and a pool that cannot hold
    # another prompt. Long prompts are not asserted: each prefill fills whole steps of the token budget, which
    # the pipeline weighs too.
    # A step's verdict is the pipeline's most frequent while requests waited; with short requests in a closed loop a
    # wait at the queue point can be one in transit (the pool had room at that scrape, and the pipeline says so), so
    # the binding verdict must show at a queued step, and no queued step may name the other limit.
    if shape in ("slots-bound", "kv-bound"):
        want, other = {"slots-bound": ("slots_full", "kv_full"), "kv-bound": ("kv_full", "slots_full")}[shape]
        verdicts = [s["verdict"] for s in doc["steps"] if s["queued"]]
        assert want in verdicts and other not in verdicts, doc["steps"]
    assert queued["concurrency"] == observed["queue_point"]
    assert doc["ledger"] is not None and doc["ledger"]["judgement"] == "normal"
    # The probe left nothing running: every request it sent has ended.
    _wait_idle(server.url, 30)
    with REPORT.open("a") as f:
        f.write(json.dumps({"scenario": f"probe {shape}", "engine": {
            "queue_point": observed["queue_point"], "max_running": observed["max_concurrency"],
            "steps": [(s["concurrency"], s["running"], s["waiting"], s["queued"], s["verdict"])
                      for s in doc["steps"]]},
            "ours": {"queue_point": predicted["queue_point"], "max_concurrency": predicted["max_concurrency"],
                     "requests_sent": doc["requests_sent"], "seconds": round(seconds, 1)}}) + "\n")


def test_probe_never_sends_more_than_max_requests(vllm_main: VllmServer) -> None:
    _wait_idle(vllm_main.url)
    before = _requests_counted(vllm_main.url)
    code, doc, err = probe(vllm_main.url, "--prompt-tokens", "16", "--max-tokens", "64", "--concurrency", "1:8",
                           "--max-requests", "7", "--yes", *STEP)
    assert code == 0, err
    assert doc is not None and doc["stopped"] == "max_requests" and doc["requests_sent"] == 7
    _wait_idle(vllm_main.url, 30)
    time.sleep(0.5)  # the last finished request's counter lands with the next engine step's stats
    assert _requests_counted(vllm_main.url) - before <= 7


def test_without_yes_the_probe_prints_the_plan_and_the_engine_sees_no_request(vllm_main: VllmServer) -> None:
    _wait_idle(vllm_main.url)
    text = httpx.get(vllm_main.url + "/metrics", timeout=5).text
    before = [metric_value(text, n) or 0.0 for n in ("vllm:prompt_tokens_total", "vllm:request_success_total")]
    code, doc, err = probe(vllm_main.url, "--prompt-tokens", "352", "--max-tokens", "32", "--concurrency", "1:5",
                           *STEP)
    assert code == 0, err
    assert doc is not None and doc["dry_run"] and doc["requests_sent"] == 0 and doc["ramp"] == [1, 2, 3, 4, 5]
    assert doc["predicted"]["queue_point"] is not None
    time.sleep(1.0)
    text = httpx.get(vllm_main.url + "/metrics", timeout=5).text
    after = [metric_value(text, n) or 0.0 for n in ("vllm:prompt_tokens_total", "vllm:request_success_total")]
    assert after == before


def test_ctrl_c_stops_the_probe_and_cancels_what_it_sent(vllm_hol: VllmServer) -> None:
    url = vllm_hol.url
    _wait_idle(url)
    length_before, tokens_before = _completed(url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_HEADROOM_")}
    # Long requests (16 + 6000 tokens): they are still running when the signal comes.
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "probe", url, "--prompt-tokens", "16",
                             "--max-tokens", "6000", "--concurrency", "4:8", "--yes", *STEP], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        running = 0.0
        while time.monotonic() < deadline and running < 4:
            running = engine_state(httpx.get(url + "/metrics", timeout=5).text)["running"] or 0.0
            time.sleep(0.2)
        assert running >= 4, "the probe's requests never ran"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in out and "Traceback" not in err
    # Cancelled, not left to run: the engine is idle while none of the requests reached its 6000 tokens.
    _wait_idle(url, 30)
    time.sleep(0.5)
    length_after, tokens_after = _completed(url)
    assert length_after == length_before
    assert tokens_after - tokens_before < running * 6000
