"""Issue 21: a fuzz test over mutated REAL expositions (every snapshot.prom recorded from a real vLLM under
tests/fixtures/vllm-*/), through the whole parse -> read -> derive -> judge pipeline and every surface.

A hypothesis strategy takes one recording (any release, the Python and the Rust frontend, OpenMetrics or text
0.0.4) and applies a few mutations of the kinds a broken, hostile or half-upgraded target sends: lines dropped,
duplicated or moved, values made NaN/±Inf/negative/huge/unparsable, label values changed (num_gpu_blocks="inf",
model_name="", ...), a line or the body cut mid-way, lines of another release's recording mixed in, garbage
bytes and other encodings, OpenMetrics markers added or removed. For every mutation:

* the sidecar's path (the body fed to the incremental parser in arbitrary chunks, as `fetch_parsed` does) and the
  one-shot path (`diagnose -`, `oneshot.observe`) answer without an exception and never with `internal_error`
  (our fault, caught only to keep the sidecar alive);
* no value outside its range reaches a verdict: capacity and block size > 0, used and free blocks >= 0 and at
  most the capacity, usage within [0, 1], every figure finite, the verdict in the catalogue, false_full only
  for a verdict whose catalogue entry allows it (and only while requests wait);
* the target recovers: the recording scraped again after the mutation is judged as a fresh target judges it
  (bad data leaves nothing behind in the windows and baselines), and the healthy target beside it is judged
  exactly as a sidecar without the hostile one judges it;
* /metrics, /api/v1/diagnosis, /api/v1/history and the status page render, /metrics parses with
  prometheus_client and holds no NaN or infinite sample, both JSON documents are strict JSON, and
  `diagnose -` exits 0 or 1 (never 2, the usage-mistake code) with strict JSON under --json.

Pure (no sockets, no files but the recordings read once), derandomized with no example database: the same
cases on every run. `FUZZ_EXAMPLES` (default 2500 pipeline cases, a fifth of that through every surface) sets
the number.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import itertools
import json
import math
import os
import shlex
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from exporter import cli
from exporter.engines.vllm import metrics as vllm_metrics
from exporter.engines.vllm.read import MAX_REQUESTS
from exporter.expose import diagnosis
from exporter.expose.collector import SCRAPE_ERROR_REASONS
from exporter.expose.server import Sidecar
from exporter.pipeline import exposition, oneshot
from exporter.pipeline.catalogue import CATALOGUE, Verdict
from exporter.pipeline.report import EngineReport, TargetReport
from exporter.pipeline.scrape import ScrapeError
from exporter.pipeline.target import Settings, Target
from tests import fixtures

FIXTURES = Path(__file__).parent.parent / "fixtures"
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "2500"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
READ = {n for w in vllm_metrics.WANTED for n in (w, w + "_total", w + "_count", w + "_sum", w + "_bucket")}
SURFACES = settings(FUZZ, max_examples=max(20, EXAMPLES // 5))


@cache
def corpus() -> list[tuple[str, str, dict[str, Any]]]:
    """(name, exposition, meta) of every recorded snapshot."""
    out = []
    for path in sorted(FIXTURES.glob("vllm-*/*/snapshot.prom")):
        meta_path = path.parent / "meta.json"
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        out.append((f"{path.parent.parent.name}/{path.parent.name}", path.read_text(), meta))
    return out


VALUES = ["NaN", "nan", "+Inf", "-Inf", "Inf", "-1", "-0", "0", "-1e308", "1e308", "1.7976931348623157e309",
          "1e19", "9007199254740993", "0.5", "1.5", "-0.5", "abc", "", "1e", "0x10", "1_000", "9" * 400, "٣"]
LABELS = ["", "inf", "-inf", "nan", "NaN", "+Inf", "-8", "0", "0.5", "1e308", "1e30", "-1e308", "abc", "None",
          "true", "ü", '\\"', "\\n", "\\\\", "x" * 300, "16 ", " 16", "1e-300"]
GARBAGE = [b"\x00", b"\xff\xfe", b"\xef\xbb\xbf", b"\x80\x81\x82", b"\r", b"\r\n", b"{", b"}", b'"', b"\\",
           bytes(range(256)), b"# EOF\n", b"# TYPE vllm:num_requests_running histogram\n", b"\n\n\n"]


def _sample_lines(lines: list[str]) -> list[int]:
    return [i for i, ln in enumerate(lines) if ln and not ln.startswith("#") and " " in ln]


def _read_lines(lines: list[str]) -> list[int]:
    """The sample lines of the families the product reads (most of a recording is histogram buckets it reads
    only in part): a mutation picks one of these half of the time, so the gauges and cache_config_info that
    decide a verdict are hit often."""
    return [i for i in _sample_lines(lines) if lines[i].split("{", 1)[0].split(" ", 1)[0] in READ]


@st.composite
def mutation(draw: st.DrawFn, lines: list[str], other: list[str]) -> list[str]:
    """One mutation of `lines` (a recording's lines, each with its newline)."""
    if not lines:
        return lines
    kind = draw(st.sampled_from(["drop", "duplicate", "move", "shuffle", "value", "value", "value", "label",
                                 "label", "cut_line", "mix", "mix_family", "rename", "openmetrics", "timestamp",
                                 "crlf"]))
    n = len(lines)
    index = st.integers(0, n - 1)
    samples = _sample_lines(lines)
    read = _read_lines(lines)
    if read and draw(st.booleans()):
        samples = read
    if kind == "drop":
        i = draw(index)
        return lines[:i] + lines[i + 1:]
    if kind == "duplicate":
        i, j = draw(index), draw(index)
        return [*lines[:j], lines[i], *lines[j:]]
    if kind == "move":
        i, j = draw(index), draw(index)
        rest = lines[:i] + lines[i + 1:]
        return [*rest[:j], lines[i], *rest[j:]]
    if kind == "shuffle":
        i = draw(index)
        k = draw(st.integers(2, 12))
        part = lines[i:i + k]
        draw(st.randoms(use_true_random=False)).shuffle(part)
        return lines[:i] + part + lines[i + k:]
    if kind == "value" and samples:
        i = draw(st.sampled_from(samples))
        head = lines[i].rstrip("\n").rsplit(" ", 1)[0]
        return [*lines[:i], f"{head} {draw(st.sampled_from(VALUES))}\n", *lines[i + 1:]]
    if kind == "timestamp" and samples:
        i = draw(st.sampled_from(samples))
        stamp = draw(st.sampled_from(["1700000000000", "-1", "NaN", "1e400", "x", "1700000000.5"]))
        return [*lines[:i], f"{lines[i].rstrip()} {stamp}\n", *lines[i + 1:]]
    if kind == "label":
        labelled = [i for i in samples if '="' in lines[i]]
        if labelled:
            i = draw(st.sampled_from(labelled))
            parts = lines[i].split('="')
            k = draw(st.integers(1, len(parts) - 1))
            end = parts[k].find('"')
            value = draw(st.one_of(st.sampled_from(LABELS), st.text(max_size=8).map(
                lambda s: s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))))
            if end >= 0:
                parts[k] = value + parts[k][end:]
            return [*lines[:i], '="'.join(parts), *lines[i + 1:]]
    if kind == "cut_line":
        i = draw(index)
        cut = draw(st.integers(0, max(0, len(lines[i]) - 1)))
        return [*lines[:i], lines[i][:cut] + draw(st.sampled_from(["\n", ""])), *lines[i + 1:]]
    if kind == "mix" and other:  # a block of another release's lines (two releases' families side by side)
        i, j = draw(index), draw(st.integers(0, len(other) - 1))
        return lines[:i] + other[j:j + draw(st.integers(1, 40))] + lines[i:]
    if kind == "mix_family" and other:  # one family of the other recording replaces ours
        names = sorted({ln.split(" ")[2] for ln in other if ln.startswith("# TYPE ")})
        if names:
            name = draw(st.sampled_from(names))
            mine = [ln for ln in lines if not ln.startswith((name + "{", name + " ", name + "_"))
                    and f" {name} " not in ln]
            theirs = [ln for ln in other if ln.startswith((name + "{", name + " ", name + "_"))
                      or f" {name} " in ln]
            at = draw(st.integers(0, len(mine)))
            return mine[:at] + theirs + mine[at:]
    if kind == "rename" and samples:  # a sample under another wanted family's name
        i, j = draw(st.sampled_from(samples)), draw(st.sampled_from(samples))
        name_j = lines[j].split("{", 1)[0].split(" ", 1)[0]
        rest = lines[i][len(lines[i].split("{", 1)[0].split(" ", 1)[0]):]
        return [*lines[:i], name_j + rest, *lines[i + 1:]]
    if kind == "openmetrics":
        has_eof = any(ln.startswith("# EOF") for ln in lines)
        choice = draw(st.sampled_from(["eof", "created", "exemplar", "unit"]))
        if choice == "eof":
            return [ln for ln in lines if not ln.startswith("# EOF")] if has_eof else [*lines, "# EOF\n"]
        if choice == "created" and samples:
            i = draw(st.sampled_from(samples))
            name, rest = lines[i].split("{", 1) if "{" in lines[i] else (lines[i].split(" ", 1)[0], "} 1\n")
            created = f"{name.removesuffix('_total')}_created{{{rest.rsplit(' ', 1)[0]} 1.7e9\n"
            return [*lines[:i + 1], created, *lines[i + 1:]]
        if choice == "exemplar" and samples:
            i = draw(st.sampled_from(samples))
            return [*lines[:i], lines[i].rstrip("\n") + ' # {trace_id="abc"} 1.0 1700000000.0\n', *lines[i + 1:]]
        i = draw(index)
        return [*lines[:i], "# UNIT vllm:num_requests_running requests\n", *lines[i:]]
    if kind == "crlf":
        return [ln.replace("\n", "\r\n") for ln in lines]
    i = draw(index)
    return lines[:i] + lines[i + 1:]


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, dict[str, Any], bytes, list[int]]:
    """(recording name, its meta, the mutated body, chunk boundaries for the sidecar's incremental parse)."""
    items = corpus()
    name, text, meta = draw(st.sampled_from(items))
    other = draw(st.sampled_from(items))[1].splitlines(keepends=True)
    lines = text.splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        lines = draw(mutation(lines, other))
    data = "".join(lines).encode("utf-8", errors="surrogatepass")
    encoding = draw(st.sampled_from(["utf-8"] * 6 + ["utf-16", "latin-1"]))
    if encoding != "utf-8":
        data = data.decode("utf-8", errors="replace").encode(encoding, errors="replace")
    for _ in range(draw(st.integers(0, 2))):  # garbage bytes at random offsets
        at = draw(st.integers(0, len(data)))
        junk = draw(st.one_of(st.sampled_from(GARBAGE), st.binary(min_size=1, max_size=16)))
        data = data[:at] + junk + data[at:]
    if draw(st.integers(0, 9)) == 0:  # the body cut short anywhere (a dropped connection)
        data = data[:draw(st.integers(0, len(data)))]
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=6)))
    return name, meta, data, cuts


def _settings(url: str, meta: dict[str, Any], flags: bool) -> Settings:
    argv = [str(a) for a in meta.get("server_argv") or []]
    return Settings(url, discover_cmdline=False, vllm_args=argv if flags and argv else None)


def _target(url: str, meta: dict[str, Any], flags: bool) -> Target:
    return fixtures.as_recorded(Target(_settings(url, meta, flags)), meta)


def _scrape(sidecar: Sidecar, target: Target, now: float, data: bytes, cuts: list[int] = ()) -> TargetReport:
    """What `Target.scrape` does with a body `fetch_parsed` read in pieces split at `cuts` (no socket): a
    ScrapeError is a down report; any other exception escapes (the test fails: it is a bug of ours)."""
    parser = target.parser()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    bounds = [0, *cuts, len(data)]
    target.scrapes += 1
    try:
        try:
            for a, b in itertools.pairwise(bounds):
                parser.feed(decoder.decode(data[a:b]))
            parser.feed(decoder.decode(b"", final=True))
        except exposition.ExpositionError as exc:
            raise ScrapeError(exc.reason, f"{target.shown}: {exc}") from None
        report = target.judge_exposition(now, target.parsed(parser))
    except ScrapeError as exc:
        report = TargetReport(target.settings.url, up=False, error_reason=exc.reason, error=str(exc),
                              observed_at=now)
    report.scraped_at, report.scrape_number = 1.7e9 + now, target.scrapes
    if report.up:
        target.known_engines = {(e.model_name, e.engine) for e in report.engines}
    else:
        report.known_engines = sorted(target.known_engines)
    target.last = report
    sidecar.history.record(now, [report])
    sidecar.generation += 1
    return report


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    return True


def _one_sentence(text: str | None) -> None:
    assert text, "an error without a sentence"
    assert "\n" not in text and "Traceback" not in text, text


def check_engine(e: EngineReport) -> None:
    """No value outside its range reaches a verdict."""
    assert isinstance(e.verdict, Verdict) and e.verdict in CATALOGUE, e.verdict
    if e.false_full:
        assert CATALOGUE[e.verdict].false_full, f"false_full with {e.verdict}, whose catalogue entry forbids it"
        assert e.waiting > 0, "false_full while nothing waits"
    h = e.headroom
    assert h.kv_capacity_blocks > 0 and h.block_size_tokens > 0 and h.kv_capacity_tokens > 0, h
    assert 0 <= h.kv_used_blocks <= h.kv_capacity_blocks and 0 <= h.kv_free_blocks <= h.kv_capacity_blocks, h
    assert 0.0 <= h.panel_usage_ratio <= 1.0 and 0.0 <= h.effective_usage_ratio <= 1.0, h
    assert h.prompt_blocks >= 0 and h.worst_case_blocks_profile >= 0 and h.max_concurrency_profile >= 0, h
    assert h.admission_headroom_requests >= 0, h
    assert h.slot_headroom_requests is None or h.slot_headroom_requests >= 0, h
    assert 0 <= e.running <= MAX_REQUESTS and 0 <= e.waiting <= MAX_REQUESTS, (e.running, e.waiting)
    assert e.max_num_seqs is None or e.max_num_seqs > 0, e.max_num_seqs
    assert e.preemptions_per_second is None or (math.isfinite(e.preemptions_per_second)
                                                and e.preemptions_per_second >= 0), e.preemptions_per_second
    assert _finite(list(h.__dict__.values())), h
    assert _finite(list(e.waiting_by_reason.values())), e.waiting_by_reason
    assert _finite([v["value"] for v in e.config.as_json().values()]), e.config.as_json()


def check_report(r: TargetReport) -> None:
    if not r.up:
        assert r.error_reason in SCRAPE_ERROR_REASONS and r.error_reason != "internal_error", (r.error_reason,
                                                                                               r.error)
        _one_sentence(r.error)
        return
    for g in r.gaps:
        assert g.reason in ("bad_value", "config_error", "missing"), g
        _one_sentence(g.explanation)
    for e in r.engines:
        check_engine(e)


def _verdicts(r: TargetReport) -> list[tuple[str, str, str, bool]]:
    return [(e.model_name, e.engine, str(e.verdict), e.false_full) for e in r.engines]


def _strict(text: str | bytes) -> Any:
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _sequence(sidecar: Sidecar, target: Target, base: bytes, data: bytes, cuts: list[int]) -> list[TargetReport]:
    """The recording, then the mutation, then the recording again (a target that sent bad data once)."""
    return [_scrape(sidecar, target, 0.0, base), _scrape(sidecar, target, 5.0, data, cuts),
            _scrape(sidecar, target, 10.0, base)]


@cache
def _control(name: str, flags: bool) -> list[list[tuple[str, str, str, bool]]]:
    """The verdicts of a fresh sidecar that saw only the recording, at the same three times."""
    _n, text, meta = next(c for c in corpus() if c[0] == name)
    t = _target("http://control.test", meta, flags)
    sc = Sidecar([t], 5.0)
    base = text.encode()
    return [_verdicts(_scrape(sc, t, now, base)) for now in (0.0, 5.0, 10.0)]


def test_the_corpus_is_every_recording() -> None:
    names = [n for n, _t, _m in corpus()]
    assert len(names) >= 60 and any("rust" in n for n in names) and any("0.8.5-v0" in n for n in names), names
    assert any("# EOF" in t for _n, t, _m in corpus())  # OpenMetrics (the Rust frontend) and text 0.0.4 both


@FUZZ
@given(case=mutated(), flags=st.booleans())
def test_a_mutated_recording_never_breaks_the_pipeline(case: tuple[str, dict[str, Any], bytes, list[int]],
                                                       flags: bool) -> None:
    name, meta, data, cuts = case
    base = next(t for n, t, _m in corpus() if n == name).encode()
    target = _target("http://fuzzed.test", meta, flags)
    sidecar = Sidecar([target], 5.0)
    reports = _sequence(sidecar, target, base, data, cuts)
    for r in reports:
        check_report(r)
    control = _control(name, flags)
    assert _verdicts(reports[0]) == control[0]
    # After the bad scrape the recording is judged again; the mutated scrape may have moved the counters'
    # baselines (a rate over two scrapes), never so far that the target stays broken.
    assert reports[2].up == bool(control[2] or reports[0].up), reports[2].error
    assert {(m, e) for m, e, _v, _f in _verdicts(reports[2])} == {(m, e) for m, e, _v, _f in control[2]}

    one = oneshot.observe("<stdin>", _settings("<stdin>", meta, flags), data=data)
    check_report(one)
    assert json.dumps(diagnosis.document([one]), allow_nan=False)
    assert diagnosis.render_text([one])


@SURFACES
@given(case=mutated(), flags=st.booleans())
def test_every_surface_answers_beside_a_healthy_target(case: tuple[str, dict[str, Any], bytes, list[int]],
                                                       flags: bool) -> None:
    name, meta, data, cuts = case
    base = next(t for n, t, _m in corpus() if n == name).encode()
    good = _target("http://good.test", meta, flags)
    bad = _target("http://bad.test", meta, flags)
    sidecar = Sidecar([good, bad], 5.0)
    for now, body in ((0.0, base), (5.0, data)):
        _scrape(sidecar, good, now, base)
        _scrape(sidecar, bad, now, body, cuts)
    check_report(bad.last)
    assert good.last.up and _verdicts(good.last) == _control(name, flags)[1]  # untouched by its neighbour

    metrics = sidecar.exposition().decode()
    families = list(text_string_to_metric_families(metrics))  # valid exposition text
    assert families
    ours = [s.value for f in families if f.name.startswith("vllm_headroom") for s in f.samples]
    assert all(math.isfinite(v) for v in ours), "a NaN or infinite sample in our /metrics"
    assert 'vllm_headroom_up{target="http://good.test"} 1.0' in metrics
    doc = _strict(sidecar.diagnosis.render())
    assert [t["target"] for t in doc["targets"]] == ["http://good.test", "http://bad.test"]
    for t in doc["targets"]:
        for e in t["engines"]:
            assert e["verdict"] in {str(v) for v in Verdict}
            assert not e["false_full"] or CATALOGUE[Verdict(e["verdict"])].false_full
    _strict(json.dumps(sidecar.history_document(), allow_nan=False))
    page = sidecar.status_page()
    assert page.startswith("<!DOCTYPE html>") or "<html" in page[:200]

    for argv in (["diagnose", "-"], ["diagnose", "--json", "-"]):
        out = io.StringIO()
        stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()) as err, \
                _stdin(stdin):
            code = cli.main([*argv, *_flags(meta, flags)])
        assert code in (0, 1), (code, out.getvalue()[-500:], err.getvalue()[-500:])
        assert "Traceback" not in out.getvalue() + err.getvalue()
        if "--json" in argv:
            _strict(out.getvalue())


@contextlib.contextmanager
def _stdin(stream: io.TextIOWrapper) -> Any:
    saved = sys.stdin
    sys.stdin = stream
    try:
        yield
    finally:
        sys.stdin = saved


def _flags(meta: dict[str, Any], flags: bool) -> list[str]:
    argv = [str(a) for a in meta.get("server_argv") or []]
    return ["--vllm-args", shlex.join(argv)] if flags and argv else []


@pytest.mark.parametrize("text", ["", "\n", "# EOF\n", "\x00" * 10, "vllm:num_requests_running 1\n"])
def test_degenerate_bodies(text: str) -> None:
    """The smallest cases the strategy may shrink to, always run."""
    target = _target("http://x.test", {}, False)
    sidecar = Sidecar([target], 5.0)
    check_report(_scrape(sidecar, target, 0.0, text.encode()))


def test_an_exposition_without_engines_says_so() -> None:
    """Found by the fuzz test: a recording cut down to its cache_config_info line was up with no engine, no gap
    and no note, so `diagnose` printed nothing at all and exited 1."""
    info = next(ln for ln in fixtures.snapshot("false-full").splitlines() if ln.startswith("vllm:cache_config_info{"))
    report = oneshot.observe("<stdin>", Settings("<stdin>", discover_cmdline=False), data=(info + "\n").encode())
    assert report.up and not report.engines and not report.gaps
    text = diagnosis.render_text([report])
    assert "names no engine (no vllm:num_requests_running" in text and text.count("\n") == 0, text
