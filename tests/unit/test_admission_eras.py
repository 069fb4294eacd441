"""Issue 23 item 2: admission headroom per rule era (<= 0.18, 0.19-0.32, 0.33), tested on expositions recorded here.

Recorded on this machine from the real vLLM 0.32.0 CPU build with the flags in question
(tests/e2e/record_admission.py, tests/fixtures/admission-0.32.0/): `--watermark 0.25` under the kv-full load and
`--max-num-active-seqs 3` under the false-full load. The rest are recordings rewritten to a flag or a /version
(each test says which): 0.33.0 has no CPU build, so its era is the 0.32.0 exposition with /version "0.33.0" (its
metrics file is 0.32.0's, byte for byte); the prefill cadence needs 0.33 (or data-parallel coordination) and cannot
be recorded here; reserved blocks belong to async KV loads (a P/D pair, not runnable here); a drafter's lookahead
needs a drafter checkpoint of the tiny model, so it is a rewritten command line too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.engines.base import FIRST_CHUNK, FULL_PROMPT
from exporter.engines.vllm.releases import admission_rule_of, parse_release
from exporter.expose import diagnosis
from exporter.pipeline import derive
from exporter.pipeline.scrape import parse_version
from exporter.pipeline.target import EngineReport, Settings, Target
from exporter.pipeline.verdict import Thresholds, Verdict
from exporter.planning import advice
from exporter.replay import recording
from tests import rewrite
from tests.fixtures import as_recorded

FIXTURES = Path(__file__).parent.parent / "fixtures"
ADMISSION = FIXTURES / "admission-0.32.0"


def rec(path: Path) -> recording.Recording:
    return recording.load(path)


def argv(r: recording.Recording, **flags: str | None) -> list[str]:
    return rewrite.flags(r.meta["server_argv"], **flags)


def replay(r: recording.Recording, args: list[str], version: str | None = None) -> list[EngineReport]:
    target = as_recorded(Target(Settings("recorded", vllm_args=args, discover_cmdline=False,
                                         thresholds=Thresholds(false_full_hold=2.0))), r.meta)
    if version is not None:
        target.version = parse_version(json.dumps({"version": version}))
    return [e for t, text in r.frames for e in target.observe(t, text).engines]


def engine_truth(text: str) -> tuple[int, int]:
    return (int(rewrite.sample(text, "vllm:num_requests_running", engine="0")),
            int(rewrite.sample(text, "vllm:num_requests_waiting", engine="0")))


# -- the watermark (0.24+): vllm/v1/core/kv_cache_manager.py:209-210, 518-525, 546-547, 584-586 @0.33.0 ------------
def test_the_watermark_keeps_blocks_free_as_the_recorded_engine_did() -> None:
    """Recorded: 40 blocks, --watermark 0.25 (10 blocks), prompts of 352 tokens (11 blocks) growing to 12. vLLM ran
    2 requests at most (24 of 39 blocks used, 15 free) with 28 waiting; without the flag it ran 3 (kv-full).
    With the flag read, the head's admission needs 11 + 10 > 15: admission headroom 0, memory binds; read without
    it, 15 free blocks would admit one more, which the engine never did."""
    r = rec(ADMISSION / "watermark")
    frames = [(t, text, *engine_truth(text)) for t, text in r.frames]
    assert max(run for _t, _x, run, _w in frames) == 2, "the engine never ran a third request"
    with_flag = replay(r, argv(r))
    without = replay(r, argv(r, watermark=None))
    held = [i for i, (_t, _x, run, wait) in enumerate(frames) if run == 2 and wait > 0]
    assert len(held) >= 20
    for i in held:
        e = with_flag[i]
        assert e.headroom.admission is not None and e.headroom.admission.watermark_blocks == 10
        assert e.headroom.admission_headroom_requests == 0
        assert e.verdict is Verdict.KV_FULL and not e.false_full
        assert without[i].headroom.admission_headroom_requests >= 1  # the model without the flag is wrong here
    assert any("watermark 0.25" in n for n in with_flag[held[0]].admission_notes)


def test_the_watermark_is_not_applied_before_024() -> None:
    """The same recording with /version rewritten to 0.22.1 (no watermark in its allocate_slots)."""
    r = rec(ADMISSION / "watermark")
    [e, *_] = [x for x in replay(r, argv(r), version="0.22.1") if x.waiting > 0]
    assert e.headroom.admission is not None and e.headroom.admission.watermark_blocks == 0
    assert any("no flag of this release (>= 0.24)" in n for n in e.admission_notes)


def test_the_first_admission_into_an_idle_engine_needs_no_watermark() -> None:
    """`has_scheduled_reqs=bool(self.running)` (vllm/v1/core/sched/scheduler.py:1452 @0.33.0): with nothing
    running the head needs only its own blocks."""
    assert derive.kv_admission_headroom(12, 11, watermark=10, running=0) == 1
    assert derive.kv_admission_headroom(12, 11, watermark=10, running=1) == 0
    assert derive.kv_admission_headroom(39, 11, watermark=10, running=0) == 2  # then 28 >= 11 + 10


# -- max_num_active_seqs (0.32+): vllm/v1/core/sched/scheduler.py:134-138, 1071-1074 @0.33.0 ------------------------
def test_max_num_active_seqs_caps_admission_as_the_recorded_engine_did() -> None:
    """Recorded: --max-num-seqs 8 --max-num-active-seqs 3 under 100 closed-loop clients: vLLM ran 3 at most, with
    low usage. With the flag read: slot headroom 0 under a cap of 3, slots bind, false-full; read without it, 5
    free slots would admit requests the engine held back."""
    r = rec(ADMISSION / "active-seqs")
    frames = [engine_truth(text) for _t, text in r.frames]
    assert max(run for run, _w in frames) == 3
    with_flag = replay(r, argv(r))
    without = replay(r, argv(r, max_num_active_seqs=None))
    held = [i for i, (run, wait) in enumerate(frames) if run == 3 and wait > 0]
    assert len(held) >= 20
    for i in held:
        e = with_flag[i]
        assert e.max_num_seqs == 3 and e.headroom.slot_headroom_requests == 0
        assert e.headroom.admission_headroom_requests == 0
        assert e.verdict is Verdict.SLOTS_FULL
        assert without[i].headroom.slot_headroom_requests == 5
    assert any(e.false_full for e in with_flag)
    e = with_flag[held[0]]
    assert any("max_num_active_seqs 3" in n for n in e.admission_notes)
    # The explanation and the advice name the flag that binds: raising max_num_seqs would not admit more.
    assert e.cap_setting == "max_num_active_seqs"
    assert "slots of max_num_active_seqs=3" in diagnosis.explain(e)
    slot_advice = [a for i in held if (a := advice.max_num_seqs(with_flag[i], advisable=True)) is not None
                   and a.setting in ("max_num_seqs", "max_num_active_seqs")]
    assert slot_advice and all((a.setting, a.current, a.current_source) == ("max_num_active_seqs", 3, "vllm_args")
                               for a in slot_advice)


def test_max_num_active_seqs_is_not_applied_before_032() -> None:
    """The same recording with /version 0.30.0, which has no such flag."""
    r = rec(ADMISSION / "active-seqs")
    [e, *_] = [x for x in replay(r, argv(r), version="0.30.0") if x.waiting > 0 and x.running == 3]
    assert e.max_num_seqs == 8 and e.headroom.slot_headroom_requests == 5
    assert any("no flag of this release (>= 0.32)" in n for n in e.admission_notes)


# -- lookahead (every V1 release's per-step gate): vllm/v1/core/kv_cache_manager.py:550-553, 584-588 @0.33.0 ------
@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_the_drafters_lookahead_enters_the_per_step_gate(version: str) -> None:
    """The recorded kv-full frames (0.32.0) with --speculative-config eagle3, 3 tokens, on the command line
    (rewritten: no drafter of the tiny model exists): the head needs ceil((P + 3) / 32) blocks where that crosses a
    block boundary, never fewer than the full-prompt gate's ceil(P / 32)."""
    r = rec(FIXTURES / "vllm-0.32.0" / "kv-full")
    spec = '{"method": "eagle3", "model": "m", "num_speculative_tokens": 3}'
    plain = replay(r, argv(r), version)
    spec_reports = replay(r, argv(r, speculative_config=spec), version)
    for a, b in zip(plain, spec_reports, strict=True):
        assert b.headroom.admission is not None and b.headroom.admission.lookahead_tokens == 3
        assert a.headroom.admission is not None and a.headroom.admission.lookahead_tokens == 0
        full = b.headroom.admission.full_prompt_blocks
        assert full is not None and b.headroom.prompt_blocks == max(full, b.headroom.admission.step_blocks)
        assert b.headroom.prompt_blocks >= a.headroom.prompt_blocks
    assert any(b.headroom.prompt_blocks > a.headroom.prompt_blocks for a, b in zip(plain, spec_reports, strict=True))


# -- the prefill cadence: 0.33 on every engine (vllm/v1/core/sched/scheduler.py:395-421, 770-790, 1612-1628
# @0.33.0), 0.32 only under data-parallel coordination (vllm/v1/engine/core.py:2318-2325 @0.32.0) ----------------
@pytest.mark.parametrize(("version", "extra", "applies"), [("0.33.0", {}, True), ("0.32.0", {}, False),
                                                           ("0.32.0", {"data_parallel_size": "2"}, True)])
def test_the_prefill_cadence_is_said_where_the_release_applies_it(version: str, extra: dict[str, str],
                                                                  applies: bool) -> None:
    """The recorded false-full frames with --prefill-schedule-interval 4 (rewritten; the hold cannot be recorded
    on 0.32.0 without data parallelism, and 0.33 has no CPU build)."""
    r = rec(FIXTURES / "vllm-0.32.0" / "false-full")
    [e, *_] = [x for x in replay(r, argv(r, prefill_schedule_interval="4", **extra), version) if x.waiting > 0]
    [note] = [n for n in e.admission_notes if "prefill_schedule_interval 4" in n]
    assert ("never holds a standing one" in note) is applies
    assert ("no effect here" in note) is not applies


# -- reserved blocks of async KV loads: vllm/v1/core/sched/scheduler.py:1420-1430, kv_cache_manager.py:582-588 ----
def test_an_async_load_head_is_admitted_against_free_minus_reserved() -> None:
    """On the recorded head-of-line frame's free blocks: a remote-KV head of 64 blocks passes the per-step gate
    only while the blocks other in-flight loads still need leave it room; a local head ignores them (0)."""
    r = rec(FIXTURES / "vllm-0.32.0" / "head-of-line")
    [e, *_] = [x for x in replay(r, argv(r)) if x.waiting > 0 and x.running > 0]
    free = e.headroom.kv_free_blocks
    assert free > 64
    local = derive.admission_need(64 * 32, 32)
    assert local.reserved_blocks == 0 and local.admits(free, e.running)
    remote = derive.admission_need(64 * 32, 32, reserved_blocks=free - 63)
    assert not remote.admits(free, e.running) and remote.blocks == free + 1
    assert derive.admission_need(64 * 32, 32, reserved_blocks=free - 64).admits(free, e.running)


def test_a_consumer_says_its_loads_hold_blocks_while_waiting() -> None:
    r = rec(FIXTURES / "vllm-0.32.0" / "false-full")
    cfg = '{"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}'
    [e, *_] = replay(r, argv(r, kv_transfer_config=cfg))
    assert any("holds its blocks while counted as waiting" in n for n in e.admission_notes)


# -- the gates by era: vllm/v1/core/sched/scheduler.py @0.18.0/@0.32.0/@0.33.0 ---------------------------------------
def test_each_era_has_its_gates() -> None:
    old, mid, new = (admission_rule_of(parse_release(v), "V1", FULL_PROMPT) for v in ("0.18.0", "0.32.0", "0.33.0"))
    assert (old.gate, old.watermark, old.active_cap, old.local_cadence) == (FIRST_CHUNK, False, False, False)
    assert (mid.gate, mid.watermark, mid.active_cap, mid.local_cadence) == (FULL_PROMPT, True, True, False)
    assert (new.gate, new.watermark, new.active_cap, new.local_cadence) == (FULL_PROMPT, True, True, True)
    assert (mid.skips_unschedulable_head, new.skips_unschedulable_head) == (False, True)
    assert admission_rule_of(parse_release("0.19.1"), "V1", FULL_PROMPT).watermark is False


def test_0_18_admits_on_the_first_chunk_and_0_19_on_the_whole_prompt() -> None:
    """The recorded head-of-line runs of 0.18.0 and 0.19.1: the 8,160-token head needs 64 blocks (its first chunk
    of the 2,048-token budget) on 0.18.0, all 255 on 0.19.1."""
    for version, blocks in (("0.18.0", 64), ("0.19.1", 255)):
        r = rec(FIXTURES / f"vllm-{version}" / "head-of-line")
        need = derive.admission_need(8160, 32, admission_rule_of(parse_release(version), "V1", FULL_PROMPT).gate, 2048)
        assert need.blocks == blocks
        assert r.meta["vllm_version"].startswith(version)


def test_no_scheduler_reserve_full_isl_turns_the_full_prompt_gate_off() -> None:
    r = rec(FIXTURES / "vllm-0.32.0" / "kv-full")
    [e, *_] = replay(r, [*argv(r), "--no-scheduler-reserve-full-isl"])
    assert e.headroom.admission is not None and e.headroom.admission.gate == FIRST_CHUNK
    assert any("only the step's chunk must fit" in n for n in e.admission_notes)
