"""Helpers shared by the monitoring tests: every PromQL expression the bundle ships, and metric names in them."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from typing import Any

import promql_parser
import pytest

from grafana.config import DEFAULT
from grafana.dashboards import dashboards
from grafana.rules import rule_groups

# Grafana's variables as the tests substitute them: "All" for every template variable.
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m"}


def substitute(expr: str, pod: str | None = None, rate_interval: str = "1m") -> str:
    """Grafana's variables: All for every template variable, or one `pod` picked."""
    for k, v in {**GRAFANA_VARS, "$__rate_interval": rate_interval}.items():
        expr = expr.replace(k, v)
    if pod is not None:
        expr = expr.replace("$pod", pod)  # Grafana puts the picked value in the regex as is
    return re.sub(r"\$\{?([a-z_]+)\}?", ".*", expr)


def dashboard_queries() -> Iterator[tuple[str, str, str]]:
    """(dashboard uid, panel title, raw expr) of every panel target."""
    for uid, d in dashboards().items():
        for p in d["panels"]:
            for t in p.get("targets", []):
                yield uid, p["title"], t["expr"]


def rules(cfg: Any = DEFAULT) -> list[dict[str, Any]]:
    return [r for g in rule_groups(cfg)["groups"] for r in g["rules"]]


def metric_names(expr: str) -> set[str]:
    """Names of every vector selector in a PromQL expression."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for x in node:
                walk(x)
            return
        if not type(node).__module__.startswith("promql_parser"):
            return
        name = getattr(node, "name", None)
        if type(node).__name__ == "VectorSelector" and name:
            names.add(name)
        for attr in ("lhs", "rhs", "expr", "args", "param", "vector_selector"):
            if hasattr(node, attr):
                walk(getattr(node, attr))

    walk(promql_parser.parse(expr))
    return names


def promtool_env() -> dict[str, str]:
    """The environment for `promtool test rules`: one Go thread and a lazier garbage collector.

    Rule evaluation, not parsing, is what a promtool case costs (about 1 CPU-second for 30 one-minute steps of our
    58 rules, whatever the input). Measured on Debian's promtool 2.42 over 20 cases: 26.4 CPU-seconds by default,
    15.6 with GOMAXPROCS=1 GOGC=400 (memory 62 -> 168 MB); the tests run one process per core instead.
    """
    return {**os.environ, "GOMAXPROCS": "1", "GOGC": "400"}


def require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"`{tool}` is not installed: apt-get install --no-install-recommends prometheus "
                    "(scripts/bootstrap does it on CI)", pytrace=False)
    return path
