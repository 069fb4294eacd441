"""The status page in a real browser: headless Chromium (Debian's package) against the replayed false-full incident.

`vllm-headroom replay` serves the recorded real vLLM 0.32.0 incident, `vllm-headroom serve` scrapes it; once the
sidecar flags false-full, Chromium loads `/`: the DOM must hold the verdict and drawn curves, and the screenshot
must show the curves' colours. `UPDATE_SCREENSHOT=1` also writes the README's copy (docs/status-page.png).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from exporter.expose import page
from tests.net import free_port

from .png import pixels

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests/fixtures/vllm-0.32.0/false-full"
README_COPY = ROOT / "docs/status-page.png"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--window-size=1400,900"]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("no chromium: install Debian's `chromium` package (scripts/bootstrap does)")
    return found


def browse(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """One headless Chromium run with a new empty profile."""
    with tempfile.TemporaryDirectory(prefix="vh-chromium-") as profile:
        return subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url],
                              capture_output=True, text=True, timeout=120)


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


@pytest.fixture(scope="module")
def sidecar_url() -> Iterator[str]:
    """The sidecar scraping the replayed incident at half speed, returned once it flags false-full."""
    vllm_port, our_port = free_port(), free_port()
    py = [sys.executable, "-m", "exporter"]
    procs = [
        subprocess.Popen([*py, "replay", str(RECORDING), "--speed", "0.5", "--no-loop",
                          "--web.listen-address", f"127.0.0.1:{vllm_port}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([*py, "serve", "--target", f"http://127.0.0.1:{vllm_port}", "--web.listen-address",
                          f"127.0.0.1:{our_port}", "--scrape.interval", "1s", "--scrape.timeout", "0.8s",
                          "--verdict.false-full-hold", "4s", "--no-vllm-cmdline-discovery",
                          "--vllm-args", "vllm serve tiny-llama --max-num-seqs 8 --max-model-len 512"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    url = f"http://127.0.0.1:{our_port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "the sidecar never flagged false-full on the replayed incident"
            assert all(p.poll() is None for p in procs), "replay or serve exited"
            try:
                engines = httpx.get(url + "api/v1/diagnosis", timeout=2).json()["targets"][0]["engines"]
                if engines and engines[0]["false_full"]:
                    break
            except (httpx.HTTPError, ValueError, KeyError, IndexError):
                pass
            time.sleep(0.3)
        yield url
    finally:
        for p in procs:
            p.terminate()
            p.wait(15)


def test_chromium_draws_the_verdict_and_the_curves(sidecar_url: str, tmp_path: Path) -> None:
    shot = tmp_path / "status-page.png"
    flag = '<span class="badge ff">false_full</span>'
    # The flag can drop for one scrape inside the incident (its hold restarts): load the page until the DOM and
    # the screenshot both show it, within a deadline.
    deadline = time.monotonic() + 60
    while True:
        run = browse(sidecar_url, f"--screenshot={shot}")
        assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
        dom = browse(sidecar_url, "--dump-dom")
        assert dom.returncode == 0, dom.stderr[-2000:]
        width, height, counts = pixels(shot)
        if flag in dom.stdout and counts[_rgb(page.FALSE_FULL_FILL)] >= 300:  # the badge, painted
            break
        assert time.monotonic() < deadline, "the page never showed the false_full flag"
    html = dom.stdout
    assert 'data-verdict="slots_full"' in html and ">slots_full</span>" in html
    assert "wait for a slot, not for memory" in html
    assert html.count('class="series"') >= 5  # every curve has at least two points
    assert (width, height) == (1400, 900)
    # The browser painted each curve: its exact stroke colour covers a line's worth of pixels.
    for name, colour in (("KV usage", page.USAGE), ("waiting", page.WAITING), ("admission", page.ADMISSION),
                         ("worst-case", page.WORST), ("free blocks", page.FREE)):
        assert counts[_rgb(colour)] >= 150, f"{name} curve not painted ({counts[_rgb(colour)]} pixels)"
    assert counts[_rgb(page.VERDICT_COLOURS["slots_full"])] >= 500  # the verdict badge
    if os.environ.get("UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, README_COPY)
