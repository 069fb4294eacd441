"""The status page at `/`: per target and engine the verdict, why, what to do, the config and two charts.

The charts are SVG drawn here on the server (no JavaScript, no charting library, no CDN: the page works
offline in a pod and costs one string build per tick). The main chart puts KV usage % (the usual panel)
on the right axis and the waiting queue, admission headroom and worst-case blocks per request on the left
axis, over the last 15 minutes of the history ring buffer, with false-full periods shaded; a smaller chart
shows free blocks and preemptions per second. The page reloads itself every scrape interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from .. import __version__
from ..pipeline import catalogue
from ..pipeline.report import EngineGap, EngineReport, TargetReport
from . import diagnosis, headline
from .history import SERIES, EngineHistory, History

# The page's shade of each catalogue colour (exporter/pipeline/catalogue.py, the dashboards' Grafana colour names),
# dark enough to carry white text.
SHADES = {"green": "#1a7f37", "light-blue": "#0969da", "blue": "#3b5b8c", "yellow": "#b35900", "orange": "#d9480f",
          "red": "#c62828", "dark-red": "#6a1b1b"}
# Badge colour of each verdict (from the catalogue) and of an engine whose capacity is not derived (page only).
VERDICT_COLOURS = {**{str(v): SHADES[e.colour] for v, e in catalogue.CATALOGUE.items()},
                   "config_error": SHADES["dark-red"], "bad_value": SHADES["dark-red"], "undetermined": "#555555"}
USAGE, WAITING, ADMISSION, WORST, FREE, PREEMPT = "#1f6feb", "#d62728", "#2ca02c", "#8e44ad", "#0f8b8d", "#e67e22"
FALSE_FULL_FILL = "#ffe3a3"
CSS = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;margin:0;color:#1b1f24;
background:#f6f8fa}
header{background:#1b1f24;color:#fff;padding:10px 20px}header h1{font-size:18px;margin:0;display:inline}
header span{color:#c9d1d9;margin-left:12px}main{padding:12px 20px}
section.target{margin-bottom:18px}section.target>h2{font-size:15px;margin:8px 0;word-break:break-all}
article.engine{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:12px 16px;margin:8px 0;
display:grid;grid-template-columns:minmax(320px,1fr) minmax(420px,760px);gap:8px 24px}
.badge{display:inline-block;color:#fff;border-radius:4px;padding:2px 10px;font-weight:600;font-size:15px}
.ff{background:#ffe3a3;color:#6b4500;border:1px solid #d4a72c}.nums{color:#57606a}
table.cfg{border-collapse:collapse;font-size:12px}table.cfg td{padding:1px 8px 1px 0;vertical-align:top}
table.cfg td.src{color:#57606a}ul{margin:4px 0 4px 18px;padding:0}
.legend span{margin-right:12px;font-size:12px;white-space:nowrap}.legend i{display:inline-block;width:14px;
height:3px;vertical-align:middle;margin-right:4px}.down{color:#c62828}footer{color:#57606a;padding:0 20px 20px}
svg text{font:11px system-ui,'DejaVu Sans',sans-serif;fill:#57606a}
"""


@dataclass(frozen=True)
class Line:
    """One curve: its label, colour, values (None breaks the line) and the axis it is read on."""

    label: str
    colour: str
    values: Sequence[float | int | bool | str | None]
    right: bool = False


def _nice(top: float) -> float:
    """A round axis maximum at or above `top` (1, 2, 2.5, 5 × 10^k)."""
    if top <= 0:
        return 1.0
    exp = 10.0 ** math.floor(math.log10(top))
    return float(next(m * exp for m in (1, 2, 2.5, 5, 10) if m * exp >= top))


def _fmt(x: float) -> str:
    return f"{x:.0f}" if x >= 100 or x == int(x) else f"{x:.3g}"


def _ago(seconds: float) -> str:
    return "now" if seconds < 0.5 else (f"-{seconds / 60:.0f}m" if seconds >= 120 else f"-{seconds:.0f}s")


def chart(t: Sequence[float], lines: Sequence[Line], title: str, width: int = 720, height: int = 240,
          right_max: float | None = None, right_unit: str = "", left_unit: str = "",
          shade: Sequence[bool] | None = None) -> str:
    """An SVG line chart of `lines` over times `t` (seconds, ascending); `right_max` fixes the right axis.

    Returns the `<svg>` element as text; an empty `t` draws the axes and says that nothing is recorded yet.
    """
    ml, mr, mt, mb = 44, 44 if any(ln.right for ln in lines) else 12, 8, 22
    pw, ph = width - ml - mr, height - mt - mb
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} '
           f'{height}" role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>',
           f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="#fff" stroke="#d0d7de"/>']
    t0, t1 = (t[0], t[-1]) if t else (0.0, 1.0)
    span = max(t1 - t0, 1e-9)

    def x(ti: float) -> float:
        return ml + pw * (ti - t0) / span

    def numbers(ln: Line) -> list[float]:
        return [float(v) for v in ln.values if isinstance(v, (int, float)) and math.isfinite(float(v))]

    left_top = _nice(max((v for ln in lines if not ln.right for v in numbers(ln)), default=1.0))
    right_top = right_max if right_max is not None else _nice(
        max((v for ln in lines if ln.right for v in numbers(ln)), default=1.0))
    if shade and t:
        start: float | None = None
        for i, on in enumerate([*shade, False]):
            if on and start is None:
                start = t[i]
            elif not on and start is not None:
                end = t[min(i, len(t) - 1)]
                out.append(f'<rect x="{x(start):.1f}" y="{mt}" width="{max(x(end) - x(start), 2):.1f}" '
                           f'height="{ph}" fill="{FALSE_FULL_FILL}" opacity="0.8"><title>false_full</title></rect>')
                start = None
    for k in range(5):
        y = mt + ph - ph * k / 4
        out.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eaeef2"/>')
        out.append(f'<text x="{ml - 4}" y="{y + 4:.1f}" text-anchor="end">{_fmt(left_top * k / 4)}{left_unit}</text>')
        if mr > 12:
            out.append(f'<text x="{ml + pw + 4}" y="{y + 4:.1f}">{_fmt(right_top * k / 4)}{right_unit}</text>')
    for k in range(5):
        ti = t0 + span * k / 4
        anchor = "start" if k == 0 else "end" if k == 4 else "middle"
        label = _ago(t1 - ti) if t else ""
        out.append(f'<text x="{x(ti):.1f}" y="{height - 6}" text-anchor="{anchor}">{label}</text>')
    for ln in lines:
        top = right_top if ln.right else left_top
        segment: list[str] = []
        for ti, v in zip(t, ln.values, strict=False):
            if isinstance(v, (int, float)) and math.isfinite(float(v)):
                y = mt + ph - ph * min(float(v), top) / top
                segment.append(f"{x(ti):.1f},{y:.1f}")
                continue
            out.append(_polyline(segment, ln))
            segment = []
        out.append(_polyline(segment, ln))
    if not t:
        out.append(f'<text x="{ml + pw / 2}" y="{mt + ph / 2}" text-anchor="middle">nothing recorded yet</text>')
    out.append("</svg>")
    return "".join(out)


def _polyline(points: list[str], ln: Line) -> str:
    if not points:
        return ""
    if len(points) == 1:
        px, py = points[0].split(",")
        return f'<circle cx="{px}" cy="{py}" r="2" fill="{ln.colour}"/>'
    dash = ' stroke-dasharray="6 3"' if ln.right else ""
    return (f'<polyline class="series" data-series="{escape(ln.label)}" points="{" ".join(points)}" fill="none" '
            f'stroke="{ln.colour}" stroke-width="2"{dash}/>')


def _legend(lines: Sequence[Line], shaded: bool) -> str:
    items = [f'<span><i style="background:{ln.colour}"></i>{escape(ln.label)}</span>' for ln in lines]
    if shaded:
        items.append(f'<span><i style="background:{FALSE_FULL_FILL};height:10px"></i>false_full</span>')
    return f'<div class="legend">{"".join(items)}</div>'


def charts(h: EngineHistory | None, name: str) -> str:
    """The two charts of one engine from its ring buffer."""
    cols = h.series() if h else {"t": [], **{s: [] for s in SERIES}}
    t = [float(v) for v in cols["t"] if isinstance(v, (int, float))]
    usage = [None if v is None else 100 * float(v) for v in cols["panel_usage_ratio"]
             if v is None or isinstance(v, (int, float))]
    main = [
        Line("KV usage % (panel, right axis)", USAGE, usage, right=True),
        Line("waiting requests", WAITING, cols["requests_waiting"]),
        Line("admission headroom (requests)", ADMISSION, cols["admission_headroom_requests"]),
        Line("worst-case blocks per request", WORST, cols["worst_case_blocks_per_request"]),
    ]
    small = [Line("free blocks", FREE, cols["kv_free_blocks"]),
             Line("preemptions/s (right axis)", PREEMPT, cols["preemptions_per_second"], right=True)]
    shade = [v is True for v in cols["false_full"]]
    return (_legend(main, any(shade))
            + chart(t, main, f"{name}: KV usage, waiting, admission headroom, worst-case blocks", right_max=100,
                    right_unit="%", shade=shade)
            + _legend(small, False) + chart(t, small, f"{name}: free blocks and preemptions", height=130))


def _config(e: EngineReport) -> str:
    rows = "".join(f'<tr><td>{escape(k)}</td><td>{escape(str(v["value"]))}</td><td class="src">'
                   f'{escape(str(v["source"]))}</td></tr>' for k, v in e.config.as_json().items())
    return f'<table class="cfg"><tr><td><b>config</b></td><td></td><td class="src">source</td></tr>{rows}</table>'


def _badge(verdict: str) -> str:
    return (f'<span class="badge verdict" data-verdict="{escape(verdict)}" '
            f'style="background:{VERDICT_COLOURS[verdict]}">{escape(verdict)}</span>')


def _engine(r: TargetReport, e: EngineReport, h: EngineHistory | None) -> str:
    hd = e.headroom
    flag = ' <span class="badge ff">false_full</span>' if e.false_full else ""
    slots = f"{e.running}/{e.max_num_seqs}" if e.max_num_seqs else f"{e.running}/?"
    nums = (f"running {slots} · waiting {e.waiting} · free blocks {hd.kv_free_blocks}/{hd.kv_capacity_blocks} · "
            f"admission headroom {diagnosis.admission_text(hd)} · worst case {hd.worst_case_blocks_profile} "
            f"blocks/request · a new worst-case request cannot get "
            f"{100 * headline.unreachable_pool_ratio(hd):.0f} % of the pool · binding now: {e.binding_limit}")
    acts = "".join(f"<li>{escape(a)}</li>" for a in diagnosis.actions(e, r.engines))
    name = f"{e.model_name} engine {e.engine}"
    waste = diagnosis.waste_text(e)
    waste_html = "" if waste is None else f'<p class="nums waste">block waste: {escape(waste)}</p>'
    return (f'<article class="engine"><div><h3>{escape(name)}</h3><p>{_badge(str(e.verdict))}{flag}</p>'
            f'<p class="explanation">{escape(diagnosis.explain(e))}</p><p class="nums">{escape(nums)}</p>'
            f'{waste_html}{f"<b>actions</b><ul>{acts}</ul>" if acts else ""}{_config(e)}</div>'
            f'<div>{charts(h, name)}</div></article>')


def _gap_state(g: EngineGap) -> str:
    """bad_value (a series holds an impossible value), config_error (values that make no sense) or undetermined
    (values unknown): the badge of a gap."""
    return "undetermined" if g.reason == "missing" else g.reason


def _target(r: TargetReport, history: History, label: str) -> str:
    parts = [f'<section class="target"><h2>{escape(label)}</h2>']
    if not r.up:
        parts.append(f'<p>{_badge("target_down")} <span class="down">{escape(r.error or "")}</span></p>')
        for (_url, model, engine), h in history.of_target(r.url):
            name = f"{model} engine {engine}"
            parts.append(f'<article class="engine"><div><h3>{escape(name)}</h3>{_badge("target_down")}</div>'
                         f"<div>{charts(h, name)}</div></article>")
    for e in r.engines:
        parts.append(_engine(r, e, history.of(r.url, e.model_name, e.engine)))
    for g in r.gaps:  # an engine whose capacity cannot be derived: shown with its badge and reason, and counted
        name = f"{g.model_name} engine {g.engine}"
        parts.append(f'<article class="engine"><div><h3>{escape(name)}</h3><p>{_badge(_gap_state(g))}</p>'
                     f'<p class="explanation">{escape(g.explanation)}</p></div><div></div></article>')
    for n in r.notes:
        parts.append(f'<p class="note">note: {escape(n)}</p>')
    parts.append("</section>")
    return "".join(parts)


def render(reports: Sequence[TargetReport], history: History, interval: float,
           labels: dict[str, str] | None = None) -> str:
    """The whole page as HTML; it reloads itself every `interval` seconds (at least 1 s).

    `labels` names targets for people (e.g. a recording's name instead of a replay URL).
    """
    labels = labels or {}
    counts: dict[str, int] = {}
    for r in reports:
        for v in ([str(e.verdict) for e in r.engines] + [_gap_state(g) for g in r.gaps] if r.up
                  else ["target_down"]):
            counts[v] = counts.get(v, 0) + 1
    summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    refresh = max(1, math.ceil(interval))
    body = "".join(_target(r, history, labels.get(r.url, r.url)) for r in reports)
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" '
            f'content="{refresh}"><meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>vllm-headroom: {escape(summary or 'no targets')}</title><style>{CSS}</style></head><body>"
            f"<header><h1>vllm-headroom</h1><span>{len(reports)} target(s): {escape(summary)} · last 15 minutes"
            f" · refreshes every {refresh} s</span></header><main>{body}</main>"
            f'<footer>vllm-headroom {__version__} · <a href="metrics">/metrics</a> · '
            f'<a href="api/v1/diagnosis">/api/v1/diagnosis</a> · <a href="api/v1/history">/api/v1/history</a> · '
            f'<a href="readyz">/readyz</a></footer></body></html>')
