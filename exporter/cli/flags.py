"""Flags for every subcommand: Prometheus-style names, each also an environment variable, converted with
the one grammar of `core.units` and defaults from `core.defaults`.

Every flag `--a.b-c` can be set as `VLLM_HEADROOM_A_B_C`; a flag on the command line wins over its env var.
A bad value raises `UsageError` (one sentence, exit code 2).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any, NoReturn

from ..core import defaults, units

ENV_PREFIX = "VLLM_HEADROOM_"


class UsageError(Exception):
    """A bad flag or value: one sentence for the user, exit code 2."""


def _arg_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def conv(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    conv.__name__ = parse.__name__
    return conv


def _positive_duration(text: str) -> float:
    value = units.parse_duration(text)
    if value <= 0:
        raise ValueError(f"{text!r} must be longer than 0s")
    return value


def _tokens(text: str) -> int:
    value = units.parse_tokens(text)
    if value is None:
        raise ValueError(f"{text!r} is not a token count such as 4096, 32k or 32K")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise ValueError(f"{text!r} must be greater than 0")
    return value


def _blocks(text: str) -> int:
    value = _positive_int(text)
    if value < 2:
        raise ValueError(f"{text!r} leaves no usable block: vLLM keeps one null block, so at least 2 are needed")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{text!r} must be between 0 and 1")
    return value


def _multiple(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not value > 0:
        raise ValueError(f"{text!r} must be greater than 0")
    return value


duration = _arg_type(_positive_duration)
hold = _arg_type(units.parse_duration)  # a hold time: 0s means "at once"
size = _arg_type(units.parse_size)
tokens = _arg_type(_tokens)
positive_int = _arg_type(_positive_int)
blocks = _arg_type(_blocks)
fraction = _arg_type(_fraction)
multiple = _arg_type(_multiple)
params = _arg_type(units.parse_params)


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").replace(".", "_").replace("-", "_").upper()


def _shown(default: Any, conv: Callable[[str], Any] | None) -> str:
    """A default as a user writes it: 5s, 16MiB, 0.8."""
    if default in (None, [], ""):
        return ""
    if conv in (duration, hold):
        return units.format_duration(float(default))
    if conv is size:
        return units.format_size(int(default))
    if isinstance(default, bool):
        return "on" if default else "off"
    return str(default)


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
                default = [conv(x.strip()) if conv else x.strip() for x in raw.split(",") if x.strip()]
            else:
                default = conv(raw) if conv else raw
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise UsageError(f"environment variable {env}: {exc}") from None
    shown = _shown(default, conv)
    if conv is not None:
        kw["type"] = conv
    group.add_argument(flag, default=default, help=f"{help}{f' (default {shown})' if shown else ''} [env {env}]",
                       **kw)


def add_config_flags(p: argparse.ArgumentParser) -> None:
    """Serving config vLLM does not export, and the profile and verdict knobs (serve, diagnose, recommend)."""
    g = p.add_argument_group("serving config (wins over what vLLM reports)")
    add(g, "--max-num-seqs", positive_int, help="vLLM's max_num_seqs; not exported by vLLM")
    add(g, "--max-num-batched-tokens", tokens, help="vLLM's max_num_batched_tokens")
    add(g, "--max-model-len", tokens, help="vLLM's max_model_len, e.g. 32k (else from /v1/models)")
    add(g, "--block-size", positive_int, help="KV block size in tokens (else from vllm:cache_config_info)")
    add(g, "--num-gpu-blocks", blocks, help="KV blocks per engine, at least 2 (else from vllm:cache_config_info)")
    add(g, "--vllm-args", help="vLLM's command line as one string, e.g. \"vllm serve M --max-num-seqs 64\"")
    add(g, "--model-config", help="the model's config.json (or folder): adds KV bytes per token, bytes free and "
        "bytes per worst-case request")
    g = p.add_argument_group("request profile and verdict")
    add(g, "--profile.quantile", fraction, defaults.PROFILE_QUANTILE, help="quantile of request lengths for "
        "worst-case math")
    add(g, "--profile.window", duration, defaults.PROFILE_WINDOW, help="window of the length quantiles")
    add(g, "--verdict.full-usage", fraction, defaults.FULL_USAGE, help="usage at which waiting is judged KV-bound")
    add(g, "--verdict.false-full-hold", hold, defaults.FALSE_FULL_HOLD,
        help="how long false-full must hold before it is flagged")
    add(g, "--verdict.stuck-after", hold, defaults.STUCK_AFTER,
        help="no engine step for this long while requests wait: stuck")
    add(g, "--verdict.leak-after", hold, defaults.LEAK_AFTER,
        help="blocks used with nothing running for this long: leak")
    add(g, "--verdict.preempt-window", hold, defaults.PREEMPT_WINDOW,
        help="preempting while a preemption happened this recently")


def add_target_access_flags(p: argparse.ArgumentParser, timeout: bool = True) -> None:
    """How to reach a target: its API key, and (for one-shot commands) the fetch timeout."""
    add(p, "--target-api-key-file", help="file holding vLLM's --api-key (env VLLM_HEADROOM_TARGET_API_KEY holds "
        "the key itself); sent only to the targets")
    if timeout:
        add(p, "--scrape.timeout", duration, defaults.SCRAPE_TIMEOUT, help="timeout of one fetch")


def opt(args: argparse.Namespace, name: str) -> Any:
    """A parsed flag by its dotted name (`scrape.timeout`), None when this subcommand has no such flag."""
    return getattr(args, name, None)
