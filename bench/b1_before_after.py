"""Benchmark 1 for two trees side by side in one run: the per-scrape figures of `bench.b1_parse` (observe, parse,
prometheus_client on the same bytes) measured for an older checkout and for this one, in alternating child
processes, so machine load falls on both alike.

    git archive <commit> | tar -x -C /tmp/before
    python -m bench.b1_before_after /tmp/before [rounds]      # default 5 alternations, shape 1x and dp8

Each child runs `bench.b1_parse.measure` from its own tree (its own `exporter`), one round per shape; the table
gives the medians over the rounds and the ratios observe / prometheus_client for each tree.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from .common import REPO, loadavg

CHILD = """
import json, sys
from pathlib import Path
from bench.b1_parse import measure
from bench.common import FIXTURES
try:
    from exporter.replay import recording as replay
except ImportError:
    from exporter import replay
rec = replay.load(Path(FIXTURES / "false-full"))
every = max(1, len(rec.frames) // 8)
frames = [text for _, text in rec.frames[::every]][:8]
out = {}
for shape in sys.argv[1:]:
    out[shape] = measure(shape, frames if shape == "1x" else frames[:3], 1, 0.4)
print(json.dumps(out))
"""


def run(tree: Path, shapes: list[str]) -> dict[str, dict[str, float]]:
    done = subprocess.run([sys.executable, "-c", CHILD, *shapes], cwd=tree, capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    before = Path(sys.argv[1]).resolve()
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    shapes = ["1x", "dp8"]
    load_before = loadavg()
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"before": [], "after": []}
    for _ in range(rounds):
        runs["before"].append(run(before, shapes))
        runs["after"].append(run(REPO, shapes))
    print(f"load avg {load_before} before, {loadavg()} after; {rounds} alternations; medians")
    print("| shape | tree | observe | parse | prometheus_client | ratio (observe) | ratio (parse) |")
    print("|---|---|---|---|---|---|---|")
    for shape in shapes:
        for tree in ("before", "after"):
            keys = ("ours_observe_ms", "ours_parse_ms", "prometheus_client_ms", "ratio_observe", "ratio_parse")
            med = {k: statistics.median(r[shape][k] for r in runs[tree]) for k in keys}
            print(f"| {shape} | {tree} | {med['ours_observe_ms']:.3f} ms | {med['ours_parse_ms']:.3f} ms | "
                  f"{med['prometheus_client_ms']:.2f} ms | {med['ratio_observe']:.1f}× | {med['ratio_parse']:.1f}× |")


if __name__ == "__main__":
    main()
