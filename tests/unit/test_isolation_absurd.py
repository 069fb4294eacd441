"""Issue 21, kinds 2 and 5: an absurd value marks only its engine; every surface answers 200 for the others.

Each case is one change to the recorded real vLLM 0.32.0 exposition (tests/hostile.py ABSURD), served beside a
healthy target through the sidecar's real scrape path (respx injects the bodies). The engine with the absurd
value is named (capacity_undetermined{reason="bad_value"} or reason="config_error", one sentence) or, for a value
no figure uses, ignored with a note; no number outside its range reaches a verdict, a page or a JSON answer.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import httpx
import pytest
import respx
from fastapi.testclient import TestClient

from exporter import cli
from exporter.expose.server import Sidecar, make_app
from exporter.pipeline.target import Settings, Target
from tests import fixtures, hostile

GOOD, BAD = "http://good.test:8000", "http://bad.test:8000"
# What each absurd value makes of its engine: a gap with this reason, or a note (the value is not used).
EXPECTED = {
    "num_gpu_blocks=1e308": "config_error", "num_gpu_blocks=inf": "config_error",
    "num_gpu_blocks=-8": "config_error", "block_size=0.5": "config_error", "block_size=1e30": "config_error",
    "num_gpu_blocks=full-width": "config_error", "num_gpu_blocks=padded": "config_error", "running=0.5": "bad_value",
    "gpu_memory_utilization=inf": "note", "kv_cache_size_tokens=1e300": "note",
    "kv_cache_max_concurrency=nan": "note",
    "running=1e308": "bad_value", "running=-5": "bad_value", "waiting=NaN": "bad_value", "usage=1.5": "bad_value",
    "usage=+Inf": "bad_value", "preemptions=NaN": "bad_value", "prompt_tokens=+Inf": "bad_value",
    "prompt_count=+Inf": "bad_value", "prompt_sum=NaN": "bad_value", "le=abc": "bad_value", "bucket=-1": "bad_value",
    "duplicate running": "bad_value", "duplicate usage": "bad_value",
}


def test_every_absurd_kind_has_an_expectation() -> None:
    assert set(EXPECTED) == set(hostile.ABSURD)


def _strict(text: str) -> Any:
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


@pytest.mark.parametrize("kind", sorted(hostile.ABSURD))
def test_an_absurd_value_beside_a_healthy_target(kind: str) -> None:
    targets = [Target(Settings(url, discover_cmdline=False)) for url in (GOOD, BAD)]
    sidecar = Sidecar(targets, 5.0)
    models = fixtures.meta("false-full")["v1_models"]

    async def ticks() -> None:
        async with httpx.AsyncClient() as client:
            for i in range(3):
                await sidecar.tick(client, now=float(i))

    with respx.mock() as router:
        for url, body in ((GOOD, hostile.snapshot()), (BAD, hostile.absurd(kind))):
            router.get(url + "/metrics").mock(return_value=httpx.Response(200, text=body))
            router.get(url + "/v1/models").mock(return_value=httpx.Response(200, json=models))
            router.get(url + "/version").mock(return_value=httpx.Response(200, json={"version": "0.32.0"}))
        asyncio.run(ticks())

    good, bad = (t.last for t in targets)
    assert good.up and good.engines and not good.gaps
    assert bad.up, bad.error  # the scrape worked: the target is not down, one engine is undetermined
    expected = EXPECTED[kind]
    if expected == "note":
        assert bad.engines and any("it is not used" in n for n in bad.notes), bad.notes
    else:
        assert not bad.engines and [g.reason for g in bad.gaps] == [expected]
        assert bad.gaps[0].explanation.count(". ") == 0  # one sentence
    for e in bad.engines:  # nothing absurd reaches a verdict: every figure of the engine is finite
        assert _finite(list(e.headroom.__dict__.values()))
        assert _finite([v["value"] for v in e.config.as_json().values()])

    client = TestClient(make_app(sidecar, start_loop=False), raise_server_exceptions=False)
    answers = {p: client.get(p) for p in ("/metrics", "/api/v1/diagnosis", "/", "/api/v1/history")}
    assert {p: a.status_code for p, a in answers.items()} == dict.fromkeys(answers, 200)
    doc = _strict(answers["/api/v1/diagnosis"].text)
    assert doc["targets"][0]["engines"][0]["verdict"] == str(good.engines[0].verdict)
    assert _strict(answers["/api/v1/history"].text)["targets"][0]["engines"]
    metrics = answers["/metrics"].text
    assert f'vllm_headroom_up{{target="{BAD}"}} 1.0' in metrics
    if expected != "note":
        assert (f'vllm_headroom_capacity_undetermined{{engine="0",model_name="tiny-llama",reason="{expected}",'
                f'target="{BAD}"}} 1.0') in metrics
        assert f'vllm_headroom_verdict{{engine="0",model_name="tiny-llama",target="{BAD}"' not in metrics
        assert doc["targets"][1]["undetermined_engines"][0][expected] is not None
    values = [ln.rsplit(" ", 1)[1] for ln in metrics.splitlines() if ln and not ln.startswith("#")]
    assert not [v for v in values if not math.isfinite(float(v))]  # no sample of ours is NaN or infinite


@pytest.mark.parametrize("kind", sorted(k for k, v in EXPECTED.items() if v != "note"))
def test_diagnose_on_bad_data_exits_1_with_the_reason_and_valid_json(kind: str, tmp_path: Any,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.prom"
    path.write_text(hostile.absurd(kind))
    assert cli.main(["diagnose", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "cannot " in out and "Traceback" not in out + err and err == ""
    assert cli.main(["diagnose", "--json", str(path)]) == 1
    doc = _strict(capsys.readouterr().out)
    gap = doc["targets"][0]["undetermined_engines"][0]
    assert gap[EXPECTED[kind]] and gap["explanation"]


def test_a_duplicate_series_is_named_not_summed() -> None:
    """Summed, the duplicated running count flipped the verdict from slots_full to kv_full (issue 21)."""
    t = Target(Settings("http://x", discover_cmdline=False, vllm_args=fixtures.vllm_argv("false-full")))
    report = t.observe(1.0, hostile.absurd("duplicate running"))
    assert not report.engines
    assert "appears more than once" in (report.gaps[0].bad_value or "")


def test_diagnose_json_of_a_non_finite_figure_is_null(capsys: pytest.CaptureFixture[str]) -> None:
    """A figure that is not finite (a rate not known yet, a ratio of an empty pool) is null, never Infinity."""
    from exporter.expose import diagnosis

    doc = diagnosis.document([])
    doc["targets"] = [diagnosis.json_safe({"a": math.inf, "b": [math.nan, 1.0], "c": {"d": -math.inf}})]
    assert json.dumps(doc, allow_nan=False)
    assert doc["targets"][0] == {"a": None, "b": [None, 1.0], "c": {"d": None}}


def test_files_and_standard_input_are_capped(tmp_path: Any, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    path = tmp_path / "big.prom"
    path.write_text(hostile.huge(200_000))
    assert cli.main(["diagnose", str(path), "--scrape.max-bytes", "100KiB"]) == 1
    assert "DOWN (too_large)" in capsys.readouterr().out

    class Endless(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, b: Any) -> int:
            b[:] = b"#" * len(b)
            return len(b)

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(Endless())))
    assert cli.main(["diagnose", "-", "--scrape.max-bytes", "64KiB"]) == 1  # an endless stdin ends
    assert "<stdin> holds more than the cap of 65536 bytes" in capsys.readouterr().out


def test_blocks_shared_by_more_engines_than_they_hold_say_they_were_divided(tmp_path: Any,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # The recorded exposition rewritten as 64 data-parallel engines with 40 blocks in all (each series of engine 0
    # repeated for engines 1-63): 0 per engine. It said "num_gpu_blocks=0 (from cache_config_info)", a 0 no series
    # holds; it says the division now.
    import re as re_
    text = hostile.snapshot("false-full")
    text = re_.sub(r'num_gpu_blocks="[^"]*"', 'num_gpu_blocks="40"', text)
    lines = text.splitlines()
    extra = [ln.replace('engine="0"', f'engine="{k}"') for k in range(1, 64) for ln in lines if 'engine="0"' in ln]
    path = tmp_path / "dp64.prom"
    path.write_text("\n".join(lines + extra) + "\n")
    assert cli.main(["diagnose", str(path)]) == 1
    out = capsys.readouterr().out
    assert "the exported 40 shared by 64 data-parallel engines" in out
