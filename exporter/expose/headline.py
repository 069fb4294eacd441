"""What "effective usage" meant, said in words that cannot read as "the KV cache is really full".

`unreachable_pool_ratio` is the share of the KV pool a new worst-case request cannot get right now
(1 − min(slot headroom, safe headroom) × W / B, the value formerly exported as `effective_usage_ratio`): a risk
figure, sized by the worst case. What binds now is the judgement's (`EngineReport.binding_limit`, one of
`pipeline.catalogue.LIMITS`): the headline names it and never re-derives it from the headroom.
"""

from __future__ import annotations

from ..pipeline.catalogue import LIMITS as LIMITS
from ..pipeline.catalogue import Limit as Limit
from ..pipeline.derive import Headroom
from ..pipeline.report import EngineReport


def unreachable_pool_ratio(h: Headroom) -> float:
    """Share 0..1 of the usable pool a new worst-case request cannot get (same value as effective usage)."""
    return h.effective_usage_ratio


def binding_limit(e: EngineReport) -> Limit:
    """What binds now, as the engine's one judgement says (slots, token_budget, head_prompt, blocks, deferral,
    pool_size, engine, sleep, none, undecided)."""
    return e.binding_limit
