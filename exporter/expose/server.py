"""The sidecar process: every target scraped on its own schedule, and the HTTP surface that exposes the results.

One target never touches another (issue 21): each has its own loop, its own client and one deadline per scrape
(`Target.scrape`), so a slow or hostile target is `up 0` after --scrape.timeout while the others keep their
interval; the targets start spread over the interval, so their parses never pile up. The served surfaces never
wait for a scrape (issue 25): /metrics and /api/v1/diagnosis are joined from per-target pieces rendered when
asked (`bodies`), the status page and /api/v1/history are built in a worker thread at most once per interval;
the HTTP side itself is bounded (`http`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..pipeline.scrape import client as target_client
from ..pipeline.scrape import describe
from ..pipeline.target import Target, TargetReport
from . import page
from .bodies import Cached, DiagnosisBody, MetricsBody, accepts_gzip, dumps
from .collector import HeadroomCollector
from .history import History
from .http import Front, Guard, Limits, Scope, Server, config
from .listen import PortInUse as PortInUse
from .listen import bind as bind
from .listen import connection_limit, raise_file_limit
from .listen import host_port as host_port
from .listen import page_url as page_url
from .listen import parse_listen_address as parse_listen_address
from .logdamp import Damper

log = logging.getLogger("vllm_headroom")
METRICS_MAX_AGE = 1.0  # s an answer of /metrics may be served again while the schedules run (`metrics_body`)
MAX_NOTES = 256  # notes logged once per target; a target inventing new ones is not remembered beyond this


class Sidecar:
    """Scrapes every target on its own schedule; the latest report of each lives on its Target."""

    def __init__(self, targets: Sequence[Target], interval: float, labels: dict[str, str] | None = None) -> None:
        self.targets = list(targets)
        self.interval = interval
        self.labels = labels or {}  # target URL -> a name for people (the status page)
        self.history = History()
        self.ticks = 0  # rounds of `tick` (replays and tests drive the sidecar that way)
        self.generation = 0  # scrapes finished since start, any target
        self.last_tick: float | None = None  # monotonic time the last scrape of any target finished
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(HeadroomCollector(self.targets))
        ProcessCollector(registry=self.registry)
        self._process = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self._process)
        self.metrics = MetricsBody(self.targets, self._process)
        self.diagnosis = DiagnosisBody(self.targets, self.named)
        self.page = Cached(self._prepare_page)
        self.history_body = Cached(self._prepare_history)
        self._dampers = {t.settings.url: Damper(t.shown) for t in self.targets}
        self._noted: dict[str, set[str]] = {}  # per target, notes already logged: each note once
        self._models_said: dict[str, str | None] = {}
        self._loop_errors: dict[str, str] = {}
        self._progress: dict[str, float] = {}  # per target: monotonic time its loop last finished a scrape
        self.looping = False
        self._started: float | None = None  # event loop time the schedules started
        self._started_at: float | None = None  # the same on time.monotonic()
        self.missed = 0  # scrape slots skipped because the previous scrape of the target was still running
        self._clients: dict[str, Any] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.limits = Limits()  # of the HTTP side (`serve`)
        self.openapi = False  # serve the OpenAPI schema (`serve`)
        self.servers: list[Server] = []  # what `serve` runs: the main server, then the health listener's (`stop`)

    # -- one scrape ---------------------------------------------------------------------------------
    async def scrape(self, target: Target, client: Any, now: float | None = None) -> TargetReport:
        """One scrape of `target` and what follows it: history, logs, health."""
        report = await target.scrape(client, now)
        self.history.record(report.observed_at, [report])
        self.generation += 1
        self.last_tick = time.monotonic()
        self._progress[target.settings.url] = self.last_tick
        self._log(target, report)
        return report

    def _log(self, target: Target, r: TargetReport) -> None:
        damper = self._dampers.get(target.settings.url) or self._dampers.setdefault(
            target.settings.url, Damper(target.shown))
        for line in damper.observe(r.error_reason if not r.up else None, r.error):
            log.log(line.level, "%s", line.text)
        said = self._models_said.get(target.settings.url)
        if r.up and target.models_error != said:  # while /metrics fails, /v1/models failing says nothing more
            if target.models_error is not None:
                log.warning("%s", target.models_error)
            elif said is not None:
                log.info("%s: /v1/models answers again", target.shown)
            self._models_said[target.settings.url] = target.models_error
        noted = self._noted.setdefault(target.settings.url, set())
        for note in r.notes:
            if note not in noted and len(noted) < MAX_NOTES:
                noted.add(note)
                log.warning("%s: %s", target.shown, note)

    async def tick(self, client: Any, now: float | None = None) -> None:
        """Scrape every target once, side by side (each under its own deadline); `now` lets a replay run on its
        recording's clock. Replays and tests drive the sidecar this way; `run` schedules each target itself."""
        await asyncio.gather(*(self.scrape(t, self._clients.get(t.settings.url, client), now) for t in self.targets))
        self.ticks += 1

    # -- the schedules --------------------------------------------------------------------------------
    async def run(self) -> None:
        """Scrape each target every interval on its own schedule until cancelled; target i of n starts i/n of an
        interval in. A scrape that overran its slot (it cannot by more than its parse: the deadline is below the
        interval) skips to the next slot rather than bunch up."""
        self.looping = True
        loop = asyncio.get_running_loop()
        self._started, self._started_at = loop.time(), time.monotonic()
        async with contextlib.AsyncExitStack() as stack:
            for t in self.targets:
                self._clients[t.settings.url] = await stack.enter_async_context(target_client(
                    t.settings.trust_env, t.settings.tls, plain=t.settings.url.startswith("http://")))
            n = max(1, len(self.targets))
            self._tasks = [asyncio.create_task(self._schedule(t, i * self.interval / n), name=f"scrape {t.shown}")
                           for i, t in enumerate(self.targets)]
            try:
                await asyncio.gather(*self._tasks)
            finally:
                for task in self._tasks:
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _schedule(self, target: Target, offset: float) -> None:
        loop = asyncio.get_running_loop()
        start = (self._started or loop.time()) + offset
        slot = 0
        while True:
            delay = start + slot * self.interval - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                await self.scrape(target, self._clients[target.settings.url])
                self._loop_errors.pop(target.settings.url, None)
            except Exception as exc:  # a bug in one scrape must not end the target's schedule
                said = describe(exc)
                if said != self._loop_errors.get(target.settings.url):  # one line per new error, not per scrape
                    log.error("%s: scrape failed inside the sidecar: %s", target.shown, said)
                    log.debug("scrape of %s failed", target.shown, exc_info=True)
                    self._loop_errors[target.settings.url] = said
            nxt = max(slot + 1, math.floor((loop.time() - start) / self.interval) + 1)
            self.missed += nxt - slot - 1
            slot = nxt

    def epoch(self) -> int:
        """Which scrape interval it is since the schedules started; a replay's `tick` count when not looping."""
        if not self.looping or self._started_at is None:
            return self.ticks
        return int((time.monotonic() - self._started_at) // self.interval)

    # -- what is served ---------------------------------------------------------------------------------
    def named(self, report: TargetReport) -> TargetReport:
        """`report` under the target's name for people (the demo's recording, not its random replay port)."""
        name = self.labels.get(report.url)
        return report if name is None else replace(report, url=name)

    def reports(self) -> list[TargetReport]:
        """Every target's latest report, each under its name for people: one name in every API and page."""
        return [self.named(t.last) for t in self.targets]

    def exposition(self) -> bytes:
        """Our /metrics body now (each target's piece re-rendered only if it was scraped since)."""
        return self.metrics.render()

    async def metrics_body(self, gzip: bool = False) -> bytes:
        """Our /metrics body for one request: while the schedules run, an answer at most a fifth of an interval
        (and at most 1 s) old is served again, and one up to twice that while the next is built (`MetricsBody.read`);
        a replay or test driving `tick` gets a new one each time."""
        return await self.metrics.read(gzip, min(METRICS_MAX_AGE, self.interval / 5) if self.looping else 0.0)

    def _prepare_page(self) -> Any:
        reports, history = [t.last for t in self.targets], self.history.copy()
        interval, labels = self.interval, dict(self.labels)
        return lambda: page.render(reports, history, interval, labels).encode()

    def _prepare_history(self) -> Any:
        history, urls = self.history.copy(), [t.settings.url for t in self.targets]
        labels, interval = dict(self.labels), self.interval

        def build() -> bytes:
            doc = history.document(urls, interval)
            for entry in doc["targets"]:  # the same name as /api/v1/diagnosis and the page
                entry["target"] = labels.get(entry["target"], entry["target"])
            return dumps(doc).encode()

        return build

    def status_page(self) -> str:
        """The status page's HTML, built at most once per interval (or tick) and only when asked."""
        return self.page.build(self.generation, self.epoch()).decode()

    def history_document(self) -> dict[str, Any]:
        """The `/api/v1/history` document (see `History.document`)."""
        doc = self.history.document([t.settings.url for t in self.targets], self.interval)
        for entry in doc["targets"]:
            entry["target"] = self.labels.get(entry["target"], entry["target"])
        return doc

    def healthy(self) -> bool:
        """The scrape schedules are alive: every target finished a scrape lately (each scrape is bounded by its
        deadline, so only a fault inside the sidecar stops one; a slow target never does)."""
        if not self.looping or not self.targets:
            return True
        bound = 3 * self.interval + max(t.settings.timeout for t in self.targets) + 5
        now = time.monotonic()
        started = self._started_at if self._started_at is not None else now
        return all(now - self._progress.get(t.settings.url, started) <= bound for t in self.targets)

    def readiness(self) -> dict[str, Any]:
        not_ready = [
            {"target": r.url, "reason": r.error_reason, "error": r.error}
            for r in self.reports()
            if not r.up
        ]
        return {"ready": not not_ready, "not_ready": not_ready}


JSON = "application/json"
HEALTHY = dumps({"status": "ok"}).encode()
STALLED = dumps({"status": "scrape loop stalled"}).encode()
Endpoint = Callable[[Request], Awaitable[Response]]


def endpoints(sidecar: Sidecar) -> list[tuple[str, Endpoint]]:
    """Our HTTP API, path by path. Every body is bytes made ahead (or once per change) by `bodies`: no request
    builds a model or a JSON document of its own."""

    async def metrics(request: Request) -> Response:
        status, headers, body = await metrics_answer(sidecar, request.scope)
        return Response(body, status_code=status, headers={k.decode(): v.decode() for k, v in headers})

    async def diagnosis_json(request: Request) -> Response:
        return Response(await sidecar.diagnosis.render_async(), media_type=JSON)

    async def healthz(request: Request) -> Response:
        ok = sidecar.healthy()
        return Response(HEALTHY if ok else STALLED, status_code=200 if ok else 503, media_type=JSON)

    async def readyz(request: Request) -> Response:
        body = sidecar.readiness()
        return Response(dumps(body).encode(), status_code=200 if body["ready"] else 503, media_type=JSON)

    async def history_json(request: Request) -> Response:
        return Response(await sidecar.history_body.get(sidecar.generation, sidecar.epoch()), media_type=JSON)

    async def index(request: Request) -> Response:
        return Response(await sidecar.page.get(sidecar.generation, sidecar.epoch()),
                        media_type="text/html; charset=utf-8")

    return [("/metrics", metrics), ("/api/v1/diagnosis", diagnosis_json), ("/healthz", healthz),
            ("/readyz", readyz), ("/api/v1/history", history_json), ("/", index)]


METRICS_HEADERS = [(b"content-type", CONTENT_TYPE_LATEST.encode()), (b"vary", b"Accept-Encoding")]
GZIPPED = [*METRICS_HEADERS, (b"content-encoding", b"gzip")]


async def metrics_answer(sidecar: Sidecar, scope: Scope) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Our /metrics for one request, gzipped when its Accept-Encoding allows (`http.Front` answers it directly;
    the route gives the same answer where the schema is served)."""
    coding = b",".join(v for k, v in scope.get("headers", ()) if k == b"accept-encoding")  # one list (RFC 9110 5.3)
    gzip = accepts_gzip(coding.decode("latin-1"))
    return 200, GZIPPED if gzip else METRICS_HEADERS, await sidecar.metrics_body(gzip)


def make_app(sidecar: Sidecar, start_loop: bool = True, openapi: bool = False,
             limits: Limits | None = None) -> Starlette:
    """The sidecar's HTTP surface: Starlette routing, the core FastAPI is built on. With `openapi` the same
    endpoints are served by a FastAPI app that also serves their schema at /openapi.json; without it FastAPI and
    pydantic are never imported (~15 MB of a one-target sidecar's memory, issue 25)."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(sidecar.run()) if start_loop else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    app: Starlette
    if openapi:
        from fastapi import FastAPI

        api = FastAPI(title="vllm-headroom", lifespan=lifespan, docs_url=None, redoc_url=None,
                      openapi_url="/openapi.json")
        for path, endpoint in endpoints(sidecar):
            api.add_api_route(path, endpoint, methods=["GET"])
        app = api
    else:
        app = Starlette(routes=[Route(path, endpoint, methods=["GET"]) for path, endpoint in endpoints(sidecar)],
                        lifespan=lifespan)
    app.add_middleware(Front, limits=limits or Limits(),
                       direct={"/metrics": lambda scope: metrics_answer(sidecar, scope)})
    return app


GC_YOUNG = 7000  # allocations between two young collections (CPython's default 700)


def quiet_gc() -> None:
    """The cyclic collector for a long-running server: what start-up made (modules, classes, the web stack) is
    frozen out of every later collection, and the young generation is
    collected a tenth as often. At 100 targets under 200 /metrics reads per second a full collection stopped the
    loop for 38 ms (every request then waiting) and young ones ran 17 times a second, up to 6 ms each; almost
    everything a scrape makes is freed by reference counting, never by the collector."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])


def serve(sidecar: Sidecar, sock: socket.socket, health: socket.socket | None = None) -> None:
    """Serve the sidecar's HTTP surface (under `sidecar.limits`) and run its scrape schedules on a socket from
    `bind`, until stopped; with `health` (another socket from `bind`) /healthz and /readyz also answer there, from
    a thread of their own (`health.HealthListener`)."""
    limits, openapi = sidecar.limits, sidecar.openapi
    files = raise_file_limit()
    allowed = connection_limit(limits.max_connections, len(sidecar.targets), files)
    if allowed < limits.max_connections:
        log.warning("at most %d client connections (--web.max-connections %d): the file limit is %d and the targets "
                    "need their own", allowed, limits.max_connections, files)
        limits = replace(limits, max_connections=allowed)
    guard = Guard(limits)
    server = Server(config(make_app(sidecar, openapi=openapi, limits=limits), limits, guard))
    quiet_gc()
    sidecar.servers = [server]
    listener = None
    if health is not None:
        from .health import HealthListener

        listener = HealthListener(endpoints(sidecar), health, limits)
        sidecar.servers.append(listener.server)
        listener.start()
    try:
        server.run(sockets=[sock])
    finally:
        if listener is not None:
            listener.stop()
