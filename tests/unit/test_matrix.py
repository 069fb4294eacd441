"""Every vLLM release recorded on this machine (tests/fixtures/vllm-X/, `make matrix`), judged from its recordings.

Per release: its start-up capacity lines, capacity and usable blocks, the usage gauge's denominator (does it
count the null block?), metric names, engine labels, the rules the sidecar picks from /version and from the
exposition alone, the sidecar's verdict per scenario, and the admission headroom it predicts against what
that engine admitted. The engine's truth comes from prometheus_client's parser, never ours. No vLLM, no
network: files only.
"""

from __future__ import annotations

import math

import pytest

from exporter.engines import base
from exporter.engines.vllm import metrics
from exporter.engines.vllm import releases as vllm
from exporter.pipeline import derive, exposition
from exporter.pipeline.config import value
from exporter.pipeline.verdict import Verdict
from tests.e2e.support import Release, engine_truth, load_release, release_dirs, replay_scenario, samples
from tests.e2e.vllm_server import parse_startup_capacity

RELEASES = [r for r in (load_release(d) for d in release_dirs()) if r.scenarios]
IDS = [r.name for r in RELEASES]
# The Rust frontend (vllm-rs, 0.32.0) exports no vllm:cache_config_info: the sidecar takes capacity from vLLM's own
# --num-gpu-blocks-override on the recorded command line (issue 23, item 1), and every check below holds for it.


def judged(releases: list[Release]) -> list[object]:
    """`releases` as parameters of a check of the sidecar's judgement (the Rust frontend's among them)."""
    return [pytest.param(r, id=r.name) for r in releases]


def release_of(rel: Release) -> tuple[int, int, int]:
    r = vllm.parse_release(rel.version)
    assert r is not None
    return r


def is_v0(rel: Release) -> bool:
    return rel.name.endswith("-v0") or rel.any_meta().get("engine_generation") == "V0"


def version_of(rel: Release) -> str:
    return str(rel.any_meta()["version"]["version"])


def flags(rel: Release, scenario: str = "idle") -> dict[str, int]:
    return rel.scenarios[scenario].meta["flags"]  # type: ignore[no-any-return]


def loaded_snapshot(rel: Release) -> str:
    """An exposition with every series the release exports: V0 (0.8.5) shows no scheduler gauge before its
    first request, so the idle snapshot will not do."""
    return rel.scenarios["false-full" if "false-full" in rel.scenarios else "idle"].snapshot


def with_scenario(name: str) -> list[Release]:
    return [r for r in RELEASES if name in r.scenarios]


def test_at_least_six_older_releases_are_recorded() -> None:
    older = {r.version for r in RELEASES if r.version != "0.32.0"}
    assert len(older) >= 6, sorted(older)


# -- start-up lines -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", RELEASES, ids=IDS)
def test_startup_capacity_lines_parse_in_every_format(rel: Release) -> None:
    sc = rel.scenarios["idle"]
    cap = parse_startup_capacity((sc.directory / "startup.log").read_text())
    f = flags(rel)
    n, bs, mml = f["num_gpu_blocks_override"], f["block_size"], f["max_model_len"]
    assert cap["num_gpu_blocks"] == n
    assert cap["max_model_len"] == mml
    # vLLM's "Maximum concurrency" counts the null block: N / ceil(L / bs) (2.50x for 40 blocks of 32 at 512).
    assert cap["max_concurrency"] == pytest.approx(n / math.ceil(mml / bs), abs=0.005)
    if is_v0(rel):
        assert cap["format"] == "v0-blocks" and "kv_cache_size_tokens" not in cap
    else:
        assert cap["format"] == ("one-line" if release_of(rel) >= (0, 28, 0) else "two-lines")
        assert cap["kv_cache_size_tokens"] == n * bs  # the size line counts the null block too
    if "startup_capacity" in sc.meta and sc.meta["startup_capacity"].get("format"):
        assert {k: v for k, v in cap.items() if k not in ("line", "lines")} == sc.meta["startup_capacity"]


# -- capacity, null block, usage denominator ------------------------------------------------------------------


@pytest.mark.parametrize("rel", judged(RELEASES))
def test_idle_capacity_and_usable_blocks(rel: Release) -> None:
    n = flags(rel)["num_gpu_blocks_override"]
    usable = n if is_v0(rel) else n - 1  # V1's block 0 is the never-freed null block; V0 has none
    frames = replay_scenario(rel.scenarios["idle"], version_of(rel))
    if all(ours is None for _t, _x, ours in frames):
        # V0 exports no scheduler gauge before its first request: nothing to judge yet, and we say nothing.
        assert is_v0(rel)
        loaded = replay_scenario(rel.scenarios["false-full"], version_of(rel))
        assert all(o is None or o.headroom.kv_capacity_blocks == usable for _t, _x, o in loaded)
        assert any(o is not None for _t, _x, o in loaded)
        return
    for _t, text, ours in frames:
        assert ours is not None
        assert ours.headroom.kv_capacity_blocks == usable
        assert ours.headroom.block_size_tokens == flags(rel)["block_size"]
        assert ours.headroom.kv_used_blocks == 0 and ours.headroom.kv_free_blocks == usable
        assert ours.verdict is Verdict.OK
        u = engine_truth(text)["usage"]
        assert u is not None
        # A fresh V1 publishes no usage before its first step (0); V0 shows no gauge before its first request.
        assert u == 0.0
    # Idle again after load: V1 <= 0.10.1 reports the null block as used (1 / N); later releases and V0 report 0.
    counts_null = not is_v0(rel) and release_of(rel) < (0, 10, 2)
    _t, text, ours = replay_scenario(rel.scenarios["false-full"], version_of(rel))[-1]
    assert engine_truth(text)["usage"] == pytest.approx(1 / n if counts_null else 0.0)
    assert ours is not None and ours.headroom.kv_used_blocks == 0 and ours.verdict is Verdict.OK


def _usage_values(rel: Release) -> list[float]:
    out = []
    for name in ("false-full", "kv-full", "preemption"):
        if name in rel.scenarios:
            for _t, text in rel.scenarios[name].frames():
                u = engine_truth(text)["usage"]
                if u is not None and u > 0.05:
                    out.append(u)
    return out


def _integral(x: float) -> bool:
    return abs(x - round(x)) < 1e-6


@pytest.mark.parametrize("rel", RELEASES, ids=IDS)
def test_usage_denominator_is_the_releases_convention(rel: Release) -> None:
    """u × denominator is a whole number of blocks in every frame, for the release's denominator only."""
    n = flags(rel)["num_gpu_blocks_override"]
    rules = vllm.rules(version_of(rel), exposition.parse(loaded_snapshot(rel), metrics.WANTED))
    denominator = n - 1 if rules.has_null_block and not rules.usage_counts_null_block else n
    other = n if denominator == n - 1 else n - 1
    values = _usage_values(rel)
    assert len(values) >= 10
    assert all(_integral(u * denominator) for u in values)
    assert not all(_integral(u * other) for u in values)


# -- names and labels -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", RELEASES, ids=IDS)
def test_metric_names_and_labels(rel: Release) -> None:
    text = loaded_snapshot(rel)
    names = {name for name, _l, _v in samples(text)}
    r = release_of(rel)
    usage = {n for n in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc") if n in names}
    if is_v0(rel) or r < (0, 9, 0):
        assert usage == {"vllm:gpu_cache_usage_perc"}
    elif r < (0, 11, 0):
        assert usage == {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}
    else:
        assert usage == {"vllm:kv_cache_usage_perc"}
    assert "vllm:num_preemptions_total" in names
    running_labels = [labels for name, labels, _v in samples(text) if name == "vllm:num_requests_running"]
    assert len(running_labels) == 1  # one engine, no data parallelism
    assert ("engine" in running_labels[0]) == (not is_v0(rel))
    assert running_labels[0]["model_name"] == "tiny-llama"
    cci = [labels for name, labels, _v in samples(text) if name == "vllm:cache_config_info"]
    if rel.frontend == "rust":
        # vllm-rs exports neither cache_config_info nor engine_sleep_state nor admission_rejections (0.32.0).
        assert not cci and not names & {"vllm:engine_sleep_state", "vllm:admission_rejections_total"}
        assert "vllm:num_requests_waiting_by_reason" in names
        return
    assert len(cci) == 1 and "model_name" not in cci[0]
    assert cci[0]["num_gpu_blocks"] == str(flags(rel)["num_gpu_blocks_override"])
    assert ("vllm:num_requests_waiting_by_reason" in names) == (r >= (0, 20, 0))
    assert ("kv_cache_max_concurrency" in cci[0]) == (r >= (0, 24, 0))


@pytest.mark.parametrize("rel", RELEASES, ids=IDS)
def test_rules_from_version_and_from_the_exposition_alone(rel: Release) -> None:
    expo = exposition.parse(loaded_snapshot(rel), metrics.WANTED)
    r = release_of(rel)
    truth = vllm.rules(version_of(rel), expo)
    assert truth.source == "version" and truth.release == version_of(rel)
    assert truth.engine == ("V0" if is_v0(rel) else "V1")
    assert truth.admission == (base.FULL_PROMPT if is_v0(rel) or r >= (0, 19, 0) else base.FIRST_CHUNK)
    shape = vllm.rules(None, expo)
    assert shape.source == "exposition" and shape.engine == truth.engine
    # Without /version, every rule is the release's own or its conservative reading, and says so.
    if shape.usage_counts_null_block != truth.usage_counts_null_block:
        assert any(c.startswith("usage") for c in shape.conservative) and not shape.usage_counts_null_block
    if shape.admission != truth.admission:
        assert any(c.startswith("admission") for c in shape.conservative) and shape.admission == base.FULL_PROMPT
    assert rel.version in truth.describe() and "from /version" in truth.describe()


# -- verdicts ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", judged(with_scenario("false-full")))
def test_slots_bound_queue_is_slots_full_and_false_full(rel: Release) -> None:
    frames = replay_scenario(rel.scenarios["false-full"], version_of(rel))
    state = [(i, e, o) for i, (_t, text, o) in enumerate(frames)
             if (e := engine_truth(text))["waiting"] and e["running"] == 8 and (e["usage"] or 0) < 0.8]
    # Fast releases drain the queue faster than the clients (on the API server's one CPU) refill it: the
    # state may show in a couple of frames only (the recorder notes it in meta.json "problems").
    assert len(state) >= 2
    for _i, _e, ours in state:
        assert ours is not None and ours.verdict is Verdict.SLOTS_FULL
        assert ours.headroom.admission_headroom_requests == 0
    # false_full needs the state held for the replay's hold (2 s): 6 consecutive frames of 0.5 s.
    index = [i for i, _e, _o in state]
    if any(index[k + 5] - index[k] == 5 for k in range(len(index) - 5)):
        assert any(o is not None and o.false_full for _i, _e, o in state)


@pytest.mark.parametrize("rel", judged(with_scenario("kv-full")))
def test_kv_bound_queue_is_kv_full_never_false_full(rel: Release) -> None:
    frames = replay_scenario(rel.scenarios["kv-full"], version_of(rel))
    bs = flags(rel, "kv-full")["block_size"]
    prompt_blocks = 352 // bs
    state = []
    for _t, text, ours in frames:
        e = engine_truth(text)
        assert ours is not None
        if e["waiting"] and ours.headroom.kv_free_blocks < prompt_blocks and not ours.preemptions_per_second:
            state.append((e, ours))
    assert len(state) >= 5
    for e, ours in state:
        assert (e["running"] or 0) < 8
        assert ours.verdict is Verdict.KV_FULL and ours.headroom.admission_headroom_requests == 0
    assert not any(o is not None and o.false_full for _t, _x, o in frames)


@pytest.mark.parametrize("rel", judged(with_scenario("preemption")))
def test_preemptions_are_reported(rel: Release) -> None:
    frames = replay_scenario(rel.scenarios["preemption"], version_of(rel))
    truths = [engine_truth(text) for _t, text, _o in frames]
    rises = [i for i in range(1, len(frames))
             if (truths[i]["preemptions"] or 0) > (truths[i - 1]["preemptions"] or 0)]
    assert rises, "the engine must have preempted"
    for i in rises:
        ours = frames[i][2]
        assert ours is not None and ours.verdict is Verdict.PREEMPTING


# -- admission ----------------------------------------------------------------------------------------------


def predicted_admissions(rel: Release, scenario: str, prompt: int, before_t: float) -> tuple[int, int]:
    """(our prediction from the last frame before `before_t`, running in that frame) for a burst of `prompt`-token
    requests, under the release's admission rule."""
    sc = rel.scenarios[scenario]
    frames = replay_scenario(sc, version_of(rel))
    _t, text, ours = [f for f in frames if f[0] < before_t][-1]
    assert ours is not None
    rules = vllm.rules(version_of(rel), exposition.parse(text, metrics.WANTED))
    budget = sc.meta.get("startup_capacity", {}).get("max_num_batched_tokens")
    blocks = derive.admission_blocks(prompt, ours.headroom.block_size_tokens, rules.admission, budget)
    slots = value(ours.config.max_num_seqs)
    assert slots is not None
    kv = derive.kv_admission_headroom(ours.headroom.kv_free_blocks, blocks)
    return derive.admission_headroom(derive.slot_headroom(slots, ours.running), kv), ours.running


@pytest.mark.parametrize("rel", judged(with_scenario("admission")))
def test_admission_headroom_predicts_what_the_engine_admitted(rel: Release) -> None:
    sc = rel.scenarios["admission"]
    start = sc.meta["load"]["window"]["start_t"]
    burst_t = start + sc.meta["load"]["waves"][1]["delay_s"]
    predicted, running = predicted_admissions(rel, "admission", 16, burst_t)
    assert running == 3
    after = [engine_truth(text) for t, text in sc.frames() if burst_t <= t <= burst_t + 3.0]
    admitted = max((e["running"] or 0) for e in after) - running
    assert abs(admitted - predicted) <= 1, (admitted, predicted)


# vLLM's OpenAI server on CPU, without --max-num-batched-tokens: 2048 tokens per step (get_batch_defaults in
# vllm/engine/arg_utils.py, the `is_cpu()` branch, @0.9.2, @0.10.2, @0.11.0, @0.18.0).
CPU_DEFAULT_BUDGET = 2048
HEAD_PROMPT = 8160  # scenarios.py head-of-line: 255 blocks of 32, the pool has 320 usable


@pytest.mark.parametrize("rel", judged(with_scenario("head-of-line")))
def test_head_of_line_follows_the_releases_admission_rule(rel: Release) -> None:
    """Request A holds 66+ blocks of 320; the head needs 255 for its whole prompt, 64 for its first chunk.

    From 0.19 the engine holds the head while its whole prompt does not fit: never admitted beside A, never
    preempted. Before, it admits the head as soon as the first chunk fits; A and the head then outgrow the
    pool and the engine preempts (recompute) the head. The sidecar's rule for the release predicts which.
    """
    sc = rel.scenarios["head-of-line"]
    version = version_of(rel)
    bs = flags(rel, "head-of-line")["block_size"]
    budget = sc.meta["startup_capacity"].get("max_num_batched_tokens", CPU_DEFAULT_BUDGET)
    frames = replay_scenario(sc, version)
    rules = vllm.rules(version, exposition.parse(frames[-1][1], metrics.WANTED))
    blocks = derive.admission_blocks(HEAD_PROMPT, bs, rules.admission, budget)
    arrived = sc.meta["load"]["window"]["start_t"] + sc.meta["load"]["waves"][2]["delay_s"]
    held = []
    for t, text, ours in frames:
        e = engine_truth(text)
        if ours is None:  # V0 before its first request: no scheduler gauge yet
            assert t < arrived and e["running"] is None
            continue
        if t > arrived and e["waiting"] == 7 and e["running"] == 1:  # A runs, the head and 6 short ones wait
            held.append(ours)
    assert len(held) >= 3
    # Whether the rule lets the head in beside A, in the frames where it waited:
    predicted = [derive.kv_admission_headroom(o.headroom.kv_free_blocks, blocks) for o in held]
    preempted = sc.meta["preemptions_during_recording"]
    if rules.admission == base.FULL_PROMPT:
        assert predicted == [0] * len(held) and preempted == 0
        assert all(o.verdict is Verdict.HEAD_OF_LINE for o in held[1:])  # named from the second look on
    else:
        # The first chunk fit when the head arrived (A held 66-90 blocks): admitted, then preempted.
        assert predicted[0] >= 1 and preempted >= 1
