"""The last 15 minutes of every engine's curves, in bounded in-memory ring buffers (`/api/v1/history`).

One point per scrape and engine; each series is named like its field in `/api/v1/diagnosis`. Memory stays
flat and bounded in total: a point older than the window is dropped, no engine keeps more than `max_points`
points whatever the scrape interval, and all engines together keep at most `max_total_points`
(`defaults.HISTORY_MAX_POINTS`: 250,000 points of 88 bytes, 22 MB) — with more engines than that allows at
`max_points` each, every engine keeps its newest `max_total_points // engines` (at least 2). A point is 11
doubles in one array per engine (time, then the series; None is NaN, a verdict its index in `VERDICTS`).
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import defaults
from ..pipeline.report import EngineReport, TargetReport
from . import headline

WINDOW = 900.0  # s: the page shows the last 15 minutes
MAX_POINTS = 1800  # per engine: 15 minutes at a 0.5 s interval; a shorter interval keeps the newest 1,800
PRUNE_EVERY = 30.0  # s on the record clock: engines not seen for a window are looked for at most this often

# Series of one point, in the order the JSON lists them; every one is a field of /api/v1/diagnosis. Each has a
# kind: how its double is read back (a float, a whole count, a flag, a verdict name).
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
KINDS = ("float", "int", "int", "int", "int", "int", "float", "float", "bool", "verdict")
WIDTH = 1 + len(SERIES)  # doubles per point: t, then the series
POINT_BYTES = 8 * WIDTH

Value = float | int | bool | str | None
VERDICTS: list[str] = []  # verdict names by the index a point stores (grows with each new name: a few dozen)
_VERDICT_INDEX: dict[str, int] = {}


def _verdict(name: str) -> float:
    i = _VERDICT_INDEX.get(name)
    if i is None:
        i = _VERDICT_INDEX[name] = len(VERDICTS)
        VERDICTS.append(name)
    return float(i)


def _encode(values: Sequence[Value]) -> list[float]:
    out: list[float] = []
    for kind, v in zip(KINDS, values, strict=True):
        if v is None:
            out.append(math.nan)
        elif kind == "verdict":
            out.append(_verdict(str(v)))
        else:
            out.append(float(v))  # bools and ints are exact up to 2^53
    return out


def _decode(kind: str, v: float) -> Value:
    if v != v:  # NaN: none (a scrape that failed, a rate not known yet); JSON has no NaN either
        return None
    if kind == "float":
        return v if math.isfinite(v) else None
    if kind == "int":
        return int(v)
    if kind == "bool":
        return v == 1.0
    return VERDICTS[int(v)]


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
    """The ring buffer of one (target, model_name, engine): at most `cap` points, oldest first."""

    __slots__ = ("_buf", "_cap", "_first", "_n")

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self._buf = array("d")  # grows to cap * WIDTH doubles, then wraps
        self._cap = max(2, max_points)
        self._first = 0  # the row of the oldest point
        self._n = 0  # points held

    def __len__(self) -> int:
        return self._n

    def _rows(self) -> int:
        return len(self._buf) // WIDTH

    def _linear(self, keep: int) -> array[float]:
        """The newest `keep` points, oldest first, as one array."""
        rows, out = self._rows(), array("d")
        for i in range(self._n - keep, self._n):
            r = (self._first + i) % rows
            out.extend(self._buf[r * WIDTH:(r + 1) * WIDTH])
        return out

    def resize(self, cap: int) -> None:
        """Hold at most `cap` points from now on, dropping the oldest beyond it."""
        cap = max(2, cap)
        if cap < self._rows() or (cap > self._cap and self._first != 0):
            keep = min(self._n, cap)
            self._buf, self._first, self._n = self._linear(keep), 0, keep
        self._cap = cap

    def add(self, p: Point, window: float) -> None:
        self._add(p.t, _encode(p.values), window)

    def _add(self, t: float, row: list[float], window: float) -> None:
        rows = self._rows()
        while self._n and self._buf[(self._first % rows) * WIDTH] < t - window:
            self._first, self._n = (self._first + 1) % rows, self._n - 1
        if self._n < rows:  # a free row (the window dropped one)
            r = (self._first + self._n) % rows
            self._buf[r * WIDTH:(r + 1) * WIDTH] = array("d", [t, *row])
            self._n += 1
        elif rows < self._cap:  # grow: the rows are in order only from row 0
            if self._first:
                self._buf, self._first = self._linear(self._n), 0
            self._buf.extend([t, *row])
            self._n += 1
        else:  # full: the newest overwrites the oldest
            r = self._first
            self._buf[r * WIDTH:(r + 1) * WIDTH] = array("d", [t, *row])
            self._first = (self._first + 1) % rows

    @property
    def last_t(self) -> float | None:
        if not self._n:
            return None
        r = (self._first + self._n - 1) % self._rows()
        return self._buf[r * WIDTH]

    @property
    def points(self) -> list[Point]:
        """Every point, oldest first (decoded: for tests and small uses; `series` is the bulk read)."""
        cols = self.series()
        return [Point(float(t or 0.0), tuple(cols[s][i] for s in SERIES)) for i, t in enumerate(cols["t"])]

    def series(self) -> dict[str, list[Value]]:
        """Columns: `t` and one list per SERIES name, all of the same length."""
        flat = self._linear(self._n)
        cols: dict[str, list[Value]] = {"t": list(flat[0::WIDTH])}
        for i, (name, kind) in enumerate(zip(SERIES, KINDS, strict=True)):
            cols[name] = [_decode(kind, v) for v in flat[i + 1::WIDTH]]
        return cols

    def copy(self) -> EngineHistory:
        other = EngineHistory(self._cap)
        other._buf, other._first, other._n = array("d", self._buf), self._first, self._n
        return other


class History:
    """Every engine's ring buffer, fed at each scrape with the target's report."""

    def __init__(self, window: float = WINDOW, max_points: int = MAX_POINTS,
                 max_total_points: int = defaults.HISTORY_MAX_POINTS) -> None:
        if window <= 0 or max_points < 2 or max_total_points < 2:
            raise ValueError("a history needs a window above 0 s and at least 2 points")
        self.window = window
        self.max_points = max_points
        self.max_total_points = max_total_points
        self.engines: dict[tuple[str, str, str], EngineHistory] = {}
        self._by_url: dict[str, set[tuple[str, str, str]]] = {}
        self._cap = max_points  # points per engine now: max_points, or less with many engines
        self._pruned: float | None = None
        self._wall_offset = 0.0  # time.time() - the clock of the last record: makes `t` a Unix time

    @property
    def points_per_engine(self) -> int:
        """How many points each engine keeps now (the total bound shared among the engines)."""
        return self._cap

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
                gap = point(now, None)
                for key in self._by_url.get(r.url, ()):
                    self.engines[key].add(gap, self.window)
        if self._pruned is None or now - self._pruned >= min(PRUNE_EVERY, self.window) or now < self._pruned:
            self._pruned = now
            stale = [k for k, h in self.engines.items() if (h.last_t if len(h) else None) is None
                     or (h.last_t or 0.0) < now - self.window]
            for k in stale:
                self._forget(k)

    def _forget(self, key: tuple[str, str, str]) -> None:
        del self.engines[key]
        keys = self._by_url.get(key[0])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_url[key[0]]
        self._share()

    def _share(self) -> None:
        """Give every engine its share of the total bound."""
        cap = max(2, min(self.max_points, self.max_total_points // max(1, len(self.engines))))
        if cap != self._cap:
            self._cap = cap
            for h in self.engines.values():
                h.resize(cap)

    def _engine(self, url: str, model: str, engine: str) -> EngineHistory:
        key = (url, model, engine)
        h = self.engines.get(key)
        if h is None:
            h = self.engines[key] = EngineHistory(self._cap)
            self._by_url.setdefault(url, set()).add(key)
            self._share()
        return h

    def of(self, url: str, model: str, engine: str) -> EngineHistory | None:
        return self.engines.get((url, model, engine))

    def of_target(self, url: str) -> list[tuple[tuple[str, str, str], EngineHistory]]:
        """The (key, ring buffer) of each engine of target `url`, sorted by key."""
        return [(k, self.engines[k]) for k in sorted(self._by_url.get(url, ()))]

    def unix(self, t: float) -> float:
        """A point's `t` as Unix seconds."""
        return t + self._wall_offset

    def copy(self) -> History:
        """A copy a worker thread may read while the scrapes go on adding points (~1 ms per 100 engines)."""
        other = History(self.window, self.max_points, self.max_total_points)
        other.engines = {k: h.copy() for k, h in self.engines.items()}
        other._by_url = {u: set(keys) for u, keys in self._by_url.items()}
        other._cap, other._pruned, other._wall_offset = self._cap, self._pruned, self._wall_offset
        return other

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
            for key in sorted(self._by_url.get(url, ())):
                _u, model, engine = key
                cols = self.engines[key].series()
                cols["t"] = [round(self.unix(float(t or 0.0)), 3) for t in cols["t"]]
                engines.append({"model_name": model, "engine": engine, **cols})
            targets.append({"target": url, "engines": engines})
        return {"schema_version": 1, "window_seconds": self.window, "interval_seconds": interval,
                "series": ["t", *SERIES], "targets": targets}
