"""`vllm-headroom probe URL`: a controlled load against a staging vLLM, and where its queue really forms.

Only flags are defined at import time; the probe wing is imported when the command runs, so the other commands
do not pay for it.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import Any

from ..core import defaults
from .flags import (
    RuntimeFailure,
    UsageError,
    add,
    add_config_flags,
    add_target_access_flags,
    base_url,
    check_target_url,
    duration,
    opt,
    positive_int,
)

DESCRIPTION = (
    "Send requests of a stated prompt and output length (ignore_eos, so the lengths are exact) to a staging vLLM, "
    "raise the number of concurrent clients step by step, read /metrics at each step and print per step the "
    "requests running and waiting, the free blocks, the preemptions and our verdict; then the concurrency at "
    "which the queue formed beside the one predicted from the capacity ledger (blocks, block size, "
    "max_model_len, max_num_seqs and the lengths), the most that ran at once beside the theory, and the gap. "
    "Without --yes nothing is sent: the plan and the prediction are printed. Ctrl-C stops and cancels every "
    "request sent. Exit codes: 0 done (also when stopped at --max-requests), 1 the target cannot be read, "
    "refused the requests or kept failing them (the steps from the failure on are void), 2 a usage mistake or a "
    "target that is not vLLM, 130 interrupted."
)

EPILOG = """examples:
  # the plan and the prediction only (nothing sent)
  vllm-headroom probe http://staging-vllm:8000 --prompt-tokens 1024 --max-tokens 256
  # run it: 1 to 40 clients, at most 2000 requests
  vllm-headroom probe http://staging-vllm:8000 --prompt-tokens 1024 --max-tokens 256 --concurrency 1:40 \\
      --max-requests 2000 --yes
"""


def register(sub: Any) -> None:
    p = sub.add_parser("probe", help="find where a staging vLLM's queue really forms, with a controlled load",
                       description=textwrap.fill(DESCRIPTION, width=100, break_on_hyphens=False), epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url", help="the staging vLLM's base URL, e.g. http://127.0.0.1:8000")
    g = p.add_argument_group("the requests")
    add(g, "--prompt-tokens", positive_int, help="prompt length of every request, in tokens (required)")
    add(g, "--max-tokens", positive_int, help="output length of every request, in tokens (required; ignore_eos)")
    add(g, "--model", help="served model name to ask for (default: the first of /v1/models)")
    add(g, "--prompt-kind", default="auto", choices=["auto", "token-ids", "text"],
        help="token ids (a server with --skip-tokenizer-init) or text sized with the server's /tokenize; auto "
        "asks /tokenize")
    g = p.add_argument_group("the ramp")
    add(g, "--concurrency", default="auto", help="concurrent clients per step: START:STOP[:STEP] or A,B,C; auto "
        "steps up to two past the predicted point")
    add(g, "--max-requests", positive_int, defaults.PROBE_MAX_REQUESTS, help="never send more requests than this")
    add(g, "--step.scrapes", positive_int, defaults.PROBE_STEP_SCRAPES, help="scrapes of /metrics per step")
    add(g, "--step.interval", duration, defaults.PROBE_STEP_INTERVAL, help="time between a step's scrapes")
    add(g, "--step.settle", duration, defaults.PROBE_STEP_SETTLE,
        help="longest wait for the engine to hold all of a step's requests")
    p.add_argument("--yes", action="store_true", help="send the load (without it: print the plan only)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_target_access_flags(p)
    add_config_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..probe import plan as plan_mod
    from ..probe import run as probe_run
    from .settings import settings_for

    missing = [f for f, v in (("--prompt-tokens", args.prompt_tokens), ("--max-tokens", args.max_tokens)) if v is None]
    if missing:
        raise UsageError(f"probe needs {' and '.join(missing)}: the lengths every request has")
    try:
        url = base_url(check_target_url(args.url))[0]
        ramp = plan_mod.parse_ramp(args.concurrency)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    plan = plan_mod.Plan(url=url, model=args.model, prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens,
                         ramp=ramp, max_requests=args.max_requests, step_scrapes=opt(args, "step.scrapes"),
                         step_interval=opt(args, "step.interval"), step_settle=opt(args, "step.settle"),
                         prompt_kind=args.prompt_kind.replace("-", "_"))
    settings = settings_for(url, args)
    try:
        if not args.yes:
            ready = probe_run.dry_run(settings, plan)
            if args.json:
                print(json.dumps(plan_mod.plan_json(plan, ready.ramp, ready.prediction, ready.model,
                                                    ready.prompt_kind), indent=2))
            else:
                print(plan_mod.render_plan(plan, ready.ramp, ready.prediction, ready.model, ready.prompt_kind))
            return 0
        outcome = probe_run.run(settings, plan)
    except (probe_run.NotVllm, plan_mod.PlanRefused) as exc:
        raise UsageError(str(exc)) from None
    except (probe_run.Unreachable, probe_run.ProbeError) as exc:
        raise RuntimeFailure(str(exc)) from None
    print(json.dumps(plan_mod.as_json(outcome), indent=2) if args.json else plan_mod.render(outcome))
    if outcome.stopped == "interrupted":
        sys.stdout.flush()
        return 130
    if outcome.stopped == "failed":
        print(f"vllm-headroom: the probe's result is void from the step of {outcome.void_from} clients on: "
              f"{outcome.void_error}", file=sys.stderr)
        return 1
    return 0
