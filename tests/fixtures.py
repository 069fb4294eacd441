"""Access to expositions recorded from the real vLLM 0.32.0 (tests/fixtures/vllm-0.32.0/<scenario>/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from exporter.pipeline.scrape import parse_frontend, parse_models, parse_version
from exporter.pipeline.target import Target
from exporter.replay import recording as replay

ROOT = Path(__file__).parent / "fixtures" / "vllm-0.32.0"


def snapshot(scenario: str) -> str:
    """The exposition that shows the scenario's state most clearly."""
    return (ROOT / scenario / "snapshot.prom").read_text()


def meta(scenario: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / scenario / "meta.json").read_text())
    return data


def recording(scenario: str) -> replay.Recording:
    return replay.load(ROOT / scenario)


def vllm_argv(scenario: str) -> list[str]:
    """vLLM's command line as recorded (what the sidecar reads from /proc in a pod)."""
    return [str(a) for a in meta(scenario)["server_argv"]]


def as_recorded(target: Target, meta: dict[str, Any]) -> Target:
    """`target` knowing what the recorded server answered on /v1/models and /version (as the sidecar reads them)."""
    if meta.get("v1_models"):
        target.models = parse_models(json.dumps(meta["v1_models"]))
    if meta.get("version"):
        target.version = parse_version(json.dumps(meta["version"]))
        target.frontend = parse_frontend(json.dumps(meta["version"]))
    return target
