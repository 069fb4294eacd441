"""Where the vLLM venvs take torch's CPU build from (issue 20 item 6, scripts/vllm-version-venv --cpu-torch-args).

The pins are `torch==X+cpu`, a build no PyPI release has, so on a stock machine (pip's own config: PyPI alone)
the venv must ask PyTorch's CPU index for torch, and only for torch. Checked with the real pip against local
file:// indexes holding a stand-in wheel, so nothing leaves the machine: pip's own sources first, the CPU index
(VLLM_HEADROOM_TORCH_CPU_INDEX) where they lack it, one sentence and exit 1 where neither has it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "vllm-version-venv"
VERSION = "0.0.1"  # a torch no real index has, so no machine's own sources can answer for it


def _wheel(folder: Path) -> Path:
    """A stand-in torch-0.0.1+cpu wheel: enough for pip to resolve it."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"torch-{VERSION}+cpu.dist-info"
    path = folder / f"torch-{VERSION}+cpu-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {VERSION}+cpu\n")
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", "")
    return path


def _index(root: Path, wheel: Path | None) -> str:
    """A PEP 503 simple index under root (empty without a wheel); its file:// URL."""
    (root / "torch").mkdir(parents=True, exist_ok=True)
    links = f'<a href="{wheel.as_uri()}">{wheel.name}</a>' if wheel else ""
    (root / "torch" / "index.html").write_text(f"<html><body>{links}</body></html>\n")
    return root.as_uri()


def _ask(tmp: Path, own_index: str, cpu_index: str, find_links: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=own_index, PIP_DISABLE_PIP_VERSION_CHECK="1",
               VLLM_HEADROOM_TORCH_CPU_INDEX=cpu_index, VLLM_HEADROOM_CACHE=str(tmp / "cache"))
    if find_links:
        env["PIP_FIND_LINKS"] = find_links
    return subprocess.run([sys.executable, str(SCRIPT), "--cpu-torch-args", VERSION, sys.executable],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def indexes(tmp_path: Path) -> tuple[str, str, Path]:
    wheel = _wheel(tmp_path / "files")
    return _index(tmp_path / "pypi", None), _index(tmp_path / "cpu", wheel), wheel.parent


def test_a_stock_pip_takes_torch_from_the_cpu_index(tmp_path: Path, indexes: tuple[str, str, Path]) -> None:
    own, cpu, _files = indexes
    out = _ask(tmp_path, own, cpu)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["--extra-index-url", cpu]


def test_pip_own_sources_win_and_the_cpu_index_is_not_named(tmp_path: Path, indexes: tuple[str, str, Path]) -> None:
    own, cpu, files = indexes
    out = _ask(tmp_path, own, cpu, find_links=str(files))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_no_cpu_build_anywhere_is_one_sentence_and_exit_1(tmp_path: Path, indexes: tuple[str, str, Path]) -> None:
    own, _cpu, _files = indexes
    out = _ask(tmp_path, own, "")
    assert out.returncode == 1 and out.stdout == ""
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"vllm-version-venv: torch {VERSION}+cpu is neither")
    assert "VLLM_HEADROOM_TORCH_CPU_INDEX" in last


def test_a_cpu_index_without_the_build_is_not_taken(tmp_path: Path, indexes: tuple[str, str, Path]) -> None:
    own, _cpu, _files = indexes
    out = _ask(tmp_path, own, _index(tmp_path / "other", None))
    assert out.returncode == 1 and out.stdout == ""
