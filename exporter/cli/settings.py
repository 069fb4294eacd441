"""Parsed flags → the pipeline's `Settings`, built in this one place for serve, diagnose and recommend."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from ..pipeline.config import Overrides, split_args
from ..pipeline.target import Settings
from ..pipeline.verdict import Thresholds
from ..planning.estimate import load_model
from .flags import ENV_PREFIX, UsageError, opt

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _checked_key(key: str, where: str) -> str | None:
    """`key` without one trailing line break (what `echo KEY > FILE` adds); UsageError for a key an HTTP header
    cannot carry (another line break or control character): it would never authenticate, silently."""
    if key.endswith("\r\n"):
        key = key[:-2]
    elif key.endswith("\n"):
        key = key[:-1]
    if _CONTROL.search(key):
        lines = key.count("\n") + 1
        what = f"{lines} lines" if lines > 1 else "a control character"
        raise UsageError(f"{where} holds {what}: an HTTP header cannot carry it, so no request to vLLM would "
                         "authenticate; write the key alone on one line (printf %s KEY > FILE)")
    return key.strip() or None


def api_key(args: argparse.Namespace) -> str | None:
    """vLLM's --api-key from --target-api-key-file, else VLLM_HEADROOM_TARGET_API_KEY; UsageError (at start-up)
    for a key no request could carry."""
    path = opt(args, "target_api_key_file")
    if path:
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read --target-api-key-file {path}: "
                             f"{getattr(exc, 'strerror', None) or 'not text'}") from None
        return _checked_key(text, f"--target-api-key-file {path}")
    raw = os.environ.get(ENV_PREFIX + "TARGET_API_KEY")
    return _checked_key(raw, f"environment variable {ENV_PREFIX}TARGET_API_KEY") if raw else None


def ca_file(args: argparse.Namespace) -> str | None:
    """--scrape.ca-file, checked: a file of PEM certificates (UsageError otherwise)."""
    path = opt(args, "scrape.ca_file")
    if not path:
        return None
    from ..pipeline.scrape import ssl_context

    try:
        ssl_context(path)
    except OSError as exc:
        raise UsageError(f"cannot read --scrape.ca-file {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # ssl.SSLError is an OSError; a file with no certificate raises this
        raise UsageError(f"--scrape.ca-file {path} holds no PEM certificate: {exc}") from None
    return str(path)


def settings_for(url: str, args: argparse.Namespace) -> Settings:
    """How to watch `url`, from the parsed flags; raises UsageError for a value that cannot be used."""
    try:
        vllm_args = split_args(args.vllm_args) if args.vllm_args else None
    except ValueError as exc:
        raise UsageError(f"--vllm-args cannot be split like a shell line: {exc}") from None
    shape = None
    if opt(args, "model_config"):
        try:
            shape = load_model(Path(args.model_config))[0]
        except ValueError as exc:
            raise UsageError(f"--model-config: {exc}") from None
    defaults = Settings(url=url)
    return Settings(
        url=url,
        overrides=Overrides(args.max_model_len, args.max_num_seqs, args.max_num_batched_tokens, args.block_size,
                            args.num_gpu_blocks),
        vllm_args=vllm_args,
        discover_cmdline=opt(args, "vllm_cmdline_discovery") is not False,
        api_key=api_key(args),
        quantile=opt(args, "profile.quantile"),
        window=opt(args, "profile.window"),
        thresholds=Thresholds(
            full_usage=opt(args, "verdict.full_usage"),
            false_full_hold=opt(args, "verdict.false_full_hold"),
            stuck_after=opt(args, "verdict.stuck_after"),
            leak_after=opt(args, "verdict.leak_after"),
            preempt_window=opt(args, "verdict.preempt_window"),
        ) if opt(args, "verdict.full_usage") is not None else defaults.thresholds,
        timeout=opt(args, "scrape.timeout") or defaults.timeout,
        max_bytes=opt(args, "scrape.max_bytes") or defaults.max_bytes,
        models_interval=opt(args, "models.interval") or defaults.models_interval,
        model_shape=shape,
        trust_env=bool(opt(args, "scrape.trust_env")),
        ca_file=ca_file(args),
    )
