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

from ..core import defaults
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

    @property
    def runbook_anchor(self) -> str | None:
        """The anchor of its alert's section in docs/runbook.md (GitHub's anchor of `## <alert>`)."""
        return None if self.alert is None else self.alert.lower()


CATALOGUE: dict[Verdict, Entry] = {
    Verdict.OK: Entry(
        "nothing waits; in the sidecar also a first look at a wait beside room (or at a queue head that may never "
        "fit, or at prefills that may fill the token budget) after a scrape whose verdict a first look does not keep "
        "(the kept column): slots and blocks free up between two engine steps, so the next scrape confirms or "
        "clears it",
        "none", "green", false_full=False, waiting=False, alert=None, explanation="ok", actions="ok",
        no_alert="nothing is held back"),
    Verdict.KV_FULL: Entry(
        "requests wait and free blocks cannot hold the queue head's prompt (by the profile), or u ≥ `full-usage`, "
        "or memory pressure the panel does not show yet (by a profile of finished requests: safe headroom < 0, or "
        "requests in flight already hold more than the profile's worst case), with or without every slot taken",
        "warning", "orange", false_full=False, waiting=True, alert="VLLMKVCacheFull", explanation="kv_full",
        actions="kv_full"),
    Verdict.SLOTS_FULL: Entry(
        "requests wait and running = max_num_seqs, stated or inferred over the sidecar's window (the explanation "
        "says which; one-shot never infers a cap: without it such a frame is `transient`), while memory does not "
        "bind: with the slots taken and u ≥ `full-usage`, or (by a profile of finished requests) the queue head not "
        "fitting or memory pressure, the verdict is `kv_full`",
        "warning", "yellow", false_full=True, waiting=True, alert="VLLMKVFalseFull", explanation="slots_full",
        actions="slots_full"),
    Verdict.PREEMPTING: Entry(
        f"`{_N.preemptions}` rose at this scrape, or within the preempt window while requests wait; or "
        "*inferred* from the gauges before the counter moves (vLLM 0.32 counts a preemption when the preempted "
        "request next produces a token): running fell and waiting rose while no request finished, or no block is "
        "free while requests that still grow run and others wait. Never false-full",
        "critical", "red", false_full=False, waiting=False, alert="VLLMPreemptionStorm", explanation="preempting",
        actions="preempting"),
    Verdict.HEAD_OF_LINE: Entry(
        "slots and blocks are free by the profile's measure, yet requests wait on two scrapes in a row with no "
        "request finished between them (the sidecar only)",
        "warning", "yellow", false_full=True, waiting=False, alert="VLLMKVFalseFull", explanation="head_of_line",
        actions="head_of_line"),
    Verdict.DEFERRED: Entry(
        "every waiting request is deferred by vLLM (LoRA, grammar, KV transfer; vLLM ≥ 0.20), even with every "
        "slot taken",
        "warning", "yellow", false_full=True, waiting=True, alert="VLLMKVFalseFull", explanation="deferred",
        actions="deferred"),
    Verdict.STUCK: Entry(
        "requests wait and the engine made no step for `stuck-after` (the sidecar only: one observation cannot "
        "tell)",
        "critical", "dark-red", false_full=True, waiting=False, alert="VLLMSchedulerStuck", explanation="stuck",
        actions="stuck"),
    Verdict.LEAK: Entry(
        "blocks stay used with nothing running or waiting for `leak-after` (one-shot: suspected at once)",
        "warning", "orange", false_full=False, waiting=False, alert="VLLMKVBlockLeak", explanation="leak",
        actions="leak"),
    Verdict.TARGET_DOWN: Entry(
        "the last scrape failed; `/api/v1/diagnosis` lists the engines last seen with this verdict, as `/metrics` "
        "does",
        "warning", "dark-red", false_full=False, waiting=False, alert="VLLMHeadroomTargetDown",
        explanation="target_down", actions="target_down"),
    Verdict.BUDGET_FULL: Entry(
        "the sidecar only: requests wait beside free slots and blocks, prefills completed since the last scrape "
        f"(`{_N.prompt_tokens}` rose), and one typical prompt (the profile's prompt quantile) takes at least "
        f"the step's whole token budget (`max_num_batched_tokens`, stated, or vLLM V1's default of "
        f"{defaults.VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS} assumed), on "
        "two scrapes in a row: V1 schedules running prefills first and admits waiting requests only while budget "
        "is left",
        "warning", "yellow", false_full=True, waiting=True, alert="VLLMHeadroomBudgetFull",
        explanation="budget_full", actions="budget_full"),
    Verdict.NEVER_FITS: Entry(
        "nothing runs, the whole pool is free, requests wait, and a request of max_model_len needs more blocks than "
        "the pool: the head can never be admitted and blocks the queue (needs a second scrape; one-shot: "
        "suspected). At idle, max_model_len above the pool is a warning in the actions",
        "critical", "dark-red", false_full=False, waiting=True, alert="VLLMHeadroomNeverFits",
        explanation="never_fits", actions="never_fits"),
    Verdict.TRANSIENT: Entry(
        "one-shot only: requests wait beside room for a typical request (or max_num_seqs is unknown); in one "
        "observation that is most often the moment between two engine steps, so it is never judged false-full",
        "none", "light-blue", false_full=False, waiting=False, alert=None, explanation="transient",
        actions="transient",
        no_alert="one-shot (`vllm-headroom diagnose`) only: a served sidecar never exports it as current"),
    Verdict.SLEEPING: Entry(
        f"vLLM's `{_N.sleep_state.removeprefix(_N.prefix)}{{sleep_state=\"awake\"}}` is 0: the engine was put to sleep "
        "(`--enable-sleep-mode`, POST `/sleep`); the action is POST `/wake_up`, not a restart. Never false-full",
        "info", "blue", false_full=False, waiting=False, alert="VLLMEngineAsleepWithQueue",
        explanation="sleeping", actions="sleeping"),
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
    rows = ["| verdict | when | false-full | kept | alert |", "|---|---|---|---|---|"]
    for v, e in CATALOGUE.items():
        alert = f"`{e.alert}` ({e.severity})" if e.alert else f"none: {e.no_alert}"
        rows.append(f"| `{v}` | {e.meaning} | {'yes' if e.false_full else 'no'} | {'yes' if e.waiting else 'no'} "
                    f"| {alert} |")
    return "\n".join(rows) + "\n"
