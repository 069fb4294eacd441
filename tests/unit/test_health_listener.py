"""The probes' own listener (`--web.health-address`, issue 21): /healthz and /readyz on a socket and a thread of
their own, so a crowd queued on the main port never queues the kubelet's probes.

Real servers on loopback, real sockets; nothing is timed (the latency under 1,000 reconnecting clients is in
bench/b8_serving.py): the tests count answers while the main listener cannot accept anything.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.expose import http
from exporter.expose.http import Server
from exporter.expose.listen import bind, health_address
from exporter.expose.server import Sidecar, serve
from exporter.pipeline.target import Settings, Target
from tests.net import free_port

HANG = 120.0  # s: a guard against waiting forever, never a latency threshold
PROBE = 30.0  # s a probe may wait while the main loop is held: ten times the kubelet's timeout, a guard only
REPO = Path(__file__).resolve().parents[2]


def _get(port: int, path: str, timeout: float = HANG) -> tuple[int, bytes]:
    """One GET on a new connection: (status, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: sidecar\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def _wait(server: Server) -> None:
    deadline = time.monotonic() + HANG
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started


@contextlib.contextmanager
def main_and_health(sidecar: Sidecar) -> Iterator[tuple[int, int]]:
    """`server.serve` of the sidecar in a thread (there uvicorn runs its own event loop) with a health listener."""
    sock, hsock = bind("127.0.0.1", free_port()), bind("127.0.0.1", free_port(), flag="--web.health-address")
    thread = threading.Thread(target=serve, args=(sidecar, sock, hsock), daemon=True)
    thread.start()
    deadline = time.monotonic() + HANG
    while not sidecar.servers and time.monotonic() < deadline:
        time.sleep(0.02)
    _wait(sidecar.servers[0])  # `serve` lists every server it runs before it runs the main one
    for server in sidecar.servers:
        _wait(server)
    try:
        yield sock.getsockname()[1], hsock.getsockname()[1]
    finally:
        for server in sidecar.servers:
            server.stop()
        thread.join(HANG)
        sock.close()
        hsock.close()


def _sidecar() -> Sidecar:
    return Sidecar([Target(Settings(url="http://127.0.0.1:9"))], 5.0)


def test_the_health_listener_answers_both_probe_paths_and_nothing_else() -> None:
    sidecar = _sidecar()
    with main_and_health(sidecar) as (port, hport):
        assert hport != port and "health listener" in {t.name for t in threading.enumerate()}
        assert _get(hport, "/healthz") == _get(port, "/healthz") == (200, b'{"status":"ok"}')
        deadline = time.monotonic() + HANG
        while sidecar.generation < 1 and time.monotonic() < deadline:  # the first scrape (refused at once)
            time.sleep(0.02)
        status, body = _get(hport, "/readyz")
        assert (status, body) == _get(port, "/readyz")
        assert status == 503 and json.loads(body)["not_ready"][0]["target"] == "http://127.0.0.1:9"
        for path in ("/metrics", "/", "/api/v1/diagnosis", "/api/v1/history"):
            assert _get(hport, path)[0] == 404, path  # the crowd's bodies are the main port's only
            assert _get(port, path)[0] != 404, path


def test_probes_are_answered_while_the_main_accept_queue_is_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """The main loop is held inside a request and its listening queue is full (the kernel takes no connection
    more): every probe on the health listener is still answered, and none of the queued main connections is."""
    monkeypatch.setattr(http, "LISTEN_QUEUE", 4)  # a short queue the test can fill
    release, entered = threading.Event(), threading.Event()
    sidecar = _sidecar()

    async def held(gzip: bool = False) -> bytes:
        entered.set()
        release.wait(HANG)  # blocks the main event loop itself, as a long build on it would
        return b""

    monkeypatch.setattr(sidecar, "metrics_body", held)
    with main_and_health(sidecar) as (port, hport):
        stuck = socket.create_connection(("127.0.0.1", port), timeout=HANG)
        stuck.sendall(b"GET /metrics HTTP/1.1\r\nHost: sidecar\r\n\r\n")
        assert entered.wait(HANG)
        queued: list[socket.socket] = []
        try:
            while len(queued) < 64:  # Linux queues backlog + 1; the next connect does not complete
                s = socket.socket()
                s.setblocking(False)
                if s.connect_ex(("127.0.0.1", port)) not in (0, errno.EINPROGRESS):
                    s.close()
                    break
                queued.append(s)
                _r, writable, _x = select.select([], [s], [], 1.0)
                if not writable:
                    break  # the queue is full: this one's SYN was dropped
            assert len(queued) < 64, "the main listener's queue never filled"
            answered = [_get(hport, "/healthz", PROBE)[0] for _ in range(20)]
            assert answered == [200] * 20
            assert [_get(hport, "/readyz", PROBE)[0] for _ in range(5)] == [503] * 5
            for s in queued[:-1]:
                with contextlib.suppress(BlockingIOError):
                    assert s.recv(1) == b"", "a queued connection was answered: the main loop was not held"
        finally:
            release.set()
            for s in queued:
                s.close()
            stuck.close()


def test_health_address_defaults_to_the_next_port_and_refuses_the_listen_port() -> None:
    assert health_address("", ("0.0.0.0", 9478)) == ("0.0.0.0", 9479)
    assert health_address("none", ("0.0.0.0", 9478)) is None
    assert health_address("127.0.0.1:9600", ("0.0.0.0", 9478)) == ("127.0.0.1", 9600)
    for same in (":9478", "0.0.0.0:9478", "127.0.0.1:9478"):
        with pytest.raises(ValueError, match="listener of their own"):
            health_address(same, ("0.0.0.0", 9478))
    with pytest.raises(ValueError, match="give --web\\.health-address"):
        health_address("", ("0.0.0.0", 65535))


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "exporter", "serve", "--target", "http://127.0.0.1:9",
                             "--no-vllm-cmdline-discovery", *args], cwd=REPO, text=True, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def _until_up(port: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        with contextlib.suppress(OSError):
            _get(port, "/healthz")
            return
        time.sleep(0.1)
    raise AssertionError("the sidecar never listened")


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    _out, err = proc.communicate(timeout=HANG)
    return err


def test_serve_listens_for_probes_on_the_next_port_by_default_or_where_told() -> None:
    port = free_port()
    proc = _serve("--web.listen-address", f"127.0.0.1:{port}")
    try:
        _until_up(port, proc)
        status: Any = None
        with contextlib.suppress(OSError):
            status = _get(port + 1, "/healthz")
        taken = status is None  # port + 1 was someone else's: then a warning says so (the other test below)
    finally:
        err = _stop(proc)
    assert taken or status == (200, b'{"status":"ok"}'), err
    assert taken or f"probes on 127.0.0.1:{port + 1}" in err
    port, hport = free_port(), free_port()
    proc = _serve(env={"VLLM_HEADROOM_WEB_LISTEN_ADDRESS": f"127.0.0.1:{port}",
                       "VLLM_HEADROOM_WEB_HEALTH_ADDRESS": f"127.0.0.1:{hport}"})
    try:
        _until_up(hport, proc)
        assert _get(hport, "/healthz") == (200, b'{"status":"ok"}')
        assert _get(hport, "/metrics")[0] == 404
    finally:
        _stop(proc)


def test_a_taken_health_port_stops_serve_only_when_it_was_asked_for() -> None:
    port = free_port()
    with socket.create_server(("127.0.0.1", 0)) as other:
        taken = other.getsockname()[1]
        proc = _serve("--web.listen-address", f"127.0.0.1:{port}", "--web.health-address", f"127.0.0.1:{taken}")
        _out, err = proc.communicate(timeout=HANG)
        assert proc.returncode == 1
        assert err.strip().endswith(f"port {taken} on 127.0.0.1 is already in use (another vllm-headroom?): stop it "
                                    "or pick another with --web.health-address HOST:PORT"), err
    with socket.create_server(("127.0.0.1", port + 1)) if _free(port + 1) else contextlib.nullcontext():
        proc = _serve("--web.listen-address", f"127.0.0.1:{port}")  # the implicit port + 1 is taken: a warning
        try:
            _until_up(port, proc)
        finally:
            err = _stop(proc)
        assert f"WARNING no health listener: port {port + 1} on 127.0.0.1 is already in use" in err, err


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0 and _bindable(port)


def _bindable(port: int) -> bool:
    try:
        with socket.create_server(("127.0.0.1", port)):
            return True
    except OSError:
        return False



def ours(body: bytes) -> list[bytes]:
    """The body's lines but the process collector's (CPU seconds and memory move between two reads)."""
    return [ln for ln in body.splitlines() if b"process_" not in ln]


def test_metrics_is_answered_before_the_routing_with_the_routes_answer() -> None:
    """/metrics is answered by `http.Front` itself (issue 25: the crowd's reads spent more in Starlette than in
    the cached body), with the body, headers and encodings the route gives; HEAD without a body; other methods
    and paths reach the app."""
    from fastapi.testclient import TestClient

    from exporter.expose.http import Front
    from exporter.expose.server import make_app, metrics_answer

    sidecar = _sidecar()
    with TestClient(make_app(sidecar, start_loop=False)) as fast:
        plain = fast.get("/metrics", headers={"accept-encoding": "identity"})
        zipped = fast.get("/metrics", headers={"accept-encoding": "gzip"})
        assert plain.status_code == zipped.status_code == 200
        assert ours(plain.content) == ours(sidecar.exposition()) and b"vllm_headroom_up{" in plain.content
        assert zipped.headers["content-encoding"] == "gzip" and ours(zipped.content) == ours(plain.content)
        assert plain.headers["content-type"].startswith("text/plain; version=")
        assert plain.headers["x-content-type-options"] == "nosniff" and plain.headers["vary"] == "Accept-Encoding"
        head = fast.head("/metrics")
        assert head.status_code == 200 and head.content == b"" and int(head.headers["content-length"]) > 0
        assert fast.post("/metrics").status_code == 405
    with TestClient(make_app(sidecar, start_loop=False, openapi=True)) as routed:
        assert ours(routed.get("/metrics").content) == ours(plain.content)
        assert "/metrics" in routed.get("/openapi.json").json()["paths"]

    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:  # the routing: only what Front does not answer
        if scope["type"] != "http":
            return
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    bare = TestClient(Front(app, direct={"/metrics": lambda scope: metrics_answer(sidecar, scope)}))
    assert ours(bare.get("/metrics").content) == ours(plain.content)
    assert bare.get("/elsewhere").status_code == 404
    assert reached == ["/elsewhere"]
