"""One target's nonsense never stops the tick or another target (issue: --num-gpu-blocks 1 froze every /metrics)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import respx

from exporter import cli
from exporter.expose import diagnosis
from exporter.expose.server import Sidecar
from exporter.pipeline.config import Overrides
from exporter.pipeline.target import Settings, Target
from tests import fixtures

GOOD, BAD, BUGGY = "http://good.test:8000", "http://bad.test:8000", "http://buggy.test:8000"


def _serve(router: respx.MockRouter, url: str, body: str) -> None:
    router.get(url + "/metrics").mock(return_value=httpx.Response(200, text=body))
    router.get(url + "/v1/models").mock(return_value=httpx.Response(200, json=fixtures.meta("idle")["v1_models"]))
    router.get(url + "/version").mock(return_value=httpx.Response(200, json={"version": "0.32.0"}))


def test_a_config_that_leaves_no_block_marks_only_its_target(monkeypatch: pytest.MonkeyPatch) -> None:
    targets = [
        Target(Settings(GOOD, discover_cmdline=False)),
        # Stated as one block: as if a flag or vLLM's own labels said so (the CLI refuses it as a flag).
        Target(Settings(BAD, overrides=Overrides(num_gpu_blocks=1), discover_cmdline=False)),
    ]
    sidecar = Sidecar(targets, 1.0)

    # A target whose judging raises an unexpected error: it must stay that target's problem.
    buggy = Target(Settings(BUGGY, discover_cmdline=False))

    def boom(*_a: object, **_k: object) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(buggy, "judge_exposition", boom)
    sidecar.targets.append(buggy)

    async def tick() -> None:
        async with httpx.AsyncClient() as client:
            await sidecar.tick(client, now=1.0)

    with respx.mock() as router:
        for url in (GOOD, BAD, BUGGY):
            _serve(router, url, fixtures.snapshot("false-full"))
        asyncio.run(tick())

    good, bad, bug = (t.last for t in sidecar.targets)
    assert good.up and good.engines and good.engines[0].headroom.kv_capacity_blocks == 39
    assert bad.up and not bad.engines
    assert bad.gaps[0].config_error is not None and "num_gpu_blocks=1" in bad.gaps[0].config_error
    assert not bug.up and bug.error_reason == "internal_error"
    text = sidecar.exposition().decode()
    assert f'vllm_headroom_capacity_undetermined{{engine="0",model_name="tiny-llama",reason="config_error",' \
           f'target="{BAD}"}} 1.0' in text
    assert f'vllm_headroom_kv_capacity_blocks{{engine="0",model_name="tiny-llama",target="{GOOD}"}} 39.0' in text
    assert f'vllm_headroom_scrape_errors_total{{reason="internal_error",target="{BUGGY}"}} 1.0' in text
    doc = diagnosis.document([t.last for t in sidecar.targets])
    assert doc["targets"][1]["undetermined_engines"][0]["config_error"].startswith("num_gpu_blocks=1")


@pytest.mark.parametrize(("argv", "sentence"), [
    (["serve", "--num-gpu-blocks", "1"], "at least 2 are needed"),
    (["serve", "--scrape.interval", "0"], "must be longer than 0s"),
    (["serve", "--scrape.interval", "2s", "--scrape.timeout", "3s"], "must be shorter than --scrape.interval"),
    (["serve", "--profile.window=-5m"], "is not a duration"),
    (["diagnose", "x.prom", "--num-gpu-blocks", "0"], "leaves no usable block"),
])
def test_bad_values_are_refused_at_start_up(argv: list[str], sentence: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert sentence in err
    assert err.count("\n") == 1  # one sentence


def test_diagnose_reports_a_config_error_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(fixtures.ROOT / "false-full" / "snapshot.prom")
    assert cli.main(["diagnose", path, "--json", "--vllm-args", "vllm serve m --num-gpu-blocks-override 1",
                     "--block-size", "32"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # vLLM's own override is not ours to trust over its exported count: the real count (40) is used.
    assert doc["targets"][0]["engines"][0]["kv_capacity_blocks"] == 39
    # A file was not scraped by us: no scrape time to give, rather than the time we read it.
    assert (doc["targets"][0]["scraped_at"], doc["targets"][0]["scrape_number"]) == (None, None)
