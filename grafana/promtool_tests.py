"""`promtool test rules` cases: each fault with a firing and a quiet twin, at 15 s, 30 s and 60 s scrape intervals.

Input series look like a real vLLM exposition (tests/fixtures/vllm-0.32.0; `version` "0.10" adds the deprecated
usage name that counts the null block, "0.8" has only that name and no `engine` label): 40 blocks of 32 tokens
(39 usable), 1-2-5 length buckets up to max_model_len 512, counters with `_total`. Prometheus' side of a scrape is
modelled too: a failed scrape writes a stale marker on every series of the target and keeps its `up` at 0; a target
that vanishes (pod deleted) loses its `up` as well. Every case states exactly which alerts fire at the end (with
labels, severity and rendered annotations) and all others must be silent, so a double page fails the test.
Expected annotations are rendered from the templates the rules carry.

Generated at test time, not committed: `python -m grafana.promtool_tests DIR` writes the rules and the suite to DIR
for a manual `promtool test rules DIR/vllm-headroom-rules-test.yaml`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.core.units import parse_duration
from exporter.engines.vllm import VLLM
from exporter.expose.collector import SCHEMA_VERSION

from .config import DEFAULT, Config
from .rules import ENDPOINT, KEY, LOOPBACK, Alert, alert_rule, alerts, render

N = VLLM.names  # vLLM's metric names: exporter/engines/vllm/metrics.py
INTERVALS = ("15s", "30s", "60s")
MINUTES = 30  # simulated time of every case
END = f"{MINUTES}m"
BUCKETS = ("1.0", "2.0", "5.0", "10.0", "20.0", "50.0", "100.0", "200.0", "500.0", "+Inf")

Labels = dict[str, str]
REPLICA_LABELS = ("prometheus_replica",)  # what tells two HA replicas' copies of a series apart here
Value = float | None  # None: no sample (target down, series not yet exported); STALE: Prometheus' stale marker
STALE = math.nan  # what a failed scrape writes for every series of the target: they vanish at once
Fn = Callable[[float], Value]

# A vLLM pod outside Kubernetes, and one inside (a PodMonitor's labels); their sidecars.
BARE = {"job": "vllm", "instance": "host-a:8000"}
BARE_SIDECAR = {"job": "vllm-headroom", "instance": "host-a:9478"}
K8S = {"job": "llm/vllm", "namespace": "llm", "pod": "vllm-0", "container": "vllm", "instance": "10.0.0.5:8000"}
K8S_SIDECAR = {**K8S, "job": "llm/vllm-headroom", "container": "vllm-headroom", "instance": "10.0.0.5:9478"}
MODEL = "tiny-llama"
# cache_config_info of V1 0.8.x: CacheConfig's fields as recorded from 0.8.5 (tests/fixtures/vllm-0.8.5-v0, the
# same class on both engines), exported by the V1 front end before the engine core starts, so num_gpu_blocks is
# still "None" and there is no `engine` label (reference vllm-metrics-and-admission.md §1.5, vLLM issue #15538).
# tests/monitoring/test_versions.py checks these keys against the recording.
V1_08_INFO = {"block_size": "32", "cache_dtype": "auto", "calculate_kv_scales": "False",
              "cpu_kvcache_space_bytes": "1073741824", "cpu_offload_gb": "0", "enable_prefix_caching": "True",
              "gpu_memory_utilization": "0.9", "is_attention_free": "False", "num_cpu_blocks": "None",
              "num_gpu_blocks": "None", "num_gpu_blocks_override": "None", "prefix_caching_hash_algo": "builtin",
              "sliding_window": "None", "swap_space": "4", "swap_space_bytes": "4294967296"}


def _f(v: float | Fn) -> Fn:
    if callable(v):
        return v
    const = float(v)
    return lambda _t: const


def _encode(values: list[Value]) -> str:
    """promtool's expanding notation: runs of missing samples, constants and constant steps compressed."""
    out: list[str] = []
    i = 0
    while i < len(values):
        v = values[i]
        if v is not None and math.isnan(v):
            out.append("stale")
            i += 1
            continue
        if v is None:
            j = i
            while j < len(values) and values[j] is None:
                j += 1
            out.append(f"_x{j - i}" if j - i > 1 else "_")
            i = j
            continue
        j = i + 1
        step = None
        while j < len(values) and values[j] is not None and not math.isnan(values[j]):  # type: ignore[arg-type]
            d = round(float(values[j]) - float(values[j - 1]), 9)  # type: ignore[arg-type]
            if step is None:
                step = d
            elif d != step:
                break
            j += 1
        n = j - i - 1
        if n == 0:
            out.append(f"{v:g}")
        elif step == 0:
            out.append(f"{v:g}x{n}")
        else:
            out.append(f"{v:g}{'+' if step and step > 0 else '-'}{abs(step or 0):g}x{n}")
        i = j
    return " ".join(out)


@dataclass
class Clock:
    interval: float
    stale: Callable[[float], bool] | None = None  # times at which every series gets Prometheus' stale marker

    @property
    def times(self) -> list[float]:
        return [k * self.interval for k in range(int(MINUTES * 60 / self.interval) + 1)]

    def series(self, name: str, labels: Labels, fn: Fn) -> dict[str, str]:
        body = ",".join(f'{k}="{v}"' for k, v in labels.items())
        stale = self.stale or (lambda _t: False)
        return {"series": f"{name}{{{body}}}", "values": _encode([STALE if stale(t) else fn(t) for t in self.times])}

    def counter(self, rate: float | Fn, reset_at: float | None = None, alive: Fn | None = None,
                start: float = 0.0) -> Fn:
        """A counter at `start` when first scraped, rising at `rate` per second, restarting from 0 at `reset_at`."""
        r = _f(rate)
        acc: dict[float, float] = {}
        total = start
        for t in self.times:
            if reset_at is not None and t == reset_at:
                total = 0.0
            elif t > 0:
                total += (r(t) or 0) * self.interval
            acc[t] = total

        def fn(t: float) -> Value:
            if alive is not None and alive(t) is None:
                return None
            return acc[t]

        return fn


@dataclass
class Engine:
    """One vLLM engine's series; defaults are a busy, healthy vLLM 0.32 engine."""

    labels: Labels = field(default_factory=lambda: dict(BARE))
    model: str = MODEL
    engine: str | None = "0"
    usage: float | Fn = 0.6
    running: float | Fn = 8
    waiting: float | Fn = 0
    deferred: float | None = 0
    asleep: bool = False
    prompt_le: str = "20.0"  # bucket of every finished request's prompt
    max_tokens_le: str = "100.0"
    # Requests with a top-bucket prompt that finished before Prometheus' first scrape (a server that served other
    # traffic first): the buckets' counters start unequal, which increase()'s extrapolation does not survive.
    earlier_long_prompts: float = 0
    finished_per_s: float = 10
    preempt_per_s: float = 0
    steps_per_s: float = 10
    num_gpu_blocks: str = "40"
    # "0.32"; "0.10" adds the deprecated usage name (null block counted); "0.8" has only that name (V0 when
    # engine=None); "0.8-v1": V1 0.8.x, that name, `engine` on the gauges, cache_config_info as V1_08_INFO.
    version: str = "0.32"
    info: bool = True  # False: cache_config_info dropped by metricRelabelings
    reset_at: float | None = None
    up_from: float = 0  # seconds: series absent before (loading)
    up_until: float | None = None  # seconds: series absent from then on (down)
    # Seconds [from, to) in which Prometheus' scrapes of vLLM fail: a stale marker at the first failed scrape, then
    # nothing (what Prometheus writes), while vLLM's counters go on.
    gaps: tuple[tuple[float, float], ...] = ()
    histograms: bool = True  # False: the length histograms' _bucket series dropped by metricRelabelings

    def alive(self, t: float) -> Value:
        up = t >= self.up_from and (self.up_until is None or t < self.up_until)
        return 1 if up and not any(a <= t < b for a, b in self.gaps) else None

    def _stale(self, t: float, dt: float) -> bool:
        """The first missed scrape after a scraped one, where Prometheus writes a stale marker."""
        return t - dt >= 0 and self.alive(t - dt) is not None and self.alive(t) is None

    def gated(self, v: float | Fn) -> Fn:
        f = _f(v)
        return lambda t: f(t) if self.alive(t) is not None else None

    @property
    def engine_labels(self) -> Labels:
        out = {**self.labels, "model_name": self.model}
        if self.engine is not None:
            out["engine"] = self.engine
        return out

    @property
    def alert_labels(self) -> Labels:
        """Labels of this engine's alerts: the engine key (cluster, namespace, pod, vLLM's endpoint, model, engine)."""
        return {k: v for k, v in self.record_labels.items() if k in KEY}

    @property
    def record_labels(self) -> Labels:
        """Labels of this engine's instance_engine: records: its identity (not a replica label), model, engine and
        vLLM's endpoint."""
        out = {k: v for k, v in self.engine_labels.items() if k not in REPLICA_LABELS}
        out[ENDPOINT] = _plain(self.labels["instance"])
        return out

    @property
    def capacity_labels(self) -> Labels:
        """Labels of this engine's per-engine (model-less) records."""
        return {k: v for k, v in self.record_labels.items() if k != "model_name"}

    def series(self, c: Clock) -> list[dict[str, str]]:
        c = Clock(c.interval, lambda t: self._stale(t, c.interval))
        lb = self.engine_labels
        info = {k: v for k, v in lb.items() if k != "model_name"}
        if self.version == "0.8-v1":
            info = {**{k: v for k, v in info.items() if k != "engine"}, **V1_08_INFO}
        else:
            info = {**info, "block_size": "32", "num_gpu_blocks": self.num_gpu_blocks, "enable_prefix_caching": "True"}
        out = [c.series(N.cache_config, info, self.gated(1))] if self.info else []
        names = {"0.32": [N.kv_usage],
                 "0.10": [N.kv_usage, N.kv_usage_legacy],
                 "0.8": [N.kv_usage_legacy], "0.8-v1": [N.kv_usage_legacy]}[self.version]
        for n in names:
            out.append(c.series(n, lb, self.gated(self.usage)))
        out += [c.series(N.running, lb, self.gated(self.running)),
                c.series(N.waiting, lb, self.gated(self.waiting))]
        if self.deferred is not None and self.version == "0.32":
            w = _f(self.waiting)
            d = self.deferred
            out.append(c.series(N.waiting_by_reason, {**lb, "reason": "deferred"}, self.gated(d)))
            out.append(c.series(N.waiting_by_reason, {**lb, "reason": "capacity"},
                                self.gated(lambda t: (w(t) or 0) - d)))
        if self.version == "0.32":
            for state, v in (("awake", 0 if self.asleep else 1), ("weights_offloaded", 1 if self.asleep else 0)):
                out.append(c.series(N.sleep_state, {**lb, "sleep_state": state}, self.gated(v)))
        out.append(c.series(N.preemptions, lb,
                            c.counter(self.preempt_per_s, self.reset_at, self.alive)))
        out.append(c.series(N.request_success, {**lb, "finished_reason": "length"},
                            c.counter(self.finished_per_s, self.reset_at, self.alive)))
        out.append(c.series(N.steps, lb,
                            c.counter(self.steps_per_s, self.reset_at, self.alive)))
        if not self.histograms:
            return out
        for hist, le in ((N.prompt_hist + "_bucket", self.prompt_le),
                         (N.max_tokens_hist + "_bucket", self.max_tokens_le)):
            reached = False
            for b in BUCKETS:
                reached = reached or b == le
                earlier = self.earlier_long_prompts if b in BUCKETS[-2:] else 0
                out.append(c.series(hist, {**lb, "le": b},
                                    c.counter(self.finished_per_s if reached else 0, self.reset_at, self.alive,
                                              earlier)))
        return out


@dataclass
class Pod:
    """Prometheus' `up` of a vLLM target and, optionally, its sidecar's series (scraped by one job or several)."""

    labels: Labels = field(default_factory=lambda: dict(BARE))
    sidecar: Labels | None = field(default_factory=lambda: dict(BARE_SIDECAR))
    vllm_up_from: float = 0  # the sidecar first scrapes vLLM successfully
    vllm_up_until: float | None = None
    vllm_gap: tuple[float, float] | None = None  # seconds [from, to): vLLM does not answer (scrapes fail)
    # Seconds [from, to) in which Prometheus' scrapes of vLLM fail (its `up` 0) while the sidecar still reads vLLM;
    # (t, t + 1): the one scrape at t, at any interval.
    prom_gaps: tuple[tuple[float, float], ...] = ()
    deleted_at: float | None = None  # the pod is deleted (rolling deploy, reschedule): its targets vanish
    sidecar_gaps: tuple[tuple[float, float], ...] = ()  # seconds [from, to) in which Prometheus' scrapes of it fail
    sidecar_scraped_until: float | None = None  # Prometheus stops reaching the sidecar
    sidecar_never_up: bool = False  # the sidecar never answered Prometheus (crash loop, image pull error)
    sidecar_jobs: tuple[str, ...] = ()  # further jobs scraping the same sidecar (a ServiceMonitor and a PodMonitor)
    # `target` (vLLM's URL) on the sidecar's per-target series; None: http://127.0.0.1:<vLLM's port>, a sidecar beside
    # its vLLM. A sidecar watching several servers is one Pod per server; the sidecar's own `up` is emitted by the
    # pod whose `sidecar_owner` is True.
    sidecar_target: str | None = None
    sidecar_owner: bool = True
    no_vllm_metrics: bool = False  # --disable-log-stats: vLLM answers without vLLM's series
    api_requests: bool = False  # http_requests_total for an OpenAI API handler (vLLM's, or any FastAPI app's)
    api_handler: str = "/v1/models"
    sidecar_fails: tuple[float, float] | None = None  # seconds [from, to): the sidecar's scrapes of vLLM fail
    verdict: str | None = None  # the sidecar's vllm_headroom_verdict for engine 0 of MODEL (None: not exported)
    waiting: float = 0  # the sidecar's vllm_headroom_requests_waiting beside that verdict
    flicker: tuple[tuple[str, float], ...] = ()  # instead of `verdict`: a repeating cycle of (verdict, seconds)
    undetermined: str | None = None  # vllm_headroom_capacity_undetermined{reason} of that engine
    # (usable blocks, block size) the sidecar exports for that engine (vllm_headroom_kv_capacity_blocks,
    # vllm_headroom_block_size_tokens), e.g. from its --num-gpu-blocks flag on V1 0.8.x
    capacity: tuple[float, float] | None = None
    vllm_scraped: bool = True  # False: no job scrapes vLLM (a monitor's port name that matches no port): no `up` either
    schema: str = SCHEMA_VERSION  # of the sidecar's vllm_headroom_build_info
    omit: tuple[str, ...] = ()  # sidecar series it does not export (a renamed series)

    def vllm_up(self, t: float) -> bool:
        gap = self.vllm_gap is not None and self.vllm_gap[0] <= t < self.vllm_gap[1]
        return t >= self.vllm_up_from and (self.vllm_up_until is None or t < self.vllm_up_until) and not gap

    def sidecar_ok(self, t: float) -> float:
        """The sidecar's vllm_headroom_up at `t`."""
        fails = self.sidecar_fails
        if self.no_vllm_metrics or (fails is not None and fails[0] <= t < fails[1]):
            return 0.0
        return 1.0 if self.vllm_up(t) else 0.0

    def exists(self, t: float) -> bool:
        """The pod (its scrape targets) exists at `t`."""
        return self.deleted_at is None or t < self.deleted_at

    def vanished(self, t: float, dt: float) -> Value:
        """Prometheus' last word on a target of the deleted pod: a stale marker at its first missed scrape."""
        return STALE if t >= dt and self.exists(t - dt) else None

    def _vllm_target_up(self, t: float, dt: float) -> Value:
        if not self.exists(t):
            return self.vanished(t, dt)
        failing = not self.vllm_up(t) or any(a <= t < b for a, b in self.prom_gaps)
        return 0 if failing else 1

    def series(self, c: Clock) -> list[dict[str, str]]:
        out = [c.series("up", self.labels, lambda t: self._vllm_target_up(t, c.interval))] if self.vllm_scraped else []
        if self.api_requests:
            out.append(c.series("http_requests_total", {**self.labels, "handler": self.api_handler, "method":
                                                        "GET" if self.api_handler == "/v1/models" else "POST",
                                                        "status": "2xx"}, c.counter(1 / 60)))
        if self.sidecar is None:
            return out
        for job in (self.sidecar["job"], *self.sidecar_jobs):
            out += self._sidecar_series(c, {**self.sidecar, "job": job})
        return out

    def _sidecar_series(self, c: Clock, s: Labels) -> list[dict[str, str]]:
        def answers(t: float) -> bool:
            return (not self.sidecar_never_up and self.exists(t) and not any(a <= t < b for a, b in self.sidecar_gaps)
                    and (self.sidecar_scraped_until is None or t < self.sidecar_scraped_until))

        dt = c.interval
        up_clock = c
        # a stale marker on every series of the sidecar at its first missed scrape (and on `up` once it vanishes)
        c = Clock(dt, lambda t: t >= dt and answers(t - dt) and not answers(t))

        def scraped(v: Fn) -> Fn:
            return lambda t: v(t) if answers(t) else None

        def down_since(t: float) -> Value:
            """The sidecar's first failed scrape of vLLM in the current run of failures; absent while up."""
            if self.sidecar_ok(t):
                return None
            since = t
            for u in reversed([u for u in c.times if u < t]):
                if self.sidecar_ok(u):
                    break
                since = u
            return since

        first_up = None if self.no_vllm_metrics else self.vllm_up_from
        out = []
        if self.sidecar_owner:
            out.append(up_clock.series("up", s, lambda t: (1 if answers(t) else 0) if self.exists(t) else
                                       self.vanished(t, dt)))
            if not self.sidecar_never_up:
                out.append(c.series("process_start_time_seconds", s, scraped(lambda t: 0.0)))
                out.append(c.series("vllm_headroom_build_info", {**s, "version": "0.1.0", "schema": self.schema},
                                    scraped(lambda t: 1.0)))
        if self.sidecar_never_up:
            return out
        s = {**s, "target": self.target}
        out += [
            c.series("vllm_headroom_up", s, scraped(self.sidecar_ok)),
            c.series("vllm_headroom_target_down_since_timestamp_seconds", s, scraped(down_since)),
            c.series("vllm_headroom_scrape_errors_total", {**s, "reason": "no_vllm_metrics"},
                     scraped(c.counter(0.2 if self.no_vllm_metrics else 0))),
        ]
        out.append(c.series("vllm_headroom_target_seen_up", s,
                            scraped(lambda t: 1.0 if first_up is not None and t >= first_up else 0.0)))
        eng = {**s, "model_name": MODEL, "engine": "0"}
        cycle = self.flicker or (((self.verdict, 1.0),) if self.verdict is not None else ())
        if cycle:
            period = sum(d for _v, d in cycle)

            def current(t: float) -> str:
                x = t % period
                for v, d in cycle:
                    if x < d:
                        return v
                    x -= d
                return cycle[-1][0]

            def said(t: float) -> str:
                return current(t) if self.sidecar_ok(t) else "target_down"

            for v in sorted({v for v, _d in cycle} | {"ok", "target_down"}):
                out.append(c.series("vllm_headroom_verdict", {**eng, "verdict": v},
                                    scraped(lambda t, v=v: 1.0 if said(t) == v else 0.0)))  # type: ignore[misc]
            reported = scraped(lambda t: 1.0 if self.sidecar_ok(t) else None)  # engine gauges: only while vLLM answers
            gauges = (("vllm_headroom_requests_waiting", self.waiting), ("vllm_headroom_requests_running", 8.0))
            for name, value in gauges:
                out.append(c.series(name, eng,
                                    lambda t, value=value: value if reported(t) else None))  # type: ignore[misc]
        if self.undetermined is not None:
            out.append(c.series("vllm_headroom_capacity_undetermined", {**eng, "reason": self.undetermined},
                                scraped(_f(1.0))))
        if self.capacity is not None:
            ok = scraped(lambda t: 1.0 if self.sidecar_ok(t) else None)  # exported only while vLLM answers it
            for name, n in zip(("vllm_headroom_kv_capacity_blocks", "vllm_headroom_block_size_tokens"),
                               self.capacity, strict=True):
                out.append(c.series(name, eng, lambda t, n=n: n if ok(t) else None))  # type: ignore[misc]
        return [x for x in out if x["series"].split("{")[0] not in self.omit]

    @property
    def target(self) -> str:
        return self.sidecar_target or "http://127.0.0.1:" + self.labels["instance"].rsplit(":", 1)[1]

    def alert_labels(self, which: str) -> Labels:
        """Labels of a liveness alert about this pod's vLLM (`vllm`), its sidecar's report on it (`sidecar`: with the
        target and vLLM's endpoint) or the sidecar itself (`sidecar_down`): identity without job."""
        base = self.labels if which == "vllm" else (self.sidecar or {})
        out = {k: v for k, v in base.items() if k != "job"}
        if which == "sidecar_down":
            return out
        if which == "sidecar":
            return {**out, "target": self.target, ENDPOINT: endpoint_of(self.target, base["instance"])}
        return {**out, ENDPOINT: _plain(base["instance"])}


def _plain(endpoint: str) -> str:
    """Without a default port, as the rules drop it (Prometheus 2 adds it to a port-less instance, 3 does not)."""
    m = re.fullmatch(r"(.*[^:]):(?:80|443)", endpoint)
    return m.group(1) if m else endpoint


def endpoint_of(target: str, sidecar_instance: str) -> str:
    """The rules' `vllm_endpoint` of a sidecar's series: its target's host:port; a loopback target is the sidecar's
    own host with the target's port (a port-less sidecar instance, relabeled to a name, is taken whole)."""
    authority = re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*://", "", target).split("/", 1)[0]
    loop = re.fullmatch(LOOPBACK + r"(:[0-9]+)?", authority)
    if loop:
        host = re.fullmatch(r"(.+?):[0-9]+", sidecar_instance)
        authority = host.group(1) + (loop.group(1) or "") if host else sidecar_instance
    return _plain(authority)


@dataclass
class Expect:
    alert: str
    labels: Labels
    value: float | None = None
    severity: str | None = None  # when the alert has rules of several severities


@dataclass
class Case:
    name: str
    engines: list[Engine]
    pods: list[Pod]
    fires: list[Expect] = field(default_factory=list)  # exactly these alerts fire at END; all others are silent
    also_at: list[str] = field(default_factory=list)  # eval times where `fires` must already hold (no flapping)
    at: dict[str, list[Expect]] = field(default_factory=dict)  # eval time -> exactly these alerts fire then
    early: dict[str, str] = field(default_factory=dict)  # alert -> a time before its `for:` has elapsed
    exprs: list[tuple[str, list[tuple[Labels, float]]]] = field(default_factory=list)  # checked at exprs_at
    exprs_at: str = END


def _liveness_cases() -> list[tuple[Case, Case]]:
    """Field defects of the liveness alerts and the sidecar-engine joins (issue 12, second review)."""
    ff = {"usage": 0.26, "waiting": 50}
    k8s = Pod(labels=dict(K8S), sidecar=dict(K8S_SIDECAR)).alert_labels("sidecar")
    k8s_sidecar = Pod(labels=dict(K8S), sidecar=dict(K8S_SIDECAR)).alert_labels("sidecar_down")
    k8s_engine = {k: v for k, v in k8s.items() if k in KEY}  # an engine alert from the sidecar's series
    bare = Pod().alert_labels("sidecar")
    gone, unreachable = {"cause": "vllm_down"}, {"cause": "sidecar_unreachable"}  # VLLMHeadroomTargetDown's two rules
    router = {**K8S, "job": "llm/router", "pod": "router-0", "container": "router", "instance": "10.0.0.9:8080"}
    isvc = {**K8S, "job": "my-isvc-predictor"}
    host_b = {"job": "vllm", "instance": "host-b:8000"}
    on_b = {"job": "vllm-headroom", "instance": "host-b:9478"}  # one sidecar on host b watching both hosts
    watch_a = Pod(sidecar=dict(on_b), sidecar_target="http://host-a:8000", vllm_up_until=300)
    watch_b = Pod(labels=dict(host_b), sidecar=dict(on_b), sidecar_target="http://host-b:8000", sidecar_owner=False)
    in_a = {**K8S, "cluster": "a"}  # vLLM's job adds `cluster`, the sidecar's does not
    two_jobs = {"sidecar": dict(K8S_SIDECAR), "sidecar_jobs": ("vllm-headroom",)}
    return [
        (Case("--disable-log-stats under KServe's job name, traffic on /v1/completions: the sidecar's evidence pages",
              [], [Pod(labels=isvc, sidecar=dict(K8S_SIDECAR), no_vllm_metrics=True, api_requests=True,
                       api_handler="/v1/completions")],
              fires=[Expect("VLLMMetricsAbsent", {"namespace": "llm", "pod": "vllm-0", ENDPOINT: "10.0.0.5:8000"})]),
         Case("a FastAPI router in the cluster (http_requests_total on /v1/completions, no vLLM series) is not vLLM",
              [],
              [Pod(labels=router, sidecar=None, api_requests=True, api_handler="/v1/completions")])),
        (Case("outside Kubernetes, a sidecar on host b watches hosts a and b, a's vLLM down 25 minutes: host b's "
              "false-full still pages", [Engine(up_until=300), Engine(**ff, labels=dict(host_b))],  # type: ignore[arg-type]
              [watch_a, watch_b],
              fires=[Expect("VLLMHeadroomTargetDown", {**watch_a.alert_labels("sidecar"), **gone}),
                     Expect("VLLMKVFalseFull", Engine(labels=dict(host_b)).alert_labels, 50)]),
         Case("outside Kubernetes, a sidecar on host b watches hosts a and b, a's vLLM down 25 minutes, b healthy",
              [Engine(up_until=300), Engine(labels=dict(host_b))], [watch_a, watch_b],
              fires=[Expect("VLLMHeadroomTargetDown", {**watch_a.alert_labels("sidecar"), **gone})])),
        (Case("vLLM container restarted at 5 minutes and not back after 25: a warning after the start-up limit",
              [Engine(up_until=300)], [Pod(vllm_up_until=300)],
              fires=[Expect("VLLMHeadroomTargetDown", {**bare, **gone})], early={"VLLMHeadroomTargetDown": "24m"}),
         Case("a 6-minute reload mid-run (vLLM container restart, pod and sidecar stay): quiet",
              [Engine(up_until=1440)], [Pod(vllm_up_until=1440)])),
        (Case("the sidecar never came up (crash loop): Prometheus' up == 0 of the sidecar job pages",
              [Engine(labels=dict(K8S))], [Pod(labels=dict(K8S), sidecar=dict(K8S_SIDECAR), sidecar_never_up=True)],
              fires=[Expect("VLLMHeadroomSidecarDown", k8s_sidecar)]),
         Case("another exporter in the pod never came up: not the sidecar, quiet", [Engine(labels=dict(K8S))],
              [Pod(labels=dict(K8S), sidecar={**K8S_SIDECAR, "job": "llm/dcgm-exporter", "container": "dcgm"},
                   sidecar_never_up=True)])),
        (Case("cluster label on vLLM's series only: the sidecar cannot reach a vLLM Prometheus scrapes: the "
              "sidecar-unreachable warning and vLLM's own false-full",
              [Engine(**ff, labels=dict(in_a))],  # type: ignore[arg-type]
              [Pod(labels=dict(in_a), sidecar=dict(K8S_SIDECAR), sidecar_fails=(300, 10**6))],
              fires=[Expect("VLLMHeadroomTargetDown", {**k8s, **unreachable}),
                     Expect("VLLMKVFalseFull", Engine(labels=dict(in_a)).alert_labels, 50)]),
         Case("cluster label on vLLM's series only, the sidecar reaches vLLM: the false-full page",
              [Engine(**ff, labels=dict(in_a))],  # type: ignore[arg-type]
              [Pod(labels=dict(in_a), sidecar=dict(K8S_SIDECAR))],
              fires=[Expect("VLLMKVFalseFull", Engine(labels=dict(in_a)).alert_labels, 50)])),
        (Case("cluster label on vLLM's series only, budget_full verdict: the budget page replaces false-full",
              [Engine(**ff, labels=dict(in_a))],  # type: ignore[arg-type]
              [Pod(labels=dict(in_a), sidecar=dict(K8S_SIDECAR), verdict="budget_full", waiting=50)],
              fires=[Expect("VLLMHeadroomBudgetFull", {**k8s_engine, "model_name": MODEL, "engine": "0"}, 50)]),
         Case("cluster label on vLLM's series only, slots_full verdict: the false-full page",
              [Engine(**ff, labels=dict(in_a))],  # type: ignore[arg-type]
              [Pod(labels=dict(in_a), sidecar=dict(K8S_SIDECAR), verdict="slots_full", waiting=50)],
              fires=[Expect("VLLMKVFalseFull", {**k8s_engine, "model_name": MODEL, "engine": "0"}, 50)])),
        (Case("sidecar scraped by two jobs (PodMonitor and ServiceMonitor), vLLM down 25 minutes: one alert",
              [Engine(labels=dict(K8S), up_until=300)],
              [Pod(labels=dict(K8S), vllm_up_until=300, **two_jobs)],  # type: ignore[arg-type]
              fires=[Expect("VLLMHeadroomTargetDown", {**k8s, **gone})]),
         Case("sidecar scraped by two jobs, vLLM up: quiet", [Engine(labels=dict(K8S))],
              [Pod(labels=dict(K8S), **two_jobs)])),  # type: ignore[arg-type]
        (Case("sidecar scraped by two jobs, no longer scraped by either: one sidecar-down alert",
              [Engine(labels=dict(K8S))],
              [Pod(labels=dict(K8S), sidecar_scraped_until=600, **two_jobs)],  # type: ignore[arg-type]
              fires=[Expect("VLLMHeadroomSidecarDown", k8s_sidecar)]),
         Case("sidecar scraped by two jobs, one of them fails: still scraped, quiet", [Engine(labels=dict(K8S))],
              [Pod(labels=dict(K8S), sidecar=dict(K8S_SIDECAR)),
               Pod(labels={**K8S, "job": "vllm"}, sidecar={**K8S_SIDECAR, "job": "vllm-headroom"},
                   sidecar_never_up=True)])),
    ]


def _capacity_cases() -> list[tuple[Case, Case]]:
    """Engines whose capacity vLLM's cache_config_info does not give: V1 0.8.x (num_gpu_blocks="None", no `engine`
    label on the info) and an info series dropped by metricRelabelings. The rules take the sidecar's capacity where
    it has one; where nobody has one, a warning while requests wait, never on an idle engine."""
    ff = {"usage": 0.26, "waiting": 50}
    rec = "instance_engine:"
    v1 = Engine(**ff, version="0.8-v1")  # type: ignore[arg-type]
    eng, lb = v1.alert_labels, v1.record_labels
    cap = v1.capacity_labels
    v0 = Engine(**ff, engine=None, version="0.8", info=False)  # type: ignore[arg-type]
    idle = {"usage": 0.0, "running": 0, "steps_per_s": 0, "finished_per_s": 0}
    return [
        # usage counts the null block on V1 0.8: used = round(0.26 * 40) - 1 = 9 of 39 usable, 30 free
        (Case("V1 0.8.x exposition (num_gpu_blocks=\"None\", info without engine), the sidecar knows the capacity "
              "(--num-gpu-blocks): false-full pages on it", [v1], [Pod(capacity=(39, 32))],
              fires=[Expect("VLLMKVFalseFull", eng, 50)],
              exprs=[(f"{rec}vllm_kv_capacity_blocks:usable", [(cap, 39)]),
                     (f"{rec}vllm_block_size_tokens:max", [(cap, 32)]),
                     (f"{rec}vllm_null_block:bool", [(cap, 1)]),
                     (f"{rec}vllm_kv_used_blocks:round", [(lb, 9)]),
                     (f"{rec}vllm_kv_free_blocks:sub", [(lb, 30)]),
                     (f"{rec}vllm_kv_false_full:bool", [(lb, 1)]),
                     (f"{rec}vllm_kv_capacity_unknown:bool", [(lb, 0)])]),
         Case("V1 0.8.x exposition, the sidecar knows the capacity, healthy", [Engine(version="0.8-v1")],
              [Pod(capacity=(39, 32))])),
        (Case("V1 0.8.x exposition, nobody knows the capacity, 50 wait under 26 %: the capacity-unknown warning, "
              "false-full unjudged", [v1], [Pod(undetermined="missing")],
              fires=[Expect("VLLMKVCapacityUnknown", eng, 50)], early={"VLLMKVCapacityUnknown": "14m"},
              exprs=[(f"{rec}vllm_kv_capacity_unknown:bool", [(lb, 1)]),
                     (f"{rec}vllm_block_size_tokens:max", [(cap, 32)]),
                     (f"{rec}vllm_kv_full:bool", [(lb, 0)])]),
         Case("V1 0.8.x exposition, nobody knows the capacity, idle engine: the flag for dashboards, no alert",
              [Engine(**idle, version="0.8-v1")], [Pod(undetermined="missing")],  # type: ignore[arg-type]
              exprs=[(f"{rec}vllm_kv_capacity_unknown:bool", [(lb, 1)])])),
        (Case("V1 0.8.x exposition, nobody knows the capacity, 95 % used, 20 waiting: KV-full on usage alone, "
              "no capacity warning", [Engine(usage=0.95, waiting=20, version="0.8-v1")], [Pod(undetermined="missing")],
              fires=[Expect("VLLMKVCacheFull", eng, 20)]),
         Case("V1 0.8.x exposition, nobody knows the capacity, 95 % used, nothing waits: quiet",
              [Engine(usage=0.95, version="0.8-v1")], [Pod(undetermined="missing")])),
        # V0's series carry no engine label, its sidecar's engine is "0": the engine-less copy joins them.
        (Case("V0 with cache_config_info dropped by metricRelabelings: false-full on the sidecar's capacity",
              [v0], [Pod(capacity=(40, 32))], fires=[Expect("VLLMKVFalseFull", v0.alert_labels, 50)],
              exprs=[(f"{rec}vllm_kv_capacity_blocks:usable", [(v0.capacity_labels, 40)]),
                     (f"{rec}vllm_kv_free_blocks:sub", [(v0.record_labels, 30)])]),
         Case("V0 with cache_config_info dropped, the sidecar's capacity, healthy",
              [Engine(engine=None, version="0.8", info=False)], [Pod(capacity=(40, 32))])),
        (Case("cache_config_info dropped and no sidecar: the capacity-unknown warning while 50 wait",
              [Engine(**ff, info=False)], [Pod(sidecar=None)],  # type: ignore[arg-type]
              fires=[Expect("VLLMKVCapacityUnknown", eng, 50)]),
         Case("cache_config_info dropped and no sidecar, nothing waits: quiet", [Engine(info=False)],
              [Pod(sidecar=None)])),
    ]


def _verdict_window_cases() -> list[tuple[Case, Case]]:
    """The sidecar's verdict alerts page only while requests wait, and a flickering never_fits pages as the verdict
    that holds most of the window."""
    side = {"model_name": MODEL, "engine": "0", ENDPOINT: "host-a:8000"}  # a sidecar-path alert's key
    # a verdict alert is an engine alert: it keeps vLLM's endpoint, not the sidecar's target URL
    k8s_side = {k: v for k, v in Pod(labels=dict(K8S), sidecar=dict(K8S_SIDECAR)).alert_labels("sidecar").items()
                if k in KEY}
    k8s_side.update({"model_name": MODEL, "engine": "0"})
    eng = Engine().alert_labels
    nothing_runs = {"usage": 0.0, "running": 0, "steps_per_s": 0, "finished_per_s": 0}
    k8s = {"labels": dict(K8S), "sidecar": dict(K8S_SIDECAR)}
    return [
        (Case("never_fits in Kubernetes with 10 waiting: the critical never-fits page",
              [Engine(**nothing_runs, labels=dict(K8S), waiting=10)],  # type: ignore[arg-type]
              [Pod(**k8s, verdict="never_fits", waiting=10)],  # type: ignore[arg-type]
              fires=[Expect("VLLMHeadroomNeverFits", k8s_side, 10)]),
         Case("never_fits still held by a lagging sidecar after the queue drained (0 waiting): no page",
              [Engine(**nothing_runs, labels=dict(K8S))],  # type: ignore[arg-type]
              [Pod(**k8s, verdict="never_fits", waiting=0)])),  # type: ignore[arg-type]
        (Case("budget_full in Kubernetes with 50 waiting: the budget page",
              [Engine(usage=0.26, waiting=50, labels=dict(K8S))],
              [Pod(**k8s, verdict="budget_full", waiting=50)],  # type: ignore[arg-type]
              fires=[Expect("VLLMHeadroomBudgetFull", k8s_side, 50)]),
         Case("budget_full still held by a lagging sidecar after the queue drained (0 waiting): no page",
              [Engine(usage=0.26, labels=dict(K8S))],
              [Pod(**k8s, verdict="budget_full", waiting=0)])),  # type: ignore[arg-type]
        # Nothing runs, no engine step: the raw state of both never_fits and stuck. never_fits replaces stuck only
        # while it holds most of the window.
        (Case("the sidecar's verdict flickers, never_fits 3 minutes, stuck 1, under a standing queue: the never-fits "
              "page alone, kept", [Engine(**nothing_runs, waiting=10)],  # type: ignore[arg-type]
              [Pod(flicker=(("never_fits", 180), ("stuck", 60)), waiting=10)],
              fires=[Expect("VLLMHeadroomNeverFits", side, 10)], also_at=["20m", "25m"]),
         Case("the verdict flickers the other way, never_fits 1 minute, stuck 3: the stuck page alone",
              [Engine(**nothing_runs, waiting=10)],  # type: ignore[arg-type]
              [Pod(flicker=(("never_fits", 60), ("stuck", 180)), waiting=10)],
              fires=[Expect("VLLMSchedulerStuck", eng, 10)], also_at=["20m", "25m"])),
    ]


def _endpoint_cases() -> list[tuple[Case, Case]]:
    """Two vLLMs on one machine or in one pod, told apart by their port (issue 12, fourth review: `host` without the
    port let one's outage or verdict silence the other), and a vLLM its sidecar reads but Prometheus does not scrape."""
    ff = {"usage": 0.26, "waiting": 50}
    gone = {"cause": "vllm_down"}
    a, b = dict(BARE), {**BARE, "instance": "host-a:8001"}
    side_a, side_b = dict(BARE_SIDECAR), {**BARE_SIDECAR, "instance": "host-a:9479"}
    b_ff = Engine(labels=b).alert_labels
    own = [Pod(labels=a, sidecar=side_a, vllm_up_until=300), Pod(labels=b, sidecar=side_b)]
    multi = [Pod(labels=a, sidecar=side_a, sidecar_target="http://127.0.0.1:8000", vllm_up_until=300),
             Pod(labels=b, sidecar=side_a, sidecar_target="http://localhost:8001/", sidecar_owner=False)]
    k_a, k_b = dict(K8S), {**K8S, "instance": "10.0.0.5:8001", "container": "vllm-b"}

    def in_pod(b_verdict: str = "slots_full", b_waiting: float = 50, **pod_a: Any) -> list[Pod]:
        """One pod, two vLLMs (8000, 8001) of the same model, one sidecar watching both over the loopback."""
        return [Pod(labels=k_a, sidecar=dict(K8S_SIDECAR), sidecar_target="http://127.0.0.1:8000", **pod_a),
                Pod(labels=k_b, sidecar=dict(K8S_SIDECAR), sidecar_target="http://127.0.0.1:8001",
                    sidecar_owner=False, verdict=b_verdict, waiting=b_waiting)]

    k_side_a = {k: v for k, v in in_pod()[0].alert_labels("sidecar").items() if k in KEY}
    op = {**K8S, "job": "llm/my-podmonitor"}
    unscraped_k8s = Pod(labels=dict(K8S), sidecar=dict(K8S_SIDECAR), vllm_scraped=False)
    unscraped_bare = Pod(vllm_scraped=False)
    return [
        (Case("two vLLMs on one host outside Kubernetes (8000, 8001), each with its sidecar, 8000 down 25 minutes: "
              "its own warning, and 8001's false-full still pages",
              [Engine(labels=a, up_until=300), Engine(**ff, labels=b)], own,  # type: ignore[arg-type]
              fires=[Expect("VLLMHeadroomTargetDown", {**own[0].alert_labels("sidecar"), **gone}),
                     Expect("VLLMKVFalseFull", b_ff, 50)]),
         Case("two vLLMs on one host outside Kubernetes, each with its sidecar, 8000 down, 8001 healthy",
              [Engine(labels=a, up_until=300), Engine(labels=b)], own,
              fires=[Expect("VLLMHeadroomTargetDown", {**own[0].alert_labels("sidecar"), **gone})])),
        (Case("two vLLMs on one host outside Kubernetes, one multi-target sidecar (127.0.0.1:8000, localhost:8001), "
              "8000 down 25 minutes: its own warning, and 8001's false-full still pages",
              [Engine(labels=a, up_until=300), Engine(**ff, labels=b)], multi,  # type: ignore[arg-type]
              fires=[Expect("VLLMHeadroomTargetDown", {**multi[0].alert_labels("sidecar"), **gone}),
                     Expect("VLLMKVFalseFull", b_ff, 50)]),
         Case("two vLLMs on one host outside Kubernetes, one multi-target sidecar, 8000 down, 8001 healthy",
              [Engine(labels=a, up_until=300), Engine(labels=b)], multi,
              fires=[Expect("VLLMHeadroomTargetDown", {**multi[0].alert_labels("sidecar"), **gone})])),
        (Case("two vLLMs in one pod on two ports, same model: 8000's budget_full verdict does not silence 8001's "
              "false-full", [Engine(**ff, labels=k_a), Engine(**ff, labels=k_b)],  # type: ignore[arg-type]
              in_pod(verdict="budget_full", waiting=50),
              fires=[Expect("VLLMHeadroomBudgetFull", {**k_side_a, "model_name": MODEL, "engine": "0"}, 50),
                     Expect("VLLMKVFalseFull", Engine(labels=k_b).alert_labels, 50)]),
         Case("two vLLMs in one pod on two ports, 8000 budget_full, 8001 healthy: the budget page alone",
              [Engine(**ff, labels=k_a), Engine(labels=k_b)],  # type: ignore[arg-type]
              in_pod("ok", 0, verdict="budget_full", waiting=50),
              fires=[Expect("VLLMHeadroomBudgetFull", {**k_side_a, "model_name": MODEL, "engine": "0"}, 50)])),
        (Case("two vLLMs in one pod on two ports, 8000 down 25 minutes: its own warning, 8001's false-full pages",
              [Engine(labels=k_a, up_until=300), Engine(**ff, labels=k_b)],  # type: ignore[arg-type]
              in_pod(vllm_up_until=300),
              fires=[Expect("VLLMHeadroomTargetDown", {**in_pod()[0].alert_labels("sidecar"), **gone}),
                     Expect("VLLMKVFalseFull", Engine(labels=k_b).alert_labels, 50)]),
         Case("two vLLMs in one pod on two ports, 8000 down 25 minutes, 8001 healthy",
              [Engine(labels=k_a, up_until=300), Engine(labels=k_b)], in_pod("ok", 0, vllm_up_until=300),
              fires=[Expect("VLLMHeadroomTargetDown", {**in_pod()[0].alert_labels("sidecar"), **gone})])),
        (Case("the sidecar reads vLLM but no job scrapes vLLM (PodMonitor port name does not match): a warning",
              [], [unscraped_k8s], fires=[Expect("VLLMHeadroomVllmNotScraped", unscraped_k8s.alert_labels("sidecar"))],
              early={"VLLMHeadroomVllmNotScraped": "9m"}),
         Case("vLLM scraped under an operator-style job name (its own PodMonitor): quiet", [Engine(labels=op)],
              [Pod(labels=op, sidecar=dict(K8S_SIDECAR))])),
        (Case("outside Kubernetes, the sidecar reads vLLM but nothing scrapes vLLM: a warning", [], [unscraped_bare],
              fires=[Expect("VLLMHeadroomVllmNotScraped", unscraped_bare.alert_labels("sidecar"))]),
         Case("--disable-log-stats, vLLM scraped: MetricsAbsent's page alone, not also not-scraped", [],
              [Pod(no_vllm_metrics=True, api_requests=True)],
              fires=[Expect("VLLMMetricsAbsent", {ENDPOINT: "host-a:8000"})])),
        # A sidecar whose series do not name vLLM's pod cannot tell "not scraped" from "scraped elsewhere": quiet.
        (Case("the same pod's sidecar reads vLLM by 127.0.0.1, nothing scrapes vLLM: a warning",
              [], [Pod(labels=dict(K8S), sidecar=dict(K8S_SIDECAR), sidecar_target="http://127.0.0.1:8000",
                       vllm_scraped=False)],
              fires=[Expect("VLLMHeadroomVllmNotScraped",
                            Pod(labels=dict(K8S), sidecar=dict(K8S_SIDECAR),
                                sidecar_target="http://127.0.0.1:8000").alert_labels("sidecar"))]),
         Case("a central sidecar in its own pod reads a healthy, scraped vLLM by pod IP: quiet", [Engine(labels=op)],
              [Pod(labels=op, sidecar={**K8S_SIDECAR, "namespace": "monitoring", "pod": "vllm-headroom-7d9f-abcde",
                                       "instance": "10.0.9.9:9478"}, sidecar_target="http://10.0.0.5:8000")])),
        (Case("outside Kubernetes, the sidecar reads vLLM by its DNS name, nothing scrapes vLLM: a warning", [],
              [Pod(sidecar_target="http://vllm.example.internal:8000", vllm_scraped=False)],
              fires=[Expect("VLLMHeadroomVllmNotScraped",
                            Pod(sidecar_target="http://vllm.example.internal:8000").alert_labels("sidecar"))]),
         Case("vLLM's pod, its sidecar reads vLLM by a Service DNS name, vLLM scraped: quiet", [Engine(labels=op)],
              [Pod(labels=op, sidecar=dict(K8S_SIDECAR),
                   sidecar_target="http://vllm.llm.svc.cluster.local:8000")])),
    ]


def _field_cases() -> list[tuple[Case, Case]]:
    """Issue 20's field cases (a vanished pod, an HA pair without de-duplication, rule/sidecar skew) and issue 19's
    risk bound that must not page KV-full."""
    ff = {"usage": 0.26, "waiting": 50}
    eng = Engine().alert_labels
    one = ((1500.0, 1501.0),)  # the one scrape at 25 minutes, at every interval
    gone_at = 1500.0
    # issue 19, kind 1: 4 of 4 slots taken, 56 waiting, 15 of 23 blocks free, nothing finished yet: the worst case at
    # max_model_len (16 blocks) does not fit, which is a risk, not what binds now.
    thin = {"usage": 8 / 23, "running": 4, "waiting": 56, "finished_per_s": 0, "num_gpu_blocks": "24"}
    rec = "instance_engine:"
    lb = Engine(**thin).record_labels  # type: ignore[arg-type]
    ha = [{**BARE, "prometheus_replica": r} for r in ("a", "b")]
    ha_side = [{**BARE_SIDECAR, "prometheus_replica": r} for r in ("a", "b")]
    dup = Expect("VLLMHeadroomDuplicateSeries", {"instance": BARE["instance"]}, 2)
    skew = {"instance": BARE_SIDECAR["instance"]}
    return [
        (Case("one failed scrape of vLLM at 25 minutes under a false-full page: still firing, not restarted",
              [Engine(**ff, gaps=one)], [Pod(prom_gaps=one)],  # type: ignore[arg-type]
              fires=[Expect("VLLMKVFalseFull", eng, 50)], also_at=["24m", "25m", "26m", "27m"]),
         Case("the pod is deleted at 25 minutes (rolling deploy) under a false-full page: resolved within 2 minutes",
              [Engine(**ff, up_until=gone_at)], [Pod(deleted_at=gone_at)],  # type: ignore[arg-type]
              at={"24m": [Expect("VLLMKVFalseFull", eng, 50)], "27m": []})),
        (Case("one failed scrape of vLLM and of its sidecar at 25 minutes under a budget page: still firing",
              [Engine(**ff, gaps=one)], [Pod(prom_gaps=one, sidecar_gaps=one, verdict="budget_full",  # type: ignore[arg-type]
                                            waiting=50)],
              fires=[Expect("VLLMHeadroomBudgetFull", eng, 50)], also_at=["24m", "25m", "26m", "27m"]),
         Case("the pod is deleted at 25 minutes (reschedule) under the sidecar's budget page: resolved in 2 minutes",
              [Engine(**ff, up_until=gone_at)],  # type: ignore[arg-type]
              [Pod(deleted_at=gone_at, verdict="budget_full", waiting=50)],
              at={"24m": [Expect("VLLMHeadroomBudgetFull", eng, 50)], "27m": []})),
        (Case("nothing finished, 4 of 4 slots, 56 waiting, 15 of 23 blocks free: false-full, never KV-full from the "
              "max_model_len worst case (a risk: the info note)",
              [Engine(**thin)], [Pod(sidecar=None)],  # type: ignore[arg-type]
              fires=[Expect("VLLMKVFalseFull", eng, 56), Expect("VLLMKVOversubscribed", eng, -3, "info")],
              exprs=[(f"{rec}vllm_kv_free_blocks:sub", [(lb, 15)]), (f"{rec}vllm_prompt_blocks:ceil", [(lb, 16)]),
                     (f"{rec}vllm_prompt_fits:bool", [(lb, 1)]), (f"{rec}vllm_kv_full:bool", [(lb, 0)])]),
         Case("nothing finished, 4 of 4 slots, 15 of 23 blocks free, nothing waits: the risk note alone",
              [Engine(**{**thin, "waiting": 0})], [Pod(sidecar=None)],  # type: ignore[arg-type]
              fires=[Expect("VLLMKVOversubscribed", eng, -3, "info")])),
        (Case("nothing finished, the same frame, the sidecar says slots_full: its false-full page, no KV-full",
              [Engine(**thin)], [Pod(verdict="slots_full", waiting=56)],  # type: ignore[arg-type]
              fires=[Expect("VLLMKVFalseFull", eng, 56), Expect("VLLMKVOversubscribed", eng, -3, "info")]),
         Case("nothing finished, the same frame, the sidecar says ok: no page (it judges), the risk note",
              [Engine(**thin)], [Pod(verdict="ok", waiting=56)],  # type: ignore[arg-type]
              fires=[Expect("VLLMKVOversubscribed", eng, -3, "info")])),
        (Case("an HA pair without de-duplication, 6 preemptions per 5 minutes of 8 running, nothing finishes: one "
              "storm page, and the duplicate warning",
              [Engine(labels=lb_, preempt_per_s=6 / 300, finished_per_s=0) for lb_ in ha],
              [Pod(labels=lb_, sidecar=side) for lb_, side in zip(ha, ha_side, strict=True)],
              fires=[Expect("VLLMPreemptionStorm", eng, 0.75), dup]),
         Case("an HA pair without de-duplication, 3 preemptions per 5 minutes: not a storm (not 6), the over-commit "
              "warning and the duplicate warning",
              [Engine(labels=lb_, preempt_per_s=3 / 300, finished_per_s=0) for lb_ in ha],
              [Pod(labels=lb_, sidecar=side) for lb_, side in zip(ha, ha_side, strict=True)],
              fires=[Expect("VLLMKVOversubscribed", eng, -6, "warning"), dup])),
        (Case("a sidecar of another schema: the skew warning", [Engine()], [Pod(schema="2")],
              fires=[Expect("VLLMHeadroomRulesSkew", {**skew, "schema": "2", "cause": "schema"}, 1)]),
         Case("a sidecar of the rules' schema: quiet", [Engine()], [Pod(verdict="ok")])),
        (Case("a sidecar of the rules' schema without vllm_headroom_verdict (renamed): the skew warning",
              [Engine()], [Pod(verdict="ok", omit=("vllm_headroom_verdict",))],
              fires=[Expect("VLLMHeadroomRulesSkew", {**skew, "target": Pod().target, "cause": "series_missing"},
                            3)]),  # 3 of the 4 series it must export per target
         Case("a sidecar of the rules' schema without an engine report (capacity missing): quiet", [Engine()],
              [Pod(undetermined="missing")])),
        (Case("a sidecar of the rules' schema without vllm_headroom_up (dropped): the skew warning, not 'schema 1'",
              [Engine()], [Pod(verdict="ok", omit=("vllm_headroom_up",))],
              fires=[Expect("VLLMHeadroomRulesSkew", {**skew, "schema": SCHEMA_VERSION, "cause": "series_missing"},
                            0)]),
         Case("a sidecar of the rules' schema with every series: quiet", [Engine()], [Pod(verdict="ok")])),
    ]


def _cases() -> list[tuple[Case, Case]]:
    """(firing, quiet) twins."""
    ff = {"usage": 0.26, "waiting": 50}
    k8s_pod = Pod(labels=dict(K8S), sidecar=dict(K8S_SIDECAR))

    def osc(t: float) -> Value:  # one minute each side of the threshold
        return 0.79 if int(t // 60) % 2 == 0 else 0.81

    e_ff = Engine(**ff)  # type: ignore[arg-type]
    eng = e_ff.alert_labels
    side = {"model_name": MODEL, "engine": "0", ENDPOINT: "host-a:8000"}  # a sidecar-path alert's key
    cap = e_ff.capacity_labels
    two_cluster = [{**K8S, "cluster": c} for c in ("a", "b")]
    two_models = [{**K8S, "instance": f"10.0.0.5:{p}", "container": f"vllm-{m}"}
                  for p, m in ((8000, "m1"), (8001, "m2"))]
    dp = {**K8S}
    rec = "instance_engine:"
    unreachable = {**Pod().alert_labels("sidecar"), "cause": "sidecar_unreachable"}  # VLLMHeadroomTargetDown's rule
    e_k8s = Engine(**ff, labels=dict(K8S))  # type: ignore[arg-type]
    local = {k: v for k, v in Pod(labels=dict(K8S), sidecar=dict(K8S_SIDECAR), sidecar_target="http://localhost:8000")
             .alert_labels("sidecar").items() if k in KEY}  # the sidecar's own pod IP and vLLM's port
    return [
        *_liveness_cases(),
        *_capacity_cases(),
        *_verdict_window_cases(),
        *_endpoint_cases(),
        *_field_cases(),
        (Case("false-full: 26 % used, 50 waiting, all slots taken", [e_ff], [Pod()],
              fires=[Expect("VLLMKVFalseFull", eng, 50)], early={"VLLMKVFalseFull": "4m"},
              exprs=[(f"{rec}vllm_kv_capacity_blocks:usable", [(cap, 39)]),
                     (f"{rec}vllm_kv_used_blocks:round", [(e_ff.record_labels, 10)]),
                     (f"{rec}vllm_kv_free_blocks:sub", [(e_ff.record_labels, 29)]),
                     (f"{rec}vllm_request_prompt_tokens:bucket_quantile", [(e_ff.record_labels, 20)]),
                     (f"{rec}vllm_worst_case_blocks_per_request:ceil", [(e_ff.record_labels, 4)]),
                     (f"{rec}vllm_safe_headroom_requests:floor", [(e_ff.record_labels, 1)]),
                     (f"{rec}vllm_kv_false_full:bool", [(e_ff.record_labels, 1)]),
                     (f"{rec}vllm_kv_full:bool", [(e_ff.record_labels, 0)])]),
         Case("healthy busy server: 60 % used, nothing waits", [Engine()], [Pod()])),
        # Seen live (CI, vLLM 0.32.0, 30 s scrapes): a server that had served 500-token prompts earlier, then only
        # 16-token ones; increase() extrapolated the +Inf bucket further than the le=20 one (their counters began
        # apart), the le=20 share fell under 0.99, the prompt read as 500 tokens, and false-full flapped off.
        # 70 % used: 12 free blocks hold a 1-block prompt but not a 16-block one.
        (Case("false-full after earlier long prompts: the window's prompts, not the lifetime's",
              [Engine(usage=0.7, waiting=50, earlier_long_prompts=5000)], [Pod()],
              fires=[Expect("VLLMKVFalseFull", eng, 50)], also_at=["7m"],
              exprs=[(f"{rec}vllm_kv_free_blocks:sub", [(e_ff.record_labels, 12)]),
                     (f"{rec}vllm_request_prompt_tokens:bucket_quantile", [(e_ff.record_labels, 20)]),
                     (f"{rec}vllm_prompt_blocks:ceil", [(e_ff.record_labels, 1)])]),
         Case("earlier long prompts, nothing waits", [Engine(earlier_long_prompts=5000)], [Pod()])),
        (Case("nothing finished for the whole window: false-full on the max_model_len basis",
              [Engine(**ff, finished_per_s=0)], [Pod()],  # type: ignore[arg-type]
              fires=[Expect("VLLMKVFalseFull", eng, 50), Expect("VLLMKVOversubscribed", eng, -6, "info")],
              exprs=[(f"{rec}vllm_prompt_blocks:ceil", [(e_ff.record_labels, 16)]),
                     (f"{rec}vllm_worst_case_blocks_per_request:ceil", [(e_ff.record_labels, 16)])]),
         Case("nothing finished, nothing waits: W on the max_model_len basis, an over-commit note only",
              [Engine(usage=0.26, finished_per_s=0)], [Pod()],
              fires=[Expect("VLLMKVOversubscribed", eng, -6, "info")])),
        (Case("truly full: 95 % used, 20 waiting", [Engine(usage=0.95, waiting=20)], [Pod()],
              fires=[Expect("VLLMKVCacheFull", eng, 20)], early={"VLLMKVCacheFull": "9m"}),
         Case("95 % used, nothing waits", [Engine(usage=0.95)], [Pod()])),
        (Case("usage oscillating 0.79/0.81 with a standing queue pages once (KV-full)",
              [Engine(usage=osc, waiting=50)], [Pod()], fires=[Expect("VLLMKVCacheFull", eng, 50)],
              also_at=["20m", "25m"]),
         Case("usage oscillating 0.79/0.81 without a queue", [Engine(usage=osc)], [Pod()])),
        (Case("preemption storm: 2 preemptions per finished request, KV full, oversubscribed: one page",
              [Engine(usage=0.97, waiting=5, preempt_per_s=2, finished_per_s=1, prompt_le="200.0",
                      max_tokens_le="500.0")], [Pod()],
              fires=[Expect("VLLMPreemptionStorm", eng, 2)], early={"VLLMPreemptionStorm": "4m"}),
         Case("a few preemptions at high throughput (0.5 %)", [Engine(preempt_per_s=0.05, finished_per_s=10)],
              [Pod()])),
        (Case("a standing queue with a preemption every 3 minutes, usage sampled at 50 %: the pool ran out, one "
              "KV-full page", [Engine(usage=0.5, waiting=50, preempt_per_s=1 / 180, finished_per_s=10)], [Pod()],
              fires=[Expect("VLLMKVCacheFull", eng, 50)], also_at=["20m", "25m"]),
         Case("the same preemptions, nothing waits: no page", [Engine(usage=0.5, preempt_per_s=1 / 180,
                                                                      finished_per_s=10)], [Pod()])),
        (Case("low traffic, nothing finishes, 6 preemptions per 5 minutes of 8 running: a storm",
              [Engine(preempt_per_s=6 / 300, finished_per_s=0)], [Pod()],
              fires=[Expect("VLLMPreemptionStorm", eng, 0.75)]),
         Case("low traffic, nothing finishes, 2 preemptions per 5 minutes of 8 running: too few for a storm, the "
              "over-commit warning only", [Engine(preempt_per_s=2 / 300, finished_per_s=0)], [Pod()],
              fires=[Expect("VLLMKVOversubscribed", eng, -6, "warning")])),
        (Case("over-commit under pressure: 85 % used, worst case 8 x 16 blocks > 39",
              [Engine(usage=0.85, prompt_le="200.0", max_tokens_le="500.0", preempt_per_s=0.01)], [Pod()],
              fires=[Expect("VLLMKVOversubscribed", eng, -6, "warning")]),
         Case("healthy over-commit: 50 % used, no preemption: info only, no page",
              [Engine(usage=0.5, prompt_le="200.0", max_tokens_le="500.0")], [Pod()],
              fires=[Expect("VLLMKVOversubscribed", eng, -6, "info")])),
        (Case("stuck: 10 waiting, no engine step: the stuck page, not false-full",
              [Engine(usage=0.1, running=0, waiting=10, steps_per_s=0, finished_per_s=0)], [Pod()],
              fires=[Expect("VLLMSchedulerStuck", eng, 10)]),
         Case("deferred waiters (KV transfer) without steps are not stuck: false-full",
              [Engine(usage=0.1, running=0, waiting=10, deferred=10, steps_per_s=0, finished_per_s=0)], [Pod()],
              fires=[Expect("VLLMKVFalseFull", eng, 10)])),
        (Case("sleeping engine with a queue: its own info, not stuck nor false-full",
              [Engine(usage=0.0, running=0, waiting=4, steps_per_s=0, finished_per_s=0, asleep=True)],
              [Pod(verdict="sleeping", waiting=4)],
              fires=[Expect("VLLMEngineAsleepWithQueue", eng, 4)]),
         Case("sleeping engine, nothing waits, 30 % of blocks kept (a leak if awake): quiet",
              [Engine(usage=0.3, running=0, steps_per_s=0, finished_per_s=0, asleep=True)], [Pod(verdict="sleeping")])),
        (Case("never_fits: the head needs more blocks than the pool, nothing runs: one critical page, not stuck",
              [Engine(usage=0.0, running=0, waiting=10, steps_per_s=0, finished_per_s=0)],
              [Pod(verdict="never_fits", waiting=10)],
              fires=[Expect("VLLMHeadroomNeverFits", side, 10)], early={"VLLMHeadroomNeverFits": "1m"}),
         Case("same queue without a step, the sidecar says stuck: the stuck page",
              [Engine(usage=0.0, running=0, waiting=10, steps_per_s=0, finished_per_s=0)],
              [Pod(verdict="stuck", waiting=10)], fires=[Expect("VLLMSchedulerStuck", eng, 10)])),
        (Case("budget_full: prefills use up max_num_batched_tokens, pool has room: budget page, not false-full",
              [e_ff], [Pod(verdict="budget_full", waiting=50)],
              fires=[Expect("VLLMHeadroomBudgetFull", side, 50)], early={"VLLMHeadroomBudgetFull": "9m"}),
         Case("same raw state, the sidecar says slots_full: the false-full page", [e_ff],
              [Pod(verdict="slots_full", waiting=50)], fires=[Expect("VLLMKVFalseFull", eng, 50)])),
        (Case("capacity config_error (num_gpu_blocks < 2)", [Engine()],
              [Pod(verdict="ok", undetermined="config_error")],
              fires=[Expect("VLLMHeadroomCapacityConfigError", side, 1)]),
         Case("capacity missing (values unknown): no page", [Engine()], [Pod(verdict="ok", undetermined="missing")])),
        (Case("block leak: 30 % used with nothing running or waiting",
              [Engine(usage=0.3, running=0, steps_per_s=0, finished_per_s=0)], [Pod()],
              fires=[Expect("VLLMKVBlockLeak", eng, 12)], early={"VLLMKVBlockLeak": "14m"}),
         Case("idle server: nothing in use", [Engine(usage=0.0, running=0, steps_per_s=0, finished_per_s=0)],
              [Pod()])),
        (Case("0.10-style leak: usage counts the null block, 13/40", [Engine(
            usage=13 / 40, running=0, steps_per_s=0, finished_per_s=0, version="0.10")], [Pod()],
              fires=[Expect("VLLMKVBlockLeak", eng, 12)]),
         Case("idle 0.10-style exposition: 1/40 is the null block, no leak",
              [Engine(usage=1 / 40, running=0, steps_per_s=0, finished_per_s=0, version="0.10")], [Pod()])),
        (Case("0.8-style exposition (old usage name, no engine label): false-full",
              [Engine(**ff, engine=None, version="0.8")], [Pod()],  # type: ignore[arg-type]
              fires=[Expect("VLLMKVFalseFull", Engine(engine=None).alert_labels, 50)],
              # no engine label: V0's convention, a pool without a null block (all 40 usable)
              exprs=[(f"{rec}vllm_kv_capacity_blocks:usable", [(Engine(engine=None).capacity_labels, 40)])]),
         Case("0.8-style exposition, healthy", [Engine(engine=None, version="0.8")], [Pod()])),
        (Case("double scrape: one pod, two jobs, false-full pages once",
              [Engine(**ff, labels=dict(K8S)), Engine(**ff, labels={**K8S, "job": "vllm"})],  # type: ignore[arg-type]
              [k8s_pod, Pod(labels={**K8S, "job": "vllm"}, sidecar=None)],
              fires=[Expect("VLLMKVFalseFull", Engine(labels=dict(K8S)).alert_labels, 50)],
              exprs=[("model_name:vllm_num_requests_waiting:sum", [({"namespace": "llm", "model_name": MODEL}, 50)])]),
         Case("double scrape, healthy",
              [Engine(labels=dict(K8S)), Engine(labels={**K8S, "job": "vllm"})],
              [k8s_pod, Pod(labels={**K8S, "job": "vllm"}, sidecar=None)])),
        (Case("two clusters, same pod IP: only cluster a's false-full",
              [Engine(**ff, labels=two_cluster[0]), Engine(labels=two_cluster[1])],  # type: ignore[arg-type]
              [Pod(labels=two_cluster[0], sidecar={**K8S_SIDECAR, "cluster": "a"}),
               Pod(labels=two_cluster[1], sidecar={**K8S_SIDECAR, "cluster": "b"})],
              fires=[Expect("VLLMKVFalseFull", Engine(labels=two_cluster[0]).alert_labels, 50)],
              exprs=[(f"{rec}vllm_kv_free_blocks:sub", [(Engine(labels=two_cluster[0]).record_labels, 29),
                                                         (Engine(labels=two_cluster[1]).record_labels, 16)])]),
         Case("two clusters, same pod IP, both healthy", [Engine(labels=two_cluster[0]), Engine(labels=two_cluster[1])],
              [Pod(labels=two_cluster[0], sidecar={**K8S_SIDECAR, "cluster": "a"}),
               Pod(labels=two_cluster[1], sidecar={**K8S_SIDECAR, "cluster": "b"})])),
        (Case("two models in one pod: only m1's false-full",
              [Engine(**ff, labels=two_models[0], model="m1"),  # type: ignore[arg-type]
               Engine(labels=two_models[1], model="m2")],
              [Pod(labels=two_models[0], sidecar=dict(K8S_SIDECAR)), Pod(labels=two_models[1], sidecar=None)],
              fires=[Expect("VLLMKVFalseFull", Engine(labels=two_models[0], model="m1").alert_labels, 50)]),
         Case("two models in one pod, both healthy",
              [Engine(labels=two_models[0], model="m1"), Engine(labels=two_models[1], model="m2")],
              [Pod(labels=two_models[0], sidecar=dict(K8S_SIDECAR)), Pod(labels=two_models[1], sidecar=None)])),
        (Case("two data-parallel engines (num_gpu_blocks is their sum): engine 1 false-full",
              [Engine(labels=dp, num_gpu_blocks="80"),
               Engine(**ff, labels=dp, engine="1", num_gpu_blocks="80")],  # type: ignore[arg-type]
              [k8s_pod], fires=[Expect("VLLMKVFalseFull", Engine(labels=dp, engine="1").alert_labels, 50)],
              exprs=[(f"{rec}vllm_kv_capacity_blocks:usable",
                      [(Engine(labels=dp).capacity_labels, 39), (Engine(labels=dp, engine="1").capacity_labels, 39)])]),
         Case("two data-parallel engines, healthy",
              [Engine(labels=dp, num_gpu_blocks="80"), Engine(labels=dp, engine="1", num_gpu_blocks="80")],
              [k8s_pod])),
        (Case("counter reset (vLLM restart at 15 min) during false-full",
              [Engine(**ff, reset_at=900)], [Pod()],  # type: ignore[arg-type]
              fires=[Expect("VLLMKVFalseFull", eng, 50)]),
         Case("counter reset of a healthy server: no storm, no stuck", [Engine(reset_at=900)], [Pod()])),
        (Case("vLLM not up 40 minutes after the pod started: a warning after the start-up limit, not a page",
              [Engine(up_from=10**6)], [Pod(vllm_up_from=10**6)],
              fires=[Expect("VLLMStartupSlow", Pod().alert_labels("sidecar"))]),
         Case("a 6-minute reload (pod restart, weights loading): quiet", [Engine(up_from=360)],
              [Pod(vllm_up_from=360)])),
        (Case("vLLM down 25 minutes after it had been up: past the start-up limit, one warning, nothing below it",
              [Engine(**ff, up_until=300)], [Pod(vllm_up_until=300)],  # type: ignore[arg-type]
              fires=[Expect("VLLMHeadroomTargetDown", {**Pod().alert_labels("sidecar"), "cause": "vllm_down"})],
              early={"VLLMHeadroomTargetDown": "24m"}),
         Case("vLLM up all along", [Engine()], [Pod()])),
        (Case("one failed sidecar scrape at 10 min does not restart the false-full page",
              [e_ff], [Pod(sidecar_fails=(600, 601))],
              fires=[Expect("VLLMKVFalseFull", eng, 50)], also_at=["12m"]),
         Case("the sidecar cannot reach vLLM for 20 minutes while Prometheus can: its warning, and vLLM's own "
              "false-full still pages", [e_ff], [Pod(sidecar_fails=(600, 10**6))],
              fires=[Expect("VLLMHeadroomTargetDown", unreachable),
                     Expect("VLLMKVFalseFull", eng, 50)])),
        (Case("sidecar no longer scraped", [Engine()], [Pod(sidecar_scraped_until=600)],
              fires=[Expect("VLLMHeadroomSidecarDown", Pod().alert_labels("sidecar_down"))]),
         Case("sidecar scraped", [Engine()], [Pod()])),
        (Case("--disable-log-stats under an operator job name: one page from the sidecar and vLLM's API series",
              [], [Pod(labels={**K8S, "job": "llm/my-podmonitor"}, sidecar=dict(K8S_SIDECAR), no_vllm_metrics=True,
                       api_requests=True)],
              fires=[Expect("VLLMMetricsAbsent", {"namespace": "llm", "pod": "vllm-0", ENDPOINT: "10.0.0.5:8000"})]),
         Case("same operator job name with engine metrics", [Engine(labels={**K8S, "job": "llm/my-podmonitor"})],
              [Pod(labels={**K8S, "job": "llm/my-podmonitor"}, sidecar=dict(K8S_SIDECAR), api_requests=True)])),
        (Case("--disable-log-stats outside Kubernetes: recognised by the sidecar, whatever vLLM's job name",
              [], [Pod(labels={**BARE, "job": "kserve-predictor"}, no_vllm_metrics=True, api_requests=True)],
              fires=[Expect("VLLMMetricsAbsent", {ENDPOINT: "host-a:8000"})]),
         Case("a non-vLLM target under a vllm-like job name", [],
              [Pod(labels={**BARE, "job": "vllm-router"}, sidecar=None)])),
        # --- KV/engine field defects (issue 12 review): histograms dropped, scrape gaps, one page per fault,
        # nothing finished, a renamed model, V0 annotations.
        (Case("0.8-style (V0) exposition, truly full: the annotations leave the missing engine out",
              [Engine(usage=0.97, waiting=20, engine=None, version="0.8")], [Pod()],
              fires=[Expect("VLLMKVCacheFull", Engine(engine=None).alert_labels, 20)]),
         Case("0.8-style (V0) exposition, 97 % used, nothing waits",
              [Engine(usage=0.97, engine=None, version="0.8")], [Pod()])),
        (Case("length histograms dropped by metricRelabelings: 97 % used, 50 waiting: KV-full still pages",
              [Engine(usage=0.97, waiting=50, histograms=False)], [Pod()],
              fires=[Expect("VLLMKVCacheFull", eng, 50), Expect("VLLMKVHistogramsMissing", eng, 50)],
              exprs=[(f"{rec}vllm_kv_full:bool", [(e_ff.record_labels, 1)])]),
         Case("length histograms dropped, 97 % used, nothing waits: no KV page, the histogram warning only",
              [Engine(usage=0.97, histograms=False)], [Pod()],
              fires=[Expect("VLLMKVHistogramsMissing", eng, 0)])),
        (Case("length histograms dropped in a false-full state: the histograms-missing warning, false-full unjudged",
              [Engine(**ff, histograms=False)], [Pod()],  # type: ignore[arg-type]
              fires=[Expect("VLLMKVHistogramsMissing", eng, 50)], early={"VLLMKVHistogramsMissing": "14m"}),
         Case("V0 before its first finished request exports no length histogram: not missing",
              [Engine(engine=None, version="0.8", finished_per_s=0, histograms=False)], [Pod()])),
        (Case("truly full and oversubscribed (97 %, 20 waiting, worst case 8 x 16 blocks > 39): one page, KV-full",
              [Engine(usage=0.97, waiting=20, prompt_le="200.0", max_tokens_le="500.0")], [Pod()],
              fires=[Expect("VLLMKVCacheFull", eng, 20)]),
         Case("same over-committed pool at 97 %, nothing waits: the oversubscribed warning alone",
              [Engine(usage=0.97, prompt_le="200.0", max_tokens_le="500.0")], [Pod()],
              fires=[Expect("VLLMKVOversubscribed", eng, -6, "warning")])),
        (Case("preemption storm while nothing finishes: preemptions per running request (30 in 5m / 8), not +Inf",
              [Engine(usage=0.97, waiting=5, preempt_per_s=0.1, finished_per_s=0, prompt_le="200.0",
                      max_tokens_le="500.0")], [Pod()],
              fires=[Expect("VLLMPreemptionStorm", eng, 3.75)],
              exprs=[(f"{rec}vllm_preemptions_per_request:ratio5m", [(e_ff.record_labels, 3.75)])]),
         Case("nothing finishes and nothing is preempted: no storm, an over-commit note only",
              [Engine(usage=0.5, finished_per_s=0)], [Pod()],
              fires=[Expect("VLLMKVOversubscribed", eng, -6, "info")],
              exprs=[(f"{rec}vllm_preemptions_per_request:ratio5m", [(e_ff.record_labels, 0)])])),
        (Case("a 3-minute scrape gap of vLLM (stale markers) under a standing false-full queue: one page, kept firing",
              [Engine(**ff, gaps=((900, 1080),))], [Pod(vllm_gap=(900, 1080))],  # type: ignore[arg-type]
              fires=[Expect("VLLMKVFalseFull", eng, 50)], also_at=["10m", "15m", "16m", "17m", "18m", "20m", "22m"]),
         Case("a 3-minute scrape gap of vLLM without a queue: quiet",
              [Engine(gaps=((900, 1080),))], [Pod(vllm_gap=(900, 1080))])),
        (Case("model renamed across a restart (vLLM labels the first --served-model-name): one false-full, "
              "capacity counted once",
              [Engine(**ff, model="old-name", up_until=900),  # type: ignore[arg-type]
               Engine(**ff, model="new-name", num_gpu_blocks="41", up_from=960)],  # type: ignore[arg-type]
              [Pod(vllm_gap=(900, 960))],
              fires=[Expect("VLLMKVFalseFull", Engine(model="new-name").alert_labels, 50)],
              # 5 minutes after the restart: the old name's series are past the scrape-gap bridge (4m), not summed
              exprs_at="20m",
              exprs=[("model_name:vllm_kv_capacity_blocks:sum", [({"model_name": "new-name"}, 40)]),
                     ("model_name:vllm_num_requests_waiting:sum", [({"model_name": "new-name"}, 50)]),
                     (f"{rec}vllm_kv_false_full:bool", [(Engine(model="new-name").record_labels, 1)])]),
         Case("model renamed across a restart, nothing waits: quiet",
              [Engine(model="old-name", up_until=900),
               Engine(model="new-name", num_gpu_blocks="41", up_from=960)], [Pod(vllm_gap=(900, 960))])),
        # V0's series carry no engine label; its sidecar calls the one engine "0". The verdict must still join.
        (Case("V0 budget_full: the sidecar's verdict replaces false-full on an engine-less exposition",
              [Engine(**ff, engine=None, version="0.8")],  # type: ignore[arg-type]
              [Pod(verdict="budget_full", waiting=50)], fires=[Expect("VLLMHeadroomBudgetFull", side, 50)]),
         Case("V0, same raw state, the sidecar says slots_full: the false-full page",
              [Engine(**ff, engine=None, version="0.8")],  # type: ignore[arg-type]
              [Pod(verdict="slots_full", waiting=50)],
              fires=[Expect("VLLMKVFalseFull", side, 50)])),  # the sidecar's judgement, its engine "0"
        # One failed scrape of vLLM (a stale marker on every series) every 5 minutes: at 60 s that is one scrape in
        # five, at 15 s four. Each used to empty the flags and restart the 5-minute for:, so it never paged.
        (Case("false-full with a failed scrape of vLLM every 5 minutes: it still pages",
              [Engine(**ff, gaps=GAPS_EVERY_5M)], [Pod(prom_gaps=GAPS_EVERY_5M)],  # type: ignore[arg-type]
              fires=[Expect("VLLMKVFalseFull", eng, 50)]),
         Case("a failed scrape every 5 minutes, nothing waits: quiet", [Engine(gaps=GAPS_EVERY_5M)],
              [Pod(prom_gaps=GAPS_EVERY_5M)])),
        (Case("KV-full with a failed scrape of vLLM every 5 minutes: it still pages",
              [Engine(usage=0.95, waiting=20, gaps=GAPS_EVERY_5M)], [Pod(prom_gaps=GAPS_EVERY_5M)],
              fires=[Expect("VLLMKVCacheFull", eng, 20)]),
         Case("95 % used, a failed scrape every 5 minutes, nothing waits: quiet",
              [Engine(usage=0.95, gaps=GAPS_EVERY_5M)], [Pod(prom_gaps=GAPS_EVERY_5M)])),
        # --- issue 12, third review: a sidecar that cannot reach a served vLLM, multi-target hosts, flickering
        # verdicts.
        (Case("the sidecar cannot reach a vLLM that Prometheus scrapes (NetworkPolicy), scheduler stuck: the "
              "critical stuck page beside the sidecar-unreachable warning",
              [Engine(usage=0.1, running=0, waiting=10, steps_per_s=0, finished_per_s=0)],
              [Pod(sidecar_fails=(300, 10**6))],
              fires=[Expect("VLLMSchedulerStuck", eng, 10),
                     Expect("VLLMHeadroomTargetDown", unreachable)]),
         Case("the sidecar cannot reach a healthy vLLM that Prometheus scrapes: the sidecar-unreachable warning only",
              [Engine()], [Pod(sidecar_fails=(300, 10**6))],
              fires=[Expect("VLLMHeadroomTargetDown", unreachable)])),
        (Case("a multi-target sidecar in a Kubernetes pod watches vLLM at http://localhost:8000, budget_full: the "
              "budget page alone (the endpoint is the pod IP and vLLM's port, not localhost)", [e_k8s],
              [Pod(labels=dict(K8S), sidecar=dict(K8S_SIDECAR), sidecar_target="http://localhost:8000",
                   verdict="budget_full", waiting=50)],
              fires=[Expect("VLLMHeadroomBudgetFull", {**local, "model_name": MODEL, "engine": "0"}, 50)]),
         Case("the same multi-target sidecar via localhost, slots_full: the false-full page alone", [e_k8s],
              [Pod(labels=dict(K8S), sidecar=dict(K8S_SIDECAR), sidecar_target="http://localhost:8000",
                   verdict="slots_full", waiting=50)],
              fires=[Expect("VLLMKVFalseFull", Engine(labels=dict(K8S)).alert_labels, 50)])),
        (Case("the sidecar's verdict flickers, budget_full 3 minutes, slots_full 1, under a standing queue: the budget "
              "page alone, kept", [e_ff], [Pod(flicker=(("budget_full", 180), ("slots_full", 60)), waiting=50)],
              fires=[Expect("VLLMHeadroomBudgetFull", side, 50)], also_at=["20m", "25m"]),
         Case("the verdict flickers the other way, budget_full 1 minute, slots_full 3: the false-full page alone",
              [e_ff], [Pod(flicker=(("budget_full", 60), ("slots_full", 180)), waiting=50)],
              fires=[Expect("VLLMKVFalseFull", eng, 50)], also_at=["20m", "25m"])),
    ]


GAPS_EVERY_5M = tuple((float(t), float(t + 60)) for t in range(300, MINUTES * 60, 300))


def cases() -> list[Case]:
    return [c for pair in _cases() for c in pair]


def twins() -> list[tuple[Case, Case]]:
    return _cases()


def _expected(cfg: Config, all_alerts: list[Alert], e: Expect) -> dict[str, Any]:
    """The rule `e` names: by alert name, severity where given, and the rule's static labels (`cause`)."""
    options = [a for a in all_alerts if a.name == e.alert and (e.severity is None or a.severity == e.severity)
               and all(e.labels.get(k) == v for k, v in a.labels)]
    assert len(options) == 1, (e.alert, e.severity, e.labels)
    alert = options[0]
    rule = alert_rule(cfg, alert)
    ann = {k: render(v, e.labels, e.value) for k, v in rule["annotations"].items()}
    return {"exp_labels": {**e.labels, "severity": alert.severity}, "exp_annotations": ann}


def _labels(metric: str, lb: Labels) -> str:
    return metric + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(lb.items())) + "}"


# The replica signal on a ramp (issue 24): each pod's vllm_headroom_replicas_needed is what the sidecar itself served
# while replaying a recorded vLLM timeline (tests/monitoring/replica_replay.py: every frame through the sidecar's
# pipeline and collector), one frame per REPLICA_FRAME seconds of rule time, the last frame held once the recording
# ends. Pods join one after another; pod a is scraped by three jobs (counted once): a cluster-wide pod scrape, a
# PodMonitor and a ServiceMonitor whose series carry a `service` label besides `job`. At each check the recorded sum
# must be the sum of the pods' current values, and HPA's desired count at AverageValue 1,
# ceil(current x (sum / current)), must be ceil(sum) whatever the current count: the rules and the sidecar agree by
# construction of the input.
REPLICAS_RULE = "model_name:vllm_headroom_replicas_needed:sum"
REPLICA_FRAME = 30.0  # rule-time seconds per recorded frame (recordings step ~0.5-1 s; stretched to scrape scale)
REPLICA_CHECKS = ("2m", "4m", "7m", "9m", "12m", "14m", "16m", "19m", "22m", "28m")
REPLICA_ROUND = 0.001  # the sum is compared rounded (PromQL round()): Prometheus may add in another order


@dataclass(frozen=True)
class ReplicaPod:
    """One replica in the ramp: its pod, when it starts (s), the sidecar's value per frame (None: no sample) and
    the recording it came from."""

    name: str
    ip: str
    start: float
    values: tuple[float | None, ...]
    source: str
    jobs: tuple[str, ...] = ("vllm-headroom",)
    # Jobs of a ServiceMonitor scraping the same sidecar through its Service: their series carry `service` too.
    service_jobs: tuple[str, ...] = ()

    def at(self, t: float) -> Value:
        if t < self.start or not self.values:
            return None
        return self.values[min(int((t - self.start) // REPLICA_FRAME), len(self.values) - 1)]


def _round(v: float, to: float = REPLICA_ROUND) -> float:
    inverse = 1.0 / to  # as PromQL's round(v, to_nearest) computes it
    return math.floor(v * inverse + 0.5) / inverse


def replica_ramp_test(interval: str, rule_name: str, pods: list[ReplicaPod]) -> dict[str, Any]:
    clock = Clock(parse_duration(interval))
    series = []
    for pod in pods:
        for job in (*pod.jobs, *pod.service_jobs):
            labels = (f'job="{job}",namespace="llm",pod="{pod.name}",instance="{pod.ip}:9478",'
                      f'target="http://127.0.0.1:8000",model_name="{MODEL}"')
            if job in pod.service_jobs:
                labels += f',service="{job}",endpoint="metrics"'

            series.append({"series": f"vllm_headroom_replicas_needed{{{labels}}}",
                           "values": _encode([pod.at(t) for t in clock.times])})
    where = {"model_name": MODEL, "namespace": "llm"}
    bare = "{" + ",".join(f'{k}="{v}"' for k, v in sorted(where.items())) + "}"
    checks = []
    for at in REPLICA_CHECKS:
        t = parse_duration(at)
        now = [v for v in (pod.at(t) for pod in pods) if v is not None]
        total = sum(now)
        assert now and not math.isnan(total), (at, now)
        checks.append({"expr": f"round({rule_name}, {REPLICA_ROUND})", "eval_time": at,
                       "exp_samples": [{"labels": bare, "value": _round(total)}]})
        # HPA at AverageValue 1: ceil(current x (value / current) / 1); the current count cancels.
        current = len(now)
        checks.append({"expr": f"ceil({current} * ({rule_name} / {current}) / 1)", "eval_time": at,
                       "exp_samples": [{"labels": bare, "value": math.ceil(total)}]})
    sources = ", ".join(f"{p.name} {p.source}" for p in pods)
    return {"name": f"replica signal on a replayed ramp ({sources}) [scrape {interval}]", "interval": interval,
            "input_series": series, "promql_expr_test": checks}


def replayed_pods() -> list[ReplicaPod]:
    """The ramp's pods from the recordings (tests/monitoring/replica_replay.py, run from a checkout)."""
    from tests.monitoring.replica_replay import ramp_pods

    return ramp_pods()


def promtool_tests(cfg: Config, rule_file: str, intervals: tuple[str, ...] = INTERVALS,
                   only: Callable[[Case], bool] | None = None,
                   replica_pods: list[ReplicaPod] | None = None) -> dict[str, Any]:
    """The suite: every case (or those `only` keeps) at every interval, and the replica ramp on `replica_pods`
    (default: replayed from the recordings)."""
    all_alerts = alerts(cfg)
    pods = replayed_pods() if replica_pods is None else replica_pods
    names = sorted({a.name for a in all_alerts})
    tests: list[dict[str, Any]] = []
    for interval in intervals:
        clock = Clock(parse_duration(interval))
        for c in cases():
            if only is not None and not only(c):
                continue
            series = [s for e in c.engines for s in e.series(clock)] + [s for p in c.pods for s in p.series(clock)]
            checks: list[dict[str, Any]] = []
            for name, t in c.early.items():
                checks.append({"eval_time": t, "alertname": name, "exp_alerts": []})
            moments = {t: c.fires for t in [*c.also_at, END]} | c.at
            for t, fires in sorted(moments.items(), key=lambda kv: parse_duration(kv[0])):
                for name in names:
                    exp = [_expected(cfg, all_alerts, e) for e in fires if e.alert == name]
                    if t == END or t in c.at or exp:
                        checks.append({"eval_time": t, "alertname": name, "exp_alerts": exp})
            test: dict[str, Any] = {"name": f"{c.name} [scrape {interval}]", "interval": interval,
                                    "input_series": series, "alert_rule_test": checks}
            if c.exprs:
                test["promql_expr_test"] = [
                    {"expr": expr, "eval_time": c.exprs_at,
                     "exp_samples": [{"labels": _labels(expr, lb), "value": v} for lb, v in samples]}
                    for expr, samples in c.exprs]
            tests.append(test)
        tests.append(replica_ramp_test(interval, REPLICAS_RULE, pods))
    return {"rule_files": [rule_file], "evaluation_interval": "1m", "tests": tests}


RULES_FILE, SUITE_FILE = "vllm-headroom-rules.yaml", "vllm-headroom-rules-test.yaml"


def write(folder: Path, cfg: Config = DEFAULT, intervals: tuple[str, ...] = INTERVALS, parts: int = 1) -> list[Path]:
    """The rules and the suite (split into `parts` files, cases dealt round-robin) in `folder`; the suite files."""
    from .generate import RULES_WIDTH, to_yaml
    from .rules import rule_groups

    folder.mkdir(parents=True, exist_ok=True)
    (folder / RULES_FILE).write_text(to_yaml(rule_groups(cfg), width=RULES_WIDTH))
    suite = promtool_tests(cfg, RULES_FILE, intervals)
    out = []
    for i in range(parts):
        path = folder / (SUITE_FILE if parts == 1 else f"part{i}-{SUITE_FILE}")
        path.write_text(to_yaml({**suite, "tests": suite["tests"][i::parts]}))
        out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m grafana.promtool_tests",
                                 description="Write the rules and their promtool suite to a folder.")
    ap.add_argument("folder", type=Path)
    ap.add_argument("--interval", action="append", choices=INTERVALS, help="only these scrape intervals")
    args = ap.parse_args(argv)
    for path in write(args.folder, intervals=tuple(args.interval or INTERVALS)):
        print(f"wrote {path}: promtool test rules {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
