"""Scaled-up exposition shapes built from the recorded real vLLM 0.32.0 expositions (never hand-typed).

- `data_parallel(text, n)`: every sample carrying engine="0" repeated for engine="0".."n-1" (what a
  `--data-parallel-size n` API server exports: one series per engine, same families);
- `models(text, n)`: every sample carrying model_name="<m>" repeated for n served names (more models or LoRA
  adapters behind one endpoint);
- `repeat_families(text, k)`: k renamed copies (`vllm:repK_...`) of every vLLM family appended, standing in
  for the families a bigger or newer vLLM adds that the sidecar does not read.
Copies stay next to their original line, so every family's samples remain contiguous (valid format).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

_ENGINE = 'engine="0"'
_MODEL_RE = re.compile(r'model_name="([^"]*)"')


def _relabel(text: str, old: str, news: Sequence[str]) -> str:
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("#") or old not in line:
            out.append(line)
        else:
            out.extend(line.replace(old, new) for new in news)
    return "\n".join(out) + "\n"


def data_parallel(text: str, n: int) -> str:
    return _relabel(text, _ENGINE, [f'engine="{i}"' for i in range(n)])


def models(text: str, n: int) -> str:
    m = _MODEL_RE.search(text)
    if m is None:
        raise ValueError("the exposition carries no model_name label")
    name = m.group(1)
    variants = [name] + [f"{name}-lora-{i}" for i in range(1, n)]
    return _relabel(text, f'model_name="{name}"', [f'model_name="{v}"' for v in variants])


def repeat_families(text: str, k: int) -> str:
    vllm_lines = [ln for ln in text.splitlines() if ln.startswith(("vllm:", "# HELP vllm:", "# TYPE vllm:"))]
    block = "\n".join(vllm_lines)
    copies = [block.replace("vllm:", f"vllm:rep{i}_") for i in range(1, k + 1)]
    return text + "\n".join(copies) + "\n"


def to_size(text: str, target_bytes: int, dp: int = 8) -> str:
    """data_parallel(dp), then repeated families until the body reaches about target_bytes."""
    base = data_parallel(text, dp)
    per_copy = len(repeat_families(base, 1)) - len(base)
    k = max(0, math.ceil((target_bytes - len(base)) / per_copy))
    return repeat_families(base, k)


SHAPES: dict[str, str] = {
    "1x": "the recorded exposition as served (false-full timeline frames)",
    "dp8": "8 data-parallel engines (engine=0..7)",
    "models20": "20 served models / LoRA names",
    "1MB": "8 engines + repeated vLLM families, ~1 MB",
    "5MB": "8 engines + repeated vLLM families, ~5 MB",
}


def build(shape: str, frame: str) -> str:
    if shape == "1x":
        return frame
    if shape == "dp8":
        return data_parallel(frame, 8)
    if shape == "models20":
        return models(frame, 20)
    if shape == "1MB":
        return to_size(frame, 1_000_000)
    if shape == "5MB":
        return to_size(frame, 5_000_000)
    raise ValueError(shape)
