"""The serving configuration of one vLLM engine, every value with where it came from.

Precedence, highest first: our own flags/env > the vLLM command line (`--vllm-args`, or read from
/proc/<pid>/cmdline when the pod shares its process namespace) > the capacity facts vLLM exports
(cache_config_info) > `/v1/models` > vLLM's start-up log (`--vllm-startup-log`) > our estimate.
`max_num_seqs` and `max_num_batched_tokens` are in no vLLM metric and their defaults depend on version and
hardware, so when nobody states them they stay unknown rather than assumed.

Capacity (`num_gpu_blocks`) without `cache_config_info` (the Rust frontend exports none; a scrape relabelling
may drop it): our `--num-gpu-blocks`; vLLM's own `--num-gpu-blocks-override` on its command line; the start-up
log's "Overriding num_gpu_blocks=N with num_gpu_blocks_override=M" (M), or its "KV cache size: T tokens,
Maximum concurrency for L tokens per request: C x" line (the blocks both printed figures allow); else an
estimate from the model's config (`--model-config`) and the KV pool (vLLM's `--kv-cache-memory-bytes`, the
log's "Available KV cache memory", our `--kv-cache-memory` or `--gpu-memory`), with the range the pool's
precision allows. Each carries its source, and a range where it is inferred (`Known.low`/`high`).
"""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Generic, TypeVar

from ..engines.base import CapacityInfo, Engine, LogFacts
from ..engines.vllm import VLLM

# vLLM's argv grammar lives in its wing; these names stay importable from here for tools and tests.
from ..engines.vllm.args import NIXL_DEFAULT_LEASE
from ..engines.vllm.args import parse_token_count as parse_token_count
from ..engines.vllm.args import parse_vllm_args as parse_vllm_args
from ..engines.vllm.args import parse_vllm_args_noting as parse_vllm_args_noting


class Source(StrEnum):
    FLAG = "flag"  # our own flag or env var
    VLLM_ARGS = "vllm_args"  # the vLLM command line given to us as a string
    CMDLINE = "cmdline"  # read from /proc/<pid>/cmdline of the vLLM process
    CACHE_CONFIG_INFO = "cache_config_info"
    V1_MODELS = "v1_models"
    INFERRED = "inferred"  # from what the engine did (max_num_seqs: the highest running count beside room)
    DEFAULT = "default"  # the release's default, assumed because nobody stated the value
    STARTUP_LOG = "startup_log"  # vLLM's start-up log (--vllm-startup-log): what it printed
    ESTIMATED = "estimated"  # our estimate from the model's config and the KV pool, with its range


T = TypeVar("T", int, float, str, bool)


@dataclass(frozen=True)
class Known(Generic[T]):
    """One config value and where it came from; an inferred or estimated one with the range it may take
    (`low`..`high`, both None when it is exact) and how it was derived (`basis`, one phrase)."""

    value: T
    source: Source
    low: T | None = None
    high: T | None = None
    basis: str | None = None

    @property
    def uncertain(self) -> bool:
        """The value may be another within [low, high]: a conclusion must hold at both ends."""
        return self.low is not None and self.high is not None and self.low != self.high


@dataclass(frozen=True)
class Overrides:
    """Values the operator states with our own flags; they win over everything vLLM says."""

    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    num_gpu_blocks: int | None = None

    def items(self) -> dict[str, int]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def contradictions(overrides: Overrides, cache: CapacityInfo | None, data_parallel_engines: int) -> list[str]:
    """One note per flag of ours that contradicts what vLLM itself exports (its cache_config_info): the block
    size vLLM exports wins (its block counts are in it); --num-gpu-blocks still wins (the operator's word), but a
    typo must not pass silently."""
    if cache is None:
        return []
    out = []
    exported_bs = cache.block_size
    if overrides.block_size is not None and exported_bs is not None and overrides.block_size != exported_bs:
        out.append(f"--block-size {overrides.block_size} contradicts vLLM's cache_config_info block_size "
                   f"{exported_bs}; vLLM's is used (the blocks it exports are {exported_bs}-token blocks)")
    total = cache.num_gpu_blocks
    if overrides.num_gpu_blocks is not None and total is not None:
        exported = total // max(data_parallel_engines, 1)
        if overrides.num_gpu_blocks != exported:
            out.append(f"--num-gpu-blocks {overrides.num_gpu_blocks} contradicts vLLM's cache_config_info "
                       f"num_gpu_blocks {exported}{' per engine' if data_parallel_engines > 1 else ''}; the flag "
                       "is used")
    return out


def _dtype(name: str) -> str:
    return {"fp8": "fp8_e4m3"}.get(name, name)  # vLLM's fp8 is fp8_e4m3 (vllm/config/cache.py CacheDType)


def asked_versus_running(args: dict[str, Any] | None, where: str, cache: CapacityInfo | None) -> list[str]:
    """One note per value vLLM's command line asked that the engine does not run, from what it exports: the block
    size and the KV cache dtype (cache_config_info), and that the attention backend it selected is only in its
    start-up log (no metric names it)."""
    if not args:
        return []
    out = []
    asked = args.get("block_size")
    running = None if cache is None else cache.block_size
    if isinstance(asked, int) and running is not None and asked != running:
        out.append(f"{where} asks --block-size {asked}; vLLM runs {running}-token blocks (cache_config_info), set "
                   "by its platform or attention backend or raised for a hybrid layout: the figures use "
                   f"{running}")
    kv = args.get("kv_cache_dtype")
    stored = None if cache is None else cache.cache_dtype
    if isinstance(kv, str) and stored and _dtype(kv) != _dtype(stored):
        out.append(f"{where} asks --kv-cache-dtype {kv}; vLLM's cache_config_info says cache_dtype {stored}")
    backend = args.get("attention_backend")
    if isinstance(backend, str):
        out.append(f"{where} asks attention backend {backend}; the backend vLLM selected is named only in its "
                   "start-up log (pass it with --vllm-startup-log to have it read)")
    return out


def is_ours(argv: list[str]) -> bool:
    """A vllm-headroom process (`vllm-headroom serve`, `python -m exporter ...`): never a source of vLLM flags."""
    if any(a.rsplit("/", 1)[-1].startswith("vllm-headroom") for a in argv[:3]):
        return True
    return any(a == "-m" and i + 1 < len(argv) and argv[i + 1].split(".")[0] == "exporter"
               for i, a in enumerate(argv[:4]))


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[int]:
    """Inodes of the TCP sockets in LISTEN state on `port` (any address), from /proc/net/tcp and tcp6.

    Each line: `sl local_address rem_address st ... inode`; local_address is HEXIP:HEXPORT, st 0A is LISTEN
    (Linux include/net/tcp_states.h). Namespaced: a pod sees its own network namespace's sockets.
    """
    out: set[int] = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[3] != "0A":
                continue
            try:
                if int(cols[1].rsplit(":", 1)[1], 16) == port:
                    out.add(int(cols[9]))
            except ValueError:
                continue
    return out


def socket_owner(inodes: set[int], proc: Path = Path("/proc")) -> int | None:
    """The pid holding one of `inodes` open (`/proc/<pid>/fd/N -> socket:[inode]`); the lowest such pid."""
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    try:
        pids = sorted(int(e.name) for e in proc.iterdir() if e.name.isdigit())
    except OSError:
        return None
    for pid in pids:
        try:
            fds = list((proc / str(pid) / "fd").iterdir())
        except OSError:
            continue  # another user's process (needs the same uid or CAP_SYS_PTRACE): not readable
        for fd in fds:
            try:
                if os.readlink(fd) in wanted:
                    return pid
            except OSError:
                continue
    return None


def _argv(pid: int, proc: Path) -> list[str] | None:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


@dataclass(frozen=True)
class FoundCmdline:
    """vLLM's command line read from /proc, the pid it came from and how that process was found."""

    argv: list[str]
    pid: int
    found_by: str  # "listening socket" | "command line port"


def find_vllm_cmdline(port: int, proc: Path = Path("/proc"), engine: Engine = VLLM) -> FoundCmdline | None:
    """The command line of the process that listens on `port` (the target's): its socket inode in
    /proc/net/tcp{,6}, the pid whose /proc/<pid>/fd holds it, if that process is the engine's server
    (`engine.is_server`). Never a vllm-headroom process.

    When the sockets cannot be matched to a process (another user's /proc/<pid>/fd is not readable), an engine
    server process (`engine.is_server`) whose own `--port` equals `port` (the engine's default port when it sets
    none: vLLM's 8000) is taken, if exactly one matches; None otherwise, rather than a guess.
    """
    owner = socket_owner(listening_inodes(port, proc), proc)
    if owner is not None:
        argv = _argv(owner, proc)
        # Only the engine's own server: a proxy, a port-forward or any other process that owns the port is not
        # trusted for vLLM's flags (issue 21), even when its arguments look like them.
        if argv and not is_ours(argv) and owner != os.getpid() and engine.is_server(argv):
            return FoundCmdline(argv, owner, "listening socket")
        return None
    matches: list[FoundCmdline] = []
    try:
        entries = [e for e in proc.iterdir() if e.name.isdigit() and int(e.name) != os.getpid()]
    except OSError:
        return None
    for entry in entries:
        argv = _argv(int(entry.name), proc)
        if (argv and engine.is_server(argv) and not is_ours(argv)
                and engine.parse_args(argv)[0].get("port", engine.default_port) == port):
            matches.append(FoundCmdline(argv, int(entry.name), "command line port"))
    return matches[0] if len(matches) == 1 else None


def split_args(text: str) -> list[str]:
    return shlex.split(text)


@dataclass(frozen=True)
class ServingConfig:
    """Resolved configuration of one engine: each field the value with its source, or None when unknown."""

    max_model_len: Known[int] | None = None
    max_num_seqs: Known[int] | None = None
    max_num_batched_tokens: Known[int] | None = None
    block_size: Known[int] | None = None
    num_gpu_blocks: Known[int] | None = None  # per engine
    tensor_parallel_size: Known[int] | None = None
    data_parallel_size: Known[int] | None = None
    kv_cache_size_tokens: Known[int] | None = None
    kv_cache_max_concurrency: Known[float] | None = None
    enable_prefix_caching: Known[bool] | None = None
    enable_chunked_prefill: Known[bool] | None = None
    enable_sleep_mode: Known[bool] | None = None  # --enable-sleep-mode: POST /sleep may put the engine to sleep
    model: Known[str] | None = None
    served_model_name: Known[str] | None = None
    kv_cache_dtype: Known[str] | None = None  # vLLM's --kv-cache-dtype
    cache_dtype: Known[str] | None = None  # the cache_dtype label of vLLM's cache_config_info
    gpu_memory_utilization: Known[float] | None = None
    performance_mode: Known[str] | None = None  # vLLM's --performance-mode (throughput doubles the batch defaults)
    pipeline_parallel_size: Known[int] | None = None
    kv_cache_memory_bytes: Known[int] | None = None  # vLLM's --kv-cache-memory-bytes: the KV pool per device
    # Admission (vllm/config/scheduler.py @0.33.0; which release applies which: engines/vllm/releases.py)
    max_num_active_seqs: Known[int] | None = None  # admission cap into RUNNING, <= max_num_seqs (>= 0.32)
    watermark: Known[float] | None = None  # share of blocks kept free when admitting (>= 0.24)
    prefill_schedule_interval: Known[int] | None = None  # admit prefills once every N steps
    scheduler_reserve_full_isl: Known[bool] | None = None  # the whole-prompt gate (>= 0.19, default on)
    # Speculative decoding (--speculative-config)
    speculative_method: Known[str] | None = None
    speculative_model: Known[str] | None = None
    num_speculative_tokens: Known[int] | None = None
    num_lookahead_tokens: Known[int] | None = None  # KV slots per request past the scheduled tokens
    # Disaggregated prefill / KV connectors (--kv-transfer-config)
    kv_connector: Known[str] | None = None
    kv_role: Known[str] | None = None  # kv_producer | kv_consumer | kv_both
    kv_lease_duration: Known[int] | None = None  # s: NIXL's hold of a finished prefill's blocks

    def as_json(self) -> dict[str, dict[str, Any]]:
        """{key: {"value", "source"[, "low", "high"][, "basis"]}} for the known fields, sorted by key."""
        out: dict[str, dict[str, Any]] = {}
        for f in sorted(fields(self), key=lambda f: f.name):
            known = getattr(self, f.name)
            if known is not None:
                item: dict[str, Any] = {"value": known.value, "source": str(known.source)}
                if known.uncertain:
                    item["low"], item["high"] = known.low, known.high
                if known.basis:
                    item["basis"] = known.basis
                out[f.name] = item
        return out


def value(known: Known[T] | None) -> T | None:
    """The value of a config field, None when unknown."""
    return None if known is None else known.value


_KINDS: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}
# Each field's value type, read from its annotation (`Known[int] | None` → int).
_TYPES: dict[str, type] = {
    f.name: _KINDS[m.group(1)] for f in fields(ServingConfig) if (m := re.search(r"Known\[(\w+)\]", str(f.type)))
}


# What a number of the config can possibly be, whatever its source; beyond it a value is no real engine's (vLLM
# would refuse it, or no device holds it) and is not used: 0 blocks and the like stay for `config_problem` to name.
RANGES: dict[str, tuple[float, float]] = {
    "max_model_len": (0, 2**31), "max_num_seqs": (0, 2**31), "max_num_batched_tokens": (0, 2**31),
    "block_size": (0, 2**20), "num_gpu_blocks": (0, 2**31), "tensor_parallel_size": (1, 2**16),
    "data_parallel_size": (1, 2**16), "kv_cache_size_tokens": (0, 2**40), "kv_cache_max_concurrency": (0, 1e9),
    "gpu_memory_utilization": (0, 1),
}


def _typed(key: str, raw: object) -> int | float | str | bool | None:
    """`raw` as the field's type; None when it is none, not finite, not whole (an int) or outside `RANGES`."""
    kind = _TYPES[key]
    try:
        if kind is bool:
            return raw if isinstance(raw, bool) else str(raw).lower() in ("1", "true", "yes")
        if kind in (int, float):
            if isinstance(raw, bool):
                return None
            number = float(str(raw)) if not isinstance(raw, int) else raw
            low, high = RANGES.get(key, (-math.inf, math.inf))
            if not (math.isfinite(number) and low <= number <= high):
                return None
            if kind is int:
                return int(number) if number == int(number) else None
            return float(number)
    except (ValueError, OverflowError):
        return None
    return str(raw)


def _log_block_size(log: LogFacts | None) -> int | None:
    """The block size a start-up log states vLLM ran with, not the one it asked (nor a hybrid's raised attention
    block size, which `attention_block_size` carries); None when the log does not say."""
    a = None if log is None else log.attention
    if a is None or a.block_size is None or a.block_size_source is None:
        return None
    if a.block_size_source.startswith(("--block-size", "Setting attention block size")):
        return None
    return a.block_size


def resolve(
    overrides: Overrides,
    vllm_args: dict[str, Any] | None,
    vllm_args_source: Source,
    cache: CapacityInfo | None,
    data_parallel_engines: int,
    models_max_model_len: int | None,
    log: LogFacts | None = None,
) -> ServingConfig:
    """Merge every source by precedence into one ServingConfig (capacity from the log's figures or an estimate:
    `pipeline.capacity.with_capacity`, once the block size and the layout's flags are resolved)."""
    values: dict[str, Known[Any]] = {}

    def offer(key: str, raw: object, source: Source) -> None:
        if raw is None or key in values or key not in _TYPES:
            return
        typed = _typed(key, raw)
        if typed is not None:
            values[key] = Known(typed, source)

    if cache is not None:
        # The block size vLLM exports wins over our flag: its num_gpu_blocks are blocks of that size, so another
        # size would rescale the pool (`contradictions` notes the flag).
        offer("block_size", cache.block_size, Source.CACHE_CONFIG_INFO)
    effective = _log_block_size(log)
    if effective is not None:
        # Where vLLM exports none (the Rust frontend), the block size its start-up log says it ran beats the
        # size asked (ours or its command line's): a backend's "Setting kv cache block size to N", a forced size,
        # the capacity lines.
        offer("block_size", effective, Source.STARTUP_LOG)
    for key, v in overrides.items().items():
        offer(key, v, Source.FLAG)
    if cache is not None:
        # The block size vLLM runs wins over the one its command line asked: the platform or the backend may set
        # another (CPU MLA forces 16, a hybrid raises it so one page holds a Mamba state; from 0.24 the exported
        # value is synced from the engine). `asked_versus_running` says so when they differ.
        offer("block_size", cache.block_size, Source.CACHE_CONFIG_INFO)
    for key, v in (vllm_args or {}).items():
        if key in ("port", "host", "num_gpu_blocks_override"):
            continue
        offer(key, v, vllm_args_source)
    if cache is not None:
        offer("block_size", cache.block_size, Source.CACHE_CONFIG_INFO)
        total = cache.num_gpu_blocks
        if total is not None:
            # From 0.9 every engine's series carries the sum over the data-parallel engines.
            offer("num_gpu_blocks", total // max(data_parallel_engines, 1), Source.CACHE_CONFIG_INFO)
            shared = values.get("num_gpu_blocks")
            if data_parallel_engines > 1 and shared is not None and shared.source is Source.CACHE_CONFIG_INFO:
                values["num_gpu_blocks"] = replace(shared, basis=f"the exported {total:,} shared by "
                                                   f"{data_parallel_engines} data-parallel engines")
        offer("kv_cache_size_tokens", cache.kv_cache_size_tokens, Source.CACHE_CONFIG_INFO)
        offer("kv_cache_max_concurrency", cache.kv_cache_max_concurrency, Source.CACHE_CONFIG_INFO)
        offer("enable_prefix_caching", cache.enable_prefix_caching, Source.CACHE_CONFIG_INFO)
        offer("cache_dtype", cache.cache_dtype, Source.CACHE_CONFIG_INFO)
        offer("gpu_memory_utilization", cache.gpu_memory_utilization, Source.CACHE_CONFIG_INFO)
    # vLLM's own override replaces the profiled count per engine (vllm/v1/core/kv_cache_planning.py:1520-1530
    # @0.33.0); what vLLM exports, when it does, is what it did, so it comes first.
    override = (vllm_args or {}).get("num_gpu_blocks_override")
    if override is not None and "num_gpu_blocks" not in values:
        values["num_gpu_blocks"] = Known(int(override), vllm_args_source,
                                         basis=f"vLLM's --num-gpu-blocks-override {int(override)}")
    offer("max_model_len", models_max_model_len, Source.V1_MODELS)
    connector = values.get("kv_connector")
    if connector is not None and "nixl" in str(connector.value).lower() and "kv_lease_duration" not in values:
        values["kv_lease_duration"] = Known(NIXL_DEFAULT_LEASE, Source.DEFAULT,
                                            basis="NIXL's default kv_lease_duration (vLLM 0.32-0.33)")
    if log is not None:
        # The log's "non-default args" are vLLM's command line as it parsed it; its attention block size line is
        # the block size a hybrid model really got.
        if log.attention_block_size:
            offer("block_size", log.attention_block_size, Source.STARTUP_LOG)
        for key, raw in log.flags:
            if key != "num_gpu_blocks_override":
                offer(key, raw, Source.STARTUP_LOG)
    return ServingConfig(**values)
