"""The version matrix: record every scenario from each vLLM release that runs here, and say how it went.

    python -m tests.e2e.matrix [ENTRY ...]      (scripts/matrix, `make matrix VERSIONS="0.10.2"`)

An ENTRY is a release ("0.11.0"), a release on the V0 engine ("0.8.5-v0", i.e. VLLM_USE_V1=0), or the
pinned release behind vLLM's Rust frontend ("0.32.0-rust", VLLM_USE_RUST_FRONTEND=1: vllm-rs serves HTTP and
/metrics, the same engine runs behind it). For each entry, in order:

1. build or reuse the release's venv outside the clone (scripts/vllm-version-venv; the pinned 0.32.0
   from scripts/vllm-venv, and for "0.32.0-rust" its add-on from scripts/vllm-rust-frontend), while the
   next entry's venv is built in the background (never more than two venvs of older releases on disk: the
   current and the next);
2. record every scenario of scenarios.py not yet recorded (tests.e2e.record --resume) into
   tests/fixtures/vllm-X[-v0|-rust]/, under `flock /tmp/vllm-headroom-engine.lock` so only one engine runs
   on this machine at a time;
3. write tests/fixtures/vllm-X[-v0|-rust]/status.json (recorded, or why it could not be: one line) and the
   release's venv facts (torch, workarounds) to venv.json;
4. delete the release's venv unless KEEP=1 (or it is the pinned release or the one CI runs live,
   tests/e2e/old-release.txt).

At the end (and with --table only) it writes tests/fixtures/SUPPORT.md from what is on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .record import FIXTURES, fixture_dir
from .scenarios import SCENARIOS
from .vllm_server import PINNED_VERSION, REPO, rust_frontend_runtime

DEFAULT_ENTRIES = ["0.8.5-v0", "0.8.5", "0.9.2", "0.10.2", "0.11.0", "0.18.0", "0.19.1", "0.24.0", "0.28.0",
                   f"{PINNED_VERSION}-rust"]
LOCK = "/tmp/vllm-headroom-engine.lock"
CACHE = Path(os.environ.get("VLLM_HEADROOM_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
             / "vllm-headroom")
LOGS = CACHE / "matrix" / "logs"
SUPPORT = FIXTURES / "SUPPORT.md"
_ERROR_RE = re.compile(r"\b(\w+(?:Error|Exception)): (.+)$")


def log(msg: str) -> None:
    print(f"[matrix {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_entry(entry: str) -> tuple[str, bool, str]:
    """(version, V0 engine, frontend): ("0.8.5", True, "python") for "0.8.5-v0", ("0.32.0", False, "rust") for
    "0.32.0-rust"."""
    if entry.endswith("-v0"):
        return entry[:-3], True, "python"
    if entry.endswith("-rust"):
        return entry[:-5], False, "rust"
    return entry, False, "python"


def one_line_reason(text: str) -> str:
    """The last `SomethingError: message` line of a log tail (vLLM's own words), else its last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        m = _ERROR_RE.search(ln)
        if m and "Engine core initialization failed" not in ln:
            return f"{m.group(1)}: {m.group(2)}"[:300]
    return (lines[-1] if lines else "no output")[:300]


class Build:
    """scripts/vllm-version-venv X (scripts/vllm-rust-frontend for the Rust frontend), in the background; its
    output goes to a log file."""

    def __init__(self, version: str, frontend: str = "python") -> None:
        self.version = version
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"build-{version}{'-rust' if frontend == 'rust' else ''}.log"
        self.t0 = time.monotonic()
        if frontend == "rust":
            argv = [str(REPO / "scripts" / "vllm-rust-frontend")]
        elif version == PINNED_VERSION:
            argv = [str(REPO / "scripts" / "vllm-venv")]
        else:
            argv = [str(REPO / "scripts" / "vllm-version-venv"), version]
        self._out = open(self.log_path, "w")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._out, text=True)

    def wait(self) -> tuple[str | None, str]:
        """(python, "") or (None, one-line reason)."""
        out, _ = self.proc.communicate()
        self._out.close()
        took = time.monotonic() - self.t0
        if self.proc.returncode == 0:
            log(f"{self.version}: venv ready ({took:.0f} s)")
            return out.strip().splitlines()[-1], ""
        reason = one_line_reason(self.log_path.read_text(errors="replace"))
        log(f"{self.version}: venv build failed after {took:.0f} s: {reason}")
        return None, f"install failed: {reason}"


def venv_facts(python: str, frontend: str = "python") -> dict[str, Any]:
    if frontend == "rust":
        facts = dict(rust_frontend_runtime())
        facts["torch"] = "2.13.0+cpu"  # the pinned venv's (tests/e2e/requirements-vllm.txt)
        keys: tuple[str, ...] = ("vllm_version", "torch", "workarounds", "rust_frontend_version", "wheel",
                                 "binary_bytes", "binary_sha256", "needed_libs")
        return {k: facts[k] for k in keys if k in facts}
    path = Path(python).parents[1] / "vllm-version.json"
    if not path.exists():
        return {}
    facts = json.loads(path.read_text())
    return {k: v for k, v in facts.items() if k in ("vllm_version", "torch_pinned", "torch", "workarounds")}


CI_RELEASE = (Path(__file__).parent / "old-release.txt").read_text().strip()  # CI runs it live: keep its venv


MAX_VENVS = int(os.environ.get("MAX_VENVS", "2"))


def venvs_on_disk() -> int:
    """Venvs of older releases under the cache (scripts/vllm-version-venv names them vllm-X-<key>)."""
    return sum(1 for d in CACHE.glob("vllm-[0-9]*") if d.is_dir())


def remove_venv(version: str) -> None:
    if version not in (PINNED_VERSION, CI_RELEASE):
        subprocess.run([str(REPO / "scripts" / "vllm-version-venv"), "--remove", version], check=False)


def recorded(entry: str) -> bool:
    d = fixture_dir(*parse_entry(entry))
    return all((d / name / "meta.json").exists() for name in SCENARIOS)


def write_status(entry: str, status: str, reason: str = "", facts: dict[str, Any] | None = None) -> None:
    d = fixture_dir(*parse_entry(entry))
    d.mkdir(parents=True, exist_ok=True)
    (d / "status.json").write_text(json.dumps({"entry": entry, "status": status, "reason": reason}, indent=2) + "\n")
    if facts:
        (d / "venv.json").write_text(json.dumps(facts, indent=2) + "\n")


def record_entry(entry: str, python: str) -> tuple[str, str]:
    """Record the entry's missing scenarios under the machine-wide engine lock: (status, reason)."""
    version, v0, frontend = parse_entry(entry)
    d = fixture_dir(version, v0, frontend)
    argv = ["flock", LOCK, sys.executable, "-m", "tests.e2e.record", "--version", version, "--resume",
            "--frontend", frontend]
    if v0:
        argv.append("--v0")
    log_path = LOGS / f"record-{entry}.log"
    log(f"{entry}: recording (log {log_path})")
    with open(log_path, "w") as out:
        rc = subprocess.run(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    failure = d / "start-failure.log"
    if failure.exists():
        return "failed", "cannot start: " + one_line_reason(failure.read_text(errors="replace"))
    died = d / "server-failure.log"
    missing = [name for name in SCENARIOS if not (d / name / "meta.json").exists()]
    if died.exists():
        return "partial", "engine died under load: " + one_line_reason(died.read_text(errors="replace"))
    if missing:
        return "partial", f"not recorded: {', '.join(missing)} (recorder exited {rc}: " + one_line_reason(
            log_path.read_text(errors="replace")) + ")"
    if rc not in (0, 1):  # 1 = recorded, some scenario did not show its state (see meta.json problems)
        return "failed", f"recorder exited {rc}: " + one_line_reason(log_path.read_text(errors="replace"))
    return "recorded", ""


def run(entries: list[str], keep: bool) -> int:
    todo = [e for e in entries if not recorded(e)]
    for e in entries:
        if e not in todo:
            log(f"{e}: all scenarios recorded already")
    builds: dict[str, Build] = {}
    failed = 0
    for i, entry in enumerate(todo):
        version, _, frontend = parse_entry(entry)
        build = (builds.pop(version, None) if frontend == "python" else None) or Build(version, frontend)
        python, reason = build.wait()
        # Overlap: the next release installs (network and disk) while this one records (CPU), if the disk
        # budget allows another venv (MAX_VENVS older releases at once, 3-8 GB each).
        nxt = next((parse_entry(e)[0] for e in todo[i + 1:] if parse_entry(e)[0] != version), None)
        if nxt is not None and nxt not in builds and venvs_on_disk() < MAX_VENVS:
            builds[nxt] = Build(nxt)
        if python is None:
            write_status(entry, "failed", reason)
            failed += 1
            continue
        status, reason = record_entry(entry, python)
        write_status(entry, status, reason, venv_facts(python, frontend))
        log(f"{entry}: {status}{': ' + reason if reason else ''}")
        failed += status == "failed"
        same_version_later = any(parse_entry(e)[0] == version for e in todo[i + 1:])
        if not keep and not same_version_later:
            remove_venv(version)
    for b in builds.values():  # a build started for an entry that no longer needs it
        b.wait()
    write_support_table()
    return 1 if failed else 0


def write_support_table() -> None:
    from .support import support_markdown

    SUPPORT.write_text(support_markdown(FIXTURES))
    log(f"wrote {SUPPORT.relative_to(REPO)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("entries", nargs="*", help=f"default: {' '.join(DEFAULT_ENTRIES)}")
    ap.add_argument("--table", action="store_true", help="only rewrite tests/fixtures/SUPPORT.md")
    args = ap.parse_args(argv)
    if args.table:
        write_support_table()
        return 0
    entries = args.entries or DEFAULT_ENTRIES
    return run(entries, keep=os.environ.get("KEEP", "") not in ("", "0"))


if __name__ == "__main__":
    sys.exit(main())
