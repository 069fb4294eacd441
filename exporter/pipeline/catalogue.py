"""The verdict catalogue: every verdict the sidecar can give, and everything said or drawn about it, once.

One `Entry` per `Verdict`: what it means (the rule, as the verdict table states it), its severity (the
severity of the alert that speaks for it), its colour (a Grafana colour name; the status page maps each name to
its own shade), whether it belongs to the false-full family (requests wait although the pool has room) and to the
waiting family (a first look at a wait beside room keeps it), its alert and runbook section, and the keys of its
explanation and fixed actions (`exporter.expose.diagnosis.EXPLANATIONS` / `ACTIONS`).

Readers: `pipeline/verdict.py` (the families), `expose/diagnosis.py` (explanations, actions), `expose/page.py`
(colours), `grafana/dashboards.py` (colours, the verdict list), the rules (alert names, the false-full family),
the verdict table of docs/reference/verdicts.md (`markdown_table`, written by `python -m exporter.cli.docs`).
`tests/unit/test_catalogue.py` fails when a verdict lacks an entry or an entry a field, and when a reader has no
text for a key.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..engines.vllm import VLLM

_N = VLLM.names  # the metric names the rules name


class Verdict(StrEnum):
    """Why requests wait (or that nothing does), per engine and scrape. The order is the catalogue's order: the
    order of the verdict series in /metrics and of the dashboards' colour maps."""

    OK = "ok"
    KV_FULL = "kv_full"
    SLOTS_FULL = "slots_full"
    PREEMPTING = "preempting"
    HEAD_OF_LINE = "head_of_line"
    DEFERRED = "deferred"
    STUCK = "stuck"
    LEAK = "leak"
    TARGET_DOWN = "target_down"
    BUDGET_FULL = "budget_full"
    NEVER_FITS = "never_fits"
    TRANSIENT = "transient"
    SLEEPING = "sleeping"
    UNDECIDED = "undecided"


class Limit(StrEnum):
    """What binds now: the limit that keeps the queue head (and the requests behind it) from being admitted at the
    next engine step, in vLLM's own terms; the `binding_limit` of the answer and the label of its series. `none`:
    nothing waits, or the next step admits every waiting request; `undecided`: an input we do not know (stated
    nowhere: the answer's `decided_by` lists its candidates) changes which limit it is."""

    SLOTS = "slots"  # max_num_seqs: `len(self.running) >= max_num_running_reqs: break` (scheduler.py @0.32.0)
    TOKEN_BUDGET = "token_budget"  # max_num_batched_tokens: `while token_budget > 0` (scheduler.py @0.32.0)
    HEAD_PROMPT = "head_prompt"  # the head's prompt does not fit in the free blocks (`allocate_slots` -> None)
    BLOCKS = "blocks"  # the pool: exhausted, preempting, or its free blocks cannot hold the queue's heads
    DEFERRAL = "deferral"  # every waiting request is skipped (LoRA, grammar, remote KV)
    POOL_SIZE = "pool_size"  # the head needs more blocks than the whole pool: it never fits
    ENGINE = "engine"  # the engine makes no step and nothing else explains it
    SLEEP = "sleep"  # the engine was put to sleep
    NONE = "none"
    UNDECIDED = "undecided"


LIMITS: tuple[Limit, ...] = tuple(Limit)


SEVERITIES = ("none", "info", "warning", "critical")  # "none": no alert by design
# Grafana's colour names; dark red pages critical (or a target that is gone), red and orange are capacity, yellow
# the false-full family (room, but something else holds requests back), blue a deliberate state or a one-shot note.
COLOURS = ("green", "light-blue", "blue", "yellow", "orange", "red", "dark-red")


@dataclass(frozen=True)
class Entry:
    """What the product says and draws for one verdict."""

    meaning: str  # the rule that gives it, for operators (docs/reference/verdicts.md)
    severity: str  # one of SEVERITIES: its alert's severity
    colour: str  # one of COLOURS
    false_full: bool  # requests wait although the pool has room: `false_full` may be raised (verdict.py)
    waiting: bool  # a first look at a wait beside room keeps this previous verdict (verdict.py)
    alert: str | None  # the alert that speaks for it; None: none by design (`no_alert` says why)
    explanation: str  # key of exporter.expose.diagnosis.EXPLANATIONS
    actions: str  # key of exporter.expose.diagnosis.ACTIONS
    no_alert: str = ""
    binds: tuple[Limit, ...] = ()  # the limits the verdict names as binding now (its answer's binding_limit)

    @property
    def runbook_anchor(self) -> str | None:
        """The anchor of its alert's section in docs/runbook.md (GitHub's anchor of `## <alert>`)."""
        return None if self.alert is None else self.alert.lower()


CATALOGUE: dict[Verdict, Entry] = {
    Verdict.OK: Entry(
        "nothing waits (never while requests wait); blocks a P/D producer (`--kv-transfer-config` kv_role "
        "kv_producer or kv_both) keeps for its decode side with nothing running are `ok` too, said so "
        "(`producer_holding`)",
        "none", "green", false_full=False, waiting=False, alert=None, explanation="ok", actions="ok",
        no_alert="nothing is held back", binds=(Limit.NONE,)),
    Verdict.KV_FULL: Entry(
        "requests wait and memory binds now: u ≥ `full-usage`, or the free blocks cannot hold the queue head's "
        "prompt (by a profile of finished requests, floored by what requests in flight hold when it is thin or "
        "stale), or they hold fewer heads than wait while the free slots are more (the next step fills the pool). "
        "A risk (safe headroom < 0, requests beyond the profile) never makes it: it is reported as risk",
        "warning", "orange", false_full=False, waiting=True, alert="VLLMKVCacheFull", explanation="kv_full",
        actions="kv_full", binds=(Limit.HEAD_PROMPT, Limit.BLOCKS)),
    Verdict.SLOTS_FULL: Entry(
        "requests wait, more than the free slots under max_num_seqs (stated, or inferred over the sidecar's window: "
        "the explanation says which) while the free blocks hold more: every slot is taken, or the next step fills "
        "the few free ones (a cap met within one step's turnover). With the slots taken and u ≥ `full-usage`, or "
        "the head not fitting by a profile of finished requests, it is `kv_full`; an inferred cap the token budget "
        "could explain is `undecided`; one-shot never infers a cap (`undecided` or `transient`)",
        "warning", "yellow", false_full=True, waiting=True, alert="VLLMKVFalseFull", explanation="slots_full",
        actions="slots_full", binds=(Limit.SLOTS,)),
    Verdict.PREEMPTING: Entry(
        f"`{_N.preemptions}` rose at this scrape, or within the preempt window while requests wait and the free "
        "blocks do not cover the next step (every running request's next block and a prefill chunk, or the queue "
        "head); or "
        "*inferred* from the gauges before the counter moves (vLLM 0.32 counts a preemption when the preempted "
        "request next produces a token): running fell and waiting rose while no request finished, or no block is "
        "free while requests that still grow run and others wait. Never false-full",
        "critical", "red", false_full=False, waiting=False, alert="VLLMPreemptionStorm", explanation="preempting",
        actions="preempting", binds=(Limit.BLOCKS,)),
    Verdict.HEAD_OF_LINE: Entry(
        "the sidecar only: the previous scrape showed room for the queue head (a free slot, free blocks for the "
        "profile's prompt), and since then nothing was admitted and nothing finished while requests still wait: the "
        "head is larger than the profile says",
        "warning", "yellow", false_full=True, waiting=False, alert="VLLMKVFalseFull", explanation="head_of_line",
        actions="head_of_line", binds=(Limit.HEAD_PROMPT,)),
    Verdict.DEFERRED: Entry(
        "every waiting request is deferred by vLLM (LoRA, grammar, KV transfer; vLLM ≥ 0.20), even with every "
        "slot taken",
        "warning", "yellow", false_full=True, waiting=True, alert="VLLMKVFalseFull", explanation="deferred",
        actions="deferred", binds=(Limit.DEFERRAL,)),
    Verdict.STUCK: Entry(
        "the sidecar only: requests wait and the engine made no step for `stuck-after`, and nothing else explains "
        "it (running requests that do not progress; or nothing running while no request is deferred, the head "
        "fits and the engine is awake); never-fits, deferral, sleep and a P/D producer keep their own verdict",
        "critical", "dark-red", false_full=True, waiting=False, alert="VLLMSchedulerStuck", explanation="stuck",
        actions="stuck", binds=(Limit.ENGINE,)),
    Verdict.LEAK: Entry(
        "blocks stay used with nothing running or waiting for `leak-after` (one-shot: suspected at once)",
        "warning", "orange", false_full=False, waiting=False, alert="VLLMKVBlockLeak", explanation="leak",
        actions="leak", binds=(Limit.NONE,)),
    Verdict.TARGET_DOWN: Entry(
        "the last scrape failed; `/api/v1/diagnosis` lists the engines last seen with this verdict, as `/metrics` "
        "does",
        "warning", "dark-red", false_full=False, waiting=False, alert="VLLMHeadroomTargetDown",
        explanation="target_down", actions="target_down"),
    Verdict.BUDGET_FULL: Entry(
        "requests wait, more than the step's token budget lets start: (`max_num_batched_tokens` less what the "
        "running requests take of it) / the median uncached prompt, fewer than the free slots and the free blocks' "
        "heads. What running requests take is their decode tokens in one-shot, and in the sidecar what the engine "
        f"scheduled per step lately (`{_N.steps}` against the prompt and generation counters; all of it while one "
        "long prompt prefills). Stated, or over every default vLLM may have for the device (else `undecided`). V1 "
        "schedules running requests first and admits waiting ones only while budget is left",
        "warning", "yellow", false_full=True, waiting=True, alert="VLLMHeadroomBudgetFull",
        explanation="budget_full", actions="budget_full", binds=(Limit.TOKEN_BUDGET,)),
    Verdict.NEVER_FITS: Entry(
        "nothing runs, the whole pool is free, requests wait, and a request of max_model_len needs more blocks than "
        "the pool: the head can never be admitted and blocks the queue (needs a second scrape; one-shot: "
        "suspected). At idle, max_model_len above the pool is a warning in the actions",
        "critical", "dark-red", false_full=False, waiting=True, alert="VLLMHeadroomNeverFits",
        explanation="never_fits", actions="never_fits", binds=(Limit.POOL_SIZE,)),
    Verdict.TRANSIENT: Entry(
        "requests wait and the next step could admit all of them (free slots and free blocks for each), or "
        "max_num_seqs is unknown and its being the running count is the only other reading: most often the moment "
        "between two engine steps. One-shot, and the sidecar's first look (the next scrape confirms or clears it). "
        "Never false-full",
        "none", "light-blue", false_full=False, waiting=False, alert=None, explanation="transient",
        actions="transient",
        no_alert="the next step admits the queue: nothing binds yet (a first look; the next scrape decides)",
        binds=(Limit.NONE, Limit.UNDECIDED)),
    Verdict.SLEEPING: Entry(
        f"vLLM's `{_N.sleep_state.removeprefix(_N.prefix)}{{sleep_state=\"awake\"}}` is 0: the engine was put to sleep "
        "(`--enable-sleep-mode`, POST `/sleep`); the action is POST `/wake_up`, not a restart. Never false-full",
        "info", "blue", false_full=False, waiting=False, alert="VLLMEngineAsleepWithQueue",
        explanation="sleeping", actions="sleeping", binds=(Limit.SLEEP,)),
    Verdict.UNDECIDED: Entry(
        "requests wait, more than the next engine step could admit, and what binds depends on a value nobody stated "
        "(max_num_seqs inferred, unknown or refuted by the running count, max_num_batched_tokens assumed: vLLM's "
        "default depends on the device, which it does not export) or on evidence one observation cannot see (the "
        "queue head's size or cached blocks, how many waiting requests a LoRA adapter lets through): the answer's "
        "`decided_by` says what binds for each value it may have, and the advice is to state it or how to watch it. "
        "Also a scrape whose gauges contradict the counters with no recent consistent one; zero gauges of a server "
        "that may be vLLM's Rust frontend, whose gauges read 0 under load (its /version says so, or /version is not "
        "read and the body has no cache_config_info series, which only a relabelling drops from the Python "
        "frontend's), unless the counters show no step since the last scrape (never in one-shot, nor on the "
        "sidecar's first look); a stall on a release without a sleep state while sleep mode is on or not known "
        "(`asleep_or_stuck`: GET /is_sleeping decides, no restart); blocks held with nothing to do beside NIXL "
        "series and no kv_role stated, once a leak would be said (`producer_holding`). Never false-full",
        "none", "light-blue", false_full=False, waiting=False, alert=None, explanation="undecided",
        actions="undecided", binds=(Limit.UNDECIDED,),
        no_alert="the cause is not known: the advice asks for the value that decides it; the queue's own alerts "
                 "still fire"),
}


def entry(v: Verdict | str) -> Entry:
    """The catalogue entry of a verdict (by member or by name); KeyError for a name that is no verdict."""
    return CATALOGUE[Verdict(v)]


FALSE_FULL_VERDICTS: frozenset[Verdict] = frozenset(v for v, e in CATALOGUE.items() if e.false_full)
WAITING_VERDICTS: frozenset[Verdict] = frozenset(v for v, e in CATALOGUE.items() if e.waiting)
COLOUR_BY_VERDICT: dict[str, str] = {str(v): e.colour for v, e in CATALOGUE.items()}
ALERT_BY_VERDICT: dict[str, str | None] = {str(v): e.alert for v, e in CATALOGUE.items()}


def markdown_table() -> str:
    """The verdict table of docs/reference/verdicts.md (tests/unit/test_docs_reference.py keeps the page equal)."""
    rows = ["| verdict | when | binding limit | false-full | kept | alert |", "|---|---|---|---|---|---|"]
    for v, e in CATALOGUE.items():
        alert = f"`{e.alert}` ({e.severity})" if e.alert else f"none: {e.no_alert}"
        binds = ", ".join(f"`{limit}`" for limit in e.binds) or "–"
        rows.append(f"| `{v}` | {e.meaning} | {binds} | {'yes' if e.false_full else 'no'} | "
                    f"{'yes' if e.waiting else 'no'} | {alert} |")
    return "\n".join(rows) + "\n"
