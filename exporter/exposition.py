"""Parse the Prometheus text exposition (format 0.0.4) that vLLM serves on /metrics.

Only the families the sidecar uses are fully parsed (labels and values); every other sample line is checked
for a well-formed value and then skipped, which keeps a ~53 KB vLLM scrape cheap. Ray's exporter prefixes
(`ray_vllm:` and `ray_vllm_`) are folded into vLLM's own `vllm:` names here, once, so nothing downstream
has to know about them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

Labels = dict[str, str]
Series = list[tuple[Labels, float]]

# A label pair: name="value" with the text format's three escapes; a comma may follow.
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*(,|$)')
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:")
_VLLM = "vllm:"
_normalized: dict[str, str] = {}


class ExpositionError(ValueError):
    """The body is not a valid text exposition; `reason` is a short machine-readable cause."""

    def __init__(self, message: str, reason: str = "malformed") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Exposition:
    """Samples of the wanted families by (normalized) sample name, plus how many vLLM lines were seen."""

    samples: dict[str, Series] = field(default_factory=dict)
    vllm_lines: int = 0

    def series(self, name: str) -> Series:
        return self.samples.get(name, [])


def normalize_name(name: str) -> str:
    """Map Ray-exported vLLM names (`ray_vllm:x`, `ray_vllm_x`) to vLLM's own (`vllm:x`)."""
    cached = _normalized.get(name)
    if cached is not None:
        return cached
    out = name
    if name.startswith("ray_vllm:") or name.startswith("ray_vllm_"):
        out = _VLLM + name[9:]
    if len(_normalized) < 20000:  # names are a small fixed set; the cap only guards against a hostile target
        _normalized[name] = out
    return out


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return value.replace("\\\\", "\x00").replace('\\"', '"').replace("\\n", "\n").replace("\x00", "\\")


def _parse_labels(text: str, line_no: int) -> Labels:
    labels: Labels = {}
    pos, end = 0, len(text)
    while pos < end:
        m = _LABEL_RE.match(text, pos)
        if m is None:
            if text[pos:].strip() == "":
                break
            raise ExpositionError(f"line {line_no}: malformed label set {{{text}}}")
        labels[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
        if m.group(3) == "" and pos < end:
            raise ExpositionError(f"line {line_no}: malformed label set {{{text}}}")
    return labels


def _value(token: str, line_no: int) -> float:
    try:
        return float(token)
    except ValueError:
        raise ExpositionError(f"line {line_no}: expected a float value, got {token[:40]!r}") from None


def parse(text: str, wanted: Iterable[str] | None = None) -> Exposition:
    """Parse `text`; keep samples whose normalized name is in `wanted` (all when None)."""
    want = None if wanted is None else frozenset(wanted)
    if text and not text.endswith("\n"):
        # The format requires a final line feed; its absence means the body was cut off.
        raise ExpositionError("the exposition ends mid-line (truncated body)", reason="truncated")
    out = Exposition()
    samples = out.samples
    vllm_lines = 0
    for line_no, line in enumerate(text.split("\n"), 1):
        if not line or line[0] == "#":
            continue
        if line[-1] == "\r":
            line = line[:-1]
        if line[0] not in _NAME_START:
            if line.strip() == "":
                continue
            raise ExpositionError(f"line {line_no}: not a metric line: {line[:60]!r}")
        brace = line.find("{")
        space = line.find(" ")
        if brace != -1 and (space == -1 or brace < space):
            raw = line[:brace]
            close = line.rfind("}")
            if close < brace:
                raise ExpositionError(f"line {line_no}: unclosed label set")
            label_text = line[brace + 1 : close]
            rest = line[close + 1 :]
        else:
            if space == -1:
                raise ExpositionError(f"line {line_no}: sample has no value: {line[:60]!r}")
            raw = line[:space]
            label_text = ""
            rest = line[space:]
        name = normalize_name(raw)
        if name.startswith(_VLLM):
            vllm_lines += 1
        tokens = rest.split()
        if not tokens or len(tokens) > 2:
            raise ExpositionError(f"line {line_no}: expected 'value [timestamp]' after {raw}")
        value = _value(tokens[0], line_no)
        if want is not None and name not in want:
            continue
        labels = _parse_labels(label_text, line_no) if label_text else {}
        series = samples.get(name)
        if series is None:
            samples[name] = [(labels, value)]
        else:
            series.append((labels, value))
    out.vllm_lines = vllm_lines
    return out
