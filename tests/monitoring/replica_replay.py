"""The replica signal as the sidecar serves it, replayed from recorded vLLM timelines (issue 24 review, item 5).

Each recorded frame goes through the sidecar's own pipeline (`Target.observe`, as `serve` scrapes vLLM, with
/v1/models and /version as recorded and vLLM's recorded command line as its flags) and its /metrics is rendered by the
collector `serve` registers; the value of `vllm_headroom_replicas_needed` in that text is the sample. The promtool
ramp (grafana/promtool_tests.py `replica_ramp_test`) feeds these values, one frame per scrape interval, so the
recording rule and HPA's fixed point are checked on what the sidecar exports, not on hand-typed numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.expose.collector import HeadroomCollector
from exporter.pipeline.scrape import ScrapeError
from exporter.pipeline.target import Settings, Target
from exporter.replay import recording
from grafana.promtool_tests import MODEL, ReplicaPod
from tests import fixtures

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SIGNAL = "vllm_headroom_replicas_needed"
IDLE_STEP = 10.0  # s between the sidecar's reads of the idle server after a recording ends


@dataclass(frozen=True)
class Replayed:
    """One recording's signal: the model it is about and the sidecar's value after each frame (None: no sample)."""

    source: str
    model_name: str
    values: tuple[float | None, ...]


def served(target: Target) -> dict[str, float]:
    """`vllm_headroom_replicas_needed` per model in the /metrics the sidecar would serve now."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(HeadroomCollector([target]))
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in family.samples:
            if s.name == SIGNAL:
                out[s.labels["model_name"]] = s.value
    return out


def replay(name: str) -> Replayed:
    """`tests/fixtures/<name>` (e.g. "vllm-0.32.0/prod-slots") replayed frame by frame."""
    folder = FIXTURES / name
    rec = recording.load(folder)
    argv = [str(a) for a in rec.meta.get("server_argv") or []]
    target = fixtures.as_recorded(
        Target(Settings(url="http://vllm:8000", vllm_args=argv or None, discover_cmdline=False)), rec.meta)
    start = rec.frames[0][0]
    values: list[float | None] = []
    models: set[str] = set()
    # The recordings end a few seconds after vLLM went idle; the sidecar goes on scraping the idle server, and its
    # offered load (over the last --autoscaling.load-window) falls to 0 once the window holds only idle scrapes:
    # the last (idle) exposition is read again every IDLE_STEP seconds until one window has passed.
    last_t, last_text = rec.frames[-1]
    window = target.settings.load_window
    tail = [(last_t + k * IDLE_STEP, last_text) for k in range(1, math.ceil(window / IDLE_STEP) + 2)]
    for t, text in [*rec.frames, *tail]:
        try:
            target.last = target.observe(t - start, text)
        except ScrapeError:
            values.append(None)
            continue
        now = served(target)
        models |= set(now)
        assert len(models) <= 1, f"{name}: one model per replayed replica, got {sorted(models)}"
        values.append(next(iter(now.values()), None))
    (model,) = models
    return Replayed(name, model, tuple(values))


# The ramp: three replicas join 6 minutes apart, each replaying one recorded vLLM 0.32.0 timeline of the tiny model
# (a mixed ramp up to R 2.4, a slot-bound plateau at R 1.1-1.2, a burst up to R 4.6 draining); all end idle (R 0).
# Pod a is scraped three times: its PodMonitor, a cluster-wide pod job and a ServiceMonitor (which adds `service`).
RAMP = (("vllm-a", "10.0.0.1", 0.0, "vllm-0.32.0/prod-mixed", ("vllm-headroom", "kubernetes-pods"),
         ("vllm-headroom-svc",)),
        ("vllm-b", "10.0.0.2", 360.0, "vllm-0.32.0/prod-slots", ("vllm-headroom",), ()),
        ("vllm-c", "10.0.0.3", 720.0, "vllm-0.32.0/prod-burst", ("vllm-headroom",), ()))


def ramp_pods() -> list[ReplicaPod]:
    out = []
    for name, ip, start, source, jobs, service_jobs in RAMP:
        r = replay(source)
        assert r.model_name == MODEL, (source, r.model_name)
        out.append(ReplicaPod(name, ip, start, r.values, source, jobs, service_jobs))
    return out
