"""The scorer: our verdicts against the engine's own truth, frame by frame, on every recorded real timeline.

    python -m tests.truth            # print the report and write tests/fixtures/SCORE.md (make score)
    python -m tests.truth --check    # exit 1 when an acceptance bound is missed

Ground truth for a frame comes from the engine and the load driver, never from our code:
* the engine's gauges and counters, read with prometheus_client's parser (not ours): running, waiting,
  usage, `num_preemptions_total`, steps (`iteration_tokens_total_count`), prompt tokens computed, and the
  finished-request prompt histogram (which requests are done);
* the server's flags from the recorded command line (max_num_seqs, blocks, block size, max_model_len,
  max_num_batched_tokens; vLLM 0.32.0's OpenAI-server default on CPU, 2,048, when not given:
  vllm/engine/arg_utils.py `_get_default_max_num_batched_tokens_and_seqs` @0.32.0);
* what the load driver sent and when (`requests.jsonl` where recorded, else the waves of meta.json), which
  tells the size of the request at the head of the queue (FCFS: the oldest unfinished request after the
  `running` ones).

Each frame gets one truth label and the set of verdicts that agree with it (`Truth.accept`); one-shot
diagnosis sees a single frame, so where one observation cannot tell two states apart its set is wider
(`Truth.accept_one_shot`), and the report says which.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from exporter.pipeline.target import EngineReport, Settings, Target, one_shot
from exporter.pipeline.verdict import Thresholds
from exporter.replay import recording
from tests import engine_score, fixtures

FIXTURES = Path(__file__).parent / "fixtures"
REPORT = FIXTURES / "SCORE.md"
CPU_DEFAULT_BUDGET = 2048  # vLLM 0.32.0 OpenAI server on CPU, world size 1
FULL_USAGE = 0.8
# Issue 19's bars: the sidecar on 98 % of frames, one-shot with the server's flags on 95 %, without them on 90 %.
SIDECAR_MIN, ONE_SHOT_MIN, ONE_SHOT_NOFLAGS_MIN = 0.98, 0.95, 0.90
MODES = ("sidecar", "one-shot", "one-shot-noflags")  # the last: `diagnose FILE` with no flag at all
LEAD_UP = 10.0  # s before a preemption counter rise in which no scrape may advise raising max_num_seqs
ANY_VERDICT = frozenset({"ok", "kv_full", "slots_full", "preempting", "head_of_line", "budget_full", "deferred",
                         "never_fits", "stuck", "sleeping", "leak", "transient", "undecided"})
NO_FALSE_FULL = frozenset({"ok", "kv_full", "preempting", "transient", "never_fits"})
# Scenarios replayed without the server's flags: the sidecar must infer max_num_seqs (kind 6).
WITHOUT_FLAGS = frozenset({"false-full-inferred"})
# Recordings of issue 11's scenarios (tests/e2e/scenarios_truth.py): the report tells their story.
STORIES = ("false-full-inferred", "workload-switch", "budget-bound", "pool-sized-head", "prefix-shared")


@dataclass(frozen=True)
class Frame:
    t: float
    running: float
    waiting: float
    usage: float
    preemptions: float
    steps: float
    prompt_tokens: float
    finished_by_bound: dict[float, float]  # prompt histogram: cumulative count per upper bound


def read_frame(t: float, text: str) -> Frame:
    v: dict[str, float] = {}
    buckets: dict[float, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                          "vllm:num_preemptions_total", "vllm:iteration_tokens_total_count",
                          "vllm:prompt_tokens_total"):
                v[s.name] = v.get(s.name, 0.0) + s.value
            elif s.name == "vllm:request_prompt_tokens_bucket":
                b = float(s.labels["le"])
                buckets[b] = buckets.get(b, 0.0) + s.value
    return Frame(t, v.get("vllm:num_requests_running", 0.0), v.get("vllm:num_requests_waiting", 0.0),
                 v.get("vllm:kv_cache_usage_perc", 0.0), v.get("vllm:num_preemptions_total", 0.0),
                 v.get("vllm:iteration_tokens_total_count", 0.0), v.get("vllm:prompt_tokens_total", 0.0), buckets)


@dataclass(frozen=True)
class Server:
    max_num_seqs: int
    blocks: int  # usable (block 0 is the null block)
    block_size: int
    max_model_len: int
    budget: int


def server_of(argv: list[str]) -> Server:
    def flag(name: str, default: int | None = None) -> int:
        if name in argv:
            return int(argv[argv.index(name) + 1])
        assert default is not None, name
        return default

    return Server(flag("--max-num-seqs"), flag("--num-gpu-blocks-override") - 1, flag("--block-size"),
                  flag("--max-model-len"), flag("--max-num-batched-tokens", CPU_DEFAULT_BUDGET))


@dataclass(frozen=True)
class Sent:
    at: float
    prompt_len: int
    shared_prefix: int = 0
    finished: float | None = None  # the client saw the answer (engine finished a little earlier)


def sent_requests(folder: Path, meta: dict[str, Any]) -> tuple[list[Sent], bool]:
    """What the load driver sent; (list, exact). Old recordings keep only the waves: closed-loop waves are
    expanded into one request per client per 0.1 s, which is enough to know the sizes in flight."""
    log = folder / "requests.jsonl"
    if log.exists():
        out = []
        for line in log.read_text().splitlines():
            r = json.loads(line)
            out.append(Sent(r["sent"], r["prompt_len"], r.get("shared_prefix", 0), r.get("finished")))
        return out, True
    start = meta["load"]["window"]["start_t"]
    out = []
    for w in meta["load"]["waves"]:
        at = start + w["delay_s"]
        if "closed_loop_s" in w:
            n = int(w["closed_loop_s"] / 0.1)
            out += [Sent(at + i * 0.1, w["prompt_len"]) for i in range(n)]
        else:
            out += [Sent(at, w["prompt_len"])] * w["requests"]
    return sorted(out, key=lambda s: s.at), False


def finished_with(f: Frame, prompt_len: int) -> float:
    """Requests of this prompt length the engine has finished, from its own prompt histogram."""
    bounds = sorted(f.finished_by_bound)
    for i, b in enumerate(bounds):
        if prompt_len <= b:
            below = f.finished_by_bound[bounds[i - 1]] if i else 0.0
            return f.finished_by_bound[b] - below
    return 0.0


def live_requests(f: Frame, sent: list[Sent], exact: bool) -> list[Sent]:
    """Requests sent and not finished at the frame, oldest first (FCFS: the first `running` of them run)."""
    if exact:
        return [s for s in sent if s.at <= f.t and (s.finished is None or s.finished > f.t)]
    done: dict[int, float] = {}
    live = []
    for s in sent:
        if s.at > f.t:
            continue
        done.setdefault(s.prompt_len, finished_with(f, s.prompt_len))
        if done[s.prompt_len] >= 1:
            done[s.prompt_len] -= 1
        else:
            live.append(s)
    return live


def head_request(f: Frame, sent: list[Sent], exact: bool) -> Sent | None:
    """The request at the head of the waiting queue: the oldest unfinished one after the running ones."""
    live = live_requests(f, sent, exact)
    if not live:
        return None
    i = int(f.running)
    return live[i] if i < len(live) else live[-1]


@dataclass
class Truth:
    label: str
    accept: frozenset[str]
    accept_one_shot: frozenset[str]
    why: str = ""
    # The label rests on max_num_seqs or max_num_batched_tokens (issue 19): without the server's flags one
    # observation must say what decides it (`undecided`), and `transient` only when the next step could admit the
    # whole queue (`fits_one_step`).
    config_decides: bool = False
    fits_one_step: bool = False
    undetermined: bool = False  # the recording cannot tell the truth of this frame: not scored


def judge(frames: list[Frame], i: int, srv: Server, sent: list[Sent], exact: bool,
          gauges_lie: bool = False) -> Truth:
    f = frames[i]
    prev = frames[i - 1] if i else None
    nxt = frames[i + 1] if i + 1 < len(frames) else None
    rose_now = prev is not None and f.preemptions > prev.preemptions
    rose_next = nxt is not None and nxt.preemptions > f.preemptions  # counted late: up to a scrape later
    storm = any(frames[j].preemptions > frames[j - 1].preemptions
                for j in range(max(1, i - 6), min(len(frames), i + 2)))  # a rise within 3 s before, 0.5 s after
    free = srv.blocks - round(f.usage * srv.blocks)
    # The nearest scrapes at another time (the recorder sometimes scrapes twice within milliseconds).
    before = next((g for g in reversed(frames[:i]) if g.t < f.t - 0.1), None)
    after = next((g for g in frames[i + 1:] if g.t > f.t + 0.1), None)
    stepping = (before is not None and f.steps > before.steps) or (after is not None and after.steps > f.steps)
    if gauges_lie and stepping and f.running == 0 and f.waiting == 0 and f.usage == 0:
        # Issue 19 kind 6: the engine steps around this scrape (its step counter rose into it or out of it) while
        # its gauges read idle (vLLM 0.32.0's Rust frontend under load: meta.json `gauges_while_progressing`; its
        # step counter rises steadily through the load window). The gauges cannot give the truth here; the
        # engine's own e2e latency says few requests were inside it at once, so whether the gauges lie or the
        # requests queue in the frontend, outside the engine, is not decided by the recording: the frame is not
        # scored (`Score.undetermined`); tests/unit/test_issue19_kinds.py kind 6 holds the sidecar to "never ok".
        return Truth("gauges_unreliable", ANY_VERDICT, ANY_VERDICT, "steps rose while running, waiting, usage read 0",
                     undetermined=True)
    if f.waiting <= 0:
        if f.running == 0 and f.usage > 0:
            return Truth("leak", frozenset({"leak", "ok"}), frozenset({"leak", "ok"}), "blocks held, nothing to do")
        if rose_now:
            return Truth("ok", frozenset({"ok", "preempting"}), frozenset({"ok"}), "preempted, re-admitted")
        return Truth("ok", frozenset({"ok"}), frozenset({"ok"}))
    head = head_request(f, sent, exact)
    head_tokens = 0 if head is None else head.prompt_len - head.shared_prefix
    head_blocks = math.ceil(head_tokens / srv.block_size) if head else 0
    if head is not None and math.ceil(head.prompt_len / srv.block_size) > srv.blocks:
        return Truth("never_fits", frozenset({"never_fits"}), frozenset({"never_fits"}),
                     f"head prompt {head.prompt_len} tokens > pool {srv.blocks * srv.block_size}")
    if rose_now or rose_next:
        # The engine preempts: memory binds, whether or not every slot is taken (never "wait for a slot").
        return Truth("preempting", frozenset({"preempting", "kv_full"}), frozenset({"preempting", "kv_full"}),
                     "counter rose at this or the next scrape")
    if f.running >= srv.max_num_seqs:
        if storm and free <= 1:
            # Slots taken and the pool exhausted in a storm: memory binds too, so slots_full ("not for memory")
            # would be wrong.
            return Truth("preempting", frozenset({"preempting", "kv_full"}), frozenset({"preempting", "kv_full"}),
                         f"slots full, {free} free blocks, storm")
        also = {"preempting"} if storm else set()
        return Truth("slots_full", frozenset({"slots_full"} | also), frozenset({"slots_full"} | also),
                     config_decides=True, fits_one_step=head is not None and head_blocks <= free
                     and f.waiting <= free // max(head_blocks, 1))
    if f.usage >= FULL_USAGE or (head is not None and head_blocks > free):
        typical = sorted(s.prompt_len for s in sent if s.at <= f.t and s is not head)
        larger = head is not None and bool(typical) and head.prompt_len > typical[len(typical) // 2]
        also = {"preempting"} if storm else set()
        if larger and f.usage < FULL_USAGE:
            # With max_num_seqs at the running count this frame would be slots_full (above): one observation
            # without the server's flags may say that the cap decides.
            return Truth("head_of_line", frozenset({"head_of_line", "kv_full"} | also),
                         frozenset({"head_of_line", "kv_full", "transient"} | also),
                         f"head {head_blocks} blocks > {free} free, larger than typical", config_decides=True)
        return Truth("kv_full", frozenset({"kv_full"} | also), frozenset({"kv_full"} | also),
                     f"head {head_blocks} blocks vs {free} free, usage {f.usage:.2f}")
    # A running request whose uncached prompt is at least the step's token budget prefills with all of it
    # (the engine finishing prefills meanwhile: prompt_tokens_total rose), so nothing waiting is admitted.
    running_prompts = [s.prompt_len - s.shared_prefix for s in live_requests(f, sent, exact)[:int(f.running)]]
    if prev is not None and f.prompt_tokens > prev.prompt_tokens and running_prompts \
            and max(running_prompts) >= srv.budget:
        return Truth("budget_full", frozenset({"budget_full"}), frozenset({"budget_full", "transient"}),
                     f"running prompts of {max(running_prompts)} tokens >= budget {srv.budget}", config_decides=True)
    # Issue 19, kinds 8 and 9: the next step admits min(free slots, requests whose prompt fits the free blocks); a
    # queue larger than that is bound by whichever runs out first, whether or not running equals max_num_seqs (with
    # hundreds of slots, requests finish and are replaced between steps: the cap is met within one step's turnover).
    free_slots = srv.max_num_seqs - int(f.running)
    sizes = sorted(s.prompt_len - s.shared_prefix for s in sent if s.at <= f.t)
    # The head's blocks; where the driver's log cannot name the head (old recordings keep only the waves), the
    # typical request's.
    step_blocks = head_blocks if head is not None else (
        math.ceil(sizes[len(sizes) // 2] / srv.block_size) if sizes else 0)
    kv_room = free // max(step_blocks, 1)
    also = {"preempting"} if storm else set()
    if step_blocks and f.waiting > min(free_slots, kv_room):
        if free_slots <= kv_room:
            return Truth("slots_full", frozenset({"slots_full"} | also), frozenset({"slots_full"} | also),
                         f"{f.waiting:.0f} wait for {free_slots} free slots (the blocks hold {kv_room})",
                         config_decides=True)
        return Truth("kv_full", frozenset({"kv_full"} | also), frozenset({"kv_full"} | also),
                     f"{f.waiting:.0f} wait, the free blocks hold {kv_room} heads of {step_blocks}",
                     config_decides=True)
    if storm:
        # Between admissions in a storm: never `ok` while requests wait (issue 19).
        return Truth("preempting", frozenset({"preempting", "kv_full", "transient"}),
                     frozenset({"preempting", "kv_full", "transient"}), "storm, between admissions")
    # Room for the head, a free slot, budget left: the engine admits it at its next step (never `ok` while requests
    # wait, issue 19).
    return Truth("transient", frozenset({"transient", "slots_full", "kv_full", "budget_full", "head_of_line"}),
                 frozenset({"transient"}), "between steps", fits_one_step=True)


@dataclass
class Score:
    scenario: str
    mode: str
    frames: int = 0
    agree: int = 0
    bad_false_full: int = 0
    confusion: Counter[tuple[str, str]] = field(default_factory=Counter)
    per_truth: Counter[tuple[str, bool]] = field(default_factory=Counter)  # (truth, agreed) -> frames
    misses: list[str] = field(default_factory=list)
    undetermined: int = 0  # frames with no capacity to judge (no flags, a pool vLLM does not export): not scored
    missed_false_full: int = 0  # slots-bound frames past the hold, below full usage, not flagged (must be 0)
    lead_up: int = 0  # frames in the lead-up to a preemption storm
    raises: int = 0  # of them, frames whose advice raises max_num_seqs (must be 0)
    undecided_named: int = 0  # of `agree`: one-shot undecided answers naming the truth among their cases

    @property
    def agreement(self) -> float:
        return self.agree / self.frames if self.frames else 1.0


def _target(meta: dict[str, Any], settings: Settings | Target) -> Target:
    target = settings if isinstance(settings, Target) else Target(settings)
    fixtures.as_recorded(target, meta)
    return target


def lead_up(frames: list[Frame]) -> set[int]:
    """Frames in the lead-up to a preemption storm: from the first frame with requests waiting (or `LEAD_UP`
    seconds before) up to each counter rise, inclusive. No scrape there may advise raising max_num_seqs."""
    out: set[int] = set()
    for j in range(1, len(frames)):
        if frames[j].preemptions > frames[j - 1].preemptions:
            out |= {i for i in range(j + 1) if frames[j].t - frames[i].t <= LEAD_UP}
    return out


def raises_max_num_seqs(e: EngineReport) -> bool:
    """The answer advises raising max_num_seqs without saying what keeps the raise safe. Issue 19 (kind 7) wants a
    raise whenever slots bind and the pool holds more requests of the observed size, with the condition stated
    when the profile is young; issue 11 wants none before a storm the profile could not foresee. Both hold when a
    raise in the lead-up states its condition (`Advice.condition`: requests staying within the observed size,
    and how much evidence backs it), and none is given once requests in flight outgrow the profile."""
    return any(a.setting == "max_num_seqs" and a.direction == "raise" and not getattr(a, "condition", "")
               for a in e.advice)


def score(folder: Path) -> tuple[Score, Score, Score]:
    rec = recording.load(folder)
    sent = sent_requests(folder, rec.meta)
    given = None if folder.name in WITHOUT_FLAGS else [str(a) for a in rec.meta["server_argv"]]
    return score_timeline(f"{folder.parent.name}/{folder.name}", rec.meta, rec.frames, [sent] * len(rec.frames),
                          given)


RESTART = ("preemption", "false-full")  # vllm-0.32.0 recordings of one server config, spliced across a restart


def restart_timeline() -> tuple[dict[str, Any], list[tuple[float, str]], list[tuple[list[Sent], bool]]]:
    """Two real 0.32.0 recordings of the same server flags as one server restarted between them: the storm, then
    (every counter from 0 again, as a restarted vLLM exports them) the false-full incident. Each part keeps the
    load driver's own requests. The recorder cannot restart vLLM mid-recording under load; at the exposition a
    restart is exactly this splice."""
    root = FIXTURES / "vllm-0.32.0"
    first, second = (recording.load(root / n) for n in RESTART)
    shift = first.frames[-1][0] + 0.5 - second.frames[0][0]
    frames = list(first.frames) + [(t + shift, text) for t, text in second.frames]
    s1 = sent_requests(root / RESTART[0], first.meta)
    s2 = sent_requests(root / RESTART[1], second.meta)
    s2 = ([Sent(x.at + shift, x.prompt_len, x.shared_prefix, None if x.finished is None else x.finished + shift)
           for x in s2[0]], s2[1])
    return first.meta, frames, [s1] * len(first.frames) + [s2] * len(second.frames)


def score_timeline(name: str, meta: dict[str, Any], timeline: list[tuple[float, str]],
                   sent_of: list[tuple[list[Sent], bool]], given: list[str] | None) -> tuple[Score, Score, Score]:
    argv = [str(a) for a in meta["server_argv"]]
    srv = server_of(argv)
    frames = [read_frame(t, text) for t, text in timeline]
    # The recorder counted frames that made progress while running, waiting and usage all read 0 (kind 6).
    gauges_lie = (meta.get("gauges_while_progressing") or {}).get("of_which_running_waiting_usage_all_0", 0) > 0
    storm = lead_up(frames)
    interval = float(meta.get("interval", 0.5))
    settings = Settings("recorded", vllm_args=given, discover_cmdline=False,
                        thresholds=Thresholds(false_full_hold=max(2.0, 4 * interval)))
    bare = Settings("recorded", vllm_args=None, discover_cmdline=False, thresholds=settings.thresholds)
    sidecar = _target(meta, settings)
    out = (Score(name, "sidecar"), Score(name, "one-shot"), Score(name, "one-shot-noflags"))
    slots_since: float | None = None  # since when the truth has been slots_full without a break
    for i, (t, text) in enumerate(timeline):
        sent, exact = sent_of[i]
        truth = judge(frames, i, srv, sent, exact, gauges_lie)
        slots_since = (slots_since if slots_since is not None else t) if truth.label == "slots_full" else None
        # An engine whose capacity cannot be derived (e.g. a pool vLLM does not export, without flags) is
        # undetermined: the report says so, the frame is not judged.
        ours_live = _maybe(sidecar.observe(t, text).engines)
        ours_once = _maybe(_target(meta, one_shot(settings)).observe(t, text, gauges_only=True).engines)
        ours_bare = _maybe(_target(meta, one_shot(bare)).observe(t, text, gauges_only=True).engines)
        # Without the cap one observation cannot tell "all slots taken" from "between two steps" (`transient`, only
        # where the next step could admit the whole queue: issue 19 kind 8), or from a larger cap (`undecided`).
        bare_accept = truth.accept_one_shot | ({"undecided"} if truth.config_decides else set()) | (
            {"transient"} if truth.config_decides and truth.fits_one_step else set())
        once_accept = truth.accept_one_shot if given is not None else bare_accept
        # Behind vLLM's Rust frontend (its /version says so) gauges reading 0 running, 0 waiting and 0 usage may
        # be idle or a loaded engine's zero reading: one observation cannot tell, `undecided` is its honest answer.
        f = frames[i]
        live_accept = truth.accept
        if meta.get("frontend") == "rust" and f.running == 0 and f.waiting == 0 and f.usage == 0:
            once_accept, bare_accept = once_accept | {"undecided"}, bare_accept | {"undecided"}
            if i == 0 or (f.steps, f.prompt_tokens) != (frames[i - 1].steps, frames[i - 1].prompt_tokens):
                # The sidecar's first look is one observation too; after steps, zero gauges are no proof of idle.
                live_accept = live_accept | {"undecided"}
        for s, maybe, accept in ((out[0], ours_live, live_accept), (out[1], ours_once, once_accept),
                                 (out[2], ours_bare, bare_accept)):
            if maybe is None or truth.undetermined:
                s.undetermined += 1
                continue
            ours = maybe
            s.frames += 1
            verdict = str(ours.verdict)
            s.confusion[(truth.label, verdict)] += 1
            # One observation's `undecided` naming the truth among its cases agrees, as in the engine-truth score
            # (engine_score.named_case): with flags only where every case is over evidence no flag states.
            named = (s is not out[0] and verdict == "undecided" and verdict not in accept
                     and engine_score.named_case(engine_score.Label(truth.label, False, ""), ours.decided_by,
                                                 flags=s is out[1] and given is not None))
            s.undecided_named += named
            s.per_truth[(truth.label, verdict in accept or named)] += 1
            if verdict in accept or named:
                s.agree += 1
            else:
                s.misses.append(f"t={t:.1f} truth={truth.label} ({truth.why}) ours={verdict}")
            inferred_cap = s is out[2] or (ours.config.max_num_seqs is not None
                                           and str(ours.config.max_num_seqs.source) == "inferred")
            held = slots_since is not None and t - slots_since >= settings.thresholds.false_full_hold
            if s.mode == "sidecar" and held and frames[i].usage < FULL_USAGE and not ours.false_full:
                # Issue 19: a slots-bound wait held past the hold is flagged, however few requests finished.
                s.missed_false_full += 1
                s.misses.append(f"t={t:.1f} truth=slots_full for {t - slots_since:.1f} s: false_full not raised")
            if ours.false_full and (truth.label in NO_FALSE_FULL or (s.mode != "sidecar" and inferred_cap
                                                                     and verdict == "slots_full")):
                s.bad_false_full += 1
                s.misses.append(f"t={t:.1f} truth={truth.label}: flagged false_full"
                                + (" from a cap one observation inferred" if truth.label not in NO_FALSE_FULL else ""))
            if i in storm:
                s.lead_up += 1
                if raises_max_num_seqs(ours):
                    s.raises += 1
                    s.misses.append(f"t={t:.1f} before a preemption storm: advises raising max_num_seqs")
    return out


def _engine(engines: list[EngineReport]) -> EngineReport:
    assert len(engines) == 1
    return engines[0]


def _maybe(engines: list[EngineReport]) -> EngineReport | None:
    assert len(engines) <= 1
    return engines[0] if engines else None


def story(folder: Path) -> list[str]:
    """What the engine did next to what the sidecar said, for one recording (the report's per-scenario lines)."""
    rec = recording.load(folder)
    meta = rec.meta
    argv = [str(a) for a in meta["server_argv"]]
    frames = [read_frame(t, text) for t, text in rec.frames]
    given = None if folder.name in WITHOUT_FLAGS else argv
    settings = Settings("recorded", vllm_args=given, discover_cmdline=False,
                        thresholds=Thresholds(false_full_hold=max(2.0, 4 * float(meta.get("interval", 0.5)))))
    target = _target(meta, settings)
    ours = [_engine(target.observe(t, text).engines) for t, text in rec.frames]
    try:
        from exporter.planning import advice  # the one advice engine, as diagnose and recommend use it
    except ImportError:  # scoring an older checkout (the "before" report): no advice engine there
        advice = None  # type: ignore[assignment]

    rises = [i for i in range(1, len(frames)) if frames[i].preemptions > frames[i - 1].preemptions]
    waiting = [i for i, f in enumerate(frames) if f.waiting > 0]
    said = Counter(str(ours[i].verdict) for i in waiting)
    preempted = frames[-1].preemptions - frames[0].preemptions
    engine = (f"max running {max(f.running for f in frames):.0f}, max waiting {max(f.waiting for f in frames):.0f}, "
              f"max usage {max(f.usage for f in frames):.2f}, preemptions {preempted:.0f}"
              + (f" (counter first rose at t={frames[rises[0]].t:.1f} s)" if rises else ""))
    lines = [f"- **{folder.name}**: engine: {engine}; ours on the {len(waiting)} frames with requests waiting: "
             + ", ".join(f"{v} {n}" for v, n in said.most_common())
             + f"; false-full flagged on {sum(o.false_full for o in ours)} frames"]
    if rises:
        first = next((i for i, o in enumerate(ours) if o.verdict.value == "preempting"), None)
        raised = -1 if advice is None else sum(1 for o in ours[:rises[0]] if raises_max_num_seqs(o))
        lines.append(f"  - first `preempting` at t={frames[first].t:.1f} s" if first is not None
                     else "  - never preempting")
        lines.append("  - scrapes advising an unconditional max_num_seqs raise before the counter first rose: "
                     f"{raised}")
    caps = Counter(o.config.max_num_seqs.value for o in ours if o.config.max_num_seqs is not None
                   and str(o.config.max_num_seqs.source) == "inferred")
    if caps:
        lines.append(f"  - max_num_seqs inferred (frames: value): {dict(caps)}; real: {server_of(argv).max_num_seqs}")
    if folder.name == "prefix-shared":
        burst = next(i for i, f in enumerate(frames) if f.running >= 2)
        idle = [o for o, f in zip(ours[:burst], frames[:burst], strict=True) if f.running == 0 and f.waiting == 0]
        busy = max(frames, key=lambda f: f.running)
        if idle:
            h = idle[-1].headroom
            lines.append(f"  - admission headroom at idle before the burst: {h.admission_headroom_requests} (prompt "
                         f"{h.prompt_blocks} blocks: no hit on the shared prefix seen yet); the engine then ran "
                         f"{busy.running:.0f} at once; while busy, running + admission headroom = what it admits, "
                         "within 1 (tests/unit/test_truth_kinds.py)")
    return lines


def not_scored_reason(folder: Path) -> str | None:
    """Why a recording is left out of the score, or None. The truth above encodes V1's scheduler (null block,
    admission as in vllm/v1/core/sched/scheduler.py); V0 admits with a watermark and swaps, so its recordings
    are judged by tests/unit/test_matrix.py instead. A recording whose engine died mid-load shows frozen gauges
    the load driver's log cannot explain."""
    meta = json.loads((folder / "meta.json").read_text())
    if meta.get("engine_generation") == "V0":
        return "V0 engine: its scheduler (watermark, swap) is not the one this truth encodes; judged in test_matrix"
    died = [p for p in meta.get("problems") or [] if "had died" in p or "request errors" in p]
    if died:
        return f"the engine died during the recording ({died[0][:80]})"
    return None


def recordings() -> list[Path]:
    """The recorded timelines scored with the inferred truth above: those without the engine's own steps (see
    `not_scored_reason` for the rest; tests/engine_score.py judges the ones with steps)."""
    return [f for f in sorted(p.parent for p in FIXTURES.glob("vllm-*/*/timeline.jsonl.gz"))
            if not engine_score.has_steps(f) and not_scored_reason(f) is None]


def engine_recordings() -> list[Path]:
    """The recorded timelines that carry the engine's own per-step truth (tests/engine_score.py)."""
    return [f for f in engine_score.recordings(FIXTURES) if not_scored_reason(f) is None]


def unscored() -> list[tuple[Path, str]]:
    """Recorded timelines left out of the score, with the reason."""
    out = []
    for f in sorted(p.parent for p in FIXTURES.glob("vllm-*/*/timeline.jsonl.gz")):
        reason = not_scored_reason(f)
        if reason is not None:
            out.append((f, reason))
    return out


def render(scores: list[Score]) -> str:
    lines = ["# Verdict agreement with the engine's truth", "",
             "Generated by `make score` (`python -m tests.truth`). Recordings that carry the engine's own per-step "
             "truth (the recorder inside vLLM, tests/e2e/truth_plugin) are judged from it (tests/engine_score.py, "
             "first section); the others, recorded before the recorder existed or from releases it has no adapter "
             "for (V0, 0.8.5 and the releases between 0.10 and 0.32), keep the truth inferred from gauges and the "
             "load driver "
             "(tests/truth.py, second section).",
             "Every recorded real timeline under tests/fixtures/vllm-*/ is scored except those listed below. "
             "The sidecar is replayed on the "
             "recording's clock, one scrape per recorded frame (0.5 s); one-shot",
             "`diagnose` judges every frame alone. Both get the recorded command line as `--vllm-args`, except "
             f"{', '.join(sorted(WITHOUT_FLAGS))} (no flags: max_num_seqs must be inferred). `one-shot-noflags` is "
             "`diagnose FILE` with no flag at all on every frame (a slots_full frame may then be called transient: "
             "one observation cannot know the cap; a false-full from a cap it inferred counts as forbidden).",
             f"Advice: on every frame within {LEAD_UP:.0f} s before a rise of the preemption counter (the lead-up to "
             "a storm), no mode may advise raising max_num_seqs without stating what keeps the raise safe.", ""]
    left = unscored()
    if left:
        lines += ["Not scored (and why):", ""]
        lines += [f"- {f.parent.name}/{f.name}: {why}" for f, why in left]
        lines.append("")
    releases = sorted({s.scenario.split("/")[0] for s in scores})
    lines += ["| release | frames | sidecar agree | one-shot agree | one-shot no flags agree | false-full where "
              "forbidden (sidecar / one-shot / no flags) | unconditional max_num_seqs raises before a storm (same) |",
              "|---|---|---|---|---|---|---|"]
    for rel in releases:
        by = {m: [s for s in scores if s.mode == m and s.scenario.startswith(rel + "/")] for m in MODES}
        n = sum(s.frames for s in by["sidecar"])
        lines.append(f"| {rel} | {n} | " + " | ".join(f"{100 * sum(s.agree for s in by[m]) / max(n, 1):.1f} %"
                                                       for m in MODES)
                     + " | " + " / ".join(str(sum(s.bad_false_full for s in by[m])) for m in MODES)
                     + " | " + " / ".join(f"{sum(s.raises for s in by[m])} of {sum(s.lead_up for s in by[m])}"
                                          for m in MODES) + " |")
    lines.append("")
    for mode in MODES:
        ss = [s for s in scores if s.mode == mode]
        total = sum(s.frames for s in ss)
        agree = sum(s.agree for s in ss)
        bad = sum(s.bad_false_full for s in ss)
        missed = sum(s.missed_false_full for s in ss)
        named = sum(s.undecided_named for s in ss)
        lines += [f"## {mode}: {agree}/{total} frames agree ({100 * agree / max(total, 1):.1f} %"
                  + (f"; {named} of them undecided, naming the truth among their cases: without them "
                     f"{100 * (agree - named) / max(total, 1):.1f} %" if named else "") + "), "
                  f"{bad} false-full on KV-bound/preempting/transient frames, "
                  + (f"{missed} slots-bound frames past the hold not flagged, " if mode == "sidecar" else "") +
                  f"{sum(s.raises for s in ss)} of {sum(s.lead_up for s in ss)} lead-up frames advise an unconditional "
                  "max_num_seqs raise" + (f", {und} frames undetermined (capacity not derivable, or gauges "
                                          "reading 0 while the engine steps: not scored)"
                                          if (und := sum(s.undetermined for s in ss)) else ""), "",
                  "| recording | frames | agree | false-full where forbidden |", "|---|---|---|---|"]
        lines += [f"| {s.scenario} | {s.frames} | {100 * s.agreement:.1f} % | {s.bad_false_full} |" for s in ss]
        per: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # truth -> [agreed, frames]
        conf: Counter[tuple[str, str]] = Counter()
        for s in ss:
            conf.update(s.confusion)
            for (truth, agreed), n in s.per_truth.items():
                per[truth][0] += n if agreed else 0
                per[truth][1] += n
        lines += ["", "| truth | frames | agree |", "|---|---|---|"]
        for truth, (agreed, n) in sorted(per.items()):
            lines.append(f"| {truth} | {n} | {100 * agreed / n:.1f} % |")
        ours_cols = sorted({o for _t, o in conf})
        lines += ["", "Confusion (rows: truth, columns: our verdict):", "",
                  "| truth \\ ours | " + " | ".join(ours_cols) + " |", "|---" * (len(ours_cols) + 1) + "|"]
        for truth in sorted({t for t, _o in conf}):
            lines.append(f"| {truth} | " + " | ".join(str(conf.get((truth, o), 0)) for o in ours_cols) + " |")
        lines.append("")
    lines += ["## What the engine did, next to what the sidecar said", ""]
    for folder in recordings():
        if folder.name in STORIES:
            lines += story(folder)
    lines += ["", "Recordings of other releases (tests/fixtures/vllm-*/, the version matrix) are scored alike; their "
              "admission rule is the release's (exporter/engines/vllm/releases.py `rules`)."]
    lines += ["", "## Before issue 11", "",
              "The same scorer on the same recordings with the code before issue 11 (commit 1d1bc0a): "
              "[SCORE-before.md](SCORE-before.md).", ""]
    lines += ["## Frames that disagree", ""]
    for s in scores:
        for m in s.misses:
            lines.append(f"- {s.mode} {s.scenario}: {m}")
    return "\n".join(lines) + "\n"


def all_scores() -> list[Score]:
    """Every recording, and the restart splice (counters falling to 0 mid-timeline)."""
    meta, frames, sent = restart_timeline()
    restart = score_timeline("vllm-0.32.0/restart (preemption, then false-full)", meta, frames, sent,
                             [str(a) for a in meta["server_argv"]])
    return [s for folder in recordings() for s in score(folder)] + list(restart)


ENGINE_SIDECAR_MIN, ENGINE_ONE_SHOT_MIN, ENGINE_ADMISSION_MIN = 0.98, 0.95, 0.95  # the evidence-first bars
MISS_EXAMPLES = 4  # concrete frames listed per kind of miss


def _pct(a: int, n: int) -> str:
    return f"{100 * a / n:.1f} %" if n else "-"


def engine_share(scores: list[engine_score.EngineScore], mode: str) -> tuple[int, int]:
    ss = [s for s in scores if s.mode == mode]
    return sum(s.agree for s in ss), sum(s.frames for s in ss)


def engine_admission(scores: list[engine_score.EngineScore]) -> tuple[int, int]:
    ss = [s for s in scores if s.mode == "sidecar"]
    return sum(s.adm_within for s in ss), sum(s.adm_frames for s in ss)


def render_engine(scores: list[engine_score.EngineScore]) -> list[str]:
    """SCORE.md's part judged from the engine's own steps: per release and server shape, then the misses."""
    if not scores:
        return []
    lines = ["## From the engine's own truth", "",
             "Recordings with `engine-steps.jsonl.gz`: vLLM's scheduler wrote, every step, why its admission scan "
             "stopped (tests/e2e/truth_plugin); each frame is judged by the step that starts from the state it shows "
             "(tests/engine_score.py): our verdict says what binds the next step, and that step's scan is the engine's "
             "answer. The token budget is the loop's first test and running prefill chunks are scheduled before it "
             "(vllm/v1/core/sched/scheduler.py:208/:334 @0.10.2, :659/:912 @0.32.0), so a budget stop masks what "
             "allocate_slots would say: it also accepts kv_full/head_of_line when the head's last refusal needed more "
             "blocks than are free at that step, and slots_full when every slot is taken. Read against the steps, the "
             "budget stops are the engine's real limit where they dominate (0.10.2 prod-kv: one 28k-token prompt "
             "admitted every ~4 steps of 8,192 tokens while 19,744 to 4,375 blocks stayed free, no KV refusal for 90 "
             "s). Admission: for frames with a waiting head, min(our admission headroom, waiting) "
             "against what the engine admitted from that step on until its scan stopped on capacity (KV refused, slots "
             "taken, queue empty, deferral) rather than on the token budget: the budget is the loop's first test "
             "(vllm/v1/core/sched/scheduler.py:334 @0.10.2, :912 @0.32.0) and running prefill chunks take it first, "
             "so a budget-stopped step says how fast the queue goes in, not how many fit (`capacity_admitted`); within "
             f"±{engine_score.ADMISSION_TOLERANCE}. Where a completion or preemption came before that stop, the count "
             "is a lower bound and only under-counting is a miss; `exact` counts the frames whose count is not a "
             "bound. A frame whose gauges show nothing waiting is `ok` whatever its step then scanned: its gauges are "
             "the stats vLLM made after the previous step (`make_stats`, vllm/v1/core/sched/scheduler.py:1011 "
             "@0.10.2, :2409 @0.32.0), and requests that arrived since are ones it never showed. A budget stop also "
             "accepts what answered for capacity when the scan next reached allocate_slots or the slot test "
             "(`capacity_stop`: the first following step that did not stop on the budget, while nothing finished "
             "or was preempted): kv_full/head_of_line after a KV refusal, slots_full after max_num_seqs; the head's "
             "need is its last refusal's, else its next one's while it stays the head. A step whose scan skipped "
             "requests for a deferral (the LoRA cap) also accepts deferred; one that admitted the whole queue with "
             "0 tokens of budget left also accepts budget_full, and a false-full flag there is not forbidden "
             "(`spent_to_empty`: the same frame before it stops on the budget). One-shot: an `undecided` "
             "answer agrees only when one of its `decided_by` cases names the limit the engine hit at that step "
             "(its reason or one it also reports: slots, token budget, KV, deferral, or `none` for a queue "
             "admitted whole); with flags only where every case's input is evidence no flag states (the queue "
             "head's size, its cached blocks, the requests the LoRA cap lets through), without flags whatever the "
             "input. Those frames are counted apart (`undecided, named`, and the share without them is given), and "
             "the rule never applies to the sidecar. False-full: "
             "flagged although the engine refused the head for KV, preempted, or admitted everything (forbidden), and "
             "flagged where a non-KV reason held for the hold time (found). Safe headroom: frames saying > 0 after "
             f"which the engine preempted within {engine_score.SAFE_WINDOW_S:.0f} s.", "",
             f"Bars (issue 22): sidecar >= {100 * ENGINE_SIDECAR_MIN:.0f} %, one-shot with flags >= "
             f"{100 * ENGINE_ONE_SHOT_MIN:.0f} %, admission within ±1 on >= {100 * ENGINE_ADMISSION_MIN:.0f} % of "
             "frames with a waiting head.", ""]
    a, n = engine_share(scores, "sidecar")
    b, _ = engine_share(scores, "one-shot")
    c, _ = engine_share(scores, "one-shot-noflags")
    adm, adm_n = engine_admission(scores)
    side_all = [s for s in scores if s.mode == "sidecar"]
    ex, ex_n = sum(s.adm_within_exact for s in side_all), sum(s.adm_frames_exact for s in side_all)
    ranged = sum(s.adm_ranged for s in side_all)
    fewest = sum(s.adm_within_fewest for s in side_all)
    named = sum(s.undecided_named for s in scores if s.mode == "one-shot-noflags")
    named_flags = sum(s.undecided_named for s in scores if s.mode == "one-shot")
    lines += [f"All: {n} frames; sidecar {_pct(a, n)}, one-shot {_pct(b, n)} ({named_flags} of them undecided, "
              f"naming the engine's reason among cases over evidence no flag states; without them "
              f"{_pct(b - named_flags, n)}), one-shot without flags {_pct(c, n)} "
              f"({named} of them undecided, naming the engine's reason among its cases; without them "
              f"{_pct(c - named, n)}), "
              f"admission ±1 {_pct(adm, adm_n)} of {adm_n} (exact counts: {_pct(ex, ex_n)} of {ex_n}; "
              f"{ranged} answered with a range: the LoRA cap's, or the queue head's size between the profile's "
              f"typical prompt and its quantile; by the range's low end alone {_pct(fewest, adm_n)}).", ""]
    lines += ["| release | shape | frames | sidecar | one-shot | one-shot no flags | admission ±1 | admission ±1, "
              "exact counts | false-full forbidden (sidecar / one-shot / no flags) | false-full found "
              "(sidecar) | safe > 0, then preempted |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    groups = sorted({(s.release, s.shape) for s in scores})
    for rel, shape in groups:
        by = {m: [s for s in scores if s.mode == m and s.release == rel and s.shape == shape]
              for m in engine_score.MODES}
        n = sum(s.frames for s in by["sidecar"])
        agree = [_pct(sum(s.agree for s in by[m]), sum(s.frames for s in by[m])) for m in engine_score.MODES]
        side = by["sidecar"]
        lines.append(f"| {rel} | {shape} | {n} | " + " | ".join(agree)
                     + f" | {_pct(sum(s.adm_within for s in side), sum(s.adm_frames for s in side))} of "
                       f"{sum(s.adm_frames for s in side)} | "
                       f"{_pct(sum(s.adm_within_exact for s in side), sum(s.adm_frames_exact for s in side))} of "
                       f"{sum(s.adm_frames_exact for s in side)} | "
                     + " / ".join(str(sum(s.ff_flagged_kv for s in by[m])) for m in engine_score.MODES)
                     + f" | {sum(s.ff_found for s in side)} of {sum(s.ff_true for s in side)} | "
                       f"{sum(s.safe_bad for s in side)} of {sum(s.safe_frames for s in side)} |")
    lines += ["", "| recording | frames | sidecar | one-shot | no flags | undecided, named (flags / no flags) | "
              "admission ±1 | engine: admitted / preempted / refused for KV / deferred; frames stopped by |",
              "|---|---|---|---|---|---|---|---|"]
    for name in sorted({s.scenario for s in scores}):
        by = {s.mode: s for s in scores if s.scenario == name}
        counts = engine_score.engine_counts(FIXTURES / name)
        stops = ", ".join(f"{k} {v}" for k, v in sorted(counts.get("frame_stops", {}).items(), key=lambda kv: -kv[1]))
        lines.append(f"| {name} | {by['sidecar'].frames} | " + " | ".join(_pct(by[m].agree, by[m].frames)
                                                                         for m in engine_score.MODES)
                     + f" | {by['one-shot'].undecided_named} / {by['one-shot-noflags'].undecided_named}"
                     + f" | {_pct(by['sidecar'].adm_within, by['sidecar'].adm_frames)} of {by['sidecar'].adm_frames} | "
                     + f"{counts.get('admitted', '?')} / {counts.get('preempted', '?')} / "
                     + f"{counts.get('refusals', '?')} / "
                     + f"{sum(counts.get('deferrals', {}).values())}; {stops} |")
    for rel, shape in groups:
        for mode in engine_score.MODES:
            conf: Counter[tuple[str, str]] = Counter()
            for s in scores:
                if s.mode == mode and s.release == rel and s.shape == shape:
                    conf.update(s.confusion)
            cols = sorted({o for _t, o in conf})
            lines += ["", f"Confusion, {rel}, {shape}, {mode} (rows: the engine's reason, columns: our verdict):", "",
                      "| engine \\ ours | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
            for lab in sorted({t for t, _o in conf}):
                lines.append(f"| {lab} | " + " | ".join(str(conf.get((lab, o), 0)) for o in cols) + " |")
    lines += ["", "### Misses by kind (input for issue 19)", "",
              f"At most {MISS_EXAMPLES} frames per kind: recording, frame index (timeline line, from 0), the engine's "
              "truth, ours.", ""]
    kinds: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for s in scores:
        for i, lab, why, ours in s.misses:
            kinds[(s.mode, lab, ours)].append(f"{s.scenario} #{i} ({why})")
        for i, lab, what in s.ff_misses:
            kinds[(s.mode, f"false-full {what}", lab)].append(f"{s.scenario} #{i}")
        if s.mode == "sidecar":
            for i, pred, w, got in s.adm_misses:
                kinds[("sidecar", "admission headroom", "off by more than 1")].append(
                    f"{s.scenario} #{i} (ours {pred}, waiting {w}, engine admitted {got})")
            for i, safe, pre in s.safe_misses:
                kinds[("sidecar", "safe headroom", "> 0 before preemptions")].append(
                    f"{s.scenario} #{i} (safe {safe}, {pre} preempted within {engine_score.SAFE_WINDOW_S:.0f} s)")
    for (mode, lab, ours), where in sorted(kinds.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
        lines.append(f"- {mode}: engine {lab}, ours {ours}: {len(where)} frames; e.g. "
                     + "; ".join(where[:MISS_EXAMPLES]))
    return [*lines, ""]


def engine_acceptable(scores: list[engine_score.EngineScore]) -> bool:
    """Issue 22's bars on the engine-truth recordings."""
    a, n = engine_share(scores, "sidecar")
    b, _ = engine_share(scores, "one-shot")
    adm, adm_n = engine_admission(scores)
    return (a >= ENGINE_SIDECAR_MIN * n and b >= ENGINE_ONE_SHOT_MIN * n and adm >= ENGINE_ADMISSION_MIN * adm_n
            and not any(s.ff_flagged_kv for s in scores))


def all_engine_scores() -> list[engine_score.EngineScore]:
    return [s for folder in engine_recordings() for s in engine_score.score(folder)]


def render_sweep(root: Path) -> list[str]:
    """The randomized sweep (`make score`: tests.e2e.production --sweep), recorded into `root`, not committed."""
    folders = [f for f in engine_score.recordings(root) if not_scored_reason(f) is None]
    if not folders:
        return []
    scores = [s for f in folders for s in engine_score.score(f)]
    lines = ["## Randomized sweep (this machine's last `make score`, not committed fixtures)", "",
             "Workloads drawn from seeds (tests/e2e/workload.py `random_workload`) on the production shape, judged "
             "like the fixtures above.", "",
             "| recording | workload | frames | sidecar | one-shot | no flags | admission ±1 |",
             "|---|---|---|---|---|---|---|"]
    for f in folders:
        by = {s.mode: s for s in scores if s.scenario == f"{f.parent.name}/{f.name}"}
        wl = json.loads((f / "meta.json").read_text())["load"]["workload"]
        lines.append(f"| {f.name} | `{wl}` | {by['sidecar'].frames} | "
                     + " | ".join(_pct(by[m].agree, by[m].frames) for m in engine_score.MODES)
                     + f" | {_pct(by['sidecar'].adm_within, by['sidecar'].adm_frames)} of {by['sidecar'].adm_frames} |")
    return [*lines, ""]


def acceptable(scores: list[Score]) -> bool:
    """Issue 19's bounds: sidecar >= 98 %, one-shot with the server's flags >= 95 %, without them >= 90 %, no
    false-full on a KV-bound, preempting or transient frame, no slots-bound frame past the hold left unflagged
    (sidecar), and issue 11's: no max_num_seqs raise in the lead-up to a preemption storm."""
    def share(mode: str) -> float:
        ss = [s for s in scores if s.mode == mode]
        return sum(s.agree for s in ss) / max(sum(s.frames for s in ss), 1)

    return (share("sidecar") >= SIDECAR_MIN and share("one-shot") >= ONE_SHOT_MIN
            and share("one-shot-noflags") >= ONE_SHOT_NOFLAGS_MIN
            and not any(s.bad_false_full or s.raises or s.missed_false_full for s in scores))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.truth", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when an acceptance bound is missed")
    ap.add_argument("--out", type=Path, default=REPORT)
    ap.add_argument("--sweep", type=Path, help="also report the randomized sweep recorded under this folder")
    args = ap.parse_args(argv)
    engine = all_engine_scores()
    scores = all_scores()
    head, _, rest = render(scores).partition("\n| release |")
    sweep = render_sweep(args.sweep) if args.sweep and args.sweep.exists() else []
    inferred = "\n## From the inferred truth (recordings without the recorder)\n\n| release |"
    text = head + "\n" + "\n".join(render_engine(engine) + sweep) + inferred + rest
    args.out.write_text(text)
    print(text.split("## Frames that disagree")[0])
    ok = acceptable(scores) and engine_acceptable(engine)
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
