"""vLLM's command line: the flags we read and the types vLLM 0.32.0 parses them with.

`vllm serve MODEL --flag value` (or `--flag=value`, `_` and `-` alike); a value vLLM itself would refuse is
ignored with a note rather than used.
"""

from __future__ import annotations

from typing import Any

from ...core.units import human_readable_int, parse_tokens

DEFAULT_PORT = 8000  # `vllm serve` without --port

# vLLM flags we read, by their canonical name; vLLM accepts `_` and `-` alike.
_INT_FLAGS = ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size", "port")
_INT_FLAGS_ALSO = ("tensor_parallel_size", "data_parallel_size", "num_gpu_blocks_override")
_STR_FLAGS = ("model", "served_model_name", "kv_cache_dtype", "host", "gpu_memory_utilization")
_BOOL_FLAGS = ("enable_chunked_prefill", "enable_prefix_caching")
_SHORT = {"-tp": "tensor_parallel_size", "-dp": "data_parallel_size", "-O": "compilation_config"}


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


# Each int flag with the type vLLM 0.32.0 parses it with (`_compute_kwargs`, vllm/engine/arg_utils.py:389-405):
# human_readable_int only for max_num_batched_tokens (and a few we do not read), _or_auto for max_model_len.
_INT_TYPES = {
    "max_model_len": (_vllm_max_model_len, "a token count such as 32768, 32k or 32K, or auto"),
    "max_num_batched_tokens": (_vllm_human_int, "a token count such as 8192, 8k or 8K"),
    "max_num_seqs": (_vllm_int, "a whole number (vLLM reads it with int())"),
    "block_size": (_vllm_int, "a whole number (vLLM reads it with int())"),
    "port": (_vllm_int, "a whole number (vLLM reads it with int())"),
    "tensor_parallel_size": (_vllm_int, "a whole number (vLLM reads it with int())"),
    "data_parallel_size": (_vllm_int, "a whole number (vLLM reads it with int())"),
    "num_gpu_blocks_override": (_vllm_int, "a whole number (vLLM reads it with int())"),
}


def parse_vllm_args(argv: list[str]) -> dict[str, Any]:
    """Pick the flags we understand out of a vLLM command line (`vllm serve M --flag v`, `--flag=v`)."""
    return parse_vllm_args_noting(argv)[0]


def parse_vllm_args_noting(argv: list[str], where: str = "--vllm-args") -> tuple[dict[str, Any], list[str]]:
    """`parse_vllm_args`, and one note per value that is ignored because vLLM would not take it (`where` names
    the command line in the note)."""
    out: dict[str, Any] = {}
    notes: list[str] = []
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
        negated = name.startswith("no_") and name[3:] in _BOOL_FLAGS
        if negated or name in _BOOL_FLAGS:
            base = name[3:] if negated else name
            if inline is not None:
                out[base] = inline.lower() in ("1", "true", "yes")
            else:
                out[base] = not negated
            continue
        if name not in _INT_FLAGS + _INT_FLAGS_ALSO + _STR_FLAGS and name != "api_key":
            continue
        if inline is None:
            if i >= len(argv):
                break
            inline = argv[i]
            i += 1
        if name == "api_key":
            continue  # never keep a secret we were not asked for
        if name in _INT_TYPES:
            conv, grammar = _INT_TYPES[name]
            shown = "--" + name.replace("_", "-")
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
    return out, notes


def is_vllm_server(argv: list[str]) -> bool:
    joined = " ".join(argv[:6])
    return ("vllm" in joined) and ("serve" in argv or any("api_server" in a for a in argv[:4]))
