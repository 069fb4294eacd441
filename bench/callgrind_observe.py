"""Instructions (callgrind Ir) of one `Target.observe` on a bench shape: machine load cannot move this figure.

    python -m bench.callgrind_observe [shape] [mode]   # shape: bench/shapes.py (dp8), mode: observe|parse|prom

Runs this module under `valgrind --tool=callgrind` twice, with 3 and with 43 calls on the false-full timeline
frames, and prints (Ir(43) - Ir(3)) / 40: start-up, imports and frame building cancel out. Objects made before
the calls are frozen out of the garbage collector, so a full collection scans only what the calls made. The
imports fall back to the flat layout of 68e1ea8, so the same file measures the code before issue 10's
restructure (copy it into a worktree of that commit).
"""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

FEW, MANY = 3, 43  # 40 calls: a garbage collection in the window weighs little even at 1x


def _calls(n: int, shape: str, mode: str) -> None:
    try:
        from exporter.pipeline import exposition, vllm
        from exporter.pipeline.target import Settings, Target
        from exporter.replay import recording as replay
    except ImportError:  # 68e1ea8 and before: one flat package
        from exporter.target import Settings, Target  # type: ignore[no-redef,import-not-found]

        from exporter import exposition, replay, vllm  # type: ignore[no-redef,attr-defined]
    from prometheus_client.parser import text_string_to_metric_families

    from .common import FIXTURES, VLLM_ARGS
    from .shapes import build

    rec = replay.load(Path(FIXTURES / "false-full"))
    every = max(1, len(rec.frames) // 8)
    texts = [build(shape, text) for _, text in rec.frames[::every][:3]]  # as bench/b1_parse.py does
    target = Target(Settings("http://bench", vllm_args=VLLM_ARGS.split(), discover_cmdline=False))
    gc.freeze()
    for i in range(n):
        text = texts[i % len(texts)]
        if mode == "observe":
            target.observe(float(i + 1), text)
        elif mode == "parse":
            exposition.parse(text, vllm.WANTED)
        elif mode == "prom":
            list(text_string_to_metric_families(text))
        else:
            raise ValueError(mode)


def _ir(n: int, shape: str, mode: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out", sys.executable, "-m",
             "bench.callgrind_observe", "--calls", str(n), shape, mode],
            capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"},
        ).stderr
    m = re.search(r"Collected : (\d+)", out)
    if m is None:
        raise RuntimeError(f"no Ir in valgrind's output:\n{out}")
    return int(m.group(1))


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--calls"]:
        _calls(int(args[1]), *args[2:4])
        return
    shape = args[0] if args else "dp8"
    mode = args[1] if len(args) > 1 else "observe"
    per_call = (_ir(MANY, shape, mode) - _ir(FEW, shape, mode)) / (MANY - FEW)
    print(f"{shape} {mode}: {per_call / 1e6:.2f} M instructions per call")


if __name__ == "__main__":
    main()
