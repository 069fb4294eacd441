"""`vllm-headroom demo` and `replay`: recorded real vLLM timelines, served as if live."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..core import defaults
from ..expose.listen import bind, host_port, parse_listen_address
from .flags import ENV_PREFIX, UsageError, add, hold, multiple, opt


def register(sub: Any) -> None:
    d = sub.add_parser("demo", help="replay a recorded real false-full incident through the sidecar",
                       description="Replay expositions recorded from a real vLLM 0.32.0 while 100 short requests "
                       "met --max-num-seqs 8, through a real sidecar: a table of what the usual panel says next to "
                       "what the sidecar says, sparklines of the whole incident, then the diagnosis. The status "
                       "page, /metrics and /api/v1/* are up on --web.listen-address during the replay and after "
                       "it until Ctrl-C (not with --once). Needs no vLLM and no network.",
                       epilog="examples:\n  vllm-headroom demo              # then open http://127.0.0.1:9478/\n"
                       "  vllm-headroom demo --once --json | python3 -m json.tool",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("--once", action="store_true", help="run to the end at once, print the diagnosis, exit "
                   "(serves nothing)")
    d.add_argument("--json", action="store_true", help="print only the JSON diagnosis on stdout")
    # Their own env names: in the image VLLM_HEADROOM_WEB_LISTEN_ADDRESS is serve's, and must not move a replay.
    add(d, "--speed", multiple, defaults.DEMO_SPEED, help="replay speed-up factor", env=ENV_PREFIX + "DEMO_SPEED")
    add(d, "--web.listen-address", default=defaults.DEMO_LISTEN_ADDRESS, env=ENV_PREFIX + "DEMO_LISTEN_ADDRESS",
        help="address of the sidecar's status page, /metrics and /api/v1/*")
    d.set_defaults(run=run_demo)

    r = sub.add_parser("replay", help="serve a recorded vLLM timeline as if it were vLLM (tests, benchmarks)",
                       description="Serve a recorded vLLM timeline as if it were that vLLM: /metrics (the "
                       "recorded exposition of the moment), /v1/models, /version and /health, on the recording's "
                       "own clock, so a sidecar, a Prometheus or a test can scrape a real incident again. Without "
                       "a folder it serves the demo's embedded false-full incident. It says what it serves and "
                       "where on start.",
                       epilog="example (the recorded incident holds ~20 s, shorter than serve's default 30 s "
                       "false-full hold; replay says so on start):\n"
                       "  vllm-headroom replay &\n"
                       "  vllm-headroom serve --verdict.false-full-hold 10s    # then open http://127.0.0.1:9478/",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("recording", nargs="?", help="recording folder (default: the embedded demo incident)")
    add(r, "--speed", multiple, 1.0, help="replay speed-up factor", env=ENV_PREFIX + "REPLAY_SPEED")
    add(r, "--start-at", hold, 0.0, help="seconds into the recording to start from, e.g. 6s",
        env=ENV_PREFIX + "REPLAY_START_AT")
    r.add_argument("--loop", action=argparse.BooleanOptionalAction, default=True,
                   help="start over at the end (default on)")
    add(r, "--web.listen-address", default=defaults.REPLAY_LISTEN_ADDRESS, help="address to serve on",
        env=ENV_PREFIX + "REPLAY_LISTEN_ADDRESS")
    r.set_defaults(run=run_replay)


def _listen(args: argparse.Namespace) -> tuple[str, int]:
    try:
        return parse_listen_address(opt(args, "web.listen_address"))
    except ValueError as exc:
        raise UsageError(f"--web.listen-address: {exc}") from None


def run_demo(args: argparse.Namespace) -> int:
    from ..replay import demo  # the web stack, only for the commands that serve

    host, port = _listen(args)
    return demo.main(once=args.once, as_json=args.json, speed=args.speed, host=host, port=port)


def run_replay(args: argparse.Namespace) -> int:
    from ..replay import recording

    host, port = _listen(args)
    try:
        rec = recording.load(Path(args.recording)) if args.recording else recording.embedded_incident()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    sock = bind(host, port)
    meta = rec.meta
    print(f"Serving recording {meta.get('scenario', args.recording or 'incident')} (vLLM "
          f"{meta.get('vllm_version', '?')}, {len(rec.frames)} frames over {rec.duration:.1f} s) at speed "
          f"{args.speed:g}{', looping' if args.loop else ''} as vLLM on http://{host_port(host, port)}: /metrics, "
          "/v1/models, /version, /health (Ctrl-C to stop).", flush=True)
    if hint := recording.hold_hint(rec, args.speed):
        print(hint, flush=True)
    recording.serve(recording.Player(rec, speed=args.speed, loop=args.loop, start_at=args.start_at), sock)
    return 0
