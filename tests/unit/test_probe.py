"""The probe's pure part (ramp, prediction on recorded expositions, steps, ledger) and its refusals, without load.

The probe against a real vLLM is in tests/e2e/test_scenarios_probe.py (three shapes, --max-requests, Ctrl-C).
"""

from __future__ import annotations

import http.server
import io
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from exporter.pipeline.scrape import ModelsInfo
from exporter.pipeline.target import Settings, Target
from exporter.probe import plan as probe_plan
from exporter.probe.load import token_ids
from exporter.probe.plan import Frame, Ledger, PlanRefused, Step, auto_ramp, parse_ramp, predict
from exporter.probe.run import Progress
from tests.net import free_port

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "vllm-0.32.0"


def _report(scenario: str, argv: str) -> probe_plan.TargetReport:
    meta = json.loads((FIXTURES / scenario / "meta.json").read_text())
    target = Target(Settings(url="http://vllm:8000", vllm_args=argv.split(), discover_cmdline=False))
    target.models = ModelsInfo(("tiny-llama",), meta["v1_models"]["data"][0]["max_model_len"])
    target.version = meta["vllm_version"]
    return target.observe(0.0, (FIXTURES / scenario / "snapshot.prom").read_text())


def test_ramps_parse_rise_and_refuse_in_one_sentence() -> None:
    assert parse_ramp("1:5") == (1, 2, 3, 4, 5)
    assert parse_ramp("2:10:4") == (2, 6, 10)
    assert parse_ramp("2,4,8") == (2, 4, 8)
    assert parse_ramp("auto") is None
    for bad in ("0:4", "5:1", "4,2", "a:b", "1:2:0", "1:2:3:4", ""):
        with pytest.raises(ValueError, match=r"ramp|rise"):
            parse_ramp(bad)


def test_the_automatic_ramp_brackets_the_predicted_point() -> None:
    assert auto_ramp(3) == (1, 2, 3, 4, 5)
    wide = auto_ramp(100)
    assert len(wide) <= 26 and {100, 101} <= set(wide) and wide[0] == 1 and max(wide) >= 126
    assert list(wide) == sorted(set(wide))


def test_prediction_is_the_pipelines_for_the_stated_lengths_kv_bound() -> None:
    # kv-full recording: 40 blocks of 32 (39 usable), max_num_seqs 8; 352 + 32 tokens = 12 blocks at the end.
    p = predict(_report("kv-full", "vllm serve m --max-num-seqs 8"), 352, 32)
    e = p.engines[0]
    assert (e.usable_blocks, e.block_size, e.prompt_blocks, e.worst_case_blocks) == (39, 32, 11, 12)
    assert (e.kv_concurrency, e.max_concurrency, e.binding, p.queue_point) == (3, 3, "blocks", 4)
    assert e.max_num_seqs_source == "vllm_args" and e.kv_cache_max_concurrency == 2.5


def test_prediction_slots_bound_and_with_max_num_seqs_unknown() -> None:
    report = _report("false-full", "vllm serve m --max-num-seqs 8")
    p = predict(report, 16, 64)  # 3 blocks each: floor(39 / 3) = 13 > 8 slots
    assert (p.engines[0].kv_concurrency, p.max_concurrency, p.engines[0].binding) == (13, 8, "slots")
    # An idle server without its command line: max_num_seqs unknown, the pool alone (blocks) predicts.
    unknown = predict(_report("idle", "vllm serve m"), 16, 64)
    assert unknown.max_concurrency == 13 and not unknown.slots_known and unknown.engines[0].binding == "blocks"


def test_a_request_vllm_would_refuse_is_refused_before_any_load() -> None:
    report = _report("kv-full", "vllm serve m --max-num-seqs 8")  # max_model_len 512
    with pytest.raises(PlanRefused, match="max_model_len 512"):
        predict(report, 512, 8)
    with pytest.raises(PlanRefused, match="exceed max_model_len"):
        predict(report, 500, 64)


def _step(c: int, *frames: tuple[int, int]) -> Step:
    return Step(c, tuple(Frame(r, w, 10, 0.0, "x") for r, w in frames), True, 0.0)


def test_a_queue_is_requests_waiting_while_fewer_than_the_clients_ever_ran() -> None:
    assert _step(4, (3, 1), (3, 0), (3, 1)).queued
    # A passing wait beside room: the engine ran all 3 in another scrape.
    assert not _step(3, (2, 1), (3, 0), (3, 0)).queued
    # Clients between requests wait nowhere: fewer ran, but nothing waited.
    assert not _step(3, (2, 0), (2, 0)).queued
    assert _step(4, (3, 1), (3, 0)).verdict == "x" and _step(4, (3, 2), (3, 1)).waiting == 2


def test_the_ledger_judges_the_gap_like_the_field_guide() -> None:
    assert Ledger(10, 9).judgement == "normal" and Ledger(10, 8).judgement == "normal"
    assert Ledger(10, 7).judgement == "look_closer" and Ledger(10, 5).judgement == "look_closer"
    assert Ledger(10, 4).judgement == "misconfigured" and Ledger(5, 3).gap == pytest.approx(0.4)
    assert "misconfigured" in Ledger(10, 2).sentence() and "fragmentation" in Ledger(10, 6).sentence()


def test_token_id_prompts_have_the_length_asked_and_distinct_first_blocks() -> None:
    a, b = token_ids(40, 1), token_ids(40, 491)
    assert len(a) == len(b) == 40 and a[:2] != b[:2] and all(10 <= t < 500 for t in a + b)
    assert token_ids(1, 5) == [15]


def test_the_progress_bar_writes_only_to_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    quiet = io.StringIO()
    Progress(quiet).update(0.5, "step 1/2")
    assert quiet.getvalue() == ""
    tty = Tty()
    bar = Progress(tty, width=10)
    bar.update(0.5, "step 1/2")
    bar.close()
    assert "\r" in tty.getvalue() and "[#####.....] step 1/2" in tty.getvalue()


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Not a vLLM: answers GET with `body` (a Prometheus exposition of something else) and records every method."""

    seen: ClassVar[list[str]] = []
    body = b"# HELP go_goroutines Number of goroutines.\n# TYPE go_goroutines gauge\ngo_goroutines 8\n"
    status = 200

    def do_GET(self) -> None:
        self.seen.append(f"GET {self.path}")
        self.send_response(self.status if self.path == "/metrics" else 404)
        self.end_headers()
        if self.path == "/metrics":
            self.wfile.write(self.body)

    def do_POST(self) -> None:
        self.seen.append(f"POST {self.path}")
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def not_vllm() -> Iterator[tuple[str, type[_Recorder]]]:
    handler = type("Handler", (_Recorder,), {"seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()


@pytest.mark.parametrize("status", [200, 404])
def test_a_target_that_is_not_vllm_is_refused_in_one_sentence_and_sent_nothing(
        not_vllm: tuple[str, type[_Recorder]], status: int) -> None:
    url, handler = not_vllm
    handler.status = status
    out = subprocess.run([sys.executable, "-m", "exporter", "probe", url, "--prompt-tokens", "16", "--max-tokens",
                          "8", "--yes"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a vLLM server" in lines[0] and "Traceback" not in out.stderr
    assert out.stdout == ""
    assert handler.seen and not any(s.startswith("POST") for s in handler.seen), handler.seen


def test_the_lengths_are_required_and_a_bad_ramp_is_a_usage_error() -> None:
    for argv, needle in ((["probe", "http://127.0.0.1:9"], "--prompt-tokens and --max-tokens"),
                         (["probe", "http://127.0.0.1:9", "--prompt-tokens", "8", "--max-tokens", "8",
                           "--concurrency", "4,2"], "must rise")):
        out = subprocess.run([sys.executable, "-m", "exporter", *argv], cwd=REPO, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 2 and needle in out.stderr, out.stderr


def test_dry_run_against_a_replayed_recording_prints_the_plan_and_sends_nothing() -> None:
    port = free_port()
    replay = subprocess.Popen([sys.executable, "-m", "exporter", "replay", str(FIXTURES / "kv-full"),
                               "--web.listen-address", f"127.0.0.1:{port}"], cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        out = subprocess.run([sys.executable, "-m", "exporter", "probe", url, "--prompt-tokens", "352",
                              "--max-tokens", "32", "--max-num-seqs", "8", "--json"], cwd=REPO, capture_output=True,
                             text=True, timeout=60)
    finally:
        replay.terminate()
        replay.wait(10)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["dry_run"] and doc["requests_sent"] == 0 and doc["ramp"] == [1, 2, 3, 4, 5]
    assert doc["predicted"]["queue_point"] == 4 and doc["prompt_kind"] == "token_ids"


class _Failing(http.server.BaseHTTPRequestHandler):
    """A recorded vLLM 0.32.0 (idle: its exposition, /v1/models, /version) that starts failing: `mode` "http500"
    answers HTTP 500 to completions after the 10th, "dies" drops every connection after the 10th completion,
    "metrics503" answers /metrics with 503 after its 3rd read. Fault injection only: the load it takes is fake."""

    mode: ClassVar[str] = "http500"
    completions: ClassVar[list[int]] = []
    metric_reads: ClassVar[list[int]] = []
    exposition = (FIXTURES / "idle" / "snapshot.prom").read_bytes()
    meta = json.loads((FIXTURES / "idle" / "meta.json").read_text())

    def _dead(self) -> bool:
        if self.mode == "dies" and len(self.completions) >= 10:
            self.close_connection = True
            return True
        return False

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self._dead():
            return
        if self.path == "/metrics":
            self.metric_reads.append(1)
            if self.mode == "metrics503" and len(self.metric_reads) > 3:
                self._send(503, b"unavailable", "text/plain")
            else:
                self._send(200, self.exposition, "text/plain; version=0.0.4")
        elif self.path == "/v1/models":
            self._send(200, json.dumps(self.meta["v1_models"]).encode())
        elif self.path == "/version":
            self._send(200, json.dumps({"version": self.meta["vllm_version"]}).encode())
        else:
            self._send(404, b"{}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self._dead():
            return
        if self.path != "/v1/completions":
            self._send(404, b"{}")
            return
        self.completions.append(1)
        time.sleep(0.02)
        if self.mode == "http500" and len(self.completions) > 10:
            self._send(500, b'{"error": {"message": "EngineCore died"}}')
        else:
            self._send(200, b'{"choices": [{"text": "x"}]}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("mode", ["http500", "dies", "metrics503"])
def test_a_server_that_keeps_failing_voids_the_probe_and_exits_1(mode: str) -> None:
    handler = type("Handler", (_Failing,), {"mode": mode, "completions": [], "metric_reads": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    server.handle_error = lambda *_: None  # type: ignore[method-assign]  # the probe hangs up on a dying server
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        out = subprocess.run([sys.executable, "-m", "exporter", "probe", url, "--prompt-tokens", "16",
                              "--max-tokens", "100", "--max-num-seqs", "8", "--concurrency", "2:10", "--yes",
                              "--step.scrapes", "2", "--step.interval", "0.05s", "--step.settle", "0.3s"],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "result is void from the step of" in out.stdout and "Traceback" not in out.stderr
    assert "raise --concurrency" not in out.stdout
    error = {"http500": "HTTP 500", "dies": "in a row failed", "metrics503": "/metrics in a row"}[mode]
    assert error in out.stdout and error in out.stderr, out.stdout
    # Stopped within a few failures, not after spending the budget on a failing server.
    assert len(handler.completions) < 60, len(handler.completions)


def test_the_dry_plan_says_when_the_budget_cannot_reach_the_predicted_point() -> None:
    # idle recording, max_num_seqs unknown: 39 usable blocks, 16 + 16 tokens = 1 block each, 39 at once.
    p = predict(_report("idle", "vllm serve m"), 16, 16)
    ramp = auto_ramp(p.max_concurrency)
    to_point = sum(c for c in ramp if c <= 40)

    def plan_text(budget: int) -> str:
        plan = probe_plan.Plan("http://vllm:8000", None, 16, 16, None, max_requests=budget)
        return probe_plan.render_plan(plan, ramp, p, "tiny-llama", "token_ids")

    assert p.queue_point == 40 and to_point < 500 < sum(ramp)
    text = plan_text(300)
    assert f"{to_point} to reach the predicted queue point 40 and {sum(ramp)} for the whole ramp" in text
    assert f"runs out before the predicted queue point unless requests outlast a step: raise --max-requests to " \
           f"at least {to_point}" in text
    assert f"may run out before the top step (51 clients), and before the predicted queue point if requests are " \
           f"shorter than a step: raise --max-requests to {sum(ramp)}" in plan_text(500)
    assert "raise --max-requests" not in plan_text(5000)


def test_a_probe_stopped_by_its_budget_names_max_requests_not_concurrency() -> None:
    p = predict(_report("idle", "vllm serve m"), 16, 16)
    ramp = auto_ramp(p.max_concurrency)
    plan = probe_plan.Plan(url="http://vllm:8000", model=None, prompt_tokens=16, max_tokens=16, ramp=None)
    steps = tuple(_step(c, (c, 0), (c, 0)) for c in ramp[:12])
    o = probe_plan.Outcome(plan, ramp, p, "tiny-llama", "token_ids", steps, sent=500, stopped="max_requests")
    text = probe_plan.render(o)
    assert "raise --max-requests to about" in text and "raise --concurrency" not in text
    assert f"ran out after 12 of {len(ramp)} steps" in text


def test_with_max_num_seqs_unknown_the_ledger_does_not_call_a_gap_misconfigured() -> None:
    p = predict(_report("idle", "vllm serve m"), 16, 64)  # blocks alone: 13 at once, max_num_seqs unknown
    plan = probe_plan.Plan(url="http://vllm:8000", model=None, prompt_tokens=16, max_tokens=64, ramp=(4, 6, 8))
    steps = (_step(4, (4, 0)), _step(6, (5, 1), (5, 1)), _step(8, (5, 3), (5, 3)))
    o = probe_plan.Outcome(plan, (4, 6, 8), p, "tiny-llama", "token_ids", steps, sent=40)
    ledger = o.ledger
    assert ledger is not None and ledger.judgement == "undecided"
    text = probe_plan.render(o)
    assert "max_num_seqs decides it" in text and "misconfigured" not in text and "if it is 5" in text
    assert probe_plan.as_json(o)["ledger"]["gap_ratio"] is None
    # Known max_num_seqs: the gap judges as before.
    assert Ledger(13, 5).judgement == "misconfigured"
