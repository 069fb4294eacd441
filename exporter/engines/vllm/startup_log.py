"""What a pasted vLLM start-up log states about capacity (the plan inputs it fills in: planning/startup_log.py).

Reads the lines vLLM prints at start-up (format strings of `vllm/v1/core/kv_cache_utils.py`,
`vllm/v1/worker/gpu_worker.py`, `vllm/platforms/interface.py`, `vllm/entrypoints/utils.py`; V1 0.9-0.33):
"Available KV cache memory: X GiB" (one per worker; the CPU build's "Explicitly set (X/Y) GiB for KV
cache"), "Reset SSM cache type to float32", "Overriding num_gpu_blocks=N with
num_gpu_blocks_override=M", "GPU KV cache size: N tokens" and "Maximum concurrency for L tokens per
request: C x" (one line or two), "Setting attention block size to N tokens", "Setting kv cache block size to N for
<backend>", "the estimated maximum model
length is N", and the flags of "non-default args: {...}" / "Initializing a V1 LLM engine (vX) with config:".
"""

from __future__ import annotations

import re

from ..base import AttentionFacts, LogFacts
from .attention import canonical

_MEMORY = re.compile(r"^([^\n]*?)Available KV cache memory: (\d+(?:\.\d+)?) GiB", re.M)
# With --kv-cache-memory-bytes vLLM skips profiling and prints the pool it reserved instead (`format_gib`: rounded
# to 2 decimals, vllm/v1/worker/gpu_worker.py:664-675 @0.33.0); the exact bytes are in "non-default args".
_RESERVED = re.compile(r"^([^\n]*?)reserved (\d+(?:\.\d+)?) GiB memory for KV Cache as specified by "
                       r"kv_cache_memory_bytes", re.M)
# Worker process names (vllm/v1/executor/multiproc_executor.py:1088-1096): "Worker", then _DP<r> with DP,
# _PP<r> with PP, _PCP<r>, _TP<r> with TP: a PP×TP1 worker is "Worker_PP1", with no _TP part.
_RANK = re.compile(r"Worker(?:_DP\d+)?_PP(\d+)(?![\d])|rank=(\d+)")
_MEMORY_ANY = re.compile(r"^.*(?:Available KV cache memory|KV cache size:|Maximum concurrency for|"
                         r"as specified by kv_cache_memory_bytes).*$", re.M)
_TOKENS_STRICT = re.compile(r"KV cache size: \d{1,3}(?:,\d{3})* tokens|KV cache size: \d+ tokens")
# "Setting kv cache block size to %d for %s backend(s)." (vllm/platforms/interface.py:775-779): the
# backend's block size when the user set none (FlashMLA 64, CUTLASS MLA 128, ...).
_BACKEND_BLOCK = re.compile(r"Setting kv cache block size to (\d+) for ([\w/]+) backend")
_CPU_MEMORY = re.compile(r"Explicitly set \((\d+(?:\.\d+)?)/[\d.]+\) GiB for KV cache")  # vllm/v1/worker/cpu_worker.py
_SSM_FLOAT32 = re.compile(r"Reset SSM cache type to float32|Updating mamba_ssm_cache_dtype to 'float32'")
_TOKENS = re.compile(r"(\w+) KV cache size: (\d{1,3}(?:,\d{3})+|\d+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: (\d+(?:\.\d+)?)x")
_OVERRIDE = re.compile(r"Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)")
_ATTN_BLOCK = re.compile(r"Setting attention block size to (\d+) tokens")
_ESTIMATED = re.compile(r"max seq len \((\d+)\).*?estimated maximum model length is (\d+)", re.S)
_VERSION = re.compile(r"(?:LLM engine \(v|version )(\d+\.\d+[\w.+-]*)")
_ARG = re.compile(r"'(model|max_model_len|tensor_parallel_size|pipeline_parallel_size|data_parallel_size|block_size|"
                  r"max_num_seqs|max_num_batched_tokens|kv_cache_dtype|dtype|gpu_memory_utilization|"
                  r"num_gpu_blocks_override|enable_prefix_caching|async_scheduling|mamba_ssm_cache_dtype|"
                  r"kv_cache_memory_bytes|watermark)': "
                  r"('[^']*'|[\d.]+|True|False)")
# --hf-overrides in "non-default args: {...}" ('hf_overrides': {...}) and in "args: Namespace(...)" (before 0.8)
_HF_POSITIONS = re.compile(r"\bhf_overrides'?(?:: |=)\{[^}]*'max_position_embeddings': (\d+)")
_CONFIG = re.compile(r"\b(model|max_seq_len|tensor_parallel_size|pipeline_parallel_size|data_parallel_size|"
                     r"kv_cache_dtype|enable_prefix_caching)=('[^']*'|[\w.]+)")

# Lines each start-up of the API server prints once, in this order of preference: the banner's version (0.11 on:
# vllm/entrypoints/utils.py `log_version_and_model`; before: "vLLM API server version X",
# vllm/entrypoints/openai/api_server.py) and the parsed command line ("non-default args: {...}" from 0.8,
# "args: Namespace(...)" before). The engine's lines ("Initializing a V1 LLM engine") repeat once per
# data-parallel engine, so they cannot mark a start-up.
_STARTS = (re.compile(r"^.*(?:█\s+version \d|vLLM API server version \d)", re.M),
           re.compile(r"^.*(?:non-default args: \{|\bargs: Namespace\()", re.M))
# A pasted shell command that starts vLLM (env assignments first): `VLLM_X=1 vllm serve ...`, `python -m vllm...`.
_COMMAND = re.compile(r"^(?:\$ )?(?:\w+=\S*\s+)*(?:vllm serve\b|python[\d.]* -m vllm\.)", re.M)


def last_startup(text: str) -> str:
    """The part of a log from its last start-up on: a file vLLM appends to across restarts holds each start-up
    (a pod's log volume, `>>`), and only the newest describes the engine that runs. The whole text when no line
    marks a start-up (an excerpt) or one does (what precedes it, such as the pasted `VLLM_ATTENTION_BACKEND=X vllm
    serve ...` command, belongs to it); a later start-up from the command that started it when the paste has it
    after the previous start-up's marker."""
    for marker in _STARTS:
        starts = [m.start() for m in marker.finditer(text)]
        if len(starts) > 1:
            commands = [m.start() for m in _COMMAND.finditer(text, starts[-2], starts[-1])]
            begin = commands[-1] if commands and commands[-1] > starts[-2] else starts[-1]
            return text[begin:]
        if starts:
            return text
    return text


def parse(text: str) -> LogFacts:
    """The capacity facts of a start-up log's last start-up (`last_startup`); ValueError when it has none."""
    text = last_startup(text)
    flags: dict[str, str] = {}
    for m in _CONFIG.finditer(text):
        key = "max_model_len" if m.group(1) == "max_seq_len" else m.group(1)
        flags.setdefault(key, m.group(2).strip("'"))
    for m in _ARG.finditer(text):
        flags[m.group(1)] = m.group(2).strip("'")  # the user's flags win over the resolved config
    if (hf := _HF_POSITIONS.search(text)) is not None:
        # --hf-overrides '{"max_position_embeddings": N}': the model config vLLM ran with (its length check
        # reads the overridden value, vllm/config/model.py `get_and_verify_max_len`)
        flags["max_position_embeddings"] = hf.group(1)
    tp = int(flags.get("tensor_parallel_size", "1"))
    by_stage: dict[int, float] = {}
    plain: list[float] = []
    for m in [*_MEMORY.finditer(text), *_RESERVED.finditer(text)]:
        gib = float(m.group(2))
        rank = _RANK.search(m.group(1))
        if rank is None:
            plain.append(gib)
        elif rank.group(1) is not None:
            by_stage.setdefault(int(rank.group(1)), gib)
        else:
            by_stage.setdefault(int(rank.group(2)) // tp, gib)
    plain += [float(m.group(1)) for m in _CPU_MEMORY.finditer(text)]
    unread = []
    for m in _MEMORY_ANY.finditer(text):
        line = m.group(0)
        ok = ("Available KV cache memory" not in line or _MEMORY.search(line)) and \
             ("as specified by kv_cache_memory_bytes" not in line or _RESERVED.search(line)) and \
             ("KV cache size:" not in line or _TOKENS_STRICT.search(line)) and \
             ("Maximum concurrency for" not in line or _CONCURRENCY.search(line))
        if not ok:
            unread.append(line.strip())
    memory = tuple(by_stage[k] for k in sorted(by_stage)) if by_stage else tuple(plain[:1])
    if _SSM_FLOAT32.search(text):
        flags.setdefault("mamba_ssm_cache_dtype", "float32")
    tokens = _TOKENS.search(text)
    conc = _CONCURRENCY.search(text)
    over = _OVERRIDE.search(text)
    block = _ATTN_BLOCK.search(text)
    est = _ESTIMATED.search(text)
    version = _VERSION.search(text)
    backend = _BACKEND_BLOCK.search(text)
    facts = LogFacts(
        version=version.group(1) if version else None,
        model=flags.get("model"),
        kv_memory_gib=memory,
        num_gpu_blocks=int(over.group(1)) if over else None,
        override=int(over.group(2)) if over else None,
        kv_tokens=int(tokens.group(2).replace(",", "")) if tokens else None,
        max_model_len=int(conc.group(1).replace(",", "")) if conc else (int(est.group(1)) if est else None),
        max_concurrency=float(conc.group(2)) if conc else None,
        attention_block_size=int(block.group(1)) if block else None,
        estimated_max_model_len=int(est.group(2)) if est else None,
        flags=tuple(sorted(flags.items())),
        backend_block_size=int(backend.group(1)) if backend else None,
        backend=backend.group(2) if backend else None,
        unread=tuple(unread),
        attention=attention(text),
    )
    if not (facts.kv_memory_gib or facts.kv_tokens or facts.override or facts.estimated_max_model_len):
        if unread:
            raise ValueError(f"the log's capacity line cannot be read: {unread[0]!r}")
        raise ValueError("the log has no capacity line (Available KV cache memory, KV cache size, "
                         "Overriding num_gpu_blocks, estimated maximum model length)")
    return facts


# -- the attention backend, the block size and the KV dtype in effect ---------------------------------------------
# Each form vLLM has printed (cuda.py `get_attn_backend_cls` @0.32.0: "Using %s attention backend out of potential
# backends: %s." when it chose, "Using %s backend." when asked; rocm.py "... Overriding with %s out of potential
# backends"; V0 and V1 before 0.10: "Using Flash Attention backend[ on V1 engine]."; the CPU platform names its
# backend only from 0.24 to 0.28 ("Using HND KV cache layout for CPU_ATTN backend.") and for MLA (cpu.py:163,175)).
# Vision-encoder ("for vit attention", "for MMEncoderAttention"), MLA-prefill and MoE lines name other kernels.
_CHOSEN = re.compile(r"Using (\w+) attention backend out of potential backends: \[([^\]]*)\]")
_ROCM_CHOSEN = re.compile(r"Overriding with (\w+) out of potential backends: \[([^\]]*)\]")
_NAMED = re.compile(r"Using (?:AttentionBackendEnum\.|_Backend\.)?([A-Z][A-Z0-9_]+) backend"
                    r"(?: \(selected via [^)]*\))?\.?\s*$", re.M)
_SPELLED = re.compile(r"Using (Flash Attention|FlashInfer|XFormers|Torch SDPA|Triton) backend(?: on V1 engine)?\.?\s*$",
                      re.M)
_CPU_LAYOUT = re.compile(r"Using \w+ KV cache layout for (\w+) backend")
# "Cannot use FLASH_ATTN backend on Volta", V1 before 0.10 "Cannot use Flash Attention backend for Turing GPUs."
_CANNOT = re.compile(r"Cannot use (?:AttentionBackendEnum\.)?(\w+(?: \w+)?) backend (?:on|for) ([\w ]+?)\.?\s*$", re.M)
_PRECLUDED = re.compile(r"--block-size (\d+) precluded higher-priority backend\(s\) ([\w, ]+)\. Using (\w+) instead")
_ASKED_BACKEND = re.compile(r"'attention_backend': '?(?:AttentionBackendEnum\.)?(\w+)|AttentionConfig\(backend=<?"
                            r"(?:AttentionBackendEnum\.)?(\w+)|VLLM_ATTENTION_BACKEND=(\w+)")
_ASKED_BLOCK = re.compile(r"'block_size': (\d+)|Namespace\(.*?\bblock_size=(\d+)", re.S)
_ASKED_KV_DTYPE = re.compile(r"'kv_cache_dtype': '(\w+)'|Namespace\(.*?\bkv_cache_dtype='(\w+)'", re.S)
_FORCED_BLOCK = re.compile(r"requires block_size=(\d+), overriding user-specified block_size=(\d+)")
_HYBRID_BLOCK = re.compile(r"Setting attention block size to (\d+) tokens")
_CONFIG_LINE = re.compile(r"Initializing an? (?:V\d )?LLM engine \(v[^)]*\) with config: (.*)$", re.M)
_CONFIG_KV = re.compile(r"\bkv_cache_dtype=(\w+)")
_CONFIG_DTYPE = re.compile(r"\bdtype=(?:torch\.)?(\w+)")
_FP8_STORE = re.compile(r"Using (fp8\w*) data type to store kv cache|Using DeepSeek's (\w+) KV cache format")
_CPU_POOL = re.compile(r"\bCPU KV cache size: ")  # the CPU platform's pool line (kv_cache_utils.py @0.32.0)
_V0_BLOCKS = re.compile(r"# (?:GPU|gpu|cpu|CPU) blocks: (\d+)")
# vLLM's `--kv-cache-dtype fp8` is fp8_e4m3 (vllm/config/cache.py CacheDType @0.32.0).
_SAME_DTYPE = {"fp8": "fp8_e4m3"}


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _block_size_from_capacity(text: str) -> tuple[int | None, str | None]:
    """The block size the capacity lines imply: N blocks ("Overriding num_gpu_blocks", V0 "# GPU blocks: N"), the
    concurrency C for L tokens, and the "KV cache size: T tokens". vLLM printed C = N / ceil(L / bs) (0.2x on)
    or N × bs / L (V0, V1 up to ~0.18), T = N × bs or int(C × L) (kv_cache_utils.py, by release): the one block size
    that reproduces both lines. None when the log lacks them or several sizes fit."""
    over = _OVERRIDE.search(text)
    v0 = _V0_BLOCKS.search(text)
    conc = _CONCURRENCY.search(text)
    if conc is None or (over is None and v0 is None):
        return None, None
    n = int(over.group(2)) if over else int(v0.group(1)) if v0 else 0
    length, c = _int(conc.group(1)), float(conc.group(2))
    size = _TOKENS.search(text)
    tokens = _int(size.group(2)) if size else None
    fits = []
    for bs in sorted({2 ** k for k in range(13)} | set(range(16, 1025, 16))):
        per_request = -(-length // bs)
        grouped, flat = n / per_request, n * bs / length
        if not any(abs(round(x, 2) - c) < 1e-9 for x in (grouped, flat)):
            continue
        if tokens is not None and tokens not in (n * bs, int(grouped * length), int(flat * length)):
            continue
        fits.append(bs)
    if len(fits) != 1:
        return None, None
    return fits[0], (f"the capacity lines ({n} blocks, {conc.group(0)}"
                     + (f", {size.group(0)}" if size else "") + ")")


def _backend(text: str) -> tuple[str | None, str | None, tuple[str, ...]]:
    """(the backend vLLM selected, the line naming it, the candidates it chose from), first worker's."""
    for pattern in (_CHOSEN, _ROCM_CHOSEN):
        m = pattern.search(text)
        if m:
            names = tuple(canonical(x) for x in re.findall(r"'([^']+)'", m.group(2)))
            return canonical(m.group(1)), m.group(0), names
    found = [(m.start(), canonical(m.group(1)), m.group(0)) for p in (_NAMED, _SPELLED, _CPU_LAYOUT)
             for m in p.finditer(text)]
    if not found:
        return None, None, ()
    _, name, line = min(found)
    return name, line.strip(), ()


def attention(text: str) -> AttentionFacts:
    """The attention backend, block size and KV dtype a start-up log states, asked and in effect, with one note per
    difference, of the log's last start-up (`last_startup`). Where the log says nothing, None: the log of vLLM
    0.32.0's CPU build, for one, names no backend (its platform takes CPU_ATTN for every non-MLA model without a
    log line, vllm/platforms/cpu.py:177-179)."""
    text = last_startup(text)
    backend, line, candidates = _backend(text)
    notes: list[str] = []
    asked_backend = None
    if (m := _ASKED_BACKEND.search(text)) is not None:
        picked = next(g for g in m.groups() if g is not None)
        asked_backend = None if picked == "None" else canonical(picked)
    block_asked = None
    if (m := _ASKED_BLOCK.search(text)) is not None:
        block_asked = int(next(g for g in m.groups() if g is not None))
    block, source = None, None
    forced = _FORCED_BLOCK.search(text)
    set_by_backend = _BACKEND_BLOCK.search(text)
    hybrid = _HYBRID_BLOCK.search(text)
    if forced:
        block, source = int(forced.group(1)), forced.group(0)
        block_asked = block_asked or int(forced.group(2))
    elif hybrid:
        block, source = int(hybrid.group(1)), hybrid.group(0)
    elif set_by_backend:
        block, source = int(set_by_backend.group(1)), set_by_backend.group(0)
    else:
        block, source = _block_size_from_capacity(text)
    if block is None and block_asked is not None:
        block, source = block_asked, "--block-size (no line of the log says otherwise)"
    if block is None and _CPU_POOL.search(text) and "non-default args:" in text:
        # (Only where the log prints vLLM's non-default args: they show no --block-size was given.)
        # vLLM's CPU build sets the block size itself when --block-size is not given: 16 for its MLA backend,
        # 128 for every other model (vllm/platforms/cpu.py:273-293 @0.32.0), and logs no line about it.
        mla = backend is not None and "MLA" in backend
        block = 16 if mla else 128
        source = (f"vLLM's CPU default without --block-size ({'MLA' if mla else 'not MLA'}: "
                  f"vllm/platforms/cpu.py:{'273-280' if mla else '292-293'} @0.32.0)")
    if block is not None and block_asked is not None and block != block_asked:
        notes.append(f"--block-size {block_asked} was asked, vLLM runs {block}-token blocks: {source}")
    if (m := _PRECLUDED.search(text)) is not None:
        notes.append(f"--block-size {m.group(1)} ruled out the faster backend(s) {m.group(2)}: vLLM runs "
                     f"{m.group(3)} instead (without --block-size it would pick {m.group(2).split(',')[0]})")
    # Each worker logs it: one note per backend and reason.
    for refused, where in dict.fromkeys((canonical(m.group(1)), m.group(2)) for m in _CANNOT.finditer(text)):
        how = "was asked but" if refused == asked_backend else "(vLLM's first choice)"
        notes.append(f"{refused} {how} cannot run on {where}: vLLM runs {backend or 'another backend'}")
    if asked_backend and backend and asked_backend != backend and not _CANNOT.search(text):
        notes.append(f"attention backend {asked_backend} was asked, vLLM runs {backend}: {line}")
    kv_asked = None
    if (m := _ASKED_KV_DTYPE.search(text)) is not None:
        kv_asked = next(g for g in m.groups() if g is not None)
        kv_asked = None if kv_asked == "auto" else kv_asked
    kv = None
    config = _CONFIG_LINE.search(text)
    if (m := _FP8_STORE.search(text)) is not None:
        kv = next(g for g in m.groups() if g is not None)
    elif config and (c := _CONFIG_KV.search(config.group(1))) is not None:
        kv = c.group(1)
        if kv == "auto" and (d := _CONFIG_DTYPE.search(config.group(1))) is not None:
            kv = f"{d.group(1)} (auto: the model dtype)"
    if kv_asked and kv and _SAME_DTYPE.get(kv_asked, kv_asked) != _SAME_DTYPE.get(kv.split()[0], kv.split()[0]):
        notes.append(f"--kv-cache-dtype {kv_asked} was asked, vLLM stores the KV cache as {kv}")
    return AttentionFacts(backend=backend, backend_line=line, candidates=candidates, backend_asked=asked_backend,
                          block_size_asked=block_asked, block_size=block, block_size_source=source,
                          kv_cache_dtype_asked=kv_asked, kv_cache_dtype=kv, notes=tuple(notes))
