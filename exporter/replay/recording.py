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
