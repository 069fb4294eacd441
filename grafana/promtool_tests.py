"""`promtool test rules` cases: every alert fires in one scenario and stays silent in others.

Input series look like a real vLLM 0.32 exposition (see tests/fixtures/vllm-0.32.0): 40 blocks of 32 tokens
(39 usable), 1-2-5 length buckets, counters with `_total`. Expected annotations are rendered from the same
templates the rules carry, so a changed text changes the tests with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .config import Config
from .rules import Alert, alert_rule, alerts, render

POD = {"job": "vllm", "instance": "pod-a:8000", "namespace": "llm"}
SIDECAR = {"job": "vllm-headroom", "instance": "pod-a:9478", "namespace": "llm"}
SIDECAR_B = {**SIDECAR, "job": "vllm-headroom-b", "instance": "pod-b:9478"}  # a second sidecar, up but blind
ENGINE = {**POD, "model_name": "tiny-llama", "engine": "0"}
BUCKETS = ("1.0", "2.0", "5.0", "10.0", "20.0", "50.0", "100.0", "200.0", "500.0", "+Inf")
STEPS = 120  # samples at INTERVAL: 30 minutes
INTERVAL = "15s"


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{body}}}", "values": values}


def _const(v: float) -> str:
    return f"{v:g}x{STEPS}"


def _ramp(step: float) -> str:
    return f"0+{step:g}x{STEPS}"


@dataclass
class Engine:
    """One vLLM engine's series over the test; defaults are a busy, healthy engine."""

    usage: float = 0.6
    running: int = 8
    waiting: int = 0
    prompt_le: str = "20.0"  # bucket of every finished request's prompt
    max_tokens_le: str = "100.0"
    preemptions_per_sample: float = 0
    steps_per_sample: float = 150
    finished_per_sample: float = 10
    num_gpu_blocks: str = "40"
    labels: dict[str, str] = field(default_factory=lambda: dict(ENGINE))
    engines_of_pod: int = 1

    def series(self) -> list[dict[str, str]]:
        lb = self.labels
        pod = {k: v for k, v in lb.items() if k != "model_name"}
        out = [
            _series("vllm:cache_config_info",
                    {**pod, "block_size": "32", "num_gpu_blocks": self.num_gpu_blocks, "enable_prefix_caching": "True"},
                    _const(1)),
            _series("vllm:kv_cache_usage_perc", lb, _const(self.usage)),
            _series("vllm:num_requests_running", lb, _const(self.running)),
            _series("vllm:num_requests_waiting", lb, _const(self.waiting)),
            _series("vllm:num_preemptions_total", lb, _ramp(self.preemptions_per_sample)),
            _series("vllm:iteration_tokens_total_count", lb, _ramp(self.steps_per_sample)),
        ]
        for hist, le in (("vllm:request_prompt_tokens_bucket", self.prompt_le),
                         ("vllm:request_params_max_tokens_bucket", self.max_tokens_le)):
            reached = False
            for b in BUCKETS:
                reached = reached or b == le
                out.append(_series(hist, {**lb, "le": b}, _ramp(self.finished_per_sample if reached else 0)))
        return out


def _up(labels: dict[str, str], v: int) -> dict[str, str]:
    return _series("up", labels, _const(v))


def _healthy_sidecar() -> list[dict[str, str]]:
    return [_up(SIDECAR, 1), _series("vllm_headroom_up", SIDECAR, _const(1)),
            _series("vllm_headroom_scrape_errors_total", {**SIDECAR, "reason": "no_vllm_metrics"}, _const(0))]


@dataclass
class Case:
    name: str
    series: list[dict[str, str]]
    fires: dict[str, tuple[str, list[dict[str, str]]]]  # alert -> (eval time, label sets of the firing alerts)
    silent: list[str]  # alerts that must not fire at the end
    early: dict[str, str] = field(default_factory=dict)  # alert -> a time before its `for:` has elapsed
    exprs: list[tuple[str, str, list[tuple[dict[str, str], float]]]] = field(default_factory=list)


ALL = [a.name for a in alerts(Config())]
END = "29m"


def cases() -> list[Case]:
    eng = ENGINE
    rec = "instance_engine:"
    capacity_labels = {**POD, "engine": "0"}
    return [
        Case("false-full: 26 % used, 50 waiting, all slots taken",
             [*Engine(usage=0.26, waiting=50).series(), _up(POD, 1), *_healthy_sidecar()],
             fires={"VLLMKVFalseFull": (END, [eng])},
             silent=[a for a in ALL if a != "VLLMKVFalseFull"],
             early={"VLLMKVFalseFull": "4m"},
             exprs=[
                 (f"{rec}vllm_kv_capacity_blocks:usable", END, [(capacity_labels, 39)]),
                 (f"{rec}vllm_kv_capacity_tokens:usable", END, [(capacity_labels, 39 * 32)]),
                 (f"{rec}vllm_block_size_tokens:max", END, [(capacity_labels, 32)]),
                 (f"{rec}vllm_kv_used_blocks:round", END, [(eng, 10)]),
                 (f"{rec}vllm_kv_free_blocks:sub", END, [(eng, 29)]),
                 (f"{rec}vllm_request_prompt_tokens:bucket_quantile", END, [(eng, 20)]),
                 (f"{rec}vllm_request_max_tokens:bucket_quantile", END, [(eng, 100)]),
                 (f"{rec}vllm_prompt_blocks:ceil", END, [(eng, 1)]),
                 (f"{rec}vllm_worst_case_blocks_per_request:ceil", END, [(eng, 4)]),
                 (f"{rec}vllm_max_concurrency_requests:floor", END, [(eng, 9)]),
                 (f"{rec}vllm_kv_admission_headroom_requests:floor", END, [(eng, 29)]),
                 (f"{rec}vllm_safe_headroom_requests:floor", END, [(eng, 1)]),
                 (f"{rec}vllm_kv_false_full:bool", END, [(eng, 1)]),
                 (f"{rec}vllm_kv_full:bool", END, [(eng, 0)]),
                 (f"{rec}vllm_num_preemptions:rate5m", END, [(eng, 0)]),
                 ("model_name:vllm_kv_false_full_engines:sum", END,
                  [({"namespace": "llm", "model_name": "tiny-llama"}, 1)]),
             ]),
        Case("healthy busy server: 60 % used, nothing waits",
             [*Engine().series(), _up(POD, 1), *_healthy_sidecar()],
             fires={}, silent=ALL,
             exprs=[(f"{rec}vllm_kv_false_full:bool", END, [(eng, 0)]),
                    (f"{rec}vllm_safe_headroom_requests:floor", END, [(eng, 1)])]),
        Case("truly full: 95 % used, 20 waiting",
             [*Engine(usage=0.95, waiting=20).series(), _up(POD, 1), *_healthy_sidecar()],
             fires={"VLLMKVCacheFull": (END, [eng])},
             silent=[a for a in ALL if a not in ("VLLMKVCacheFull", "VLLMKVOversubscribed")],
             early={"VLLMKVCacheFull": "9m"}),
        Case("preemption storm: 2 preemptions/s",
             [*Engine(usage=0.97, waiting=5, preemptions_per_sample=30).series(), _up(POD, 1), *_healthy_sidecar()],
             fires={"VLLMPreemptionStorm": (END, [eng])},
             silent=["VLLMKVFalseFull", "VLLMSchedulerStuck", "VLLMKVBlockLeak", "VLLMMetricsAbsent"],
             early={"VLLMPreemptionStorm": "4m"}),
        Case("oversubscribed: 8 running x 22 worst-case blocks > 39 blocks, nothing waits yet",
             [*Engine(usage=0.5, prompt_le="200.0", max_tokens_le="500.0").series(), _up(POD, 1), *_healthy_sidecar()],
             fires={"VLLMKVOversubscribed": (END, [eng])},
             silent=[a for a in ALL if a != "VLLMKVOversubscribed"],
             early={"VLLMKVOversubscribed": "14m"},
             exprs=[(f"{rec}vllm_worst_case_blocks_per_request:ceil", END, [(eng, 22)]),
                    (f"{rec}vllm_safe_headroom_requests:floor", END, [(eng, -7)])]),
        Case("stuck: 10 waiting, no engine step",
             [*Engine(usage=0.1, running=0, waiting=10, steps_per_sample=0).series(), _up(POD, 1), *_healthy_sidecar()],
             fires={"VLLMSchedulerStuck": (END, [eng]), "VLLMKVFalseFull": (END, [eng])},
             silent=["VLLMKVCacheFull", "VLLMPreemptionStorm", "VLLMKVBlockLeak", "VLLMHeadroomTargetDown"],
             early={"VLLMSchedulerStuck": "5m"}),
        Case("block leak: 30 % used with nothing running or waiting",
             [*Engine(usage=0.3, running=0, waiting=0, steps_per_sample=0).series(), _up(POD, 1), *_healthy_sidecar()],
             fires={"VLLMKVBlockLeak": (END, [eng])},
             silent=[a for a in ALL if a != "VLLMKVBlockLeak"],
             early={"VLLMKVBlockLeak": "14m"}),
        Case("idle server: nothing in use",
             [*Engine(usage=0.0, running=0, waiting=0, steps_per_sample=0).series(), _up(POD, 1), *_healthy_sidecar()],
             fires={}, silent=ALL),
        Case("sidecar down and sidecar's target down",
             [*Engine().series(), _up(POD, 1), _up(SIDECAR, 0), _series("vllm_headroom_up", SIDECAR_B, _const(0))],
             fires={"VLLMHeadroomSidecarDown": (END, [SIDECAR]),
                    "VLLMHeadroomTargetDown": (END, [SIDECAR_B])},
             silent=["VLLMKVFalseFull", "VLLMKVCacheFull", "VLLMMetricsAbsent"],
             early={"VLLMHeadroomSidecarDown": "4m", "VLLMHeadroomTargetDown": "2m"}),
        Case("--disable-log-stats: vLLM up without engine metrics, the sidecar counts no_vllm_metrics",
             [_up(POD, 1), _up(SIDECAR, 1), _series("vllm_headroom_up", SIDECAR, _const(0)),
              _series("vllm_headroom_scrape_errors_total", {**SIDECAR, "reason": "no_vllm_metrics"}, _ramp(1))],
             fires={"VLLMMetricsAbsent": (END, [POD, {**SIDECAR, "reason": "no_vllm_metrics"}]),
                    "VLLMHeadroomTargetDown": (END, [SIDECAR])},
             silent=["VLLMKVFalseFull", "VLLMKVCacheFull", "VLLMHeadroomSidecarDown"],
             early={"VLLMMetricsAbsent": "9m"}),
        Case("two data-parallel engines: num_gpu_blocks is their sum",
             Engine(num_gpu_blocks="80").series()
             + Engine(num_gpu_blocks="80", usage=0.26, labels={**ENGINE, "engine": "1"}).series()
             + [_up(POD, 1), *_healthy_sidecar()],
             fires={}, silent=ALL,
             exprs=[(f"{rec}vllm_kv_capacity_blocks:usable", END,
                     [(capacity_labels, 39), ({**capacity_labels, "engine": "1"}, 39)]),
                    (f"{rec}vllm_kv_used_blocks:round", END, [(eng, 23), ({**eng, "engine": "1"}, 10)])]),
    ]


def _expected(cfg: Config, alert: Alert, labels: dict[str, str]) -> dict[str, Any]:
    rule = alert_rule(cfg, alert)
    ann = dict(rule["annotations"])
    ann["description"] = render(ann["description"], labels)
    return {"exp_labels": {**labels, "severity": alert.severity}, "exp_annotations": ann}


def promtool_tests(cfg: Config, rule_file: str) -> dict[str, Any]:
    by_name = {a.name: a for a in alerts(cfg)}
    tests: list[dict[str, Any]] = []
    for c in cases():
        checks: list[dict[str, Any]] = []
        for name, t in c.early.items():
            checks.append({"eval_time": t, "alertname": name, "exp_alerts": []})
        for name, (t, label_sets) in c.fires.items():
            checks.append({"eval_time": t, "alertname": name,
                           "exp_alerts": [_expected(cfg, by_name[name], lb) for lb in label_sets]})
        for name in c.silent:
            checks.append({"eval_time": END, "alertname": name, "exp_alerts": []})
        test: dict[str, Any] = {"name": c.name, "interval": INTERVAL, "input_series": c.series,
                                "alert_rule_test": checks}
        if c.exprs:
            test["promql_expr_test"] = [
                {"expr": expr, "eval_time": t, "exp_samples": [
                    {"labels": expr + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(lb.items())) + "}", "value": v}
                    for lb, v in samples]}
                for expr, t, samples in c.exprs
            ]
        tests.append(test)
    return {"rule_files": [rule_file], "evaluation_interval": "15s", "tests": tests}
