"""Start and stop a real vLLM (CPU build) serving the tiny random-weight model.

The end-to-end suite, the fixture recorder and the version matrix use this. vLLM runs from its own
venv because its dependency set (torch, etc.) must not leak into the project's environment; everything
else runs under the system interpreter. The pinned release (PINNED_VERSION) comes from
`scripts/vllm-venv`; any other release from `scripts/vllm-version-venv X`, whose venv carries the
run-time needs of that release (LD_PRELOAD, block size, tokenizer) in vllm-version.json. The Rust frontend
(`frontend="rust"`, VLLM_USE_RUST_FRONTEND=1) runs on the pinned venv with the add-on of
`scripts/vllm-rust-frontend` (the vllm-rs binary, an entry module for `vllm serve`, a tokenizer).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from tests.net import free_port

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = Path(__file__).resolve().parent / "tiny-llama"
# CPUs this process could use at import, before pin_self() narrowed them: later servers
# (e.g. a second scenario group) are pinned from this set, not from the narrowed one.
ALL_CPUS = frozenset(os.sched_getaffinity(0))
START_DEADLINE_S = 300.0  # start-up takes ~100 s on 2 cores; leave room for a slow CI box
STOP_GRACE_S = 20.0

PINNED_VERSION = "0.32.0"  # tests/e2e/requirements-vllm.txt
FRONTENDS = ("python", "rust")  # vLLM's OpenAI API server in Python, or vllm-rs (VLLM_USE_RUST_FRONTEND=1)

# Start-up capacity lines, as each release prints them (the message part, after the log prefix):
#   every release:  "Overriding num_gpu_blocks=65536 with num_gpu_blocks_override=40"
#   >= 0.28:        "CPU KV cache size: 1,280 tokens, Maximum concurrency for 512 tokens per request: 2.50x"
#   V1 0.9-0.24:    "GPU KV cache size: 1,280 tokens" and, on its own line,
#                   "Maximum concurrency for 512 tokens per request: 2.50x"
#   V0 (0.8.5):     "# cpu blocks: 80, # CPU blocks: 0" and the same separate concurrency line; no size line
_OVERRIDE_RE = re.compile(r"Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)")
_SIZE_RE = re.compile(r"(\w+) KV cache size: ([\d,]+) tokens")
_CONCURRENCY_RE = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_V0_BLOCKS_RE = re.compile(r"# (\w+) blocks: (\d+), # CPU blocks: (\d+)")
_BATCHED_RE = re.compile(r"max_num_batched_tokens=(\d+)")


def _int(text: str) -> int:
    return int(text.replace(",", ""))


@functools.cache
def vllm_python(version: str = PINNED_VERSION) -> str:
    """Path of the venv python that has vLLM `version`; builds the venv on first use (minutes), then <1 s."""
    if version == PINNED_VERSION:
        argv = [str(REPO / "scripts" / "vllm-venv")]
    else:
        argv = [str(REPO / "scripts" / "vllm-version-venv"), version]
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True)
    return out.stdout.strip().splitlines()[-1]


@functools.cache
def rust_frontend_runtime() -> dict[str, Any]:
    """What the Rust frontend needs at run time (scripts/vllm-rust-frontend builds it on first use, ~10 s)."""
    out = subprocess.run([str(REPO / "scripts" / "vllm-rust-frontend"), "--dir"], check=True, stdout=subprocess.PIPE,
                         text=True)
    return dict(json.loads((Path(out.stdout.strip().splitlines()[-1]) / "vllm-version.json").read_text()))


def venv_runtime(python: str) -> dict[str, Any]:
    """What the release in the venv of `python` needs at run time (written by scripts/vllm-version-venv)."""
    path = Path(python).parents[1] / "vllm-version.json"
    return dict(json.loads(path.read_text())) if path.exists() else {}


def engine_generation(log: str) -> str | None:
    """"V0" or "V1" from the start-up log (V0 announces itself; V1 starts an EngineCore)."""
    if "Initializing a V0 LLM engine" in log or "Falling back to V0" in log:
        return "V0"
    if "EngineCore" in log or "V1 LLM engine" in log:
        return "V1"
    return None


def parse_startup_capacity(log: str) -> dict[str, Any]:
    """Capacity facts vLLM prints once at start-up, in the format of any release from 0.8.5 to 0.32.

    Keys: num_gpu_blocks (after override), num_gpu_blocks_profiled (before override, if overridden),
    kv_cache_size_tokens (absent on V0, which prints block counts instead), max_model_len,
    max_concurrency, device, format ("one-line" >= 0.28, "two-lines" V1 before, "v0-blocks" V0),
    lines (the message parts, without the log prefix), line (them joined by " | "),
    max_num_batched_tokens (when the log states it).
    """
    result: dict[str, Any] = {}
    m = _OVERRIDE_RE.search(log)
    if m:
        result["num_gpu_blocks_profiled"] = int(m.group(1))
        result["num_gpu_blocks"] = int(m.group(2))
    lines: list[str] = []
    size = _SIZE_RE.search(log)
    conc = _CONCURRENCY_RE.search(log)
    v0 = _V0_BLOCKS_RE.search(log)
    if size:
        result["device"] = size.group(1)
        result["kv_cache_size_tokens"] = _int(size.group(2))
        lines.append(size.group(0))
    elif v0:
        result["device"] = v0.group(1)
        result.setdefault("num_gpu_blocks", int(v0.group(2)))
        result["num_cpu_swap_blocks"] = int(v0.group(3))
        result["format"] = "v0-blocks"
        lines.append(v0.group(0))
    if conc:
        result["max_model_len"] = _int(conc.group(1))
        result["max_concurrency"] = float(conc.group(2))
        if size and "\n" not in log[size.start() : conc.start()] and conc.start() > size.start():
            result["format"] = "one-line"
            lines[-1] = log[size.start() : conc.end()]
        else:
            result.setdefault("format", "two-lines")
            lines.append(conc.group(0))
    b = _BATCHED_RE.search(log)
    if b:
        result["max_num_batched_tokens"] = int(b.group(1))
    if lines:
        # Keep only the message parts: the log prefix carries timestamps and pids.
        result["lines"] = lines
        result["line"] = " | ".join(lines)
    return result


class VllmServer:
    """One vLLM OpenAI server on a free loopback port, in its own process group.

    Use as a context manager; the server is always stopped on exit (SIGTERM to the group,
    then SIGKILL after STOP_GRACE_S) so no engine-core child survives a failed test.

    `enforce_eager` None takes `EAGER_DEFAULT`: False (torch.compile, as people run vLLM) for the recorders and
    benches, True under pytest (tests/e2e/conftest.py). The suite tests the scheduler, its admission and its
    metrics, which compilation does not touch; compiling the model costs each start 25 s with a warm compile cache
    and 60-100 s on a fresh CI machine (measured on 0.32.0: ready in 46-48 s compiled, 23-24 s eager; eager decode
    steps ~20 % slower).
    """

    EAGER_DEFAULT = False

    def __init__(
        self,
        *,
        max_model_len: int = 512,
        block_size: int = 32,
        num_gpu_blocks_override: int | None = 40,
        max_num_seqs: int = 8,
        max_num_batched_tokens: int | None = None,
        served_model_name: str = "tiny-llama",
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        kvcache_space_gib: int = 1,
        model_config: Mapping[str, Any] | None = None,
        dtype: str = "bfloat16",
        pin_cpus: bool = True,
        version: str = PINNED_VERSION,
        frontend: str = "python",
        truth: Path | None = None,
        enforce_eager: bool | None = None,
    ) -> None:
        if frontend not in FRONTENDS or (frontend == "rust" and version != PINNED_VERSION):
            raise ValueError(f"frontend {frontend!r} of vLLM {version}: the Rust frontend runs on {PINNED_VERSION}")
        self.version = version
        self.frontend = frontend
        # Where the engine-truth recorder (tests/e2e/truth_plugin) writes its per-step lines; None: not loaded.
        self.truth = truth
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.num_gpu_blocks_override = num_gpu_blocks_override
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.served_model_name = served_model_name
        self.extra_args = tuple(extra_args)
        self.enforce_eager = self.EAGER_DEFAULT if enforce_eager is None else enforce_eager
        self.extra_env = dict(env or {})
        self.kvcache_space_gib = kvcache_space_gib
        self.model_config = dict(model_config) if model_config is not None else None
        self.dtype = dtype
        self.pin_cpus = pin_cpus
        # Filled by start() when pinning: CPUs of the engine processes, and the CPUs left to
        # the API server, which load drivers and scrapers should use too (see pin_self()).
        self.engine_cpus: set[int] = set()
        self.front_cpus: set[int] = set()
        self.port = 0
        self.url = ""
        self.pid = 0
        self.argv: list[str] = []
        self.env_used: dict[str, str] = {}
        self.runtime_env: dict[str, str] = {}
        self.runtime: dict[str, Any] = {}  # the release's or the Rust frontend's vllm-version.json
        self.model_path = ""
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._final_log = ""  # log text kept after stop() removed the temp dir

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> VllmServer:
        self._tmp = tempfile.TemporaryDirectory(prefix="vllm-e2e-")
        tmp = Path(self._tmp.name)
        # A private copy: vLLM may write next to the config, and the path becomes the model
        # root shown in /v1/models; a temp path keeps the repo tree clean.
        model = tmp / "tiny-llama"
        shutil.copytree(MODEL_DIR, model)
        python = vllm_python(self.version)
        runtime = self.runtime = rust_frontend_runtime() if self.frontend == "rust" else venv_runtime(python)
        # V0's front end loads a tokenizer even with --skip-tokenizer-init; the Rust frontend refuses that flag.
        if runtime.get("tokenizer_dir"):
            for f in Path(runtime["tokenizer_dir"]).iterdir():
                shutil.copy(f, model / f.name)
        if self.model_config is not None:  # another random-weight shape (capacity exactness tests)
            (model / "config.json").write_text(json.dumps(self.model_config, indent=2))
        self.model_path = str(model)
        self._log_path = tmp / "server.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        listen = ["--host", "127.0.0.1", "--port", str(self.port)]
        if self.frontend == "rust":
            # `vllm serve` through the entry module (scripts/vllm-rust-frontend), which starts the engine and
            # hands the listening socket to vllm-rs; it loads the model folder's tokenizer.json.
            head = [python, runtime["entry"], "serve", self.model_path, *listen]
        else:
            head = [python, "-m", "vllm.entrypoints.openai.api_server", *listen, "--model", self.model_path]
        self.argv = [
            *head,
            "--served-model-name", self.served_model_name,
            "--load-format", "dummy",
            *(["--skip-tokenizer-init"] if self.frontend == "python" else []),
            "--dtype", self.dtype,
            "--max-model-len", str(self.max_model_len),
            "--block-size", str(self.block_size),
            "--max-num-seqs", str(self.max_num_seqs),
        ]  # fmt: skip
        if self.num_gpu_blocks_override is not None:
            self.argv += ["--num-gpu-blocks-override", str(self.num_gpu_blocks_override)]
        if self.max_num_batched_tokens is not None:
            self.argv += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        if self.enforce_eager and "--enforce-eager" not in self.extra_args:
            self.argv.append("--enforce-eager")
        self.argv += list(self.extra_args)
        omp = {}
        if self.version != PINNED_VERSION and self.pin_cpus and len(ALL_CPUS) >= 2 and runtime.get("v1_cpu_worker"):
            # Before ~0.2x the CPU worker binds one OpenMP thread per core ("auto": cores 0 and 1); _pin() then
            # squeezes both onto the engine's one CPU and every step waits on a spinning barrier (measured on
            # 0.19.1: ~5 steps/s instead of hundreds). One thread on the engine's CPU, as 0.32 does itself.
            omp = {"VLLM_CPU_OMP_THREADS_BIND": str(max(ALL_CPUS))}
        runtime_env = dict(runtime.get("env", {}))
        rust = {"VLLM_USE_RUST_FRONTEND": runtime_env.pop("VLLM_USE_RUST_FRONTEND")} if self.frontend == "rust" else {}
        self.env_used = {"VLLM_CPU_KVCACHE_SPACE": str(self.kvcache_space_gib), **rust, **omp, **self.extra_env}
        # The release's own needs (LD_PRELOAD of a libstdc++ shim or tcmalloc/libiomp, the vllm-rs path) are
        # machine-specific paths: kept apart from env_used, which recordings store.
        self.runtime_env = runtime_env
        env = {**os.environ, **self.runtime_env, **self.env_used}
        if self.truth is not None:
            from .engine_truth import ENV, stage_plugin

            plugin = stage_plugin(tmp)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(plugin), env.get("PYTHONPATH", "")) if p)
            env[ENV] = str(self.truth)
        with open(self._log_path, "wb") as log:
            self._proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=tmp,
                start_new_session=True,  # own process group: stop() can kill the engine core too
            )
        self.pid = self._proc.pid
        try:
            self._wait_ready()
            if self.pin_cpus:
                self._pin()
        except BaseException:
            self.stop()
            raise
        return self

    def _group_pids(self) -> list[int]:
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == self.pid:
                        pids.append(int(entry.name))
                except ProcessLookupError:
                    pass
        return pids

    def _pin(self) -> None:
        """Give the engine (EngineCore + Worker processes) one CPU and the rest to everyone else.

        Why: on the 2-vCPU CI/dev VM the engine's two processes busy-poll each other
        (shm queues spin with sched_yield while active) and the kernel packed them together
        with the API server, leaving the other vCPU idle. Under load /metrics then went
        unanswered for ~6 s and even an idle Python loop saw 2.7 s sleep overshoots, so a
        timeline showed nothing of the queued state. With this split, scrapes are answered
        on time and the engine's throughput is unchanged (~6,000 tokens/s on the tiny model).
        """
        cpus = sorted(ALL_CPUS)
        if len(cpus) < 2:
            return
        pids = self._group_pids()
        comms = {}
        for pid in pids:
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                comms[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
        if not any(c.startswith("VLLM::") for c in comms.values()):
            return  # V0 (0.8.x) names no engine process: leave the kernel to place it
        self.engine_cpus, self.front_cpus = {cpus[-1]}, set(cpus[:-1])
        for pid in pids:
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
                target = self.engine_cpus if comm.startswith("VLLM::") else self.front_cpus
                # Affinity is per thread on Linux; existing threads must each be moved.
                for tid in os.listdir(f"/proc/{pid}/task"):
                    os.sched_setaffinity(int(tid), target)
            except (FileNotFoundError, ProcessLookupError):
                pass  # a short-lived helper exited meanwhile

    def pin_self(self) -> None:
        """Move the calling thread onto the API server's CPUs (no-op without pinning).

        Call before starting load/scrape threads: new threads inherit the affinity.
        Undo with unpin_self() once this server is gone.
        """
        if self.front_cpus:
            os.sched_setaffinity(0, self.front_cpus)

    @staticmethod
    def unpin_self() -> None:
        os.sched_setaffinity(0, ALL_CPUS)

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + START_DEADLINE_S
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    raise RuntimeError(
                        f"vLLM exited with code {self._proc.returncode} before becoming ready; "
                        f"last log lines:\n{self._log_tail(60)}"
                    )
                try:
                    if client.get(f"{self.url}/v1/models").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass  # not listening yet
                time.sleep(1.0)
        raise RuntimeError(f"vLLM not ready after {START_DEADLINE_S:.0f} s; last log lines:\n{self._log_tail(60)}")

    def stop(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                proc.wait(timeout=10)
        if proc is not None:
            # The group may outlive its leader (engine-core child); make sure it is gone.
            self._signal_group(signal.SIGKILL)
        self._proc = None
        if self._tmp is not None:
            # Keep the log readable after stop: copy it out before the temp dir goes.
            self._final_log = self.log_text()
            self._tmp.cleanup()
            self._tmp = None

    def _signal_group(self, sig: signal.Signals) -> None:
        if not self.pid:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)  # pgid == pid because of start_new_session

    def __enter__(self) -> VllmServer:
        return self if self._proc is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- inspection ------------------------------------------------------------------------

    def log_text(self) -> str:
        if self._log_path is not None and self._log_path.exists():
            return self._log_path.read_text(errors="replace")
        return self._final_log

    def exited(self) -> bool:
        """True once the server process has gone (e.g. the engine core died and took the API server down)."""
        return self._proc is not None and self._proc.poll() is not None

    def log_tail(self, n: int) -> str:
        return self._log_tail(n)

    def _log_tail(self, n: int) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def startup_log(self, max_lines: int = 400) -> str:
        """Log lines up to and including 'Application startup complete' (or the first max_lines)."""
        out: list[str] = []
        for line in self.log_text().splitlines()[:max_lines]:
            out.append(line)
            if "Application startup complete" in line:
                break
        return "\n".join(out) + "\n"

    def startup_capacity(self) -> dict[str, Any]:
        return parse_startup_capacity(self.log_text())

    def flags(self) -> dict[str, Any]:
        return {
            "max_model_len": self.max_model_len,
            "block_size": self.block_size,
            "num_gpu_blocks_override": self.num_gpu_blocks_override,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "served_model_name": self.served_model_name,
            "frontend": self.frontend,
        }
