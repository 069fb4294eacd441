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
    """Samples of the wanted families by (normalized) sample name, plus whether any line of the engine's family
    (its prefix) was seen: only its absence is ever asked (no engine series: not vLLM, or stats disabled), so the
    lines are not counted (a count was a full pass over every body, 8 % of a 53 KB scrape's CPU, issue 20)."""

    samples: dict[str, Series] = field(default_factory=dict)
    family_seen: bool = False
    duplicates: list[tuple[str, Labels]] = field(default_factory=list)  # (sample name, labels) seen twice or more

    def series(self, name: str) -> Series:
        return self.samples.get(name, [])


_ESCAPE_RE = re.compile(r"\\(.)", re.S)
_ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}


def _unescape(value: str) -> str:
    """The text format's three escapes (\\\\, \\", \\n); any other backslash stays as written."""
    if "\\" not in value:
        return value
    return _ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(0)), value)


_CONTROL_CHARS = re.compile("[\x00-\x08\x0b-\x1f\x7f]")  # C0 controls but tab and line feed, and DEL
_label_cache: dict[str, tuple[Labels, str]] = {}
_label_cache_chars = 0  # label text held by the cache: bounded in size, not only in entries
_NO_LABELS: tuple[Labels, str] = ({}, "")
_CACHE_ENTRIES, _CACHE_CHARS, _CACHED_LABEL_CHARS = 65536, 8 << 20, 4096


def _cached_labels(text: str, line_no: int) -> tuple[Labels, str]:
    """Label sets repeat scrape after scrape (only values change): parse each distinct one once. Returns the
    labels and their canonical key (sorted pairs; two spellings of one label set share it).

    The dicts are shared, so callers must treat them as read-only.
    """
    global _label_cache_chars
    cached = _label_cache.get(text)
    if cached is None:
        labels = _parse_labels(text, line_no)
        if _CONTROL_CHARS.search(text) is not None:
            # A control character (NUL, ESC, ...) in a label value would reach our own /metrics, the page and the
            # log as it came, and could join two label sets in the key below: it is shown as U+FFFD instead.
            labels = {k: _CONTROL_CHARS.sub("\ufffd", v) for k, v in labels.items()}
        cached = (labels, "\x00".join(f"{k}\x01{v}" for k, v in sorted(labels.items())))
        if len(text) > _CACHED_LABEL_CHARS:
            return cached  # no engine's labels are this long: a hostile one is parsed, never kept
        if len(_label_cache) >= _CACHE_ENTRIES or _label_cache_chars >= _CACHE_CHARS:
            # A target that invents label sets must not grow us without bound, in number or in bytes.
            _label_cache.clear()
            _label_cache_chars = 0
        _label_cache[text] = cached
        _label_cache_chars += 2 * len(text)  # the text and the canonical key
    return cached


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
        if "_" in token:  # Python reads "9_2" as 92; Prometheus' parser (Go's ParseFloat, no base prefix) refuses it
            raise ValueError(token)
        return float(token)
    except ValueError:
        raise ExpositionError(f"line {line_no}: expected a float value, got {token[:40]!r}") from None


def _fold(text: str, renames: tuple[tuple[str, str], ...]) -> str:
    """Rename sample lines that start with another prefix of the engine (HELP/TYPE comments are not read)."""
    text = "\n" + text
    for old, new in renames:
        text = text.replace("\n" + old, "\n" + new)
    return text[1:]


_NOT_BLANK = re.compile("[^\ufeff \t\r\n]")  # a character other than those `blank` strips
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
          renames: tuple[tuple[str, str], ...] = _vllm.RENAMES, max_samples: int | None = None) -> Exposition:
    """Parse `text`; keep samples whose normalized name is in `wanted` (all when None).

    `prefix` is the engine's sample-name prefix (whether a line starts with it is `family_seen`) and
    `renames` the other prefixes folded into it; `max_samples` refuses (reason `too_large`) a body with more
    kept samples than that. The same as feeding `text` to a `Parser` in one piece.

    With `wanted`, only lines that start with a wanted name are read at all (a C-speed prefix test), which
    is what keeps a scrape cheap; lines of other families are not validated, so junk in a family we do not
    use cannot take the sidecar down (Prometheus, scraping vLLM itself, reports such lines).
    """
    parser = Parser(wanted, prefix, renames, max_samples)
    parser.feed(text)
    return parser.close()


SNIFF_CHARS = 4096  # what `sniff` reads of a body


class Parser:
    """An incremental parse of one body: `feed` it the text as it arrives (any split), then `close`.

    Only the samples of wanted families are kept, so a body of 16 MiB costs memory for its few wanted lines,
    not for its text; each `feed` parses the complete lines it was given and returns, so a scrape parses its
    body chunk by chunk between reads instead of holding the event loop for the whole body. `feed` raises
    ExpositionError (reason `too_large`) as soon as more than `max_samples` samples are kept; every other
    error is raised by `close`, in the order `parse` always gave them (a cut body first, then a body that
    is no exposition at all, then the first malformed line).
    """

    def __init__(self, wanted: Iterable[str] | None = None, prefix: str = _vllm.PREFIX,
                 renames: tuple[tuple[str, str], ...] = _vllm.RENAMES, max_samples: int | None = None) -> None:
        self._prefixes = None if wanted is None else tuple(wanted)
        self._want, self._finder = _wanted(self._prefixes, prefix)
        self._prefix = prefix
        self._renames = renames
        self._needle = _needle(renames) if renames else None
        self._max = max_samples
        self._rest = ""  # the last line fed so far, not yet ended by a line feed
        self._head = ""  # the body's first SNIFF_CHARS characters
        self._lines_seen = 0  # line numbers for errors (without `wanted`)
        self._uncounted: str | None = None  # the last chunk, its lines counted only when another follows
        self._blank = True  # nothing but whitespace and byte-order marks so far
        self._error: ExpositionError | None = None
        self._seen: dict[str, set[str]] = {}  # kept series by sample name: duplicates are named, not merged
        self._kept = 0
        self.out = Exposition()

    def feed(self, text: str) -> None:
        """Parse the complete lines of `text` (with what was left of the last feed)."""
        if not text:
            return
        if len(self._head) < SNIFF_CHARS:
            self._head += text[: SNIFF_CHARS - len(self._head)]
        if self._blank and _NOT_BLANK.search(text) is not None:
            self._blank = False
        cut = text.rfind("\n")
        if cut == -1:
            self._rest += text
            return
        lines = self._rest + text[:cut] if self._rest else text[:cut]
        self._rest = text[cut + 1:]
        self._chunk(lines)

    def _chunk(self, text: str) -> None:
        """Complete lines (no final line feed), the first starting a line."""
        if self._needle is not None and self._needle in text:
            text = _fold(text, self._renames)
        prefix = self._prefix
        if self._uncounted is not None:
            self._lines_seen += self._uncounted.count("\n") + 1
            self._uncounted = None
        first = self._lines_seen + 1
        if self._finder is not None:
            # Every wanted name starts with the engine's prefix: note whether a line starts with it, and find those
            # that go on with a wanted name (without the prefix: `_parse_tails`) in one pass of a regular expression.
            body = "\n" + text
            self.out.family_seen = self.out.family_seen or ("\n" + prefix) in body
            self._uncounted = text  # a body fed in one piece never needs its lines counted (only errors number them)
            if self._error is not None:
                return  # the first error is the one said; later lines are only counted
            assert self._want is not None  # the finder is made of the wanted names
            tails = self._finder.findall(body)
            before = self._kept
            try:
                self._kept += _parse_tails(tails, prefix, self.out.samples, self._want, self._seen,
                                           self.out.duplicates)
            except ExpositionError as exc:
                self._error = exc
                self._number_error(text, first)
            self._check_size(before)
            return
        self.out.family_seen = self.out.family_seen or text.startswith(prefix) or ("\n" + prefix) in text
        all_lines = text.split("\n")
        self._lines_seen += len(all_lines)
        if self._error is not None:
            return  # the first error is the one said; later lines are only counted
        lines: Iterable[tuple[int, str]]
        if self._prefixes is None:
            lines = enumerate(all_lines, first)
        else:
            wanted = self._prefixes
            lines = [(0, ln) for ln in all_lines if ln.startswith(wanted)]  # line numbers only for errors
        before = self._kept
        try:
            self._kept += _parse_lines(lines, self.out.samples, self._want, self._seen, self.out.duplicates)
        except ExpositionError as exc:
            self._error = exc
            if self._prefixes is not None:
                self._number_error(text, first)
        self._check_size(before)

    def _number_error(self, text: str, first: int) -> None:
        """The fast paths number no line: find the malformed one said, numbered, once (lines from `first`)."""
        assert self._prefixes is not None
        numbered = [(i, ln) for i, ln in enumerate(text.split("\n"), first) if ln.startswith(self._prefixes)]
        try:
            _parse_lines(numbered, {}, self._want, {}, [])
        except ExpositionError as said:
            self._error = said

    def _check_size(self, before: int) -> None:
        """Refuse the body (`too_large`) once more than `max_samples` samples are kept (`before`: kept until this
        chunk)."""
        if self._max is not None and self._kept > self._max >= before:
            raise ExpositionError(f"more than {self._max:,} samples of the series the sidecar reads (a real vLLM "
                                  "exports about 50 per engine): refused rather than held in memory",
                                  reason="too_large")

    def blank(self) -> str | None:
        """`blank` of the whole body fed so far: one sentence when it held nothing, else None."""
        return blank(self._head) if self._blank else None

    @property
    def head(self) -> str:
        """The body's first characters (up to SNIFF_CHARS), to name what a body that is no engine's is."""
        return self._head

    def close(self) -> Exposition:
        """The parsed exposition; raises ExpositionError for a body that is cut, no exposition, or malformed."""
        if self._rest and not self._blank and not _ends_with_eof(self._rest):
            _raise_if_not_an_exposition(self._head)
            # The format requires a final line feed; its absence means the body was cut off.
            raise ExpositionError("the exposition ends mid-line (truncated body)", reason="truncated")
        if not self.out.family_seen:
            _raise_if_not_an_exposition(self._head)
        if self._error is not None:
            _raise_if_not_an_exposition(self._head)
            raise self._error
        return self.out


_wanted_sets: dict[tuple[tuple[str, ...] | None, str], tuple[frozenset[str] | None, re.Pattern[str] | None]] = {}


def _wanted(wanted: tuple[str, ...] | None, prefix: str) -> tuple[frozenset[str] | None, re.Pattern[str] | None]:
    """The wanted names as a set, and when every one starts with `prefix` (and continues past it): a pattern that
    finds, in a text after a line feed, each line that starts with `prefix` and a wanted name and gives that line
    without the prefix (else None). Kept per (names, prefix): one engine's parser is made every scrape."""
    known = _wanted_sets.get((wanted, prefix))
    if known is not None:
        return known
    finder = None
    if wanted and prefix and all(w.startswith(prefix) and len(w) > len(prefix) for w in wanted):
        rests = {w[len(prefix):] for w in wanted}
        finder = re.compile(re.escape("\n" + prefix) + "(" + _alternation(rests) + "[^\n]*)")
    known = (None if wanted is None else frozenset(wanted)), finder
    if len(_wanted_sets) < 64:
        _wanted_sets[(wanted, prefix)] = known
    return known


def _alternation(words: Iterable[str]) -> str:
    """A regular expression matching any of `words` (none empty) and nothing else, as a tree of their common
    beginnings: the matcher tests a character or two at each branch instead of every word in turn."""
    tree: dict[str, set[str]] = {}
    ends = False
    for w in words:
        if w:
            tree.setdefault(w[0], set()).add(w[1:])
        else:
            ends = True
    branches = [re.escape(c) + _alternation(rest) if rest != {""} else re.escape(c) for c, rest in sorted(tree.items())]
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 and not ends else "(?:" + "|".join(branches) + ")"
    return body + "?" if ends else body


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


def _parse_lines(lines: Iterable[tuple[int, str]], samples: dict[str, Series], want: frozenset[str] | None,
                 seen: dict[str, set[str]], duplicates: list[tuple[str, Labels]]) -> int:
    """Parse sample lines into `samples`; returns how many were kept. A series seen before (the same name and
    label set) is kept too and named in `duplicates` (at most 100): its reader decides."""
    kept = 0
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
        labels, key = _cached_labels(label_text, line_no) if label_text else _NO_LABELS
        kept += 1
        # Kept as `_parse_tails` keeps a cached line (the same lines there): inline in both, since a helper call
        # per sample line costs ~0.1 M instructions a 53 KB scrape (callgrind, 2.80 -> 2.90 M per observe).
        series = samples.get(name)
        if series is None:
            samples[name] = [(labels, value)]
            seen[name] = {key}
            continue
        series.append((labels, value))
        names = seen[name]
        if key in names:
            if len(duplicates) < 100:
                duplicates.append((name, labels))
        else:
            names.add(key)
    return kept


# What a sample line's text before its value means, by that text without the engine's prefix, per (prefix, wanted
# names): label sets repeat scrape after scrape while the values change, so a line seen before is read with one
# lookup. `_SKIP`: a name not wanted (a longer name that shares a wanted prefix).
_LineMeaning = tuple[str, Labels, str]  # (sample name, labels, canonical key)
_SKIP: _LineMeaning = ("", {}, "")
_line_cache: dict[tuple[str, frozenset[str]], dict[str, _LineMeaning]] = {}
_line_cache_chars = 0


def _parse_tails(tails: list[str], prefix: str, samples: dict[str, Series], want: frozenset[str],
                 seen: dict[str, set[str]], duplicates: list[tuple[str, Labels]]) -> int:
    """`_parse_lines` of the lines `prefix + tail`, in order: the same samples, duplicates, count and errors.

    A line whose text up to its last `}` was read before (from a line with no exemplar) and whose value is one
    plain float is read from `_line_cache`: everything `_parse_lines` derives from that text (the name, whether it is
    wanted, the labels and their key) is the same, so only the value is read here. Every other line, and any
    line whose value is not one plain float, is read by `_parse_lines` (which raises its errors)."""
    global _line_cache_chars
    cache = _line_cache.get((prefix, want))
    if cache is None:
        if len(_line_cache) >= 64:
            _line_cache.clear()
        cache = _line_cache.setdefault((prefix, want), {})
    kept = 0
    for tail in tails:
        head, brace, rest = tail.rpartition("}")
        meaning = cache.get(head) if brace else None
        if meaning is not None:
            if meaning is _SKIP:
                continue
            if "_" not in rest:
                # float() reads one number between blanks (each one str.split() cuts at too): exactly the value
                # `_parse_lines` reads when it is the only token. An exemplar, a timestamp or anything else fails
                # here and is read there.
                try:
                    value = float(rest)
                except ValueError:
                    pass
                else:
                    name, labels, key = meaning
                    kept += 1
                    series = samples.get(name)  # as `_parse_lines` keeps a sample (inline there too, for speed)
                    if series is None:
                        samples[name] = [(labels, value)]
                        seen[name] = {key}
                        continue
                    series.append((labels, value))
                    names = seen[name]
                    if key in names:
                        if len(duplicates) < 100:
                            duplicates.append((name, labels))
                    else:
                        names.add(key)
                    continue
        line = prefix + tail
        kept += _parse_lines(((0, line),), samples, want, seen, duplicates)
        if meaning is None and brace and " # " not in line and len(head) <= _CACHED_LABEL_CHARS:
            found = _meaning(line, want)
            if found is not None:
                if len(cache) >= _CACHE_ENTRIES or _line_cache_chars >= _CACHE_CHARS:
                    cache.clear()  # a target that invents label sets must not grow us without bound
                    _line_cache_chars = 0
                cache[head] = found
                _line_cache_chars += 2 * len(head)  # the text and the canonical key
    return kept


def _meaning(line: str, want: frozenset[str]) -> _LineMeaning | None:
    """What `_parse_lines` derives from `line` (read by it without error, no exemplar) before its value: the name,
    labels and key, `_SKIP` for a name not wanted; None for a line without a label set."""
    if line[0] == "#":
        return None
    brace = line.find("{")
    space = line.find(" ")
    if brace == -1 or (space != -1 and space < brace):
        return None
    name = line[:brace]
    if name not in want:
        return _SKIP
    close = line.rfind("}")
    label_text = line[brace + 1 : close]
    return (name, *_cached_labels(label_text, 0)) if label_text else (name, *_NO_LABELS)
