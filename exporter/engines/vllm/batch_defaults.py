"""vLLM's defaults for max_num_seqs and max_num_batched_tokens when nobody sets them: one value per device class.

Neither value is in any vLLM metric, and the default depends on the device vLLM runs on, which the exposition does
not show either. So an unknown value is a set of candidates, each with the rule it comes from, and the judgement
must hold over all of them (pipeline/judge.py, pipeline/verdict.py).

vLLM 0.32.0 `EngineArgs.get_batch_defaults` (vllm/engine/arg_utils.py:2894-2985) for the OpenAI server
(`UsageContext.OPENAI_API_SERVER`), world = tensor x pipeline parallel size:

| device | max_num_seqs | max_num_batched_tokens |
|---|---|---|
| CPU (`current_platform.is_cpu()`) | 128 x world | 2,048 x world |
| GPU under 70 GiB, or an A100 | 256 | 2,048 |
| GPU from 70 GiB (H100, H200) | 1,024 | 8,192 |
| GPU from 160 GiB (B200, B300) | 1,024 | 16,384 |

`--performance-mode throughput` doubles both where they were not set
(`_set_default_max_num_seqs_and_batched_tokens_args`, arg_utils.py:3130-3134 @0.32.0). vLLM 0.10.2 has the same
table without the 160 GiB class (arg_utils.py:1669-1715 @0.10.2). TPUs use 256-1,024 tokens; the sidecar does not
target them. V0 (<= 0.10) admits by `max_num_batched_tokens = max(max_model_len, 2048)` without chunked prefill
and is not judged by the token budget here (`budget` is None for V0).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..base import BatchDefaults, Candidate
from .releases import parse_release


@dataclass(frozen=True)
class _Class:
    device: str
    seqs: int
    tokens: int
    per_world: bool = False  # CPU: both scale with the world size


_CLASSES_032 = (
    _Class("CPU", 128, 2048, per_world=True),
    _Class("a GPU under 70 GiB or an A100", 256, 2048),
    _Class("a GPU from 70 GiB (H100, H200)", 1024, 8192),
    _Class("a GPU from 160 GiB (B200, B300)", 1024, 16384),
)
WHERE = "vllm/engine/arg_utils.py get_batch_defaults"


def _classes(version: str | None) -> tuple[_Class, ...]:
    release = parse_release(version)
    if release is not None and release <= (0, 10, 2):
        return _CLASSES_032[:3]  # no 160 GiB class yet (arg_utils.py @0.10.2)
    return _CLASSES_032  # 0.32.0's table; releases in between are read as it (a wider range, never a narrower)


@lru_cache(maxsize=64)  # pure, asked once per scrape with the same few arguments
def batch_defaults(version: str | None, world_size: int | None, performance_mode: str | None) -> BatchDefaults:
    """The candidates for both values on a server of `version` (None: unknown, read as 0.32.0), a world size
    (tensor x pipeline parallel; None: unknown, 1 assumed for CPU's scaling and said in the rule) and its
    `--performance-mode` (None: the command line is not known, so the doubled values are candidates too).
    Each candidate's rule names the device classes that give it, in a few words."""
    world = world_size or 1
    seqs: list[Candidate] = []
    tokens: list[Candidate] = []
    for c in _classes(version):
        scale = world if c.per_world else 1
        device = c.device
        if c.per_world:
            # CPU's defaults scale with the world size (tensor x pipeline parallel)
            device += f" (x {world} ranks)" if world_size else " (for one rank: x the tensor and pipeline ranks)"
        seqs.append(Candidate(c.seqs * scale, device))
        tokens.append(Candidate(c.tokens * scale, device))
    if performance_mode == "throughput":
        seqs = [Candidate(2 * c.value, f"{c.rule}, doubled by --performance-mode throughput") for c in seqs]
        tokens = [Candidate(2 * c.value, f"{c.rule}, doubled by --performance-mode throughput") for c in tokens]
    elif performance_mode is None:
        for out in (seqs, tokens):
            top = max(out, key=lambda c: c.value)
            out.append(Candidate(2 * top.value, f"{top.rule} with --performance-mode throughput (the command line "
                                                "is not known)"))
    where = f"vLLM {version or '0.32.0'}'s defaults ({WHERE})"
    return BatchDefaults(_dedupe(seqs), _dedupe(tokens), where)


def _dedupe(cands: list[Candidate]) -> tuple[Candidate, ...]:
    """One candidate per value, ascending, naming every device class that gives it."""
    rules: dict[int, list[str]] = {}
    for c in cands:
        rules.setdefault(c.value, []).append(c.rule)
    return tuple(Candidate(v, " or ".join(said)) for v, said in sorted(rules.items()))
