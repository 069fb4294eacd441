"""What a fresh reviewer found trying issue 19's rule ("every answer claims only what its evidence shows") on
recorded real expositions, each fixed at its root and tested from the recording it was found on.
"""

from __future__ import annotations

from exporter.expose import diagnosis
from exporter.pipeline.catalogue import Limit, Verdict
from exporter.pipeline.report import EngineReport
from exporter.pipeline.target import Settings, Target, one_shot
from exporter.replay import recording
from tests import fixtures, rewrite

PROD_SLOTS = fixtures.ROOT / "prod-slots"  # vLLM 0.32.0, --max-num-seqs 256


def _diagnose(folder: object, i: int, argv: list[str] | None) -> EngineReport:
    rec = recording.load(folder)  # type: ignore[arg-type]
    t, text = rec.frames[i]
    target = fixtures.as_recorded(one_shot(Settings("recorded", vllm_args=argv, discover_cmdline=False)), rec.meta)
    [engine] = target.observe(t, text, gauges_only=True).engines
    return engine


def test_a_stated_cap_below_the_running_count_is_refuted_not_advised_on() -> None:
    # prod-slots frame 10: 255 run (the server's cap is 256), 62 wait. Stated `--max-num-seqs 64`, the answer was
    # slots_full, "all 64 slots of max_num_seqs=64 are taken", false_full yes, and "raise max_num_seqs from 64 to
    # 128" beside "the stated value is wrong": following it would halve the real cap.
    e = _diagnose(PROD_SLOTS, 10, ["vllm", "serve", "tiny-llama", "--max-num-seqs", "64"])
    assert e.running == 255
    assert e.max_num_seqs_refuted is not None and e.max_num_seqs_refuted.value == 64
    assert e.config.max_num_seqs is None  # judged with the cap unknown
    assert not any(a.setting == "max_num_seqs" and a.direction in ("raise", "lower") for a in e.advice)
    text = diagnosis.explain(e)
    assert "64 slots" not in text and "max_num_seqs=64" not in text
    assert any("more than the max_num_seqs 64 you stated" in line for line in diagnosis.actions(e))
    # A stated cap the running count does not exceed stands.
    right = _diagnose(PROD_SLOTS, 10, ["vllm", "serve", "tiny-llama", "--max-num-seqs", "256"])
    assert right.max_num_seqs_refuted is None and right.config.max_num_seqs is not None
    assert right.verdict is Verdict.SLOTS_FULL


def test_a_second_scrape_of_the_same_exposition_reads_no_head_as_one_that_stood() -> None:
    # prod-slots replayed without flags: frame 28 shows 254 running, 1 waiting, 18,050 blocks free (transient). The
    # same exposition scraped again 0.5 s later (a replay, or a server whose stats did not move: no engine step) was
    # read as a second look at a head that stood, "none was admitted ... the head is larger than typical":
    # head_of_line. No step examined it.
    rec = recording.load(PROD_SLOTS)
    target = fixtures.as_recorded(Target(Settings("recorded", vllm_args=None, discover_cmdline=False)), rec.meta)
    for t, text in rec.frames[:29]:
        [first] = target.observe(t, text).engines
    assert (first.running, first.waiting) == (254, 1) and first.verdict is Verdict.TRANSIENT
    t, text = rec.frames[28]
    [again] = target.observe(t + 0.5, text).engines
    assert again.verdict is Verdict.TRANSIENT


OLD_IDLE = fixtures.ROOT.parent / "vllm-0.10.2" / "idle"


def _stalled(args: list[str]) -> list[EngineReport]:
    """vLLM 0.10.2's idle recording with 3 requests waiting and every counter flat, 130 s long: an engine that makes
    no step. 0.10.2 exports no sleep state (no vllm:engine_sleep_state)."""
    rec = recording.load(OLD_IDLE)
    last = rewrite.set_sample(rec.frames[-1][1], "vllm:num_requests_waiting", 3)
    assert "engine_sleep_state" not in last
    frames = [(t, rewrite.set_sample(text, "vllm:num_requests_waiting", 3)) for t, text in rec.frames]
    t = frames[-1][0]
    while t + 5.0 <= 130.0:
        t += 5.0
        frames.append((t, last))
    target = fixtures.as_recorded(Target(Settings("recorded", vllm_args=args, discover_cmdline=False)), rec.meta)
    return [e for t, text in frames for e in target.observe(t, text).engines]


def test_a_stall_sleep_may_explain_is_never_called_stuck_nor_a_restart() -> None:
    # A fresh reviewer: with --enable-sleep-mode on a release without a sleep state, the answer became `stuck`,
    # "Nothing else explains it: ... the engine is awake", "restart the pod if the engine is hung" (and the stuck
    # page), although an engine put to sleep looks the same.
    rec = recording.load(OLD_IDLE)
    with_sleep = _stalled([*(str(a) for a in rec.meta["server_argv"]), "--enable-sleep-mode"])
    late = with_sleep[-3:]
    assert all(e.verdict is Verdict.UNDECIDED and e.asleep_or_stuck for e in late)
    assert all("GET /is_sleeping" in diagnosis.explain(e) and "awake" not in diagnosis.explain(e) for e in late)
    assert not any("restart" in a for e in late for a in diagnosis.actions(e))
    # The whole command line without --enable-sleep-mode: vLLM's default is off, the engine cannot be asleep.
    without = _stalled([str(a) for a in rec.meta["server_argv"]])
    assert without[-1].verdict is Verdict.STUCK and not without[-1].asleep_or_stuck
    # A bare list of flags says nothing of sleep mode: undecided as well.
    bare = _stalled(["--max-num-seqs", "8"])
    assert bare[-1].verdict is Verdict.UNDECIDED and bare[-1].asleep_or_stuck


def test_one_observation_does_not_call_a_queue_the_free_blocks_hold_only_in_part_transient() -> None:
    # vllm-0.32.0/head-of-line frame 12, diagnosed with its command line: 1 running request holds 66 blocks (no
    # request has finished, so that is the only size there is), 160 blocks are free, 7 wait. The answer was
    # `transient`, binding none, no cases: "the next step can admit 2, so ... the moment between two engine steps";
    # the real head is 8,160 tokens (255 blocks).
    folder = fixtures.ROOT / "head-of-line"
    meta = recording.load(folder).meta
    e = _diagnose(folder, 12, [str(a) for a in meta["server_argv"]])
    assert (e.running, e.waiting, e.headroom.kv_free_blocks) == (1, 7, 160)
    assert e.verdict is Verdict.UNDECIDED
    assert {(c.input, c.limit) for c in e.decided_by} == {("request_tokens", Limit.BLOCKS),
                                                          ("request_tokens", Limit.NONE)}
    assert "moment between two engine steps" not in diagnosis.explain(e)


def test_with_nothing_running_no_case_says_the_cap_is_zero() -> None:
    # prod-slots frame 0 (idle, nothing has run), rewritten to one waiting request, diagnosed without flags: the
    # answer's cases began "if max_num_seqs is 0 (the running count: vLLM never runs more than its cap), the slots
    # bind". vLLM's cap is at least 1, so nothing running means no cap binds.
    rec = recording.load(PROD_SLOTS)
    t, text = rec.frames[0]
    text = rewrite.set_sample(text, "vllm:num_requests_waiting", 1)
    target = fixtures.as_recorded(one_shot(Settings("recorded", vllm_args=None, discover_cmdline=False)), rec.meta)
    [e] = target.observe(t, text, gauges_only=True).engines
    assert (e.running, e.waiting) == (0, 1)
    assert not [c for c in e.decided_by if c.input == "max_num_seqs" and c.value == 0]
    assert "max_num_seqs is 0" not in diagnosis.explain(e)


def test_advice_is_never_sized_by_a_quantile_in_the_open_ended_bucket() -> None:
    # 0.32.0 prod-preempt frame 40, with its command line: of 1,918 finished prompts 41 are longer than 20,000
    # tokens, vLLM's last finite bucket bound, so the p99 lies between 20,000 and max_model_len's 32,768. The
    # answer advised "add kv_capacity: 242144 blocks (+1211 %)" and, on prod-sleep's frames, "lower max_num_seqs
    # from 256 to 13-15": sized by the top of that range, a bound no request was seen to reach.
    folder = fixtures.ROOT / "prod-preempt"
    meta = recording.load(folder).meta
    e = _diagnose(folder, 40, [str(a) for a in meta["server_argv"]])
    assert e.prompt is not None and e.prompt.open_ended and e.prompt.lower == 20000
    assert not [a for a in e.advice if a.direction in ("raise", "lower", "add")], [a.text() for a in e.advice]
    # The worst case stays a risk, said with its basis.
    assert e.headroom.worst_case_blocks_profile == 1024


# -- a second fresh reviewer, on the fixes above ---------------------------------------------------------------------
def test_one_observation_of_a_full_pool_is_kv_bound_whatever_the_guessed_head() -> None:
    # 0.32.0 prod-preempt frame 52 with only --max-num-seqs 256 (no max_model_len, so the profile's open-ended p99
    # sizes nothing and the head is taken at what requests in flight hold, 93 blocks): 77 of 20,000 blocks free,
    # 216 running, 40 waiting. The answer was `transient`, "the moment between two engine steps".
    t, text = recording.load(fixtures.ROOT / "prod-preempt").frames[52]
    # As `diagnose FILE` reads it: no /v1/models beside the file, so max_model_len is not known.
    target = one_shot(Settings("recorded", vllm_args=["--max-num-seqs", "256"], discover_cmdline=False))
    [e] = target.observe(t, text, gauges_only=True).engines
    assert e.config.max_model_len is None
    assert (e.running, e.waiting, e.headroom.kv_free_blocks) == (216, 40, 77)
    assert e.verdict is Verdict.KV_FULL and not e.false_full


def test_a_wrong_active_cap_is_refuted_alone() -> None:
    # prod-slots frame 13 (256 running) with the recorded --max-num-seqs 256 and a wrong --max-num-active-seqs 64:
    # the answer threw the right max_num_seqs away ("max_num_seqs, which nobody stated").
    meta = recording.load(PROD_SLOTS).meta
    e = _diagnose(PROD_SLOTS, 13, [*(str(a) for a in meta["server_argv"]), "--max-num-active-seqs", "64"])
    assert e.running == 256 and e.config.max_num_seqs is not None and e.config.max_num_seqs.value == 256
    assert e.max_num_seqs_refuted is not None and e.max_num_seqs_refuted.value == 64
    assert e.verdict is Verdict.SLOTS_FULL
    assert any(a.startswith("check max_num_active_seqs: 256 run") for a in diagnosis.actions(e))


def test_a_stalled_engine_with_nothing_running_beside_room_for_any_head_is_no_head_of_line() -> None:
    # 0.32.0's idle recording, 64 requests waiting, nothing running, 39 of 39 blocks free, every counter flat: the
    # sidecar read the second scrape as a head that stood ("larger than typical", advice "lower max_model_len")
    # until stuck-after, although max_model_len's 16 blocks fit the free ones.
    rec = recording.load(fixtures.ROOT / "idle")
    last = rewrite.set_sample(rec.frames[-1][1], "vllm:num_requests_waiting", 64)
    target = fixtures.as_recorded(Target(Settings("recorded", vllm_args=[str(a) for a in rec.meta["server_argv"]],
                                                  discover_cmdline=False)), rec.meta)
    seen = [e for i in range(8) for e in target.observe(100.0 + 5 * i, last).engines]
    assert seen[0].headroom.worst_case_blocks_max_model_len <= seen[0].headroom.kv_free_blocks
    assert not [e for e in seen if e.verdict is Verdict.HEAD_OF_LINE]


def test_a_command_line_with_a_config_file_says_nothing_of_sleep_mode() -> None:
    from exporter.pipeline.config import parse_vllm_args

    assert parse_vllm_args(["vllm", "serve", "m", "--max-num-seqs", "8"])["enable_sleep_mode"] is False
    assert "enable_sleep_mode" not in parse_vllm_args(["vllm", "serve", "m", "--config", "/etc/vllm/config.yaml"])
    assert "enable_sleep_mode" not in parse_vllm_args(["vllm", "serve", "m", "--config=/etc/vllm/config.yaml"])


def test_an_unknown_role_asks_for_it_and_says_a_leak_only_once_it_may_be_one() -> None:
    from tests.unit.test_pd_disaggregation import producer_frames

    r, frames = producer_frames()
    target = fixtures.as_recorded(Target(Settings("recorded", vllm_args=None, discover_cmdline=False)), r.meta)
    seen = [(t, e) for t, text in frames for e in target.observe(t, text).engines]
    start = frames[0][0]
    early = [e for t, e in seen if t - start < 115.0]
    assert early and all(e.verdict is Verdict.OK and "past --verdict.leak-after" in diagnosis.explain(e)
                         for e in early)
    late = [e for t, e in seen if t - start > 125.0]
    assert late and all(any("--kv-transfer-config" in a for a in diagnosis.actions(e)) for e in late)
    assert not any("if it is 0" in a for e in late for a in diagnosis.actions(e))


def test_a_prefix_hit_share_from_repeated_lookups_does_not_shrink_the_head() -> None:
    # 0.10.2 head-of-line frame 12 with its command line: vLLM 0.10.2 counts a prefix-cache lookup on every try of
    # a waiting request, so 9.75M hits of 13.03M lookups stand beside 2,112 prompt tokens computed. Their 75 % cut
    # the in-flight head of 66 blocks to 17, and the answer said "the next step can admit 7" (transient); the real
    # head is 255 blocks.
    folder = fixtures.ROOT.parent / "vllm-0.10.2" / "head-of-line"
    meta = recording.load(folder).meta
    e = _diagnose(folder, 12, [str(a) for a in meta["server_argv"]])
    assert e.waiting == 7 and e.headroom.prompt_blocks == 66
    assert e.verdict is not Verdict.TRANSIENT
