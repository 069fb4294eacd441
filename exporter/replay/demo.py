"""`vllm-headroom demo`: replay a recorded real false-full incident through a real sidecar, live.

The recorded vLLM expositions are served by a local replay server; the sidecar scrapes it over HTTP on the
recording's own clock, and the terminal shows what the usual panel says next to what the sidecar says. The
sidecar's status page, /metrics and JSON API are up on the listen address from the first frame on (not with
`--once`), so the incident can be watched in a browser or scraped by a local Prometheus while it unfolds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import replace
from typing import TextIO

import httpx
import uvicorn

from ..core import defaults
from ..expose import diagnosis, headline
from ..expose.server import Sidecar, bind, make_app, page_url
from ..pipeline.config import split_args
from ..pipeline.target import EngineReport, Settings, Target
from ..pipeline.verdict import Thresholds
from . import recording as replay

# The recorded incident is short; a 10 s hold lets the false-full flag rise within it.
DEMO_FALSE_FULL_HOLD = defaults.DEMO_FALSE_FULL_HOLD
MIN_WIDTH, MAX_WIDTH = 40, 120  # the table and sparklines adapt to the terminal between these widths

# One row is 76 characters wide; the legend defines every column in three lines. Narrower terminals drop
# columns (DROP_ORDER first) rather than cut a row mid-column, and the legend says which are not shown.
# Each column: name, width, right-aligned, separator before it, definition for the legend.
COLUMNS = (
    ("t", 6, True, "", ""),
    ("panel", 5, True, "  ", "panel = vLLM's KV usage (the usual panel)"),
    ("slots", 5, True, "  ", "slots = running/max_num_seqs"),
    ("wait", 4, True, "  ", "wait = queue"),
    ("free", 4, True, "  ", "free = free KV blocks"),
    ("W", 3, True, "  ", "W = worst-case blocks per request"),
    ("adm", 3, True, "  ", "adm = admissible now"),
    ("unreachable", 12, False, "  ", "unreachable = pool a new request can't get, what binds"),
    ("verdict", 12, False, " ", ""),
    ("false_full", 10, False, " ", ""),
)
# What binds now, in the 7 characters the column leaves for it.
SHORT_LIMITS = {"token_budget": "budget", "head_prompt": "head", "undecided": "?", "pool_size": "pool",
                "deferral": "defer"}
DROP_ORDER = ("unreachable", "adm", "W", "free", "wait", "slots", "panel")
ALL = tuple(c[0] for c in COLUMNS)


def _line(cells: dict[str, str], shown: Sequence[str]) -> str:
    out = []
    for name, width, right, sep, _ in COLUMNS:
        if name in shown:
            out.append(sep + (f"{cells[name]:>{width}}" if right else f"{cells[name]:<{width}}"))
    return "".join(out).rstrip()


def header(shown: Sequence[str] = ALL) -> str:
    return _line({c: c for c in ALL}, shown)


def columns_for(width: int) -> tuple[str, ...]:
    """The columns that fit `width`: all of them at 76 and more, else dropping DROP_ORDER's first."""
    shown = list(ALL)
    for name in DROP_ORDER:
        if len(header(shown)) <= width:
            break
        shown.remove(name)
    return tuple(shown)


HEADER = header()
LEGEND = (
    "panel = vLLM's KV usage (the usual panel)   slots = running/max_num_seqs",
    "wait = queue   free = free KV blocks   W = worst-case blocks per request",
    "adm = admissible now   unreachable = pool a new request can't get, what binds",
)


def legend(shown: Sequence[str], width: int) -> list[str]:
    """The legend of the shown columns within `width`, and which columns this width leaves out."""
    if tuple(shown) == ALL and width >= max(len(ln) for ln in LEGEND):
        return list(LEGEND)
    defs = [d for name, _, _, _, d in COLUMNS if d and name in shown]
    lines: list[str] = []
    for d in defs:  # definitions side by side while they fit, never split but at a space
        if lines and len(lines[-1]) + 3 + len(d) <= width:
            lines[-1] += "   " + d
        else:
            lines += textwrap.wrap(d, width, subsequent_indent="  ") or [""]
    dropped = [c for c in ALL if c not in shown]
    if dropped:
        lines += textwrap.wrap(f"(not shown at {width} columns: {', '.join(dropped)}; 80 columns show all)", width)
    return lines
SPARKS = "▁▂▃▄▅▆▇█"
ASCII_SPARKS = "_.-=+*#@"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def basis(e: EngineReport) -> str:
    """What W is computed from: the observed profile or max_model_len (before any request finished)."""
    if e.max_tokens is None or e.max_tokens.basis == "max_model_len":
        return "max_model_len (no finished request yet)"
    return f"profile (p99 of finished requests' prompt + max_tokens, {e.max_tokens.basis})"


def row(t: float, target: Target, shown: Sequence[str] = ALL) -> str:
    """One table row (76 characters with every column) of the target's latest report."""
    r = target.last
    if not r.up or not r.engines:
        return f"{t:5.1f}s  target down: {r.error}"
    e = r.engines[0]
    h = e.headroom
    slots = f"{e.running}/{e.max_num_seqs}" if e.max_num_seqs else str(e.running)
    cells = {
        "t": f"{t:5.1f}s", "panel": f"{100 * h.panel_usage_ratio:4.0f}%", "slots": slots, "wait": str(e.waiting),
        "free": str(h.kv_free_blocks), "W": str(h.worst_case_blocks_profile),
        "adm": str(h.admission_headroom_requests),
        "unreachable": f"{100 * headline.unreachable_pool_ratio(h):3.0f}% "
                       f"{SHORT_LIMITS.get(e.binding_limit, e.binding_limit)}",
        "verdict": str(e.verdict), "false_full": "YES" if e.false_full else "no",
    }
    return _line(cells, shown)


def sparkline(values: Sequence[float], width: int, glyphs: str = SPARKS) -> str:
    """`values` as one line of at most `width` glyphs (each glyph the maximum of its share of the values)."""
    if not values:
        return ""
    n = min(width, len(values))
    cols = [max(values[i * len(values) // n:max((i + 1) * len(values) // n, i * len(values) // n + 1)])
            for i in range(n)]
    lo, hi = min(values), max(values)
    span = hi - lo
    top = len(glyphs) - 1
    return "".join(glyphs[0 if span == 0 else round(top * (v - lo) / span)] for v in cols)


def sparklines(curves: dict[str, list[float]], width: int, glyphs: str = SPARKS) -> list[str]:
    """One line per curve: label, sparkline and range, each line at most `width` characters."""
    label_w = max(len(k) for k in curves)
    lines = []
    for name, values in curves.items():
        rng = f"{min(values):g}..{max(values):g}" if values else ""
        room = max(8, width - label_w - len(rng) - 4)
        lines.append(f"{name:<{label_w}}  {sparkline(values, room, glyphs)}  {rng}"[:width])
    return lines


def _width(out: TextIO) -> int:
    cols = shutil.get_terminal_size((80, 24)).columns if out is sys.stdout else 80
    return max(MIN_WIDTH, min(cols, MAX_WIDTH))


def _glyphs(out: TextIO) -> str:
    try:
        SPARKS.encode(getattr(out, "encoding", None) or "utf-8")
        return SPARKS
    except (UnicodeEncodeError, LookupError):
        return ASCII_SPARKS


def _wrap(text: str, width: int) -> str:
    """Each line of `text` wrapped to `width`, continuation lines indented under their first word."""
    out = []
    for line in text.splitlines() or [""]:
        lead = len(line) - len(line.lstrip(" -"))
        out.append(textwrap.fill(line, width, subsequent_indent=" " * lead, break_on_hyphens=False,
                                 break_long_words=True) if line.strip() else "")
    return "\n".join(out)


async def _started(server: uvicorn.Server) -> None:
    for _ in range(200):
        if server.started:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError("the replay server did not start")


async def run(once: bool, as_json: bool, speed: float, host: str, listen_port: int,
              out: TextIO = sys.stdout, sock: socket.socket | None = None) -> int:
    """Replay the embedded incident through a real sidecar; with `once` print the diagnosis and return.

    Without `once` the sidecar serves on `sock` (bound by the caller, see `bind`) from the first frame on and
    stays up on the last recorded state until cancelled. With `as_json` only the JSON document is printed.
    """
    rec = replay.embedded_incident()
    meta = rec.meta
    name = f"recording {meta.get('scenario', 'incident')} (vLLM {meta.get('vllm_version', '?')})"
    player = replay.Player(rec)
    port = _free_port()
    replay_server = uvicorn.Server(uvicorn.Config(replay.make_app(player), host="127.0.0.1", port=port,
                                                  log_level="error", lifespan="off"))
    replay_task = asyncio.create_task(replay_server.serve())
    await _started(replay_server)
    url = f"http://127.0.0.1:{port}"
    settings = Settings(
        url=url,
        # In a pod the sidecar reads vLLM's flags from /proc; the recording kept them for us.
        vllm_args=split_args(" ".join(meta["server_argv"])) if meta.get("server_argv") else None,
        discover_cmdline=False,
        thresholds=Thresholds(false_full_hold=DEMO_FALSE_FULL_HOLD),
    )
    target = Target(settings)
    start = rec.frames[0][0]
    steps = [t - start for t, _ in rec.frames]
    sidecar = Sidecar([target], float(meta.get("interval", 1.0)), labels={url: name})
    api: uvicorn.Server | None = None
    api_task: asyncio.Task[None] | None = None
    text = not as_json

    def say(line: str) -> None:
        if text:
            print(line, file=out, flush=True)

    width, glyphs = _width(out), _glyphs(out)
    if sock is not None:
        api = uvicorn.Server(uvicorn.Config(make_app(sidecar, start_loop=False), log_level="warning",
                                            lifespan="on"))
        api_task = asyncio.create_task(api.serve(sockets=[sock]))
        await _started(api)
        print(_wrap(f"Status page: {page_url(host, listen_port)}  (also /metrics, /api/v1/diagnosis, "
                    "/api/v1/history)", width), file=out if text else sys.stderr, flush=True)
    load = meta.get("load")
    what = load.get("description", "") if isinstance(load, dict) else str(load or "")
    say(_wrap(f"Replaying {name}: {what}", width))
    say(_wrap(f"vLLM flags: {' '.join(str(a) for a in meta.get('server_argv', [])[-8:])}", width))
    say(_wrap(f"False-full hold {DEMO_FALSE_FULL_HOLD:g} s for the demo (30 s by default).", width))
    say("")
    shown = columns_for(width)
    for line in legend(shown, width):
        say(line)
    say(header(shown))
    curves: dict[str, list[float]] = {"KV usage %": [], "waiting": [], "worst-case W": [], "free blocks": [],
                                      "false_full": []}
    shown_basis: str | None = None
    try:
        async with httpx.AsyncClient() as client:
            for i, t in enumerate(steps):
                player.index = i
                await sidecar.tick(client, now=t)
                report = target.last
                if report.up and report.engines:
                    e = report.engines[0]
                    now_basis = basis(e)
                    if now_basis != shown_basis:
                        say(_wrap(f"  W basis: {now_basis}", width))
                        shown_basis = now_basis
                    h = e.headroom
                    for key, v in (("KV usage %", round(100 * h.panel_usage_ratio)), ("waiting", e.waiting),
                                   ("worst-case W", h.worst_case_blocks_profile), ("free blocks", h.kv_free_blocks),
                                   ("false_full", 1 if e.false_full else 0)):
                        curves[key].append(float(v))
                say(_wrap(row(t, target, shown), width))
                if not once and i + 1 < len(steps):
                    await asyncio.sleep((steps[i + 1] - t) / speed)
        say("")
        say(f"The whole incident ({steps[-1]:.0f} s), low to high:")
        for line in sparklines(curves, width, glyphs):
            say(line)
        say("")
        reports = [replace(target.last, url=name)]
        if as_json:
            print(json.dumps(diagnosis.document(reports), indent=2), file=out, flush=True)
        else:
            say("Final diagnosis:")
            say(_wrap(diagnosis.render_text(reports), width))
        if api_task is not None:
            print("\n" + _wrap("The sidecar stays up on the last recorded state (Ctrl-C to stop).", width),
                  file=out if text else sys.stderr, flush=True)
            # Serve the final state as it is: scraping the frozen last frame on a wall clock would soon call the
            # engine stuck, which is true of a replay and not of the incident.
            await api_task
        return 0
    finally:
        if api is not None and api_task is not None:
            api.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await api_task
        replay_server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await replay_task


def main(once: bool, as_json: bool, speed: float, host: str, port: int) -> int:
    """`vllm-headroom demo`: run the replay on the terminal; Ctrl-C ends it. Raises PortInUse when the
    listen address is taken (checked before the replay starts; `once` does not serve)."""
    sock = None if once else bind(host, port)
    try:
        return asyncio.run(run(once, as_json, speed, host, port, sock=sock))
    except KeyboardInterrupt:
        return 0
    finally:
        if sock is not None:
            sock.close()
