"""vLLM's metric names: the one table every reader, message, dashboard and rule takes them from.

Versions 0.6 (V0) to 0.33 (V1); where a name changed, both are listed with the releases that export each
(reference §1.2, checked against the recordings under tests/fixtures/vllm-X/). A renamed vLLM metric is a
change here (and in `read.py` when the reading differs); `tests/unit/test_architecture.py` fails on a literal
vLLM name anywhere else in `exporter/` or `grafana/dashboards.py`.

Sample names carry their suffix as exported (`_total`, `_count`); a histogram is named by its family (the
readers append `_bucket`, `_count` and `_sum`).
"""

from __future__ import annotations

from ..base import MetricNames

PREFIX = "vllm:"  # every vLLM series; Ray's exporter writes `ray_vllm:` / `ray_vllm_` (folded, see RENAMES)
# Prefixes the exposition parser folds into PREFIX, once, so nothing downstream sees them.
RENAMES: tuple[tuple[str, str], ...] = (("ray_vllm:", PREFIX), ("ray_vllm_", PREFIX))

# -- scheduler gauges -------------------------------------------------------------------------------
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"  # >= 0.20, label `reason` (capacity, deferred)
SWAPPED = "vllm:num_requests_swapped"  # V0 only
KV_USAGE = "vllm:kv_cache_usage_perc"  # V1 >= 0.9
GPU_USAGE = "vllm:gpu_cache_usage_perc"  # V0, V1 <= 0.10 (hidden in 0.11, gone from 0.12)
SLEEP_STATE = "vllm:engine_sleep_state"  # label `sleep_state` ("awake" 1 while awake; --enable-sleep-mode)
CACHE_CONFIG = "vllm:cache_config_info"  # labels: block_size, num_gpu_blocks, ... (no model_name label)

# -- counters ---------------------------------------------------------------------------------------
PREEMPTIONS_FAMILY = "vllm:num_preemptions"
PREEMPTIONS = PREEMPTIONS_FAMILY + "_total"  # the `_total` sample name in every version
STEPS = "vllm:iteration_tokens_total_count"  # one observation per engine step
GENERATION_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
# Prefix-cache lookups, in tokens (V1): queries = prompt tokens looked up, hits = tokens found cached.
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
REQUEST_SUCCESS = "vllm:request_success_total"  # finished requests, label `finished_reason`

# -- why requests are deferred (waiting_by_reason "deferred" counts a request from its first skip until admitted)
LORA_INFO = "vllm:lora_requests_info"  # labels max_lora, waiting_lora_adapters, running_lora_adapters; value: time
KV_FETCH_BY_STAGE = "vllm:num_requests_kv_fetch_by_stage"  # kv_consumer only: waiting_to_start|in_progress|...

# -- KV connectors (P/D disaggregation: NIXL, Mooncake) and KV offloading (counters as exposed, with _total) -----
# vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py:244-283 and mooncake/stats.py:235-258 @0.33.0
# (the NIXL ones also @0.32.0); labels model_name, engine.
CONNECTOR_COUNTERS: tuple[tuple[str, str, str], ...] = (  # (sample name, connector, role)
    ("vllm:nixl_num_failed_transfers_total", "nixl", "failed_transfers"),
    ("vllm:nixl_num_failed_notifications_total", "nixl", "failed_notifications"),
    ("vllm:nixl_num_kv_expired_reqs_total", "nixl", "kv_expired_requests"),
    ("vllm:nixl_num_notifications_after_expiry_total", "nixl", "notifications_after_expiry"),
    ("vllm:mooncake_num_failed_transfers_total", "mooncake", "failed_transfers"),
    ("vllm:mooncake_num_failed_recvs_total", "mooncake", "failed_receives"),
    ("vllm:mooncake_num_kv_expired_reqs_total", "mooncake", "kv_expired_requests"),
)
CONNECTOR_TRANSFERS = (("vllm:nixl_xfer_time_seconds_count", "nixl"),  # one observation per completed transfer
                       ("vllm:mooncake_xfer_time_seconds_count", "mooncake"))
# 0.33: the offloading connector's tiers, one series per tier and engine (labels: cpu_num_chunks,
# cpu_blocks_per_chunk, cpu_kv_cache_size_bytes, cpu_kv_cache_size_tokens; value 1), and the CPU tier's usage:
# vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py:27,392-398, vllm/v1/kv_offload/cpu/common.py
KV_OFFLOAD_CONFIG = "vllm:kv_offload_config_info"
KV_OFFLOAD_CPU_USAGE = "vllm:kv_offload_cpu_cache_usage_perc"

# -- histograms (families) --------------------------------------------------------------------------
PROMPT_HIST = "vllm:request_prompt_tokens"  # observed when a request finishes
MAX_TOKENS_HIST = "vllm:request_params_max_tokens"
GENERATION_HIST = "vllm:request_generation_tokens"
HISTOGRAMS = (PROMPT_HIST, MAX_TOKENS_HIST, GENERATION_HIST)  # the length histograms the sidecar reads
# Seconds from arrival to finish (V0 and V1): requests finished since the last scrape that lived longer than the
# interval were in flight at that scrape, whatever its gauges said (pipeline/verdict.py checks the gauges with it).
E2E_LATENCY_HIST = "vllm:e2e_request_latency_seconds"
QUEUE_TIME_HIST = "vllm:request_queue_time_seconds"
TTFT_HIST = "vllm:time_to_first_token_seconds"

# The sample names the sidecar parses out of an exposition (everything else is skipped unparsed).
WANTED: frozenset[str] = frozenset(
    {
        RUNNING,
        WAITING,
        WAITING_BY_REASON,
        SWAPPED,
        KV_USAGE,
        GPU_USAGE,
        PREEMPTIONS,
        CACHE_CONFIG,
        STEPS,
        GENERATION_TOKENS,
        PROMPT_TOKENS,
        PREFIX_QUERIES,
        PREFIX_HITS,
        SLEEP_STATE,
        LORA_INFO,
        KV_FETCH_BY_STAGE,
        KV_OFFLOAD_CONFIG,
        KV_OFFLOAD_CPU_USAGE,
        *(name for name, _c, _r in CONNECTOR_COUNTERS),
        *(name for name, _c in CONNECTOR_TRANSFERS),
    }
    | {h + suffix for h in (*HISTOGRAMS, E2E_LATENCY_HIST) for suffix in ("_bucket", "_count", "_sum")}
)

# The same table by role, as the engine-neutral interface hands it to the generator and the messages.
NAMES = MetricNames(
    prefix=PREFIX,
    running=RUNNING,
    waiting=WAITING,
    waiting_by_reason=WAITING_BY_REASON,
    kv_usage=KV_USAGE,
    kv_usage_legacy=GPU_USAGE,
    sleep_state=SLEEP_STATE,
    cache_config=CACHE_CONFIG,
    preemptions_family=PREEMPTIONS_FAMILY,
    preemptions=PREEMPTIONS,
    steps=STEPS,
    generation_tokens=GENERATION_TOKENS,
    prompt_tokens=PROMPT_TOKENS,
    prefix_queries=PREFIX_QUERIES,
    prefix_hits=PREFIX_HITS,
    request_success=REQUEST_SUCCESS,
    prompt_hist=PROMPT_HIST,
    max_tokens_hist=MAX_TOKENS_HIST,
    generation_hist=GENERATION_HIST,
    queue_time_hist=QUEUE_TIME_HIST,
    ttft_hist=TTFT_HIST,
)
