"""The engine-truth recorder (tests/e2e/truth_plugin) from the test side: stage it for a server, read what it wrote.

Staging (`stage_plugin`): the plugin is never installed into a venv. For a server that asks for the truth,
tests/e2e/vllm_server.py copies the plugin package into the server's temp folder beside a `.dist-info` whose
entry point comes from the plugin's own pyproject.toml, and puts that folder first on the server's PYTHONPATH
(importlib.metadata finds distributions on sys.path, so vLLM's `entry_points(group="vllm.general_plugins")`
sees it). Changing the plugin therefore needs no venv rebuild, and the vllm-headroom package never carries it.

Reading (`read_steps`): the recorder writes only what changed since its last line; `Steps` carries the state
forward so any engine time has the full state of the last step at or before it.

Alignment (`align`): a /metrics scrape shows the gauges vLLM set from the last scheduler stats (`make_stats`, once
per step) that reached the API server. The recorder notes, per step, the stats reported before it (sr, sw): for a
frame scraped at engine time t, its step is the one nearest to t whose (sr, sw) equal the frame's (running,
waiting) gauges, searched from `ALIGN_BACK_S` before to `ALIGN_AHEAD_S` after t (the answer is rendered after the
request is sent); that step's scan is what the engine did with the state the
frame shows. Recordings without sr/sw fall back to the step's entry counts (r0, w0); without any match, the last
step before t (marked unmatched). Stdlib only:
the scorer (tests/truth.py) imports this.
"""

from __future__ import annotations

import gzip
import json
import shutil
import tomllib
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PLUGIN = Path(__file__).resolve().parent / "truth_plugin"
ENV = "VLLM_HEADROOM_TRUTH"
STATE = ("sr", "sw", "r0", "w0", "r", "w", "wd", "free0", "free", "left", "head", "hp", "hb", "stop", "pause")
# vLLM's API server turns engine outputs into gauges after the engine moved on; under load it falls behind (0.10.2
# at 256 running: seconds; a 640k-token prefill takes seconds per step). A frame is joined to the nearest step whose
# reported stats it shows, up to this far back.
ALIGN_BACK_S = 30.0
ALIGN_AHEAD_S = 0.3  # the scrape's t is when its request was sent; vLLM renders the answer a few ms later


def stage_plugin(into: Path) -> Path:
    """Copy the plugin into `into`/truth-plugin with its dist-info; returns the folder for PYTHONPATH."""
    meta = tomllib.loads((PLUGIN / "pyproject.toml").read_text())["project"]
    name, version = meta["name"], meta["version"]
    root = into / "truth-plugin"
    pkg = "vllm_headroom_truth"
    shutil.copytree(PLUGIN / pkg, root / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    dist = root / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = []
    for group, points in meta.get("entry-points", {}).items():
        lines.append(f"[{group}]")
        lines += [f"{k} = {v}" for k, v in points.items()]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    (dist / "RECORD").write_text("")
    return root


@dataclass
class Step:
    """One scheduler step as the recorder saw it: the carried-forward state and this step's events."""

    t: float
    k: int
    state: dict[str, Any]
    adm: list[str] = field(default_factory=list)
    res: list[str] = field(default_factory=list)
    pre: list[str] = field(default_factory=list)
    ref: dict[str, Any] | None = None
    dfr: dict[str, int] = field(default_factory=dict)
    hold: bool = False

    def __getitem__(self, key: str) -> Any:
        return self.state.get(key)


@dataclass
class Steps:
    """Everything one recorder file says: the engine's header, its written steps, pause changes, costs, errors."""

    header: dict[str, Any]
    steps: list[Step]
    pauses: list[tuple[float, str]]
    costs: list[dict[str, Any]]
    errors: list[str]
    times: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.times = [s.t for s in self.steps]

    def at(self, t: float) -> Step | None:
        """The last written step started at or before engine time t (its state holds until the next one)."""
        i = bisect_right(self.times, t)
        return self.steps[i - 1] if i else None

    def between(self, t0: float, t1: float) -> list[Step]:
        """Written steps started in (t0, t1]."""
        return self.steps[bisect_right(self.times, t0):bisect_right(self.times, t1)]

    def admitted(self) -> dict[str, list[float]]:
        """Request id -> engine times it was admitted (more than one after preemptions)."""
        out: dict[str, list[float]] = {}
        for s in self.steps:
            for rid in s.adm:
                out.setdefault(rid, []).append(s.t)
        return out


def parse_lines(lines: list[str]) -> Steps:
    header: dict[str, Any] = {}
    steps: list[Step] = []
    pauses: list[tuple[float, str]] = []
    costs: list[dict[str, Any]] = []
    errors: list[str] = []
    state: dict[str, Any] = {}
    for line in lines:
        if not line.strip():
            continue
        d = json.loads(line)
        if "hdr" in d:
            header = d["hdr"]
            state = {}
            continue
        if "error" in d:
            errors.append(d["error"])
            continue
        if "cost" in d:
            costs.append({"t": d["t"], **d["cost"]})
            continue
        if "pause_set" in d:
            pauses.append((d["t"], d["pause_set"]))
            continue
        for key in STATE:
            if key in d:
                state[key] = d[key]
        steps.append(Step(d["t"], d["k"], dict(state), d.get("adm", []), d.get("res", []), d.get("pre", []),
                          d.get("ref"), d.get("dfr", {}), bool(d.get("hold"))))
    return Steps(header, steps, pauses, costs, errors)


def read_steps(path: Path) -> Steps:
    """The recorder's file (plain or .gz)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        return parse_lines(f.read().splitlines())


def frame_gauges(text: str) -> tuple[float, float]:
    """(running, waiting) of one exposition, summed over engines (stdlib: a line scan)."""
    running = waiting = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_running{") or line.startswith("vllm:num_requests_running "):
            running += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:num_requests_waiting{") or line.startswith("vllm:num_requests_waiting "):
            waiting += float(line.rsplit(" ", 1)[1])
    return running, waiting


@dataclass(frozen=True)
class Aligned:
    """A frame's engine truth: its step (None before the first), whether the gauges matched it, and what the
    engine did next: the first steps after the frame's step up to the next frame. `lag`: seconds from the step
    to the scrape (how far the exposition was behind the engine)."""

    step: Step | None
    matched: bool
    after: list[Step]
    lag: float | None = None


def align(steps: Steps, frames: list[tuple[float, str]], t0: float) -> list[Aligned]:
    """Each frame (t seconds after engine time t0, exposition) against the recorder's steps."""
    out: list[Aligned] = []
    starts: list[int] = []
    for t, text in frames:
        at = t0 + t
        running, waiting = frame_gauges(text)
        hi = bisect_right(steps.times, at)
        lo = bisect_right(steps.times, at - ALIGN_BACK_S)
        top = bisect_right(steps.times, at + ALIGN_AHEAD_S)
        idx = None
        for i in range(lo, top):
            s = steps.steps[i]
            key = (s["sr"], s["sw"]) if s["sr"] is not None else (s["r0"], s["w0"])
            if key == (running, waiting) and (idx is None or abs(s.t - at) < abs(steps.steps[idx].t - at)):
                idx = i
        matched = idx is not None
        if idx is None:
            idx = hi - 1 if hi else None
        out.append(Aligned(None if idx is None else steps.steps[idx], matched, []))
        starts.append(-1 if idx is None else idx)
    # What followed each frame's step: the written steps after it, up to the next frame's step.
    result = []
    for j, a in enumerate(out):
        i = starts[j]
        end = starts[j + 1] if j + 1 < len(starts) else len(steps.steps)
        nxt = steps.steps[i + 1:max(end, i + 1)] if i >= 0 else []
        lag = None if a.step is None else round(t0 + frames[j][0] - a.step.t, 4)
        result.append(Aligned(a.step, a.matched, nxt, lag))
    return result
