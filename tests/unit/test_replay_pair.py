"""The README's `replay` + `serve` pair shows the recorded false-full incident, as a person would run it.

The recorded incident holds ~20 s; `serve` flags false-full only after `--verdict.false-full-hold` (30 s by
default) and scrapes every 5 s, so with every default the flag can never rise before the recording loops. `replay`
says so and prints the hold that works; the README's pair (and `replay --help`'s example) uses it. The test runs
the README's two commands as they are written (only their listen addresses moved to free ports) and waits, over
several loops of the recording, for the sidecar's own diagnosis to flag false-full.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from exporter import cli
from exporter.replay import recording
from tests import fixtures
from tests.net import free_port

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_pair() -> tuple[list[str], list[str]]:
    """The README's `vllm-headroom replay` and `vllm-headroom serve` lines (one sh block holds both)."""
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(), re.S):
        lines = [ln.split("#", 1)[0].strip().rstrip("&").strip() for ln in block.splitlines()]
        replay = [shlex.split(ln) for ln in lines if ln.startswith("vllm-headroom replay")]
        serve = [shlex.split(ln) for ln in lines if ln.startswith("vllm-headroom serve")]
        if replay and serve:
            return replay[0][1:], serve[0][1:]
    raise AssertionError("no sh block in the README holds a `vllm-headroom replay` and a `vllm-headroom serve` line")


def help_pair() -> tuple[list[str], list[str]]:
    """The same pair in `vllm-headroom replay --help`'s example."""
    parser = cli.build_parser()
    text = next(a for a in parser._subparsers._group_actions[0].choices.values()  # type: ignore[union-attr]
                if a.prog.endswith(" replay")).epilog or ""
    lines = [ln.split("#", 1)[0].strip().rstrip("&").strip() for ln in text.splitlines()
             if ln.strip().startswith("vllm-headroom")]
    replay = [shlex.split(ln)[1:] for ln in lines if ln.startswith("vllm-headroom replay")]
    serve = [shlex.split(ln)[1:] for ln in lines if ln.startswith("vllm-headroom serve")]
    assert replay and serve, text
    return replay[0], serve[0]


def test_help_shows_the_readme_pair() -> None:
    assert help_pair() == readme_pair()


def _false_full(port: int) -> bool:
    try:
        doc = httpx.get(f"http://127.0.0.1:{port}/api/v1/diagnosis", timeout=2).json()
    except (httpx.HTTPError, ValueError):
        return False
    return any(e.get("false_full") for t in doc.get("targets", []) for e in t.get("engines", []))


def test_readme_pair_shows_false_full() -> None:
    replay_args, serve_args = readme_pair()
    addresses = [a for a in replay_args + serve_args if a.startswith(("--web.listen-address", "--target"))]
    assert not addresses, "the pair relies on the default addresses (replay on :8000, serve's default target)"
    vllm, ours = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_HEADROOM_")}
    base = [sys.executable, "-m", "exporter"]
    replay = subprocess.Popen([*base, *replay_args, "--web.listen-address", f"127.0.0.1:{vllm}"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    serve = subprocess.Popen([*base, *serve_args, "--target", f"http://127.0.0.1:{vllm}", "--web.listen-address",
                              f"127.0.0.1:{ours}", "--no-vllm-cmdline-discovery"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert replay.stdout is not None
        said = replay.stdout.readline() + replay.stdout.readline()
        # Several loops of the ~23 s recording: a loaded machine that misses one still sees the next.
        deadline, seen = time.monotonic() + 150, False
        while time.monotonic() < deadline and not seen:
            assert replay.poll() is None and serve.poll() is None
            seen = _false_full(ours)
            time.sleep(0.5)
        assert seen, f"serve never flagged false-full on the replayed incident; replay said:\n{said}"
        hold = serve_args[serve_args.index("--verdict.false-full-hold") + 1]
        assert f"--verdict.false-full-hold {hold}" in said, said  # the hint names what the README uses
    finally:
        for proc in (replay, serve):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(15)


def test_false_full_span_is_what_the_sidecar_sees() -> None:
    span = recording.false_full_seconds(recording.embedded_incident())
    # Frames 2.5 s .. 22.5 s of the cut incident: from its first slots-bound frame. Before issue 19 from 6.0 s: the
    # worst case at max_model_len of a thin profile (fewer than 20 finished requests) vetoed the flag (kind 1).
    assert span == 20.5, span
    assert recording.false_full_seconds(fixtures.recording("idle")) is None


@pytest.mark.parametrize(("speed", "hint"), [
    (1.0, "vllm-headroom serve --verdict.false-full-hold 10s"),
    (2.0, "replay it at --speed 1"),  # 8.5 s at speed 2: too short for two 5 s scrapes and a hold
])
def test_hint_names_what_makes_the_flag_rise(speed: float, hint: str) -> None:
    text = recording.hold_hint(recording.embedded_incident(), speed)
    assert text is not None and hint in text, text
    assert "30 s" in text  # serve's default hold, the reason


def test_no_hint_when_the_default_hold_fits_or_nothing_is_false_full() -> None:
    assert recording.hold_hint(fixtures.recording("idle"), 1.0) is None
    # kv-full flags false-full for one second as the pool fills, head-of-line for 8.5 s: blips, no incident to watch.
    assert recording.false_full_seconds(fixtures.recording("kv-full")) == 1.0
    assert recording.hold_hint(fixtures.recording("kv-full"), 1.0) is None
    assert recording.hold_hint(fixtures.recording("head-of-line"), 1.0) is None
    assert recording.hold_hint(recording.embedded_incident(), 0.25) is None  # ~68 s: the 30 s default fits
