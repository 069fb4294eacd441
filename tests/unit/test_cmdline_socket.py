"""Command-line discovery finds the process that really listens on the target's port (issue 11, kind 8).

Real processes on this machine, no mock: a listener whose argv carries vLLM flags, next to a decoy whose argv
looks like a vLLM server on the same port (what the old argv heuristic picked), and a listener that is a
vllm-headroom process (never a source of vLLM's flags).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from exporter.pipeline import config
from tests.net import free_port

LISTEN = ("import socket, sys, time\n"
          "s = socket.socket(socket.AF_INET6 if sys.argv[2] == '6' else socket.AF_INET)\n"
          "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('::1' if sys.argv[2] == '6' else '127.0.0.1', int(sys.argv[1]))); s.listen()\n"
          "print('listening', flush=True); time.sleep(120)\n")
SLEEP = "import time; time.sleep(120)\n"


@contextmanager
def process(argv: list[str], wait_listening: bool) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        if wait_listening:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "listening"
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")


@pytest.mark.parametrize("family", ["4", "6"])
def test_the_listening_process_wins_over_a_lookalike(family: str) -> None:
    if family == "6" and not Path("/proc/net/tcp6").exists():
        pytest.skip("no IPv6")
    port = free_port()
    decoy = [sys.executable, "-c", SLEEP, "vllm", "serve", "other", "--port", str(port), "--max-model-len", "99999"]
    real = [sys.executable, "-c", LISTEN, str(port), family, "vllm", "serve", "tiny", "--max-model-len", "512"]
    with process(decoy, False), process(real, True) as listener:
        found = config.find_vllm_cmdline(port)
        assert found is not None, "the listener was not found"
        assert (found.pid, found.found_by) == (listener.pid, "listening socket")
        assert config.parse_vllm_args(found.argv)["max_model_len"] == 512


def test_a_vllm_headroom_listener_is_never_taken(tmp_path: Path) -> None:
    port = free_port()
    ours = tmp_path / "vllm-headroom"
    os.symlink(sys.executable, ours)
    with process([str(ours), "-c", LISTEN, str(port), "4", "serve", "--max-model-len", "99999"], True):
        assert config.find_vllm_cmdline(port) is None


def test_a_listener_that_is_not_vllm_is_never_taken() -> None:
    """Issue 21: any process owning the port (a proxy, a port-forward) was trusted for vLLM's flags."""
    port = free_port()
    proxy = [sys.executable, "-c", LISTEN, str(port), "4", "envoy", "--max-model-len", "99999", "--max-num-seqs", "1"]
    with process(proxy, True):
        assert config.find_vllm_cmdline(port) is None
