"""`vllm-headroom diagnose` and `recommend`: one observation of a vLLM URL or a saved exposition."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import defaults
from .flags import (
    RuntimeFailure,
    UsageError,
    add,
    add_config_flags,
    add_target_access_flags,
    base_url,
    check_target_url,
    looks_like_host_port,
    positive_int,
)

if TYPE_CHECKING:
    from ..pipeline.report import TargetReport

# The pipeline, the presenters and the planner are imported by the command that runs, not by `import exporter.cli`:
# `estimate` and `--help` never load the judgement (issue 25: one-shot commands import only what they use).


def register(sub: Any) -> None:
    d = sub.add_parser("diagnose", help="one-shot diagnosis of a vLLM URL or a saved /metrics exposition",
                       description="Fetch vLLM's /metrics (or read a saved copy) once and say why requests wait: "
                       "the verdict, the false-full flag, the headroom numbers and what to change. One observation "
                       "has no rates or hold times; the output says what it cannot show. Exit code 1 when the "
                       "target is down, 2 for a usage mistake.",
                       epilog="example:\n  curl -s http://vllm:8000/metrics > m.prom\n  vllm-headroom diagnose "
                       "m.prom --vllm-args \"vllm serve M --max-num-seqs 8\"",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("source", help="vLLM base URL (http://...), a file holding a /metrics exposition, or - for "
                   "standard input")
    d.add_argument("--json", action="store_true", help="print the JSON diagnosis")
    add_target_access_flags(d)
    add_config_flags(d)
    d.set_defaults(run=run_diagnose)

    r = sub.add_parser("recommend", help="recommend max_model_len and max_num_seqs from observed traffic",
                       description="Recommend max_model_len and max_num_seqs from a server's length histograms "
                       "(requests finished since it started): max_model_len at p99 and p99.9 of prompt + generated "
                       "tokens, max_num_seqs at 70-80 % of the worst-case concurrency the pool allows. Refuses "
                       "(exit code 1) below --min-requests finished requests.",
                       epilog="example:\n  vllm-headroom recommend http://127.0.0.1:8000 --max-num-seqs 64",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("source", help="vLLM base URL or a file holding a /metrics exposition with its histograms")
    r.add_argument("--json", action="store_true", help="print JSON")
    add(r, "--min-requests", positive_int, defaults.RECOMMEND_MIN_REQUESTS,
        help="refuse to recommend from fewer finished requests")
    add_target_access_flags(r)
    add_config_flags(r, verdict=False)  # recommend judges no verdict: the verdict knobs would do nothing
    r.set_defaults(run=run_recommend)


def source(text: str) -> str:
    """The source as the pipeline takes it: a URL ending in /metrics becomes its base URL (said on stderr);
    an address without http:// is refused with the URL it probably meant (UsageError)."""
    from ..pipeline.oneshot import is_url

    if text == STDIN:
        return text
    if is_url(text):
        try:
            check_target_url(text)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        base, stripped = base_url(text)
        if stripped:
            print(f"vllm-headroom: {text} ends in /metrics: reading {base} (its /metrics, /v1/models and "
                  "/version)", file=sys.stderr)
        return base
    if not Path(text).exists() and "://" in text:  # ftp://..., http:/ typos: a URL, not a file name
        try:
            check_target_url(text)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if not Path(text).exists() and looks_like_host_port(text):
        raise UsageError(f"{text} is neither a file nor a URL: did you mean http://{text}?")
    return text


STDIN = "-"


def _startup_log_readable(args: argparse.Namespace) -> None:
    """A one-shot run ends with one sentence when its --vllm-startup-log cannot be read (the sidecar, which reads it
    again every --models.interval, keeps a note instead and stays up)."""
    path = getattr(args, "vllm_startup_log", None)
    if not path:
        return
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise UsageError(f"cannot read --vllm-startup-log {path}: {exc.strerror or exc}") from None


def _observe(args: argparse.Namespace) -> TargetReport:
    from ..pipeline import oneshot
    from .settings import settings_for

    args.source = source(args.source)
    _startup_log_readable(args)
    try:
        if args.source == STDIN:  # `curl -s http://vllm:8000/metrics | vllm-headroom diagnose -`
            settings = settings_for("<stdin>", args)
            data = sys.stdin.buffer.read(settings.max_bytes + 1)  # capped: `diagnose - < /dev/zero` ends
            return oneshot.observe("<stdin>", settings, data=data)
        return oneshot.observe(args.source, settings_for(args.source, args))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot read {args.source}: {exc.strerror}") from None


def run_diagnose(args: argparse.Namespace) -> int:
    from ..expose import diagnosis

    report = _observe(args)
    if args.json:
        print(json.dumps(diagnosis.document([report]), indent=2, allow_nan=False))
    else:
        print(diagnosis.render_text([report]))
    # 1 when the target is down, or no engine could be judged (every engine's capacity underivable).
    return 0 if report.up and report.engines else 1


def run_recommend(args: argparse.Namespace) -> int:
    from ..planning.recommend import recommend, render_text

    report = _observe(args)
    if not report.up:
        if args.json:  # like diagnose --json, a JSON answer on stdout; the sentence and exit code 1 as without
            print(json.dumps({"target": report.url, "up": False, "error_reason": report.error_reason,
                              "error": report.error, "recommendations": []}, indent=2))
        raise RuntimeFailure(report.error or "the target is down")
    try:
        if not report.engines:
            raise ValueError("no engine with a known capacity in the exposition")
        advice = [recommend(e, args.min_requests) for e in report.engines]
    except ValueError as exc:  # the traffic cannot support a recommendation: not a usage error
        raise RuntimeFailure(str(exc)) from None
    # What the flags contradict (a --block-size vLLM's own overrides, an ignored --vllm-args value): said beside the
    # advice, never dropped; on stderr with --json, which stays the list of recommendations.
    notes = [f"{report.url}  note: {n}" for n in report.notes]
    if args.json:
        print(json.dumps(advice, indent=2))
        for n in notes:
            print(n, file=sys.stderr)
    else:
        print("\n".join([*notes, render_text(advice)]))
    return 0
