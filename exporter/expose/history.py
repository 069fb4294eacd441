"""The last 15 minutes of every engine's curves, in a bounded in-memory ring buffer (`/api/v1/history`).

One point per scrape and engine; each series is named like its field in `/api/v1/diagnosis`. Memory stays
flat: a point older than the window is dropped, and no engine keeps more than `max_points` points whatever
the scrape interval, so the buffer holds at most targets × engines × max_points points.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..pipeline.report import EngineReport, TargetReport
from . import headline

WINDOW = 900.0  # s: the page shows the last 15 minutes
MAX_POINTS = 1800  # per engine: 15 minutes at a 0.5 s interval; a shorter interval keeps the newest 1,800

# Series of one point, in the order the JSON lists them; every one is a field of /api/v1/diagnosis.
SERIES = (
    "panel_usage_ratio",
    "requests_waiting",
    "requests_running",
    "admission_headroom_requests",
    "worst_case_blocks_per_request",  # the profile basis, as the verdict uses it
    "kv_free_blocks",
    "preemptions_per_second",
    "unreachable_pool_ratio",
    "false_full",
    "verdict",
)

Value = float | int | bool | str | None


@dataclass(frozen=True)
class Point:
    """One scrape of one engine: `t` in seconds on the sidecar's clock, values by SERIES name."""

    t: float
    values: tuple[Value, ...]


def point(t: float, e: EngineReport | None) -> Point:
    """The point of engine report `e` at `t`; None (target down) gives a gap: every value null."""
    if e is None:
        return Point(t, (None,) * (len(SERIES) - 1) + ("target_down",))
    h = e.headroom
    return Point(t, (
        h.panel_usage_ratio,
        e.waiting,
        e.running,
        h.admission_headroom_requests,
        h.worst_case_blocks_profile,
        h.kv_free_blocks,
        e.preemptions_per_second,
        round(headline.unreachable_pool_ratio(h), 6),
        e.false_full,
        str(e.verdict),
    ))


class EngineHistory:
    """The ring buffer of one (target, model_name, engine)."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.points: deque[Point] = deque(maxlen=max_points)

    def add(self, p: Point, window: float) -> None:
        self.points.append(p)
        while self.points and self.points[0].t < p.t - window:
            self.points.popleft()

    def series(self) -> dict[str, list[Value]]:
        """Columns: `t` and one list per SERIES name, all of the same length."""
        cols: dict[str, list[Value]] = {"t": [p.t for p in self.points]}
        for i, name in enumerate(SERIES):
            cols[name] = [p.values[i] for p in self.points]
        return cols


class History:
    """Every engine's ring buffer, fed once per tick with the targets' latest reports."""

    def __init__(self, window: float = WINDOW, max_points: int = MAX_POINTS) -> None:
        if window <= 0 or max_points < 2:
            raise ValueError("a history needs a window above 0 s and at least 2 points")
        self.window = window
        self.max_points = max_points
        self.engines: dict[tuple[str, str, str], EngineHistory] = {}
        self._wall_offset = 0.0  # time.time() - the clock of the last record: makes `t` a Unix time

    def record(self, now: float, reports: Iterable[TargetReport]) -> None:
        """Add one point per engine of `reports` at `now` (seconds on the scrape loop's clock).

        A target that is down adds a gap to each of its known engines; an engine not seen for a whole
        window is forgotten, so history cannot grow with restarts under new names.
        """
        self._wall_offset = time.time() - now
        for r in reports:
            if r.up:
                for e in r.engines:
                    self._engine(r.url, e.model_name, e.engine).add(point(now, e), self.window)
            else:
                for (url, _model, _engine), h in self.engines.items():
                    if url == r.url:
                        h.add(point(now, None), self.window)
        stale = [k for k, h in self.engines.items() if not h.points or h.points[-1].t < now - self.window]
        for k in stale:
            del self.engines[k]

    def _engine(self, url: str, model: str, engine: str) -> EngineHistory:
        key = (url, model, engine)
        h = self.engines.get(key)
        if h is None:
            h = self.engines[key] = EngineHistory(self.max_points)
        return h

    def of(self, url: str, model: str, engine: str) -> EngineHistory | None:
        return self.engines.get((url, model, engine))

    def unix(self, t: float) -> float:
        """A point's `t` as Unix seconds."""
        return t + self._wall_offset

    def document(self, urls: Sequence[str], interval: float) -> dict[str, Any]:
        """The `/api/v1/history` document.

        Shape: {"schema_version": 1, "window_seconds", "interval_seconds", "series": [names],
        "targets": [{"target": url, "engines": [{"model_name", "engine", "t": [Unix s],
        "<series>": [value or null]}]}]}. Ratios are 0..1, counts are requests or blocks, `verdict` is a
        verdict name; a null marks a scrape that failed.
        """
        targets = []
        for url in urls:
            engines = []
            for (u, model, engine), h in sorted(self.engines.items()):
                if u != url:
                    continue
                cols = h.series()
                cols["t"] = [round(self.unix(float(t or 0.0)), 3) for t in cols["t"]]
                engines.append({"model_name": model, "engine": engine, **{k: _finite(v) for k, v in cols.items()}})
            targets.append({"target": url, "engines": engines})
        return {"schema_version": 1, "window_seconds": self.window, "interval_seconds": interval,
                "series": ["t", *SERIES], "targets": targets}


def _finite(values: list[Value]) -> list[Value]:
    """JSON has no NaN or Infinity: such a value becomes null."""
    return [None if isinstance(v, float) and not math.isfinite(v) else v for v in values]
