"""Test markers: `e2e` starts a real vLLM; `integration` starts a real Prometheus, Alertmanager, browser or a
fresh venv; `serial` is every test that must have the machine to itself: the two above, and the deploy, install
and browser folders (dockerd, kind of cluster tools, real processes). `make test` runs the rest one worker per
core first, then the `serial` tests one at a time; `make test-fast` leaves `e2e` and `integration` out."""

from __future__ import annotations

from pathlib import Path

import pytest

# Folders whose tests run in parallel (pytest-xdist) under `make test`, except for the integration modules below.
PARALLEL = {"unit", "monitoring"}
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
    config.addinivalue_line("markers", "serial: needs the machine to itself (make test runs these one at a time)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        try:
            rel = Path(str(item.fspath)).relative_to(HERE)
        except ValueError:
            continue
        if rel in INTEGRATION:
            item.add_marker(pytest.mark.integration)
        if rel in INTEGRATION or rel.parts[0] not in PARALLEL or item.get_closest_marker("e2e") is not None:
            item.add_marker(pytest.mark.serial)
