"""One grammar each for durations, byte sizes, token counts and parameter counts, for every flag, env var
and `--vllm-args` value.

- Durations (Prometheus' grammar plus decimals): `5s`, `0.5s`, `300ms`, `1m`, `1h30m`, `2d`; a bare number
  is seconds. Returns seconds.
- Sizes: `16MiB`, `6.51GiB`, `23.58GiB`, `80GB`, `512K`; IEC (`KiB`, `MiB`, `GiB`, `TiB`, also `Ki`, `Gi`)
  are powers of 1024, two-letter SI (`kB`/`KB`, `MB`, `GB`, `TB`) powers of 1000. A single-letter suffix
  follows vLLM's `human_readable_int` (the grammar of its `--kv-cache-memory-bytes`): lowercase `k m g t`
  are powers of 1000, uppercase `K M G T` powers of 1024, and a decimal with an uppercase one is refused.
  A bare number is bytes unless the caller states another unit.
- Token counts, exactly as vLLM 0.32.0 reads `--max-model-len`, `--max-num-batched-tokens` and the other
  `human_readable_int` flags (vllm/utils/argparse_utils.py:29-70, `human_readable_int_or_auto` :73-93;
  chosen per flag in vllm/engine/arg_utils.py:389-403): `4096`, `32k` (×1000), `32K` (×1024), `1m`/`1M`,
  `2t`/`2T`, `25.6k` (a decimal with a lowercase suffix, truncated to a whole number as vLLM's
  `int(float(n) × mult)` does); a decimal with an uppercase (binary) suffix is refused with vLLM's message
  "Decimals are not allowed with binary suffixes like K. Did you mean to use 1.5k instead?"; `auto` / `-1`
  mean "not set". Ours also refuses 0 and negative counts.
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
# vLLM's human_readable_int suffixes (vllm/utils/argparse_utils.py:42-56).
_DECIMAL_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY_SUFFIX = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
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


def human_readable_int(text: str) -> int:
    """vLLM 0.32.0's `human_readable_int` (vllm/utils/argparse_utils.py:29-70), its rule in our code:
    '1k' → 1000, '1K' → 1024, '25.6k' → 25600, '1.5K' refused, else a plain integer; raises ValueError."""
    value = text.strip()
    m = _HUMAN_INT.fullmatch(value)
    if m:
        number, suffix = m.groups()
        if suffix in _DECIMAL_SUFFIX:
            return int(float(number) * _DECIMAL_SUFFIX[suffix])
        if "." in number:
            raise ValueError(f"Decimals are not allowed with binary suffixes like {suffix}. Did you mean to use "
                             f"{number}{suffix.lower()} instead?")
        return int(number) * _BINARY_SUFFIX[suffix]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number such as 4096, 32k (×1000) or 32K (×1024)") from None


def parse_size(text: str, default_unit: str = "B") -> int:
    """'16MiB', '6.51GiB', '80GB', '512K' → bytes; a bare number is in `default_unit`; raises ValueError.

    A single-letter suffix reads as vLLM's `human_readable_int` does (`k` ×1000, `K` ×1024, no decimals
    with `K M G T`)."""
    raw = text.strip()
    if _HUMAN_INT.fullmatch(raw):
        return human_readable_int(raw)
    m = _SIZE.match(raw)
    unit = "" if m is None else m.group(2)
    scale = None if m is None else _SIZE_SCALE.get((unit or default_unit).lower())
    if m is None or scale is None or (len(unit) == 1 and unit.lower() != "b"):
        raise ValueError(f"{text!r} is not a size such as 16MiB, 6.51GiB or 80GB")
    return round(float(m.group(1)) * scale)


def parse_tokens(text: str) -> int | None:
    """vLLM's human-readable token counts (`human_readable_int_or_auto`): '4096', '32k' (×1000), '32K'
    (×1024), '25.6k'; 'auto' / '-1' → None. Raises ValueError for anything else, a decimal with a binary
    suffix (vLLM's message), and 0 or less."""
    raw = text.strip()
    if raw == "-1" or raw.lower() == "auto":
        return None
    value = human_readable_int(raw)
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive token count such as 4096, 32k or 32K")
    return value


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
