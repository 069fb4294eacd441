"""What one engine's judgement holds (issue 21): bytes of a `Target`'s per-engine state after 10 minutes of scrapes
at a 1 s and a 5 s interval, with the profile windows capped in snapshots (`PROFILE_WINDOW_SNAPSHOTS`) and, side by
side in the same run, uncapped (bounded in seconds only, as before).

    python -m bench.engine_memory

A recorded exposition (tests/fixtures/vllm-0.32.0/false-full/snapshot.prom) is observed every interval on a
simulated clock; `tracemalloc` measures what the target holds after the first scrape and after 600 s (the
difference is the windows and the verdict tracker filling). In-process and no timing: machine load cannot move it.
"""

from __future__ import annotations

import gc
import tracemalloc

from exporter.pipeline import profile
from exporter.pipeline.target import Settings, Target

from .common import FIXTURES, VLLM_ARGS

SECONDS = 600.0


def held(interval: float, cap: int) -> tuple[int, int, int]:
    """(bytes after one scrape, bytes after SECONDS, snapshots of the prompt window then)."""
    text = (FIXTURES / "false-full" / "snapshot.prom").read_text()
    saved = profile.Window.__init__.__defaults__
    profile.Window.__init__.__defaults__ = (cap,)
    try:
        target = Target(Settings("http://bench", vllm_args=VLLM_ARGS.split(), discover_cmdline=False))
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        target.observe(0.0, text)
        first = tracemalloc.get_traced_memory()[0] - base
        for i in range(1, int(SECONDS / interval) + 1):
            target.last = target.observe(i * interval, text)
        gc.collect()
        last = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
    finally:
        profile.Window.__init__.__defaults__ = saved
    history = next(iter(target.histories.values()))
    return first, last, max(len(w) for w in history.windows.values())


def main() -> None:
    print(f"{'interval':>8} {'windows':>18} {'after 1 scrape':>15} {'after 600 s':>12} {'snapshots/window':>17}")
    for interval in (1.0, 5.0):
        for cap, name in ((0, "seconds only"), (profile.defaults.PROFILE_WINDOW_SNAPSHOTS, "seconds + cap")):
            first, last, snaps = held(interval, cap)
            print(f"{interval:>7.0f}s {name:>18} {first / 1e6:>12.3f} MB {last / 1e6:>9.3f} MB {snaps:>17}")


if __name__ == "__main__":
    main()
