"""The status page at `/` and `/api/v1/history`: the recorded false-full incident replayed through the sidecar."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from exporter.expose import diagnosis, history, page
from exporter.expose.server import Sidecar, make_app
from exporter.pipeline.config import split_args
from exporter.pipeline.target import Settings, Target, TargetReport
from exporter.pipeline.verdict import Thresholds
from exporter.replay import recording

FALSE_FULL = Path("tests/fixtures/vllm-0.32.0/false-full")


def replayed(until: float | None = None, hold: float = 5.0) -> Sidecar:
    """A sidecar that scraped the recorded false-full incident frame by frame (up to `until` s in)."""
    rec = recording.load(FALSE_FULL)
    player = recording.Player(rec)
    target = Target(Settings(url="http://replay", vllm_args=split_args(" ".join(rec.meta["server_argv"])),
                             discover_cmdline=False, thresholds=Thresholds(false_full_hold=hold)))
    sidecar = Sidecar([target], float(rec.meta["interval"]), labels={"http://replay": "false-full recording"})
    start = rec.frames[0][0]

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=recording.make_app(player))) as client:
            for i, (t, _) in enumerate(rec.frames):
                if until is not None and t - start > until:
                    break
                player.index = i
                await sidecar.tick(client, now=t - start)

    asyncio.run(run())
    return sidecar


def test_page_shows_the_verdict_the_explanation_and_both_charts() -> None:
    sidecar = replayed(until=15.0)
    engine = sidecar.targets[0].last.engines[0]
    assert (str(engine.verdict), engine.false_full) == ("slots_full", True)
    html = TestClient(make_app(sidecar, start_loop=False)).get("/")
    assert html.headers["content-type"].startswith("text/html")
    body = html.text
    assert 'data-verdict="slots_full"' in body and "background:#b35900" in body  # amber: a limit, not memory
    assert '<span class="badge ff">false_full</span>' in body
    assert "wait for a slot, not for memory" in body
    # The actions: slots bind while the pool holds 13 such requests, so a raise (issue 19, kind 7), saying what keeps
    # it safe while the profile covers less than its window (issue 11).
    assert "raise max_num_seqs from 8 (vllm_args) to 9-10" in body and "safe while requests stay within" in body
    assert "<td>max_num_seqs</td><td>8</td><td class=\"src\">vllm_args</td>" in body  # config with its source
    assert "<h2>false-full recording</h2>" in body  # the target's label, not its URL
    assert body.count("<svg") == 2
    lines = dict(re.findall(r'data-series="([^"]+)" points="([^"]+)"', body))
    for name in ("KV usage % (panel, right axis)", "waiting requests", "admission headroom (requests)",
                 "worst-case blocks per request", "free blocks"):
        assert len(lines[name].split()) >= 20, name  # one point per scrape of the first 15 s
    assert "<title>false_full</title>" in body  # the shaded false-full period
    assert '<meta http-equiv="refresh" content="1">' in body  # every scrape interval (0.5 s, at least 1 s)


def test_page_before_the_first_scrape_and_for_a_target_that_is_down() -> None:
    sidecar = Sidecar([Target(Settings(url="http://127.0.0.1:9"))], 5.0)
    body = page.render([t.last for t in sidecar.targets], sidecar.history, 5.0)
    assert 'data-verdict="target_down"' in body and "not scraped yet" in body
    assert '<meta http-equiv="refresh" content="5">' in body
    hist = replayed(until=3.0)
    url = hist.targets[0].settings.url
    hist.history.record(4.0, [TargetReport(url, up=False, error="connection refused")])
    body = page.render([TargetReport(url, up=False, error="connection refused <b>")], hist.history, 0.5)
    assert "connection refused &lt;b&gt;" in body  # escaped
    assert body.count("<svg") == 2  # the history of the engine is still drawn, with a gap at the failure


def test_history_has_the_diagnosis_names_and_a_gap_when_down() -> None:
    sidecar = replayed(until=15.0)
    doc = TestClient(make_app(sidecar, start_loop=False)).get("/api/v1/history").json()
    engine = doc["targets"][0]["engines"][0]
    names = set(diagnosis.engine_json(sidecar.targets[0].last.engines[0]))
    assert set(history.SERIES) <= names
    assert doc["series"] == ["t", *history.SERIES]
    n = len(engine["t"])
    assert n >= 30 and all(len(engine[s]) == n for s in history.SERIES)
    assert engine["t"] == sorted(engine["t"]) and engine["t"][-1] - engine["t"][0] == pytest.approx(15.0, abs=0.6)
    assert engine["verdict"][-1] == "slots_full" and engine["false_full"][-1] is True
    assert max(engine["requests_waiting"]) > 50 and max(engine["panel_usage_ratio"]) < 0.8
    sidecar.history.record(16.0, [TargetReport("http://replay", up=False)])
    engine = sidecar.history_document()["targets"][0]["engines"][0]
    assert engine["panel_usage_ratio"][-1] is None and engine["verdict"][-1] == "target_down"


def test_history_is_bounded_by_window_and_points() -> None:
    sidecar = replayed(until=1.0)
    report = sidecar.targets[0].last
    h = history.History(window=60.0, max_points=100)
    for i in range(1000):
        h.record(i * 0.1, [report])
    (only,) = h.engines.values()
    assert len(only.points) == 100  # 0.1 s interval: the point cap binds before the window
    h = history.History(window=60.0, max_points=10_000)
    for i in range(1000):
        h.record(float(i), [report])
    (only,) = h.engines.values()
    assert only.points[0].t == 939.0 and len(only.points) == 61  # the window binds
    # An engine not seen for a whole window is forgotten.
    h.record(2000.0, [TargetReport("http://other", up=True)])
    assert not h.engines
    with pytest.raises(ValueError, match="at least 2 points"):
        history.History(max_points=1)
