"""The target's three parts (issue 20, item 3): the judgement does no I/O and derives once per engine and scrape;
the collector only reads a target's status."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.expose.collector import HeadroomCollector
from exporter.pipeline import derive, judge
from exporter.pipeline.target import Settings, Target
from tests import fixtures

PIPELINE = Path(__file__).resolve().parents[2] / "exporter" / "pipeline"
IO_MODULES = {"httpx", "asyncio", "socket", "time", "os", "pathlib", "subprocess", "logging", "urllib"}


def test_the_judgement_imports_nothing_that_does_io() -> None:
    tree = ast.parse((PIPELINE / "judge.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                 and not n.level}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level and n.module
                 in ("scrape", "target", "oneshot")}
    assert imported & (IO_MODULES | {"scrape", "target", "oneshot"}) == set()


@pytest.mark.parametrize("flags", [True, False])
def test_derive_runs_once_per_engine_and_scrape(monkeypatch: pytest.MonkeyPatch, flags: bool) -> None:
    """Without flags the cap is inferred (or taken from the running count) before the slot figures are derived:
    no second or third derivation, on every frame of the recorded inferred-cap false-full."""
    calls = {"pool": 0, "with_slots": 0}
    real_pool, real_slots = derive.pool, derive.with_slots

    def pool(x: derive.Inputs) -> derive.Pool:
        calls["pool"] += 1
        return real_pool(x)

    def with_slots(p: derive.Pool, max_num_seqs: int | None, running: int) -> derive.Headroom:
        calls["with_slots"] += 1
        return real_slots(p, max_num_seqs, running)

    monkeypatch.setattr(judge.derive, "pool", pool)
    monkeypatch.setattr(judge.derive, "with_slots", with_slots)
    scenario = "false-full-inferred"
    rec = fixtures.recording(scenario)
    target = Target(Settings("http://vllm:8000", vllm_args=fixtures.vllm_argv(scenario) if flags else None,
                             discover_cmdline=False))
    fixtures.as_recorded(target, rec.meta)
    start = rec.frames[0][0]
    engines = 0
    inferred = 0
    for t, text in rec.frames:
        report = target.observe(t - start, text)
        engines += len(report.engines)
        inferred += sum(e.config.max_num_seqs is not None and e.config.max_num_seqs.source == "inferred"
                        for e in report.engines)
    assert engines > 0 and calls == {"pool": engines, "with_slots": engines}
    assert (inferred == 0) == flags  # without flags the cap is inferred: the case that derived up to three times


def test_collect_only_reads() -> None:
    """Collecting twice changes nothing: the same exposition, and the target's state as before."""
    scenario = "false-full"
    t = Target(Settings(f"http://{scenario}:8000", vllm_args=fixtures.vllm_argv(scenario), discover_cmdline=False))
    t.last = t.observe(1.0, fixtures.snapshot(scenario))
    t.errors["timeout"] = 2
    before = (dict(t.errors), set(t.known_engines), t.down_since, t.seen_up, t.last, dict(t.histories))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(HeadroomCollector([t]))
    first = generate_latest(reg)
    assert first == generate_latest(reg)
    assert (dict(t.errors), set(t.known_engines), t.down_since, t.seen_up, t.last, dict(t.histories)) == before
    assert b'vllm_headroom_target_seen_up{target="http://false-full:8000"} 1.0' in first
