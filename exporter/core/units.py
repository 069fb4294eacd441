"""One grammar each for durations, byte sizes, token counts and parameter counts, for every flag, env var
and `--vllm-args` value.

- Durations (Prometheus' grammar plus decimals): `5s`, `0.5s`, `300ms`, `1m`, `1h30m`, `2d`; a bare number
  is seconds. Returns seconds.
- Sizes: `16MiB`, `6.51GiB`, `23.58GiB`, `80GB`, `512K`; IEC (`KiB`, `MiB`, `GiB`, `TiB`, also `Ki`, `Gi`)
  are powers of 1024, SI (`kB`/`KB`, `MB`, `GB`, `TB`, `K`, `M`, `G`, `T`) powers of 1000, as Kubernetes
  and vLLM's start-up log write them. A bare number is bytes unless the caller states another unit.
- Token counts, as vLLM's `--max-model-len` reads them (`vllm/engine/arg_utils.py`,
  `human_readable_int`, 0.10-0.33): `4096`, `32k` (×1000), `32K` (×1024), `1m`/`1M`, `1.5k`; decimals must
  land on a whole number.
- Parameter counts: `70B`, `8e9`, `405000000000`, `1.5T`.

Every parser raises `ValueError` with a message that names the value and shows an accepted form.
"""

from __future__ import annotations

import math
import re

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_DURATION_SCALE = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_SIZE = re.compile(r"^(\d+(?:\.\d+)?|\.\d+)\s*([A-Za-z]*)$")
_SIZE_SCALE = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2, "gi": 1024**3, "gib": 1024**3,
    "ti": 1024**4, "tib": 1024**4,
}
_TOKEN_SCALE = {"k": 1000, "K": 1024, "m": 1000**2, "M": 1024**2, "g": 1000**3, "G": 1024**3}
_PARAM_SCALE = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def parse_duration(text: str) -> float:
    """'5s', '0.5s', '300ms', '1h30m' or a bare number of seconds → seconds (≥ 0); raises ValueError."""
    raw = text.strip()
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if math.isfinite(value):
        if value < 0:
            raise ValueError(f"{text!r} is negative; a duration is such as 5s, 300ms or 1h30m")
        return value
    pos, total = 0, 0.0
    for m in _DURATION_PART.finditer(raw):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DURATION_SCALE[m.group(2)]
        pos = m.end()
    if pos != len(raw) or not raw:
        raise ValueError(f"{text!r} is not a duration such as 5s, 300ms or 1h30m")
    return total


def parse_size(text: str, default_unit: str = "B") -> int:
    """'16MiB', '6.51GiB', '80GB', '512K' → bytes; a bare number is in `default_unit`; raises ValueError."""
    m = _SIZE.match(text.strip())
    unit = "" if m is None else m.group(2)
    scale = None if m is None else _SIZE_SCALE.get((unit or default_unit).lower())
    if m is None or scale is None:
        raise ValueError(f"{text!r} is not a size such as 16MiB, 6.51GiB or 80GB")
    return round(float(m.group(1)) * scale)


def parse_tokens(text: str) -> int | None:
    """vLLM's human-readable token counts: '4096', '32k' (×1000), '32K' (×1024), '1.5M'; 'auto'/-1 → None.

    Raises ValueError for anything else, including a decimal that is not a whole number of tokens.
    """
    raw = text.strip()
    if raw in ("auto", "-1"):
        return None
    scale = _TOKEN_SCALE.get(raw[-1:], 1)
    number = raw[:-1] if raw[-1:] in _TOKEN_SCALE else raw
    try:
        value = float(number) * scale
    except ValueError:
        raise ValueError(f"{text!r} is not a token count such as 4096, 32k or 32K") from None
    if not math.isfinite(value) or value <= 0 or value != int(value):
        raise ValueError(f"{text!r} is not a whole, positive token count such as 4096, 32k or 32K")
    return int(value)


def parse_params(text: str) -> int:
    """'70B', '8e9', '1.5T', '405000000000' → a parameter count; raises ValueError."""
    raw = text.strip()
    scale = _PARAM_SCALE.get(raw[-1:].upper(), 1.0)
    try:
        value = float(raw[:-1] if scale != 1.0 else raw) * scale
    except ValueError:
        raise ValueError(f"{text!r} is not a parameter count such as 70B or 8e9") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{text!r} must be greater than 0")
    return int(value)


def format_duration(seconds: float) -> str:
    """Seconds in the duration grammar, exact to the millisecond: 5 → '5s', 90 → '1m30s', 0.5 → '500ms'."""
    ms = round(seconds * 1000)
    if ms == 0:
        return "0s"
    out = ""
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        if ms >= size:
            out += f"{ms // size}{unit}"
            ms %= size
    return out


def format_size(n: int) -> str:
    """Bytes in the size grammar, exact when a binary unit divides: 16777216 → '16MiB'; else '6.51GiB'."""
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n}B"
