"""Parsed flags → the pipeline's `Settings`, built in this one place for serve, diagnose and recommend."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..pipeline.config import Overrides, split_args
from ..pipeline.target import Settings
from ..pipeline.verdict import Thresholds
from ..planning.estimate import load_model
from .flags import ENV_PREFIX, UsageError, opt


def api_key(args: argparse.Namespace) -> str | None:
    """vLLM's --api-key from --target-api-key-file, else VLLM_HEADROOM_TARGET_API_KEY."""
    path = opt(args, "target_api_key_file")
    if path:
        try:
            return Path(path).read_text().strip() or None
        except OSError as exc:
            raise UsageError(f"cannot read --target-api-key-file {path}: {exc.strerror}") from None
    return os.environ.get(ENV_PREFIX + "TARGET_API_KEY") or None


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
        target_utilization=opt(args, "autoscaling.target_utilization") or defaults.target_utilization,
    )
