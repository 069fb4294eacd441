"""httpx on asyncio's transports (`aionet`, issue 25): the serve path's plain-HTTP clients use it, and every
way a target can fail ends in the same reason and the same sentence as on httpcore's anyio streams.

Real loopback servers (tests/hostile.py) in every hostile mode a fetch can meet; nothing is timed.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from exporter.pipeline.aionet import Backend
from exporter.pipeline.scrape import ScrapeError, client, fetch
from tests import hostile

# (mode, whether the sentence is compared whole: a timeout's says how many bytes had arrived by then, which
# depends on where the drip was when the deadline fell)
MODES = [("ok", True), ("reset", True), ("http500", True), ("garbage", True), ("redirect", True),
         ("long-headers", True), ("encoded:bomb", True), ("encoded:br", True), ("drip-body", False),
         ("drip-headers", True), ("silent", True), ("endless", False)]


async def _outcome(url: str, plain: bool, max_bytes: int = 16 << 20) -> tuple[str, str, int]:
    """(reason or 'ok', the sentence or the body's first line, body length) of two fetches on one client (the
    second on the kept-alive connection, when the target keeps it)."""
    async with client(plain=plain) as c:
        out = ("", "", 0)
        for _ in range(2):
            try:
                body = await fetch(c, url + "/metrics", 0.5, max_bytes=max_bytes)
                out = ("ok", body.splitlines()[0] if body else "", len(body))
            except ScrapeError as exc:
                out = (exc.reason, str(exc), 0)
        return out


@pytest.mark.parametrize(("mode", "whole"), MODES)
def test_every_failure_reads_the_same_on_both_backends(mode: str, whole: bool) -> None:
    async def main() -> tuple[tuple[str, str, int], tuple[str, str, int]]:
        target = await hostile.Target(mode).start()
        try:
            return await _outcome(target.url, True), await _outcome(target.url, False)
        finally:
            await target.stop()

    ours, anyio = asyncio.run(main())
    assert ours[0] == anyio[0], (ours, anyio)
    if whole:
        assert ours == anyio
    if mode == "ok":
        assert ours[0] == "ok" and ours[2] > 10_000


def test_refused_and_kept_alive() -> None:
    async def main() -> None:
        for plain in (True, False):  # a port nobody listens on: the same sentence
            async with client(plain=plain) as c:
                with pytest.raises(ScrapeError) as caught:
                    await fetch(c, "http://127.0.0.1:9/metrics", 2.0)
            assert caught.value.reason == "connect"
            assert str(caught.value) == "cannot connect to http://127.0.0.1:9/metrics: All connection attempts failed"
        target = await hostile.Target("ok").start()
        try:
            async with client(plain=True) as c:
                bodies = [await fetch(c, target.url + "/metrics", 2.0) for _ in range(5)]
            assert len(set(bodies)) == 1 and bodies[0].startswith("# HELP")
        finally:
            await target.stop()
        assert target.hits["/metrics"] == 5

    asyncio.run(main())


def test_the_plain_client_runs_on_asyncio_transports() -> None:
    """The speed is not lost silently when httpx or httpcore move their pool: this fails instead."""

    async def main() -> None:
        async with client(plain=True) as c:
            transport = c._transport
            assert isinstance(transport, httpx.AsyncHTTPTransport)
            assert isinstance(transport._pool._network_backend, Backend)
        async with client() as c:
            assert not isinstance(c._transport._pool._network_backend, Backend)  # type: ignore[attr-defined]

    asyncio.run(main())
