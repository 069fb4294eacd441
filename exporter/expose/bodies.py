"""The bodies the sidecar serves, built so that no request waits for a scrape and no scrape pays for a body
nobody asked for (issue 25).

- `MetricsBody`: our /metrics from per-target pieces. Each target's series are rendered (by prometheus_client,
  from `HeadroomCollector` over that one target) at most once per scrape of it and only when /metrics is asked
  for; a request joins the pieces family by family. At 100 targets a read re-renders only the targets scraped
  since the last read, instead of 100 targets' worth (~40 ms) at every tick. While the schedules run (`read`),
  an answer younger than `max_age` (a fifth of the interval, at most 1 s) is served again, and one younger than
  twice that is served while the next is built in the background: readers in a crowd never queue behind a
  build (the profile at 200 reads/s: a body joined and compressed per read, 20 times a second at 100 targets),
  and no answer is older than 2 × `max_age` plus one build. A client that accepts gzip (Prometheus does) gets
  the body compressed once per build, in a worker thread (zlib lets go of the GIL), and while it compresses the
  last compressed body within the same age (no reader waits for zlib).
- `DiagnosisBody`: /api/v1/diagnosis from per-target JSON pieces, the same way.
- `Cached`: a body rebuilt at most once per scrape interval and only when asked (the status page and
  /api/v1/history), in a worker thread from a copy of what it reads, one build at a time for all requests.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from .. import __version__
from ..pipeline.report import TargetReport
from ..pipeline.target import Target
from . import diagnosis
from .collector import HeadroomCollector

log = logging.getLogger("vllm_headroom")

YIELD_AFTER = 0.004  # s of rendering on the event loop before other requests and scrapes get a turn
PROCESS_EVERY = 1.0  # s between two reads of the process collector (/proc) for /metrics
GZIP_LEVEL = 1  # zlib level of a gzipped /metrics: ~1 MB -> ~50 KB at 100 targets for ~10 ms, once per build


def accepts_gzip(header: str) -> bool:
    """The request's Accept-Encoding allows gzip (RFC 9110 section 12.5.3): gzip's own entry (or x-gzip's)
    decides by its q, and only without one does `*`; a q of 0, or one that is no number, refuses."""
    found: dict[str, bool] = {}
    for item in header.split(","):
        coding, *params = (part.strip().lower() for part in item.split(";"))
        if coding in ("x-gzip", "gzip"):
            coding = "gzip"
        if coding not in ("gzip", "*") or coding in found:
            continue
        q = next((p[2:] for p in params if p.startswith("q=")), "1")
        try:
            found[coding] = float(q) > 0
        except ValueError:
            found[coding] = False
    return found.get("gzip", found.get("*", False))


class _Families(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self.families


def _split(text: str) -> list[tuple[str, str, str]]:
    """(HELP name, header, samples) per family of a text exposition from `generate_latest` (label values never
    hold a line break there, so every family starts with a line `# HELP `)."""
    out = []
    for part in ("\n" + text).split("\n# HELP ")[1:]:
        family = "# HELP " + part + ("" if part.endswith("\n") else "\n")
        first = family.index("\n")
        second = family.index("\n", first + 1)
        out.append((part.split(" ", 1)[0], family[:second + 1], family[second + 1:]))
    return out


class _Piece:
    __slots__ = ("families", "report", "serial")

    def __init__(self, report: TargetReport, families: dict[str, str], serial: int) -> None:
        self.report = report  # held, so that the identity compared is never a reused address
        self.families = families
        self.serial = serial  # which render made it: the key of the assembled body


class MetricsBody:
    """Our /metrics text (format 0.0.4) for `targets`, then `extra` (the process collector).

    Families that `HeadroomCollector` yields with no target at all (the build's own series) are rendered once per
    read; every other family is joined from the targets' pieces in the order the collector yields them. The
    samples equal `generate_latest` over `HeadroomCollector(targets)`; only `config_info` lists each target's own
    label names instead of the union (an empty label is an absent one to Prometheus).
    """

    def __init__(self, targets: Sequence[Target], extra: Collector | None = None) -> None:
        self.targets = targets
        self.extra = extra
        self._pieces: dict[str, _Piece] = {}
        self._headers: dict[str, str] = {}
        self._order: list[str] = []
        self._body: tuple[tuple[int, ...], bytes] | None = None
        self._answer: _Answer | None = None  # the last body `read` built
        self._zipped: tuple[float, bytes] | None = None  # the newest gzip done: (its body's build time, the gzip)
        self._eager = False  # compress each new body when built: gzip was asked for while the schedules run
        self._building: asyncio.Task[_Answer] | None = None
        self.builds = 0  # bodies `read` built (a test counts them)
        self._globals = {name for name, _h, samples in _split(generate_latest(HeadroomCollector([])).decode())
                         if samples}
        self.rendered_targets = 0  # target pieces rendered since start (a test counts them)

    def stale(self) -> list[Target]:
        return [t for t in self.targets if (p := self._pieces.get(t.settings.url)) is None or p.report is not t.last]

    def _render(self, target: Target) -> None:
        report = target.last
        text = generate_latest(HeadroomCollector([target])).decode()
        families: dict[str, str] = {}
        order: list[str] = []
        for name, header, samples in _split(text):
            order.append(name)
            if name in self._globals:
                continue
            self._headers.setdefault(name, header)
            families[name] = samples
        self._merge(order)
        self.rendered_targets += 1
        self._pieces[target.settings.url] = _Piece(report, families, self.rendered_targets)

    def _merge(self, order: list[str]) -> None:
        """Fold one target's family order into the body's (each is a subsequence of the collector's order)."""
        known = set(self._order)
        for i, name in enumerate(order):
            if name not in known:
                at = self._order.index(order[i - 1]) + 1 if i else 0
                self._order.insert(at, name)
                known.add(name)

    def _assemble(self) -> bytes:
        """Our own families joined from the pieces (the process collector's series are not in it)."""
        pieces = [self._pieces[t.settings.url] for t in self.targets if t.settings.url in self._pieces]
        key = tuple(p.serial for p in pieces)
        if self._body is not None and self._body[0] == key:
            return self._body[1]
        globals_ = {name: header + samples
                    for name, header, samples in _split(generate_latest(HeadroomCollector([])).decode())}
        out: list[str] = []
        for name in self._order:
            if name in self._globals:
                out.append(globals_.get(name, ""))
                continue
            parts = [p.families[name] for p in pieces if name in p.families]
            if parts:
                out.append(self._headers[name])
                out.extend(parts)
        head = "".join(out).encode()
        self._body = (key, head)
        return head

    def _whole(self) -> bytes:
        return self._assemble() + (generate_latest(self.extra) if self.extra is not None else b"")

    def render(self) -> bytes:
        """The body now (renders the stale pieces on the caller's thread)."""
        for t in self.stale():
            self._render(t)
        return self._whole()

    async def render_async(self) -> bytes:
        """The body now, giving the event loop a turn every few milliseconds of rendering."""
        started = time.perf_counter()
        for t in self.stale():
            self._render(t)
            if time.perf_counter() - started > YIELD_AFTER:
                await asyncio.sleep(0)
                started = time.perf_counter()
        return self._whole()

    async def read(self, gzip: bool, max_age: float) -> bytes:
        """The body for one request (gzipped if `gzip`): the last one if younger than `max_age` s; the last one
        while the next is built if younger than 2 × `max_age`; else a new one (one build for all who wait). A
        gzipped answer is, likewise, the last one compressed while the next compresses, if younger than 2 ×
        `max_age`: no reader waits for zlib behind a build (the tail of /metrics at 100 targets)."""
        answer, now = self._answer, time.monotonic()
        self._eager = max_age > 0 and (gzip or self._eager)  # with max_age 0 (a body per read) only what is read
        if answer is None or now - answer.built >= 2 * max_age:
            answer = await self._build()
        elif now - answer.built >= max_age:
            self._start()
        if not gzip:
            return answer.plain
        zipped = answer.zipped()
        if zipped is not None:
            return zipped
        last = self._zipped
        if last is not None and now - last[0] < 2 * max_age:
            answer.compress(self._zipped_done)
            return last[1]
        return await asyncio.shield(answer.compress(self._zipped_done))

    def _zipped_done(self, answer: _Answer, zipped: bytes) -> None:
        """`answer`'s gzip is done: it is the newest gzipped body unless a newer one finished first."""
        if self._zipped is None or answer.built >= self._zipped[0]:
            self._zipped = answer.built, zipped

    def _start(self) -> asyncio.Future[_Answer]:
        if self._building is None:
            self._building = asyncio.ensure_future(self._new())
        return self._building

    async def _build(self) -> _Answer:
        return await asyncio.shield(self._start())

    async def _new(self) -> _Answer:
        try:
            self._answer = _Answer(await self.render_async(), time.monotonic())
            self.builds += 1
            if self._eager:  # gzip is asked for here (Prometheus asks for it): compress it now
                self._answer.compress(self._zipped_done)
            return self._answer
        finally:
            self._building = None


class _Answer:
    """One built /metrics body and its gzip, made once in a worker thread when first asked for."""

    def __init__(self, plain: bytes, built: float) -> None:
        self.plain = plain
        self.built = built  # monotonic time
        self._gzip: asyncio.Future[bytes] | None = None

    def compress(self, done: Callable[[_Answer, bytes], None] | None = None) -> asyncio.Future[bytes]:
        """The gzip, started in a worker thread at the first call (whose `done` is told of it when it is). A
        failure is logged once; readers that wait for this gzip get the error, the next body is compressed anew."""
        if self._gzip is None:
            self._gzip = asyncio.ensure_future(asyncio.to_thread(gzip_body, self.plain))

            def finished(f: asyncio.Future[bytes]) -> None:
                if f.cancelled():
                    return
                if (exc := f.exception()) is not None:
                    log.error("compressing our /metrics failed: %s", exc)
                elif done is not None:
                    done(self, f.result())

            self._gzip.add_done_callback(finished)
        return self._gzip

    def zipped(self) -> bytes | None:
        """The gzip if it is done, else None."""
        f = self._gzip
        return f.result() if f is not None and f.done() and not f.cancelled() and f.exception() is None else None


def gzip_body(body: bytes) -> bytes:
    """`body` as one gzip member (RFC 1952) at `GZIP_LEVEL`."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return compressor.compress(body) + compressor.flush()


class DiagnosisBody:
    """/api/v1/diagnosis (compact JSON, as FastAPI's JSONResponse wrote it) from per-target pieces; `named` gives
    the report under the target's name for people."""

    def __init__(self, targets: Sequence[Target], named: Callable[[TargetReport], TargetReport]) -> None:
        self.targets = targets
        self.named = named
        self._pieces: dict[str, tuple[TargetReport, str]] = {}

    def _piece(self, t: Target) -> str:
        kept = self._pieces.get(t.settings.url)
        if kept is not None and kept[0] is t.last:
            return kept[1]
        report = t.last
        text = dumps(diagnosis.json_safe(diagnosis.target_json(self.named(report))))
        self._pieces[t.settings.url] = (report, text)
        return text

    def _whole(self, pieces: list[str]) -> bytes:
        head = dumps({"schema_version": diagnosis.SCHEMA_VERSION, "exporter_version": __version__})
        return (head[:-1] + ',"targets":[' + ",".join(pieces) + "]}").encode()

    def render(self) -> bytes:
        return self._whole([self._piece(t) for t in self.targets])

    async def render_async(self) -> bytes:
        started, pieces = time.perf_counter(), []
        for t in self.targets:
            pieces.append(self._piece(t))
            if time.perf_counter() - started > YIELD_AFTER:
                await asyncio.sleep(0)
                started = time.perf_counter()
        return self._whole(pieces)


def dumps(doc: Any) -> str:
    """JSON as our surfaces serve it: compact, UTF-8, and refusing NaN and Infinity (JSON has neither)."""
    return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class Cached:
    """A body rebuilt only when asked, at most once per `epoch` (a scrape interval) unless nothing changed, and by
    one build at a time: `prepare()` runs on the event loop and returns the build, which runs in a worker thread
    (it must only read what `prepare` copied)."""

    def __init__(self, prepare: Callable[[], Callable[[], bytes]]) -> None:
        self.prepare = prepare
        self._body: tuple[int, int, bytes] | None = None  # (generation, epoch, body)
        self._pending: asyncio.Future[bytes] | None = None
        self.builds = 0

    def fresh(self, generation: int, epoch: int) -> bytes | None:
        if self._body is not None and (self._body[0] == generation or self._body[1] == epoch):
            return self._body[2]
        return None

    def build(self, generation: int, epoch: int) -> bytes:
        """Build on the caller's thread (tests, one-shot uses)."""
        body = self.fresh(generation, epoch)
        if body is None:
            body = self.prepare()()
            self.builds += 1
            self._body = (generation, epoch, body)
        return body

    async def get(self, generation: int, epoch: int) -> bytes:
        body = self.fresh(generation, epoch)
        if body is not None:
            return body
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._build(generation, epoch))
        pending = self._pending
        return await asyncio.shield(pending)

    async def _build(self, generation: int, epoch: int) -> bytes:
        try:
            work = self.prepare()
            body = await asyncio.to_thread(work)
            self.builds += 1
            self._body = (generation, epoch, body)
            return body
        finally:
            self._pending = None
