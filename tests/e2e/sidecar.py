"""Our sidecar as a real process against a real server: `python -m exporter serve ...` on a free port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from tests.net import free_port

REPO = Path(__file__).resolve().parents[2]


class SidecarProcess:
    """vllm-headroom serve, started in its own process group and always stopped."""

    def __init__(self, target: str, args: Sequence[str] = (), interval: str = "1s") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [sys.executable, "-m", "exporter", "serve", "--target", target,
                     "--web.listen-address", f"127.0.0.1:{self.port}", "--scrape.interval", interval, *args]
        # Kept open for the child process to write to until the test ends.
        self._log = tempfile.NamedTemporaryFile(prefix="sidecar-", suffix=".log", delete=False)  # noqa: SIM115
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> SidecarProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_HEADROOM_")}
        self._proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO, env=env,
                                      start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"sidecar exited with {self._proc.returncode}: {self.log()[-3000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"sidecar did not come up: {self.log()[-3000:]}")

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait(5)

    def log(self) -> str:
        return Path(self._log.name).read_text(errors="replace")

    def diagnosis(self) -> dict[str, Any]:
        doc: dict[str, Any] = httpx.get(self.url + "/api/v1/diagnosis", timeout=5).json()
        return doc

    def engine(self) -> dict[str, Any] | None:
        """The first engine of the first target, or None while the target is down or unscraped."""
        return self.observed()[1]

    def observed(self) -> tuple[int | None, dict[str, Any] | None]:
        """(the number of the sidecar's scrape behind the answer, the first engine of the first target or None)."""
        target = self.diagnosis()["targets"][0]
        return target["scrape_number"], (target["engines"][0] if target["up"] and target["engines"] else None)

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics", timeout=5).text

    def wait_for(self, pred: Callable[[dict[str, Any]], bool], timeout: float, poll: float = 0.2
                 ) -> tuple[float, dict[str, Any]]:
        """Poll the diagnosis until `pred(engine)` holds; returns (monotonic time, engine) or raises."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            engine = self.engine()
            if engine is not None:
                last = engine
                if pred(engine):
                    return time.monotonic(), engine
            time.sleep(poll)
        raise AssertionError(f"condition not reached within {timeout} s; last diagnosis: {last}")
