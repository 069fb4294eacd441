"""vLLM's command line: the flags we read and the types vLLM parses them with (0.32.0, and 0.33.0 where it differs).

`vllm serve MODEL --flag value` (or `--flag=value`, `_` and `-` alike; a JSON flag also as `--flag.key value`);
a value vLLM itself would refuse is ignored with a note rather than used.

The JSON flags are flattened into the names the rest of the product reads:

- `--speculative-config` / `-sc` (and 0.33's `--spec-method`, `--spec-model`, `--spec-tokens`) →
  `speculative_method` (vLLM's own inference when only a model is named), `speculative_model`,
  `num_speculative_tokens`, and `num_lookahead_tokens`, the KV slots vLLM reserves past the scheduled tokens
  (`num_lookahead_tokens`, below);
- `--kv-transfer-config` → `kv_connector`, `kv_role`, `kv_lease_duration` (NIXL's `kv_connector_extra_config`).
"""

from __future__ import annotations

import json
from typing import Any

from ...core.units import human_readable_int, parse_tokens

DEFAULT_PORT = 8000  # `vllm serve` without --port

# vLLM flags we read, by their canonical name; vLLM accepts `_` and `-` alike.
_INT_FLAGS = ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size", "port")
_INT_FLAGS_ALSO = ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size",
                   "num_gpu_blocks_override", "max_num_active_seqs", "prefill_schedule_interval",
                   "kv_cache_memory_bytes")
_STR_FLAGS = ("model", "served_model_name", "kv_cache_dtype", "host", "gpu_memory_utilization", "performance_mode",
              "attention_backend")
_FLOAT_FLAGS = ("watermark",)
_BOOL_FLAGS = ("enable_chunked_prefill", "enable_prefix_caching", "scheduler_reserve_full_isl", "enable_sleep_mode")
_JSON_FLAGS = ("speculative_config", "kv_transfer_config")
# 0.33's short forms of --speculative-config's keys (vllm/engine/arg_utils.py:2108-2121 @0.33.0)
_SPEC_KEYS = {"spec_method": "method", "spec_model": "model", "spec_tokens": "num_speculative_tokens"}
_SHORT = {"-tp": "tensor_parallel_size", "-dp": "data_parallel_size", "-pp": "pipeline_parallel_size",
          "-O": "compilation_config", "-sc": "speculative_config"}

# The model types vLLM 0.33.0 treats as MTP drafters (`MTPModelTypes`, vllm/config/speculative.py:38-67):
# a method named so is "mtp" (:1246-1250).
MTP_MODEL_TYPES = frozenset({
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp", "glm_ocr_mtp",
    "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp",
    "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp", "bailing_hybrid_mtp", "mtp",
    "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "step5_mtp", "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp",
    "inkling_mtp", "glm5_next_mtp",
})
KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")  # KVTransferConfig.kv_role (vllm/config/kv_transfer.py)
# NIXL's hold of a finished prefill's blocks when kv_connector_extra_config sets no kv_lease_duration, s
# (nixl/base_scheduler.py:82-88 @0.32.0 and @0.33.0; renewed by the decode side's heartbeats every lease // 6 s;
# VLLM_NIXL_ABORT_REQUEST_TIMEOUT, 480 s since PR#25897, is gone from vllm/envs.py in both releases).
NIXL_DEFAULT_LEASE = 30
# The longest a producer held blocks for its decode side in any release (VLLM_NIXL_ABORT_REQUEST_TIMEOUT, PR#25897):
# the hold a leak verdict waits out when the lease is vLLM's default rather than stated.
NIXL_LONGEST_HOLD = 480


def parse_token_count(text: str) -> int | None:
    """vLLM's human-readable lengths (`core.units.parse_tokens`); None for 'auto', -1 or anything unreadable."""
    try:
        return parse_tokens(text)
    except ValueError:
        return None


def _vllm_int(text: str) -> int | None:
    """A flag vLLM 0.32.0 types as a plain `int` (max_num_seqs, block_size, tensor_parallel_size, ...): Python's
    int(); 'None' or '' is vLLM's optional_type for "unset" (vllm/engine/arg_utils.py:172-178 @0.32.0)."""
    if text in ("", "None"):
        return None
    return int(text)


def _vllm_max_model_len(text: str) -> int | None:
    return None if text in ("", "None") else parse_tokens(text)  # human_readable_int_or_auto


def _vllm_human_int(text: str) -> int | None:
    return None if text in ("", "None") else human_readable_int(text)


# Each int flag with the type vLLM parses it with (`_compute_kwargs`, vllm/engine/arg_utils.py:389-405 @0.32.0,
# :395-410 @0.33.0): human_readable_int for max_num_batched_tokens and kv_cache_memory_bytes (and a few we do not
# read), _or_auto for max_model_len, int() for the rest.
_INT_TYPES = {
    "max_model_len": (_vllm_max_model_len, "a token count such as 32768, 32k or 32K, or auto"),
    "max_num_batched_tokens": (_vllm_human_int, "a token count such as 8192, 8k or 8K"),
    "kv_cache_memory_bytes": (_vllm_human_int, "a number of bytes such as 6990059274, 7g (x1000) or 7G (x1024)"),
    "max_num_seqs": (_vllm_int, "a whole number (vLLM reads it with int())"),
    "max_num_active_seqs": (_vllm_int, "a whole number (vLLM reads it with int())"),
    "prefill_schedule_interval": (_vllm_int, "a whole number (vLLM reads it with int())"),
    "block_size": (_vllm_int, "a whole number (vLLM reads it with int())"),
    "port": (_vllm_int, "a whole number (vLLM reads it with int())"),
    "tensor_parallel_size": (_vllm_int, "a whole number (vLLM reads it with int())"),
    "data_parallel_size": (_vllm_int, "a whole number (vLLM reads it with int())"),
    "pipeline_parallel_size": (_vllm_int, "a whole number (vLLM reads it with int())"),
    "num_gpu_blocks_override": (_vllm_int, "a whole number (vLLM reads it with int())"),
}


def speculative_method(spec: dict[str, Any]) -> str | None:
    """The drafting method vLLM settles on for a `--speculative-config`, None when it names neither method nor model.

    vLLM 0.33.0 (the same in 0.32.0): no method → "ngram" for the model "ngram"/"[ngram]", else "draft_model"
    (vllm/config/speculative.py:1236-1244); an MTP model type as method → "mtp" (:1246-1250); a "draft_model"
    whose model name holds "eagle-", "eagle3", "dflash" or "dspark" → that method (:1432-1468; vLLM also detects
    EAGLE-family drafters by the draft config's architectures, which a command line does not show).
    """
    method = spec.get("method")
    model = spec.get("model")
    if method is None:
        if model is None:
            return None
        method = "ngram" if str(model) in ("ngram", "[ngram]") else "draft_model"
    method = str(method)
    if method in MTP_MODEL_TYPES:
        return "mtp"
    if method == "[ngram]":
        return "ngram"
    if method == "draft_model" and model is not None:
        name = str(model).lower()
        for key, found in (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"), ("dspark", "dspark")):
            if key in name:
                return found
    return method


def num_lookahead_tokens(method: str | None, k: int | None) -> int | None:
    """KV slots vLLM reserves past the tokens the target model is scheduled for, per request and step
    (`VllmConfig.num_lookahead_tokens`, vllm/config/vllm.py:626-652 @0.33.0, :615-641 @0.32.0): k + 1 for DFlash
    (a bonus query plus one per draft token), k for EAGLE, EAGLE3, MTP and a draft model, 0 without a drafter with
    its own KV (ngram, suffix). DSpark takes k + 1 only with a fill-in drafter (`sample_from_anchor` false in its
    config, which the command line does not show): k is read. None when k is unknown."""
    if method is None:
        return 0
    if method in ("ngram", "ngram_gpu", "suffix", "custom_class", "extract_hidden_states"):
        return 0
    if k is None:
        return None
    if method == "dflash":
        return k + 1
    if method in ("eagle", "eagle3", "mtp", "draft_model", "dspark"):
        return k
    return 0


def _flatten_spec(spec: dict[str, Any], where: str, notes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    method = speculative_method(spec)
    if method is None:
        return out
    out["speculative_method"] = method
    if spec.get("model") is not None:
        out["speculative_model"] = str(spec["model"])
    k = spec.get("num_speculative_tokens")
    if k is not None:
        try:
            k = int(k)
        except (TypeError, ValueError):
            notes.append(f"{where} --speculative-config num_speculative_tokens {k!r} is ignored: vLLM expects a "
                         "whole number above 0")
            k = None
        else:
            if k <= 0:
                notes.append(f"{where} --speculative-config num_speculative_tokens {k} is ignored: vLLM expects a "
                             "whole number above 0 (vllm/config/speculative.py:413)")
                k = None
    if k is not None:
        out["num_speculative_tokens"] = k
    lookahead = num_lookahead_tokens(method, k)
    if lookahead is not None:
        out["num_lookahead_tokens"] = lookahead
    elif method not in ("ngram", "suffix"):
        notes.append(f"{where} --speculative-config names no num_speculative_tokens: vLLM takes the drafter's own "
                     "(n_predict), which the command line does not show, so the per-step lookahead is unknown")
    return out


def _flatten_kv_transfer(cfg: dict[str, Any], where: str, notes: list[str]) -> dict[str, Any]:
    """`--kv-transfer-config` (vllm/config/kv_transfer.py; `kv_role` one of KV_ROLES). NIXL's producer holds a
    finished prefill's blocks for its decode side under a lease, `kv_connector_extra_config.kv_lease_duration`
    (default 30 s, renewed by the decode side's heartbeats every lease // 6 s: nixl/base_scheduler.py:82-88 and
    pull_scheduler.py:246-265 @0.32.0, the same lines @0.33.0)."""
    out: dict[str, Any] = {}
    if cfg.get("kv_connector") is not None:
        out["kv_connector"] = str(cfg["kv_connector"])
    role = cfg.get("kv_role")
    if role is not None:
        if role in KV_ROLES:
            out["kv_role"] = str(role)
        else:
            notes.append(f"{where} --kv-transfer-config kv_role {role!r} is ignored: vLLM takes one of "
                         f"{', '.join(KV_ROLES)}")
    extra = cfg.get("kv_connector_extra_config")
    if isinstance(extra, dict) and extra.get("kv_lease_duration") is not None:
        try:
            out["kv_lease_duration"] = int(extra["kv_lease_duration"])
        except (TypeError, ValueError):
            notes.append(f"{where} --kv-transfer-config kv_lease_duration {extra['kv_lease_duration']!r} is "
                         "ignored: it is no whole number of seconds")
    return out


def parse_vllm_args(argv: list[str]) -> dict[str, Any]:
    """Pick the flags we understand out of a vLLM command line (`vllm serve M --flag v`, `--flag=v`)."""
    return parse_vllm_args_noting(argv)[0]


def _set_dotted(json_parts: dict[str, dict[str, Any]], name: str, key: str, raw: str) -> None:
    """`--speculative-config.num_speculative_tokens 3`: vLLM's dotted form of a JSON flag (FlexibleArgumentParser);
    the value is JSON where it parses as JSON, else the string."""
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    part = json_parts.setdefault(name, {})
    *path, last = key.split(".")
    for p in path:
        part = part.setdefault(p, {})
    part[last] = value


def parse_vllm_args_noting(argv: list[str], where: str = "--vllm-args") -> tuple[dict[str, Any], list[str]]:
    """`parse_vllm_args`, and one note per value that is ignored because vLLM would not take it (`where` names
    the command line in the note)."""
    out: dict[str, Any] = {}
    notes: list[str] = []
    json_parts: dict[str, dict[str, Any]] = {}
    # `vllm serve MODEL`: the model is the first positional after `serve`.
    if "serve" in argv:
        i = argv.index("serve")
        if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out["model"] = argv[i + 1]
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("-"):
            continue
        if "=" in token:
            flag, inline = token.split("=", 1)
        else:
            flag, inline = token, None
        name = _SHORT.get(flag) or flag.lstrip("-").replace("-", "_")
        if name == "attention_config.backend":  # --attention-config.backend X, the newer spelling (0.14+)
            name = "attention_backend"
        dotted = None
        if "." in name:
            base, dotted = name.split(".", 1)
            if base not in _JSON_FLAGS:
                continue
            name = base
            dotted = flag.lstrip("-").split(".", 1)[1]  # keys keep vLLM's own spelling
        negated = name.startswith("no_") and name[3:] in _BOOL_FLAGS
        if negated or name in _BOOL_FLAGS:
            base = name[3:] if negated else name
            if inline is not None:
                out[base] = inline.lower() in ("1", "true", "yes")
            else:
                out[base] = not negated
            continue
        known = _INT_FLAGS + _INT_FLAGS_ALSO + _STR_FLAGS + _FLOAT_FLAGS + _JSON_FLAGS + tuple(_SPEC_KEYS)
        if name not in known and name != "api_key":
            continue
        if inline is None:
            if i >= len(argv):
                break
            inline = argv[i]
            i += 1
        shown = "--" + name.replace("_", "-")
        if name == "api_key":
            continue  # never keep a secret we were not asked for
        if name in _JSON_FLAGS:
            if dotted is not None:
                _set_dotted(json_parts, name, dotted, inline)
                continue
            try:
                doc = json.loads(inline)
            except ValueError:
                notes.append(f"{where} {shown} is ignored: it is not JSON ({inline[:60]!r})")
                continue
            if not isinstance(doc, dict):
                notes.append(f"{where} {shown} is ignored: vLLM expects a JSON object")
                continue
            json_parts.setdefault(name, {}).update(doc)
            continue
        if name in _SPEC_KEYS:
            key = _SPEC_KEYS[name]
            json_parts.setdefault("speculative_config", {})[key] = inline
            continue
        if name in _FLOAT_FLAGS:
            try:
                w = float(inline)
            except ValueError:
                notes.append(f"{where} {shown} {inline!r} is ignored: vLLM expects a number")
                continue
            if not 0.0 <= w < 1.0:  # SchedulerConfig.watermark: Field(ge=0.0, lt=1.0), vllm/config/scheduler.py:196
                notes.append(f"{where} {shown} {inline!r} is ignored: vLLM takes a fraction in [0, 1)")
                continue
            out[name] = w
            continue
        if name in _INT_TYPES:
            conv, grammar = _INT_TYPES[name]
            try:
                parsed = conv(inline)
            except ValueError:
                notes.append(f"{where} {shown} {inline!r} is ignored: vLLM expects {grammar}")
                continue
            least = 2 if name == "num_gpu_blocks_override" else 1
            if parsed is not None and parsed < least:
                why = ("leaves no usable block (vLLM keeps one null block, so at least 2 are needed)" if least == 2
                       else "is not a positive number")
                notes.append(f"{where} {shown} {inline!r} is ignored: it {why}")
                continue
            if parsed is not None:
                out[name] = parsed
        else:
            out[name] = inline
    if "speculative_config" in json_parts:
        out.update(_flatten_spec(json_parts["speculative_config"], where, notes))
    if "kv_transfer_config" in json_parts:
        out.update(_flatten_kv_transfer(json_parts["kv_transfer_config"], where, notes))
    active, seqs = out.get("max_num_active_seqs"), out.get("max_num_seqs")
    if active is not None and seqs is not None and active > seqs:
        # vLLM refuses to start (SchedulerConfig.__post_init__, vllm/config/scheduler.py:338-345 @0.33.0).
        notes.append(f"{where} --max-num-active-seqs {active} is ignored: vLLM refuses it above --max-num-seqs "
                     f"{seqs} (max_num_active_seqs ({active}) cannot be greater than max_num_seqs ({seqs}).)")
        del out["max_num_active_seqs"]
    config_file = any(a == "--config" or a.startswith("--config=") for a in argv)  # YAML flags we do not read
    if "enable_sleep_mode" not in out and is_vllm_server(argv) and not config_file:
        # A whole command line (the server's program and its flags) without --enable-sleep-mode: vLLM's default,
        # off (vllm/engine/arg_utils.py `enable_sleep_mode: bool = False` @0.10.2 and @0.32.0); the engine cannot
        # be put to sleep. A bare list of flags says nothing of the others.
        out["enable_sleep_mode"] = False
    return out, notes


def is_vllm_server(argv: list[str]) -> bool:
    joined = " ".join(argv[:6])
    return ("vllm" in joined) and ("serve" in argv or any("api_server" in a for a in argv[:4]))
