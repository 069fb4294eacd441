"""The vLLM wing: everything the product knows about vLLM, behind `exporter.engines.base.Engine`.

- `metrics`: vLLM's metric names (the one table; grafana/ imports it too);
- `read`: the readers (a parsed exposition → `EngineSample` per engine, `CacheInfo` per engine);
- `releases`: the release rules (null block, usage formula, admission gate, data-parallel sums) per version;
- `args`: vLLM's command-line flags and the types vLLM parses them with;
- `batch_defaults`: max_num_seqs and max_num_batched_tokens when nobody sets them, per device class;
- `startup_log`: what a pasted start-up log states about capacity and the attention backend; `capacity`: the
  block counts its figures allow; `attention`: the KV block sizes each attention backend takes;
- `model_len`: the max_model_len vLLM derives from a model's config.json.
"""

from __future__ import annotations

from typing import Any

from ..base import AttentionFacts, BatchDefaults, LogFacts, MetricNames, Samples, Snapshot
from . import args, batch_defaults, capacity, metrics, model_len, read, startup_log


class VllmEngine:
    """vLLM, 0.6 (V0) to 0.33 (V1), as the engine-neutral `Engine` protocol describes it."""

    name = "vLLM"
    names: MetricNames = metrics.NAMES
    wanted: frozenset[str] = metrics.WANTED
    renames: tuple[tuple[str, str], ...] = metrics.RENAMES
    default_port = args.DEFAULT_PORT

    def read(self, expo: Samples, version: str | None = None) -> Snapshot:
        return read.read(expo, version)

    def no_metrics(self, url: str) -> str:
        return f"{url} exports no {metrics.PREFIX} series (is vLLM running with --disable-log-stats?)"

    def parse_args(self, argv: list[str], where: str = "--vllm-args") -> tuple[dict[str, Any], list[str]]:
        return args.parse_vllm_args_noting(argv, where)

    def is_server(self, argv: list[str]) -> bool:
        return args.is_vllm_server(argv)

    def derived_max_model_len(self, cfg: dict[str, Any], model_type: str) -> tuple[int, str, int]:
        return model_len.derived_max_len(cfg, model_type)

    def parse_startup_log(self, text: str) -> LogFacts:
        return startup_log.parse(text)

    def batch_defaults(self, version: str | None, world_size: int | None,
                       performance_mode: str | None) -> BatchDefaults:
        return batch_defaults.batch_defaults(version, world_size, performance_mode)

    def blocks_from_log_figures(self, facts: LogFacts, block_size: int, per_request: int) -> tuple[int, int] | None:
        return capacity.blocks_from_figures(facts, block_size, per_request)

    def attention_facts(self, text: str) -> AttentionFacts:
        return startup_log.attention(text)

    def idle_gauges_doubt(self, frontend: str | None, frontend_read: bool, snap: Snapshot) -> str | None:
        """vLLM 0.32's Rust frontend (vllm-rs) reads 0 running and waiting on most scrapes under load
        (tests/fixtures/vllm-0.32.0-rust, false-full-unpinned: 47 of 47 loaded frames). Its /version names it
        (`rust_frontend_version`); without /version (a saved body) its exposition does: it exports no
        `vllm:cache_config_info`, which the Python frontend exports on every release recorded here (0.8.5 to
        0.32.0: `PrometheusStatLogger.log_engine_initialized` calls `log_metrics_info("cache_config", ...)` at every
        start, vllm/v1/metrics/loggers.py:1354-1355 @0.32.0)."""
        if frontend is not None and frontend.startswith("rust"):
            return "this server is vLLM's Rust frontend (its /version says so)"
        if not frontend_read and not snap.cache_info:
            return (f"this exposition has no {metrics.CACHE_CONFIG}, which vLLM's Rust frontend never exports (the "
                    "Python frontend does, unless a relabelling drops it), so it may come from the Rust frontend")
        return None


VLLM = VllmEngine()
