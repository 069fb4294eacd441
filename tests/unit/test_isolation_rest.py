"""Issue 21, kinds 4, 6 and 7: big inputs stay bounded, secrets stay with their target, a flapping target's log
is damped.

Real loopback targets (tests/hostile.py) serve the recorded real vLLM 0.32.0 exposition; nothing is timed.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest

from exporter import cli
from exporter.expose.history import History
from exporter.expose.logdamp import Damper
from exporter.pipeline.scrape import client
from exporter.pipeline.target import Settings, Target
from tests import fixtures, hostile


def test_history_is_bounded_in_total_whatever_the_number_of_engines() -> None:
    """2,000 engines (the data-parallel case of the issue: 110 MB of history before) keep at most the total
    bound together, each its newest share."""
    target = Target(Settings("http://vllm-0.test:8000", discover_cmdline=False))
    base = target.observe(1.0, fixtures.snapshot("false-full"))
    reports = [replace(base, url=f"http://vllm-{i}.test:8000") for i in range(2000)]
    history = History(max_total_points=20_000)
    for k in range(40):
        history.record(float(k), reports)
    total = sum(len(h) for h in history.engines.values())
    assert len(history.engines) == 2000
    assert total <= 20_000
    assert history.points_per_engine == 10
    assert all(len(h) == 10 for h in history.engines.values())  # each keeps its newest share, not nothing
    assert history.engines[("http://vllm-7.test:8000", *next(iter(history.engines))[1:])].last_t == 39.0


def test_target_scrapes_ignore_a_proxy_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY set and no NO_PROXY: the scrape (and the bearer key with it) goes straight to the target, not
    through the proxy, unless --scrape.trust-env asks for it; and even then never for loopback (the pod itself)."""
    async def run() -> tuple[bool, bool, int, int]:
        proxy = await hostile.Target("ok").start()  # a "proxy" that would answer, and counts what it saw
        target = await hostile.Target("ok").start()
        for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(var, proxy.url)
        for var in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(var, raising=False)
        t = Target(Settings(target.url, discover_cmdline=False, api_key="secret"))
        async with client() as c:
            plain = await t.scrape(c)
        seen_direct = sum(target.hits.values())
        for url in (target.url, target.url.replace("127.0.0.1", "localhost")):
            trusting = Target(Settings(url, discover_cmdline=False, api_key="secret", trust_env=True))
            async with client(trust_env=True) as c:
                await trusting.scrape(c)
        via_proxy_loopback = sum(proxy.hits.values())
        # A name that is not loopback does go through the trusted proxy (the setup can fail: the proxy answers).
        remote = Target(Settings(f"http://vllm.invalid:{target.port}", discover_cmdline=False, trust_env=True))
        async with client(trust_env=True) as c:
            await remote.scrape(c)
        return plain.up, seen_direct > 0, via_proxy_loopback, sum(proxy.hits.values())

    up, direct, via_proxy_loopback, via_proxy = asyncio.run(run())
    assert up and direct
    assert via_proxy_loopback == 0
    assert via_proxy > 0


def test_trust_env_refuses_a_proxy_httpx_cannot_use_at_start_up(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util
    if importlib.util.find_spec("socksio") is not None:
        pytest.skip("socksio is installed: a SOCKS proxy is usable")
    monkeypatch.setenv("ALL_PROXY", "socks5://user:pw@127.0.0.1:1")
    code = cli.main(["diagnose", "http://127.0.0.1:9", "--scrape.trust-env"])
    err = capsys.readouterr().err
    assert code == 2 and "ALL_PROXY names a SOCKS proxy" in err and "pw@" not in err
    assert cli.main(["diagnose", "http://127.0.0.1:9", "--scrape.timeout", "0.2s"]) != 2  # not trusted: unused


def test_the_proxy_is_untouched_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    async def run() -> int:
        proxy = await hostile.Target("ok").start()
        target = await hostile.Target("ok").start()
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("http_proxy", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with client() as c:
            assert (await Target(Settings(target.url, discover_cmdline=False)).scrape(c)).up
        return sum(proxy.hits.values())

    assert asyncio.run(run()) == 0


def test_a_target_url_with_credentials_is_refused_without_showing_them(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["serve", "--target", "http://admin:hunter2@127.0.0.1:8000", "--no-vllm-cmdline-discovery"])
    err = capsys.readouterr().err
    assert code == 2
    assert "user name or password" in err
    assert "hunter2" not in err


def test_an_api_key_with_a_line_break_inside_is_refused_at_start_up(tmp_path: object,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    key = Path(str(tmp_path)) / "key"
    key.write_text("first\nsecond\n")
    code = cli.main(["diagnose", "http://127.0.0.1:9", "--target-api-key-file", str(key)])
    err = capsys.readouterr().err
    assert code == 2
    assert "2 lines" in err and "second" not in err
    for text, said in (("\ufeffk3y\n", "byte-order mark"), ("abc\u00e9\n", "U+00E9"), ("\n", "is empty")):
        key.write_text(text)  # what an editor may write: the header is ASCII, so it would never authenticate
        assert cli.main(["diagnose", "http://127.0.0.1:9", "--target-api-key-file", str(key)]) == 2
        assert said in capsys.readouterr().err
    key.write_text("only-one\n")  # what `echo KEY > FILE` writes is accepted
    assert cli.main(["diagnose", "http://127.0.0.1:9", "--target-api-key-file", str(key),
                     "--scrape.timeout", "0.2s"]) != 2


def test_a_target_failing_every_other_scrape_logs_a_few_lines_not_two_per_scrape() -> None:
    damper = Damper("http://vllm-0.test:8000")
    lines = []
    for k in range(200):
        failed = k % 2 == 0
        lines += damper.observe("http_status" if failed else None, "HTTP 500" if failed else None)
    assert damper.flapping
    assert len(lines) <= 6, [ln.text for ln in lines]  # the first failure, a recovery or two, "flapping"
    assert any("flapping" in ln.text for ln in lines)
    settled = []
    for _ in range(20):
        settled += damper.observe(None, None)
    assert not damper.flapping
    assert len(settled) == 1 and settled[0].level == logging.INFO
    # the counts of the flapping (from scrape 4, when the fourth change made it flapping), in the line that ends it
    assert "98 scrapes failed (http_status) and it recovered 98 times" in settled[0].text


def test_a_huge_exposition_beside_a_healthy_target_is_read_as_it_arrives() -> None:
    """A 15 MiB exposition (under the 16 MiB cap) is parsed as it arrives: the scrape keeps only the wanted
    samples, never the body; the healthy target beside it is judged as before. (The /healthz latency and the RSS
    while such a target is scraped every second are in bench/b8_serving.py.)"""
    async def run() -> tuple[bool, bool]:
        big = await hostile.Target("huge").start()
        ok = await hostile.Target("ok").start()
        tb, to = (Target(Settings(t.url, discover_cmdline=False, timeout=30.0)) for t in (big, ok))
        async with client() as c:
            rb, ro = await asyncio.gather(tb.scrape(c), to.scrape(c))
        return rb.up, ro.up

    big_up, ok_up = asyncio.run(run())
    assert ok_up
    assert big_up  # 15 MiB of unwanted families around a real exposition: read, judged, within the cap
