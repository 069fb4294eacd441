"""Prometheus recording and alerting rules of the bundle, in groups per concern (as kubernetes-mixin splits them).

Recording groups, each evaluated in order (a group may read the groups above it):

  vllm-headroom.profile.rules   the request profile's length quantiles (every minute: they move slowly)
  vllm-headroom.engine.rules    identity, then each engine's state from vLLM's own series (every evaluation)
  vllm-headroom.config.rules    static configuration (capacity, block size, max_model_len) every `config_interval`
  vllm-headroom.sidecar.rules   the sidecar's targets and its judgement of each engine
  vllm-headroom.fleet.rules     per model

Alert groups: vllm-headroom.kv.alerts, .scheduler.alerts, .sidecar.alerts, .bundle.alerts.

Identity, recorded once. `instance:vllm_endpoint:info` gives each vLLM API server (its identity labels cluster,
namespace, job, instance, pod, container) its `vllm_endpoint`, the host:port every alert about that vLLM carries
(`instance` without a default port); every instance_engine: record takes it from there. For the sidecar,
`instance_target:vllm_headroom_endpoint:info` gives each of its targets the endpoint of the vLLM it watches (the
target URL's host:port; a loopback target is the sidecar's own host with the target's port). A vLLM and its
sidecar's report about it share namespace, pod and vllm_endpoint; `cluster` is matched when both carry it.

One judgement. Engine alerts carry (cluster, namespace, pod, vllm_endpoint, model_name, engine). Where a sidecar
judges an engine (its verdicts cover most of the window and it reports the engine now), the alert is the
sidecar's verdict held over most of the window (endpoint_engine:vllm_headroom_verdict...); elsewhere the rules judge
from vLLM's series alone, a small path that mirrors the sidecar's rule (each description says which). Risk (the
worst case at the profile or at max_model_len) never raises a KV-full page: a prompt size known only as
max_model_len (nothing finished yet) neither vetoes false-full nor counts as "the next prompt does not fit".

Failed scrapes. A failed scrape marks every series of the target stale while Prometheus keeps its `up` at 0;
a vanished target (pod deleted) loses `up` too. The records that read vLLM's (or the sidecar's) instant series keep
their last value while the target's `up` is 0, for at most `scrape_gap` after its last good scrape
(instance:vllm_scrape_failing:bool), so a failed scrape does not restart a pending alert, and drop a vanished
target's series at the next evaluation, so its alerts resolve then (no keep_firing_for).

De-duplication. Every aggregation takes the maximum over copies of one series before it sums, so two copies of a
series that differ only in a label outside the identity (two Prometheus replicas' `prometheus_replica`/`replica`
seen through a querier without de-duplication) count once: rates and alerts are not doubled.
VLLMHeadroomDuplicateSeries says that such copies arrive (dashboards and other rules sum them twice).

Formulas (exporter/pipeline/derive.py where raw vLLM data allows it):

  N  = num_gpu_blocks of one engine  = label of cache_config_info / engines of the API server; where it has no
                                       number (V1 0.8.x: "None") or is not scraped, B is the sidecar's
                                       vllm_headroom_kv_capacity_blocks of the same pod and engine, else unknown
  B  = usable blocks                 = N - 1 (block 0 is V1's null block); N on V0 (no `engine` label)
  used = round(u * (B + c)) - c      c = 1 where usage counts the null block (V1 <= 0.10), else 0; free = B - used
  P, M = profile prompt / max_tokens = upper bound of the histogram bucket holding the q-quantile over the window,
                                       else over the server's lifetime ("observed"), else the top finite bucket
                                       (max_model_len: a risk bound, not an observation)
  W  = worst-case blocks per request = ceil(min(P + M, top finite bucket) / bs)

Label values become numbers with histogram_quantile: buckets {le="<value>"} = 0 and {le="+Inf"} = 1 have their
1.0-quantile at <value>; "first bucket whose share reaches q" is histogram_quantile(1, share >= bool q).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.core.units import parse_duration
from exporter.engines.vllm import VLLM
from exporter.expose.collector import SCHEMA_VERSION
from exporter.pipeline.catalogue import ALERT_BY_VERDICT

from .config import WINDOW, Config

N = VLLM.names  # vLLM's metric names: exporter/engines/vllm/metrics.py
R = "instance_engine:"
ENDPOINT = "vllm_endpoint"
# What an engine alert is about, whichever path judged it.
KEY = ("cluster", "namespace", "pod", ENDPOINT, "model_name", "engine")
V1_SERIES, V0_SERIES = 'engine!=""', 'engine=""'  # V1 labels every series with its engine, V0 none
INF, NOT_INF = 'le="+Inf"', 'le!="+Inf"'
DEFERRED, ASLEEP = 'reason="deferred"', 'sleep_state!="awake"'
FAILING = "instance:vllm_scrape_failing:bool"
SIDECAR_FAILING = "instance:vllm_headroom_scrape_failing:bool"
VLLM_INFO = "instance:vllm_endpoint:info"
SIDECAR_INFO = "instance_target:vllm_headroom_endpoint:info"
SIDECAR_SEEN = "instance:vllm_headroom_sidecar:info"
VERDICT_SHARE = "endpoint_engine:vllm_headroom_verdict:share5m"
SIDECAR_WAITING = "instance_target_engine:vllm_headroom_requests_waiting:max"
JUDGED = "endpoint_engine:vllm_headroom_judged:bool"
SCRAPED = "instance_target:vllm_headroom_vllm_scraped:bool"
DOWN = "instance_target:vllm_headroom_target_down:seconds"
SIDE_WAITING = "endpoint_engine:vllm_headroom_requests_waiting:max"
STORM = "endpoint_engine:vllm_preemption_storm:bool"
ALONE_KEYS = "endpoint_engine:vllm_without_sidecar:bool"

# Every verdict of the sidecar and the alert that speaks for it (None: none by design): the verdict catalogue's.
VERDICT_ALERTS: dict[str, str | None] = ALERT_BY_VERDICT
# The storm is measured from vLLM's counters on every path (ratio and count thresholds); below them, a queue that
# stands while the sidecar says `preempting` waits for a pool that ran out: the KV-full page speaks for it.
_BELOW_STORM = "VLLMKVCacheFull"


def verdicts_of(alert: str) -> list[str]:
    """The sidecar verdicts whose held share raises `alert` on the sidecar path."""
    out = [v for v, a in VERDICT_ALERTS.items() if a == alert and a != "VLLMPreemptionStorm"]
    if alert == _BELOW_STORM:
        out += [v for v, a in VERDICT_ALERTS.items() if a == "VLLMPreemptionStorm"]
    return sorted(out)


def _j(*labels: str) -> str:
    return ", ".join(labels)


@dataclass(frozen=True)
class _Labels:
    """The label lists of one Config."""

    cfg: Config

    @property
    def id(self) -> str:
        return _j(*self.cfg.identity)

    @property
    def ide(self) -> str:
        return _j(*self.cfg.identity, ENDPOINT)

    @property
    def e(self) -> str:
        return _j(*self.cfg.identity, ENDPOINT, "engine")

    @property
    def me(self) -> str:
        return _j(*self.cfg.identity, ENDPOINT, "model_name", "engine")

    @property
    def raw_me(self) -> str:  # vLLM's own series, before the identity join
        return _j(*self.cfg.identity, "model_name", "engine")

    @property
    def target(self) -> str:
        return _j(*self.cfg.identity, "target")

    @property
    def scrape(self) -> str:
        """What tells one scrape of one target from another (namespace, pod, container come with the address)."""
        return _j(*(lbl for lbl in self.cfg.identity if lbl in ("cluster", "job", "instance")))


def _carry(name: str, expr: str, failing: str = FAILING) -> str:
    """`expr`, or record `name`'s previous value while its target's scrapes fail (see the module docstring)."""
    return f"(\n{expr}\n)\nor\n({name} and on (job, instance) {failing})"


def _per_key(cfg: Config, *extra: str) -> str:
    """The aggregation from records (identity, endpoint, model, engine: no other label) to engine keys."""
    return f"max without ({_j(*(lbl for lbl in cfg.identity if lbl not in KEY), *extra)})"


def _now(cfg: Config, selector: str) -> str:
    """`selector`'s latest sample within the scrape gap. Joined to the endpoint info, which exists only while the
    target is scraped or its failed scrapes are bridged, this keeps a value through failed scrapes and drops a
    vanished target's at once."""
    return f"last_over_time({selector}[{cfg.scrape_gap}])"


# ---------------------------------------------------------------------------------------------------------------
# Endpoints

# A sidecar target on the loopback interface (localhost, 127.0.0.0/8, [::1]; 0.0.0.0 connects there too) is vLLM in
# the sidecar's own network namespace: the same pod or machine. RE2 has no lookahead, hence the joined helper label.
LOOPBACK = r"(?:localhost|127(?:\.[0-9]+){3}|0\.0\.0\.0|\[::1\])"
_LOOPBACK_PROMQL = LOOPBACK.replace("\\", "\\\\")  # inside a PromQL string literal: backslashes doubled
_SCHEME = "[A-Za-z][A-Za-z0-9+.-]*"  # of a target URL
_PORT = "(?::[0-9]+)?"  # optional, of a host
LOCAL_TARGET = f"{_SCHEME}://{_LOOPBACK_PROMQL}{_PORT}(?:/.*)?"  # a loopback target URL, as a PromQL regex literal
_TMP = "vllm_headroom_endpoint_tmp"
_NO_DEFAULT_PORT = "(.*?)(?::(?:80|443))?"  # Prometheus 2 adds the default port to a port-less instance, 3 does not


def _vllm_endpoint(expr: str) -> str:
    return f'label_replace(\n{expr}\n, "{ENDPOINT}", "$1", "instance", "{_NO_DEFAULT_PORT}")'


def _sidecar_endpoint(expr: str) -> str:
    """`expr` (sidecar series with `target`) with the `vllm_endpoint` of the vLLM each target URL names: its
    host:port; a loopback target is the sidecar's own instance host with the target's port (what vLLM's series
    carry: the pod IP and vLLM's port), a port-less sidecar instance (relabeled to a name) taken whole."""
    by_target = f'label_replace(\n{expr}\n, "{ENDPOINT}", "$1", "target", "{_SCHEME}://([^/]+)(?:/.*)?")'
    joined = f'label_join(\n{by_target}\n, "{_TMP}", "@", "{ENDPOINT}", "instance")'
    bare = f'label_replace(\n{joined}\n, "{ENDPOINT}", "$1", "{_TMP}", "{_LOOPBACK_PROMQL}{_PORT}@(.+)")'
    back = (f'label_replace(\n{bare}\n, "{ENDPOINT}", "${{2}}${{1}}", "{_TMP}", '
            f'"{_LOOPBACK_PROMQL}(:[0-9]+)?@(.+?):[0-9]+")')
    plain = f'label_replace(\n{back}\n, "{ENDPOINT}", "$1", "{ENDPOINT}", "{_NO_DEFAULT_PORT}")'
    return f'label_replace(\n{plain}\n, "{_TMP}", "", "{_TMP}", ".*")'


def _sidecar_ep(cfg: Config, expr: str) -> str:
    """Sidecar series (identity and target) with their vllm_endpoint, from the recorded target info."""
    return f"({expr})\n* on ({_Labels(cfg).scrape}, target) group_left ({ENDPOINT}) {SIDECAR_INFO}"


def _same(op: str, lhs: str, rhs: Callable[[str], str], on: tuple[str, ...], alike: bool = False) -> str:
    """`lhs op rhs` matched on `on` (without cluster) and on `cluster` where both sides carry one: a per-job
    relabeling often adds it to one side only. `rhs(matcher)` is the right side with `matcher` added to its
    selectors ('' for none); `op` is "and" or "unless"."""
    o = _j(*on)
    variants = [("" if alike else f"cluster, {o}", rhs("")),  # the same cluster, or neither has one
                (o, rhs('cluster=""')),  # the right has none: any cluster on the left
                (f"cluster, {o}", f"group by ({o}) (\n{rhs('')}\n)")]  # the left has none: any on the right
    if op == "unless":
        return lhs + "".join(f"\nunless {_on(on_)}{r}" for on_, r in variants)
    return "\nor\n".join(f"(\n{lhs}\nand {_on(on_)}{r}\n)" for on_, r in variants)


def _on(labels: str) -> str:
    return f"on ({labels}) " if labels else ""


POD = ("namespace", "pod", ENDPOINT)


def scraped_vllm(matcher: str) -> str:
    """vLLM API servers Prometheus scrapes now (its last scrape of them worked)."""
    return f"({VLLM_INFO}{{{matcher}}} and on (job, instance) up == 1)" if matcher else \
        f"({VLLM_INFO} and on (job, instance) up == 1)"


def _judged(matcher: str) -> str:
    return f"{JUDGED}{{{matcher}}}" if matcher else JUDGED


# ---------------------------------------------------------------------------------------------------------------
# Recording rules


def _label_value(cfg: Config, info: str, label: str) -> str:
    """A numeric label of the recorded cache info as a sample value per engine; the largest, when a restart with
    another config leaves two; none where it is not a number (V1 0.8.x: num_gpu_blocks="None")."""
    return (f"(histogram_quantile(1, max by ({_Labels(cfg).e}, le) (\n"
            f'  label_replace({info}, "le", "$1", "{label}", "([0-9]+)") * 0\n'
            f'  or label_replace({info}, "le", "+Inf", "", "") * 0 + 1\n'
            f")) >= 0)")


def _onto_engines(cfg: Config, record: str) -> str:
    """A sidecar `record` per engine key (see config_rules) on vLLM's own records of the same pod, endpoint and
    engine (cluster matched where both carry one), per engine. V0's series have no engine label while its sidecar
    calls the one engine "0": an engine-less copy joins them."""
    return (f"max without (model_name) (\n{R}vllm_num_requests_running:max * 0\n+ on ({_j(*KEY)}) group_left ()\n"
            f'({record} or label_replace({record}, "engine", "", "engine", "0"))\n)')


def _bucket_quantile(cfg: Config, histogram: str) -> str:
    """Upper bound of the bucket holding the profile quantile of the requests that finished in the profile window;
    none when nothing finished in it (the lifetime is no evidence of what runs now, issue 19).

    The window's counts are each bucket's rise over its samples in the window (`x - min_over_time(x[w])`), not
    increase(): increase() extrapolates each series on its own, and buckets whose counters began apart (a server
    that served other prompts before Prometheus' first scrape) come out with unequal factors (seen live on 0.32.0).
    """
    L = _Labels(cfg)

    def rise(b: str, by: str) -> str:  # instant `b`: the record is carried through failed scrapes (profile_rules)
        return f"max by ({by}) ({b} - min_over_time({b}[{cfg.profile_window}]))"

    return (f"histogram_quantile(1, (\n  {rise(f'{histogram}_bucket{cfg.sel()}', L.raw_me + ', le')}\n"
            f"  / ignoring (le) group_left ()\n  {rise(f'{histogram}_bucket{cfg.sel(INF)}', L.raw_me)}\n"
            f") >= bool {cfg.profile_quantile}) > 0")


def _ident(cfg: Config, expr: str) -> str:
    """vLLM series aggregated to their identity (and model, engine), with the recorded vllm_endpoint."""
    return f"({expr})\n* on ({_Labels(cfg).scrape}) group_left ({ENDPOINT}) {VLLM_INFO}"


# The request profile's group: the length quantiles over the profile window (their buckets are the costliest series
# the rules read) move slowly, evaluated once a minute, before the engine group that reads them.
PROFILE_INTERVAL = "1m"


def profile_rules(cfg: Config) -> list[tuple[str, str]]:
    """The observed profile quantiles per engine, from the length histograms' instant buckets; carried through
    failed scrapes (the engine group's failing condition, inlined: this group runs first)."""
    running = N.running + cfg.sel()
    failing = (f"(up == 0) and on (job, instance)\n"
               f"group by (job, instance) (last_over_time({running}[{cfg.scrape_gap}]))")
    return [(name, f"(\n{_ident(cfg, _bucket_quantile(cfg, hist))}\n)\nor\n({name} and on (job, instance) {failing})")
            for name, hist in ((f"{R}vllm_request_prompt_tokens_observed:bucket_quantile", N.prompt_hist),
                               (f"{R}vllm_request_max_tokens_observed:bucket_quantile", N.max_tokens_hist))]


def engine_rules(cfg: Config) -> list[tuple[str, str]]:
    """Identity and each engine's state, from vLLM's own series."""
    L = _Labels(cfg)
    s, w = cfg.sel(), WINDOW
    demand = f"{R}vllm_num_requests_running:max * {R}vllm_worst_case_blocks_per_request:ceil"
    running = N.running + s

    def gauge(name: str, expr: str) -> tuple[str, str]:
        return name, _ident(cfg, expr)

    def now(selector: str) -> str:
        return _now(cfg, selector)

    def peak(selector: str) -> str:
        return f"max by ({L.raw_me}) (max_over_time({selector}[{w}]))"

    # kv_cache_usage_perc from 0.9, gpu_cache_usage_perc before; 0.9-0.10 export both, equal.
    usage_now = (f"max by ({L.raw_me}) ({now(N.kv_usage + s)})\n"
                 f"or max by ({L.raw_me}) ({now(N.kv_usage_legacy + s)})")
    free, fits = f"{R}vllm_kv_free_blocks:sub", f"{R}vllm_prompt_fits:bool"
    pressure = f"{R}vllm_kv_pressure:bool"
    r: list[tuple[str, str]] = [
        # vLLM targets whose last scrape failed (`up` 0) within the scrape gap of their last good one.
        (FAILING, f"(up == 0) + 1\nand on (job, instance)\n"
                  f"group by (job, instance) (last_over_time({running}[{cfg.scrape_gap}]))"),
        (VLLM_INFO, _carry(VLLM_INFO, _vllm_endpoint(f"group by ({L.id}) ({running})"))),
        gauge(f"{R}vllm_num_requests_running:max", f"max by ({L.raw_me}) ({now(running)})"),
        (f"{R}vllm_num_requests_running:max_over_time{w}", f"max_over_time({R}vllm_num_requests_running:max[{w}])"),
        gauge(f"{R}vllm_num_requests_waiting:max", f"max by ({L.raw_me}) ({now(N.waiting + s)})"),
        # Waiting minus vLLM's deferred waiters (LoRA, grammar, KV transfer; labelled from 0.20).
        (f"{R}vllm_num_requests_waiting_schedulable:max",
         f"{R}vllm_num_requests_waiting:max\n- on ({L.raw_me}) group_left ()\n"
         f"max by ({L.raw_me}) ({now(N.waiting_by_reason + cfg.sel(DEFERRED))})\n"
         f"or\n{R}vllm_num_requests_waiting:max"),
        gauge(f"{R}vllm_kv_usage_ratio:max", usage_now),
        (f"{R}vllm_kv_usage_ratio:max_over_time{w}",
         _ident(cfg, f"{peak(N.kv_usage + s)}\nor {peak(N.kv_usage_legacy + s)}")),
        (f"{R}vllm_kv_used_blocks:round",
         f"clamp_min(\n  round(\n"
         f"    {R}vllm_kv_usage_ratio:max * ignoring (model_name) group_left () {R}vllm_kv_capacity_blocks:usable\n"
         f"    + {R}vllm_kv_usage_ratio:max * {R}vllm_kv_usage_counts_null_block:bool\n  )\n"
         f"  - {R}vllm_kv_usage_counts_null_block:bool\n, 0)"),
        (f"{R}vllm_kv_free_blocks:sub",
         f"clamp_min(\n  {R}vllm_kv_capacity_blocks:usable\n  - ignoring (model_name) group_right ()\n"
         f"  {R}vllm_kv_used_blocks:round\n, 0)"),
        # The profile from finished requests (window, else lifetime); none while nothing ever finished.
        # ...else max_model_len (the top finite bucket): the risk basis, for W and the dashboards.
        (f"{R}vllm_request_prompt_tokens:bucket_quantile",
         f"{R}vllm_request_prompt_tokens_observed:bucket_quantile\nor\n{R}vllm_request_tokens:max_bucket"),
        (f"{R}vllm_request_max_tokens:bucket_quantile",
         f"{R}vllm_request_max_tokens_observed:bucket_quantile\nor\n{R}vllm_request_tokens:max_bucket"),
        (f"{R}vllm_prompt_blocks_observed:ceil",
         f"clamp_min(ceil(\n  {R}vllm_request_prompt_tokens_observed:bucket_quantile\n"
         f"  / ignoring (model_name) group_left ()\n  {R}vllm_block_size_tokens:max\n), 1)"),
        (f"{R}vllm_prompt_blocks:ceil",
         f"clamp_min(ceil(\n  {R}vllm_request_prompt_tokens:bucket_quantile\n"
         f"  / ignoring (model_name) group_left ()\n  {R}vllm_block_size_tokens:max\n), 1)"),
        # ceil(min(P + M, max_model_len) / bs), max_model_len read as the top finite bucket.
        (f"{R}vllm_worst_case_blocks_per_request:ceil",
         f"clamp_min(ceil(\n  (\n"
         f"    ({R}vllm_request_prompt_tokens:bucket_quantile + {R}vllm_request_max_tokens:bucket_quantile)\n"
         f"    <= {R}vllm_request_tokens:max_bucket\n    or {R}vllm_request_tokens:max_bucket\n  )\n"
         f"  / ignoring (model_name) group_left ()\n  {R}vllm_block_size_tokens:max\n), 1)"),
        # floor((B - max(used, running * W)) / W); negative = oversubscribed if requests grow to W (a risk).
        (f"{R}vllm_safe_headroom_requests:floor",
         f"floor(\n  (\n    {R}vllm_kv_used_blocks:round + {R}vllm_kv_free_blocks:sub\n"
         f"    - (({R}vllm_kv_used_blocks:round > {demand}) or {demand})\n  )\n"
         f"  / {R}vllm_worst_case_blocks_per_request:ceil\n)"),
        # `num_preemptions_total` in every recorded version (an exact name: a regex on __name__ matches every
        # metric name at each evaluation).
        (f"{R}vllm_num_preemptions:rate{w}", _ident(cfg, f"max by ({L.raw_me}) (rate({N.preemptions}{s}[{w}]))")),
        (f"{R}vllm_request_success:rate{w}", _ident(
            cfg, f"max by ({L.raw_me}) (sum without (finished_reason) (rate({N.request_success}{s}[{w}])))")),
        # Preemptions per finished request over the window; while none finishes (long generations thrashing),
        # preemptions per running request (the most that ran at once in the window), never +Inf.
        (f"{R}vllm_preemptions_per_request:ratio{w}",
         f"(\n  {R}vllm_num_preemptions:rate{w}\n  / ({R}vllm_request_success:rate{w} > 0)\n)\nor\n(\n"
         f"  {R}vllm_num_preemptions:rate{w} * {parse_duration(w):g}\n"
         f"  / ({R}vllm_num_requests_running:max_over_time{w} > 0)\n)"),
        (f"{R}vllm_engine_steps:rate{w}", _ident(
            cfg, f"(max by ({L.raw_me}) (rate({N.steps}{s}[{w}]))\nor\n"
                 f"max by ({L.raw_me}) (rate({N.generation_tokens}{s}[{w}])))")),
        # engine_sleep_state (0.12+): 1 while weights are offloaded or discarded (sleep mode).
        gauge(f"{R}vllm_engine_asleep:bool",
              f"max by ({L.raw_me}) ({now(N.sleep_state + cfg.sel(ASLEEP))})"),
        # 1 where the next observed prompt fits in free blocks; also where nothing finished yet: a prompt known
        # only as max_model_len is a risk bound and decides nothing (never a KV-full page, never a false-full veto).
        # None without the length histograms: unjudged.
        (f"{R}vllm_prompt_fits:bool", f"{free} >= bool {R}vllm_prompt_blocks_observed:ceil\n"
                                      f"or ({free} * 0 + 1 and {R}vllm_request_tokens:max_bucket)"),
        # 1 where usage reached full_usage within the window or vLLM preempted in it (the pool ran out between two
        # samples): the pool binds now.
        (pressure, f"({R}vllm_kv_usage_ratio:max_over_time{w} >= bool {cfg.full_usage})\n"
                   f"+ ({R}vllm_num_preemptions:rate{w} > bool 0) > bool 0"),
        # The sidecar's false-full condition from vLLM's series alone: requests wait, no pressure, the prompt fits.
        (f"{R}vllm_kv_false_full:bool",
         f"({R}vllm_num_requests_waiting:max > bool 0) * (1 - {pressure}) * {fits}"),
        # Truly full: requests wait and the pool holds them: usage reached full_usage within the window, a
        # preemption in it (the pool ran out between two samples), or the next prompt does not fit.
        (f"{R}vllm_kv_full:bool",
         f"({R}vllm_num_requests_waiting:max > bool 0)\n"
         f"* (({pressure} + (1 - {fits}) > bool 0) or {pressure})"),
        # The scheduler makes no step while schedulable requests wait, and the engine is not asleep.
        (f"{R}vllm_stuck:bool",
         f"(\n  ({R}vllm_num_requests_waiting_schedulable:max > 0)\n  and\n"
         f"  ({R}vllm_engine_steps:rate{w} == 0)\n  unless\n  ({R}vllm_engine_asleep:bool > 0)\n) * 0 + 1"),
        # Preemptions per request over the storm ratio and at least storm_min_preemptions in the window, per key.
        (STORM, f"{_per_key(cfg)} (\n  {R}vllm_preemptions_per_request:ratio{w} >= {cfg.preemption_ratio:g}\n"
                f"  and {R}vllm_num_preemptions:rate{w} * {parse_duration(w):g}"
                f" >= {cfg.storm_min_preemptions}\n)"),
    ]
    return r


def config_rules(cfg: Config) -> list[tuple[str, str]]:
    """Static configuration per engine (capacity, block size, max_model_len): read every config_interval."""
    L = _Labels(cfg)
    info = f"{R}vllm_cache_config:info"

    def b(selector: str) -> str:
        return _now(cfg, selector)

    def raw(metric: str, *matchers: str) -> str:
        return b(metric + cfg.sel(*matchers))

    # V1 0.8.x exports cache_config_info without `engine` while its gauges carry engine "0": that info is engine
    # 0's (reference §1.5, loggers.py:348-366 @0.8.5). V0's (no `engine` anywhere) stays engine-less.
    run = f"{R}vllm_num_requests_running:max"
    engineless = raw(N.cache_config, V0_SERIES)
    cache = (f"{raw(N.cache_config, V1_SERIES)}\nor\n{engineless} and on ({L.id}) {run}{{{V0_SERIES}}}\nor\n"
             f'label_replace({engineless} and on ({L.id}) {run}{{{V1_SERIES}}}, "engine", "0", "", "")')
    top = (f"histogram_quantile(1, max by ({L.raw_me}, le) (\n"
           f"  {raw(N.prompt_hist + '_bucket', NOT_INF)} * 0\n"
           f"  or {raw(N.prompt_hist + '_bucket', INF)} * 0 + 1\n))")
    k = _j(*KEY)
    side = [(f"endpoint_engine:{name}:max", f"max by ({k}) (\n{_sidecar_ep(cfg, b(name))}\n)")
            for name in ("vllm_headroom_kv_capacity_blocks", "vllm_headroom_block_size_tokens")]
    return [
        # The sidecar's capacity and block size (its flags or vLLM's command line) per engine key: the fallback.
        *side,
        (info, _ident(cfg, f"max by ({L.id}, engine, block_size, num_gpu_blocks) (\n{cache}\n)")),
        # From 0.9 num_gpu_blocks is the sum over the data-parallel engines of one API server.
        (f"{R}vllm_num_gpu_blocks:per_engine",
         f"{_label_value(cfg, info, 'num_gpu_blocks')}\n/ on ({L.ide}) group_left ()\n"
         f"count without (engine) (max without (model_name) ({run}))"),
        # cache_config_info's, else the sidecar's (its --block-size flag or vLLM's command line).
        (f"{R}vllm_block_size_tokens:max",
         f"{_label_value(cfg, info, 'block_size')}\nor\n{_onto_engines(cfg, side[1][0])}"),
        # 1 where block 0 is vLLM's null block (V1: its series carry `engine`); 0 on V0, whose pool has none.
        (f"{R}vllm_null_block:bool", f"max without (model_name) ({run}{{{V1_SERIES}}}) * 0 + 1\n"
                                     f"or\nmax without (model_name) ({run}{{{V0_SERIES}}}) * 0"),
        # From cache_config_info; where it has no number, the sidecar's usable blocks of the same pod and engine.
        (f"{R}vllm_kv_capacity_blocks:usable",
         f"({R}vllm_num_gpu_blocks:per_engine - {R}vllm_null_block:bool)\nor\n{_onto_engines(cfg, side[0][0])}"),
        # 1 where usage divides by num_gpu_blocks (null block counted as used): the servers that still export the
        # deprecated name (V1 <= 0.10); 0 from 0.11 and on V0 (no null block).
        (f"{R}vllm_kv_usage_counts_null_block:bool", _ident(
            cfg, f"(max by ({L.raw_me}) ({raw(N.kv_usage_legacy)}) * 0 + 1\n"
                 f"or\nmax by ({L.raw_me}) ({raw(N.kv_usage)}) * 0)")
         + f"\n* ignoring (model_name) group_left ()\n{R}vllm_null_block:bool"),
        # The highest finite bucket bound of the prompt histogram: vLLM sizes it to max_model_len (1-2-5 steps).
        (f"{R}vllm_request_tokens:max_bucket", _ident(cfg, top)),
        # 1 where the rules have no KV capacity or block size for an engine: V1 0.8.x (num_gpu_blocks="None") or a
        # cache_config_info dropped by metricRelabelings, and no sidecar of the pod that knows the number.
        (f"{R}vllm_kv_capacity_unknown:bool",
         f"(\n  {R}vllm_num_requests_running:max * 0 + 1\n  unless ignoring (model_name)\n"
         f"  ({R}vllm_kv_capacity_blocks:usable and {R}vllm_block_size_tokens:max)\n)\n"
         f"or\n{R}vllm_num_requests_running:max * 0"),
    ]


def sidecar_rules(cfg: Config) -> list[tuple[str, str]]:
    """The sidecar's targets and its judgement of each engine."""
    L = _Labels(cfg)
    st = f"{L.scrape}, target"
    k = _j(*KEY)
    seen = VERDICT_SHARE + '{verdict!="target_down"}'
    judged = (f"(\n  sum without (verdict) ({seen}) > 0.5\n)\n"
              f"and {SIDE_WAITING}")
    return [
        (SIDECAR_FAILING, f"(up == 0) + 1\nand on (job, instance)\n"
                          f"group by (job, instance) (last_over_time(vllm_headroom_up[{cfg.scrape_gap}]))"),
        # Every sidecar (its identity) while its scrape target exists: a sidecar that stops answering is one.
        (SIDECAR_SEEN, f"group by ({L.id}) (vllm_headroom_up)\nor\n({SIDECAR_SEEN} and on (job, instance) up)"),
        (SIDECAR_INFO, _carry(SIDECAR_INFO, _sidecar_endpoint(f"group by ({L.target}) (vllm_headroom_up)"),
                              SIDECAR_FAILING)),
        # How long the sidecar has failed to scrape a target (not --disable-log-stats: vLLM answers then).
        (DOWN, f"time() - vllm_headroom_target_down_since_timestamp_seconds\nand on ({st}) vllm_headroom_up == 0\n"
               f'unless on ({st}) increase(vllm_headroom_scrape_errors_total{{reason="no_vllm_metrics"}}[{WINDOW}])'
               " > 0"),
        # 1 where Prometheus scrapes the vLLM a sidecar target names (same pod and endpoint; its `up` is 1), else 0.
        (SCRAPED, f"(\n{_same('and', SIDECAR_INFO, scraped_vllm, POD)}\n) * 0 + 1\nor\n{SIDECAR_INFO} * 0"),
        (SIDECAR_WAITING, _sidecar_ep(
            cfg, f"max by ({L.target}, model_name, engine) ({_now(cfg, 'vllm_headroom_requests_waiting')})")),
        (SIDE_WAITING, f"{_per_key(cfg, 'target')} ({SIDECAR_WAITING})"),
        # Each verdict's share of the window (the sidecar exports 1 for its current verdict, 0 for the others).
        (VERDICT_SHARE, f"max by ({k}, verdict) (\n"
                        + _sidecar_ep(cfg, f"avg_over_time(vllm_headroom_verdict[{WINDOW}]) > 0") + "\n)"),
        # Engines the sidecar judges: its verdicts cover most of the window (target_down is no judgement) and it
        # reports the engine now. V0's series have no engine label, its sidecar's engine is "0": an engine-less copy.
        (JUDGED, f'(\n{judged}\n)\nor\nlabel_replace(\n{judged}\n, "engine", "", "engine", "0")'),
        # vLLM's engines that no sidecar judges: the rules judge them from vLLM's series alone.
        (ALONE_KEYS, _same("unless", f"{_per_key(cfg)} ({R}vllm_num_requests_running:max) * 0 + 1", _judged,
                           KEY[1:], alike=True)),
    ]


def fleet_rules(cfg: Config) -> list[tuple[str, str]]:
    """Per model; one copy of each engine however many jobs or replicas carry it (max over the identity)."""
    fleet_by = ", ".join(lbl for lbl in cfg.identity if lbl in ("cluster", "namespace")) + ", model_name"

    def per_model(expr: str) -> str:
        return f"sum by ({fleet_by}) (max without (job) ({expr}))"

    w = WINDOW
    return [
        ("model_name:vllm_kv_capacity_blocks:sum",
         per_model(f"{R}vllm_kv_used_blocks:round + {R}vllm_kv_free_blocks:sub")),
        ("model_name:vllm_kv_free_blocks:sum", per_model(f"{R}vllm_kv_free_blocks:sub")),
        ("model_name:vllm_num_requests_waiting:sum", per_model(f"{R}vllm_num_requests_waiting:max")),
        ("model_name:vllm_kv_false_full_engines:sum", per_model(f"{R}vllm_kv_false_full:bool")),
        ("model_name:vllm_kv_full_engines:sum", per_model(f"{R}vllm_kv_full:bool")),
        (f"model_name:vllm_num_preemptions:rate{w}", per_model(f"{R}vllm_num_preemptions:rate{w}")),
        # The replica signal (exporter/pipeline/replicas.py): one series per replica (sidecar target) and model,
        # summed: the replicas the model's demand needs at the sidecars' target utilization. KEDA or HPA scale on it
        # with AverageValue 1 (deploy/autoscaling). Instant values, no scrape-gap bridge: a replica that is gone must
        # not keep counting; a blip only lowers it, and HPA's 300 s scale-down window holds the count.
        # The sidecar's raw series carry every label its scrape adds (a ServiceMonitor adds `service`, `endpoint`),
        # so `max without (job)` would keep one copy per monitor: one per pod identity (without job), target, model
        # and engine, as the dashboards count it.
        ("model_name:vllm_headroom_replicas_needed:sum",
         f"sum by ({fleet_by}) (max by ({cfg.dedup('target', 'model_name', 'engine')}) "
         "(vllm_headroom_replicas_needed))"),
    ]


def tidy(expr: str) -> str:
    """The generated PromQL laid out compactly: no indentation, an opening parenthesis or a lone operator joined to
    the line after it, a closing one to the line before."""
    out: list[str] = []
    carry = ""
    for line in (x.strip() for x in expr.splitlines()):
        if not line:
            continue
        if carry:
            line, carry = f"{carry} {line}" if carry[-1] != "(" else carry + line, ""
        if line == "(" or line in ("or", "and", "unless") or (line.endswith("(") and len(line) < 40):
            carry = line
        elif out and (line[0] == ")" or line[0] == ","):
            out[-1] += line
        else:
            out.append(line)
    if carry:
        out.append(carry)
    return "\n".join(out)


def recording_groups(cfg: Config) -> list[dict[str, Any]]:
    def group(name: str, rules: list[tuple[str, str]], interval: str = "") -> dict[str, Any]:
        head: dict[str, Any] = {"name": name}
        if interval:
            head["interval"] = interval
        return {**head, "rules": [{"record": n, "expr": tidy(x)} for n, x in rules]}

    return [group("vllm-headroom.profile.rules", profile_rules(cfg), PROFILE_INTERVAL),
            group("vllm-headroom.engine.rules", engine_rules(cfg)),
            group("vllm-headroom.config.rules", config_rules(cfg), cfg.config_interval),
            group("vllm-headroom.sidecar.rules", sidecar_rules(cfg)),
            group("vllm-headroom.fleet.rules", fleet_rules(cfg))]


def recording_rules(cfg: Config) -> list[dict[str, str]]:
    return [r for g in recording_groups(cfg) for r in g["rules"]]


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
    labels: tuple[tuple[str, str], ...] = ()  # static labels beside severity (two rules of one alert apart)
    group: str = "kv"


# Which vLLM: its pod and endpoint in Kubernetes (a pod may run two vLLMs; the namespace is a label), the endpoint
# elsewhere.
WHERE = "{{ with $labels.pod }}{{ . }} at {{ end }}{{ $labels.vllm_endpoint }}"
# Which sidecar: its own pod and address.
SIDECAR = "{{ with $labels.pod }}of {{ . }} {{ end }}at {{ $labels.instance }}"
# Which engine: V0 (vLLM <= 0.10 with VLLM_USE_V1=0) labels no engine, so the part is left out there.
ENGINE = WHERE + " ({{ $labels.model_name }}{{ with $labels.engine }}, engine {{ . }}{{ end }})"


def _minutes(d: str) -> str:
    s = parse_duration(d)
    return f"{s / 60:g} minutes" if s >= 60 else f"{s:g} seconds"


# The sidecar series the rules read, by what every sidecar of our schema must export them for: itself, each target,
# each engine. VLLMHeadroomRulesSkew says when one is missing for a target that reports engines
# (vllm_headroom_requests_running).
SIDECAR_READS = {
    "sidecar": ("vllm_headroom_build_info", "vllm_headroom_up"),
    "target": ("vllm_headroom_target_seen_up", "vllm_headroom_scrape_errors_total"),
    "engine": ("vllm_headroom_verdict", "vllm_headroom_requests_waiting"),
}


def alerts(cfg: Config) -> list[Alert]:
    """The alerts, each with its own `unless` against the alert that explains it (one fault, one page)."""
    L = _Labels(cfg)
    k, w = _j(*KEY), WINDOW
    sk, st = L.scrape, f"{L.scrape}, target"  # enough to match set operations
    per_key = _per_key(cfg)
    full = f"{cfg.full_usage:g}"

    def f(name: str, default: str) -> str:
        return cfg.for_.get(name, default)

    def share(alert: str) -> str:
        """The sidecar's verdicts that speak for `alert`, their share of the window per engine key, above half."""
        return f'sum without (verdict) ({VERDICT_SHARE}{{verdict=~"{"|".join(verdicts_of(alert))}"}}) > 0.5'

    def vllm_path(expr: str, judged: bool = True, sleeping: bool = True) -> str:
        """`expr` from vLLM's records per engine key, unless the engine sleeps or (`judged`) a sidecar judges it."""
        if sleeping:
            expr = f"(\n{expr}\n)\nunless {R}vllm_engine_asleep:bool > 0"
        out = f"{per_key} (\n{expr}\n)"
        return f"{out}\nand {ALONE_KEYS}" if judged else out

    def sidecar_path(alert: str, value: str = f"{SIDE_WAITING} > 0") -> str:
        return f"{value}\nand {share(alert)}"

    def either(alert: str, alone: str, **kw: bool) -> str:
        return f"{sidecar_path(alert)}\nor\n{vllm_path(alone, **kw)}"

    def how(alert: str, alone: str) -> str:
        """How the alert judges: the sidecar's verdict, or vLLM's series alone where no sidecar judges."""
        return f"sidecar verdict {'/'.join(verdicts_of(alert))} held, else vLLM's series: {alone}"

    pressure = f"{R}vllm_kv_pressure:bool == 1"
    kv_full = f"{R}vllm_kv_full:bool == 1"
    no_metrics = f'increase(vllm_headroom_scrape_errors_total{{reason="no_vllm_metrics"}}[{w}]) > 0'
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
    t_skew, t_dup = f("VLLMHeadroomRulesSkew", "15m"), f("VLLMHeadroomDuplicateSeries", "15m")
    limit, after = parse_duration(cfg.startup_limit), parse_duration(cfg.target_down_after)
    liveness = cfg.dedup("target", ENDPOINT)

    def down_for(seconds: float, scraped: int) -> str:
        """The sidecar has failed to scrape vLLM for more than `seconds`, and Prometheus does (`scraped` 1) or does
        not (0) scrape that vLLM."""
        return f"({DOWN} > {seconds:g})\n* on ({st}) group_left ({ENDPOINT}) ({SCRAPED} == {scraped})"

    ours = f'vllm_headroom_build_info{{schema="{SCHEMA_VERSION}"}}'

    # Targets of a sidecar of our schema that report engines but lack one of the per-target and per-engine series.
    reads = (*SIDECAR_READS["target"], *SIDECAR_READS["engine"])
    missing = (f'(count by ({st}) (group by ({st}, __name__) ({{__name__=~"{"|".join(reads)}"}}))\n'
               f"or group by ({st}) (vllm_headroom_requests_running) * 0) < {len(reads)}\n"
               f"and on ({st}) vllm_headroom_requests_running")
    fix_kv = "Add KV memory or replicas."
    return [
        Alert("VLLMKVFalseFull",
              either("VLLMKVFalseFull", f"{R}vllm_num_requests_waiting:max\nand {R}vllm_kv_false_full:bool == 1\n"
                                        f"unless {R}vllm_stuck:bool"),
              t_ff, "warning", "vLLM requests wait although the KV cache has room (false-full).",
              f"{ENGINE}: {{{{ $value | humanize }}}} requests have waited {_minutes(t_ff)} beside free KV blocks ("
              + how("VLLMKVFalseFull", f"usage under {full}, no preemption, the prompt fits") +
              ")."),
        Alert("VLLMKVCacheFull",
              f"(\n{either('VLLMKVCacheFull', f'{R}vllm_num_requests_waiting:max and {kv_full}')}\n)\n"
              f"unless {STORM}",
              t_full, "warning", "vLLM's KV cache is truly full: requests wait for blocks.",
              f"{ENGINE}: {{{{ $value | humanize }}}} requests have waited {_minutes(t_full)} for KV blocks ("
              + how("VLLMKVCacheFull", f"usage at {full}, a preemption, or the observed prompt does not fit") +
              f"). {fix_kv}"),
        Alert("VLLMPreemptionStorm",
              f"{per_key} ({R}vllm_preemptions_per_request:ratio{w})\nand {STORM}",
              t_storm, "critical", "vLLM preempts a large share of its requests (KV thrash).",
              f"{ENGINE}: {{{{ $value | humanizePercentage }}}} preemptions per finished (else running) request over "
              f"{w}, at least {cfg.storm_min_preemptions}, for {_minutes(t_storm)}. " + fix_kv),
        Alert("VLLMKVOversubscribed",
              vllm_path(f"{R}vllm_safe_headroom_requests:floor < 0\nand {pressure}\nunless {kv_full}", judged=False)
              + f"\nunless {STORM}",
              t_over, "warning", "vLLM's running requests may outgrow the KV pool, under pressure.",
              f"{ENGINE}: safe headroom {{{{ $value | humanize }}}} requests (a risk: running × worst case exceeds "
              f"the pool) with usage at {full} or preemptions, for {_minutes(t_over)}."),
        Alert("VLLMKVOversubscribed",
              vllm_path(f"{R}vllm_safe_headroom_requests:floor < 0\nunless {pressure}", judged=False),
              t_over, "info", "vLLM over-commits its KV pool (normal; no pressure yet).",
              f"{ENGINE}: safe headroom {{{{ $value | humanize }}}} requests: a risk, no pressure yet (usage under "
              f"{full}, no preemptions)."),
        Alert("VLLMSchedulerStuck",
              either("VLLMSchedulerStuck",
                     f"{R}vllm_num_requests_waiting_schedulable:max\nand {R}vllm_stuck:bool"),
              t_stuck, "critical", "vLLM has queued requests but makes no engine steps.",
              f"{ENGINE}: {{{{ $value | humanize }}}} requests wait and the engine made no step for "
              f"{_minutes(f'{parse_duration(w) + parse_duration(t_stuck):g}s')} ("
              + how("VLLMSchedulerStuck", "flat step counters") + ").",
              group="scheduler"),
        Alert("VLLMEngineAsleepWithQueue",
              either("VLLMEngineAsleepWithQueue",
                     f"{R}vllm_num_requests_waiting:max > 0\nand {R}vllm_engine_asleep:bool > 0", sleeping=False),
              t_sleep, "info", "vLLM is in sleep mode while requests wait (deliberate; no page).",
              f"{ENGINE}: {{{{ $value | humanize }}}} requests wait while the engine sleeps, for {_minutes(t_sleep)}. "
              "Wake it (POST /wake_up).",
              group="scheduler"),
        Alert("VLLMHeadroomNeverFits", sidecar_path("VLLMHeadroomNeverFits"), t_never, "critical",
              "vLLM's queue head needs more KV blocks than the pool: it never runs.",
              f"{ENGINE}: {{{{ $value | humanize }}}} requests wait behind a head larger than the pool, for "
              f"{_minutes(t_never)} (sidecar verdict never_fits). Lower max_model_len to what the pool holds."),
        Alert("VLLMHeadroomBudgetFull", sidecar_path("VLLMHeadroomBudgetFull"), t_budget, "warning",
              "vLLM's requests wait for the step token budget, not for KV.",
              f"{ENGINE}: {{{{ $value | humanize }}}} requests have waited {_minutes(t_budget)} for the step token "
              "budget (sidecar verdict budget_full). Raise max_num_batched_tokens."),
        Alert("VLLMHeadroomCapacityConfigError",
              f"max by ({k}) (\n"
              + _sidecar_ep(cfg, 'vllm_headroom_capacity_undetermined{reason="config_error"} == 1') + "\n)",
              t_cfg, "warning", "The sidecar refuses an engine's configuration.",
              f"{ENGINE}: the sidecar refuses its configuration (e.g. num_gpu_blocks < 2; "
              f"{{{{ $value | humanize }}}}) for {_minutes(t_cfg)}; its /api/v1/diagnosis names the value.",
              group="sidecar"),
        Alert("VLLMKVBlockLeak",
              sidecar_path("VLLMKVBlockLeak", f"{per_key} ({R}vllm_kv_used_blocks:round)") + "\nor\n" + vllm_path(
                  f"{R}vllm_kv_used_blocks:round > 0\nand {R}vllm_num_requests_running:max == 0\n"
                  f"and {R}vllm_num_requests_waiting:max == 0"),
              t_leak, "warning", "vLLM keeps KV blocks in use with no request running.",
              f"{ENGINE}: {{{{ $value | humanize }}}} KV blocks stayed in use for {_minutes(t_leak)} with nothing "
              "running or waiting (" + how("VLLMKVBlockLeak", "its gauges") + ")."),
        # V1 exports the length histograms from start-up, V0 once a request finished; a scraped engine without
        # them lost them to metricRelabelings (or a recording rule's drop list).
        Alert("VLLMKVHistogramsMissing",
              vllm_path(f"{R}vllm_num_requests_waiting:max\nand (\n"
                        f"  {R}vllm_num_requests_running:max and ignoring (model_name) {R}vllm_null_block:bool == 1\n"
                        f"  or {R}vllm_request_success:rate{w} > 0\n)\nunless {R}vllm_request_tokens:max_bucket",
                        judged=False),
              t_hist, "warning",
              "vLLM's prompt-length histogram is not scraped.",
              f"{ENGINE}: no {N.prompt_hist}_bucket for {_minutes(t_hist)} ({{{{ $value | humanize }}}} "
              "wait): no false-full or oversubscription without a sidecar. Keep the histograms in the scrape."),
        # Only while it matters: requests wait under the full-usage threshold, no stuck scheduler, no sidecar.
        Alert("VLLMKVCapacityUnknown",
              vllm_path(f"{R}vllm_num_requests_waiting:max > 0\nand {R}vllm_kv_capacity_unknown:bool == 1\n"
                        f"unless {kv_full}\nunless {R}vllm_stuck:bool"),
              t_cap, "warning",
              "vLLM's KV capacity is unknown to the rules while requests wait.",
              f"{ENGINE}: {{{{ $value | humanize }}}} requests wait, no KV capacity known (no {N.cache_config} "
              f"number, no sidecar), for {_minutes(t_cap)}. Run the sidecar with --num-gpu-blocks."),
        # A sidecar by its scrape selector (`up` of one that never came up) or as a target that once exported
        # vllm_headroom_up; one alert per pod, none while any job gets its series.
        Alert("VLLMHeadroomSidecarDown",
              f"max by ({cfg.dedup()}) (\n"
              f"  (up{{{cfg.sidecar_selector}}} == 0 or up == 0 and on ({sk}) {SIDECAR_SEEN})\n"
              f"  unless on ({cfg.dedup()}) vllm_headroom_up\n)",
              t_sd, "warning", "The vllm-headroom sidecar is not scraped.",
              f"Prometheus cannot scrape the sidecar {SIDECAR} for {_minutes(t_sd)}: the engine alerts judge from "
              "vLLM's series alone.", group="sidecar"),
        # Told apart by `cause`: vLLM is gone (Prometheus has no vLLM series of the pod either) past the start-up
        # limit, or only the sidecar cannot reach a vLLM that Prometheus still scrapes.
        Alert("VLLMHeadroomTargetDown",
              f"max by ({liveness}, cause) (\n"
              f'label_replace({down_for(limit, 0)}\nand on ({st}) vllm_headroom_target_seen_up == 1, '
              f'"cause", "vllm_down", "", "")\n'
              f'or label_replace({down_for(after, 1)}, "cause", "sidecar_unreachable", "", "")\n)',
              t_td, "warning", "vLLM stopped answering its sidecar and is not back.",
              f"{WHERE}: the sidecar cannot scrape vLLM ({{{{ $labels.cause }}}}: vllm_down, "
              f"{_minutes(cfg.startup_limit)} after it was up, nor can Prometheus; sidecar_unreachable, "
              f"{_minutes(cfg.target_down_after)}, Prometheus can). The sidecar's /readyz says why.", group="sidecar"),
        Alert("VLLMStartupSlow",
              f"max by ({liveness}) (\n{down_for(limit, 0)}\nand on ({st}) vllm_headroom_target_seen_up == 0\n)",
              t_start, "warning", "vLLM has not come up since its sidecar started.",
              f"{WHERE}: vLLM has not answered once in the {_minutes(cfg.startup_limit)} since its sidecar started; "
              "check vLLM's log.", group="sidecar"),
        # vLLM with --disable-log-stats exports nothing that a FastAPI router does not: the sidecar is the evidence.
        Alert("VLLMMetricsAbsent",
              f"max by (cluster, {_j(*POD)}) (\n" + _sidecar_ep(cfg, no_metrics) + "\n)",
              t_abs, "warning", "vLLM answers but exports no engine metrics (--disable-log-stats?).",
              f"{WHERE} serves vLLM's API without {N.prefix}* engine metrics for {_minutes(t_abs)} "
              "(--disable-log-stats?).", group="sidecar"),
        # Only where the sidecar's series name vLLM's pod: a loopback target, or outside Kubernetes (no pod label).
        Alert("VLLMHeadroomVllmNotScraped",
              f"max by ({liveness}) (\n"
              f'  (\n    min_over_time(vllm_headroom_up{{target=~"{LOCAL_TARGET}"}}[{w}]) == 1\n'
              f'    or min_over_time(vllm_headroom_up{{pod=""}}[{w}]) == 1\n  )\n'
              f"  * on ({st}) group_left ({ENDPOINT}) ({SCRAPED} == 0)\n)",
              t_unscraped, "warning", "The sidecar reads vLLM's metrics, but Prometheus does not scrape vLLM.",
              f"{WHERE}: the sidecar has read vLLM's metrics for {_minutes(t_unscraped)}, Prometheus has none: "
              "check the monitor's port (Helm: vllm.portName).", group="sidecar"),
        # A sidecar of another schema, or of ours lacking a series the rules read. Not one without build_info at all
        # (every release exports it; a relabelling that drops it is not caught: docs/runbook.md says so).
        Alert("VLLMHeadroomRulesSkew",
              f"max by ({cfg.dedup('target', 'schema', 'cause')}) (\n"
              f'label_replace(vllm_headroom_build_info{{schema!="{SCHEMA_VERSION}"}}, "cause", "schema", "", "")\n'

              f'or label_replace(({missing})\n* on ({sk}) group_left (namespace, pod, container) {ours}, '
              '"cause", "series_missing", "", "")\n'
              f'or label_replace({ours} unless on ({sk}) vllm_headroom_up, "cause", "series_missing", "", "") * 0\n)',
              t_skew, "warning", "The sidecar and the rules disagree on their series.",
              f"The sidecar {SIDECAR}{{{{ with $labels.target }}}} ({{{{ . }}}}){{{{ end }}}} and these rules (schema "
              f"{SCHEMA_VERSION}) disagree for {_minutes(t_skew)}: "
              '{{ if eq $labels.cause "schema" }}it exports schema {{ $labels.schema }}{{ else }}it exports '
              f"{{{{ $value | humanize }}}} of the {len(reads)} series the rules read per target{{{{ end }}}}. "
              "Upgrade sidecar and rules together.",
              group="bundle"),
        # Copies of one engine's series that differ only in labels outside the identity: an HA pair's replicas.
        Alert("VLLMHeadroomDuplicateSeries",
              f"max by (cluster, namespace, pod, instance) (count by ({L.raw_me}) ({N.running}"
              f"{cfg.sel()}) > 1)",
              t_dup, "warning", "vLLM's series arrive more than once (no de-duplication).",
              "Each series of {{ with $labels.pod }}{{ . }} at {{ end }}{{ $labels.instance }} "
              f"arrives {{{{ $value | humanize }}}} times (HA replicas without "
              f"de-duplication?) for {_minutes(t_dup)}: the rules count it once, other sums double. De-duplicate.",
              group="bundle"),
    ]


def anchor(name: str) -> str:
    """GitHub's anchor of a `## <name>` heading."""
    return re.sub(r"[^a-z0-9_-]", "", name.lower())


def alert_rule(cfg: Config, a: Alert) -> dict[str, Any]:
    return {
        "alert": a.name,
        "expr": tidy(a.expr),
        "for": a.for_,
        "labels": {"severity": a.severity, **dict(a.labels)},
        "annotations": {
            "summary": a.summary,
            "description": a.description,
            "runbook_url": f"{cfg.runbook_url}#{anchor(a.name)}",
        },
    }


ALERT_GROUPS = ("kv", "scheduler", "sidecar", "bundle")
SLOW_ALERT_GROUPS = ("bundle",)


def rule_groups(cfg: Config) -> dict[str, Any]:
    """The plain rules file: recording groups first, then the alert groups that use them."""
    every = alerts(cfg)

    def group(g: str) -> dict[str, Any]:
        # The bundle's own alerts (rule/sidecar skew, duplicate series) are about how it is deployed, held 15 minutes:
        # evaluated with the static configuration, every config_interval.
        head: dict[str, Any] = {"name": f"vllm-headroom.{g}.alerts"}
        if g in SLOW_ALERT_GROUPS:
            head["interval"] = cfg.config_interval
        return {**head, "rules": [alert_rule(cfg, a) for a in every if a.group == g]}

    return {"groups": [*recording_groups(cfg), *(group(g) for g in ALERT_GROUPS)]}
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
        # vLLM gone: its engine alerts die with its series (after the scrape-gap bridge), and alerts from other
        # rule evaluations (an HA pair) may still arrive; the sidecar-unreachable rule (vLLM serving, Prometheus
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

    def with_(m: re.Match[str]) -> str:
        v = labels.get(m.group(1))
        then, _, otherwise = m.group(2).partition("{{ else }}")
        return then.replace("{{ . }}", v) if v else otherwise

    def eq(m: re.Match[str]) -> str:
        return m.group(3) if labels.get(m.group(1)) == m.group(2) else (m.group(4) or "")

    out = re.sub(r"\{\{ with \$labels\.(\w+) \}\}(.*?)\{\{ end \}\}", with_, template)
    out = re.sub(r'\{\{ if eq \$labels\.(\w+) "([^"]*)" \}\}(.*?)(?:\{\{ else \}\}(.*?))?\{\{ end \}\}', eq, out)
    out = re.sub(r"\{\{ if \$labels\.(\w+) \}\}(.*?)(?:\{\{ else \}\}(.*?))?\{\{ end \}\}", cond, out)
    out = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), out)
    if value is not None:
        out = out.replace("{{ $value | humanize }}", humanize(value))
        out = out.replace("{{ $value | humanizePercentage }}", _go_g(value * 100) + "%")
    return out
