"""What "effective usage" meant, said in words that cannot read as "the KV cache is really full".

`unreachable_pool_ratio` is the share of the KV pool a new worst-case request cannot get right now
(1 − min(slot headroom, safe headroom) × W / B, the value formerly exported as `effective_usage_ratio`),
and `binding_limit` says which limit makes it so: `slots` (max_num_seqs) or `blocks` (KV memory). At 100 %
with `slots` binding, memory is free and only the slots are taken: the false-full pattern.
"""

from __future__ import annotations

from typing import Literal

from ..pipeline.derive import Headroom

Limit = Literal["slots", "blocks"]
LIMITS: tuple[Limit, ...] = ("slots", "blocks")


def unreachable_pool_ratio(h: Headroom) -> float:
    """Share 0..1 of the usable pool a new worst-case request cannot get (same value as effective usage)."""
    return h.effective_usage_ratio


def binding_limit(h: Headroom) -> Limit:
    """`slots` when free slots under max_num_seqs are the tighter limit on new requests, else `blocks`.

    With max_num_seqs unknown the slots cannot be judged, so blocks are named.
    """
    slots = h.slot_headroom_requests
    return "slots" if slots is not None and slots <= h.safe_headroom_requests else "blocks"
