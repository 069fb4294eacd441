"""Our /metrics per recorded scenario equals its golden copy (update: `make golden`, then review the diff)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from tests import golden

SCENARIOS = golden.scenarios()


def test_every_recorded_scenario_has_a_golden_file() -> None:
    assert len(SCENARIOS) >= 5
    assert [f for f in SCENARIOS if not (f / golden.NAME).is_file()] == []


@pytest.mark.parametrize("folder", SCENARIOS, ids=lambda f: f"{f.parent.name}/{f.name}")
def test_metrics_equal_the_golden_copy(folder: Path) -> None:
    want = (folder / golden.NAME).read_text()
    got = golden.render(folder)
    diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "golden", "now", n=0))
    assert diff == "", f"{folder}: our /metrics changed; if intended, run `make golden` and review:\n{diff}"
