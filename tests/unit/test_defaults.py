"""Each default is written once, in exporter/core/defaults.py; every consumer takes it from there."""

from __future__ import annotations

import pytest

from exporter import cli
from exporter.core import defaults, units
from exporter.pipeline.target import Settings
from exporter.pipeline.verdict import Thresholds


def test_thresholds_and_settings_default_to_core_defaults() -> None:
    t = Thresholds()
    assert (t.full_usage, t.false_full_hold, t.stuck_after, t.leak_after, t.preempt_window) == (
        defaults.FULL_USAGE, defaults.FALSE_FULL_HOLD, defaults.STUCK_AFTER, defaults.LEAK_AFTER,
        defaults.PREEMPT_WINDOW)
    s = Settings(url="http://x")
    assert (s.timeout, s.max_bytes, s.models_interval, s.quantile, s.window) == (
        defaults.SCRAPE_TIMEOUT, defaults.SCRAPE_MAX_BYTES, defaults.MODELS_INTERVAL, defaults.PROFILE_QUANTILE,
        defaults.PROFILE_WINDOW)


@pytest.mark.parametrize("command", [["serve"], ["diagnose", "x.prom"], ["recommend", "x.prom"]])
def test_every_subcommand_defaults_to_the_same_values(command: list[str]) -> None:
    args = vars(cli.build_parser().parse_args(command))
    expected = {
        "scrape.timeout": defaults.SCRAPE_TIMEOUT,
        "profile.quantile": defaults.PROFILE_QUANTILE,
        "profile.window": defaults.PROFILE_WINDOW,
        "verdict.full_usage": defaults.FULL_USAGE,
        "verdict.false_full_hold": defaults.FALSE_FULL_HOLD,
        "verdict.stuck_after": defaults.STUCK_AFTER,
        "verdict.leak_after": defaults.LEAK_AFTER,
        "verdict.preempt_window": defaults.PREEMPT_WINDOW,
    }
    present = {k: args[k] for k in expected if k in args}
    assert present == {k: v for k, v in expected.items() if k in present}
    assert "scrape.timeout" in present and "profile.quantile" in present
    if command[0] != "recommend":  # recommend judges no verdict, so it has no --verdict.* flags
        assert present == expected


def test_the_cli_builds_settings_equal_to_the_pipeline_defaults() -> None:
    from exporter.cli.settings import settings_for

    args = cli.build_parser().parse_args(["serve"])
    built = settings_for("http://x", args)
    assert built.thresholds == Thresholds()
    assert (built.timeout, built.max_bytes, built.models_interval, built.window) == (
        Settings(url="x").timeout, Settings(url="x").max_bytes, Settings(url="x").models_interval,
        Settings(url="x").window)


def test_named_durations_format_in_the_grammar() -> None:
    """Generators write each default duration in the one grammar, and it reads back to the same seconds."""
    for name, seconds in defaults.DURATIONS.items():
        text = units.format_duration(seconds)
        assert text[-1] in "smh", name
        assert units.parse_duration(text) == seconds, name
