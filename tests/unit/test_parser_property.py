"""Property: on any valid text exposition our parser agrees with prometheus_client's on the families we use.

Expositions are generated family by family (the wanted vLLM names with the types vLLM gives them, and
other names of any type, some sharing a wanted name's prefix), with optional HELP/TYPE lines, label sets
with every escape, NaN/±Inf values and optional timestamps, then rendered in the text format 0.0.4. Both
parsers read the same text; the samples of every name in `exporter.engines.vllm.metrics.WANTED` must match in order.
prometheus_client groups `_bucket/_count/_sum` under the histogram family and renames counters' families,
so samples are compared by sample name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from exporter.engines.vllm import metrics as vllm
from exporter.pipeline import exposition

GAUGES = [vllm.RUNNING, vllm.WAITING, vllm.WAITING_BY_REASON, vllm.SWAPPED, vllm.KV_USAGE, vllm.GPU_USAGE,
          vllm.CACHE_CONFIG, vllm.SLEEP_STATE]
COUNTERS = [vllm.PREEMPTIONS, vllm.GENERATION_TOKENS, vllm.PROMPT_TOKENS]  # sample names end in _total
HISTOGRAMS = [*vllm.HISTOGRAMS, vllm.STEPS.removesuffix("_count")]
KINDS = ("gauge", "counter", "histogram", "summary", "untyped")

Sample = tuple[str, dict[str, str], float, int | None]


@dataclass
class Family:
    name: str  # as in HELP/TYPE lines
    kind: str
    help: str | None
    typed: bool
    samples: list[Sample]


_FIRST = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
_REST = _FIRST + "0123456789"
label_names = st.builds(lambda a, b: a + b, st.sampled_from(_FIRST), st.text(_REST, max_size=8)).filter(
    lambda n: not n.startswith("__"))
label_values = st.text(st.characters(codec="utf-8"), max_size=12)
label_sets = st.dictionaries(label_names.filter(lambda n: n != "le"), label_values, max_size=4)
values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**53), max_value=2**53).map(float),
    st.sampled_from([0.0, 1.0, math.inf, -math.inf, math.nan]),
)
timestamps = st.one_of(st.none(), st.integers(min_value=0, max_value=2**45))
other_names = st.one_of(
    st.builds(lambda a, b: a + b, st.sampled_from(_FIRST + ":"), st.text(_REST + ":", max_size=20)),
    st.sampled_from(sorted(vllm.WANTED)).map(lambda n: n + "_x"),  # shares a wanted prefix
    st.sampled_from([*GAUGES, *HISTOGRAMS]).map(lambda n: n.replace("vllm:", "vllm:other_")),
)


@st.composite
def family(draw: st.DrawFn, name: str, kind: str) -> Family:
    helptext = draw(st.one_of(st.none(), st.text(st.characters(codec="utf-8"), max_size=20)))
    typed = kind != "untyped" and draw(st.booleans())
    samples: list[Sample] = []
    for labels in draw(st.lists(label_sets, min_size=1, max_size=3, unique_by=lambda d: tuple(sorted(d.items())))):
        if kind == "histogram":
            bounds = [*sorted(set(draw(st.lists(st.floats(-1e6, 1e6), max_size=4)))), math.inf]
            for b in bounds:
                le = "+Inf" if b == math.inf else repr(b)
                samples.append((name + "_bucket", {**labels, "le": le}, draw(values), draw(timestamps)))
            samples.append((name + "_count", labels, draw(values), draw(timestamps)))
            samples.append((name + "_sum", labels, draw(values), draw(timestamps)))
        elif kind == "summary":
            samples.append((name, {**labels, "quantile": "0.5"}, draw(values), draw(timestamps)))
            samples.append((name + "_count", labels, draw(values), draw(timestamps)))
            samples.append((name + "_sum", labels, draw(values), draw(timestamps)))
        else:
            samples.append((name, labels, draw(values), draw(timestamps)))
    return Family(name, kind, helptext, typed or kind in ("histogram", "summary"), samples)


@st.composite
def expositions(draw: st.DrawFn) -> list[Family]:
    chosen: list[tuple[str, str]] = []
    chosen += [(n, "gauge") for n in draw(st.lists(st.sampled_from(GAUGES), unique=True, max_size=4))]
    chosen += [(n, "counter") for n in draw(st.lists(st.sampled_from(COUNTERS), unique=True, max_size=2))]
    chosen += [(n, "histogram") for n in draw(st.lists(st.sampled_from(HISTOGRAMS), unique=True, max_size=2))]
    for name in draw(st.lists(other_names, max_size=4)):
        kind = draw(st.sampled_from(KINDS))
        if kind == "counter":
            name += "_total"
        chosen.append((name, kind))
    families: list[Family] = []
    taken: set[str] = set()
    for name, kind in draw(st.permutations(chosen)):
        fam = draw(family(name, kind))
        names = {name} | {s[0] for s in fam.samples}
        wanted_by_other = (name, kind) not in [(n, k) for n, k in chosen if n in GAUGES + COUNTERS + HISTOGRAMS]
        if names & taken or name.startswith("ray_vllm") or (wanted_by_other and names & vllm.WANTED):
            continue  # one family per name; wanted names keep vLLM's own types
        taken |= names
        families.append(fam)
    return families


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def render(families: list[Family]) -> str:
    lines: list[str] = []
    for fam in families:
        if fam.help is not None:
            lines.append(f"# HELP {fam.name} " + fam.help.replace("\\", "\\\\").replace("\n", "\\n"))
        if fam.typed:
            lines.append(f"# TYPE {fam.name} {fam.kind}")
        for name, labels, value, ts in fam.samples:
            label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            line = f"{name}{{{label_text}}} {_number(value)}" if labels else f"{name} {_number(value)}"
            lines.append(line if ts is None else f"{line} {ts}")
    return "".join(line + "\n" for line in lines)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


def shown(labels: dict[str, str]) -> dict[str, str]:
    """prometheus_client's labels as ours are: a control character in a value (but tab and line feed) shown as
    U+FFFD (exposition.py: it would reach our own /metrics as it came)."""
    return {k: _CONTROLS.sub("\ufffd", v) for k, v in labels.items()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expositions())
def test_agrees_with_prometheus_client_on_wanted_families(families: list[Family]) -> None:
    text = render(families)
    ours = exposition.parse(text, vllm.WANTED).samples
    theirs: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in vllm.WANTED:
                theirs.setdefault(s.name, []).append((shown(s.labels), float(s.value)))
    assert sorted(ours) == sorted(theirs), text
    for name, series in theirs.items():
        assert len(ours[name]) == len(series), text
        for (our_labels, our_value), (their_labels, their_value) in zip(ours[name], series, strict=True):
            assert our_labels == their_labels, text
            assert _same(our_value, their_value), text


@settings(max_examples=60, deadline=None)
@given(expositions())
def test_unfiltered_parse_reads_every_sample_prometheus_client_reads(families: list[Family]) -> None:
    text = render(families)
    ours = exposition.parse(text).samples
    theirs = [(s.name, shown(s.labels)) for fam in text_string_to_metric_families(text) for s in fam.samples]
    assert len(theirs) == sum(len(v) for v in ours.values())
    # Sample names agree except where prometheus_client appends `_total` to a counter family's samples.
    for name, labels in theirs:
        base = name if name in ours else name.removesuffix("_total")
        assert any(lb == labels for lb, _ in ours[base]), (name, text)


def test_label_value_with_nul_and_escape() -> None:
    # Found by the property above: _unescape once used NUL as a placeholder for an escaped backslash, so a
    # label value holding a NUL next to an escape came out with the NUL turned into a backslash.
    text = 'vllm:num_requests_running{a="\\"\x00"} 1\n'
    theirs = next(iter(text_string_to_metric_families(text))).samples[0].labels
    assert theirs == {"a": '"\x00'}
    # The NUL itself is shown as U+FFFD now (never passed on); the escaped quote beside it stays a quote.
    assert exposition.parse(text, vllm.WANTED).series(vllm.RUNNING)[0][0] == shown(theirs) == {"a": '"\ufffd'}
