"""Command line: `serve`, `diagnose`, `demo`, with Prometheus-style flags, each also an env var.

Every flag `--a.b-c` can be set as `VLLM_HEADROOM_A_B_C`; a flag on the command line wins over its env var.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from . import __version__
from .expose import diagnosis
from .pipeline.config import Overrides, split_args
from .pipeline.scrape import DEFAULT_MAX_BYTES, ScrapeError
from .pipeline.target import Settings, Target, TargetReport, one_shot
from .pipeline.verdict import Thresholds

ENV_PREFIX = "VLLM_HEADROOM_"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_BYTES = re.compile(r"^(\d+)(B|KiB|MiB|GiB|KB|MB|GB)?$")


class UsageError(Exception):
    """A bad flag or value: one sentence for the user, exit code 2."""


def duration(text: str) -> float:
    """'5s', '300ms', '1m', '2h' or plain seconds → seconds."""
    m = _DURATION.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 5s, 300ms or 1m")
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}[m.group(2)]
    return float(m.group(1)) * scale


def byte_size(text: str) -> int:
    m = _BYTES.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 16MiB")
    scale = {"B": 1, None: 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "KB": 1000, "MB": 1000**2,
             "GB": 1000**3}[m.group(2)]
    return int(m.group(1)) * scale


def param_count(text: str) -> int:
    """'70B', '8e9', '405000000000' → a parameter count."""
    text = text.strip()
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}.get(text[-1:].upper(), 1.0)
    try:
        value = float(text[:-1] if scale != 1.0 else text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a parameter count such as 70B") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return int(value)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value < 1.0 and value != 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1")
    return value


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").replace(".", "_").replace("-", "_").upper()


def add(group: Any, flag: str, conv: Callable[[str], Any] | None = None, default: Any = None,
        help: str = "", **kw: Any) -> None:
    """Add a flag whose default comes from its env var, converted and checked like the flag itself."""
    env = env_name(flag)
    raw = os.environ.get(env)
    if raw is not None and raw != "":
        try:
            if kw.get("action") == argparse.BooleanOptionalAction:
                default = raw.lower() in ("1", "true", "yes", "on")
            elif kw.get("action") == "append":
                default = [conv(x) if conv else x for x in raw.split(",") if x.strip()]
            else:
                default = conv(raw) if conv else raw
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise UsageError(f"environment variable {env}: {exc}") from None
    shown = "" if default in (None, [], "") else f" (default {default})"
    if conv is not None:
        kw["type"] = conv
    group.add_argument(flag, default=default, help=f"{help}{shown} [env {env}]", **kw)


def add_config_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("serving config (wins over what vLLM reports)")
    add(g, "--max-num-seqs", positive_int, help="vLLM's max_num_seqs; not exported by vLLM")
    add(g, "--max-num-batched-tokens", positive_int, help="vLLM's max_num_batched_tokens")
    add(g, "--max-model-len", positive_int, help="vLLM's max_model_len (else from /v1/models)")
    add(g, "--block-size", positive_int, help="KV block size in tokens (else from vllm:cache_config_info)")
    add(g, "--num-gpu-blocks", positive_int, help="KV blocks per engine (else from vllm:cache_config_info)")
    add(g, "--vllm-args", help="vLLM's command line as one string, e.g. \"vllm serve M --max-num-seqs 64\"")
    add(g, "--model-config", help="the model's config.json (or folder): adds KV bytes per token, bytes free and "
        "bytes per worst-case request")
    g = p.add_argument_group("request profile and verdict")
    add(g, "--profile.quantile", fraction, 0.99, help="quantile of request lengths for worst-case math")
    add(g, "--profile.window", duration, 300.0, help="window of the length quantiles")
    add(g, "--verdict.full-usage", fraction, 0.8, help="usage at which waiting is judged KV-bound")
    add(g, "--verdict.false-full-hold", duration, 30.0, help="how long false-full must hold before it is flagged")
    add(g, "--verdict.stuck-after", duration, 60.0, help="no engine step for this long while requests wait: stuck")
    add(g, "--verdict.leak-after", duration, 120.0, help="blocks used with nothing running for this long: leak")
    add(g, "--verdict.preempt-window", duration, 60.0, help="preempting while a preemption happened this recently")


def build_parser() -> Parser:
    parser = Parser(prog="vllm-headroom", description="Why vLLM requests wait, and how much room there really is.")
    parser.add_argument("--version", action="version", version=f"vllm-headroom {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the sidecar next to one or more vLLM servers")
    g = serve.add_argument_group("targets")
    add(g, "--target", action="append", help="vLLM base URL; repeat for several servers",
        metavar="URL")
    add(g, "--targets-file", help="file with one vLLM base URL per line")
    add(g, "--target-api-key-file", help="file holding vLLM's --api-key (env VLLM_HEADROOM_TARGET_API_KEY "
        "holds the key itself); sent only to the targets")
    add(g, "--vllm-cmdline-discovery", action=argparse.BooleanOptionalAction, default=True,
        help="read vLLM's flags from /proc/<pid>/cmdline when the process is visible")
    g = serve.add_argument_group("scraping and serving")
    add(g, "--web.listen-address", default="0.0.0.0:9478", help="address of our /metrics")
    add(g, "--scrape.interval", duration, 5.0, help="how often to scrape vLLM's /metrics")
    add(g, "--scrape.timeout", duration, 3.0, help="timeout of one scrape")
    add(g, "--scrape.max-bytes", byte_size, DEFAULT_MAX_BYTES, help="refuse expositions larger than this")
    add(g, "--models.interval", duration, 60.0, help="how often to read /v1/models and /version")
    add(g, "--log.level", default="info", choices=["debug", "info", "warning", "error"], help="log level")
    add_config_flags(serve)

    diag = sub.add_parser("diagnose", help="one-shot diagnosis of a vLLM URL or a saved /metrics exposition")
    diag.add_argument("source", help="vLLM base URL (http://...) or a file holding a /metrics exposition")
    diag.add_argument("--json", action="store_true", help="print the JSON diagnosis")
    add(diag, "--target-api-key-file", help="file holding vLLM's --api-key")
    add(diag, "--scrape.timeout", duration, 5.0, help="timeout of the fetch")
    add_config_flags(diag)

    demo = sub.add_parser("demo", help="replay a recorded real false-full incident through the sidecar")
    demo.add_argument("--once", action="store_true", help="run to the end, print the final diagnosis, exit")
    demo.add_argument("--json", action="store_true", help="with --once: print the JSON diagnosis")
    add(demo, "--speed", float, 4.0, help="replay speed-up factor")
    add(demo, "--web.listen-address", default="127.0.0.1:9478", help="address of the sidecar's /metrics")

    est = sub.add_parser("estimate", help="KV memory and capacity of a model on given devices, vLLM's block math",
                         description="Estimate vLLM's KV cache from a Hugging Face config.json. Memory side: either "
                         "--gpu-memory with the weights (safetensors index of a model folder, --params or "
                         "--weights-bytes) and an activation reserve, or --kv-cache-memory for the pool directly. "
                         "Measure the activation reserve from vLLM's start-up log: requested memory "
                         "(gpu_memory × gpu_memory_utilization) − model weights − 'Available KV cache memory'.")
    est.add_argument("model", help="config.json, or a model folder holding it (and model.safetensors.index.json)")
    est.add_argument("--json", action="store_true", help="print JSON")
    g = est.add_argument_group("model and cache")
    add(g, "--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"],
        help="model dtype (auto = the config's torch_dtype)")
    add(g, "--kv-cache-dtype", default="auto", choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"],
        help="KV cache dtype (auto = the model dtype)")
    add(g, "--tensor-parallel-size", positive_int, 1, help="tensor parallel size; KV heads are split across it")
    add(g, "--block-size", positive_int, 16, help="KV block size in tokens")
    add(g, "--max-model-len", positive_int, help="context length (default: the config's max_position_embeddings)")
    add(g, "--max-num-seqs", positive_int, 256, help="max_num_seqs to check against the pool")
    add(g, "--max-num-batched-tokens", positive_int, 8192,
        help="vLLM's token budget per step; sliding-window layers keep this many in-flight tokens")
    add(g, "--async-scheduling", action=argparse.BooleanOptionalAction, default=True,
        help="two batches in flight (vLLM's default where the platform supports it)")
    add(g, "--num-gpu-blocks-override", positive_int, help="like vLLM's: the number of blocks, no memory math")
    g = est.add_argument_group("memory per device")
    add(g, "--gpu-memory", byte_size, help="memory of one device, e.g. 80GiB")
    add(g, "--gpu-memory-utilization", fraction, 0.92, help="vLLM's gpu_memory_utilization")
    add(g, "--params", param_count, help="parameter count when there is no safetensors index, e.g. 70B")
    add(g, "--weights-bytes", byte_size, help="weights' size of the whole model (overrides the index)")
    add(g, "--activation-memory", byte_size, 2 * 1024**3,
        help="activations, non-torch memory and CUDA graphs per device")
    add(g, "--kv-cache-memory", byte_size, help="KV pool per device in bytes: skip the budget math")

    rec = sub.add_parser("recommend", help="recommend max_model_len and max_num_seqs from observed traffic")
    rec.add_argument("source", help="vLLM base URL or a file holding a /metrics exposition with its histograms")
    rec.add_argument("--json", action="store_true", help="print JSON")
    add(rec, "--min-requests", positive_int, 200, help="refuse to recommend from fewer finished requests")
    add_config_flags(rec)

    rep = sub.add_parser("replay", help="serve a recorded vLLM timeline as if it were vLLM (tests, benchmarks)")
    rep.add_argument("recording", nargs="?", help="recording folder (default: the embedded demo incident)")
    rep.add_argument("--speed", type=float, default=1.0, help="replay speed-up factor (default 1)")
    rep.add_argument("--loop", action=argparse.BooleanOptionalAction, default=True,
                     help="start over at the end (default on)")
    rep.add_argument("--web.listen-address", default="127.0.0.1:8000", help="address to serve on")
    return parser


def _api_key(args: argparse.Namespace) -> str | None:
    path = getattr(args, "target_api_key_file", None)
    if path:
        try:
            return Path(path).read_text().strip() or None
        except OSError as exc:
            raise UsageError(f"cannot read --target-api-key-file {path}: {exc.strerror}") from None
    return os.environ.get(ENV_PREFIX + "TARGET_API_KEY") or None


def settings_for(url: str, args: argparse.Namespace, api_key: str | None) -> Settings:
    try:
        vllm_args = split_args(args.vllm_args) if args.vllm_args else None
    except ValueError as exc:
        raise UsageError(f"--vllm-args cannot be split like a shell line: {exc}") from None
    thresholds = Thresholds(
        full_usage=getattr(args, "verdict.full_usage"),
        false_full_hold=getattr(args, "verdict.false_full_hold"),
        stuck_after=getattr(args, "verdict.stuck_after"),
        leak_after=getattr(args, "verdict.leak_after"),
        preempt_window=getattr(args, "verdict.preempt_window"),
    )
    shape = None
    if getattr(args, "model_config", None):
        from .planning import estimate

        try:
            shape = estimate.load_model(Path(args.model_config))[0]
        except ValueError as exc:
            raise UsageError(f"--model-config: {exc}") from None
    return Settings(
        model_shape=shape,
        url=url,
        overrides=Overrides(args.max_model_len, args.max_num_seqs, args.max_num_batched_tokens, args.block_size,
                            args.num_gpu_blocks),
        vllm_args=vllm_args,
        discover_cmdline=getattr(args, "vllm_cmdline_discovery", False),
        api_key=api_key,
        quantile=getattr(args, "profile.quantile"),
        window=getattr(args, "profile.window"),
        thresholds=thresholds,
        timeout=getattr(args, "scrape.timeout", 5.0),
        max_bytes=getattr(args, "scrape.max_bytes", DEFAULT_MAX_BYTES),
        models_interval=getattr(args, "models.interval", 60.0),
    )


def _check_url(url: str) -> str:
    if not re.match(r"^https?://[^/\s]+", url):
        raise UsageError(f"target {url!r} is not an http(s) URL such as http://127.0.0.1:8000")
    return url.rstrip("/")


def target_urls(args: argparse.Namespace) -> list[str]:
    urls = list(args.target or [])
    if args.targets_file:
        try:
            lines = Path(args.targets_file).read_text().splitlines()
        except OSError as exc:
            raise UsageError(f"cannot read --targets-file {args.targets_file}: {exc.strerror}") from None
        urls += [ln.split("#", 1)[0].strip() for ln in lines if ln.split("#", 1)[0].strip()]
    urls = urls or ["http://127.0.0.1:8000"]
    checked = [_check_url(u) for u in urls]
    if len(set(checked)) != len(checked):
        raise UsageError("the same target is given twice")
    return checked


def cmd_serve(args: argparse.Namespace) -> int:
    from .expose.server import Sidecar, parse_listen_address, serve

    logging.basicConfig(level=getattr(logging, args.__dict__["log.level"].upper()),
                        format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request would drown our own
    try:
        host, port = parse_listen_address(getattr(args, "web.listen_address"))
    except ValueError as exc:
        raise UsageError(f"--web.listen-address: {exc}") from None
    key = _api_key(args)
    targets = [Target(settings_for(u, args, key)) for u in target_urls(args)]
    sidecar = Sidecar(targets, getattr(args, "scrape.interval"))
    logging.getLogger("vllm_headroom").info(
        "vllm-headroom %s watching %s, listening on %s:%d", __version__,
        ", ".join(t.settings.url for t in targets), host, port)
    serve(sidecar, host, port)
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    source: str = args.source
    is_url = source.startswith(("http://", "https://"))
    settings = settings_for(_check_url(source) if is_url else source, args, _api_key(args))
    # vLLM's flags can be read from /proc only for a server on this machine, never for a saved file.
    local = is_url and re.match(r"^https?://(127\.|localhost|\[::1\])", source) is not None
    target = one_shot(replace(settings, discover_cmdline=local and not args.vllm_args))
    try:
        if is_url:
            report = target.observe(time.monotonic(), target.fetch_once(), gauges_only=True)
        else:
            try:
                text = Path(source).read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise UsageError(f"cannot read {source}: {exc.strerror}") from None
            report = target.observe(time.monotonic(), text, gauges_only=True)
    except ScrapeError as exc:
        report = TargetReport(target.settings.url, up=False, error_reason=exc.reason, error=str(exc))
    if args.json:
        print(json.dumps(diagnosis.document([report]), indent=2))
    else:
        print(diagnosis.render_text([report]))
    return 0 if report.up else 1


def cmd_estimate(args: argparse.Namespace) -> int:
    from .planning import estimate as est

    try:
        shape, indexed = est.load_model(Path(args.model))
        inputs = est.Inputs(
            shape=shape, dtype=args.dtype, kv_cache_dtype=args.kv_cache_dtype,
            tensor_parallel_size=args.tensor_parallel_size, block_size=args.block_size,
            max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs, gpu_memory=args.gpu_memory,
            max_num_batched_tokens=args.max_num_batched_tokens, async_scheduling=args.async_scheduling,
            gpu_memory_utilization=args.gpu_memory_utilization,
            weights_bytes=args.weights_bytes or indexed, params=args.params,
            activation_bytes=args.activation_memory, kv_cache_memory=args.kv_cache_memory,
            num_gpu_blocks_override=args.num_gpu_blocks_override,
        )
        result = est.estimate(inputs)
    except ValueError as exc:  # Unsupported included: one sentence, never a wrong number
        raise UsageError(str(exc)) from None
    print(json.dumps(est.as_json(inputs, result), indent=2) if args.json else est.render(inputs, result))
    return 0


def cmd_recommend(args: argparse.Namespace) -> int:
    from .planning.recommend import recommend

    source: str = args.source
    is_url = source.startswith(("http://", "https://"))
    settings: Settings = settings_for(source, args, None)
    target: Target = one_shot(settings)
    try:
        text = target.fetch_once() if is_url else Path(source).read_text(encoding="utf-8", errors="replace")
        report = target.observe(time.monotonic(), text, gauges_only=True)
        if not report.engines:
            raise ValueError("no engine with a known capacity in the exposition")
        advice = [recommend(e, args.min_requests) for e in report.engines]
    except (OSError, ValueError, ScrapeError) as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(advice, indent=2))
        return 0
    for a in advice:
        print(f"model={a['model_name']} engine={a['engine']}: {a['requests_observed']} finished requests")
        print(f"  basis: {a['basis']}")
        for item in a["max_model_len"]:
            if "refused" in item:
                print(f"  max_model_len at p{100 * item['quantile']:g}: not recommended ({item['refused']})")
            else:
                print(f"  max_model_len at p{100 * item['quantile']:g}: {item['max_model_len']} "
                      f"(at most {100 * item['exceed_share_at_most']:.2f} % of requests longer; "
                      f"max concurrency {item['max_concurrency']}, {item['max_concurrency_change']:+d})")
        m = a["max_num_seqs"]
        print(f"  max_num_seqs: {m['range'][0]}-{m['range'][1]} ({m['why']})")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    import uvicorn

    from .expose.server import parse_listen_address
    from .replay import recording as replay

    try:
        rec = replay.load(Path(args.recording)) if args.recording else replay.embedded_incident()
        host, port = parse_listen_address(getattr(args, "web.listen_address"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.speed <= 0:
        raise UsageError("--speed must be greater than 0")
    app = replay.make_app(replay.Player(rec, speed=args.speed, loop=args.loop))
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "diagnose":
            return cmd_diagnose(args)
        if args.command == "estimate":
            return cmd_estimate(args)
        if args.command == "recommend":
            return cmd_recommend(args)
        if args.command == "replay":
            return cmd_replay(args)
        if args.command == "demo":
            from .replay.demo import cmd_demo

            return cmd_demo(args)
        parser.print_help()
        return 2
    except UsageError as exc:
        print(f"vllm-headroom: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `vllm-headroom diagnose ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
