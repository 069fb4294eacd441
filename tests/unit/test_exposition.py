"""The exposition parser on malformed input (hand-typed on purpose) and its name folding."""

from __future__ import annotations

import math

import pytest

from exporter.engines.vllm import metrics as vllm_metrics
from exporter.pipeline import exposition
from tests import fixtures


def test_labels_with_escapes_commas_and_braces() -> None:
    text = 'x{a="1,2",b="q\\"uote",c="back\\\\slash",d="}{",e="line\\nbreak"} 3\n'
    expo = exposition.parse(text)
    labels, value = expo.series("x")[0]
    assert labels == {"a": "1,2", "b": 'q"uote', "c": "back\\slash", "d": "}{", "e": "line\nbreak"}
    assert value == 3.0


def test_control_characters_in_label_values_are_shown_as_replacement_characters() -> None:
    # A model name with a NUL (a hostile target): it reached our /metrics 1,787 times as it came, and the NUL and
    # \x01 are the separators of the parser's canonical label key. Both spellings parse (with and without escapes).
    for text in ('x{model_name="tiny\x00llama",e="\x01\x1b[31m"} 1\n',
                 'x{model_name="tiny\x00llama",e="\x01\x1b[31m\\n"} 1\n'):
        labels, _value = exposition.parse(text).series("x")[0]
        assert labels["model_name"] == "tiny\ufffdllama"
        assert labels["e"].startswith("\ufffd\ufffd[31m")
    labels, _value = exposition.parse('x{a="tab\there"} 1\n').series("x")[0]
    assert labels == {"a": "tab\there"}  # a tab is no control to hide


def test_special_values_and_timestamps() -> None:
    expo = exposition.parse("a NaN\nb +Inf\nc -Inf 1700000000000\nd 1.5e3\n")
    assert math.isnan(expo.series("a")[0][1])
    assert expo.series("b")[0][1] == math.inf
    assert expo.series("c")[0][1] == -math.inf
    assert expo.series("d")[0][1] == 1500.0


def test_ray_prefixes_fold_into_vllm_names() -> None:
    expo = exposition.parse('ray_vllm:num_requests_running{engine="0"} 2\nray_vllm_num_requests_waiting 3\n')
    assert expo.series("vllm:num_requests_running")[0][1] == 2.0
    assert expo.series("vllm:num_requests_waiting")[0][1] == 3.0
    assert expo.family_seen


def test_wanted_filter_skips_other_families_but_still_sees_vllm_lines() -> None:
    expo = exposition.parse("vllm:a 1\nvllm:b 2\nother 3\n", wanted={"vllm:b"})
    assert list(expo.samples) == ["vllm:b"]
    assert expo.family_seen
    unwanted = exposition.parse("other 3\nvllm:a 1\n", wanted={"vllm:b"})  # only an unwanted vLLM line, not first
    assert unwanted.samples == {} and unwanted.family_seen
    assert not exposition.parse("other 3\n# HELP x vllm:a\n", wanted={"vllm:b"}).family_seen


@pytest.mark.parametrize(
    ("text", "reason", "fragment"),
    [
        ("vllm:a 1\nvllm:b 2", "truncated", "ends mid-line"),
        ('vllm:a{x="1" 1\n', "malformed", "unclosed"),
        ("vllm:a one\n", "malformed", "expected a float"),
        ("vllm:a\n", "malformed", "no value"),
        ('vllm:a{x=1} 1\n', "malformed", "malformed label set"),
        ('vllm:a{x="1"y="2"} 1\n', "malformed", "malformed label set"),
        ("<html><body>502 Bad Gateway</body></html>\n", "malformed", "the body is an HTML page"),
        ("\x1f\ufffd\x08\x00", "malformed", "the body is gzip-compressed data"),
        ("vllm:a 1 2 3\n", "malformed", "value [timestamp]"),
        ("vllm:a 1 # trace 0.5\n", "malformed", "exemplar's label set"),  # OpenMetrics: ` # ` starts a label set
        ('vllm:a{x="1"} 1 2 3 # {t="1"} 0.5\n', "malformed", "value [timestamp]"),
    ],
)
def test_malformed_input_is_rejected_with_a_reason(text: str, reason: str, fragment: str) -> None:
    with pytest.raises(exposition.ExpositionError) as err:
        exposition.parse(text)
    assert err.value.reason == reason
    assert fragment in str(err.value)


def test_junk_in_families_we_do_not_read_does_not_stop_the_sidecar() -> None:
    expo = exposition.parse("vllm:wanted 1\nunwanted oops\n", wanted={"vllm:wanted"})
    assert expo.series("vllm:wanted") == [({}, 1.0)]
    # The full parse (no filter) still rejects it.
    with pytest.raises(exposition.ExpositionError):
        exposition.parse("vllm:wanted 1\nunwanted oops\n")


def test_malformed_wanted_lines_are_caught_by_the_filtered_parse() -> None:
    with pytest.raises(exposition.ExpositionError, match="expected a float"):
        exposition.parse("vllm:wanted one\n", wanted={"vllm:wanted"})


def test_a_longer_name_sharing_a_wanted_prefix_is_not_taken() -> None:
    expo = exposition.parse("vllm:a_total 1\nvllm:a_total_extra 2\n", wanted={"vllm:a_total"})
    assert expo.series("vllm:a_total") == [({}, 1.0)] and "vllm:a_total_extra" not in expo.samples


def test_empty_body_parses_to_nothing() -> None:
    expo = exposition.parse("")
    assert expo.samples == {} and not expo.family_seen


def test_the_label_cache_is_bounded_in_bytes_not_only_in_entries() -> None:
    """A target that sends a new long label value on every scrape (a real exposition, one wanted series' labels
    grown by a 12 KB value that changes each time) is parsed, but its label sets are not kept; many short new
    label sets are kept only up to the cache's size in characters."""
    real = fixtures.snapshot("false-full")
    exposition._label_cache.clear()
    exposition._label_cache_chars = 0
    base = len(exposition.parse(real, vllm_metrics.WANTED).samples) and len(exposition._label_cache)
    for i in range(50):
        junk = real.replace('vllm:num_requests_waiting{', f'vllm:num_requests_waiting{{junk="{i:05d}{"x" * 12000}",', 1)
        assert exposition.parse(junk, vllm_metrics.WANTED).series(vllm_metrics.WAITING)
    assert len(exposition._label_cache) == base
    for i in range(3000):
        short = real.replace('vllm:num_requests_waiting{', f'vllm:num_requests_waiting{{junk="{i:05d}{"y" * 3000}",', 1)
        exposition.parse(short, vllm_metrics.WANTED)
        assert exposition._label_cache_chars <= exposition._CACHE_CHARS + 2 * exposition._CACHED_LABEL_CHARS


def test_a_body_fed_in_pieces_parses_as_one_and_numbers_a_bad_line_alike() -> None:
    """The sidecar feeds a body as it arrives (cut anywhere, mid-line too): the samples kept, the engine's line
    count and the number of a malformed wanted line are those of the body parsed in one piece (the fast path
    counts a piece's lines only when another piece follows)."""
    real = fixtures.snapshot("false-full")
    lines = real.splitlines()
    at = max(i for i, ln in enumerate(lines) if ln.startswith("vllm:request_prompt_tokens_bucket{"))
    bad = "\n".join([*lines[:at], lines[at].rsplit(" ", 1)[0] + " abc", *lines[at + 1:]]) + "\n"
    whole = exposition.parse(real, vllm_metrics.WANTED)
    for size in (7, 1000, 4096, len(real) - 1):
        parser = exposition.Parser(vllm_metrics.WANTED)
        for start in range(0, len(real), size):
            parser.feed(real[start:start + size])
        pieces = parser.close()
        assert (pieces.samples, pieces.family_seen) == (whole.samples, whole.family_seen)
        parser = exposition.Parser(vllm_metrics.WANTED)
        for start in range(0, len(bad), size):
            parser.feed(bad[start:start + size])
        with pytest.raises(exposition.ExpositionError, match=f"^line {at + 1}:"):
            parser.close()
