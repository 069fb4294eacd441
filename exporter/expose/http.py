"""The sidecar's HTTP side, bounded and independent of its targets (issue 21): uvicorn's h11 server with

- a deadline for each request to arrive whole (`read_timeout`, from its first byte or from the connection's
  start): a slowloris client that sends its headers a byte at a time is dropped, never held until the file
  limit; idle keep-alive connections close after `idle_timeout` (uvicorn's own timer);
- a write deadline: a client that reads nothing of an answer for `write_timeout` is dropped with its buffer;
- a limit on open connections below the file limit; at the limit a new connection closes the oldest one that
  has no request in progress (half-open or idle), so a flood of idle sockets cannot lock the kubelet's probe out;
- lanes (`Front`): /healthz and /readyz are answered at once, whatever else is going on; /, /api/v1/history
  (expensive) and every other path (bodies) run a few at a time, with a bounded queue behind them and 503 with
  Retry-After beyond it;
- security headers on every answer, and no polling: uvicorn's main loop wakes ten times a second to check for
  an exit, which was most of an idle sidecar's CPU; here it sleeps until a signal comes. SIGHUP is logged and
  otherwise ignored: flags, the targets file and the API key file are read at start-up; SIGUSR1 and SIGUSR2
  (whose default ends a process silently) likewise;
- uvicorn's lines about a client's bad request damped (`Repeats`): any client can cause them at will.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from dataclasses import dataclass
from email.utils import formatdate
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..core import defaults
from .logdamp import Repeats

log = logging.getLogger("vllm_headroom")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CHEAP = frozenset({"/healthz", "/readyz"})  # answered at once: the probes must never queue
EXPENSIVE = frozenset({"/", "/api/v1/history"})  # megabytes at 100 targets: a few at a time


@dataclass(frozen=True)
class Limits:
    """Bounds of the HTTP side; every default is in `core.defaults`."""

    max_connections: int = defaults.WEB_MAX_CONNECTIONS
    read_timeout: float = defaults.WEB_READ_TIMEOUT  # s for a request to arrive whole
    idle_timeout: float = defaults.WEB_IDLE_TIMEOUT  # s a keep-alive connection may wait for its next request
    write_timeout: float = defaults.WEB_WRITE_TIMEOUT  # s a client may read nothing of an answer
    max_requests: int = defaults.WEB_MAX_REQUESTS  # concurrent requests for a body (/metrics, diagnosis, ...)
    max_expensive: int = defaults.WEB_MAX_EXPENSIVE  # concurrent requests for /, /api/v1/history (a lane of its own)
    queue: int = defaults.WEB_QUEUE  # requests waiting for a turn in each lane; more are answered 503


class Guard:
    """The open connections of one server, oldest first, and what was done to keep them bounded."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.open: dict[GuardedH11Protocol, None] = {}
        self.evicted = 0  # idle or half-open connections closed to make room for a new one
        self.refused = 0  # new connections closed at once: every open one had a request in progress
        self.timed_out = 0  # dropped for a request not arriving (read) or an answer not read (write) in time

    def victim(self, newcomer: GuardedH11Protocol) -> GuardedH11Protocol | None:
        """The oldest connection with no request in progress, taken off the open ones (its close completes on a
        later turn of the loop, after the rest of a burst of accepts)."""
        victim = next((c for c in self.open if c is not newcomer and not c.busy()), None)
        if victim is not None:
            del self.open[victim]
        return victim


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol under a `Guard` (set on the subclass `protocol` makes)."""

    guard: Guard

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None

    def busy(self) -> bool:
        """A request is in progress: the app is answering it (never evicted, never read-timed out)."""
        return self.cycle is not None and not self.cycle.response_complete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        guard = self.guard
        guard.open[self] = None
        if len(guard.open) > guard.limits.max_connections:
            victim = guard.victim(self)
            if victim is None:
                guard.refused += 1
                del guard.open[self]
                self.transport.abort()
                return
            guard.evicted += 1
            victim.transport.abort()  # at once, buffers dropped: it had no request in progress
        self._arm_read()

    def _arm_read(self) -> None:
        if self._read_timer is None:
            self._read_timer = self.loop.call_later(self.guard.limits.read_timeout, self._read_expired)

    def _read_expired(self) -> None:
        self._read_timer = None
        if not self.busy() and not self.transport.is_closing():
            self.guard.timed_out += 1
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        if not self.busy():
            self._arm_read()  # a request is arriving: it has read_timeout from its first byte to be whole
        super().data_received(data)
        if self.cycle is not before and self._read_timer is not None:  # it arrived: the app answers it
            self._read_timer.cancel()
            self._read_timer = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._read_timer_off()

    def _read_timer_off(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.guard.limits.write_timeout, self._write_expired)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_expired(self) -> None:
        self._write_timer = None
        self.guard.timed_out += 1
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.open.pop(self, None)
        self._read_timer_off()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        super().connection_lost(exc)


def protocol(guard: Guard) -> type[GuardedH11Protocol]:
    """A protocol class bound to `guard` (uvicorn builds one protocol per connection from the class)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"guard": guard})


class Lane:
    """At most `limit` requests at a time, `queue` more waiting; beyond that `enter` says no at once."""

    def __init__(self, limit: int, queue: int) -> None:
        self.limit = max(1, limit)
        self.queue = queue
        self._sem = asyncio.Semaphore(self.limit)
        self.waiting = 0
        self.rejected = 0

    async def enter(self) -> bool:
        if self._sem.locked() and self.waiting >= self.queue:
            self.rejected += 1
            return False
        self.waiting += 1
        try:
            await self._sem.acquire()
        finally:
            self.waiting -= 1
        return True

    def leave(self) -> None:
        self._sem.release()


CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; "
       "base-uri 'none'; form-action 'none'")
SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"content-security-policy", CSP.encode()),
]
BUSY_BODY = b"too many requests at once: retry in a second\n"


Direct = Callable[[Scope], Awaitable[tuple[int, list[tuple[bytes, bytes]], bytes]]]


class Front:
    """ASGI middleware before the app: the lanes and the headers of every answer (security headers, Date).

    `direct`: paths answered here, without the app's routing and middleware, by a function of the request's scope
    giving (status, headers, body): /metrics, read 200 times a second by a crowd of scrapers, spent more in
    Starlette's layers than in its (cached) body. The app keeps its route for the same path (the OpenAPI schema)."""

    def __init__(self, app: ASGIApp, limits: Limits | None = None, direct: dict[str, Direct] | None = None) -> None:
        self.app = app
        self.direct = direct or {}
        limits = limits or Limits()
        self.bodies = Lane(limits.max_requests, limits.queue)
        self.expensive = Lane(limits.max_expensive, limits.queue)
        self._date: tuple[int, bytes] = (0, b"")

    def _headers(self) -> list[tuple[bytes, bytes]]:
        now = int(time.time())
        if self._date[0] != now:
            self._date = (now, formatdate(now, usegmt=True).encode())
        return [*SECURITY_HEADERS, (b"date", self._date[1])]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *self._headers()]
            await send(message)

        path = scope["path"]
        if path in CHEAP:
            await self.app(scope, receive, with_headers)
            return
        lane = self.expensive if path in EXPENSIVE else self.bodies  # apart: a crowd at / never starves /metrics
        if not await lane.enter():
            await with_headers({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"text/plain; charset=utf-8"), (b"retry-after", b"1"),
                (b"content-length", str(len(BUSY_BODY)).encode())]})
            await send({"type": "http.response.body", "body": BUSY_BODY})
            return
        try:
            answer = self.direct.get(path) if scope.get("method") in ("GET", "HEAD") else None
            if answer is None:
                await self.app(scope, receive, with_headers)
                return
            status, headers, body = await answer(scope)
            headers = [*headers, (b"content-length", str(len(body)).encode()), *self._headers()]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})
        finally:
            lane.leave()


# asyncio accepts up to `backlog` connections per wake-up before any of them is seen by the protocol (and so
# before the connection limit can close one): that burst must fit in the files kept free, so it stays small,
# while the kernel's queue of connections not yet accepted stays long (the socket is listened on again).
ACCEPT_BURST = 64
LISTEN_QUEUE = 2048


IGNORED_SIGNALS = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)  # logged and ignored (docs/running.md)


class Server(uvicorn.Server):
    """uvicorn's server without its 10-per-second poll (it sleeps until a signal comes) and with SIGHUP, SIGUSR1
    and SIGUSR2 logged and ignored."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        for server in getattr(self, "servers", []):
            for sock in server.sockets or ():
                with contextlib.suppress(OSError), socket.fromfd(sock.fileno(), sock.family, sock.type) as dup:
                    dup.listen(LISTEN_QUEUE)  # the same socket: only asyncio's own burst stays ACCEPT_BURST

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        await self.on_tick(0)
        while not self.should_exit:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 60.0)
            self._wake.clear()

    def stop(self) -> None:
        """Shut down from any thread (tests, an embedding program)."""
        self.should_exit = True
        self._poke()

    def _poke(self) -> None:
        if self._loop is not None and self._wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                self._loop.call_soon_threadsafe(self._wake.set)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self._poke()

    def _hangup(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGHUP:
            said = ("received SIGHUP: nothing is reloaded (flags, --targets-file and --target-api-key-file are read "
                    "at start-up); restart vllm-headroom to change them")
        else:  # SIGUSR1/SIGUSR2 end a process silently by default: a stray `kill -USR1` must not stop the sidecar
            said = f"received {signal.Signals(sig).name}: ignored (SIGTERM or SIGINT stops vllm-headroom)"
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(log.warning, "%s", said)
                return
        log.warning("%s", said)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        with super().capture_signals():
            previous: dict[int, Any] = {}
            with contextlib.suppress(ValueError):  # not the main thread: signals are not ours to take
                for sig in IGNORED_SIGNALS:
                    previous[sig] = signal.signal(sig, self._hangup)
            try:
                yield
            finally:
                for number, handler in previous.items():
                    signal.signal(number, handler)


def config(app: ASGIApp, limits: Limits, guard: Guard, log_level: str = "warning") -> uvicorn.Config:
    """uvicorn's config for `app` under `limits`: our protocol, no access log, no Date of its own (Front adds
    one per answer: uvicorn's is refreshed by the poll this server does not do)."""
    damp_client_errors()
    return uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on", http=protocol(guard),
                          timeout_keep_alive=int(max(1, limits.idle_timeout)), date_header=False,
                          server_header=False, backlog=ACCEPT_BURST, log_config=None)


def damp_client_errors() -> None:
    """uvicorn's lines about a client's bad request ("Invalid HTTP request received.") through one `Repeats`
    filter: any client can send them at will, so each distinct line is logged once per `Repeats.period` with
    the count of the ones left out (uvicorn.error; our own log's format, timestamps included, via log_config=None)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, Repeats) for f in logger.filters):
        logger.addFilter(Repeats())
