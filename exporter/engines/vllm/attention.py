"""vLLM's attention backends: the KV block sizes each one accepts, and how vLLM picks the size when none is asked.

From vLLM 0.32.0's backends (`get_supported_kernel_block_sizes` in vllm/v1/attention/backends/*.py): an explicit
list, or `MultipleOf(n)`. Without `--block-size`, vLLM asks the backend(s) for their preferred size and logs
"Setting kv cache block size to N for <backends> backend(s)." when it is not the default 16
(`Platform.update_block_size_for_backend`, vllm/platforms/interface.py:750-795 @0.32.0); on CPU it sets 128
(vllm/platforms/cpu.py:293), 16 for CPU MLA whatever was asked (:273-280). Hybrid models may raise it further
so that one page holds a Mamba state ("Setting attention block size to N tokens").
"""

from __future__ import annotations

DEFAULT_BLOCK_SIZE = 16  # CacheConfig.DEFAULT_BLOCK_SIZE (vllm/config/cache.py:72 @0.32.0)
_LARGEST = 256  # the what-if lists stop here

# backend name -> (the sizes it lists, the multiple it accepts; 0 for none)
BLOCK_SIZES: dict[str, tuple[tuple[int, ...], int]] = {
    "FLASH_ATTN": ((), 16),  # flash_attn.py:355-365 (64 on XPU; FA4 fp8 and head_dim 256 pin one size)
    "TRITON_ATTN": ((), 16),  # triton_attn.py:315-316
    "FLEX_ATTENTION": ((), 16),
    "FLASHINFER": ((16, 32, 64), 0),  # flashinfer.py:460-480 (128-1024 too on Blackwell with trtllm-gen)
    "FLASHMLA": ((64,), 0),  # mla/flashmla.py:58-59
    "FLASHMLA_SPARSE": ((64,), 0),
    "CUTLASS_MLA": ((128,), 0),  # mla/cutlass_mla.py
    "FLASHINFER_MLA": ((32, 64), 0),
    "FLASH_ATTN_MLA": ((), 16),
    "TRITON_MLA": ((), 16),
    "CPU_ATTN": ((), 32),  # cpu_attn.py:65-66
    "CPU_MLA": ((16,), 0),
    "AMX_MLA": ((), 32),
    "ROCM_ATTN": ((), 16),
    "ROCM_AITER_UNIFIED_ATTN": ((), 16),
    "TURBOQUANT": ((16, 32, 64, 128), 0),
}
# Names older releases print for the same backends ("Using Flash Attention backend.", "Using Torch SDPA backend.").
ALIASES = {"FLASH ATTENTION": "FLASH_ATTN", "FLASHATTENTION": "FLASH_ATTN", "FLASHINFER": "FLASHINFER",
           "XFORMERS": "XFORMERS", "TORCH SDPA": "TORCH_SDPA", "TORCH_SDPA": "TORCH_SDPA", "TRITON": "TRITON_ATTN",
           "PALLAS": "PALLAS", "IPEX": "IPEX"}


def check_block_size(block_size: int) -> None:
    """vLLM's refusal of a block size no attention backend takes, as one sentence (ValueError): every GPU backend
    takes multiples of 16 at least (FlashAttention, Triton, FlexAttention: MultipleOf(16),
    vllm/v1/attention/backends/flash_attn.py:365 @0.32.0), the CPU one multiples of 32 (cpu_attn.py:65-66)."""
    if block_size < 1 or block_size % 16:
        raise ValueError(f"block size {block_size} is not a multiple of 16: vLLM's GPU attention backends refuse "
                         "it (FlashAttention, Triton, FlexAttention: MultipleOf(16), "
                         "vllm/v1/attention/backends/flash_attn.py:365; MLA backends take 64 or 128)")


def canonical(name: str) -> str:
    """A backend as vLLM's AttentionBackendEnum names it: `AttentionBackendEnum.FLASH_ATTN` and "Flash Attention"
    become FLASH_ATTN."""
    bare = name.strip().strip("'\"").removeprefix("AttentionBackendEnum.").removeprefix("_Backend.")
    return ALIASES.get(bare.upper(), bare.upper().replace(" ", "_"))


def accepts(backend: str | None, block_size: int) -> bool | None:
    """Whether `backend` takes `block_size`; None when the backend's sizes are not known here."""
    if backend is None or canonical(backend) not in BLOCK_SIZES:
        return None
    sizes, multiple = BLOCK_SIZES[canonical(backend)]
    return block_size in sizes or (multiple > 0 and block_size % multiple == 0)


def what_if_sizes(backend: str | None, chosen: int) -> tuple[int, ...]:
    """The block sizes to show beside `chosen`: those the backend takes (multiples as powers of two up to 256);
    for a backend not known here, 16, 32, 64 and 128 (vLLM's GPU default and the sizes its backends share)."""
    known = None if backend is None else BLOCK_SIZES.get(canonical(backend))
    if known is None:
        sizes = {16, 32, 64, 128}
    else:
        listed, multiple = known
        sizes = set(listed)
        size = multiple
        while 0 < size <= _LARGEST:
            sizes.add(size)
            size *= 2
    return tuple(sorted(sizes | {chosen}))
