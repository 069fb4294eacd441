"""Every default and threshold of vllm-headroom, written once.

The sidecar (`pipeline.target.Settings`, `pipeline.verdict.Thresholds`), the CLI's flags and help, the
monitoring generator (`grafana/config.py`: rules, alerts, dashboards), the Helm chart's `values.yaml` and
its schema, and the kustomize manifests all take their values from here; `tests/unit/test_defaults.py`
fails when a copy drifts. Durations are seconds, sizes bytes. `as_text()` gives each in the one grammar
of `core.units` (`5s`, `16MiB`), as users write them.
"""

from __future__ import annotations

from typing import Final

# -- scraping (serve) ----------------------------------------------------------------------------------
LISTEN_ADDRESS: Final = "0.0.0.0:9478"  # our /metrics, /api/v1/diagnosis, /healthz, /readyz
HEALTH_ADDRESS: Final = ""  # /healthz and /readyz alone, for the kubelet: '' = the listen host at its port + 1 (9479)
PORT: Final = 9478
TARGET: Final = "http://127.0.0.1:8000"  # vLLM's default host and port
SCRAPE_INTERVAL: Final = 5.0  # s, how often vLLM's /metrics is read
SCRAPE_TIMEOUT: Final = 3.0  # s, one fetch (serve and the one-shot commands alike); must be < interval
SCRAPE_TIMEOUT_SHARE: Final = 0.8  # of a scrape interval shorter than SCRAPE_TIMEOUT, when no timeout is given
SCRAPE_MAX_BYTES: Final = 16 * 1024 * 1024  # refuse larger expositions
# Per scrape of one target, what the sidecar keeps of a body at most (Prometheus' sample_limit): samples of the
# families it reads (vLLM 0.32 exports ~50 per engine; 50,000 hold ~25 MB while parsed) and engines it judges.
SCRAPE_MAX_SAMPLES: Final = 50_000
SCRAPE_MAX_ENGINES: Final = 1024
# The status page's and /api/v1/history's 15 minutes, over all engines together: 250,000 points of 88 bytes (22 MB),
# so 1,000 engines keep 15 minutes at a 5 s interval and more engines keep their newest share each.
HISTORY_MAX_POINTS: Final = 250_000
MODELS_INTERVAL: Final = 60.0  # s, how often /v1/models, /version and /proc are read
CMDLINE_DISCOVERY: Final = True  # read vLLM's flags from /proc/<pid>/cmdline when visible
SCRAPE_TRUST_ENV: Final = False  # HTTP(S)_PROXY, .netrc and SSL_CERT_* from the environment for the targets
SCRAPE_INSECURE_SKIP_VERIFY: Final = False  # an https target's certificate is verified

# -- our HTTP side (serve) -----------------------------------------------------------------------------
WEB_MAX_CONNECTIONS: Final = 1024  # client connections held at once (fewer when the file limit asks)
WEB_READ_TIMEOUT: Final = 10.0  # s for a client's request to arrive whole (slowloris)
WEB_IDLE_TIMEOUT: Final = 5.0  # s a keep-alive connection may wait for its next request
WEB_WRITE_TIMEOUT: Final = 30.0  # s a client may read nothing of an answer before it is dropped
WEB_MAX_REQUESTS: Final = 16  # requests for a body answered at once (/metrics, /api/v1/diagnosis, ...)
WEB_MAX_EXPENSIVE: Final = 2  # the status page and /api/v1/history, in a lane of their own
WEB_QUEUE: Final = 256  # requests waiting for their turn; beyond it 503 with Retry-After
WEB_OPENAPI: Final = False  # serve the OpenAPI schema at /openapi.json

# -- request profile -----------------------------------------------------------------------------------
PROFILE_QUANTILE: Final = 0.99  # quantile of request lengths for worst-case math
METRIC_PREFIX: Final = "vllm_headroom_"  # every series this product exports starts with it
PROFILE_WINDOW: Final = 300.0  # s, window of the length quantiles
# Snapshots a length window keeps at most (pipeline/profile.py `Window`): a scrape closer than PROFILE_WINDOW / this
# to the one before it replaces it, so an engine's windows hold ~the same memory at a 1 s interval as at the 5 s
# default (~65 snapshots each), not five times as much.
PROFILE_WINDOW_SNAPSHOTS: Final = 64

# -- verdict thresholds --------------------------------------------------------------------------------
FULL_USAGE: Final = 0.8  # usage at or above which waiting is judged KV-bound
FALSE_FULL_HOLD: Final = 30.0  # s, false-full must hold this long before it is flagged
STUCK_AFTER: Final = 60.0  # s without an engine step while requests wait: stuck
LEAK_AFTER: Final = 120.0  # s of blocks in use with nothing running or waiting: leak
PREEMPT_WINDOW: Final = 60.0  # s, preempting while a preemption happened this recently
CEILING_WINDOW: Final = 300.0  # s of running counts that stand in for an unknown max_num_seqs
# With chunked prefill, steps that used on average at least this share of the token budget spent it (a step with
# budget left admits a partial chunk; prompt tokens are counted when a prefill completes, so averages are lumpy).
# Engine truth (tests/fixtures/SCORE.md, 0.32.0 prod-preempt): budget-stopped steps averaged 8,106-8,340 of 8,192.
BUDGET_SPENT_SHARE: Final = 0.95
PROFILE_MIN_REQUESTS: Final = 20  # fewer finished requests behind the profile: worst case at max_model_len
# vLLM V1's max_num_batched_tokens when nobody sets it, for the OpenAI server on CPU and on GPUs under 70 GiB
# (vllm/engine/arg_utils.py `get_batch_defaults` @0.32.0; 8192 on H100/H200-class, 16384 from 160 GiB):
# the device is not exported, so the sidecar assumes this and says so.
VLLM_DEFAULT_MAX_NUM_BATCHED_TOKENS: Final = 2048
# Every device class's default (the same rule): what an unknown budget may be, where a figure depends on it.
VLLM_MAX_NUM_BATCHED_TOKENS_DEFAULTS: Final = (2048, 8192, 16384)

# -- autoscaling (the replica signal, exporter/pipeline/replicas.py) ---------------------------------------
# Share of a replica's worst-case capacity (min(max_num_seqs, floor(B / W))) the replica signal fills: 0.8 keeps
# 20 % headroom for arrivals between two autoscaler periods.
TARGET_UTILIZATION: Final = 0.8
# Seconds of the sidecar's scrapes over which the replica signal reads the offered load (arrivals x time in the
# engine): KEDA's default pollingInterval, so each poll reads the load since the last one (HPA's sync is 15 s).
LOAD_WINDOW: Final = 30.0

# -- demo and replay -----------------------------------------------------------------------------------
DEMO_LISTEN_ADDRESS: Final = "127.0.0.1:9478"
DEMO_SPEED: Final = 4.0
DEMO_FALSE_FULL_HOLD: Final = 10.0  # s: the recorded incident is short, so the flag rises within it
REPLAY_LISTEN_ADDRESS: Final = "127.0.0.1:8000"

# -- recommend -----------------------------------------------------------------------------------------
RECOMMEND_MIN_REQUESTS: Final = 200  # refuse to recommend (or advise raising max_num_seqs) from fewer finished requests

# -- probe (a controlled load against a staging server) -------------------------------------------------
PROBE_MAX_REQUESTS: Final = 500  # never send more requests than this in one probe
PROBE_STEP_SCRAPES: Final = 6  # /metrics scrapes recorded per concurrency step, once the engine holds the step
PROBE_STEP_INTERVAL: Final = 0.5  # s between those scrapes
PROBE_STEP_SETTLE: Final = 30.0  # s at most to wait for the engine to hold every request of a step
PROBE_AUTO_STEPS: Final = 24  # the automatic ramp steps one by one up to this many clients, then spreads them
# Consecutive failures (a request answered 5xx/429 or lost its connection; a /metrics read failed) with no success
# between them after which the probe stops: the server, not the configuration, decides what it sees from then on.
PROBE_FAILURE_LIMIT: Final = 3
# The capacity ledger: theoretical concurrency against what actually ran. Within 20 % is normal; beyond 50 %
# something is misconfigured; in between, look at fragmentation or at what the metric counts.
LEDGER_NORMAL_GAP: Final = 0.2
LEDGER_MISCONFIGURED_GAP: Final = 0.5

# -- estimate (vLLM's own defaults where it has one) ---------------------------------------------------
ESTIMATE_BLOCK_SIZE: Final = 16
ESTIMATE_MAX_NUM_SEQS: Final = 256
ESTIMATE_MAX_NUM_BATCHED_TOKENS: Final = 8192
ESTIMATE_GPU_MEMORY_UTILIZATION: Final = 0.92
ESTIMATE_ACTIVATION_BYTES: Final = 2 * 1024**3  # activations, non-torch memory and CUDA graphs per device
# vLLM's default gpu_memory_utilization: 0.9 up to 0.19, 0.92 from 0.20 (vllm/config/cache.py); the sidecar's
# estimated capacity takes both ends when the command line states none.
VLLM_GPU_MEMORY_UTILIZATION_DEFAULTS: Final = (0.9, 0.92)
# The activation reserve (activations, non-torch memory, CUDA graphs) the sidecar's estimate spans when unstated.
ACTIVATION_BYTES_RANGE: Final = (0, 2 * ESTIMATE_ACTIVATION_BYTES)
ESTIMATE_TENSOR_PARALLEL_SIZE: Final = 1

# Durations and sizes by name, for generators that write them in the units grammar (Helm, rules, docs).
DURATIONS: Final[dict[str, float]] = {
    "scrape_interval": SCRAPE_INTERVAL,
    "scrape_timeout": SCRAPE_TIMEOUT,
    "models_interval": MODELS_INTERVAL,
    "profile_window": PROFILE_WINDOW,
    "false_full_hold": FALSE_FULL_HOLD,
    "stuck_after": STUCK_AFTER,
    "leak_after": LEAK_AFTER,
    "preempt_window": PREEMPT_WINDOW,
    "load_window": LOAD_WINDOW,
}


def scrape_timeout_for(interval: float) -> float:
    """The timeout of one scrape when none is given: SCRAPE_TIMEOUT, or 80 % of a shorter interval (seconds)."""
    return min(SCRAPE_TIMEOUT, SCRAPE_TIMEOUT_SHARE * interval)
