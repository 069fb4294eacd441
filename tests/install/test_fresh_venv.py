"""The README's first command on a machine with only the system python3: a fresh clone, a fresh venv, `pip install .`,
`vllm-headroom demo --once`. Needs PyPI (the package's four runtime dependencies) and the venv module (Debian and
Ubuntu ship it as python3-venv)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def system_python() -> str:
    for candidate in ("/usr/bin/python3", shutil.which("python3")):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("no system python3")


def test_readme_commands_in_a_fresh_venv_from_the_system_python(tmp_path: Path) -> None:
    py = system_python()
    version = subprocess.run([py, "-c", "import sys; print(sys.version_info >= (3, 11))"], capture_output=True,
                             text=True, check=True).stdout.strip()
    assert version == "True", f"{py} is older than 3.11, which the README requires"
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
    venv = tmp_path / "venv"
    made = subprocess.run([py, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, f"python3 -m venv failed (install python3-venv): {made.stderr}"
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", "."],
                         cwd=clone, capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-3000:]
    demo = subprocess.run([str(venv / "bin" / "vllm-headroom"), "demo", "--once"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "verdict: slots_full    false_full: yes" in demo.stdout
    assert "wait for a slot, not for memory" in demo.stdout
    assert max(len(line) for line in demo.stdout.splitlines()) <= 80
