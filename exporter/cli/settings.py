"""Parsed flags → the pipeline's `Settings`, built in this one place for serve, diagnose and recommend."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

from ..core import defaults as core_defaults
from ..core.units import format_size
from ..model.shape import ModelShape
from ..pipeline.capacity import KvPool
from ..pipeline.config import Overrides, parse_vllm_args, split_args
from ..pipeline.scrape import Tls
from ..pipeline.target import Settings
from ..pipeline.verdict import Thresholds
from ..planning import memory
from ..planning.estimate import load_model
from .flags import DRAFT_WITHOUT_SPEC, ENV_PREFIX, UsageError, opt

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
    key = key.strip()
    odd = next((c for c in key if not " " < c < "\x7f"), None)
    if odd is not None:
        # A byte-order mark (what some editors write first), a non-breaking space or any non-ASCII character: the
        # Authorization header is ASCII, so /v1/models would never be asked (httpx refuses to encode it).
        name = "a byte-order mark" if odd == "\ufeff" else f"the character U+{ord(odd):04X}"
        raise UsageError(f"{where} holds {name}: an HTTP header carries printable ASCII only, so no request to vLLM "
                         "would authenticate; write the key alone, as vLLM's --api-key has it (printf %s KEY > FILE)")
    if not key:
        raise UsageError(f"{where} is empty: no request to vLLM would carry a key; give the key or leave the "
                         "option out")
    return key


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


def _trust_env(args: argparse.Namespace) -> bool:
    """--scrape.trust-env, with the environment's proxies checked at start-up (UsageError for one httpx cannot
    use: every scrape would fail with an internal error)."""
    trust = bool(opt(args, "scrape.trust_env"))
    if trust:
        from ..pipeline.scrape import proxy_problem

        problem = proxy_problem()
        if problem is not None:
            raise UsageError(f"--scrape.trust-env: {problem}")
    return trust


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


def tls(args: argparse.Namespace) -> Tls:
    """--scrape.ca-file, --scrape.tls-server-name, --scrape.client-cert/-key and --scrape.insecure-skip-verify,
    checked together (UsageError for files that cannot be used, a key without a certificate, or a CA beside
    insecure-skip-verify, which would ignore it)."""
    from ..pipeline.scrape import ssl_context

    ca = ca_file(args)
    cert, key = opt(args, "scrape.client_cert"), opt(args, "scrape.client_key")
    insecure = bool(opt(args, "scrape.insecure_skip_verify"))
    name = opt(args, "scrape.tls_server_name") or None
    if key and not cert:
        raise UsageError("--scrape.client-key needs --scrape.client-cert (the certificate it belongs to)")
    if insecure and ca:
        raise UsageError("--scrape.insecure-skip-verify ignores --scrape.ca-file: give one of them")
    if insecure and name:
        raise UsageError("--scrape.insecure-skip-verify checks no name: drop --scrape.tls-server-name or it")
    if cert:
        try:
            ssl_context(None, False, cert, key)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            what = f"--scrape.client-cert {cert}" + (f" with --scrape.client-key {key}" if key else "")
            raise UsageError(f"cannot load {what}: {getattr(exc, 'strerror', None) or exc}") from None
    return Tls(ca_file=ca, insecure_skip_verify=insecure, client_cert=cert, client_key=key, server_name=name)


def settings_for(url: str, args: argparse.Namespace) -> Settings:
    """How to watch `url`, from the parsed flags; raises UsageError for a value that cannot be used."""
    try:
        vllm_args = split_args(args.vllm_args) if args.vllm_args else None
    except ValueError as exc:
        raise UsageError(f"--vllm-args cannot be split like a shell line: {exc}") from None
    shape = None
    indexed = None
    if opt(args, "model_config"):
        try:
            shape, indexed = load_model(Path(args.model_config))
        except ValueError as exc:
            raise UsageError(f"--model-config: {exc}") from None
    draft = None
    if opt(args, "draft_model_config"):
        try:
            draft = load_model(Path(args.draft_model_config))[0]
        except ValueError as exc:
            raise UsageError(f"--draft-model-config: {exc}") from None
    given = parse_vllm_args(vllm_args) if vllm_args else {}
    if draft is not None and vllm_args and given.get("speculative_method") is None:
        raise UsageError(DRAFT_WITHOUT_SPEC.format(where="--vllm-args has"))
    pool = kv_pool(args, shape, indexed, given)
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
        trust_env=_trust_env(args),
        tls=tls(args),
        draft_shape=draft,
        startup_log=opt(args, "vllm_startup_log"),
        kv_pool=pool,
        target_utilization=opt(args, "autoscaling.target_utilization") or defaults.target_utilization,
        load_window=opt(args, "autoscaling.load_window") or defaults.load_window,
    )


def kv_pool(args: argparse.Namespace, shape: ModelShape | None, indexed: int | None,
            vllm_args: dict[str, Any]) -> KvPool | None:
    """The KV pool per device the operator gave (--kv-cache-memory, or --gpu-memory with the weights), with its
    range: vLLM's gpu_memory_utilization from --vllm-args, else both of its defaults (0.9 up to 0.19, 0.92 from
    0.20); the activation reserve as stated, else 0 to twice our estimate's default. Raises UsageError for a pool
    that cannot be used (no --model-config, no weights)."""
    stated, gpu = opt(args, "kv_cache_memory"), opt(args, "gpu_memory")
    exact = opt(args, "kv_cache_memory_bytes")
    if exact is not None and stated is not None:
        raise UsageError("give the KV pool once: --kv-cache-memory or vLLM's --kv-cache-memory-bytes, not both")
    if stated is None and gpu is None and exact is None:
        return None
    if shape is None:
        raise UsageError("--kv-cache-memory, --kv-cache-memory-bytes and --gpu-memory size the KV cache from the "
                         "model's layout: give --model-config too")
    try:
        if exact is not None:
            memory.check_size("--kv-cache-memory-bytes", exact)
            return KvPool(exact, exact, f"--kv-cache-memory-bytes {exact:,}")
        if stated is not None:
            memory.check_size("--kv-cache-memory", stated)
            return KvPool(stated, stated, f"--kv-cache-memory {format_size(stated)}")
        memory.check_size("--gpu-memory", gpu)
        weights = opt(args, "weights_bytes") or indexed
        if weights is None and opt(args, "params") is not None:
            weights = memory.weights_from_params(opt(args, "params"), shape, shape.dtype)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if weights is None:
        raise UsageError("--gpu-memory needs the weights' size: a model folder with a safetensors index, "
                         "--weights-bytes or --params")
    tp = int(vllm_args.get("tensor_parallel_size") or 1)
    pp = int(vllm_args.get("pipeline_parallel_size") or 1)
    per_device = memory.weights_per_device(weights, tp, pp)
    util_text = vllm_args.get("gpu_memory_utilization")
    utils = (float(util_text), float(util_text)) if util_text else core_defaults.VLLM_GPU_MEMORY_UTILIZATION_DEFAULTS
    act = opt(args, "activation_memory")
    acts = (act, act) if act is not None else core_defaults.ACTIVATION_BYTES_RANGE
    low, high = memory.kv_pool_range(gpu, utils, per_device, acts)
    util_basis = f"gpu_memory_utilization {utils[0]:g}" if utils[0] == utils[1] else \
        f"gpu_memory_utilization {utils[0]:g}-{utils[1]:g} (vLLM's default by release)"
    act_basis = f"activations {format_size(act)}" if act is not None else \
        f"activations {format_size(acts[0])}-{format_size(acts[1])} (unstated)"
    stated_tp = "tensor_parallel_size" in vllm_args
    par = f"TP {tp}, PP {pp}" + ("" if stated_tp else " (vLLM's default, no --vllm-args says)")
    return KvPool(low, high, f"--gpu-memory {format_size(gpu)} x {util_basis} - weights {format_size(per_device)} "
                  f"per device ({par}) - {act_basis}")
