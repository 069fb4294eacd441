"""`diagnose URL` and `recommend URL` over real HTTP, against a replay of a recorded real vLLM."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from exporter import cli
from tests import fixtures
from tests.net import free_port


@pytest.fixture(scope="module")
def replayed_false_full() -> Iterator[str]:
    url = f"http://127.0.0.1:{free_port()}"
    # Held at 6 s into the recording (the incident runs from 2.5 s to 23 s): a thousandth of real speed keeps
    # the frame still for the whole module, however slow the machine, with no sleep on the wall clock.
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "replay", str(fixtures.ROOT / "false-full"),
                             "--start-at", "6s", "--speed", "0.001", "--no-loop",
                             "--web.listen-address", url.removeprefix("http://")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/v1/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            pytest.fail("the replay server did not start within 20 s")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def test_diagnose_a_url(replayed_false_full: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagnose", replayed_false_full, "--json", "--vllm-args", "--max-num-seqs 8"]) == 0
    target = json.loads(capsys.readouterr().out)["targets"][0]
    engine = target["engines"][0]
    assert target["vllm_version"] == "0.32.0"  # read from /version
    assert target["scrape_number"] == 1 and abs(target["scraped_at"] - time.time()) < 600
    assert target["scrape_duration_seconds"] > 0
    assert engine["config"]["max_model_len"] == {"value": 512, "source": "v1_models"}
    assert (engine["verdict"], engine["false_full"]) == ("slots_full", True)


def test_recommend_from_a_url(replayed_false_full: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["recommend", replayed_false_full, "--json", "--min-requests", "50"]) == 0
    [advice] = json.loads(capsys.readouterr().out)
    assert advice["current"]["max_model_len"] == 512  # from /v1/models
    assert advice["requests_observed"] >= 50


def test_diagnose_an_unreachable_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagnose", f"http://127.0.0.1:{free_port()}"]) == 1
    assert "DOWN (connect)" in capsys.readouterr().out
