"""A vLLM general plugin for the closed-loop autoscaling bench (bench/b9_autoscaling.py): each engine step lasts at
least `base + per_token x scheduled tokens`, as a step on an accelerator would, with the CPU idle meanwhile.

Why: on this 2-core machine one engine of the tiny model with work steps flat out (measured: 1.5 cores for one server
with 4 running requests), so more replicas add no capacity, and autoscaling would be judged on CPU contention instead
of on admission. Paced, a replica's capacity is its slots and KV blocks over a step time, as on a GPU, and each
replica adds it. Everything else is vLLM's own: the scheduler, admission, the KV pool, preemption and the metrics.

Active only when VLLM_HEADROOM_BENCH_STEP="<base ms>,<per-token ms>" is set; loaded through the
`vllm.general_plugins` entry point the bench writes beside this file (no package is installed into vLLM's venv).
Hooks vllm/v1/core/sched/scheduler.py `Scheduler.schedule` and `update_from_output` (@0.32.0): the step's output
is held back until the paced time since its schedule has passed.
"""

from __future__ import annotations

import os
import time
from typing import Any

ENV = "VLLM_HEADROOM_BENCH_STEP"


def register() -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    base_ms, per_token_ms = (float(x) for x in spec.split(","))
    from vllm.v1.core.sched import scheduler as sched  # type: ignore[import-not-found]

    cls: Any = sched.Scheduler
    if getattr(cls, "_headroom_paced", False):
        return  # plugins may load more than once per process
    schedule, update = cls.schedule, cls.update_from_output
    started: dict[int, tuple[float, int]] = {}

    def paced_schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = schedule(self, *args, **kwargs)
        started[id(out)] = (time.monotonic(), int(out.total_num_scheduled_tokens))
        return out

    def paced_update(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        t0, tokens = started.pop(id(scheduler_output), (None, 0))
        if t0 is not None and tokens > 0:
            wait = t0 + (base_ms + per_token_ms * tokens) / 1000.0 - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        return update(self, scheduler_output, *args, **kwargs)

    cls.schedule, cls.update_from_output = paced_schedule, paced_update
    cls._headroom_paced = True
