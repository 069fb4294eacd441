"""Parse the Prometheus text exposition (format 0.0.4) and the OpenMetrics text (1.0.0) vLLM serves on /metrics.

vLLM's Python API server answers in format 0.0.4; its Rust frontend (vllm-rs, VLLM_USE_RUST_FRONTEND=1, 0.32.0)
answers in OpenMetrics whatever the Accept header asks for (tests/fixtures/vllm-0.32.0-rust/): counters typed by
their base name (`# TYPE <family> counter` above the sample `<family>_total`) and a final `# EOF`.
OpenMetrics also allows `# UNIT` lines, a missing line feed after `# EOF`, and an exemplar after any sample's value
(`... 5 # {trace_id="..."} 0.5 1700000000.1`). Sample names are the same in both formats and comments are never
read, so only the sample lines' syntax differs: an exemplar is skipped.

Only the families the sidecar uses are fully parsed (labels and values); every other sample line is checked
for a well-formed value and then skipped, which keeps a ~53 KB vLLM scrape cheap. An engine's other sample-name
prefixes (vLLM's under Ray's exporter: `RENAMES` in engines/vllm/metrics.py) are folded into its own prefix
here, once, so nothing downstream has to know about them. Engine-neutral: the engine's prefix and renames are
arguments (vLLM's by default).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..engines.vllm import metrics as _vllm

Labels = dict[str, str]
Series = list[tuple[Labels, float]]

# A label pair: name="value" with the text format's three escapes; a comma may follow.
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*(,|$)')
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:")


class ExpositionError(ValueError):
    """The body is not a valid text exposition; `reason` is a short machine-readable cause."""

    def __init__(self, message: str, reason: str = "malformed") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Exposition:
    """Samples of the wanted families by (normalized) sample name, plus how many lines of the engine's family
    (its prefix) were seen."""

    samples: dict[str, Series] = field(default_factory=dict)
    family_lines: int = 0

    @property
    def vllm_lines(self) -> int:
        """`family_lines` under its former name."""
        return self.family_lines

    def series(self, name: str) -> Series:
        return self.samples.get(name, [])


_ESCAPE_RE = re.compile(r"\\(.)", re.S)
_ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}


def _unescape(value: str) -> str:
    """The text format's three escapes (\\\\, \\", \\n); any other backslash stays as written."""
    if "\\" not in value:
        return value
    return _ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(0)), value)


_label_cache: dict[str, Labels] = {}


def _cached_labels(text: str, line_no: int) -> Labels:
    """Label sets repeat scrape after scrape (only values change): parse each distinct one once.

    The dicts are shared, so callers must treat them as read-only.
    """
    labels = _label_cache.get(text)
    if labels is None:
        labels = _parse_labels(text, line_no)
        if len(_label_cache) >= 65536:  # a target that invents label sets must not grow us without bound
            _label_cache.clear()
        _label_cache[text] = labels
    return labels


def _parse_labels(text: str, line_no: int) -> Labels:
    if "\\" not in text:
        # Without escapes no value can hold a quote, so '",' separates pairs exactly: split at C speed.
        labels: Labels = {}
        body = text.rstrip().rstrip(",")
        if not body.endswith('"'):
            raise ExpositionError(f"line {line_no}: malformed label set {{{text}}}")
        for pair in body[:-1].split('",'):
            name, sep, value = pair.partition('="')
            name = name.strip().lstrip(",").strip()
            if not sep or not name.isidentifier() or not name.isascii() or '"' in value:
                return _parse_labels_escaped(text, line_no)
            labels[name] = value
        return labels
    return _parse_labels_escaped(text, line_no)


def _parse_labels_escaped(text: str, line_no: int) -> Labels:
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


def _fold(text: str, renames: tuple[tuple[str, str], ...]) -> str:
    """Rename sample lines that start with another prefix of the engine (HELP/TYPE comments are not read)."""
    text = "\n" + text
    for old, new in renames:
        text = text.replace("\n" + old, "\n" + new)
    return text[1:]


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")  # control characters no text exposition holds


def sniff(text: str) -> str | None:
    """One sentence naming a body that is no text exposition at all (gzip data, an HTML page), else None.

    Such bodies would otherwise be reported by their symptom (no engine series, a line cut short), which
    sends people looking at vLLM's flags instead of at the URL or the file.
    """
    head = text[:512].lstrip("\ufeff \t\r\n")
    if text.startswith("\x1f\x8b") or text.startswith("\x1f\ufffd"):
        return ("the body is gzip-compressed data, not a text exposition: decompress it first "
                "(gunzip the file, or fetch with curl --compressed)")
    sample = text[:4096]
    limit = max(8, len(sample) // 20)  # a stray NUL or bad byte in a label value is no binary file
    if sample.count("\ufffd") > limit or len(_CONTROL.findall(sample)) > limit:
        return "the body is binary data, not a text exposition: is this the right file or URL?"
    if head[:1] in ("{", "["):
        return ("the body is a JSON document, not a Prometheus text exposition: save vLLM's /metrics "
                "(curl -s http://HOST:8000/metrics > m.prom), not an API answer")
    lowered = head[:64].lower()
    if lowered.startswith(("<!doctype html", "<html", "<head", "<body")) or (
            lowered.startswith("<") and "<html" in head.lower()):
        return ("the body is an HTML page, not a Prometheus exposition: is this vLLM's address (it serves "
                "/metrics as text), or a proxy, login or error page in front of it?")
    return None


def blank(text: str) -> str | None:
    """One sentence for a body with nothing in it (empty, whitespace, a byte-order mark only), else None: said
    instead of "no engine series", which sends people looking at vLLM's flags."""
    if text.strip("\ufeff \t\r\n"):
        return None
    return ("the body is empty" + (" (only a byte-order mark)" if "\ufeff" in text else "")
            + ": no exposition was saved or served (is this the right file, or did the fetch fail?)")


def parse(text: str, wanted: Iterable[str] | None = None, prefix: str = _vllm.PREFIX,
          renames: tuple[tuple[str, str], ...] = _vllm.RENAMES) -> Exposition:
    """Parse `text`; keep samples whose normalized name is in `wanted` (all when None).

    `prefix` is the engine's sample-name prefix (lines starting with it are counted in `family_lines`) and
    `renames` the other prefixes folded into it.

    With `wanted`, only lines that start with a wanted name are read at all (a C-speed prefix test), which
    is what keeps a scrape cheap; lines of other families are not validated, so junk in a family we do not
    use cannot take the sidecar down (Prometheus, scraping vLLM itself, reports such lines).
    """
    # A body that is no exposition at all (gzip, binary, JSON, HTML) is named as such; it is sniffed only when
    # the parse would fail or find no vLLM series, so a good scrape pays nothing for it.
    if text and not text.endswith("\n") and not _ends_with_eof(text) and blank(text) is None:
        _raise_if_not_an_exposition(text)
        # The format requires a final line feed; its absence means the body was cut off.
        raise ExpositionError("the exposition ends mid-line (truncated body)", reason="truncated")
    if renames and _needle(renames) in text:
        text = _fold(text, renames)
    all_lines = text.split("\n")
    if wanted is None:
        lines: Iterable[tuple[int, str]] = enumerate(all_lines, 1)
    else:
        prefixes = tuple(wanted)
        lines = [(0, ln) for ln in all_lines if ln.startswith(prefixes)]  # line numbers only for errors
    out = Exposition()
    out.family_lines = text.count("\n" + prefix) + text.startswith(prefix)
    if out.family_lines == 0:
        _raise_if_not_an_exposition(text)
    try:
        _parse_lines(lines, out.samples, None if wanted is None else frozenset(wanted))
    except ExpositionError:
        _raise_if_not_an_exposition(text)
        raise
    return out


_needles: dict[tuple[tuple[str, str], ...], str] = {}


def _needle(renames: tuple[tuple[str, str], ...]) -> str:
    """The prefix all of `renames`' old prefixes share (one scan of the body tells whether any is there); ""
    when they share none, which every body contains."""
    needle = _needles.get(renames)
    if needle is None:
        needle = renames[0][0]
        for old, _new in renames[1:]:
            while not old.startswith(needle):
                needle = needle[:-1]
        _needles[renames] = needle
    return needle


def _ends_with_eof(text: str) -> bool:
    """OpenMetrics ends with `# EOF`, its line feed optional (`exposition = metricset HASH SP eof [ LF ]`)."""
    return text.endswith("# EOF") and (len(text) == 5 or text[-6] == "\n")


def _label_set_end(line: str, brace: int, line_no: int) -> int:
    """Index of the `}` closing the label set opened at `brace`, skipping quoted values (they may hold `}` and
    ` # `): the exemplar after the value has a label set of its own, so the last `}` of the line is not it."""
    pos, end = brace + 1, len(line)
    while pos < end:
        c = line[pos]
        if c == "}":
            return pos
        if c == '"':
            pos += 1
            while pos < end and line[pos] != '"':
                pos += 2 if line[pos] == "\\" else 1
        pos += 1
    raise ExpositionError(f"line {line_no}: unclosed label set")


def _raise_if_not_an_exposition(text: str) -> None:
    sniffed = sniff(text)
    if sniffed is not None:
        raise ExpositionError(sniffed, reason="malformed") from None


def _parse_lines(lines: Iterable[tuple[int, str]], samples: dict[str, Series], want: frozenset[str] | None) -> None:
    for line_no, line in lines:
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
        # An OpenMetrics exemplar (` # {labels} value [timestamp]`) follows the value: it has braces of its own.
        exemplar = " # " in line
        if brace != -1 and (space == -1 or brace < space):
            name = line[:brace]
            close = _label_set_end(line, brace, line_no) if exemplar else line.rfind("}")
            if close < brace:
                raise ExpositionError(f"line {line_no}: unclosed label set")
            label_text = line[brace + 1 : close]
            rest = line[close + 1 :]
        else:
            if space == -1:
                raise ExpositionError(f"line {line_no}: sample has no value: {line[:60]!r}")
            name = line[:space]
            label_text = ""
            rest = line[space:]
        if want is not None and name not in want:
            continue  # a longer name that shares a wanted prefix
        if exemplar:
            rest, hashed, example = rest.partition(" # ")
            if hashed and not example.lstrip().startswith("{"):
                raise ExpositionError(f"line {line_no}: expected an exemplar's label set after ' # ' in {name}")
        tokens = rest.split()
        if not tokens or len(tokens) > 2:
            raise ExpositionError(f"line {line_no}: expected 'value [timestamp]' after {name}")
        value = _value(tokens[0], line_no)
        labels = _cached_labels(label_text, line_no) if label_text else {}
        series = samples.get(name)
        if series is None:
            samples[name] = [(labels, value)]
        else:
            series.append((labels, value))
