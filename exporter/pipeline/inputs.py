"""Every input of the judgement with its provenance and, when nobody stated it, its range.

Provenance, most to least certain: `stated` (our own flag), `vllm_cmdline` (vLLM's command line: `--vllm-args` or
/proc), `read_from_vllm` (what vLLM exports: cache_config_info, /v1/models, the length histograms), `inferred`
(from what the engine did, with the evidence and a range), `assumed_default` (vLLM's default, one value per device
class it may run on), `unknown`. A conclusion may rest on an inferred or assumed value only if it holds over the
whole range (pipeline/verdict.py); advice never changes such a value, it asks to state it (pipeline/advice.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..core.records import quick_init
from ..engines.base import Candidate
from .config import Source


class Provenance(StrEnum):
    STATED = "stated"
    VLLM_CMDLINE = "vllm_cmdline"
    READ_FROM_VLLM = "read_from_vllm"
    INFERRED = "inferred"
    ASSUMED_DEFAULT = "assumed_default"
    UNKNOWN = "unknown"


_OF_SOURCE = {
    Source.FLAG: Provenance.STATED,
    Source.VLLM_ARGS: Provenance.VLLM_CMDLINE,
    Source.CMDLINE: Provenance.VLLM_CMDLINE,
    Source.CACHE_CONFIG_INFO: Provenance.READ_FROM_VLLM,
    Source.V1_MODELS: Provenance.READ_FROM_VLLM,
    Source.INFERRED: Provenance.INFERRED,
    Source.DEFAULT: Provenance.ASSUMED_DEFAULT,
    Source.STARTUP_LOG: Provenance.READ_FROM_VLLM,  # what vLLM printed when it started
    Source.ESTIMATED: Provenance.INFERRED,  # our estimate from the model's config and the pool, with its range
}
GUESSED = frozenset({Provenance.INFERRED, Provenance.ASSUMED_DEFAULT, Provenance.UNKNOWN})


def provenance(source: Source | str) -> Provenance:
    """The provenance of a config value by the source it was resolved from."""
    return _OF_SOURCE[Source(source)]


@quick_init
@dataclass(frozen=True)
class Input:
    """One input of the judgement. `value`: the value the figures use (None: unknown); `low`/`high`: the range it
    may have when it is not known exactly; `candidates`: the values the judgement was checked over (vLLM's
    defaults per device class); `rule`: the evidence (inferred) or the rule (assumed) behind it."""

    name: str
    value: int | None
    provenance: Provenance
    low: int | None = None
    high: int | None = None
    rule: str = ""
    candidates: tuple[Candidate, ...] = ()

    @property
    def exact(self) -> bool:
        return self.provenance not in GUESSED

    def as_json(self) -> dict[str, Any]:
        return {"value": self.value, "provenance": str(self.provenance), "low": self.low, "high": self.high,
                "rule": self.rule, "candidates": [{"value": c.value, "rule": c.rule} for c in self.candidates]}

    def describe(self) -> str:
        """`20 (inferred: ...; between 20 and 1,024)`, `unknown (between 8 and 1,024)`, `8 (vllm_cmdline)`."""
        head = "unknown" if self.value is None else f"{self.value:,}"
        if self.exact:
            return f"{head} ({self.provenance})"
        rng = ""
        if self.low is not None and self.high is not None and self.low != self.high:
            rng = f"between {self.low:,} and {self.high:,}"
        parts = [p for p in (str(self.provenance) if self.value is not None else "", self.rule, rng) if p]
        return f"{head} ({'; '.join(parts)})" if parts else head
