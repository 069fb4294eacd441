"""`vllm-headroom demo` and `replay`: recorded real vLLM timelines, served as if live."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..core import defaults
from ..expose.server import parse_listen_address
from ..replay import demo, recording
from .flags import UsageError, add, hold, multiple, opt


def register(sub: Any) -> None:
    d = sub.add_parser("demo", help="replay a recorded real false-full incident through the sidecar",
                       description="Replay expositions recorded from a real vLLM while 100 short requests met "
                       "--max-num-seqs 8, through a real sidecar; print what the panel says next to the verdict.",
                       epilog="example:\n  vllm-headroom demo --once",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("--once", action="store_true", help="run to the end, print the final diagnosis, exit")
    d.add_argument("--json", action="store_true", help="with --once: print the JSON diagnosis")
    add(d, "--speed", multiple, defaults.DEMO_SPEED, help="replay speed-up factor")
    add(d, "--web.listen-address", default=defaults.DEMO_LISTEN_ADDRESS, help="address of the sidecar's /metrics")
    d.set_defaults(run=run_demo)

    r = sub.add_parser("replay", help="serve a recorded vLLM timeline as if it were vLLM (tests, benchmarks)",
                       description="Serve a recording's /metrics, /v1/models and /version on its own clock.",
                       epilog="example:\n  vllm-headroom replay tests/fixtures/vllm-0.32.0/false-full --speed 2",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("recording", nargs="?", help="recording folder (default: the embedded demo incident)")
    add(r, "--speed", multiple, 1.0, help="replay speed-up factor")
    add(r, "--start-at", hold, 0.0, help="seconds into the recording to start from, e.g. 6s")
    r.add_argument("--loop", action=argparse.BooleanOptionalAction, default=True,
                   help="start over at the end (default on)")
    add(r, "--web.listen-address", default=defaults.REPLAY_LISTEN_ADDRESS, help="address to serve on")
    r.set_defaults(run=run_replay)


def _listen(args: argparse.Namespace) -> tuple[str, int]:
    try:
        return parse_listen_address(opt(args, "web.listen_address"))
    except ValueError as exc:
        raise UsageError(f"--web.listen-address: {exc}") from None


def run_demo(args: argparse.Namespace) -> int:
    host, port = _listen(args)
    return demo.main(once=args.once, as_json=args.json, speed=args.speed, host=host, port=port)


def run_replay(args: argparse.Namespace) -> int:
    host, port = _listen(args)
    try:
        rec = recording.load(Path(args.recording)) if args.recording else recording.embedded_incident()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    recording.serve(recording.Player(rec, speed=args.speed, loop=args.loop, start_at=args.start_at), host, port)
    return 0
