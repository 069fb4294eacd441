"""vLLM's metric names as the monitoring bundle reads them: the one place grafana/ spells a `vllm:` name.

Rules, promtool cases and dashboards import these constants. When the engine wing's names table
(exporter/engines/vllm/metrics.py) exists, this module re-exports from it and nothing else in grafana/ changes.
Upstream: vllm/v1/metrics/loggers.py (V1) and vllm/engine/metrics.py (V0); the versions each name exists in are in
../shared/reference/vllm-metrics-and-admission.md.
"""

from __future__ import annotations

PREFIX = "vllm:"

CACHE_CONFIG_INFO = "vllm:cache_config_info"  # labels: block_size, num_gpu_blocks ("None" on V1 0.8.x), engine (V1)
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
NUM_REQUESTS_WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"  # reason="capacity"|"deferred", 0.20+
KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"  # 0.9+, a fraction despite the name
GPU_CACHE_USAGE_PERC = "vllm:gpu_cache_usage_perc"  # V0 and V1 <= 0.10 (counts the null block on V1)
ENGINE_SLEEP_STATE = "vllm:engine_sleep_state"  # 0.12+, sleep_state="awake"|"weights_offloaded"|"discard_all"
NUM_PREEMPTIONS = "vllm:num_preemptions"  # exposed as vllm:num_preemptions_total (the bare name: some parsers)
REQUEST_SUCCESS_TOTAL = "vllm:request_success_total"  # finished_reason label
ITERATION_TOKENS = "vllm:iteration_tokens_total"  # a histogram: its _count is the engine's step count
GENERATION_TOKENS_TOTAL = "vllm:generation_tokens_total"
REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"  # histogram, buckets 1-2-5 up to max_model_len
REQUEST_MAX_TOKENS = "vllm:request_params_max_tokens"  # histogram, same buckets
REQUEST_QUEUE_TIME = "vllm:request_queue_time_seconds"  # histogram
TIME_TO_FIRST_TOKEN = "vllm:time_to_first_token_seconds"  # histogram
