"""Issue 21, kind 3: the sidecar's HTTP side is bounded and independent of its targets.

Real uvicorn servers (the sidecar's own `http.Server` with its protocol and lanes) on loopback, real sockets.
Nothing here is timed: each test proves a structural property (the probe is answered while every expensive
request is blocked, a half-open connection is closed, a flood cannot take the files the scrapes need); the
raw latency figures under 1,000 clients and slowloris are in bench/ (b8_http.py, bench/RESULTS.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from exporter.expose import page
from exporter.expose.http import Guard, Limits, Server, config
from exporter.expose.server import Sidecar, make_app
from exporter.pipeline.target import Settings, Target

HANG = 120.0  # s: a guard against waiting forever (what the old server did), never a latency threshold
REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def serving(sidecar: Sidecar, limits: Limits) -> Iterator[tuple[int, Guard]]:
    """The sidecar's real HTTP server in a thread of its own (its own event loop), on a free loopback port."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    guard = Guard(limits)
    server = Server(config(make_app(sidecar, start_loop=False, limits=limits), limits, guard))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + HANG
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield sock.getsockname()[1], guard
    finally:
        server.stop()
        thread.join(HANG)
        sock.close()


async def _get(port: int, path: str) -> int:
    """One GET on a new connection; the status code, or 0 when the server closed the connection instead."""
    async with asyncio.timeout(HANG):  # a guard: the old server left such a request unanswered forever
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: sidecar\r\nConnection: close\r\n\r\n".encode())
        async with asyncio.timeout(HANG):
            await writer.drain()
            line = await reader.readline()
            await reader.read()  # the whole answer
        return int(line.split()[1]) if line else 0
    except ConnectionError:
        return 0
    finally:
        writer.close()


def _files() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft


def test_healthz_is_answered_while_a_thousand_clients_wait_on_a_blocked_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 clients ask for the page, the history and the diagnosis while building the page is blocked: /healthz
    and /metrics are answered all the same (the old server ran the page and /healthz in one thread pool, so a
    crowd at / left the probe waiting), the page is built once for all of them, the crowd beyond the lanes'
    queues gets 503 with Retry-After, and nobody is left hanging once the build ends."""
    clients = min(1000, (_files() - 300) // 2)
    if clients < 300:
        pytest.skip(f"the file limit allows only {clients} clients")
    sidecar = Sidecar([Target(Settings("http://127.0.0.1:9", discover_cmdline=False))], 5.0)
    entered, release = threading.Event(), threading.Event()
    real = page.render

    def blocked(*args: Any, **kwargs: Any) -> str:
        entered.set()
        release.wait(HANG)
        return real(*args, **kwargs)

    monkeypatch.setattr(page, "render", blocked)
    limits = Limits(max_connections=clients + 100)

    async def crowd(port: int) -> tuple[list[int], int, int]:
        paths = ["/", "/api/v1/history", "/api/v1/diagnosis", "/"]
        waiting = [asyncio.create_task(_get(port, paths[i % len(paths)])) for i in range(clients)]
        async with asyncio.timeout(HANG):
            while not entered.is_set():
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # let the rest of the crowd arrive
            health = await _get(port, "/healthz")  # while the page build is blocked
            metrics = await _get(port, "/metrics")
        release.set()
        async with asyncio.timeout(HANG):
            statuses = await asyncio.gather(*waiting)
        return statuses, health, metrics

    with serving(sidecar, limits) as (port, _guard):
        statuses, health, metrics = asyncio.run(crowd(port))
    assert (health, metrics) == (200, 200)
    assert set(statuses) <= {200, 503}, sorted(set(statuses))
    assert statuses.count(200) >= 2  # the blocked build answered every request that waited for it
    assert statuses.count(503) >= 1  # the crowd beyond the queue was told to come back
    assert sidecar.page.builds == 1  # one build for every request that waited for it


def test_a_half_open_request_is_closed_after_the_read_timeout() -> None:
    sidecar = Sidecar([Target(Settings("http://127.0.0.1:9", discover_cmdline=False))], 5.0)
    with serving(sidecar, Limits(read_timeout=0.5)) as (port, guard):
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(HANG)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):
            time.sleep(0.2)
            with contextlib.suppress(OSError):
                s.sendall(b"X")  # a byte now and then: the deadline is for the whole request, not per read
        assert s.recv(1024) == b""  # the server closed it
        s.close()
        assert guard.timed_out >= 1


def test_a_client_that_reads_nothing_is_dropped_after_the_write_timeout() -> None:
    """A client asks for a history of megabytes and reads none of it: once the kernel's buffers are full the
    answer waits on it, and after the write timeout the connection is dropped with its buffer."""
    from dataclasses import replace

    from tests import fixtures

    targets = [Target(Settings(f"http://vllm-{i}.test:8000", discover_cmdline=False)) for i in range(60)]
    for t in targets:
        t.last = replace(t.observe(1.0, fixtures.snapshot("false-full")), url=t.settings.url)
    sidecar = Sidecar(targets, 0.5)
    for k in range(1800):  # 15 minutes at 0.5 s: ~10 MB of JSON
        sidecar.history.record(k * 0.5, [t.last for t in targets])
    with serving(sidecar, Limits(write_timeout=0.5)) as (port, guard):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /api/v1/history HTTP/1.1\r\nHost: x\r\n\r\n")
        deadline = time.monotonic() + HANG
        while guard.timed_out < 1:
            assert time.monotonic() < deadline, "the stalled answer was never dropped"
            time.sleep(0.05)
        s.close()
        assert not any(c.busy() for c in guard.open)


def test_security_headers_and_no_openapi_unless_asked() -> None:
    sidecar = Sidecar([Target(Settings("http://127.0.0.1:9", discover_cmdline=False))], 5.0)
    client = TestClient(make_app(sidecar, start_loop=False))
    for path in ("/", "/metrics", "/healthz", "/api/v1/diagnosis"):
        r = client.get(path)
        assert r.headers["x-content-type-options"] == "nosniff", path
        assert r.headers["x-frame-options"] == "DENY"
        assert "default-src 'none'" in r.headers["content-security-policy"]
        assert r.headers["date"]
    assert client.get("/openapi.json").status_code == 404
    assert client.get("/docs").status_code == 404
    assert TestClient(make_app(sidecar, start_loop=False, openapi=True)).get("/openapi.json").status_code == 200




def test_accepted_connections_have_nagle_off() -> None:
    """asyncio sets TCP_NODELAY only on sockets whose proto says TCP; `bind`'s must, or every answer written
    after its headers waits for the client's delayed ACK (40 ms on Linux)."""
    from exporter.expose.listen import bind

    sock = bind("127.0.0.1", 0)
    seen: list[int] = []

    async def main() -> None:
        def made(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(made, sock=sock)
        async with server:
            _reader, writer = await asyncio.open_connection(*sock.getsockname())
            for _ in range(100):
                if seen:
                    break
                await asyncio.sleep(0.01)
            writer.close()

    asyncio.run(main())
    assert seen and seen[0] != 0
