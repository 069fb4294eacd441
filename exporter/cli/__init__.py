"""Command line: `serve`, `diagnose`, `recommend`, `estimate`, `probe`, `demo`, `replay`.

The CLI only parses arguments (`flags`), builds settings in one place (`settings`), calls one wing and
prints; one module per subcommand group. Exit codes: 0 ok, 1 runtime failure (a target down, a port
taken: one sentence on stderr), 2 usage error (a bad flag or value: one sentence on stderr), the same with
and without --json.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from .. import __version__
from ..expose.listen import PortInUse
from . import estimate, oneshot, probe, replay, serve
from .flags import Parser, RuntimeFailure, UsageError, unknown_env


def build_parser() -> Parser:
    parser = Parser(prog="vllm-headroom", description="Why vLLM requests wait, and how much room there really is.")
    parser.add_argument("--version", action="version", version=f"vllm-headroom {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    serve.register(sub)
    oneshot.register(sub)
    estimate.register(sub)
    probe.register(sub)
    replay.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        for warning in unknown_env():
            print(f"vllm-headroom: warning: {warning}", file=sys.stderr)
        args = parser.parse_args(argv)
        run = getattr(args, "run", None)
        if run is None:
            parser.print_help()
            return 2
        return int(run(args))
    except UsageError as exc:
        print(f"vllm-headroom: {exc}", file=sys.stderr)
        return 2
    except (RuntimeFailure, PortInUse) as exc:
        print(f"vllm-headroom: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `vllm-headroom diagnose ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
