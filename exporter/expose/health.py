"""/healthz and /readyz on a listener of their own (`--web.health-address`), served by a thread of their own.

Why (issue 21, measured in bench/RESULTS.md §10): on the main listener a probe waits behind every connection the
kernel queued before it. A crowd that reconnects after each answer keeps ~1,000 connections in the listening
socket's accept queue, and the probe, accepted in FIFO order, waited ~1,000 / (connections accepted per second),
~0.6 s, however little each answer cost. No priority inside one accept queue exists, so the probes get a queue of
their own: another socket, accepted by another event loop in another thread, so neither the crowd's queue nor a
main loop busy with it delays them. The kubelet's probes (Helm chart, kustomize) point at this port; the main
port keeps /healthz and /readyz for people and for older manifests.

The answers are the main ones (`server.endpoints`): /healthz reads when each target's schedule last finished a
scrape and /readyz each target's latest report, both published by the main loop by plain assignment, so reading
them here needs no lock. A main loop that stops altogether stops those scrapes, and /healthz here says 503 after
the same bound as on the main port, as a liveness probe should. The listener has the main one's bounds (read
deadline, a connection limit that closes the oldest idle connection first), so a slowloris or a flood on this
port cannot lock the kubelet out either.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .http import Front, Guard, Limits, Server, config

log = logging.getLogger("vllm_headroom")
PATHS = ("/healthz", "/readyz")
MAX_CONNECTIONS = 64  # the kubelet opens one per probe; more are someone else's and the oldest idle ones close


Endpoint = Callable[[Request], Awaitable[Response]]


class HealthListener:
    """The sidecar's /healthz and /readyz (`endpoints`: the main port's, `server.endpoints`; other paths are
    left out) on `sock` (from `listen.bind`), served by a uvicorn server on an event loop in a daemon thread of
    its own; `start` returns once the thread runs, `stop` ends it from any thread."""

    def __init__(self, endpoints: Sequence[tuple[str, Endpoint]], sock: socket.socket,
                 limits: Limits | None = None) -> None:
        limits = replace(limits or Limits(), max_connections=MAX_CONNECTIONS)
        routes = [Route(path, endpoint, methods=["GET"]) for path, endpoint in endpoints if path in PATHS]
        app = Starlette(routes=routes)
        app.add_middleware(Front, limits=limits)
        self.guard = Guard(limits)
        self.server = Server(config(app, limits, self.guard))
        self.sock = sock
        self.thread = threading.Thread(target=self._run, name="health listener", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve(sockets=[self.sock]))
        except Exception:  # never silent: the probes on this port would fail with no word why
            log.exception("the health listener on %s stopped", self.sock.getsockname())

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.server.stop()
        self.thread.join(timeout)
