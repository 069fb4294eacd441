"""The sidecar process: a scrape loop over the targets and the HTTP surface that exposes its results."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Response
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest

from ..pipeline.scrape import describe
from ..pipeline.target import Target, TargetReport
from . import diagnosis, page
from .collector import HeadroomCollector
from .history import History

log = logging.getLogger("vllm_headroom")


class Sidecar:
    """Scrapes every target each interval; the latest report of each lives on its Target."""

    def __init__(self, targets: Sequence[Target], interval: float, labels: dict[str, str] | None = None) -> None:
        self.targets = list(targets)
        self.interval = interval
        self.labels = labels or {}  # target URL -> a name for people (the status page)
        self.history = History()
        self.ticks = 0
        self._page: tuple[int, str] | None = None
        self.last_tick: float | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(HeadroomCollector(self.targets))
        ProcessCollector(registry=self.registry)
        self._logged: dict[str, str | None] = {}
        self._noted: set[tuple[str, str]] = set()  # (target, note) already logged: each note once
        self._loop_error: str | None = None
        self.looping = False
        self._rendered: bytes | None = None
        self._clients: dict[str, httpx.AsyncClient] = {}

    def exposition(self) -> bytes:
        """Our /metrics body as rendered after the last tick (before the first one: rendered now)."""
        if self._rendered is None:
            self._rendered = generate_latest(self.registry)
        return self._rendered

    async def tick(self, client: httpx.AsyncClient, now: float | None = None) -> None:
        """Scrape every target once; `now` lets a replay run on its recording's clock."""
        now = time.monotonic() if now is None else now
        reports = await asyncio.gather(*(t.scrape(self._clients.get(t.settings.url, client), now)
                                         for t in self.targets))
        self.history.record(now, reports)
        self.ticks += 1
        # Render once per tick, off the event loop: reads never wait on a render of thousands of series.
        self._rendered = await asyncio.to_thread(generate_latest, self.registry)
        for r in reports:
            # Log state changes only: a sidecar next to a dead pod should not flood its log.
            if self._logged.get(r.url, "") != r.error:
                if r.error:
                    log.warning("%s", r.error)
                elif r.url in self._logged:
                    log.info("%s: scraping again", r.url)
                self._logged[r.url] = r.error
            for note in r.notes:
                if (r.url, note) not in self._noted:
                    self._noted.add((r.url, note))
                    log.warning("%s: %s", r.url, note)
        self.last_tick = time.monotonic()

    def named(self, report: TargetReport) -> TargetReport:
        """`report` under the target's name for people (the demo's recording, not its random replay port)."""
        name = self.labels.get(report.url)
        return report if name is None else replace(report, url=name)

    def reports(self) -> list[TargetReport]:
        """Every target's latest report, each under its name for people: one name in every API and page."""
        return [self.named(t.last) for t in self.targets]

    async def run(self) -> None:
        self.looping = True
        # One small client per target: with one shared pool httpcore re-scans every connection on each
        # request event, which made a tick of 1,000 targets cost ~80 s of CPU instead of ~1.5 s (bench/).
        ssl = httpx.create_ssl_context()
        async with contextlib.AsyncExitStack() as stack:
            for t in self.targets:
                self._clients[t.settings.url] = await stack.enter_async_context(
                    httpx.AsyncClient(limits=httpx.Limits(max_connections=2), verify=ssl))
            client = next(iter(self._clients.values()))
            while True:
                started = time.monotonic()
                try:
                    await self.tick(client)
                    self._loop_error = None
                except Exception as exc:  # a bug in one tick must not end the loop of a sidecar
                    said = describe(exc)
                    if said != self._loop_error:  # one line per new error, not one traceback per tick
                        log.error("scrape loop iteration failed: %s", said)
                        log.debug("scrape loop iteration failed", exc_info=True)
                        self._loop_error = said
                await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - started)))

    def status_page(self) -> str:
        """The status page's HTML, built at most once per tick."""
        if self._page is None or self._page[0] != self.ticks:
            self._page = (self.ticks, page.render([t.last for t in self.targets], self.history, self.interval,
                                                  self.labels))
        return self._page[1]

    def history_document(self) -> dict[str, Any]:
        """The `/api/v1/history` document (see `History.document`)."""
        doc = self.history.document([t.settings.url for t in self.targets], self.interval)
        for entry in doc["targets"]:  # the same name as /api/v1/diagnosis and the page
            entry["target"] = self.labels.get(entry["target"], entry["target"])
        return doc

    def healthy(self) -> bool:
        if self.last_tick is None or not self.looping:
            return True  # still in the first scrape
        timeout = max(t.settings.timeout for t in self.targets) if self.targets else 0.0
        return time.monotonic() - self.last_tick <= 3 * self.interval + timeout + 5

    def readiness(self) -> dict[str, Any]:
        not_ready = [
            {"target": r.url, "reason": r.error_reason, "error": r.error}
            for r in self.reports()
            if not r.up
        ]
        return {"ready": not not_ready, "not_ready": not_ready}


def make_app(sidecar: Sidecar, start_loop: bool = True) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(sidecar.run()) if start_loop else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    app = FastAPI(title="vllm-headroom", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(sidecar.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/v1/diagnosis")
    def diagnosis_json() -> JSONResponse:
        return JSONResponse(diagnosis.document(sidecar.reports()))

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        ok = sidecar.healthy()
        return JSONResponse({"status": "ok" if ok else "scrape loop stalled"}, status_code=200 if ok else 503)

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        body = sidecar.readiness()
        return JSONResponse(body, status_code=200 if body["ready"] else 503)

    @app.get("/api/v1/history")
    def history_json() -> JSONResponse:
        return JSONResponse(sidecar.history_document())

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        return HTMLResponse(sidecar.status_page())

    return app


def parse_listen_address(text: str) -> tuple[str, int]:
    """'0.0.0.0:9478', '[::]:9478' or ':9478' → (host, port); raises ValueError with one sentence."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listen address {text!r} is not host:port, e.g. 0.0.0.0:9478, [::1]:9478 or :9478")
    if int(port) == 0:
        raise ValueError(f"listen address {text!r}: port 0 (any free port) is not allowed, since Prometheus and "
                         "the health check need a known port: pick one such as :9478")
    if int(port) > 65535:
        raise ValueError(f"listen address {text!r}: port {int(port)} is not in 1-65535")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def host_port(host: str, port: int) -> str:
    """host:port as written in a URL: an IPv6 address in brackets ([::1]:9478)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def page_url(host: str, port: int) -> str:
    """The status page's URL for people: a wildcard address becomes the loopback of its family."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://{host_port(shown, port)}/"


class PortInUse(OSError):
    """The listen address cannot be had: one sentence for the user (exit code 1)."""


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port, bound before anything says "listening".

    Raises PortInUse with one sentence when the port is taken or the address cannot be used.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(f"port {port} on {host} is already in use (another vllm-headroom?): stop it or pick "
                            "another with --web.listen-address HOST:PORT") from None
        raise PortInUse(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    return sock


def serve(sidecar: Sidecar, sock: socket.socket) -> None:
    """Serve the sidecar's HTTP surface and run its scrape loop on a socket from `bind`, until stopped."""
    config = uvicorn.Config(make_app(sidecar), log_level="warning", access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
