"""Test markers: `e2e` starts a real vLLM; `integration` starts a real Prometheus, Alertmanager, browser or a
fresh venv. `make test` runs everything; `make test-fast` leaves both out (lint, types, unit, promtool)."""

from __future__ import annotations

from pathlib import Path

import pytest

# Modules whose tests start real servers or installs other than vLLM.
INTEGRATION = {
    Path("monitoring/test_alertmanager.py"),
    Path("monitoring/test_double_scrape.py"),
    Path("monitoring/test_real_prometheus.py"),
    Path("browser/test_chromium.py"),
    Path("install/test_fresh_venv.py"),
}
HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: starts a real Prometheus, Alertmanager, browser or venv")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        try:
            rel = Path(str(item.fspath)).relative_to(HERE)
        except ValueError:
            continue
        if rel in INTEGRATION:
            item.add_marker(pytest.mark.integration)
