"""Command line: `serve`, `diagnose`, `recommend`, `estimate`, `demo`, `replay`.

The CLI only parses arguments (`flags`), builds settings in one place (`settings`), calls one wing and
prints; one module per subcommand group. Exit codes: 0 ok, 1 runtime failure (e.g. a target down),
2 usage error (one sentence on stderr).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from .. import __version__
from . import estimate, oneshot, replay, serve
from .flags import Parser, UsageError


def build_parser() -> Parser:
    parser = Parser(prog="vllm-headroom", description="Why vLLM requests wait, and how much room there really is.")
    parser.add_argument("--version", action="version", version=f"vllm-headroom {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    serve.register(sub)
    oneshot.register(sub)
    estimate.register(sub)
    replay.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        run = getattr(args, "run", None)
        if run is None:
            parser.print_help()
            return 2
        return int(run(args))
    except UsageError as exc:
        print(f"vllm-headroom: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `vllm-headroom diagnose ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
