"""A fresh tester's findings on the CLI: each gets one sentence and the right exit code (2 usage, 1 runtime)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from exporter import cli
from exporter.cli import serve
from tests.net import free_port


def one_sentence(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("vllm-headroom: "), err
    return err.removeprefix("vllm-headroom: ").strip()


def _must_not_serve(sidecar: object, sock: object) -> None:
    raise AssertionError("a refused value reached serving")


# -- 1, 13: target URLs are checked at start-up, for serve and the one-shot commands ---------------------------
@pytest.mark.parametrize(("url", "sentence"), [
    ("http://127.0.0.1:99999", "target 'http://127.0.0.1:99999' is not a usable URL: its port is not a number in "
     "1-65535"),
    ("http://127.0.0.1:0", "target 'http://127.0.0.1:0' is not a usable URL: its port is not a number in 1-65535"),
    ("http://:8000", "target 'http://:8000' names no host: give vLLM's base URL such as http://127.0.0.1:8000"),
    ("ftp://h:21", "target 'ftp://h:21' is not an http(s) URL such as http://127.0.0.1:8000"),
    ("http://h:1?x=1", "target 'http://h:1?...' has a query or fragment (?... or #...): give vLLM's base URL such "
     "as http://127.0.0.1:8000"),
    ("http://h:1#top", "target 'http://h:1?...' has a query or fragment (?... or #...): give vLLM's base URL such "
     "as http://127.0.0.1:8000"),
    ("http://host:8000/v1", "target 'http://host:8000/v1' is the OpenAI base URL: vLLM's base URL is without /v1, "
     "http://host:8000"),
    ("http://host:8000/v1/", "target 'http://host:8000/v1/' is the OpenAI base URL: vLLM's base URL is without "
     "/v1, http://host:8000"),
])
@pytest.mark.parametrize("command", ["serve", "diagnose", "recommend"])
def test_unusable_target_urls_are_refused_at_start(command: str, url: str, sentence: str,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(serve, "serve", _must_not_serve)
    argv = (["serve", "--target", url, "--web.listen-address", f"127.0.0.1:{free_port()}"] if command == "serve"
            else [command, url])
    assert cli.main(argv) == 2
    assert one_sentence(capsys) == sentence


# -- 2, 7: a flag wins over its env var, and an empty target list is said -------------------------------------
def test_target_flag_replaces_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_HEADROOM_TARGET", "http://a:1")
    assert serve.target_urls(cli.build_parser().parse_args(["serve", "--target", "http://b:2"])) == ["http://b:2"]
    assert serve.target_urls(cli.build_parser().parse_args(
        ["serve", "--target", "http://b:2", "--target", "http://c:3"])) == ["http://b:2", "http://c:3"]
    assert serve.target_urls(cli.build_parser().parse_args(["serve"])) == ["http://a:1"]


def test_no_targets_is_said(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(serve, "serve", _must_not_serve)
    empty = tmp_path / "targets"
    empty.write_text("# none yet\n\n")
    assert cli.main(["serve", "--targets-file", str(empty)]) == 2
    assert one_sentence(capsys) == (f"no targets: --targets-file {empty} lists no URL (leave both unset to watch "
                                    "http://127.0.0.1:8000)")
    monkeypatch.setenv("VLLM_HEADROOM_TARGET", " ")
    assert cli.main(["serve"]) == 2
    assert one_sentence(capsys) == ("no targets: --target / VLLM_HEADROOM_TARGET give no URL (leave both unset to "
                                    "watch http://127.0.0.1:8000)")
    monkeypatch.delenv("VLLM_HEADROOM_TARGET")
    assert serve.target_urls(cli.build_parser().parse_args(["serve"])) == ["http://127.0.0.1:8000"]


# -- 4: boolean env vars ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("raw", "on"), [("true", True), (" TRUE ", True), ("1", True), ("Yes", True), ("on", True),
                                         ("false", False), ("0", False), ("no", False), ("OFF ", False)])
def test_boolean_env_vars_read_every_spelling(raw: str, on: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_HEADROOM_VLLM_CMDLINE_DISCOVERY", raw)
    assert cli.build_parser().parse_args(["serve"]).vllm_cmdline_discovery is on


@pytest.mark.parametrize("raw", ["maybe", "enabled", "2"])
def test_boolean_env_vars_refuse_other_words(raw: str, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("VLLM_HEADROOM_VLLM_CMDLINE_DISCOVERY", raw)
    monkeypatch.setattr(serve, "serve", _must_not_serve)
    assert cli.main(["serve"]) == 2
    assert one_sentence(capsys) == (f"environment variable VLLM_HEADROOM_VLLM_CMDLINE_DISCOVERY: {raw!r} is not a "
                                    "boolean: use true or false (also 1/0, yes/no, on/off)")


# -- 6: a value starting with -- ----------------------------------------------------------------------------
def test_vllm_args_starting_with_dashes_get_the_equals_hint(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagnose", "m.prom", "--vllm-args", "--max-model-len=1.5K --max-num-seqs 8"]) == 2
    assert one_sentence(capsys) == (
        "argument --vllm-args: expected one argument: a value that starts with - must be joined to its flag with "
        "=, e.g. --vllm-args=\"--max-model-len 8k --max-num-seqs 64\" (see 'vllm-headroom diagnose --help')")


# -- 14, 15: sanity bounds and listen addresses ---------------------------------------------------------------
@pytest.mark.parametrize(("argv", "sentence"), [
    (["--scrape.interval", "5ms"], "argument --scrape.interval: '5ms' is shorter than 100ms: vLLM's /metrics would "
     "be read faster than it changes (see 'vllm-headroom serve --help')"),
    (["--scrape.max-bytes", "0"], "argument --scrape.max-bytes: '0' is below 64KiB: one vLLM exposition is about "
     "53 KB, so every scrape would be refused (see 'vllm-headroom serve --help')"),
    (["--scrape.max-bytes", "80"], "argument --scrape.max-bytes: '80' is below 64KiB: one vLLM exposition is about "
     "53 KB, so every scrape would be refused (see 'vllm-headroom serve --help')"),
    (["--scrape.max-bytes", "1.5"], "argument --scrape.max-bytes: '1.5' is a fraction of a byte: give a whole size "
     "such as 16MiB (see 'vllm-headroom serve --help')"),
    (["--web.listen-address", "127.0.0.1:0"], "--web.listen-address: listen address '127.0.0.1:0': port 0 (any free "
     "port) is not allowed, since Prometheus and the health check need a known port: pick one such as :9478"),
    (["--web.listen-address", "127.0.0.1:70000"], "--web.listen-address: listen address '127.0.0.1:70000': port "
     "70000 is not in 1-65535"),
    (["--num-gpu-blocks", "0"], "argument --num-gpu-blocks: '0' leaves no usable block: vLLM keeps one null block, "
     "so at least 2 are needed (see 'vllm-headroom serve --help')"),
    (["--num-gpu-blocks", "1"], "argument --num-gpu-blocks: '1' leaves no usable block: vLLM keeps one null block, "
     "so at least 2 are needed (see 'vllm-headroom serve --help')"),
])
def test_start_up_bounds(argv: list[str], sentence: str, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(serve, "serve", _must_not_serve)
    assert cli.main(["serve", *argv]) == 2
    assert one_sentence(capsys) == sentence


def test_listening_on_ipv6_loopback_prints_a_bracketed_url(monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    import socket
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    monkeypatch.setattr(serve, "serve", lambda sidecar, sock, *health: [s.close() for s in (sock, *health) if s])
    port = free_port()
    with caplog.at_level("INFO", logger="vllm_headroom"):
        try:
            code = cli.main(["serve", "--web.listen-address", f"[::1]:{port}"])
        except OSError:
            pytest.skip("no ::1 here")
    if code == 1:
        pytest.skip("cannot listen on ::1 here")
    assert code == 0
    assert f"listening on [::1]:{port} (status page http://[::1]:{port}/)" in caplog.text


# -- 16: recommend ---------------------------------------------------------------------------------------------
def test_recommend_help_prints_one_percent_sign_and_no_verdict_knobs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["recommend", "--help"])
    out = capsys.readouterr().out
    assert "70-80 % of" in " ".join(out.split()) and "%%" not in out
    assert "--verdict." not in out and "--profile.quantile" in out


# -- 17: replay and demo have their own env names ---------------------------------------------------------------
def test_replay_and_demo_do_not_read_serves_listen_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_HEADROOM_WEB_LISTEN_ADDRESS", "0.0.0.0:9478")
    monkeypatch.setenv("VLLM_HEADROOM_REPLAY_LISTEN_ADDRESS", "127.0.0.1:8123")
    monkeypatch.setenv("VLLM_HEADROOM_DEMO_SPEED", "8")
    parse = cli.build_parser().parse_args
    replay: argparse.Namespace = parse(["replay"])
    assert getattr(replay, "web.listen_address") == "127.0.0.1:8123"
    demo = parse(["demo"])
    assert getattr(demo, "web.listen_address") == "127.0.0.1:9478" and demo.speed == 8
    assert getattr(parse(["serve"]), "web.listen_address") == "0.0.0.0:9478"


# -- 1: a URL httpx cannot use, or any unexpected exception on a target, is one clean line per state change --------
SNAPSHOT = Path("tests/fixtures/vllm-0.32.0/false-full/snapshot.prom")


def test_an_unusable_url_in_the_sidecar_is_one_clean_line(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    import httpx

    from exporter.expose.server import Sidecar
    from exporter.pipeline.target import Settings, Target

    sidecar = Sidecar([Target(Settings(url="http://127.0.0.1:99999"))], 1.0)

    async def ticks() -> None:
        async with httpx.AsyncClient() as client:
            for i in range(4):
                await sidecar.tick(client, now=float(i))

    with caplog.at_level("DEBUG", logger="vllm_headroom"):
        asyncio.run(ticks())
    said = [r for r in caplog.records if r.levelname != "DEBUG"]
    assert len(said) == 1 and said[0].exc_info is None, caplog.text
    assert "Traceback" not in said[0].getMessage() and "Group" not in said[0].getMessage()
    reason = sidecar.readiness()["not_ready"][0]
    assert reason["reason"] == "connect"
    assert reason["error"] == ("cannot fetch http://127.0.0.1:99999/metrics: OverflowError: connect(): port must be "
                               "0-65535.")
    assert "<" not in reason["error"] and "(" not in reason["error"].split(":", 2)[2][:2]


def test_an_internal_error_is_logged_once_without_a_traceback(monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    import httpx

    from exporter.expose.server import Sidecar
    from exporter.pipeline.target import Settings, Target

    target = Target(Settings(url="http://vllm:8000"))

    async def body(client: httpx.AsyncClient, now: float) -> object:
        parser = target.parser()
        parser.feed(SNAPSHOT.read_text())
        return target.parsed(parser)

    def boom(*_args: object, **_kwargs: object) -> object:
        raise ExceptionGroup("unhandled errors in a TaskGroup", [OverflowError("port must be 0-65535")])

    monkeypatch.setattr(target, "fetch_parsed", body)
    monkeypatch.setattr(target, "judge_exposition", boom)
    sidecar = Sidecar([target], 1.0)

    async def ticks() -> None:
        async with httpx.AsyncClient() as client:
            for i in range(5):
                await sidecar.tick(client, now=float(i))

    with caplog.at_level("INFO", logger="vllm_headroom"):
        asyncio.run(ticks())
    assert [r.getMessage() for r in caplog.records] == [
        "http://vllm:8000: internal error: OverflowError: port must be 0-65535"]
    assert all(r.exc_info is None for r in caplog.records)
    assert target.errors == {"internal_error": 5}


# -- 3: /v1/models and /version on their own schedule, failures under `models` ---------------------------------
def test_models_are_refreshed_per_interval_and_counted_under_models() -> None:
    import asyncio

    import httpx

    from exporter.pipeline.target import Settings, Target

    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        if request.url.path == "/metrics":
            return httpx.Response(200, text="<!doctype html><html><body>login</body></html>\n")
        return httpx.Response(404, text="not found")

    target = Target(Settings(url="http://proxy:8000", models_interval=60.0))

    async def scrapes() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            for i in range(8):
                await target.scrape(client, now=float(i))
            await target.scrape(client, now=61.0)

    asyncio.run(scrapes())
    assert target.errors == {"malformed": 9, "models": 2}
    assert asked.count("/v1/models") == 2 and asked.count("/version") == 2 and asked.count("/metrics") == 9


# -- 5, 8: vLLM flags read with vLLM's own types, ignored and contradicting values said ---------------------
def test_vllm_args_use_vllms_own_types_and_say_what_is_ignored() -> None:
    from exporter.pipeline.config import parse_vllm_args_noting

    argv = ["vllm", "serve", "m", "--max-num-seqs", "1k", "--block-size", "0", "--num-gpu-blocks-override", "1",
            "--max-num-batched-tokens", "8K", "--max-model-len", "32k", "-tp", "two"]
    got, notes = parse_vllm_args_noting(argv)
    assert got == {"model": "m", "max_num_batched_tokens": 8192, "max_model_len": 32000, "enable_sleep_mode": False}
    assert notes == [
        "--vllm-args --max-num-seqs '1k' is ignored: vLLM expects a whole number (vLLM reads it with int())",
        "--vllm-args --block-size '0' is ignored: it is not a positive number",
        "--vllm-args --num-gpu-blocks-override '1' is ignored: it leaves no usable block (vLLM keeps one null "
        "block, so at least 2 are needed)",
        "--vllm-args --tensor-parallel-size 'two' is ignored: vLLM expects a whole number (vLLM reads it with int())",
    ]
    assert parse_vllm_args_noting(["--max-num-seqs", "None", "--max-model-len", "auto"]) == ({}, [])


def test_ignored_vllm_args_and_contradicting_flags_are_noted_in_the_diagnosis(
        capsys: pytest.CaptureFixture[str]) -> None:
    import json
    assert cli.main(["diagnose", str(SNAPSHOT), "--vllm-args", "vllm serve m --max-num-seqs eight",
                     "--block-size", "16", "--num-gpu-blocks", "2"]) == 0
    out = capsys.readouterr().out
    assert f"{SNAPSHOT}  note: --vllm-args --max-num-seqs 'eight' is ignored: vLLM expects a whole number" in out
    assert "note: --block-size 16 contradicts vLLM's cache_config_info block_size 32; vLLM's is used" in out
    assert "note: --num-gpu-blocks 2 contradicts vLLM's cache_config_info num_gpu_blocks 40; the flag is used" in out
    assert cli.main(["diagnose", "--json", str(SNAPSHOT), "--block-size", "16"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["targets"][0]["notes"] == [
        "--block-size 16 contradicts vLLM's cache_config_info block_size 32; vLLM's is used (the blocks it exports "
        "are 32-token blocks)"]


def test_notes_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    import httpx

    from exporter.expose.server import Sidecar
    from exporter.pipeline.config import Overrides
    from exporter.pipeline.target import Settings, Target

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=SNAPSHOT.read_text()) if request.url.path == "/metrics" else \
            httpx.Response(404)

    sidecar = Sidecar([Target(Settings(url="http://vllm:8000", overrides=Overrides(block_size=1),
                                       discover_cmdline=False))], 1.0)

    async def ticks() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            for i in range(3):
                await sidecar.tick(client, now=float(i))

    with caplog.at_level("INFO", logger="vllm_headroom"):
        asyncio.run(ticks())
    assert [r.getMessage() for r in caplog.records] == [
        "http://vllm:8000/v1/models answered HTTP 404",  # once, while /metrics answers
        "http://vllm:8000: --block-size 1 contradicts vLLM's cache_config_info block_size 32; vLLM's is used (the "
        "blocks it exports are 32-token blocks)"]


# -- 10: what a file that is no exposition is; stdin -----------------------------------------------------------
@pytest.mark.parametrize(("content", "sentence"), [
    (bytes(range(256)) * 8, "the body is binary data, not a text exposition: is this the right file or URL?"),
    (b"", "the body is empty: no exposition was saved or served (is this the right file, or did the fetch fail?)"),
    (b"\xef\xbb\xbf", "the body is empty (only a byte-order mark): no exposition was saved or served (is this the "
     "right file, or did the fetch fail?)"),
    (b'{"targets": []}\n', "the body is a JSON document, not a Prometheus text exposition: save vLLM's /metrics "
     "(curl -s http://HOST:8000/metrics > m.prom), not an API answer"),
])
def test_diagnose_names_what_a_file_is(content: bytes, sentence: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.prom"
    path.write_bytes(content)
    assert cli.main(["diagnose", str(path)]) == 1
    assert capsys.readouterr().out == f"{path}: DOWN (malformed): {path}: {sentence}\n"


def test_diagnose_reads_standard_input(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io
    import sys
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(SNAPSHOT.read_bytes())))
    assert cli.main(["diagnose", "-", "--max-num-seqs", "8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("<stdin>  model=tiny-llama engine=0\n") and "verdict: slots_full" in out


# -- 11: the status page shows and counts an engine it cannot judge -------------------------------------------
def test_status_page_shows_and_counts_a_config_error() -> None:
    from exporter.expose import page
    from exporter.expose.history import History
    from exporter.pipeline.target import EngineGap, TargetReport

    gap = EngineGap("m", "0", "", config_error="num_gpu_blocks=1 (from flag) leaves no usable block")
    html = page.render([TargetReport("http://vllm:8000", up=True, gaps=[gap])], History(), 5.0)
    assert 'data-verdict="config_error"' in html
    assert "cannot derive capacity: num_gpu_blocks=1 (from flag) leaves no usable block" in html
    assert "1 target(s): 1 config_error" in html


# -- 12: odd values from vLLM -------------------------------------------------------------------------------
def _snapshot_with(tmp_path: Path, old: str, new: str) -> Path:
    text = SNAPSHOT.read_text()
    assert old in text
    path = tmp_path / "m.prom"
    path.write_text(text.replace(old, new))
    return path


def test_diagnose_exits_1_when_no_engine_could_be_judged(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = _snapshot_with(tmp_path, 'num_gpu_blocks="40"', 'num_gpu_blocks="1"')
    assert cli.main(["diagnose", str(path)]) == 1
    assert "cannot derive capacity: num_gpu_blocks=1" in capsys.readouterr().out
    path = _snapshot_with(tmp_path, 'num_gpu_blocks="40"', 'num_gpu_blocks="abc"')
    assert cli.main(["diagnose", str(path)]) == 1
    assert ("cannot derive capacity: vLLM exports num_gpu_blocks='abc' in cache_config_info, which is not a number"
            in capsys.readouterr().out)


def test_negative_gauges_are_bad_values_of_their_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _snapshot_with(tmp_path, 'vllm:num_requests_running{engine="0",model_name="tiny-llama"} 8.0',
                          'vllm:num_requests_running{engine="0",model_name="tiny-llama"} -5.0')
    assert cli.main(["diagnose", str(path)]) == 1
    assert capsys.readouterr().out == (
        f"{path}  model=tiny-llama engine=0: cannot judge this engine: vllm:num_requests_running of model "
        "'tiny-llama' engine 0 is -5, negative, which no count or share is\n")


# -- 16: recommend --json on a dead target ----------------------------------------------------------------------
def test_recommend_json_on_a_dead_target_prints_json_like_diagnose(capsys: pytest.CaptureFixture[str]) -> None:
    import json
    url = f"http://127.0.0.1:{free_port()}"
    assert cli.main(["diagnose", "--json", url]) == 1
    assert json.loads(capsys.readouterr().out)["targets"][0]["up"] is False
    assert cli.main(["recommend", "--json", url]) == 1
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["up"] is False and doc["error_reason"] == "connect"
    assert err.startswith(f"vllm-headroom: cannot connect to {url}/metrics") and err.count("\n") == 1


# -- 9: the live demo: one name everywhere, and it fits narrow terminals (columns dropped, not cut) ------------
@pytest.mark.parametrize("columns", [80, 60, 40])
def test_live_demo_fits_the_terminal_and_names_the_recording(columns: int) -> None:
    import os
    import signal
    import subprocess
    import sys

    import httpx

    from exporter.replay import demo

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "demo", "--speed", "50", "--web.listen-address",
                             f"127.0.0.1:{port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": str(columns), "PYTHONIOENCODING": "utf-8"},
                            start_new_session=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("The sidecar stays up"):
                break
        name = "recording false-full (vLLM 0.32.0)"
        diag = httpx.get(f"http://127.0.0.1:{port}/api/v1/diagnosis", timeout=5).json()
        hist = httpx.get(f"http://127.0.0.1:{port}/api/v1/history", timeout=5).json()
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).json()
        assert diag["targets"][0]["target"] == name and hist["targets"][0]["target"] == name
        assert ready["ready"] is True
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(15)
    too_wide = [ln for ln in lines if len(ln) > columns]
    assert not too_wide, too_wide
    shown = demo.columns_for(columns)
    assert demo.header(shown) in lines  # the header of the columns that fit, never a cut one
    if columns < 76:
        dropped = [c for c in demo.ALL if c not in shown]
        assert dropped and any(f"not shown at {columns} columns: {', '.join(dropped)}" in " ".join(lines)
                               for _ in [0])
    rows = [ln for ln in lines if ln.strip().endswith((" no", " YES"))]
    assert rows and all(len(r.split()) == len(shown) + ("unreachable" in shown) for r in rows)


# -- 19: the suite runs this clone's code, never a copy in the shared dev venv ----------------------------------
def test_subprocesses_and_the_console_script_run_this_clone(tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess
    import sys

    clone = os.environ.get("HEADROOM_TEST_CLONE")
    if clone is None:
        pytest.skip("run through scripts/test (make test), which puts the clone first on PYTHONPATH and PATH")
    root = Path(__file__).resolve().parents[2]
    assert Path(clone) == root
    where = subprocess.run([sys.executable, "-c", "import exporter; print(exporter.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where) == root / "exporter" / "__init__.py"  # `python -m exporter` from any folder
    script = shutil.which("vllm-headroom")
    assert script is not None and Path(script).parent == root / "build" / "dev-bin"
    out = subprocess.run([script, "--version"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    from exporter import __version__
    assert out.strip() == f"vllm-headroom {__version__}"


def test_our_own_metrics_given_as_a_target_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    # A sidecar's own /metrics (the golden exposition recorded from one) pointed at as vLLM: "exports no vllm:
    # series (is vLLM running with --disable-log-stats?)" sent the user to vLLM's flags.
    assert cli.main(["diagnose", "tests/fixtures/vllm-0.10.2/prod-kv/golden-metrics.prom"]) == 1
    out = capsys.readouterr().out
    assert "is a vllm-headroom sidecar's /metrics, not vLLM's" in out and "disable-log-stats" not in out
