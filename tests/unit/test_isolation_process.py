"""Issue 21, kinds 3 and 6: the sidecar as its own process under a hostile client side.

`vllm-headroom serve` runs as a process (under a low file limit where it matters) next to a real loopback
target (tests/hostile.py). Nothing is timed: the flood holds its sockets while the probe is answered and the
target is scraped on; SIGHUP leaves the process up. These tests use only the command line, so they run against
an older sidecar too (that is how they were seen to fail before the fix).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests import hostile
from tests.net import free_port

HANG = 120.0  # s: a guard against waiting forever, never a latency threshold
REPO = Path(__file__).resolve().parents[2]


async def _get(port: int, path: str) -> int:
    async with asyncio.timeout(HANG):  # a guard: the old server left such a request unanswered forever
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: sidecar\r\nConnection: close\r\n\r\n".encode())
        async with asyncio.timeout(HANG):
            await writer.drain()
            line = await reader.readline()
            await reader.read()
        return int(line.split()[1]) if line else 0
    except ConnectionError:
        return 0
    finally:
        writer.close()


@contextlib.contextmanager
def sidecar_process(target: str, files: int | None = None, extra: tuple[str, ...] = ()) -> Iterator[
        tuple[int, subprocess.Popen[str]]]:
    """`vllm-headroom serve` as its own process (under a file limit of `files`)."""
    port = free_port()

    def limit() -> None:
        if files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "serve", "--target", target, "--web.listen-address",
                             f"127.0.0.1:{port}", "--scrape.interval", "1s", "--no-vllm-cmdline-discovery",
                             "--vllm-args", "vllm serve tiny-llama --max-num-seqs 8", *extra],
                            preexec_fn=limit, env=env, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        deadline = time.monotonic() + HANG
        while asyncio.run(_status(port, "/healthz")) != 200:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.1)
        yield port, proc
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        proc.kill()


async def _status(port: int, path: str) -> int:
    try:
        return await _get(port, path)
    except OSError:
        return 0


def test_slowloris_cannot_take_the_probe_or_the_scrapes_files() -> None:
    """Under a file limit of 400, 600 half-open connections: the old server held each until accept() failed for
    lack of files, so the probe could not connect and the scrapes could not open theirs (every target up 0).
    Now the sidecar holds at most what its files allow beside the targets', each newcomer closing the oldest
    half-open one: the probe is answered and the target is scraped on."""
    with hostile.serving() as target, sidecar_process(target.url, files=400) as (port, _proc):
        before = len(target.metrics_at)
        held: list[socket.socket] = []
        try:
            for _ in range(600):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(b"GET / HTTP/1.1\r\nHost: sidecar\r\nX-Slow: ")  # never finished
                held.append(s)
            assert asyncio.run(_status(port, "/healthz")) == 200
            deadline = time.monotonic() + HANG
            while len(target.metrics_at) < before + 3:  # scraped on while the flood holds its sockets
                assert time.monotonic() < deadline, "the target was not scraped during the flood"
                time.sleep(0.1)
            metrics = asyncio.run(_body(port, "/metrics"))
        finally:
            for s in held:
                s.close()
    assert f'vllm_headroom_up{{target="{target.url}"}} 1.0' in metrics


async def _body(port: int, path: str) -> str:
    async with asyncio.timeout(HANG):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: sidecar\r\nConnection: close\r\n\r\n".encode())
        data = await reader.read()
    writer.close()
    return data.decode(errors="replace")


def test_sighup_and_sigusr_are_logged_and_the_sidecar_stays_up() -> None:
    with hostile.serving() as target, sidecar_process(target.url) as (port, proc):
        for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            proc.send_signal(sig)
            deadline = time.monotonic() + HANG
            while asyncio.run(_status(port, "/healthz")) != 200:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
            assert proc.poll() is None, sig  # their default action would have ended it, silently
        proc.terminate()
        assert proc.wait(HANG) in (0, -signal.SIGTERM)  # uvicorn ends by re-raising the signal it caught
        err = proc.stderr.read() if proc.stderr else ""
    assert "received SIGHUP: nothing is reloaded" in err
    assert "received SIGUSR1: ignored" in err and "received SIGUSR2: ignored" in err


def test_a_client_sending_garbage_does_not_flood_the_log() -> None:
    """2,000 malformed requests: uvicorn's "Invalid HTTP request received." was one line each, in its own format;
    now one line a minute with the count of those left out, in ours."""
    import socket
    with hostile.serving() as target, sidecar_process(target.url) as (port, proc):
        for _ in range(300):
            with socket.create_connection(("127.0.0.1", port), timeout=HANG) as s:
                s.sendall(b"\x16\x03garbage\r\n\r\n")
                s.recv(99)
        assert asyncio.run(_status(port, "/healthz")) == 200
        proc.terminate()
        proc.wait(HANG)
        err = proc.stderr.read() if proc.stderr else ""
    invalid = [ln for ln in err.splitlines() if "Invalid HTTP request" in ln]
    assert 1 <= len(invalid) <= 2, invalid[:5]
