"""Run `vllm-headroom serve ARGS` under tracemalloc (the soak's leak check, issue 21).

    python -m bench.traced_serve DIR SECONDS serve ...

Every SECONDS a snapshot of the Python heap (8 frames per allocation, TRACEMALLOC_FRAMES) goes to
DIR/NNNN.snap; `python -m
bench.soak` with SOAK_TRACEMALLOC=1 starts the sidecar this way and diffs the snapshots at the end (the largest
growths between the first snapshot after warm-up and the last), which tells a leak (one site growing on
every snapshot) from warm-up (growth that stops).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path


def _dump(out: Path, every: float) -> None:
    n = 0
    while True:
        time.sleep(every)
        tracemalloc.take_snapshot().dump(str(out / f"{n:04d}.snap"))
        n += 1


def main() -> int:
    out, every, argv = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    out.mkdir(parents=True, exist_ok=True)
    tracemalloc.start(int(os.environ.get("TRACEMALLOC_FRAMES", "8")))
    threading.Thread(target=_dump, args=(out, every), daemon=True).start()
    from exporter.cli import main as cli
    return cli(argv)


if __name__ == "__main__":
    raise SystemExit(main())
