"""Shared helpers of the benchmarks: child processes, /proc readings, machine facts and result files."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
TICK = os.sysconf("SC_CLK_TCK")
FIXTURES = REPO / "tests" / "fixtures" / "vllm-0.32.0"
# vLLM's command line of the recorded scenarios (tests/e2e/scenarios.py SHARED_FLAGS).
VLLM_ARGS = "vllm serve tiny-llama --max-num-seqs 8 --max-model-len 512 --block-size 32"


def quick() -> bool:
    """BENCH_QUICK=1 shortens every run (minutes instead of ~15) for a smoke check."""
    return os.environ.get("BENCH_QUICK", "") not in ("", "0")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def machine() -> dict[str, Any]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return {"cpu": cpu, "cores": os.cpu_count(), "mem_gib": round(mem_kb / 2**20, 1),
            "python": platform.python_version(), "kernel": platform.release()}


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process (not its children), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer within {timeout:g} s")
        time.sleep(0.2)


@contextlib.contextmanager
def spawn(argv: Sequence[str], log: Path | None = None,
          cpus: set[int] | None = None, cwd: Path = REPO) -> Iterator[subprocess.Popen[bytes]]:
    """Run argv in its own process group (in `cwd`: `python -m exporter` runs the tree there); always stopped
    (TERM, then KILL) on exit."""
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, cwd=cwd,
                            env={**os.environ, "PYTHONPATH": str(cwd)} if cwd != REPO else None)
    try:
        if cpus:
            os.sched_setaffinity(proc.pid, cpus)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        if log:
            out.close()  # type: ignore[union-attr]


def sidecar_argv(targets: Sequence[str] | None, port: int, interval: str, extra: Sequence[str] = (),
                 targets_file: Path | None = None) -> list[str]:
    argv = [sys.executable, "-m", "exporter", "serve", "--web.listen-address", f"127.0.0.1:{port}",
            "--scrape.interval", interval, "--vllm-args", VLLM_ARGS, "--no-vllm-cmdline-discovery",
            "--log.level", "warning"]
    if targets_file is not None:
        argv += ["--targets-file", str(targets_file)]
    for t in targets or ():
        argv += ["--target", t]
    return argv + list(extra)


def save(name: str, data: dict[str, Any]) -> Path:
    """Write one benchmark's figures to bench/results/<name>.json (read by bench/report.py)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "quick": quick(), "machine": machine(), **data}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=float) + "\n")
    print(f"wrote {path.relative_to(REPO)}")
    return path


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    i = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[i]
