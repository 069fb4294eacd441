"""What another KV block size would change, for `estimate` and `recommend`: the empty slots of used blocks, the
requests of the stated lengths that fit, and the part of a shared prefix the prefix cache cannot serve.

Every figure comes from `pipeline.derive` (`life_waste`, `worst_case_blocks`, `max_concurrency`,
`prefix_boundary_loss`); this module only lays them out per block size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..engines.vllm import attention
from ..pipeline import derive


@dataclass(frozen=True)
class BlockSizeRow:
    """One block size of the what-if."""

    block_size: int
    chosen: bool
    accepted: bool | None  # the backend takes it (None: backend unknown)
    waste: derive.Waste | None  # empty-slot share of a request's blocks over its life (None: lengths unknown)
    num_blocks: int | None
    max_concurrency: int | None  # requests of the stated lengths that fit at once
    prefix_loss: derive.Waste | None  # share of prompt tokens a shared prefix loses at its last partial block

    def as_json(self) -> dict[str, Any]:
        w = self.waste
        return {"block_size": self.block_size, "chosen": self.chosen, "backend_accepts": self.accepted,
                "waste_ratio": None if w is None else round(w.ratio, 6),
                "waste_range": None if w is None else [round(w.low, 6), round(w.high, 6)],
                "num_blocks": self.num_blocks, "max_concurrency": self.max_concurrency,
                "prefix_boundary_loss_range": None if self.prefix_loss is None else
                [round(self.prefix_loss.low, 6), round(self.prefix_loss.high, 6)]}


def what_if(chosen: int, backend: str | None, prompt: int | None, generated: int | None,
            num_blocks: Callable[[int], int | None], max_model_len: int | None = None,
            prefix_hit_ratio: float = 0.0, running: int | None = None) -> list[BlockSizeRow]:
    """A row per block size the backend takes (and `chosen`): `num_blocks(bs)` gives the pool's blocks at that size
    (None when vLLM would refuse it); with prefix-cache hits, the share of the prompt a shared prefix loses at its
    last partial block (`derive.prefix_boundary_loss`).

    With the lengths (prompt, generated), the waste is a request's over its life; without them, the pool's when
    `running` requests fill it (each leaves up to bs − 1 slots of its last block empty, half a block on average:
    the field guides' B / 2S)."""
    rows = []
    for bs in attention.what_if_sizes(backend, chosen):
        n = num_blocks(bs)
        waste = None
        conc = None
        if (prompt is None or generated is None) and running and n is not None and n > 1:
            waste = derive.in_flight_waste(derive.usable_blocks(n, True), running, bs)
        if prompt is not None and generated is not None:
            waste = derive.life_waste(prompt, generated, bs)
            if n is not None and n > 1:
                w = derive.worst_case_blocks(prompt, generated, max_model_len, bs)
                conc = derive.max_concurrency(derive.usable_blocks(n, True), w)
        cached = None if prompt is None else derive.prefix_boundary_loss(prefix_hit_ratio, prompt, bs)
        rows.append(BlockSizeRow(bs, bs == chosen, attention.accepts(backend, bs), waste, n, conc, cached))
    return rows


def render(rows: list[dict[str, Any]], lengths: str, indent: str = "  ") -> list[str]:
    """The what-if as text lines, from the rows' JSON (`BlockSizeRow.as_json`)."""
    prefix = any(r["prefix_boundary_loss_range"] is not None for r in rows)
    out = [f"{indent}block size what-if ({lengths}):",
           f"{indent}  {'block size':>10} {'empty slots':>12} {'range':>10} {'blocks':>9} {'fit at once':>11}"
           + (f" {'prefix lost':>12}" if prefix else "")]
    for r in rows:
        mark = " (chosen)" if r["chosen"] else (" (the backend refuses it)" if r["backend_accepts"] is False else "")
        w, rng = r["waste_ratio"], r["waste_range"]
        waste = "?" if w is None else f"{100 * w:.1f} %"
        span = "" if rng is None else f"{100 * rng[0]:.0f}-{100 * rng[1]:.0f} %"
        n, conc, lost = r["num_blocks"], r["max_concurrency"], r["prefix_boundary_loss_range"]
        out.append(f"{indent}  {r['block_size']:>10} {waste:>12} {span:>10} {'?' if n is None else f'{n:,}':>9} "
                   f"{'-' if conc is None else f'{conc:,}':>11}"
                   + (f" {'' if lost is None else f'{100 * lost[0]:.0f}-{100 * lost[1]:.0f} %':>12}" if prefix else "")
                   + mark)
    return out
