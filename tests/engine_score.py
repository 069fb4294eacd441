"""Our verdicts against the engine's own truth: recordings that carry the truth recorder's steps.

A recording with `engine-steps.jsonl.gz` (tests/e2e/production.py; the recorder is tests/e2e/truth_plugin) is
judged from what vLLM's scheduler did, not from what the gauges suggest. Each frame is aligned to the scheduler
step that starts from the state it shows (tests/e2e/engine_truth.py `align`): that step's admission scan is the
engine's answer to "why do these requests wait" at that frame. Our verdicts say what binds the next step
(exporter/pipeline/verdict.py `next_step`), so the step is the label, not a vote over the frame's interval. vLLM
tests the token budget first (`while self.waiting and token_budget > 0`, vllm/v1/core/sched/scheduler.py:334
@0.10.2; `while token_budget > 0`, :912 @0.32.0) after the running requests' prefill chunks took their share
(:208 @0.10.2, :659 @0.32.0), before the slot test and allocate_slots: a budget stop masks KV. `Label.also` keeps
what is masked: the head's last refusal needing more blocks than are free at this step (kv_full/head_of_line),
every slot taken (slots_full). Read against the recorded steps, the budget stops are real where they dominate
(0.10.2 prod-kv: 28k-token prompts, one admitted every ~4 steps while thousands of blocks stay free, the first
KV refusal 90 s in; prod-never-fits on 0.10.2: no full-prompt gate before 0.19, so the head that never fits is
admitted chunk by chunk and its prefill holds the budget). Per frame:

* the verdict (sidecar, one-shot with the server's flags, one-shot with none) against the step's stop reason
  (`ACCEPT`: the accepted verdicts per reason, `ONE_SHOT_ALSO` the wider set one observation is allowed);
* false-full against "the head was refused for a reason other than KV" (slots, token budget, deferral, a
  prefill hold): flagging it where the engine refused for KV, preempted or admitted everything is a miss, and
  not flagging it where such a reason held for the sidecar's hold time is counted too (recall);
* admission headroom against what the engine admitted from that step on until its scan stopped on capacity
  (`capacity_admitted`), for frames with a waiting head: within ±1 of min(headroom, waiting); where we answer
  with a range (`admission_headroom_requests_max`: the LoRA cap, whose held-back count the exposition does not
  show), within ±1 of it, and the report counts those frames (`ranged`);
* safe headroom: a frame that says more requests are safe (> 0) while the engine preempted within
  `SAFE_WINDOW_S` after it.

What a frame can be asked about is what it shows: a frame whose gauges show no queue is `ok`, and one whose shown
queue its step admitted whole (FCFS, nothing skipped) is `transient`, whatever stopped that step's scan for requests
that arrived after the stats the frame shows. A budget stop also accepts the limit the scan met when it next reached
capacity (`capacity_stop`); a step whose scan skipped requests for a deferral also accepts deferred, and one that
admitted the whole queue with no budget left also accepts budget_full (`spent_to_empty`). In one observation an
`undecided` answer agrees when one of its cases names the engine's reason (`named_case`), counted apart
(`undecided_named`): without flags whatever the case's input, with flags only where every case's input is evidence
no flag states (`advice.EVIDENCE`: the queue head's size, its cached blocks, the requests the LoRA cap lets
through); never in the sidecar.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.pipeline import advice
from exporter.pipeline.target import EngineReport, Settings, Target, one_shot
from exporter.pipeline.verdict import Thresholds
from exporter.replay import recording
from tests import fixtures
from tests.e2e.engine_truth import Aligned, Step, Steps, align, frame_gauges, read_steps

STEPS_FILE = "engine-steps.jsonl.gz"
FULL_USAGE = 0.8
STORM_BEFORE_S, STORM_AFTER_S = 3.0, 0.5  # a preemption this close makes "preempting" acceptable too
SAFE_WINDOW_S = 10.0
ADMISSION_TOLERANCE = 1
MODES = ("sidecar", "one-shot", "one-shot-noflags")
# Stop reasons (the recorder's `stop`) in which the head waits for something other than KV blocks.
NOT_KV = frozenset({"max_num_seqs", "max_num_active_seqs", "token_budget", "deferred", "no_chunk_budget",
                    "prefill_cadence"})


def spent_to_empty(s: Step) -> bool:
    """A step that admitted the whole queue and spent its token budget doing so (stop "empty", 0 tokens left):
    the last one admitted got what remained, a partial chunk. The budget bound that step as much as the queue's
    end did: one token more asked and the scan stops on the budget, with the same frame before it (0.10.2
    prod-budget frames 26 and 27: 60 running, 2 waiting 7,000-token prompts; one step admitted 1, the next 2)."""
    return str(s["stop"]) == "empty" and s["left"] == 0


# The verdicts that agree with each of the engine's reasons; one observation (one-shot) may also say ONE_SHOT_ALSO
# where it cannot see what decides (the budget's use, the head's size). A preemption within STORM_* of the frame
# adds "preempting" to the KV and slot reasons.
ACCEPT: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in {
    "ok": {"ok"}, "leak": {"leak", "ok"}, "slots_full": {"slots_full"}, "budget_full": {"budget_full"},
    "kv_full": {"kv_full"}, "head_of_line": {"head_of_line", "kv_full"}, "preempting": {"preempting", "kv_full"},
    "deferred": {"deferred"}, "sleeping": {"sleeping"}, "transient": {"transient", "ok"}, "never_fits": {"never_fits"},
}.items()}
ONE_SHOT_ALSO: dict[str, frozenset[str]] = {"budget_full": frozenset({"transient"}),
                                             "head_of_line": frozenset({"transient"})}
STORM_ALSO = frozenset({"ok", "slots_full", "budget_full", "kv_full", "head_of_line", "transient"})


# One observation may answer `undecided` where an unknown input decides (exporter/pipeline/verdict.py `Case`: what
# binds for each value the input may have). That answer is honest and, when one of its named cases is the limit the
# engine hit, correct: it agrees without flags whatever the input, and with flags only where every case's input is
# evidence one observation cannot see and no flag states (`EVIDENCE_INPUTS`; a flag's value the user gave decides
# itself, so an undecided over max_num_seqs with flags is a miss). Never the sidecar, which looks again. Only when a
# case's limit is the engine's reason at that step or one it also reports (`Label.also`); the report counts those
# frames apart (`EngineScore.undecided_named`). One-shot also accepts `transient` for a budget stop
# (`ONE_SHOT_ALSO`), a vaguer answer than an undecided that names the budget and what decides it. A case's limit
# names these engine reasons:
CASE_REASONS: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in {
    "slots": {"slots_full"}, "token_budget": {"budget_full"}, "head_prompt": {"kv_full", "head_of_line"},
    "blocks": {"kv_full", "head_of_line"}, "deferral": {"deferred"}, "pool_size": {"never_fits"},
    "none": {"transient"},
}.items()}


EVIDENCE_INPUTS = frozenset(advice.EVIDENCE)


def named_case(label: Label, cases: tuple[Any, ...], flags: bool = False) -> bool:
    """An `undecided` answer one of whose cases names the engine's reason (`CASE_REASONS`); with `flags`, only
    where every case's input is evidence no flag states (`EVIDENCE_INPUTS`)."""
    if flags and not all(c.input in EVIDENCE_INPUTS for c in cases):
        return False
    reasons = {label.label, *label.also}
    return any(CASE_REASONS.get(str(c.limit), frozenset()) & reasons for c in cases)


def judge_accepts(label: str, mode: str, storm: bool = False) -> frozenset[str]:
    """The verdicts accepted for an engine reason in a mode ("sidecar", "one-shot", "one-shot-noflags")."""
    out = ACCEPT[label] | (ONE_SHOT_ALSO.get(label, frozenset()) if mode != "sidecar" else frozenset())
    if mode == "one-shot-noflags" and label == "slots_full":
        out |= {"transient"}  # without the cap one observation cannot tell all slots taken from between steps
    return out | ({"preempting"} if storm and label in STORM_ALSO else frozenset())


@dataclass(frozen=True)
class Label:
    """The engine's reason at a frame: `label` is why its admission scan stopped (the first limit in the release's
    loop order); `also` the other limits that bound the head at that step (slots all taken, no budget left, requests
    skipped for a deferral, or the head's last refusal needed more blocks than are free now): naming one of them
    agrees too."""

    label: str
    storm: bool
    why: str
    also: frozenset[str] = frozenset()

    def accepts(self, mode: str) -> frozenset[str]:
        out = judge_accepts(self.label, mode, self.storm)
        for other in self.also:
            out |= judge_accepts(other, mode, self.storm)
        return out


BUDGET_STOPS = frozenset({"token_budget", "no_chunk_budget"})


def capacity_admitted(steps: list[Step], j: int) -> tuple[int, bool]:
    """What the engine admitted of the queue that step j starts from, before a capacity limit answered: (count,
    exact).

    Our admission headroom is capacity (free slots, free blocks over the head's need: derive.admission_headroom),
    not a rate. The token budget is the first test of vLLM's admission loop (`while self.waiting and token_budget
    > 0`, vllm/v1/core/sched/scheduler.py:334 @0.10.2; `while token_budget > 0`, :912 @0.32.0, before the slot test
    :923 and allocate_slots :1270) and running requests' prefill chunks are scheduled before it (:208 @0.10.2, :659
    @0.32.0), so
    a step that a prefill chunk filled never asks the pool or the slots: its count (0, or 1 whose first chunk took
    the rest, :435/:505 @0.10.2, :1169/:1345 @0.32.0 -- a partially scheduled prefill is admitted: it joins
    `running`) says how fast the
    budget lets the queue in, not how many fit. The count is therefore carried over the following steps while
    their scan stops on the budget, up to the first step that stops on anything else (KV refused, slots taken,
    queue empty, deferral) -- that step's answer is the capacity's -- or until every request waiting at step j
    was admitted. A completion or a preemption on the way changes the capacity the frame showed: the count so far
    is then only a lower bound (exact=False)."""
    s = steps[j]
    got = len(s.adm)
    if s["stop"] not in BUDGET_STOPS:
        return got, True
    waiting = int(s["w0"] or 0)
    prev_r = s["r"]
    for s2 in steps[j + 1:]:
        if got >= waiting:
            return got, True
        if (s2["r0"] is not None and prev_r is not None and s2["r0"] < prev_r) or s2.pre:
            return got, False
        got += len(s2.adm)
        if s2["stop"] not in BUDGET_STOPS:
            return got, True
        prev_r = s2["r"]
    return got, got >= waiting


def capacity_stop(steps: list[Step], j: int) -> str | None:
    """The stop reason that answered for capacity the queue step j starts from (`capacity_admitted`'s walk): step
    j's own when it did not stop on the token budget, else the first following step's that did not, while nothing
    finished or was preempted on the way (else None: the capacity changed) and some of step j's queue still waited.
    A budget stop never asks allocate_slots or the slot test (vllm/v1/core/sched/scheduler.py:334 @0.10.2, :912
    @0.32.0): the step where the scan next reaches them says whether the queue behind the budget waits for KV or a
    slot."""
    s = steps[j]
    if s["stop"] not in BUDGET_STOPS:
        return str(s["stop"])
    waiting = int(s["w0"] or 0)
    got = len(s.adm)
    prev_r = s["r"]
    for s2 in steps[j + 1:]:
        if got >= waiting:
            return None
        if (s2["r0"] is not None and prev_r is not None and s2["r0"] < prev_r) or s2.pre:
            return None
        got += len(s2.adm)
        if s2["stop"] not in BUDGET_STOPS:
            return str(s2["stop"])
        prev_r = s2["r"]
    return None


def has_steps(folder: Path) -> bool:
    return (folder / STEPS_FILE).exists()


@dataclass
class Truthful:
    """A recording with its engine truth, aligned frame by frame."""

    folder: Path
    meta: dict[str, Any]
    frames: list[tuple[float, str]]
    steps: Steps
    aligned: list[Aligned]
    t0: float
    pool: int
    head_need: dict[int, int] = field(default_factory=dict)  # step k -> blocks the head's last refusal needed
    pos: dict[int, int] = field(default_factory=dict)  # step k -> its index in steps.steps

    def __post_init__(self) -> None:
        # The head's need: its last refusal at or before the step, else its next one while it stays the head (the
        # same request with the same prompt: a budget stop never asks allocate_slots, vllm/v1/core/sched/
        # scheduler.py:334 @0.10.2, :912 @0.32.0, so the engine shows the head's size only once the budget leaves
        # it room).
        self.pos = {st.k: j for j, st in enumerate(self.steps.steps)}
        last: dict[str, int] = {}
        for st in self.steps.steps:
            if st.ref:
                last[str(st.ref["id"]).removeprefix("cmpl-")] = int(st.ref["need"])
            head = st["head"]
            if head is not None and head in last:
                self.head_need[st.k] = last[head]
        nxt: dict[str, int] = {}
        for st in reversed(self.steps.steps):
            if st.ref:
                nxt[str(st.ref["id"]).removeprefix("cmpl-")] = int(st.ref["need"])
            head = st["head"]
            if head is not None and head in nxt and st.k not in self.head_need:
                self.head_need[st.k] = nxt[head]

    @property
    def name(self) -> str:
        return f"{self.folder.parent.name}/{self.folder.name}"

    @property
    def shape(self) -> str:
        return shape_of(self.meta)

    def engine_t(self, i: int) -> float:
        return self.t0 + self.frames[i][0]

    def paused_at(self, t: float) -> str | None:
        state = None
        for at, name in self.steps.pauses:
            if at > t:
                break
            state = None if name == "UNPAUSED" else name
        return state

    def preempted_between(self, t0: float, t1: float) -> int:
        return sum(len(s.pre) for s in self.steps.between(t0, t1))


def shape_of(meta: dict[str, Any]) -> str:
    """The server shape of a recording: its pool, slots and budget (and LoRA), as the report groups them."""
    argv = [str(a) for a in meta["server_argv"]]

    def flag(name: str) -> str:
        return argv[argv.index(name) + 1] if name in argv else "-"

    lora = " lora" if "--enable-lora" in argv else ""
    return (f"{flag('--num-gpu-blocks-override')} blocks, {flag('--max-num-seqs')} seqs, "
            f"budget {flag('--max-num-batched-tokens')}{lora}")


def load(folder: Path) -> Truthful:
    rec = recording.load(folder)
    steps = read_steps(folder / STEPS_FILE)
    t0 = float(rec.meta["clock"]["t0_monotonic"])
    pool = int(steps.header.get("blocks") or 0)
    return Truthful(folder, rec.meta, rec.frames, steps, align(steps, rec.frames, t0), t0, pool)


def _usage(text: str) -> float:
    for line in text.splitlines():
        if line.startswith("vllm:kv_cache_usage_perc"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def judge(tr: Truthful, i: int) -> Label:
    """The engine's reason at frame i (`ACCEPT` gives the verdicts that agree with it)."""
    t = tr.engine_t(i)
    paused = tr.paused_at(t)
    if paused is not None:
        return Label("sleeping", False, f"scheduler {paused}")
    a = tr.aligned[i]
    s = a.step
    text = tr.frames[i][1]
    storm = tr.preempted_between(t - STORM_BEFORE_S, t + STORM_AFTER_S) > 0
    running, waiting = frame_gauges(text)
    if not a.matched and not waiting:
        s = None  # an idle frame before the first or after the last step: nothing the engine did since
    # A frame that shows nothing waiting is "nothing waits", whatever its step then scanned: its gauges are the stats
    # vLLM made after the previous step's output (`make_stats` in update_from_output, num_waiting_reqs =
    # len(self.waiting): vllm/v1/core/sched/scheduler.py:1011/:1183 @0.10.2, :2409/:2947 @0.32.0), so requests that
    # arrived since (the step's w0 beyond the frame's sw) are ones the frame never showed, and no answer about
    # this frame can be about them.
    if s is None or not s["w0"] or not waiting:
        if not running and _usage(text) > 0:
            return Label("leak", False, "blocks held, nothing to do")
        return Label("ok", storm, "nothing waits")
    stop = str(s["stop"])
    shown = int(waiting)
    if (tr.steps.header.get("policy") == "fcfs" and not s.dfr and int(s["w0"]) > shown
            and len(s.adm) >= shown):
        # The same for a frame that shows part of the step's queue: FCFS admits from the front (vLLM's `waiting`
        # is a FIFO, new requests appended: vllm/v1/core/sched/request_queue.py @0.10.2/@0.32.0), so a step that
        # admitted at least as many as the frame showed, skipping none, admitted every request the frame showed;
        # what stopped its scan was about requests that arrived after the frame's stats.
        return Label("transient", storm, f"{stop}: admitted {len(s.adm)}, the {shown} the frame showed among them "
                                         f"(of {s['w0']})")
    usage = _usage(text)
    kv_label = "kv_full" if usage >= FULL_USAGE else "head_of_line"
    also = set()
    need = tr.head_need.get(s.k)
    if need is not None and s["free0"] is not None and need > s["free0"]:
        also.add(kv_label)  # its last try needed more blocks than are free at this step
    if s["r"] is not None and s["r"] >= int(tr.steps.header.get("max_num_seqs") or 1 << 30):
        also.add("slots_full")
    if s["left"] == 0:
        also.add("budget_full")
    if s.dfr:
        also.add("deferred")  # the scan skipped requests for the LoRA cap (or grammar, remote KV) before it stopped
    if stop in BUDGET_STOPS:
        answered = capacity_stop(tr.steps.steps, tr.pos[s.k])
        if answered == "kv":
            also.add(kv_label)
        elif answered in ("max_num_seqs", "max_num_active_seqs"):
            also.add("slots_full")
    if stop in ("max_num_seqs", "max_num_active_seqs"):
        return Label("slots_full", storm, f"{stop}: {s['r']} running after the step", frozenset(also - {"slots_full"}))
    if stop in ("token_budget", "no_chunk_budget"):
        extra = f"; the head last needed {need} blocks, {s['free0']} free" if kv_label in also else ""
        return Label("budget_full", storm, f"{stop}: {s['left']} tokens left{extra}",
                     frozenset(also - {"budget_full"}))
    if stop == "kv":
        ref = s.ref or {}
        need = ref.get("need", s["hb"])
        if need is not None and tr.pool and need > tr.pool:
            return Label("never_fits", False, f"head needs {need} > pool {tr.pool}")
        why = f"head refused: needs {need} blocks, {ref.get('had', s['free0'])} free ({ref.get('gate', '?')})"
        return Label(kv_label, storm, why)
    if stop == "preempted":
        return Label("preempting", False, f"preempted {len(s.pre)} this step")
    if stop == "deferred":
        return Label("deferred", False, f"skipped: {s.dfr}")
    if stop == "paused":
        return Label("sleeping", False, "scheduler paused")
    # "empty": the step admitted every waiting request (the frame caught the queue between two steps); a DP
    # prefill-cadence hold; "other" (encoder budget, spec-decode padding)
    return Label("transient", storm, f"{stop}: admitted {len(s.adm)} of {s['w0']}",
                 frozenset({"budget_full"}) if spent_to_empty(s) else frozenset())


@dataclass
class EngineScore:
    scenario: str
    shape: str
    mode: str
    frames: int = 0
    agree: int = 0
    undetermined: int = 0
    unaligned: int = 0
    confusion: Counter[tuple[str, str]] = field(default_factory=Counter)
    per_truth: Counter[tuple[str, bool]] = field(default_factory=Counter)
    misses: list[tuple[int, str, str, str]] = field(default_factory=list)  # (frame, truth, why, ours)
    undecided_named: int = 0  # of `agree`: undecided whose decided_by names the engine's reason (one-shot only)
    ff_flagged_kv: int = 0  # false-full flagged where the engine refused for KV / preempted / admitted all
    ff_true: int = 0  # frames whose head waited for a non-KV reason for at least the hold time
    ff_found: int = 0  # ... of them flagged
    ff_misses: list[tuple[int, str, str]] = field(default_factory=list)
    adm_frames: int = 0
    adm_within: int = 0
    adm_misses: list[tuple[int, int, int, int]] = field(default_factory=list)  # (frame, ours, waiting, engine)
    adm_ranged: int = 0  # ... of them answered with a range (admission_headroom_requests_max)
    adm_frames_exact: int = 0  # ... of them, the engine's scan reached a capacity stop (capacity_admitted: exact)
    adm_within_exact: int = 0
    adm_within_fewest: int = 0  # within ±1 by the fewest alone (a ranged answer's low end: its point estimate)
    safe_frames: int = 0  # frames saying safe headroom > 0
    safe_bad: int = 0  # ... followed by a preemption within SAFE_WINDOW_S
    safe_misses: list[tuple[int, int, int]] = field(default_factory=list)  # (frame, safe headroom, preempted)

    @property
    def release(self) -> str:
        return self.scenario.split("/")[0]


def _maybe(engines: list[EngineReport]) -> EngineReport | None:
    assert len(engines) <= 1
    return engines[0] if engines else None


def _hold_s(meta: dict[str, Any]) -> float:
    return max(2.0, 4 * float(meta.get("interval", 0.5)))


def score(folder: Path) -> list[EngineScore]:
    tr = load(folder)
    meta = tr.meta
    argv = [str(a) for a in meta["server_argv"]]
    hold = _hold_s(meta)
    settings = Settings("recorded", vllm_args=argv, discover_cmdline=False, thresholds=Thresholds(false_full_hold=hold))
    bare = Settings("recorded", vllm_args=None, discover_cmdline=False, thresholds=settings.thresholds)
    sidecar = fixtures.as_recorded(Target(settings), meta)
    out = [EngineScore(tr.name, tr.shape, m) for m in MODES]
    labels = [judge(tr, i) for i in range(len(tr.frames))]
    index = {id(st): j for j, st in enumerate(tr.steps.steps)}
    capacity = [(0, True) if a.step is None else capacity_admitted(tr.steps.steps, index[id(a.step)])
                for a in tr.aligned]
    # A non-KV reason that held for the hold time up to frame i (what the sidecar may be expected to flag).
    run_start: float | None = None
    ff_due = []
    for i in range(len(labels)):
        s = tr.aligned[i].step
        non_kv = s is not None and bool(s["w0"]) and str(s["stop"]) in NOT_KV
        t = tr.frames[i][0]
        run_start = (t if run_start is None else run_start) if non_kv else None
        ff_due.append(non_kv and run_start is not None and t - run_start >= hold)
    for i, (t, text) in enumerate(tr.frames):
        lab = labels[i]
        a = tr.aligned[i]
        reports = (_maybe(sidecar.observe(t, text).engines),
                   _maybe(fixtures.as_recorded(one_shot(settings), meta).observe(t, text, gauges_only=True).engines),
                   _maybe(fixtures.as_recorded(one_shot(bare), meta).observe(t, text, gauges_only=True).engines))
        s = a.step
        et = tr.engine_t(i)
        for sc, ours in zip(out, reports, strict=True):
            if ours is None:
                sc.undetermined += 1
                continue
            if not a.matched:
                sc.unaligned += 1
            sc.frames += 1
            verdict = str(ours.verdict)
            accept = lab.accepts(sc.mode)
            ok = verdict in accept
            if (not ok and sc.mode != "sidecar" and verdict == "undecided"
                    and named_case(lab, ours.decided_by, flags=sc.mode == "one-shot")):
                ok = True
                sc.undecided_named += 1
            sc.agree += ok
            sc.confusion[(lab.label, verdict)] += 1
            sc.per_truth[(lab.label, ok)] += 1
            if not ok:
                sc.misses.append((i, lab.label, lab.why, verdict))
            kv_or_nothing = s is None or not s["w0"] or (str(s["stop"]) not in NOT_KV and not spent_to_empty(s))
            if ours.false_full and kv_or_nothing and lab.label != "sleeping":
                sc.ff_flagged_kv += 1
                sc.ff_misses.append((i, lab.label, "flagged false-full"))
            if sc.mode == "sidecar" and ff_due[i]:
                sc.ff_true += 1
                sc.ff_found += bool(ours.false_full)
                if not ours.false_full:
                    sc.ff_misses.append((i, lab.label, "not flagged"))
            if s is not None and s["w0"] and a.matched and lab.label != "sleeping":
                pred = min(ours.headroom.admission_headroom_requests, int(s["w0"]))
                top = ours.headroom.admission_headroom_requests_max
                most = pred if top is None else min(top, int(s["w0"]))
                got, exact = capacity[i]
                got = min(got, int(s["w0"]))
                sc.adm_frames += 1
                sc.adm_ranged += top is not None
                # A lower bound (a completion freed capacity first) is only judged against under-counting. A range
                # (the exposition cannot tell how many waiting requests a LoRA adapter holds back: derive.with_lora)
                # holds when the engine's count lies in it.
                within = (pred - ADMISSION_TOLERANCE <= got <= most + ADMISSION_TOLERANCE if exact
                          else most >= got - ADMISSION_TOLERANCE)
                sc.adm_frames_exact += exact
                sc.adm_within_exact += exact and within
                sc.adm_within_fewest += (pred - ADMISSION_TOLERANCE <= got <= pred + ADMISSION_TOLERANCE if exact
                                         else pred >= got - ADMISSION_TOLERANCE)
                if within:
                    sc.adm_within += 1
                else:
                    sc.adm_misses.append((i, ours.headroom.admission_headroom_requests, int(s["w0"]), got))
            if ours.headroom.safe_headroom_requests > 0:
                sc.safe_frames += 1
                pre = tr.preempted_between(et, et + SAFE_WINDOW_S)
                if pre:
                    sc.safe_bad += 1
                    sc.safe_misses.append((i, ours.headroom.safe_headroom_requests, pre))
    return out


def recordings(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob(f"vllm-*/*/{STEPS_FILE}"))


def engine_counts(folder: Path) -> dict[str, Any]:
    """meta.json's engine_truth summary (what the engine did), for the report."""
    return dict(json.loads((folder / "meta.json").read_text()).get("engine_truth", {}))


def requests_of(folder: Path) -> list[dict[str, Any]]:
    path = folder / "requests.jsonl.gz"
    if not path.exists():
        return []
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines() if line]
