"""One-shot commands import only what they use (issue 25): `estimate` never loads the judgement, and no one-shot
command loads the web stack or the HTTP client when it reads a file. Each command runs in a fresh interpreter, the
modules it loaded are read after it returns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
SNAPSHOT = FIXTURES / "vllm-0.32.0" / "false-full" / "snapshot.prom"
ESTIMATE = ["estimate", str(FIXTURES / "estimate-configs" / "llama31-70b.json"), "--tensor-parallel-size", "8",
            "--gpu-memory", "80GiB", "--params", "70e9"]

# The web stack and the HTTP client: only `serve`, `demo`, `replay`, `probe` and a URL need them.
SERVING = ("fastapi", "starlette", "pydantic", "uvicorn", "prometheus_client", "httpx", "httpcore", "anyio")
# The judgement and its presenters: `estimate` plans from a config file and judges nothing.
JUDGEMENT = ("exporter.pipeline.target", "exporter.pipeline.judge", "exporter.pipeline.verdict",
             "exporter.pipeline.advice", "exporter.pipeline.report", "exporter.expose.diagnosis")

PROGRAM = """
import contextlib, io, json, sys
import exporter.cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = exporter.cli.main(sys.argv[1:])
print(json.dumps({"code": code, "out": len(out.getvalue()), "modules": sorted(sys.modules)}))
"""


def loaded(argv: list[str]) -> tuple[int, set[str]]:
    """The exit code of `vllm-headroom ARGV` and every module loaded once it returned."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", PROGRAM, *argv], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=120, check=True)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["out"] > 0, "the command printed nothing"
    return int(answer["code"]), set(answer["modules"])


def top_level(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n in modules or any(m.startswith(n + ".") for m in modules))


def test_estimate_loads_neither_the_judgement_nor_the_web_stack() -> None:
    code, modules = loaded(ESTIMATE)
    assert code == 0
    assert "exporter.planning.estimate" in modules  # it did plan
    assert top_level(modules, JUDGEMENT) == []
    assert top_level(modules, SERVING) == []


@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["text", "json"])
def test_diagnose_file_loads_no_web_stack(extra: list[str]) -> None:
    code, modules = loaded(["diagnose", str(SNAPSHOT), *extra])
    assert code == 0
    assert "exporter.pipeline.judge" in modules  # it did judge
    assert top_level(modules, SERVING) == []


def test_help_loads_no_pipeline() -> None:
    # argparse's --help exits through SystemExit; the modules are read in the same way with the exit caught.
    program = PROGRAM.replace("code = exporter.cli.main(sys.argv[1:])",
                              "try:\n        code = exporter.cli.main(sys.argv[1:])\n"
                              "    except SystemExit as exc:\n        code = exc.code")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", program, "--help"], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=120, check=True)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["code"] == 0 and answer["out"] > 0
    modules = set(answer["modules"])
    assert top_level(modules, JUDGEMENT) == []
    assert top_level(modules, SERVING) == []
