"""Recorded vLLM timelines and a server that replays them as if it were vLLM.

A recording is a folder with `meta.json` (scenario, flags, /v1/models and /version answers) and
`timeline.jsonl.gz` (one `{"t": seconds, "metrics": "<exposition>"}` per line, in time order).
"""

from __future__ import annotations

import gzip
import json
import socket
import time
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse

from ..core import defaults
from ..pipeline.scrape import ScrapeError, parse_models
from ..pipeline.target import Settings, Target
from ..pipeline.verdict import Thresholds

EXPOSITION_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Recording:
    meta: dict[str, Any]
    frames: list[tuple[float, str]]

    @property
    def duration(self) -> float:
        return self.frames[-1][0] - self.frames[0][0] if self.frames else 0.0


def load(folder: Path | Traversable) -> Recording:
    """Read a recording folder; raises ValueError with one sentence when it is not one."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
        raw = (folder / "timeline.jsonl.gz").read_bytes()
        lines = gzip.decompress(raw).decode().splitlines()
        frames = [(float(d["t"]), str(d["metrics"])) for d in map(json.loads, lines) if d]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{folder} is not a vllm-headroom recording: {exc}") from None
    if not frames:
        raise ValueError(f"{folder} holds no frames")
    frames.sort(key=lambda f: f[0])
    return Recording(meta, frames)


def embedded_incident() -> Recording:
    """The recorded real false-full incident shipped inside the package."""
    return load(resources.files("exporter") / "data" / "incident")


def false_full_seconds(rec: Recording) -> float | None:
    """Longest stretch (recording seconds) in which the sidecar flags false-full with no hold, or None if never.

    Each frame is judged by the sidecar's own pipeline (`Target`, /v1/models from the recording's meta), so the
    span is what `serve` would see at the recording's own pace; a run lasts from its first frame to one frame
    interval past its last (`meta["interval"]`)."""
    target = Target(Settings("recording", discover_cmdline=False, thresholds=Thresholds(false_full_hold=0.0)))
    if rec.meta.get("v1_models"):
        target.models = parse_models(json.dumps(rec.meta["v1_models"]))
    step = float(rec.meta.get("interval", 0.5))
    longest, since = None, None
    for t, text in rec.frames:
        try:
            flagged = any(e.false_full for e in target.observe(t, text).engines)
        except ScrapeError:
            flagged = False
        if flagged and since is None:
            since = t
        if since is not None:
            span = t - since + step
            longest = span if longest is None or span > longest else longest
            if not flagged:
                since = None
    return longest


def hold_hint(rec: Recording, speed: float, scrape_interval: float = defaults.SCRAPE_INTERVAL,
              hold: float = defaults.FALSE_FULL_HOLD) -> str | None:
    """One sentence telling how to see the recording's false-full flag rise in `serve`, when its defaults cannot.

    `serve` flags false-full once the condition held `hold` seconds across scrapes `scrape_interval` apart; a run of
    W wall seconds (its recording span / speed) shows it for every scrape phase when ceil(hold / interval) intervals
    fit in W less one interval (the first scrape may come an interval late) and a second of slack. Returns None
    when the defaults already show it, and when the recording holds no false-full stretch that a hold of one
    interval would show at the recording's own pace (a blip of a frame or two is not an incident to watch)."""
    span = false_full_seconds(rec)

    def fits(h: float, wall: float) -> bool:
        return -(-h // scrape_interval) * scrape_interval <= wall - scrape_interval - 1.0

    if span is None or not fits(scrape_interval, span):
        return None
    wall = span / speed
    if fits(hold, wall):
        return None
    head = (f"False-full holds {span:.0f} s in this recording ({wall:.0f} s at speed {speed:g}), shorter than what "
            f"serve's default --verdict.false-full-hold ({hold:g} s) needs with scrapes every {scrape_interval:g} s")
    steps = int((wall - scrape_interval - 1.0) // scrape_interval)
    if steps >= 1:
        return f"{head}: to see the flag rise, run vllm-headroom serve --verdict.false-full-hold " \
               f"{steps * scrape_interval:g}s."
    return f"{head}: replay it at --speed 1 or slower, and run serve with a shorter --verdict.false-full-hold."


class Player:
    """Which frame the replayed server shows; moved by the demo, or by the wall clock when `speed` is set."""

    def __init__(self, recording: Recording, speed: float | None = None, loop: bool = False,
                 start_at: float = 0.0) -> None:
        self.recording = recording
        self.index = 0
        self.speed = speed
        self.loop = loop
        self.start_at = start_at  # seconds into the recording at which the wall clock starts
        self._started = time.monotonic()

    def tick(self) -> None:
        """With a speed, show the frame the recording had reached at this moment (wrapping when looping)."""
        if self.speed is None:
            return
        t = self.start_at + (time.monotonic() - self._started) * self.speed
        span = self.recording.duration
        if self.loop and span > 0:
            t %= span + float(self.recording.meta.get("interval", 0.5))
        self.at(t)

    def at(self, t: float) -> None:
        """Show the last frame recorded at or before t (seconds since the recording's start)."""
        start = self.recording.frames[0][0]
        i = self.index if self.recording.frames[self.index][0] - start <= t else 0
        while i + 1 < len(self.recording.frames) and self.recording.frames[i + 1][0] - start <= t:
            i += 1
        self.index = i

    @property
    def metrics(self) -> str:
        return self.recording.frames[self.index][1]


def make_app(player: Player) -> FastAPI:
    """An HTTP server answering /metrics, /v1/models and /version like the recorded vLLM did."""
    app = FastAPI(title="vllm-headroom replay", docs_url=None, redoc_url=None)
    meta = player.recording.meta

    @app.get("/metrics")
    def metrics() -> Response:
        player.tick()
        return Response(player.metrics, media_type=EXPOSITION_TYPE)

    @app.get("/v1/models")
    def models() -> JSONResponse:
        return JSONResponse(meta.get("v1_models") or {"object": "list", "data": []})

    @app.get("/version")
    def version() -> JSONResponse:
        return JSONResponse(meta.get("version") or {"version": meta.get("vllm_version", "unknown")})

    @app.get("/health")
    def health() -> Response:
        return Response(status_code=200)

    return app


def serve(player: Player, sock: socket.socket) -> None:
    """Serve `make_app(player)` on a bound socket until interrupted (`vllm-headroom replay`)."""
    import uvicorn

    config = uvicorn.Config(make_app(player), log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
