"""Issue 19's consistency check: one answer (verdict, false-full flag, binding limit, explanation, advice) never
contradicts itself, never changes a value nobody stated, never calls a risk KV-full and never says `ok` while
requests wait.

    python -m tests.consistency        # the contradictions on every recorded frame, per rule, release and mode

The rules are data (`CLAIMS`, `VERDICT_CLAIM`, `TEXT_CLAIMS`, `GUESSED_SOURCES`, ...), so the judgement that
issue 19 builds on the verdict catalogue (exporter/pipeline/catalogue.py) can be pointed at them: a new verdict
must name its claim here or the check fails. The check reads only public outputs that survive issue 20's split:
`Target.observe`, `exporter.pipeline.target.one_shot`, the JSON diagnosis (`expose/diagnosis.engine_json`) and
the advice engine (`planning/advice`), whose output the JSON carries.

A *claim* is what an answer says binds now. Each claim fixes:
* `binding`: the binding limits it allows (today's `binding_limit` says only `slots` or `blocks`; the new
  judgement names more: `token_budget`, `head_prompt`, `deferral`, `pool_size`, `engine`, `sleep`);
* `flag`: the false-full flag it implies once the hold has passed (True: the panel's low usage hides a limit
  other than memory; False: memory binds, or nothing waits; None: either);
* `forbidden`: advice (setting, direction, when) that says the opposite of the claim.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.core import defaults
from exporter.expose import diagnosis
from exporter.pipeline import catalogue
from exporter.pipeline.advice import EVIDENCE, seqs_range
from exporter.pipeline.config import ServingConfig
from exporter.pipeline.target import EngineReport, Settings, Target, one_shot
from exporter.pipeline.verdict import Thresholds
from exporter.replay import recording
from tests import fixtures

# What an explanation may ask a user to state: a vLLM setting the product reads (its config's fields).
SETTINGS = frozenset(f.name for f in dataclasses.fields(ServingConfig))

FIXTURES = Path(__file__).parent / "fixtures"
INCIDENT = Path(__file__).parent.parent / "exporter" / "data" / "incident"
HOLD = 2.0  # s, the false-full hold replays use (tests/truth.py: max(2, 4 x the 0.5 s interval))
FULL_USAGE = defaults.FULL_USAGE


@dataclass(frozen=True)
class Claim:
    name: str
    says: str  # what the answer claims, in words
    binding: frozenset[str] | None  # binding limits this claim allows (None: any)
    flag: bool | None  # false_full once the hold has passed, while requests wait below FULL_USAGE
    forbidden: tuple[tuple[str, str, str], ...] = ()  # (setting, direction, when) contradicting the claim
    waits: bool | None = None  # requests wait under this claim (False: `ok` and nothing waits)


ALWAYS, POOL_HOLDS_MORE = "always", "pool_holds_more"
RAISE_SEQS = ("max_num_seqs", "raise", ALWAYS)
RAISE_BUDGET = ("max_num_batched_tokens", "raise", ALWAYS)
ADD_KV = ("kv_capacity", "add", ALWAYS)
RESTART = ("pod", "restart", ALWAYS)  # an action text "restart the pod"

CLAIMS: dict[str, Claim] = {c.name: c for c in (
    Claim("slots", "a free slot would admit the head; memory is not what holds requests back",
          frozenset({"slots"}), True,
          (ADD_KV, RAISE_BUDGET, ("max_num_seqs", "keep", POOL_HOLDS_MORE), ("max_num_seqs", "lower", POOL_HOLDS_MORE)),
          waits=True),
    Claim("memory", "requests wait for KV blocks (the pool is exhausted or the head does not fit)",
          frozenset({"blocks", "head_prompt"}), False, (RAISE_SEQS, RAISE_BUDGET), waits=True),
    Claim("preemption", "running requests outgrow the pool and are preempted", frozenset({"blocks"}), False,
          (RAISE_SEQS, RAISE_BUDGET), waits=None),
    Claim("head", "the head's prompt needs more blocks than are free although typical requests fit",
          frozenset({"head_prompt", "blocks"}), True, (RAISE_SEQS,), waits=True),
    Claim("budget", "running prefills take the whole token budget of each step", frozenset({"token_budget"}), True,
          (RAISE_SEQS, ADD_KV), waits=True),
    Claim("deferral", "every waiting request is deferred (LoRA, grammar, remote KV)", frozenset({"deferral"}), True,
          (RAISE_SEQS, ADD_KV, RESTART), waits=True),
    Claim("never_fits", "the head needs more blocks than the whole pool", frozenset({"pool_size", "blocks"}), False,
          (RAISE_SEQS, RESTART), waits=True),
    Claim("stall", "the engine makes no step and nothing else explains it", frozenset({"engine"}), None, (),
          waits=True),
    Claim("sleep", "the engine was put to sleep", frozenset({"sleep"}), False, (RESTART,)),
    Claim("nothing", "nothing holds requests back", None, False, (), waits=False),
    Claim("leak", "blocks stay in use while nothing runs or waits", None, False, (), waits=False),
    Claim("undecided", "one observation cannot tell (most often a frame between two steps)", None, False,
          (RAISE_SEQS, ADD_KV, RAISE_BUDGET)),
)}

# Every verdict the product can give, and its claim. A verdict missing here fails the check (`unknown_verdict`).
VERDICT_CLAIM: dict[str, str] = {
    "slots_full": "slots", "kv_full": "memory", "preempting": "preemption", "head_of_line": "head",
    "budget_full": "budget", "deferred": "deferral", "never_fits": "never_fits", "stuck": "stall",
    "sleeping": "sleep", "ok": "nothing", "leak": "leak", "transient": "undecided", "undecided": "undecided",
}

# Claims an explanation makes in words, in a clause that is not conditional ("if it is 4, ..." is not a claim).
TEXT_CLAIMS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"wait for a slot, not for memory", re.I), "slots"),
    (re.compile(r"nothing is held back", re.I), "nothing"),
    (re.compile(r"wait for KV cache|memory binds too|wait for memory", re.I), "memory"),
    (re.compile(r"takes the whole token budget", re.I), "budget"),
)
# Action texts that are advice without an advice object (setting, direction).
ACTION_ADVICE: tuple[tuple[re.Pattern[str], tuple[str, str]], ...] = (
    (re.compile(r"restart the pod", re.I), ("pod", "restart")),
)

CHANGES = frozenset({"raise", "lower", "add"})  # advice directions that change a value
GUESSED_SOURCES = frozenset({"inferred", "default"})  # config provenance nobody stated
WORST_CASE_SETTINGS = frozenset({"max_num_seqs", "kv_capacity"})  # advice whose figure is a worst case per request
GUESSED_PROFILE_BASES = frozenset({"in_flight", "max_model_len", "none"})  # no finished request backs the size

RULES = ("unknown_verdict", "flag_contradicts_claim", "binding_contradicts_claim", "binding_outside_catalogue",
         "advice_contradicts_claim",
         "changes_a_guessed_value", "advice_from_a_guessed_worst_case", "kv_full_from_a_risk_bound",
         "ok_while_requests_wait")


@dataclass(frozen=True)
class Violation:
    rule: str
    verdict: str
    detail: str


def _clauses(text: str) -> list[str]:
    return [c for c in re.split(r"(?<=[.;])\s+", text) if c]


def claims(answer: dict[str, Any]) -> set[str]:
    """The claims an answer makes: its verdict's, and those its explanation states unconditionally."""
    out = {VERDICT_CLAIM[answer["verdict"]]} if answer["verdict"] in VERDICT_CLAIM else set()
    for clause in _clauses(answer.get("explanation", "")):
        if re.search(r"\bif\b", clause, re.I):
            continue
        out |= {name for pattern, name in TEXT_CLAIMS if pattern.search(clause)}
    return out


def advice_of(answer: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """(setting, direction, current_source) of every piece of advice, action texts included."""
    out = [(a["setting"], a["direction"], a.get("current_source")) for a in answer.get("advice", [])]
    texts = {a.get("text") for a in answer.get("advice", [])}
    for action in answer.get("actions", []):
        if action in texts:
            continue
        out += [(s, d, None) for pattern, (s, d) in ACTION_ADVICE if pattern.search(action)]
    return out


def _when(when: str, answer: dict[str, Any]) -> bool:
    if when == ALWAYS:
        return True
    if when == POOL_HOLDS_MORE:
        # The pool holds more requests than the cap within the advice's safe share of its worst-case concurrency
        # (a cap already above that share is kept: more slots would preempt once requests reach the worst case).
        fits = (answer.get("max_concurrency_requests") or {}).get("profile")
        current = answer.get("max_num_seqs")
        return fits is not None and current is not None and seqs_range(int(fits))[1] > int(current)
    raise ValueError(when)


def panel_low_and_waiting(answer: dict[str, Any]) -> bool:
    return bool(answer["requests_waiting"] > 0 and answer["panel_usage_ratio"] < FULL_USAGE)


def flag_due(answer: dict[str, Any]) -> bool:
    """The answer's claims imply false_full (once held): requests wait below full usage beside another limit."""
    return panel_low_and_waiting(answer) and any(CLAIMS[c].flag is True for c in claims(answer))


def check(answer: dict[str, Any], held_for: float | None = None, hold: float = HOLD) -> list[Violation]:
    """Every contradiction in one engine's answer (a `diagnosis.engine_json` dict).

    `held_for`: seconds the flag's condition has held without a break (the sidecar); None for one observation,
    whose hold is zero (`one_shot`)."""
    verdict = str(answer["verdict"])
    out: list[Violation] = []

    def bad(rule: str, detail: str) -> None:
        out.append(Violation(rule, verdict, detail))

    if verdict not in VERDICT_CLAIM:
        bad("unknown_verdict", f"{verdict} has no claim in tests/consistency.py VERDICT_CLAIM")
        return out
    said = claims(answer)
    flag = bool(answer["false_full"])
    binding = answer.get("binding_limit")
    binds = {str(limit) for limit in catalogue.entry(verdict).binds}  # what the reference page says it binds
    if binding is not None and binding not in binds:
        bad("binding_outside_catalogue", f"the catalogue's {verdict} binds {sorted(binds)}, the answer says {binding}")
    advice = advice_of(answer)
    for name in sorted(said):
        c = CLAIMS[name]
        if c.flag is False and flag:
            bad("flag_contradicts_claim", f"claims {name} ({c.says}) yet false_full is true")
        elif c.flag is True and not flag and panel_low_and_waiting(answer) and (held_for is None or held_for >= hold):
            bad("flag_contradicts_claim", f"claims {name} ({c.says}) while requests wait at "
                f"{100 * answer['panel_usage_ratio']:.0f} % usage"
                + ("" if held_for is None else f" for {held_for:.1f} s") + ", yet false_full is false")
        if c.binding is not None and binding not in c.binding:
            bad("binding_contradicts_claim", f"claims {name} ({c.says}) yet the binding limit is {binding}")
        for setting, direction, when in c.forbidden:
            if any(s == setting and d == direction for s, d, _src in advice) and _when(when, answer):
                bad("advice_contradicts_claim", f"claims {name} ({c.says}) yet advises: {direction} {setting}"
                    + ("" if when == ALWAYS else f" ({when})"))
        if c.waits is False and answer["requests_waiting"] > 0 and name == "nothing":
            bad("ok_while_requests_wait", f"{answer['requests_waiting']} requests wait, the answer says {verdict}: "
                f"{answer.get('explanation', '')[:80]}")
    if verdict == "ok" and answer["requests_waiting"] > 0 and "nothing" not in said:
        bad("ok_while_requests_wait", f"{answer['requests_waiting']} requests wait, verdict ok")
    profile = answer.get("request_profile") or {}
    prompt = (answer.get("request_profile_tokens") or {}).get("prompt") or {}
    guessed_size = bool(profile.get("thin")) or prompt.get("basis", "none") in GUESSED_PROFILE_BASES
    for setting, direction, source in advice:
        if direction in CHANGES and source in GUESSED_SOURCES:
            bad("changes_a_guessed_value", f"{direction} {setting} whose value is {source}, not stated")
        if direction in CHANGES and setting in WORST_CASE_SETTINGS and guessed_size:
            bad("advice_from_a_guessed_worst_case", f"{direction} {setting} from a worst case no finished request "
                f"backs (profile thin={profile.get('thin')}, prompt basis {prompt.get('basis')})")
    room = answer["kv_free_blocks"] // max(answer["prompt_blocks"], 1)
    slots = answer.get("slot_headroom_requests")
    # The free blocks hold fewer heads than wait, and the known free slots more: memory runs out at the next step,
    # before the slots do. That binds now (the queue outlasts the step); it is no risk bound.
    memory_first = answer["requests_waiting"] > room and slots is not None and room < slots
    if (verdict == "kv_full" and answer["panel_usage_ratio"] < FULL_USAGE
            and answer["kv_free_blocks"] >= answer["prompt_blocks"] and not memory_first):
        bad("kv_full_from_a_risk_bound", f"kv_full at {100 * answer['panel_usage_ratio']:.0f} % usage with "
            f"{answer['kv_free_blocks']} free blocks for a {answer['prompt_blocks']}-block head: only a risk "
            f"(safe headroom {answer['safe_headroom_requests']}) says memory")
    # The head's size as a range (issue 19, kind 1 at production scale): a memory claim the typical head disproves.
    most = answer.get("admission_headroom_requests_max")
    if verdict == "kv_full" and binding == "blocks" and most is not None and most >= answer["requests_waiting"] \
            and answer.get("gauges_only"):
        bad("memory_claim_the_range_disproves", f"kv_full ('the rest wait for KV cache') while the typical head "
            f"admits {most} of {answer['requests_waiting']} waiting, from one observation")
    text = str(answer.get("explanation", ""))
    if "undecided binds" in text:
        bad("undecided_as_a_limit", "a case says 'undecided binds'")
    for name in EVIDENCE:
        if name in text:
            bad("evidence_named_as_a_setting", f"the explanation names {name} (no setting) as one to state")
    for asked in re.findall(r"\bState ([a-z_]+(?: and [a-z_]+)*)", text):
        for name in asked.split(" and "):
            if name not in SETTINGS:
                bad("evidence_named_as_a_setting", f"the explanation asks to state {name}, which is no vLLM setting")
    return out


class Hold:
    """How long the flag's condition has held along a timeline (the sidecar's false-full hold, seen from
    outside): from the first answer whose claims imply the flag until one that does not."""

    def __init__(self) -> None:
        self.since: float | None = None

    def update(self, t: float, answer: dict[str, Any]) -> float | None:
        if not flag_due(answer):
            self.since = None
            return None
        if self.since is None:
            self.since = t
        return t - self.since


# -- replays ------------------------------------------------------------------------------------------------
MODES = ("sidecar", "sidecar-noflags", "one-shot", "one-shot-noflags")


def timelines() -> list[Path]:
    """Every recorded real timeline: each release under tests/fixtures, and the incident the demo ships."""
    return [*sorted(p.parent for p in FIXTURES.glob("vllm-*/*/timeline.jsonl.gz")), INCIDENT]


def release_of(folder: Path) -> str:
    return "incident" if folder == INCIDENT else folder.parent.name


def _settings(meta: dict[str, Any], flags: bool) -> Settings:
    argv = [str(a) for a in meta["server_argv"]] if flags else None
    return Settings("recorded", vllm_args=argv, discover_cmdline=False, thresholds=Thresholds(false_full_hold=HOLD))


def answers(reports: list[EngineReport]) -> list[dict[str, Any]]:
    return [diagnosis.engine_json(e, reports) for e in reports]


def replay(meta: dict[str, Any], frames: list[tuple[float, str]], mode: str) -> Iterator[
        tuple[float, dict[str, Any], float | None]]:
    """(t, answer, held_for) for every engine of every frame, as `mode` judges it."""
    settings = _settings(meta, flags=not mode.endswith("noflags"))
    if mode.startswith("sidecar"):
        target = fixtures.as_recorded(Target(settings), meta)
        holds: dict[tuple[str, str], Hold] = {}
        for t, text in frames:
            for a in answers(target.observe(t, text).engines):
                held = holds.setdefault((a["model_name"], a["engine"]), Hold()).update(t, a)
                yield t, a, held
        return
    for t, text in frames:
        once = fixtures.as_recorded(one_shot(settings), meta)
        for a in answers(once.observe(t, text, gauges_only=True).engines):
            yield t, a, None


Tally = Counter[tuple[str, str, str, str]]  # (rule, release, mode, verdict) -> answers


def tally(folders: list[Path] | None = None, modes: tuple[str, ...] = MODES,
          examples: dict[tuple[str, str], str] | None = None) -> Tally:
    """Contradicting answers per rule, release, mode and verdict over the recorded timelines (an answer breaking
    one rule twice counts once). `examples` collects one detail per (rule, mode)."""
    out: Tally = Counter()
    for folder in folders if folders is not None else timelines():
        rec = recording.load(folder)
        name = f"{release_of(folder)}/{folder.name}"
        for mode in modes:
            for t, answer, held in replay(rec.meta, rec.frames, mode):
                for rule, v in {(v.rule, v) for v in check(answer, held)}:
                    out[(rule, release_of(folder), mode, v.verdict)] += 1
                    if examples is not None:
                        examples.setdefault((rule, mode), f"{name} t={t:.1f}: {v.verdict}: {v.detail}")
    return out


def summary(counts: Tally, by: tuple[int, ...]) -> Counter[tuple[str, ...]]:
    """Counts summed over all but the key positions `by` (0 rule, 1 release, 2 mode, 3 verdict)."""
    out: Counter[tuple[str, ...]] = Counter()
    for key, n in counts.items():
        out[tuple(key[i] for i in by)] += n
    return out


def render(counts: Tally, examples: dict[tuple[str, str], str]) -> str:
    lines = ["# Contradictions per rule and mode (answers; all recorded timelines)", ""]
    for (rule, mode), n in sorted(summary(counts, (0, 2)).items()):
        lines.append(f"- {rule} / {mode}: {n}  e.g. {examples.get((rule, mode), '')[:160]}")
    lines += ["", "# Per rule and release (all modes)", ""]
    for (rule, rel), n in sorted(summary(counts, (0, 1)).items()):
        lines.append(f"- {rule} / {rel}: {n}")
    lines += ["", "# Per rule and verdict (all modes)", ""]
    for (rule, verdict), n in sorted(summary(counts, (0, 3)).items()):
        lines.append(f"- {rule} / {verdict}: {n}")
    return "\n".join(lines)




# -- generated states (hypothesis) --------------------------------------------------------------------------
# Real recorded frames the generator rewrites: V1 0.32.0 (usage excludes the null block), V1 0.10.2 (usage counts
# it), V1 0.24.0 (waiting by reason), V1 0.32.0 with --max-num-batched-tokens 256, V0 0.8.5 (no engine label).
TEMPLATES = ("vllm-0.32.0/false-full", "vllm-0.10.2/false-full", "vllm-0.24.0/kv-full", "vllm-0.32.0/budget-bound",
             "vllm-0.8.5-v0/false-full")


@dataclass(frozen=True)
class State:
    """One engine state to write into a template frame: a scrape `dt` seconds after the previous one."""

    dt: float
    running: int
    waiting: int
    deferred: int
    used_share: float  # of the usable blocks
    preempted: int  # preemptions since the previous scrape
    steps: int  # engine steps since the previous scrape (0: no progress)
    prompt_tokens: int  # prompt tokens computed since the previous scrape


def state_text(template: str, blocks: int, s: State, totals: dict[str, float]) -> str:
    """`template` (a recorded frame) with this state's gauges, `blocks` in its cache_config_info (and vLLM's own
    capacity labels kept consistent with it), and the counters advanced from `totals` (updated in place)."""
    from tests import rewrite

    text = template
    info = next(line for line in text.splitlines() if line.startswith("vllm:cache_config_info{"))
    bs = int(re.search(r'block_size="(\d+)"', info).group(1))  # type: ignore[union-attr]
    labels = {"num_gpu_blocks": str(blocks)}
    if 'num_gpu_blocks_override="' in info:
        labels["num_gpu_blocks_override"] = str(blocks)
    if 'kv_cache_size_tokens="' in info:
        labels["kv_cache_size_tokens"] = str(blocks * bs)
    if 'kv_cache_max_concurrency="' in info:
        length = int(totals["max_model_len"])
        labels["kv_cache_max_concurrency"] = repr(blocks / -(-length // bs))
    text = rewrite.set_label(text, "vllm:cache_config_info", **labels)
    v0 = 'engine="' not in info and "vllm:kv_cache_usage_perc" not in text
    usable = blocks if v0 else blocks - 1
    used = max(round(s.used_share * usable), min(s.running, usable))
    for name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
        if name + "{" in text:
            text = rewrite.set_sample(text, name, used / usable if usable else 0.0)
    text = rewrite.set_sample(text, "vllm:num_requests_running", s.running)
    text = rewrite.set_sample(text, "vllm:num_requests_waiting", s.waiting)
    if "vllm:num_requests_waiting_by_reason{" in text:
        text = rewrite.set_sample(text, "vllm:num_requests_waiting_by_reason", s.waiting - s.deferred,
                                  reason="capacity")
        text = rewrite.set_sample(text, "vllm:num_requests_waiting_by_reason", s.deferred, reason="deferred")
    busy = s.running > 0 or s.waiting > 0
    totals["preemptions"] += s.preempted
    totals["steps"] += s.steps if busy else 0
    totals["generation"] += s.steps * s.running if busy else 0
    totals["prompt"] += s.prompt_tokens if busy else 0
    for name, key in (("vllm:num_preemptions_total", "preemptions"), ("vllm:iteration_tokens_total_count", "steps"),
                      ("vllm:generation_tokens_total", "generation"), ("vllm:prompt_tokens_total", "prompt")):
        text = rewrite.set_sample(text, name, totals[key])
    return text


LENGTH_HISTOGRAMS = ("vllm:request_prompt_tokens", "vllm:request_generation_tokens", "vllm:request_params_max_tokens",
                     "vllm:request_max_num_generation_tokens")  # dropped by a scrape's relabelling, or absent


def generated_answers(template_name: str, blocks: int, max_num_seqs: int | None, flags: bool, states: list[State],
                      histograms: bool = True) -> Iterator[tuple[str, dict[str, Any], float | None]]:
    """(mode, answer, held_for) for a generated timeline on `template_name`, sidecar and one-shot per frame;
    without `histograms` the request-length histograms are dropped from every frame."""
    from tests import rewrite

    folder = FIXTURES / template_name
    meta = recording.load(folder).meta
    template = (folder / "snapshot.prom").read_text()
    if not histograms:
        template = rewrite.drop(template, *LENGTH_HISTOGRAMS)
    argv = [str(a) for a in meta["server_argv"]]
    argv = rewrite.flag(rewrite.flag(argv, "--num-gpu-blocks-override", str(blocks)), "--max-num-seqs",
                        None if max_num_seqs is None else str(max_num_seqs))
    length = int(argv[argv.index("--max-model-len") + 1])
    totals = {"preemptions": rewrite.sample(template, "vllm:num_preemptions_total"),
              "steps": rewrite.sample(template, "vllm:iteration_tokens_total_count"),
              "generation": rewrite.sample(template, "vllm:generation_tokens_total"),
              "prompt": rewrite.sample(template, "vllm:prompt_tokens_total"), "max_model_len": float(length)}
    settings = Settings("generated", vllm_args=argv if flags else None, discover_cmdline=False,
                        thresholds=Thresholds(false_full_hold=HOLD))
    sidecar = fixtures.as_recorded(Target(settings), meta)
    hold = Hold()
    t = 0.0
    for s in states:
        t += s.dt
        text = state_text(template, blocks, s, totals)
        for a in answers(sidecar.observe(t, text).engines):
            yield "sidecar", a, hold.update(t, a)
        for a in answers(fixtures.as_recorded(one_shot(settings), meta).observe(t, text, gauges_only=True).engines):
            yield "one-shot", a, None


def timelines_strategy() -> Any:
    """Hypothesis strategy: (template, blocks, max_num_seqs, flags, states) of a generated engine timeline."""
    from hypothesis import strategies as st

    @st.composite
    def timeline(draw: st.DrawFn) -> tuple[str, int, int | None, bool, bool, list[State]]:
        template = draw(st.sampled_from(TEMPLATES))
        histograms = draw(st.booleans())
        blocks = draw(st.one_of(st.integers(2, 64), st.integers(65, 40_000)))
        cap = draw(st.one_of(st.none(), st.integers(1, 512)))
        flags = draw(st.booleans())
        states = []
        for _ in range(draw(st.integers(1, 8))):
            running = draw(st.integers(0, min(cap or 512, 512, blocks - 1)))  # each holds a block
            waiting = draw(st.one_of(st.just(0), st.integers(1, 600)))
            states.append(State(
                dt=draw(st.sampled_from([0.5, 5.0, 30.0, 70.0])), running=running, waiting=waiting,
                deferred=draw(st.integers(0, waiting)), used_share=draw(st.floats(0.0, 1.0)),
                preempted=draw(st.sampled_from([0, 0, 0, 1, 4])), steps=draw(st.sampled_from([0, 1, 8, 50])),
                prompt_tokens=draw(st.sampled_from([0, 16, 3072, 100_000]))))
        return template, blocks, cap, flags, histograms, states

    return timeline()


def generated_tally(examples: int = 200, details: list[str] | None = None) -> Tally:
    """Contradictions over `examples` generated timelines (deterministic: hypothesis derandomized), per rule,
    template (as the release), mode and verdict. Records, never fails."""
    from hypothesis import HealthCheck, Phase, given, settings

    out: Tally = Counter()

    @settings(max_examples=examples, derandomize=True, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(timelines_strategy())
    def run(case: tuple[str, int, int | None, bool, bool, list[State]]) -> None:
        template, blocks, cap, flags, histograms, states = case
        for mode, answer, held in generated_answers(template, blocks, cap, flags, states, histograms):
            found = check(answer, held)
            for rule, verdict in {(v.rule, v.verdict) for v in found}:
                out[(rule, template.split("/")[0], mode + ("" if flags else "-noflags"), verdict)] += 1
            if details is not None and found:
                details.append(f"{template} blocks={blocks} max_num_seqs={cap} flags={flags} histograms={histograms} "
                               f"{mode} r={answer['requests_running']} w={answer['requests_waiting']}: "
                               + "; ".join(f"{v.rule}: {v.detail}" for v in found))

    run()
    return out


def main() -> int:
    examples: dict[tuple[str, str], str] = {}
    print(render(tally(examples=examples), examples))
    print("\n# Generated states (200 hypothesis timelines, derandomized), per rule and mode\n")
    for (rule, mode), n in sorted(summary(generated_tally(), (0, 2)).items()):
        print(f"- {rule} / {mode}: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
