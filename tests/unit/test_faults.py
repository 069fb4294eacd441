"""Every fault a target can throw at the sidecar: it keeps serving, counts the reason, sets up 0.

respx injects the faults; the bodies that are not faults themselves come from recorded real expositions.
"""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest
import respx

from exporter.expose import diagnosis
from exporter.expose.collector import HeadroomCollector
from exporter.expose.server import Sidecar
from exporter.pipeline.target import Settings, Target
from tests import fixtures

URL = "http://vllm.test:8000"


def _scrape(target: Target, wall: float | None = None) -> None:
    async def run() -> None:
        async with httpx.AsyncClient() as client:
            await target.scrape(client, now=1.0, wall=wall)

    asyncio.run(run())


def _models_ok(router: respx.MockRouter) -> None:
    router.get(URL + "/v1/models").mock(return_value=httpx.Response(200, json=fixtures.meta("idle")["v1_models"]))
    router.get(URL + "/version").mock(return_value=httpx.Response(200, json={"version": "0.32.0"}))


def _metrics_text(target: Target) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    reg = CollectorRegistry(auto_describe=False)
    reg.register(HeadroomCollector([target]))
    return generate_latest(reg).decode()


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (httpx.ConnectError("refused"), "connect"),
        (httpx.ReadTimeout("slow"), "timeout"),
        (httpx.Response(500, text="boom"), "http_status"),
        (httpx.Response(503), "http_status"),
        (httpx.RemoteProtocolError("peer closed connection without sending complete message body"), "truncated"),
    ],
)
def test_transport_faults_set_up_zero_and_count_the_reason(response: object, reason: str) -> None:
    target = Target(Settings(URL, discover_cmdline=False))
    with respx.mock(assert_all_called=False) as router:
        _models_ok(router)
        route = router.get(URL + "/metrics")
        if isinstance(response, Exception):
            route.mock(side_effect=response)
        else:
            route.mock(return_value=response)
        _scrape(target)
    assert not target.last.up
    assert target.last.error_reason == reason
    assert target.errors == {reason: 1}
    text = _metrics_text(target)
    assert f'vllm_headroom_up{{target="{URL}"}} 0.0' in text
    assert f'vllm_headroom_scrape_errors_total{{reason="{reason}",target="{URL}"}} 1.0' in text
    assert "vllm_headroom_kv_free_blocks{" not in text  # no stale derived numbers


def _recorded_body_cases() -> list[tuple[str, str]]:
    real = fixtures.snapshot("false-full")
    cut = real[: len(real) // 2]  # cut mid-line: what a proxy that drops the connection leaves
    no_stats = "".join(ln + "\n" for ln in real.splitlines() if "vllm:" not in ln)  # --disable-log-stats
    garbage = real.replace("vllm:num_requests_running{", "vllm:num_requests_running{engine=0,", 1)
    return [(cut, "truncated"), (no_stats, "no_vllm_metrics"), (garbage, "malformed")]


@pytest.mark.parametrize(("body", "reason"), _recorded_body_cases(), ids=["cut", "disable-log-stats", "bad-labels"])
def test_bad_bodies_set_up_zero_and_count_the_reason(body: str, reason: str) -> None:
    target = Target(Settings(URL, discover_cmdline=False))
    with respx.mock(assert_all_called=False) as router:
        _models_ok(router)
        router.get(URL + "/metrics").mock(return_value=httpx.Response(200, text=body))
        _scrape(target)
    assert (target.last.up, target.last.error_reason) == (False, reason)
    assert target.last.error


def test_oversized_exposition_is_refused() -> None:
    target = Target(Settings(URL, discover_cmdline=False, max_bytes=1000))
    with respx.mock(assert_all_called=False) as router:
        _models_ok(router)
        router.get(URL + "/metrics").mock(return_value=httpx.Response(200, text=fixtures.snapshot("idle")))
        _scrape(target)
    assert (target.last.up, target.last.error_reason) == (False, "too_large")


def test_recovery_after_a_fault_and_readiness_says_why() -> None:
    target = Target(Settings(URL, discover_cmdline=False))
    sidecar = Sidecar([target], interval=1.0)
    with respx.mock(assert_all_called=False) as router:
        _models_ok(router)
        router.get(URL + "/metrics").mock(side_effect=httpx.ConnectError("refused"))
        _scrape(target)
        body = sidecar.readiness()
        assert body["ready"] is False
        assert body["not_ready"][0]["reason"] == "connect"
        router.get(URL + "/metrics").mock(return_value=httpx.Response(200, text=fixtures.snapshot("idle")))
        _scrape(target)
    assert target.last.up
    assert sidecar.readiness()["ready"] is True
    assert f'vllm_headroom_up{{target="{URL}"}} 1.0' in _metrics_text(target)


def test_down_since_marks_the_first_failed_scrape_of_each_outage() -> None:
    """The alerts' start-up grace: how long vLLM has been down (a reload inside the pod counts from its start)."""
    target = Target(Settings(URL, discover_cmdline=False))
    with respx.mock(assert_all_called=False) as router:
        _models_ok(router)
        router.get(URL + "/metrics").mock(side_effect=httpx.ConnectError("refused"))  # loading
        _scrape(target, wall=1000.0)
        _scrape(target, wall=1005.0)
        assert f'vllm_headroom_target_down_since_timestamp_seconds{{target="{URL}"}} 1000.0' in _metrics_text(target)
        router.get(URL + "/metrics").mock(return_value=httpx.Response(200, text=fixtures.snapshot("idle")))
        _scrape(target, wall=1010.0)
        assert "\nvllm_headroom_target_down_since_timestamp_seconds{" not in _metrics_text(target)  # absent: up
        router.get(URL + "/metrics").mock(side_effect=httpx.ConnectError("refused"))  # the container restarts
        _scrape(target, wall=2000.0)
        _scrape(target, wall=2005.0)
    assert f'vllm_headroom_target_down_since_timestamp_seconds{{target="{URL}"}} 2000.0' in _metrics_text(target)


def test_every_report_says_which_scrape_made_it_and_when() -> None:
    """How fresh an answer is: failed scrapes count too, so a number that stops rising means a stalled loop."""
    target = Target(Settings(URL, discover_cmdline=False))
    with respx.mock(assert_all_called=False) as router:
        _models_ok(router)
        router.get(URL + "/metrics").mock(side_effect=httpx.ConnectError("refused"))
        _scrape(target, wall=1000.0)
        down = diagnosis.target_json(target.last)
        router.get(URL + "/metrics").mock(return_value=httpx.Response(200, text=fixtures.snapshot("idle")))
        _scrape(target, wall=1001.0)
    up = diagnosis.target_json(target.last)
    assert (down["scrape_number"], down["scraped_at"]) == (1, 1000.0)
    assert (up["up"], up["scrape_number"], up["scraped_at"]) == (True, 2, 1001.0)
    assert up["scrape_duration_seconds"] >= 0


def test_api_key_goes_to_the_target_only_as_a_bearer_token() -> None:
    target = Target(Settings(URL, discover_cmdline=False, api_key="s3cret"))
    with respx.mock(assert_all_called=False) as router:
        models = router.get(URL + "/v1/models").mock(
            return_value=httpx.Response(200, json=fixtures.meta("idle")["v1_models"]))
        router.get(URL + "/version").mock(return_value=httpx.Response(200, json={"version": "0.32.0"}))
        metrics = router.get(URL + "/metrics").mock(return_value=httpx.Response(200, text=fixtures.snapshot("idle")))
        _scrape(target)
    assert models.calls.last.request.headers["authorization"] == "Bearer s3cret"
    assert "authorization" not in metrics.calls.last.request.headers  # /metrics is not protected by vLLM
    assert "s3cret" not in _metrics_text(target)


def _ours(body: bytes) -> list[bytes]:
    return [ln for ln in body.splitlines() if b"process_" not in ln]


def test_metrics_body_is_rendered_once_per_scrape_and_only_when_read() -> None:
    target = Target(Settings(URL, vllm_args=fixtures.vllm_argv("false-full"), discover_cmdline=False))
    sidecar = Sidecar([target], interval=1.0)

    async def tick() -> None:
        async with httpx.AsyncClient() as client:
            await sidecar.tick(client, now=1.0)

    with respx.mock(assert_all_called=False) as router:
        _models_ok(router)
        route = router.get(URL + "/metrics").mock(return_value=httpx.Response(200, text=fixtures.snapshot("idle")))
        asyncio.run(tick())
        first = sidecar.exposition()
        assert b'verdict="ok"} 1.0' in first
        rendered = sidecar.metrics.rendered_targets
        assert _ours(sidecar.exposition()) == _ours(first)  # only the process's own series move between reads
        assert sidecar.metrics.rendered_targets == rendered  # reads between scrapes reuse the target's render
        route.mock(return_value=httpx.Response(200, text=fixtures.snapshot("false-full")))
        asyncio.run(tick())
        asyncio.run(tick())  # two scrapes, no read: nothing rendered
        assert sidecar.metrics.rendered_targets == rendered
    assert b'verdict="slots_full"} 1.0' in sidecar.exposition()
    assert sidecar.metrics.rendered_targets == rendered + 1


def test_metrics_answer_is_reused_only_while_young_and_gzipped_once_per_build() -> None:
    """`MetricsBody.read`: served again under max_age, served while the next builds under 2 × max_age, rebuilt
    beyond; the gzip answer decompresses to the plain one, and Accept-Encoding decides which one a client gets."""
    import gzip

    from fastapi.testclient import TestClient

    from exporter.expose.bodies import accepts_gzip
    from exporter.expose.server import make_app

    target = Target(Settings(URL, vllm_args=fixtures.vllm_argv("false-full"), discover_cmdline=False))
    sidecar = Sidecar([target], interval=1.0)

    async def reads() -> None:
        async with httpx.AsyncClient() as client:
            await sidecar.tick(client, now=1.0)
        body = sidecar.metrics
        first = await body.read(gzip=False, max_age=60.0)
        assert b'verdict="ok"} 1.0' in first and body.builds == 1
        assert await body.read(gzip=False, max_age=60.0) is first  # young: the same answer
        assert gzip.decompress(await body.read(gzip=True, max_age=60.0)) == first
        assert await body.read(gzip=False, max_age=0.0) is not first and body.builds == 2  # old: a new one
        assert body._answer is not None
        body._answer.built -= 1.5  # between max_age and twice it: the last answer now, the next one built behind
        kept = body._answer.plain
        assert await body.read(gzip=False, max_age=1.0) is kept
        await asyncio.sleep(0.05)
        assert body.builds == 3 and body._answer.plain is not kept

    with respx.mock(assert_all_called=False) as router:
        _models_ok(router)
        router.get(URL + "/metrics").mock(return_value=httpx.Response(200, text=fixtures.snapshot("idle")))
        asyncio.run(reads())
    assert accepts_gzip("gzip, deflate") and accepts_gzip("br;q=1.0, GZIP;q=0.5") and accepts_gzip("*")
    assert not accepts_gzip("") and not accepts_gzip("identity") and not accepts_gzip("gzip;q=0")
    assert not accepts_gzip("gzip; q=0.000") and not accepts_gzip("deflate, br")
    # gzip's own entry beats `*` whatever their order; `*` decides only without one (found by a fresh reviewer:
    # "*, gzip;q=0" got gzip, "*;q=0, gzip" did not)
    assert not accepts_gzip("*, gzip;q=0") and not accepts_gzip("identity;q=1, *;q=0.5, gzip;q=0")
    assert accepts_gzip("*;q=0, gzip") and accepts_gzip("x-gzip;q=0.2, *;q=0") and not accepts_gzip("*;q=0")
    client = TestClient(make_app(sidecar, start_loop=False))
    zipped = client.get("/metrics", headers={"accept-encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip" and zipped.headers["vary"] == "Accept-Encoding"
    plain = client.get("/metrics", headers={"accept-encoding": "identity"})
    assert "content-encoding" not in plain.headers
    # two Accept-Encoding fields are one list: a gzip in the second counts
    both = client.get("/metrics", headers=[("accept-encoding", "identity"), ("accept-encoding", "gzip")])
    assert both.headers["content-encoding"] == "gzip"
    assert _ours(zipped.content) == _ours(plain.content) and b'verdict="ok"} 1.0' in plain.content



def test_a_gzip_reader_never_waits_for_zlib_while_a_compressed_answer_is_young() -> None:
    """While the newest body compresses (a worker thread, ~10 ms at 100 targets, more on a loaded machine), a
    gzip reader gets the last compressed body if it is younger than 2 × max_age (the plain path's own bound),
    never waits: before, every build's first gzip readers queued behind zlib (the p99 of /metrics at 100
    targets). Past that age, and with nothing compressed yet, the reader waits for the new one; each body is
    compressed once, and after the first gzip read every new body is compressed as soon as it is built (while the
    schedules run: with max_age 0 only the bodies gzip readers ask for)."""
    import gzip
    import threading

    from exporter.expose import bodies

    target = Target(Settings(URL, vllm_args=fixtures.vllm_argv("false-full"), discover_cmdline=False))
    sidecar = Sidecar([target], interval=1.0)
    gate, calls, real = threading.Event(), [], bodies.gzip_body

    def slow_gzip(body: bytes) -> bytes:
        calls.append(body)
        assert gate.wait(10.0)
        return real(body)

    async def reads() -> None:
        async with httpx.AsyncClient() as client:
            await sidecar.tick(client, now=1.0)
        body = sidecar.metrics
        gate.set()
        first_z = await body.read(gzip=True, max_age=1.0)  # nothing compressed yet: waits for it
        first = body._answer.plain if body._answer else b""
        assert gzip.decompress(first_z) == first and len(calls) == 1
        gate.clear()
        assert body._answer is not None
        body._answer.built -= 1.5  # between max_age and twice it: the next body is built behind this read
        assert await body.read(gzip=True, max_age=1.0) is first_z
        while body._building is not None:
            await asyncio.sleep(0.01)
        assert body.builds == 2
        while len(calls) < 2:  # its gzip starts as soon as it is built (the thread is held by the gate)
            await asyncio.sleep(0.01)
        read = asyncio.ensure_future(body.read(gzip=True, max_age=1.0))
        for _ in range(3):
            await asyncio.sleep(0)
        assert read.done() and read.result() is first_z  # answered while zlib is held: the last compressed one
        gate.set()
        while body._zipped is None or body._zipped[0] != body._answer.built:
            await asyncio.sleep(0.01)
        second_z = await body.read(gzip=True, max_age=1.0)
        assert second_z is not first_z and gzip.decompress(second_z) == body._answer.plain and len(calls) == 2
        gate.clear()
        body._answer.built -= 5.0  # older than 2 × max_age, and so the compressed one: a reader waits for a new one
        assert body._zipped is not None
        body._zipped = (body._zipped[0] - 5.0, body._zipped[1])
        waiting = asyncio.ensure_future(body.read(gzip=True, max_age=1.0))
        while len(calls) < 3:
            await asyncio.sleep(0.01)
        assert not waiting.done()
        gate.set()
        assert gzip.decompress(await waiting) == body._answer.plain and len(calls) == 3
        # A replay or test building a body per read (max_age 0) compresses only the bodies gzip readers ask for:
        # identity reads queue no compression behind which the next gzip reader would wait.
        for _ in range(5):
            await body.read(gzip=False, max_age=0.0)
        assert len(calls) == 3
        assert gzip.decompress(await body.read(gzip=True, max_age=0.0)) == body._answer.plain and len(calls) == 4

    with respx.mock(assert_all_called=False) as router:
        _models_ok(router)
        router.get(URL + "/metrics").mock(return_value=httpx.Response(200, text=fixtures.snapshot("idle")))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(bodies, "gzip_body", slow_gzip)
            asyncio.run(reads())


def test_a_failed_gzip_of_metrics_is_logged_and_the_plain_body_still_served(caplog: pytest.LogCaptureFixture) -> None:
    """zlib failing on one body (memory, a bug) is said once in our log; a gzip reader waiting for that body gets
    the error (uvicorn answers 500), identity readers are served, and the next body is compressed anew."""
    import gzip

    from exporter.expose import bodies

    target = Target(Settings(URL, vllm_args=fixtures.vllm_argv("false-full"), discover_cmdline=False))
    sidecar = Sidecar([target], interval=1.0)
    real, failed = bodies.gzip_body, []

    def flaky(body: bytes) -> bytes:
        if not failed:
            failed.append(body)
            raise MemoryError("zlib could not allocate its window")
        return real(body)

    async def reads() -> None:
        async with httpx.AsyncClient() as client:
            await sidecar.tick(client, now=1.0)
        body = sidecar.metrics
        with pytest.raises(MemoryError):
            await body.read(gzip=True, max_age=0.0)
        assert b"vllm_headroom_build_info" in await body.read(gzip=False, max_age=0.0)
        assert gzip.decompress(await body.read(gzip=True, max_age=0.0)) == body._answer.plain  # type: ignore[union-attr]

    with respx.mock(assert_all_called=False) as router:
        _models_ok(router)
        router.get(URL + "/metrics").mock(return_value=httpx.Response(200, text=fixtures.snapshot("idle")))
        with pytest.MonkeyPatch.context() as mp, caplog.at_level("ERROR", logger="vllm_headroom"):
            mp.setattr(bodies, "gzip_body", flaky)
            asyncio.run(reads())
    said = [r.getMessage() for r in caplog.records if "compressing our /metrics failed" in r.getMessage()]
    assert said == ["compressing our /metrics failed: zlib could not allocate its window"]


def _scrape_hostile(mode: str) -> tuple[Target, bytes]:
    from tests import hostile

    if mode.startswith("encoded:"):
        hostile.encoded(mode.split(":", 1)[1])  # built before the server answers (256 MiB take seconds to compress)
    with hostile.serving(mode) as server:
        # These faults are about what the body says, not how fast it comes: a deadline no loaded machine reaches.
        target = Target(Settings(server.url, discover_cmdline=False, timeout=60.0))
        _scrape(target)
        return target, server.metrics_head


def test_a_gzip_encoded_exposition_is_read_as_the_identity_one_and_identity_is_asked() -> None:
    """vLLM behind a proxy that compresses anyway (a real loopback server): the body is inflated by us, within the
    cap, and judged exactly as the same exposition sent as it is."""
    zipped, head = _scrape_hostile("encoded:gzip")
    plain, _ = _scrape_hostile("ok")
    assert b"accept-encoding: identity" in head.lower()
    assert zipped.last.up and plain.last.up

    def judged(t: Target) -> list[object]:
        return [{k: v for k, v in e.items() if k not in ("scraped_at",)}
                for e in diagnosis.target_json(t.last)["engines"]]

    assert judged(zipped) == judged(plain) and judged(zipped)


@pytest.mark.parametrize(("kind", "reason"), [
    ("stacked", "malformed"),  # "gzip, gzip": refused before anything is inflated
    ("bomb", "too_large"),  # 64 MiB in 65 KB: inflated only up to the cap (16 MiB), then refused
    ("not-gzip", "malformed"),
    ("br", "malformed"),
])
def test_compressed_bodies_are_capped_and_named(kind: str, reason: str) -> None:
    target, _ = _scrape_hostile(f"encoded:{kind}")
    assert (target.last.up, target.last.error_reason) == (False, reason)
    assert target.last.error is not None
    assert ("Content-Encoding" in target.last.error) == (reason == "malformed"), target.last.error


@pytest.mark.parametrize(("body", "version"), [
    ('{"version": "0.32.0"}', "0.32.0"), ('{"version": "0.11.0rc2.dev45+g1a2b3c.cpu"}', "0.11.0rc2.dev45+g1a2b3c.cpu"),
    ('{"version": {"x": [1, 2]}}', None), ('{"version": 32}', None), ('{"version": "0.32.0\\n<script>"}', None),
    ('{"version": "\\"} 1\\nvllm_headroom_up 7"}', None), ('{"version": ""}', None)])
def test_version_is_a_release_as_vllm_writes_one_or_nothing(body: str, version: str | None) -> None:
    # A hostile /version: a Python repr of an object became our vllm_version, a text with markup our release.
    from exporter.pipeline import scrape

    assert scrape.parse_version(body) == version


@pytest.mark.parametrize("body", ["[" * 60000, "{" * 60000, '{"version": ' * 30000])
def test_a_deeply_nested_json_answer_is_no_answer_and_no_crash(body: str) -> None:
    """/version and /v1/models nested past json's recursion depth (under their 64 KiB and 1 MiB caps): each reader
    says it is no answer (None, or /v1/models' one sentence), instead of a RecursionError voiding the round."""
    from exporter.pipeline import scrape

    assert scrape.parse_version(body) is None and scrape.parse_frontend(body) is None
    with pytest.raises(scrape.ScrapeError, match="OpenAI model list"):
        scrape.parse_models(body)


def test_digits_with_underscores_are_no_number() -> None:
    """Python's float() and int() read "4_0_0" as 400; no exposition writes it, and Prometheus refuses it: a
    recorded exposition with num_gpu_blocks="4_0_0" has no capacity from that label, and a sample value "9_2" is
    a malformed line."""
    from exporter.engines.vllm import metrics as vllm_metrics
    from exporter.engines.vllm import read as vllm_read
    from exporter.pipeline import exposition

    real = fixtures.snapshot("false-full")
    blocks = re.search(r'num_gpu_blocks="(\d+)"', real)
    assert blocks is not None
    forged = real.replace(blocks.group(0), 'num_gpu_blocks="4_0_0"')
    snap = vllm_read.read(exposition.parse(forged, vllm_metrics.WANTED))
    assert snap.cache_info and all(c.num_gpu_blocks is None for c in snap.cache_info.values())
    waiting = re.search(r"^(vllm:num_requests_waiting\{[^}]*\}) (\S+)$", real, re.M)
    assert waiting is not None
    with pytest.raises(exposition.ExpositionError):
        exposition.parse(real.replace(waiting.group(0), waiting.group(1) + " 9_2"), vllm_metrics.WANTED)


def test_a_label_value_cannot_forge_lines_of_the_text_diagnosis() -> None:
    """A model_name with a newline (a real exposition, its model label rewritten) shows as
    escapes on the target's own line: no forged "verdict:" line (the text format's \\n escape is a real newline)."""
    real = fixtures.snapshot("false-full")
    name = re.search(r'model_name="([^"]*)"', real)
    assert name is not None
    forged = real.replace(f'model_name="{name.group(1)}"', 'model_name="tiny\\n  verdict: idle"')
    target = Target(Settings(URL, discover_cmdline=False))
    report = target.observe(1.0, forged)
    text = diagnosis.render_text([report])
    assert not any(line.startswith("  verdict: idle") for line in text.splitlines())
    assert sum(line.startswith("  verdict: ") for line in text.splitlines()) == len(report.engines) > 0


def test_a_failed_v1_models_is_said_in_the_diagnosis_with_its_target() -> None:
    """vLLM with --api-key answers /v1/models 401, or a proxy answers an HTML login page: the diagnosis (JSON and
    text) says so, naming the target and (for the 401) the API key, instead of a silent "?" at max_model_len."""
    target = Target(Settings(URL, discover_cmdline=False))
    with respx.mock(assert_all_called=False) as router:
        router.get(URL + "/v1/models").mock(return_value=httpx.Response(401, json={"error": "Unauthorized"}))
        router.get(URL + "/version").mock(return_value=httpx.Response(200, json={"version": "0.32.0"}))
        router.get(URL + "/metrics").mock(return_value=httpx.Response(200, text=fixtures.snapshot("false-full")))
        _scrape(target)
        refused = diagnosis.target_json(target.last)
        router.get(URL + "/v1/models").mock(return_value=httpx.Response(200, text="<html>login</html>"))
        target._models_at = None  # due again
        _scrape(target)
        html = target.last
    assert "API key" in (refused["models_error"] or "") and refused["engines"]
    assert target.last.up
    doc = diagnosis.target_json(html)
    assert doc["models_error"] is not None and doc["models_error"].startswith(URL)
    assert "OpenAI model list" in doc["models_error"]
    assert f"{URL}  note: {doc['models_error']}" in diagnosis.render_text([html])


@pytest.mark.parametrize(("mode", "reason", "said"), [
    ("reset", "truncated", "closed the connection before answering"),
    ("redirect", "http_status", "answered HTTP 301, redirecting to http://169.254.169.254/latest/meta-data/"),
    ("long-headers", "malformed", "sent response headers longer than 100 KB"),
])
def test_each_transport_fault_is_said_as_what_happened(mode: str, reason: str, said: str) -> None:
    """A real loopback server misbehaving before any body: the sentence says what it did (not "mid-body: " with
    nothing after it, nor a redirect without where to)."""
    target, _ = _scrape_hostile(mode)
    assert (target.last.up, target.last.error_reason) == (False, reason)
    assert target.last.error is not None and said in target.last.error, target.last.error


def test_two_cache_config_series_that_disagree_on_capacity_leave_it_unknown_and_say_why() -> None:
    """A real exposition with a second cache_config_info series for engine 0 claiming 4000 blocks: neither is
    taken (the first used to win silently), the engine is not judged, and the sentence names both."""
    real = fixtures.snapshot("false-full")
    line = next(ln for ln in real.splitlines() if ln.startswith("vllm:cache_config_info{"))
    blocks = re.search(r'num_gpu_blocks="(\d+)"', line)
    assert blocks is not None
    forged = real.replace(line, line + "\n" + line.replace(blocks.group(0), 'num_gpu_blocks="4000"'))
    report = Target(Settings(URL, discover_cmdline=False)).observe(1.0, forged)
    assert not report.engines and report.gaps
    error = report.gaps[0].config_error or ""
    assert f"'{blocks.group(1)}' and '4000'" in error and "which holds is unknown" in error
    # The same series twice, or a second differing only in a label that is no capacity, changes nothing.
    same = real.replace(line, line + "\n" + line.replace('cache_dtype="auto"', 'cache_dtype="fp8"'))
    assert Target(Settings(URL, discover_cmdline=False)).observe(1.0, same).engines


def test_a_bad_line_in_a_read_family_is_named_by_its_number() -> None:
    """The sidecar's fast path reads only the families it wants, without line numbers; an error in one of them
    still names its real line (was "line 0")."""
    from exporter.engines.vllm import metrics as vllm_metrics
    from exporter.pipeline import exposition

    real = fixtures.snapshot("false-full")
    lines = real.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("vllm:num_requests_waiting{"))
    lines[at] = lines[at].rsplit(" ", 1)[0] + " abc"
    with pytest.raises(exposition.ExpositionError, match=f"line {at + 1}:"):
        exposition.parse("\n".join(lines) + "\n", vllm_metrics.WANTED)
