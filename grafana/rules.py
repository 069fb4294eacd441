"""Prometheus recording and alerting rules of the bundle, computed from vLLM's own metrics inside Prometheus.

The recording rules mirror exporter/pipeline/derive.py where raw vLLM data allows it:

  N  = num_gpu_blocks of one engine  = label of vllm:cache_config_info / engines of the API server; where it has no
                                       number (V1 0.8.x: "None") or is not scraped, B is the sidecar's
                                       vllm_headroom_kv_capacity_blocks of the same pod and engine, else unknown
                                       (instance_engine:vllm_kv_capacity_unknown:bool, VLLMKVCapacityUnknown)
  B  = usable blocks                 = N - 1 (block 0 is V1's null block); N on V0 (no null block; its series
                                       carry no `engine` label, every V1's do)
  used = round(u * (B + c)) - c      c = 1 where usage counts the null block (V1 <= 0.10, recognised by the
                                     deprecated vllm:gpu_cache_usage_perc beside it), else 0; free = B - used
  P, M = profile prompt / max_tokens = upper bound of the histogram bucket holding the q-quantile over the window,
                                       else over the server's lifetime, else the top finite bucket (max_model_len)
  W  = worst-case blocks per request = ceil(min(P + M, top finite bucket) / bs)

Identity: every aggregation keeps cluster, namespace, job, instance, pod and container (whichever are present), and
every join matches on all of them, so one pod scraped by two jobs, two clusters with the same pod IP, two API
servers in one pod and data-parallel engines never collide. Alerts drop `job` (`max without`), so a pod scraped by
two jobs pages once, and carry `vllm_endpoint`, the host:port of the vLLM they are about: vLLM's own `instance`, or
the sidecar's `target` URL (its host:port; a loopback target is the sidecar's own host with the target's port). It is
the label an engine alert shares with its sidecar's alerts: alone outside Kubernetes, beside namespace and pod inside.
Two vLLMs on one machine (or in one pod) on ports 8000 and 8001 are two endpoints and never silence each other.

Windows: every range is WINDOW (5m), at least four samples at a 60 s scrape interval. Usage is classified on
max_over_time over that window (hysteresis), so usage hovering at the threshold does not flip false-full and
KV-full on every evaluation.

Label values become numbers with histogram_quantile: a pair of buckets {le="<value>"} = 1 and {le="+Inf"} = 1
has its 1.0-quantile exactly at <value>. The same trick turns "first bucket whose cumulative share reaches q"
into that bucket's upper bound: feed histogram_quantile(1, ...) the 0/1 indicator `share >= bool q`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.core.units import parse_duration

from .config import WINDOW, Config

# ---------------------------------------------------------------------------------------------------------------
# Recording rules

R = "instance_engine:"
INF, NOT_INF = 'le="+Inf"', 'le!="+Inf"'
DEFERRED = 'reason="deferred"'
ASLEEP = 'sleep_state!="awake"'
PREEMPTIONS = '__name__=~"vllm:num_preemptions(_total)?"'
V1_SERIES, V0_SERIES = 'engine!=""', 'engine=""'  # V1 labels every series with its engine, V0 none


def _now(cfg: Config, selector: str) -> str:
    """`selector`'s latest sample within the scrape-gap bridge: a failed scrape makes Prometheus write a stale marker
    on every series of the target, and without this one failed scrape (at a 60 s interval, one in five) would
    empty every flag and restart every pending alert's `for:`. The price: a vanished target's series stay in the
    sums for up to `cfg.scrape_gap`."""
    return f"last_over_time({selector}[{cfg.scrape_gap}])"


def _cache_info(cfg: Config) -> str:
    """vllm:cache_config_info per API server and engine. V1 0.8.x exports it without `engine` while its gauges carry
    engine "0" (reference §1.5, `loggers.py:348-366 @0.8.5`): that info is engine 0's, relabelled so it joins. V0's
    (no `engine` anywhere) stays engine-less."""
    info = _now(cfg, f"vllm:cache_config_info{cfg.sel()}")
    engineless = _now(cfg, f"vllm:cache_config_info{cfg.sel(V0_SERIES)}")
    v1 = f"group by ({cfg.by()}) ({_now(cfg, 'vllm:num_requests_running' + cfg.sel(V1_SERIES))})"
    relabelled = f'label_replace(\n{engineless}\nand on ({cfg.by()})\n{v1}\n, "engine", "0", "engine", "")'
    return f"(\n{relabelled}\nor\n(\n{info}\nunless on ({cfg.by()})\n{relabelled}\n)\n)"


def _label_value(cfg: Config, label: str) -> str:
    """A numeric label of vllm:cache_config_info as a sample value, per API server and engine: the largest, when a
    restart with another config leaves the old info series within the scrape-gap bridge for a few minutes. No
    sample where the label is not a number (V1 0.8.x exports num_gpu_blocks="None") or missing: histogram_quantile
    of the lone +Inf bucket is NaN, dropped by `>= 0`, so a fallback can take its place."""
    info = _cache_info(cfg)
    return (
        f"(histogram_quantile(1, max by ({cfg.by('engine', 'le')}) (\n"
        f'  label_replace({info}, "le", "$1", "{label}", "([0-9]+)") * 0\n'
        f'  or label_replace({info}, "le", "+Inf", "engine", ".*") * 0 + 1\n'
        f")) >= 0)"
    )


def _from_sidecar(cfg: Config, metric: str) -> str:
    """The sidecar's per-engine `metric` (e.g. vllm_headroom_kv_capacity_blocks) moved onto vLLM's own series of the
    same pod and engine: per API server (full identity) and engine, like the rules it stands in for. The three
    joins are _pod_matches' (cluster on both sides, on vLLM's only, on the sidecar's only) with the sidecar's
    value carried over. V0's series have no engine label while its sidecar calls the one engine "0": an engine-less
    copy joins them."""
    on = ", ".join((*POD_JOIN, "model_name", "engine"))
    vllm = _endpoint(f"max by ({cfg.by('model_name', 'engine')}) ({_now(cfg, 'vllm:num_requests_running' + cfg.sel())})"
                 " * 0")

    def side(matcher: str, by: str) -> str:
        s = _now(cfg, f"{metric}{{{matcher}}}" if matcher else metric)
        return f"max by ({by}) (\n" + _endpoint(f'{s}\nor\nlabel_replace({s}, "engine", "", "engine", "0")') + "\n)"

    pairs = [(f"cluster, {on}", side("", f"cluster, {on}")), (on, side('cluster=""', on)),
             (f"cluster, {on}", side("", on))]
    joined = "\nor\n".join(f"(\n{vllm}\n+ on ({o}) group_left ()\n{r}\n)" for o, r in pairs)
    return f"max by ({cfg.by('engine')}) (\n{joined}\n)"


def _top_bucket(cfg: Config, histogram: str) -> str:
    """The highest finite bucket bound of a length histogram: vLLM sizes them to max_model_len (1-2-5 steps)."""
    by = cfg.by("model_name", "engine", "le")
    return (
        f"histogram_quantile(1, max by ({by}) (\n"
        f"  {_now(cfg, histogram + '_bucket' + cfg.sel(NOT_INF))} * 0\n"
        f"  or {_now(cfg, histogram + '_bucket' + cfg.sel(INF))} * 0 + 1\n"
        f"))"
    )


def _bucket_quantile(cfg: Config, histogram: str) -> str:
    """Upper bound of the bucket holding the profile quantile over the window; lifetime when nothing finished in
    it; the top finite bucket (max_model_len) when nothing ever finished.

    The window's counts are each bucket's rise over the samples in the window (`x - min_over_time(x[w])`), not
    increase(): increase() extrapolates each series on its own, and buckets whose counters began apart (a server
    that served other prompts before Prometheus' first scrape) come out with unequal factors. Seen live on vLLM
    0.32.0: the le=20 share of 16-token prompts fell under 0.99 and the prompt read as the top bucket (500).
    A counter reset inside the window counts from the lowest sample, the same for every bucket."""
    by = cfg.by("model_name", "engine")
    inf = cfg.sel(INF)

    def rise(series: str, rng: str) -> str:
        return f"({_now(cfg, series)} - min_over_time({series}[{rng}]))"

    def over(rng: str) -> str:
        if rng:
            buckets = f"sum by ({by}, le) {rise(histogram + '_bucket' + cfg.sel(), rng)}"
            total = f"sum by ({by}) {rise(histogram + '_bucket' + inf, rng)}"
        else:
            buckets = f"sum by ({by}, le) ({_now(cfg, histogram + '_bucket' + cfg.sel())})"
            total = f"sum by ({by}) ({_now(cfg, histogram + '_bucket' + inf)})"
        return (
            f"histogram_quantile(1, (\n"
            f"  {buckets}\n"
            f"  / ignoring (le) group_left ()\n"
            f"  {total}\n"
            f") >= bool {cfg.profile_quantile})"
        )

    return f"(\n{over(cfg.profile_window)} > 0\n)\nor\n(\n{over('')} > 0\n)\nor\n{_top_bucket(cfg, histogram)}"


# A sidecar target on the loopback interface (localhost, 127.0.0.0/8, [::1]; 0.0.0.0 connects there too) is vLLM in
# the sidecar's own network namespace: the same pod or machine. RE2 has no lookahead, hence the joined helper label.
LOOPBACK = r"(?:localhost|127(?:\.[0-9]+){3}|0\.0\.0\.0|\[::1\])"
_LOOPBACK_PROMQL = LOOPBACK.replace("\\", "\\\\")  # inside a PromQL string literal: backslashes doubled
_SCHEME = "[A-Za-z][A-Za-z0-9+.-]*"  # of a target URL
_PORT = "(?::[0-9]+)?"  # optional, of a host
# A sidecar target URL on the loopback interface, as a PromQL regex literal.
LOCAL_TARGET = f"{_SCHEME}://{_LOOPBACK_PROMQL}{_PORT}(?:/.*)?"
ENDPOINT = "vllm_endpoint"
_TMP = "vllm_headroom_endpoint_tmp"


def _endpoint(expr: str) -> str:
    """`expr` with a `vllm_endpoint` label: host:port of the vLLM a series is about.

    vLLM's own series: their `instance`. The sidecar's: its `target` (the vLLM URL it scrapes; every per-target series
    carries it), scheme and path dropped, so one sidecar's report about host a's vLLM never lands on the host the
    sidecar runs on, nor one vLLM's on another vLLM of the same machine. A loopback target (localhost, 127.0.0.0/8,
    [::1]) is the sidecar's own pod or machine: the sidecar's instance host with the target's port, which is what
    vLLM's series carry (a Kubernetes pod IP and vLLM's port), never `localhost`; a sidecar instance without a port
    (relabeled to the pod's name) is taken whole, as vLLM's then is. A default port (:80, :443) is
    dropped on both sides: Prometheus 2 adds it to a port-less instance, Prometheus 3 and a URL do not."""
    by_instance = f'label_replace(\n{expr}\n, "{ENDPOINT}", "$1", "instance", "(.+)")'
    by_target = f'label_replace(\n{by_instance}\n, "{ENDPOINT}", "$1", "target", "{_SCHEME}://([^/]+)(?:/.*)?")'
    joined = f'label_join(\n{by_target}\n, "{_TMP}", "@", "{ENDPOINT}", "instance")'
    # A port-less sidecar instance (relabeled to a pod or host name) means vLLM's is port-less too: taken as is.
    bare = f'label_replace(\n{joined}\n, "{ENDPOINT}", "$1", "{_TMP}", "{_LOOPBACK_PROMQL}{_PORT}@(.+)")'
    back = (f'label_replace(\n{bare}\n, "{ENDPOINT}", "${{2}}${{1}}", "{_TMP}", '
            f'"{_LOOPBACK_PROMQL}(:[0-9]+)?@(.+?):[0-9]+")')
    plain = f'label_replace(\n{back}\n, "{ENDPOINT}", "$1", "{ENDPOINT}", "(.*[^:]):(?:80|443)")'
    return f'label_replace(\n{plain}\n, "{_TMP}", "", "{_TMP}", ".*")'


# Labels a vLLM series and its sidecar's series about the same vLLM always share: namespace and pod in Kubernetes,
# the endpoint everywhere. `cluster` is matched when both sides carry it; a per-job relabeling often adds it on one
# side only.
POD_JOIN = ("namespace", "pod", ENDPOINT)


def _pod_matches(rhs: Callable[[str], str], *extra: str) -> list[tuple[str, str]]:
    """(`on` list, right-hand side) pairs that match a series to the other side's series of the same pod whether
    or not each side carries `cluster`. `rhs(matcher)` is the right-hand expression with `matcher` added to its
    selector ('' for none)."""
    on = ", ".join((*POD_JOIN, *extra))
    return [(f"cluster, {on}", rhs("")),  # same cluster, or neither side has one
            (on, rhs('cluster=""')),  # the right side has none: any cluster on the left
            (f"cluster, {on}", f'group by ({on}) (\n{rhs("")}\n)')]  # the left has none: any cluster on the right


def _unless_same_pod(lhs: str, rhs: Callable[[str], str], *extra: str) -> str:
    return lhs + "".join(f"\nunless on ({on})\n{r}" for on, r in _pod_matches(rhs, *extra))


def _and_same_pod(lhs: str, rhs: Callable[[str], str], *extra: str) -> str:
    return "\nor\n".join(f"(\n{lhs}\nand on ({on})\n{r}\n)" for on, r in _pod_matches(rhs, *extra))


def scraped_vllm(cfg: Config, matcher: str) -> str:
    """vLLM's own engine series, present: Prometheus scrapes it (not down, not reloading)."""
    return (f"group by (cluster, {', '.join(POD_JOIN)}) (\n"
            + _endpoint(f"vllm:num_requests_running{cfg.sel(matcher)}") + "\n)")


def recording_rules(cfg: Config) -> list[dict[str, str]]:
    """`level:metric:operation` rules; instance_engine: = per API server (full identity) and engine."""
    s = cfg.sel()
    e = cfg.by("engine")
    me = cfg.by("model_name", "engine")
    w = WINDOW
    extra = "," + cfg.vllm_selector if cfg.vllm_selector else ""
    demand = f"{R}vllm_num_requests_running:max * {R}vllm_worst_case_blocks_per_request:ceil"

    def now(selector: str) -> str:
        return _now(cfg, selector)

    r: list[tuple[str, str]] = [
        # Engines, not info series: across a restart that changed the config, the old info series is still within
        # the scrape-gap bridge beside the new one.
        ("instance:vllm_engines:count", f"count by ({cfg.by()}) (max by ({e}) ({_cache_info(cfg)}))"),
        # From 0.9 num_gpu_blocks is the sum over the data-parallel engines of one API server. Absent where
        # cache_config_info has no number (V1 0.8.x: "None"), lacks the label, or is not scraped.
        (f"{R}vllm_num_gpu_blocks:per_engine",
         _label_value(cfg, "num_gpu_blocks") + f"\n/ on ({cfg.by()}) group_left ()\ninstance:vllm_engines:count"),
        # cache_config_info's, else the sidecar's (its --block-size flag or vLLM's command line).
        (f"{R}vllm_block_size_tokens:max",
         f"{_label_value(cfg, 'block_size')}\nor on ({e})\n{_from_sidecar(cfg, 'vllm_headroom_block_size_tokens')}"),
        # 1 where block 0 is vLLM's null block (V1: its series carry `engine`, V1 0.8.x's cache_config_info does
        # not); 0 on V0, whose pool has none.
        (f"{R}vllm_null_block:bool",
         f"max by ({e}) ({now('vllm:num_requests_running' + cfg.sel(V1_SERIES))} * 0 + 1)\n"
         f"or\nmax by ({e}) ({now('vllm:num_requests_running' + cfg.sel(V0_SERIES))} * 0)"),
        # From cache_config_info; where it has no number, the sidecar's usable blocks (null block already out) of
        # the same pod and engine, which it takes from its --num-gpu-blocks flag. Neither: capacity unknown below.
        (f"{R}vllm_kv_capacity_blocks:usable",
         f"(\n{R}vllm_num_gpu_blocks:per_engine\n- on ({e})\n{R}vllm_null_block:bool\n)\n"
         f"or on ({e})\n{_from_sidecar(cfg, 'vllm_headroom_kv_capacity_blocks')}"),
        (f"{R}vllm_kv_capacity_tokens:usable",
         f"{R}vllm_kv_capacity_blocks:usable\n* on ({e}) group_left ()\n{R}vllm_block_size_tokens:max"),
        # vllm:kv_cache_usage_perc from 0.9, vllm:gpu_cache_usage_perc before (both in 0.9-0.10: the new one wins).
        (f"{R}vllm_kv_usage_ratio:max",
         f"max by ({me}) ({now('vllm:kv_cache_usage_perc' + s)})\n"
         f"or\nmax by ({me}) ({now('vllm:gpu_cache_usage_perc' + s)})"),
        (f"{R}vllm_kv_usage_ratio:max_over_time{w}",
         f"max by ({me}) (max_over_time(vllm:kv_cache_usage_perc{s}[{w}]))\n"
         f"or\nmax by ({me}) (max_over_time(vllm:gpu_cache_usage_perc{s}[{w}]))"),
        # 1 where usage divides by num_gpu_blocks (null block counted as used): the servers that still export the
        # deprecated name (V1 <= 0.10); 0 from 0.11 and on V0 (no null block).
        (f"{R}vllm_kv_usage_counts_null_block:bool",
         f"(\n  max by ({me}) ({now('vllm:gpu_cache_usage_perc' + s)} * 0 + 1)\n"
         f"  or\n  max by ({me}) ({now('vllm:kv_cache_usage_perc' + s)} * 0)\n)"
         f"\n* on ({e}) group_left ()\n{R}vllm_null_block:bool"),
        (f"{R}vllm_num_requests_running:max", f"max by ({me}) ({now('vllm:num_requests_running' + s)})"),
        (f"{R}vllm_num_requests_running:max_over_time{w}",
         f"max by ({me}) (max_over_time(vllm:num_requests_running{s}[{w}]))"),
        (f"{R}vllm_num_requests_waiting:max", f"max by ({me}) ({now('vllm:num_requests_waiting' + s)})"),
        # Waiting minus vLLM's deferred waiters (LoRA, grammar, KV transfer; labelled from 0.20).
        (f"{R}vllm_num_requests_waiting_schedulable:max",
         f"(\n  {R}vllm_num_requests_waiting:max\n  - on ({me})\n"
         f"  max by ({me}) ({now('vllm:num_requests_waiting_by_reason' + cfg.sel(DEFERRED))})\n)\n"
         f"or\n{R}vllm_num_requests_waiting:max"),
        (f"{R}vllm_kv_used_blocks:round",
         f"clamp_min(\n  round(\n"
         f"    {R}vllm_kv_usage_ratio:max * on ({e}) group_left () {R}vllm_kv_capacity_blocks:usable\n"
         f"    + {R}vllm_kv_usage_ratio:max * {R}vllm_kv_usage_counts_null_block:bool\n  )\n"
         f"  - {R}vllm_kv_usage_counts_null_block:bool\n, 0)"),
        (f"{R}vllm_kv_free_blocks:sub",
         f"clamp_min(\n  {R}vllm_kv_capacity_blocks:usable\n  - on ({e}) group_right ()\n"
         f"  {R}vllm_kv_used_blocks:round\n, 0)"),
        (f"{R}vllm_request_prompt_tokens:bucket_quantile", _bucket_quantile(cfg, "vllm:request_prompt_tokens")),
        (f"{R}vllm_request_max_tokens:bucket_quantile", _bucket_quantile(cfg, "vllm:request_params_max_tokens")),
        (f"{R}vllm_request_tokens:max_bucket", _top_bucket(cfg, "vllm:request_prompt_tokens")),
        (f"{R}vllm_prompt_blocks:ceil",
         f"clamp_min(ceil(\n  {R}vllm_request_prompt_tokens:bucket_quantile\n"
         f"  / on ({e}) group_left ()\n  {R}vllm_block_size_tokens:max\n), 1)"),
        # ceil(min(P + M, max_model_len) / bs), max_model_len read as the top finite bucket.
        (f"{R}vllm_worst_case_blocks_per_request:ceil",
         f"clamp_min(ceil(\n  (\n"
         f"    ({R}vllm_request_prompt_tokens:bucket_quantile + {R}vllm_request_max_tokens:bucket_quantile)\n"
         f"    <= {R}vllm_request_tokens:max_bucket\n    or {R}vllm_request_tokens:max_bucket\n  )\n"
         f"  / on ({e}) group_left ()\n  {R}vllm_block_size_tokens:max\n), 1)"),
        (f"{R}vllm_max_concurrency_requests:floor",
         f"floor(\n  ({R}vllm_kv_used_blocks:round + {R}vllm_kv_free_blocks:sub)\n"
         f"  / {R}vllm_worst_case_blocks_per_request:ceil\n)"),
        (f"{R}vllm_kv_admission_headroom_requests:floor",
         f"floor({R}vllm_kv_free_blocks:sub / {R}vllm_prompt_blocks:ceil)"),
        # floor((B - max(used, running * W)) / W); negative = oversubscribed, preemption ahead.
        (f"{R}vllm_safe_headroom_requests:floor",
         f"floor(\n  (\n    {R}vllm_kv_used_blocks:round + {R}vllm_kv_free_blocks:sub\n"
         f"    - (\n      ({R}vllm_kv_used_blocks:round\n"
         f"        > {demand})\n"
         f"      or {demand}\n"
         "    )\n  )\n"
         f"  / {R}vllm_worst_case_blocks_per_request:ceil\n)"),
        # `vllm:num_preemptions_total` in every version; the bare name covers expositions that drop the suffix.
        (f"{R}vllm_num_preemptions:rate{w}",
         f"sum by ({me}) (rate({{{PREEMPTIONS}{extra}}}[{w}]))"),
        (f"{R}vllm_request_success:rate{w}", f"sum by ({me}) (rate(vllm:request_success_total{s}[{w}]))"),
        # Preemptions per finished request over the window; while none finishes (long generations thrashing),
        # preemptions per running request (the most that ran at once in the window), never +Inf. Nothing ran and
        # nothing finished: no ratio.
        (f"{R}vllm_preemptions_per_request:ratio{w}",
         f"(\n  {R}vllm_num_preemptions:rate{w}\n  / ({R}vllm_request_success:rate{w} > 0)\n)\nor\n(\n"
         f"  {R}vllm_num_preemptions:rate{w} * {parse_duration(w):g}\n"
         f"  / ({R}vllm_num_requests_running:max_over_time{w} > 0)\n)"),
        (f"{R}vllm_engine_steps:rate{w}",
         f"sum by ({me}) (rate(vllm:iteration_tokens_total_count{s}[{w}]))\n"
         f"or\nsum by ({me}) (rate(vllm:generation_tokens_total{s}[{w}]))"),
        # vllm:engine_sleep_state (0.12+): 1 while weights are offloaded or discarded (sleep mode).
        (f"{R}vllm_engine_asleep:bool",
         f"max by ({me}) ({now('vllm:engine_sleep_state' + cfg.sel(ASLEEP))})"),
        # The sidecar's false-full condition from raw data: requests wait, usage stayed under full_usage over the
        # window, the next profile prompt fits in free blocks, and no preemption in the window.
        (f"{R}vllm_kv_false_full:bool",
         f"({R}vllm_num_requests_waiting:max > bool 0)\n"
         f"* ({R}vllm_kv_usage_ratio:max_over_time{w} < bool {cfg.full_usage})\n"
         f"* ({R}vllm_kv_free_blocks:sub >= bool {R}vllm_prompt_blocks:ceil)\n"
         f"* ({R}vllm_num_preemptions:rate{w} == bool 0)"),
        # Truly full: requests wait and the pool is what holds them (usage reached full_usage within the window,
        # the next prompt does not fit, or a preemption in the window: the pool ran out between two samples). Usage
        # (and preemptions) alone decide where the length histograms are not scraped (dropped by metricRelabelings):
        # no prompt size, but a full pool needs none.
        (f"{R}vllm_kv_full:bool",
         f"({R}vllm_num_requests_waiting:max > bool 0)\n"
         "* (\n  (\n"
         f"    ({R}vllm_kv_usage_ratio:max_over_time{w} >= bool {cfg.full_usage})\n"
         f"    + ({R}vllm_kv_free_blocks:sub < bool {R}vllm_prompt_blocks:ceil)\n"
         f"    + ({R}vllm_num_preemptions:rate{w} > bool 0)\n"
         "  ) > bool 0\n"
         f"  or\n  (\n    ({R}vllm_kv_usage_ratio:max_over_time{w} >= bool {cfg.full_usage})\n"
         f"    + ({R}vllm_num_preemptions:rate{w} > bool 0)\n  ) > bool 0\n"
         f"  or\n  ({R}vllm_kv_usage_ratio:max_over_time{w} >= bool {cfg.full_usage})\n)"),
        # 1 where the rules have no KV capacity or block size for an engine, 0 where they have both: V1 0.8.x
        # (num_gpu_blocks="None") or a cache_config_info dropped by metricRelabelings (or without the label), and no
        # sidecar of the pod that knows the number. Free blocks, false-full, headroom and leak are then unjudged;
        # KV-full falls back to usage alone. For dashboards, and VLLMKVCapacityUnknown while requests wait.
        (f"{R}vllm_kv_capacity_unknown:bool",
         f"(\n  {R}vllm_num_requests_running:max * 0 + 1\n  unless on ({e})\n"
         f"  ({R}vllm_kv_capacity_blocks:usable and on ({e}) {R}vllm_block_size_tokens:max)\n)\n"
         f"or\n{R}vllm_num_requests_running:max * 0"),
        # Scheduler makes no step while schedulable requests wait, and the engine is not asleep.
        (f"{R}vllm_stuck:bool",
         f"(\n  ({R}vllm_num_requests_waiting_schedulable:max > 0)\n  and on ({me})\n"
         f"  ({R}vllm_engine_steps:rate{w} == 0)\n  unless on ({me})\n  ({R}vllm_engine_asleep:bool > 0)\n) * 0 + 1"),
        # The sidecar could not scrape its vLLM once in the window (down, or never up yet) and Prometheus has no
        # vLLM series of that endpoint either: vLLM is truly down. `vllm_endpoint` joins it to the engine's alerts.
        # A single failed scrape does not count: it would restart every engine alert's `for:`. A sidecar that cannot
        # reach a vLLM Prometheus scrapes fine (wrong port, NetworkPolicy, TLS) says nothing about the engine: the
        # engine alerts, from vLLM's own series, still page then (beside VLLMHeadroomTargetDown).
        ("instance:vllm_headroom_target_down:bool",
         _unless_same_pod(_endpoint(f"max_over_time(vllm_headroom_up[{w}]) == 0"), lambda m: scraped_vllm(cfg, m))),
    ]
    # Per model; a pod scraped by two jobs counts once (max over the identity without job).
    fleet_by = ", ".join(lbl for lbl in cfg.identity if lbl in ("cluster", "namespace")) + ", model_name"

    def per_model(expr: str) -> str:
        return f"sum by ({fleet_by}) (max by ({cfg.dedup('model_name', 'engine')}) ({expr}))"

    r += [
        ("model_name:vllm_kv_capacity_blocks:sum",
         per_model(f"{R}vllm_kv_used_blocks:round + {R}vllm_kv_free_blocks:sub")),
        ("model_name:vllm_kv_free_blocks:sum", per_model(f"{R}vllm_kv_free_blocks:sub")),
        ("model_name:vllm_num_requests_waiting:sum", per_model(f"{R}vllm_num_requests_waiting:max")),
        ("model_name:vllm_kv_false_full_engines:sum", per_model(f"{R}vllm_kv_false_full:bool")),
        ("model_name:vllm_kv_full_engines:sum", per_model(f"{R}vllm_kv_full:bool")),
        (f"model_name:vllm_num_preemptions:rate{w}", per_model(f"{R}vllm_num_preemptions:rate{w}")),
    ]
    return [{"record": name, "expr": expr} for name, expr in r]


# ---------------------------------------------------------------------------------------------------------------
# Alerts


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str  # Prometheus template: $labels, if/else/end, $value | humanize / humanizePercentage
    keep_firing_for: str = ""  # "": resolve as soon as the condition stops
    labels: tuple[tuple[str, str], ...] = ()  # static labels beside severity (two rules of one alert apart)


# Which vLLM: namespace/pod and its endpoint in Kubernetes (a pod may run two vLLMs), the endpoint elsewhere (vLLM's
# host:port, also in a sidecar's alert, whose own instance is the sidecar's address).
WHERE = ("{{ if $labels.pod }}{{ $labels.namespace }}/{{ $labels.pod }} at {{ $labels.vllm_endpoint }}"
         "{{ else }}{{ $labels.vllm_endpoint }}{{ end }}")
# Which sidecar: its own pod and address.
SIDECAR = "{{ if $labels.pod }}of {{ $labels.namespace }}/{{ $labels.pod }} {{ end }}at {{ $labels.instance }}"
# Which engine: V0 (vLLM <= 0.10 with VLLM_USE_V1=0) labels no engine, so the part is left out there.
ENGINE = (f"{WHERE} ({{{{ $labels.model_name }}}}"
          "{{ if $labels.engine }}, engine {{ $labels.engine }}{{ end }})")


def _minutes(d: str) -> str:
    s = parse_duration(d)
    return f"{s / 60:g} minutes" if s >= 60 else f"{s:g} seconds"


def alerts(cfg: Config) -> list[Alert]:
    """The alerts, each with its own `unless` against the alert that explains it (one fault, one page)."""
    me = cfg.by("model_name", "engine")
    ded = cfg.dedup("model_name", "engine", ENDPOINT)
    pod = f"cluster, namespace, pod, {ENDPOINT}"
    w = WINDOW
    full = f"{cfg.full_usage:g}"

    def f(name: str, default: str) -> str:
        return cfg.for_.get(name, default)

    def held(names: str, matcher: str = "") -> str:
        """The sidecar's verdict (a regex of names) held for most of the window: the condition both of the verdict's
        own alert and of the suppression it puts on the engine alerts it explains. A verdict that flickers
        (budget_full 3 minutes, slots_full 1, repeating) thus silences the engine alert exactly while its own alert
        is eligible, never both: a standing queue always has one page."""
        sel = ",".join(x for x in (matcher, f'verdict=~"{names}"') if x)
        return f"avg_over_time(vllm_headroom_verdict{{{sel}}}[{w}]) > 0.5"

    def verdict(names: str, matcher: str = "", windowed: bool = True) -> str:
        """The sidecar's verdict (a regex of names) per pod and engine, joinable to engine alerts; `windowed`: held
        for most of the window, else the current one."""
        sel = ",".join(x for x in (matcher, f'verdict=~"{names}"') if x)
        said = held(names, matcher) if windowed else f"vllm_headroom_verdict{{{sel}}} == 1"
        # V0's series have no engine label while its sidecar calls the one engine "0": an engine-less copy of
        # engine 0's verdict joins them (a V1 alert always has its engine, so the copy never matches one).
        return (f"max by ({pod}, model_name, engine) (\n"
                + _endpoint(f'{said}\nor\nlabel_replace({said}, "engine", "", "engine", "0")') + "\n)")

    def engine(expr: str, explained_by: str = "", awake: bool = True) -> str:
        """Per engine, one series per pod whatever the number of scraping jobs, with `vllm_endpoint`, unless the sidecar
        says the target is down, the sidecar's verdict `explained_by` (a regex) held over the window, or the engine
        sleeps (sleep mode is deliberate: only VLLMEngineAsleepWithQueue, an info, speaks of it)."""
        if awake:
            expr = f"(\n{expr}\n)\nunless on ({me})\n({R}vllm_engine_asleep:bool > 0)"
        out = _unless_same_pod(f"max by ({ded}) (\n{_endpoint(expr)}\n)",
                               lambda m: f"instance:vllm_headroom_target_down:bool{{{m}}}" if m
                               else "instance:vllm_headroom_target_down:bool")
        if explained_by:
            out = _unless_same_pod(out, lambda m: verdict(explained_by, m), "model_name", "engine")
        if awake:
            out = _unless_same_pod(out, lambda m: verdict("sleeping", m, windowed=False), "model_name", "engine")
        return out

    def sidecar(v: str) -> str:
        """Waiting requests of an engine whose sidecar verdict `v` held over the window, as an engine alert; only
        while requests wait, like every verdict alert (a verdict the sidecar still holds after the queue drained is
        no page)."""
        return engine("vllm_headroom_requests_waiting > 0\nand ignoring (verdict)\n"
                      f'({held(v)})', awake=False)

    storm = (f"({R}vllm_preemptions_per_request:ratio{w} >= {cfg.preemption_ratio:g}\n"
             f"  and on ({me}) {R}vllm_num_preemptions:rate{w} * {parse_duration(w):g} >= {cfg.storm_min_preemptions})")
    pressure = (f"(\n  ({R}vllm_kv_usage_ratio:max_over_time{w} >= {full})\n  or on ({me})\n"
                f"  ({R}vllm_num_preemptions:rate{w} > 0)\n)")
    no_metrics = ('increase(vllm_headroom_scrape_errors_total{reason="no_vllm_metrics"}[' + w + "]) > 0")
    t_ff, t_full, t_storm, t_over = (f("VLLMKVFalseFull", "5m"), f("VLLMKVCacheFull", "10m"),
                                     f("VLLMPreemptionStorm", "5m"), f("VLLMKVOversubscribed", "15m"))
    t_stuck, t_sleep, t_leak = f("VLLMSchedulerStuck", "5m"), f("VLLMEngineAsleepWithQueue", "10m"), \
        f("VLLMKVBlockLeak", "15m")
    t_sd, t_td, t_start, t_abs = (f("VLLMHeadroomSidecarDown", "5m"), f("VLLMHeadroomTargetDown", "1m"),
                                  f("VLLMStartupSlow", "1m"), f("VLLMMetricsAbsent", "10m"))
    t_never, t_budget, t_cfg = (f("VLLMHeadroomNeverFits", "2m"), f("VLLMHeadroomBudgetFull", "10m"),
                                f("VLLMHeadroomCapacityConfigError", "10m"))
    t_hist, t_cap = f("VLLMKVHistogramsMissing", "15m"), f("VLLMKVCapacityUnknown", "15m")
    t_unscraped = f("VLLMHeadroomVllmNotScraped", cfg.vllm_not_scraped_after)
    keep = cfg.keep_firing_for
    kv_full = f"({R}vllm_kv_full:bool == 1)"
    limit, after = parse_duration(cfg.startup_limit), parse_duration(cfg.target_down_after)
    by_t = cfg.by("target")

    def down_for(seconds: float) -> str:
        """The sidecar has failed to scrape vLLM for more than `seconds` (not for --disable-log-stats)."""
        return (f"(\n  (vllm_headroom_up == 0)\n  and on ({by_t})\n"
                f"  (time() - vllm_headroom_target_down_since_timestamp_seconds > {seconds:g})\n"
                f"  unless on ({by_t})\n  ({no_metrics})\n)")

    def scraped(matcher: str) -> str:
        return scraped_vllm(cfg, matcher)
    a = [
        Alert("VLLMKVFalseFull",
              engine(f"{R}vllm_num_requests_waiting:max\nand on ({me})\n({R}vllm_kv_false_full:bool == 1)\n"
                     f"unless on ({me})\n{R}vllm_stuck:bool", "never_fits|budget_full"),
              t_ff, "warning",
              "vLLM requests wait although the KV cache has room (false-full).",
              f"{ENGINE}: {{{{ $value | humanize }}}} requests have waited for {_minutes(t_ff)} while KV usage stayed "
              f"under {full} and the next request's prompt fits in free blocks. Memory is not what holds them back: "
              "look at max_num_seqs slots, max_num_batched_tokens, deferred (LoRA/grammar) requests; "
              "the sidecar's vllm_headroom_verdict names the cause.", keep),
        Alert("VLLMKVCacheFull",
              engine(f"{R}vllm_num_requests_waiting:max\nand on ({me})\n{kv_full}\n"
                     f"unless on ({me})\n{storm}", "never_fits"),
              t_full, "warning",
              "vLLM's KV cache is truly full: requests wait for blocks.",
              f"{ENGINE}: {{{{ $value | humanize }}}} requests have waited for {_minutes(t_full)} while KV usage "
              f"reached {full}, the next prompt does not fit in free blocks, or vLLM preempted running requests (the "
              "pool ran out between samples). Add KV memory or replicas, or lower max_model_len / max_num_seqs.",
              keep),
        Alert("VLLMPreemptionStorm", engine(f"{R}vllm_preemptions_per_request:ratio{w}\nand\n{storm}"),
              t_storm, "critical", "vLLM preempts a large share of its requests (KV thrash).",
              f"{ENGINE}: {{{{ $value | humanizePercentage }}}} preemptions per finished request over {w} (per "
              f"running request while none finishes; threshold {cfg.preemption_ratio:g}, from "
              f"{cfg.storm_min_preemptions} preemptions per {w}), for {_minutes(t_storm)}. "
              "Running requests outgrow the KV pool and are recomputed; latency and throughput collapse.", keep),
        Alert("VLLMKVOversubscribed",
              engine(f"{R}vllm_safe_headroom_requests:floor < 0\nand on ({me})\n{pressure}\nunless on ({me})\n{storm}"
                     f"\nunless on ({me})\n{kv_full}"),
              t_over, "warning", "vLLM's running requests outgrow the KV pool under pressure: preemption ahead.",
              f"{ENGINE}: safe headroom {{{{ $value | humanize }}}} requests (running × worst-case blocks exceed the "
              f"pool) with KV usage at {full} or preemptions, for {_minutes(t_over)}. Lower max_num_seqs or "
              "max_tokens, or add KV memory.", keep),
        Alert("VLLMKVOversubscribed",
              engine(f"{R}vllm_safe_headroom_requests:floor < 0\nunless on ({me})\n{pressure}"),
              t_over, "info", "vLLM over-commits its KV pool (normal; no pressure yet).",
              f"{ENGINE}: safe headroom {{{{ $value | humanize }}}} requests: if every running request reached "
              f"max_tokens vLLM would preempt. No pressure now (usage under {full}, no preemptions).", keep),
        Alert("VLLMSchedulerStuck",
              engine(f"{R}vllm_num_requests_waiting_schedulable:max\nand on ({me})\n{R}vllm_stuck:bool", "never_fits"),
              t_stuck, "critical", "vLLM has queued requests but makes no engine steps.",
              f"{ENGINE}: {{{{ $value | humanize }}}} schedulable requests wait and the engine made no step for "
              f"{_minutes(f'{parse_duration(w) + parse_duration(t_stuck):g}s')} (vllm:iteration_tokens_total_count "
              "flat). Requests will time out.", keep),
        Alert("VLLMEngineAsleepWithQueue",
              engine(f"{R}vllm_num_requests_waiting:max > 0\nand on ({me})\n({R}vllm_engine_asleep:bool > 0)",
                     awake=False),
              t_sleep, "info", "vLLM is in sleep mode while requests wait (deliberate; no page).",
              f"{ENGINE}: {{{{ $value | humanize }}}} requests wait while the engine sleeps (vllm:engine_sleep_state), "
              f"for {_minutes(t_sleep)}. Sleep mode is put on deliberately (POST /sleep); if these requests should "
              "run, wake it (POST /wake_up) or route elsewhere. No other engine alert fires on a sleeping engine.",
              keep),
        Alert("VLLMHeadroomNeverFits", sidecar("never_fits"), t_never, "critical",
              "The request at the head of vLLM's queue can never be admitted: it needs more KV blocks than the pool.",
              f"{ENGINE}: {{{{ $value | humanize }}}} requests wait behind a head request that needs more KV blocks "
              f"than the whole pool holds, for {_minutes(t_never)} (sidecar verdict never_fits). It will never run "
              "and, first-come-first-served, the queue behind it barely moves. Lower max_model_len to what the pool "
              "holds, or start vLLM with --no-scheduler-reserve-full-isl; cancel the request now."),
        Alert("VLLMHeadroomBudgetFull", sidecar("budget_full"), t_budget, "warning",
              "vLLM's running prefills use up max_num_batched_tokens: requests wait beside free KV.",
              f"{ENGINE}: {{{{ $value | humanize }}}} requests have waited for {_minutes(t_budget)} while running "
              "prefills used the whole step token budget (max_num_batched_tokens; sidecar verdict budget_full). "
              "The KV cache has room: raise max_num_batched_tokens or enable chunked prefill with a larger budget."),
        # `instance` (the sidecar's) kept from before `vllm_endpoint` named the vLLM in the text.
        Alert("VLLMHeadroomCapacityConfigError",
              f"max by ({pod}, instance, model_name, engine) (\n"
              + _endpoint('vllm_headroom_capacity_undetermined{reason="config_error"} == 1') + "\n)",
              t_cfg, "warning", "The sidecar cannot derive an engine's KV capacity: its configuration makes no sense.",
              f"The sidecar of {WHERE} reports vllm_headroom_capacity_undetermined{{reason=\"config_error\"}} = "
              f"{{{{ $value | humanize }}}} for {{{{ $labels.model_name }}}}"
              "{{ if $labels.engine }} engine {{ $labels.engine }}{{ end }}, for "
              f"{_minutes(t_cfg)} (e.g. num_gpu_blocks < 2): no verdict, headroom or capacity panel for it. "
              "/api/v1/diagnosis of the sidecar names the value."),
        Alert("VLLMKVBlockLeak",
              engine(f"{R}vllm_kv_used_blocks:round > 0\n"
                     f"and on ({me}) {R}vllm_num_requests_running:max == 0\n"
                     f"and on ({me}) {R}vllm_num_requests_waiting:max == 0"),
              t_leak, "warning", "vLLM keeps KV blocks in use with no request running.",
              f"{ENGINE}: {{{{ $value | humanize }}}} KV blocks have stayed in use for {_minutes(t_leak)} with nothing "
              "running or waiting. Blocks are leaking (they are not free for new requests); restart the engine and "
              "report it.", keep),
        # V1 exports the length histograms from start-up, V0 once a request finished; a scraped engine without
        # them lost them to metricRelabelings (or a recording rule's drop list).
        Alert("VLLMKVHistogramsMissing",
              engine(f"{R}vllm_num_requests_waiting:max\nand on ({me})\n(\n"
                     f"  group by ({me}) (vllm:num_requests_running{cfg.sel(V1_SERIES)})\n"
                     f"  or\n  group by ({me}) (vllm:request_success_total{cfg.sel()} > 0)\n)\n"
                     f"unless on ({me})\ngroup by ({me}) (vllm:request_prompt_tokens_bucket{cfg.sel()})"),
              t_hist, "warning",
              "vLLM's prompt-length histogram is not scraped: false-full and oversubscription cannot be judged.",
              f"{ENGINE}: Prometheus has vLLM's engine series but no vllm:request_prompt_tokens_bucket for "
              f"{_minutes(t_hist)} ({{{{ $value | humanize }}}} requests wait now). Without prompt sizes the rules "
              "cannot tell a false-full from a full pool nor size the worst case: VLLMKVFalseFull and "
              "VLLMKVOversubscribed stay silent for this engine (VLLMKVCacheFull still fires on usage). Keep "
              "vllm:request_prompt_tokens_bucket and vllm:request_params_max_tokens_bucket in the scrape's "
              "metricRelabelings.", keep),
        # The rules have no KV capacity for the engine (V1 0.8.x exports num_gpu_blocks="None") and no sidecar of
        # the pod knows it: say so only while it matters, requests waiting below the full-usage threshold (above
        # it KV-full judges by usage alone) and no stuck scheduler (its own page); an idle engine never alerts.
        Alert("VLLMKVCapacityUnknown",
              engine(f"{R}vllm_num_requests_waiting:max > 0\nand on ({me})\n({R}vllm_kv_capacity_unknown:bool == 1)\n"
                     f"unless on ({me})\n{kv_full}\nunless on ({me})\n{R}vllm_stuck:bool"),
              t_cap, "warning",
              "vLLM's KV capacity is unknown to the rules: KV alerts cannot judge this engine while requests wait.",
              f"{ENGINE}: {{{{ $value | humanize }}}} requests wait and neither vLLM's vllm:cache_config_info nor a "
              f"sidecar of the pod gives the engine's KV capacity, for {_minutes(t_cap)}. vLLM V1 0.8.x exports "
              'num_gpu_blocks="None"; elsewhere the series or its label was dropped. VLLMKVFalseFull, '
              "VLLMKVOversubscribed and VLLMKVBlockLeak cannot judge this engine (VLLMKVCacheFull still fires on "
              f"usage above {full}). Give the sidecar --num-gpu-blocks (vLLM's start-up log: 'GPU KV cache size: T "
              "tokens' / block size), keep vllm:cache_config_info in the scrape, or upgrade vLLM to 0.9+.",
              keep),
        # The sidecar by its configured scrape selector (Prometheus' own `up`: a sidecar that never came up exports
        # nothing) or by what it exported lately; one alert per pod whatever the number of scraping jobs, and none
        # while any job still gets its series.
        # About the sidecar itself, named by its own instance: no vllm_endpoint (Prometheus' `up` of the sidecar does
        # not say which vLLMs it watches; a sidecar that never came up exported nothing).
        Alert("VLLMHeadroomSidecarDown",
              f"max by ({cfg.dedup()}) (\n"
              f"  (\n    up{{{cfg.sidecar_selector}}} == 0\n    or\n    (\n      up == 0\n      and on ({cfg.by()})\n"
              f"      group by ({cfg.by()}) (last_over_time(vllm_headroom_up[6h]))\n    )\n  )\n"
              f"  unless on ({cfg.dedup()})\n  group by ({cfg.dedup()}) (vllm_headroom_up)\n)",
              t_sd, "warning", "The vllm-headroom sidecar is not scraped.",
              f"Prometheus cannot scrape the vllm-headroom sidecar {SIDECAR} for {_minutes(t_sd)} (it never came up, "
              "crash-loops, or stopped answering): verdict, admission headroom and max_num_seqs panels are empty. "
              "Rules from vLLM's metrics still work."),
        # Any (re)load of vLLM (pod start, container restart) is quiet up to the start-up limit, measured from the
        # sidecar's first failed scrape; then a warning. Sooner only when Prometheus still scrapes vLLM (no reload).
        # Two rules, told apart by `cause`: vLLM is gone (Prometheus has no vLLM series of the pod either), or
        # only the sidecar cannot reach a vLLM that Prometheus still scrapes. Alertmanager's inhibit of engine alerts
        # takes the first only (see _inhibit_rules).
        Alert("VLLMHeadroomTargetDown",
              f"max by ({cfg.dedup('target', ENDPOINT)}) (\n"
              + _unless_same_pod(
                  _endpoint(f"{down_for(limit)}\nand on ({by_t})\n(vllm_headroom_target_seen_up == 1)"), scraped)
              + "\n)",
              t_td, "warning", "vLLM stopped answering its sidecar and is not back.",
              f"The sidecar of {WHERE} cannot scrape vLLM, and Prometheus has no vLLM series of it either: down for "
              f"more than the start-up limit ({_minutes(cfg.startup_limit)}) after it had been up, longer than a "
              "reload (loading weights and compiling take 5-15 minutes for large models). /readyz of the sidecar "
              "says why.", labels=(("cause", "vllm_down"),)),
        Alert("VLLMHeadroomTargetDown",
              f"max by ({cfg.dedup('target', ENDPOINT)}) (\n"
              + _and_same_pod(_endpoint(down_for(after)), scraped) + "\n)",
              t_td, "warning", "vLLM's sidecar cannot reach it while Prometheus still scrapes vLLM.",
              f"The sidecar of {WHERE} has not reached vLLM for {_minutes(cfg.target_down_after)} while Prometheus "
              "still scrapes vLLM (wrong port, NetworkPolicy, TLS): verdict, admission headroom and max_num_seqs "
              "panels are empty; alerts from vLLM's own metrics still work. /readyz of the sidecar says why.",
              labels=(("cause", "sidecar_unreachable"),)),
        Alert("VLLMStartupSlow",
              f"max by ({cfg.dedup('target', ENDPOINT)}) (\n" + _unless_same_pod(
                  _endpoint(f"{down_for(limit)}\nand on ({by_t})\n(vllm_headroom_target_seen_up == 0)"), scraped)
              + "\n)",
              t_start, "warning", "vLLM has not come up since its sidecar started.",
              f"{WHERE}: vLLM has not answered its sidecar once in the {_minutes(cfg.startup_limit)} since the "
              "sidecar started (loading weights and compiling take 5-15 minutes for large models). Check vLLM's log "
              "for a failed start."),
        # vLLM with --disable-log-stats exports nothing that a FastAPI router does not (http_* for the same OpenAI
        # handlers): the sidecar, pointed at vLLM, is the evidence. One alert per pod.
        Alert("VLLMMetricsAbsent",
              f"max by ({pod}) (\n" + _endpoint(no_metrics) + "\n)",
              t_abs, "warning", "vLLM answers but exports no engine metrics (--disable-log-stats?).",
              f"{WHERE} serves vLLM's API but has exported no vllm:* engine metrics for {_minutes(t_abs)}. "
              "vLLM started with --disable-log-stats exports none: KV, queue and headroom are blind."),
        # Judged only where the sidecar's series name vLLM's pod: a sidecar in vLLM's pod (a loopback target) or
        # outside Kubernetes (no pod label). A central sidecar in Kubernetes (another pod, targets by IP or DNS name)
        # carries its own namespace/pod, which never match vLLM's: it cannot tell "not scraped" from "elsewhere".
        # The sidecar gets vLLM's engine metrics, held over the window (not while vLLM loads or reloads: the sidecar
        # fails then too, and Prometheus gets a window to find the new pod), and Prometheus has none of that vLLM's
        # series: every engine alert is empty. Never with --disable-log-stats (vllm_headroom_up is 0 then;
        # VLLMMetricsAbsent speaks).
        Alert("VLLMHeadroomVllmNotScraped",
              f"max by ({cfg.dedup('target', ENDPOINT)}) (\n"
              + _unless_same_pod(_endpoint(
                  f'min_over_time(vllm_headroom_up{{target=~"{LOCAL_TARGET}"}}[{w}]) == 1\n'
                  f'or\nmin_over_time(vllm_headroom_up{{pod=""}}[{w}]) == 1'), scraped) + "\n)",
              t_unscraped, "warning", "The sidecar reads vLLM's metrics, but Prometheus does not scrape vLLM.",
              f"The sidecar of {WHERE} has read vLLM's engine metrics"
              "{{ if $labels.target }} at {{ $labels.target }}{{ end }} for "
              f"{_minutes(t_unscraped)}, but Prometheus holds no vllm:* "
              "series of that vLLM: false-full, KV-full, storm, stuck and every other engine alert are silent for it. "
              "Check what should scrape vLLM: the monitor's vLLM endpoint must name vLLM's container port (Helm: "
              "vllm.portName, default http), scrapeVllm must be on unless another job scrapes vLLM, and relabelings "
              "must keep namespace and pod and leave instance as vLLM's host:port (the sidecar's --target port)."),
    ]
    return a


# Every verdict of the sidecar (exporter.pipeline.verdict.Verdict) and the alert that speaks for it; None: no
# alert by design. tests/monitoring fails when the sidecar gains a verdict this table does not name.
VERDICT_ALERTS: dict[str, str | None] = {
    "ok": None,
    "kv_full": "VLLMKVCacheFull",
    "slots_full": "VLLMKVFalseFull",
    "head_of_line": "VLLMKVFalseFull",
    "deferred": "VLLMKVFalseFull",
    "preempting": "VLLMPreemptionStorm",
    "stuck": "VLLMSchedulerStuck",
    "leak": "VLLMKVBlockLeak",
    "target_down": "VLLMHeadroomTargetDown",
    "budget_full": "VLLMHeadroomBudgetFull",  # a false-full with a known cause: replaces VLLMKVFalseFull
    "never_fits": "VLLMHeadroomNeverFits",  # replaces VLLMKVFalseFull, VLLMKVCacheFull, VLLMSchedulerStuck
    "sleeping": "VLLMEngineAsleepWithQueue",  # info; every other engine alert is silent on a sleeping engine
    "transient": None,  # the next step admits the queue: a first look, the next scrape decides
    "undecided": None,  # an unstated value decides what binds: the advice asks for it (issue 19); queue alerts fire
}


def anchor(name: str) -> str:
    """GitHub's anchor of a `## <name>` heading."""
    return re.sub(r"[^a-z0-9_-]", "", name.lower())


def alert_rule(cfg: Config, a: Alert) -> dict[str, Any]:
    keep = {"keep_firing_for": a.keep_firing_for} if a.keep_firing_for else {}
    return {
        "alert": a.name,
        "expr": a.expr,
        "for": a.for_,
        **keep,
        "labels": {"severity": a.severity, **dict(a.labels)},
        "annotations": {
            "summary": a.summary,
            "description": a.description,
            "runbook_url": f"{cfg.runbook_url}#{anchor(a.name)}",
        },
    }


def rule_groups(cfg: Config) -> dict[str, Any]:
    """The plain rules file: recording rules first, then the alerts that use them."""
    return {
        "groups": [
            {"name": "vllm-headroom.rules", "rules": recording_rules(cfg)},
            {"name": "vllm-headroom.alerts", "rules": [alert_rule(cfg, a) for a in alerts(cfg)]},
        ]
    }


RUNBOOK_ANNOTATION = "vllm-headroom/runbook-base-url"


def runbook_replacement() -> dict[str, Any]:
    """A kustomize replacement: the PrometheusRule's runbook annotation becomes the base of every runbook_url."""
    return {
        "source": {"kind": "PrometheusRule", "name": "vllm-headroom",
                   "fieldPath": f"metadata.annotations.{RUNBOOK_ANNOTATION}"},
        "targets": [{"select": {"kind": "PrometheusRule", "name": "vllm-headroom"},
                     "fieldPaths": ["spec.groups.*.rules.*.annotations.runbook_url"],
                     "options": {"delimiter": "#", "index": 0}}],
    }


def prometheus_rule(cfg: Config) -> dict[str, Any]:
    """The same groups as a prometheus-operator PrometheusRule."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "vllm-headroom",
            "labels": {"app.kubernetes.io/name": "vllm-headroom", "app.kubernetes.io/component": "monitoring",
                       "prometheus": "k8s", "role": "alert-rules"},
            # kustomize: patch this annotation and add RUNBOOK_REPLACEMENT to move every runbook_url.
            "annotations": {RUNBOOK_ANNOTATION: cfg.runbook_url},
        },
        "spec": rule_groups(cfg),
    }


# Alertmanager: the same one-fault-one-page policy for alerts that reach it from several rule evaluations.
INHIBIT_EQUAL_POD = ["cluster", "namespace", "pod", ENDPOINT]


def _cluster_tolerant(rule: dict[str, Any]) -> list[dict[str, Any]]:
    """`rule`, and its two variants for a `cluster` label on one side only (a per-job relabeling adds it to vLLM's
    series and not to the sidecar's, or the reverse): Alertmanager's `equal` counts a missing label as empty."""
    if "cluster" not in rule["equal"]:
        return [rule]
    rest = [lbl for lbl in rule["equal"] if lbl != "cluster"]
    return [rule,
            {**rule, "source_matchers": [*rule["source_matchers"], 'cluster=""'], "equal": rest},
            {**rule, "target_matchers": [*rule["target_matchers"], 'cluster=""'], "equal": rest}]


def inhibit_rules() -> list[dict[str, Any]]:
    return [variant for rule in _inhibit_rules() for variant in _cluster_tolerant(rule)]


def _inhibit_rules() -> list[dict[str, Any]]:
    engine = [*INHIBIT_EQUAL_POD, "model_name", "engine"]
    return [
        # vLLM gone: its engine alerts die with its series, but keep_firing_for holds them a while and alerts
        # from other rule evaluations may still arrive; the sidecar-unreachable rule (vLLM serving, Prometheus
        # scraping it) silences nothing: its engine alerts are real.
        {"source_matchers": ['alertname="VLLMHeadroomTargetDown"', 'cause="vllm_down"'],
         "target_matchers": ['alertname=~"VLLMKV.*|VLLMPreemptionStorm|VLLMSchedulerStuck|VLLMEngineAsleepWithQueue'
                             '|VLLMMetricsAbsent|VLLMHeadroomNeverFits|VLLMHeadroomBudgetFull"'],
         "equal": INHIBIT_EQUAL_POD},
        {"source_matchers": ['alertname="VLLMHeadroomNeverFits"'],
         "target_matchers": ['alertname=~"VLLMKVFalseFull|VLLMKVCacheFull|VLLMSchedulerStuck"'], "equal": engine},
        {"source_matchers": ['alertname="VLLMHeadroomBudgetFull"'],
         "target_matchers": ['alertname="VLLMKVFalseFull"'], "equal": engine},
        {"source_matchers": ['alertname="VLLMEngineAsleepWithQueue"'],
         "target_matchers": ['alertname=~"VLLMKV.*|VLLMPreemptionStorm|VLLMSchedulerStuck|VLLMHeadroomNeverFits'
                             '|VLLMHeadroomBudgetFull"'], "equal": engine},
        {"source_matchers": ['alertname="VLLMPreemptionStorm"'],
         "target_matchers": ['alertname=~"VLLMKVCacheFull|VLLMKVOversubscribed"'], "equal": engine},
        {"source_matchers": ['alertname="VLLMSchedulerStuck"'],
         "target_matchers": ['alertname="VLLMKVFalseFull"'], "equal": engine},
        {"source_matchers": ['alertname="VLLMKVCacheFull"'],
         "target_matchers": ['alertname="VLLMKVOversubscribed"'], "equal": engine},
        {"source_matchers": ['alertname="VLLMKVOversubscribed"', 'severity="warning"'],
         "target_matchers": ['alertname="VLLMKVOversubscribed"', 'severity="info"'], "equal": engine},
    ]


def alertmanager_example(receiver_url: str = "http://127.0.0.1:5001/") -> dict[str, Any]:
    """A complete Alertmanager config around the inhibit rules (route by pod, info alerts to no receiver)."""
    return {
        "route": {
            "receiver": "oncall",
            "group_by": ["alertname", *INHIBIT_EQUAL_POD, "model_name", "engine"],
            "group_wait": "30s", "group_interval": "5m", "repeat_interval": "4h",
            "routes": [{"receiver": "null", "matchers": ['severity="info"']}],
        },
        "receivers": [{"name": "oncall", "webhook_configs": [{"url": receiver_url}]}, {"name": "null"}],
        "inhibit_rules": inhibit_rules(),
    }


# ---------------------------------------------------------------------------------------------------------------
# Prometheus' template rendering, enough for the annotations above (promtool expectations need exact text).


def _go_g(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if math.isnan(v):
        return "NaN"
    return f"{v:.4g}".replace("e+0", "e+").replace("e-0", "e-")


def humanize(v: float) -> str:
    if v == 0 or math.isnan(v) or math.isinf(v):
        return _go_g(v)
    prefix = ""
    if abs(v) >= 1:
        for p in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(v) < 1000:
                break
            prefix, v = p, v / 1000
    else:
        for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
            if abs(v) >= 1:
                break
            prefix, v = p, v * 1000
    return _go_g(v) + prefix


def render(template: str, labels: dict[str, str], value: float | None = None) -> str:
    """Render the subset of Prometheus' alert templates the bundle uses."""

    def cond(m: re.Match[str]) -> str:
        return m.group(2) if labels.get(m.group(1)) else (m.group(3) or "")

    out = re.sub(r"\{\{ if \$labels\.(\w+) \}\}(.*?)(?:\{\{ else \}\}(.*?))?\{\{ end \}\}", cond, template)
    out = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), out)
    if value is not None:
        out = out.replace("{{ $value | humanize }}", humanize(value))
        out = out.replace("{{ $value | humanizePercentage }}", _go_g(value * 100) + "%")
    return out
