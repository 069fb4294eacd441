"""Capacity and headroom of one vLLM engine: pure functions of the scraped numbers and the config.

Symbols: N = num_gpu_blocks of the engine, B = usable blocks, bs = block size, u = the panel's usage
fraction, L = max_model_len, P / M = profile prompt and max_tokens, W = worst-case blocks per request.
Each formula is written once, here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..core.records import quick_init
from ..engines.base import FIRST_CHUNK as FIRST_CHUNK
from ..engines.base import FULL_PROMPT as FULL_PROMPT


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for non-negative integers."""
    return -(-a // b)


def usable_blocks(num_gpu_blocks: int, has_null_block: bool) -> int:
    """B = N − 1 on V1, whose block 0 is a never-freed null block; B = N on V0."""
    return num_gpu_blocks - 1 if has_null_block else num_gpu_blocks


def used_blocks(usage: float, num_gpu_blocks: int, has_null_block: bool, usage_counts_null_block: bool) -> int:
    """Blocks in use by requests: u × (N − 1) from 0.11; u × N − 1 on V1 ≤ 0.10 (null block counted); u × N on V0."""
    if has_null_block and usage_counts_null_block:
        used = usage * num_gpu_blocks - 1
    elif has_null_block:
        used = usage * (num_gpu_blocks - 1)
    else:
        used = usage * num_gpu_blocks
    return max(0, round(used))


def free_blocks(capacity: int, used: int) -> int:
    """Free = B − used (evictable prefix-cache blocks count as free, as they do for vLLM's allocator)."""
    return max(0, capacity - used)


def blocks_for_tokens(tokens: int, block_size: int) -> int:
    """Blocks holding `tokens` tokens: ceil(tokens / bs)."""
    return ceil_div(max(tokens, 0), block_size)


def worst_case_blocks(prompt: int, max_tokens: int, max_model_len: int | None, block_size: int) -> int:
    """W = ceil(min(P + M, L) / bs): the blocks one request holds if it reaches max_tokens."""
    total = prompt + max_tokens if max_model_len is None else min(prompt + max_tokens, max_model_len)
    return max(1, blocks_for_tokens(total, block_size))


def uncached_prompt(prompt: int, hit_share: float) -> int:
    """Prompt tokens the queue head must find room for: P × (1 − prefix-cache hit share), at least one (vLLM
    always computes the last prompt token: `get_computed_blocks` caps hits at num_tokens − 1,
    vllm/v1/core/kv_cache_manager.py @0.32.0). Cached blocks a running request already holds need no new
    block; the admission gate counts only new blocks (`can_fit_full_sequence`)."""
    share = min(max(hit_share, 0.0), 1.0)
    return max(1, math.ceil(prompt * (1.0 - share)))


def in_flight_floor(used: int, running: int) -> int | None:
    """ceil(used / running): blocks held per running request now, a floor on what each holds at its end
    (shared prefix blocks count once, so the floor stays a floor). None when nothing runs."""
    return ceil_div(used, running) if running > 0 and used > 0 else None


def slot_headroom(max_num_seqs: int, running: int) -> int:
    """Free scheduler slots: max_num_seqs − running."""
    return max(0, max_num_seqs - running)


# The admission rules by name (engines/base.py): FULL_PROMPT (vLLM >= 0.19 and V0: the whole uncached prompt
# must fit, then the step's chunk), FIRST_CHUNK (V1 < 0.19: only the step's first prefill chunk must fit).


@quick_init
@dataclass(frozen=True)
class AdmissionNeed:
    """What admitting the queue head takes: `blocks` per such request (the larger of the two gates), the
    `watermark_blocks` that must stay free besides (once, not per request), the `lookahead_tokens` the per-step
    gate adds, and each gate's blocks (`full_prompt_blocks` None where the release has no full-prompt gate)."""

    blocks: int
    step_blocks: int
    full_prompt_blocks: int | None
    watermark_blocks: int = 0
    lookahead_tokens: int = 0
    gate: str = FULL_PROMPT
    reserved_blocks: int = 0  # kept for in-flight async KV loads (the per-step gate of an async-load head only)
    # The fewest blocks the head may need where its need is a range (`with_head_floor`: the per-step gate with
    # prefix caching on also counts the head's cached blocks that sit evictable, which no metric shows): the
    # step's chunk alone (the per-step gate's blocks, before `reserved_blocks`). None where the need is one figure.
    least_blocks: int | None = None

    def admits(self, free: int, running: int) -> bool:
        """The head passes both gates with `free` blocks: full-prompt blocks + watermark <= free, and step
        blocks + watermark <= free − reserved (the watermark only beside a running request)."""
        wm = self.watermark_blocks if running > 0 else 0
        full_ok = self.full_prompt_blocks is None or self.full_prompt_blocks + wm <= free
        return full_ok and self.step_blocks + wm <= free - self.reserved_blocks

    def may_admit(self, free: int, running: int) -> bool:
        """The head passes the gates with `free` blocks at the fewest blocks it may need (`least_blocks`; `admits`
        where the need is one figure)."""
        if self.least_blocks is None:
            return self.admits(free, running)
        wm = self.watermark_blocks if running > 0 else 0
        return self.least_blocks + wm <= free - self.reserved_blocks


def admission_need(prompt: int, block_size: int, rule: str = FULL_PROMPT, token_budget: int | None = None,
                   lookahead: int = 0, watermark_blocks: int = 0, max_model_len: int | None = None,
                   reserved_blocks: int = 0) -> AdmissionNeed:
    """Free blocks the queue head (uncached prompt P tokens) must find, by the release's rule.

    - The full-prompt gate (FULL_PROMPT, vLLM >= 0.19, `scheduler_reserve_full_isl` default True):
      ceil(min(P, L) / bs) + watermark against the free blocks, no lookahead, no reserved blocks
      (`allocate_slots(full_sequence_must_fit=True)`, vllm/v1/core/kv_cache_manager.py:531-548 @0.33.0, :522-539
      @0.32.0; `can_fit_full_sequence`, vllm/v1/core/sched/scheduler.py:731-742 @0.19.1). V0 likewise allocates
      the whole prompt (`can_allocate`, vllm/core/block_manager.py:111-145 @0.8.5, less a watermark of 1 %).
    - The per-step gate (every V1 release): ceil(min(chunk + lookahead, L) / bs) + watermark against the free
      blocks less `reserved_blocks` (kv_cache_manager.py:550-588 @0.33.0, :541-579 @0.32.0), the chunk
      min(P, token budget) (scheduler.py:1295-1346 @0.33.0, :670 @0.18.0, :437 @0.11.0), the lookahead
      `num_lookahead_tokens` (k for EAGLE, MTP and draft models, k + 1 for DFlash: vllm/config/vllm.py:626-652
      @0.33.0). Reserved blocks apply to an async KV load only (the remaining blocks of the loads already in flight
      plus the spec-decode step's, scheduler.py:1420-1430 @0.33.0), which no metric exports; for any other head
      they are 0. `blocks` is then max(full-prompt blocks, step blocks + reserved): what the head needs free.
    - FIRST_CHUNK (V1 < 0.19, or `--no-scheduler-reserve-full-isl`): the per-step gate alone. With the budget
      unknown, the whole prompt (the conservative reading: never more admissions than the engine makes).

    The watermark (`int(watermark × num_gpu_blocks)`, kv_cache_manager.py:209-210 @0.33.0) is kept once, not per
    request, and only when a request already runs (:518-525): see `kv_admission_headroom`.
    """
    tokens = prompt if max_model_len is None else min(prompt, max_model_len)
    chunk = tokens if token_budget is None else min(tokens, token_budget)
    step_tokens = chunk + max(lookahead, 0)
    if max_model_len is not None:
        step_tokens = min(step_tokens, max_model_len)
    step = max(1, blocks_for_tokens(step_tokens, block_size))
    if rule == FULL_PROMPT:
        full = max(1, blocks_for_tokens(tokens, block_size))
        return AdmissionNeed(max(full, step + reserved_blocks), step, full, watermark_blocks, lookahead, rule,
                             reserved_blocks)
    if token_budget is None:
        step = max(step, blocks_for_tokens(tokens, block_size))
    return AdmissionNeed(step + reserved_blocks, step, None, watermark_blocks, lookahead, rule, reserved_blocks)


def budget_admissions(token_budget: int, taken: float, prompt_tokens: int) -> float:
    """Prefills per step the token budget lets through: (budget − tokens the running requests take) / P, the running
    requests scheduled first (a decode takes 1 token, a running prefill its chunk). V1 schedules running requests
    before waiting ones and admits while budget is left (`while token_budget > 0`, vllm/v1/core/sched/scheduler.py
    @0.32.0): below 1, a prefill of P takes whole steps, and the queue drains at that rate."""
    return max(token_budget - taken, 0.0) / max(prompt_tokens, 1)


def budget_heads(token_budget: int, taken: float, prompt_tokens: int, chunked: bool = True) -> int:
    """Waiting requests one step's token budget takes in, the running requests' `taken` tokens scheduled first: with
    chunked prefill every request is admitted while budget is left, the last with a partial chunk
    (`num_new_tokens = min(num_new_tokens, token_budget)` inside `while token_budget > 0`:
    vllm/v1/core/sched/scheduler.py:334/:435 @0.10.2, :912/:1169 @0.32.0), so ceil(room / P); without it a prompt
    larger than the budget left stops the scan (:429-433 @0.10.2, :1160-1167 @0.32.0): floor(room / P)."""
    room = budget_admissions(token_budget, taken, prompt_tokens)
    return math.ceil(room) if chunked else math.floor(room)


def admission_blocks(prompt: int, block_size: int, rule: str = FULL_PROMPT, token_budget: int | None = None,
                     lookahead: int = 0, max_model_len: int | None = None) -> int:
    """Blocks the queue head must find per request (`admission_need(...).blocks`; the watermark apart)."""
    return admission_need(prompt, block_size, rule, token_budget, lookahead, 0, max_model_len).blocks


def watermark_blocks(watermark: float, num_gpu_blocks: int) -> int:
    """Blocks `--watermark` keeps free when admitting: int(watermark × num_blocks), num_blocks counting the null
    block (`KVCacheManager.__init__`, vllm/v1/core/kv_cache_manager.py:209-210 @0.33.0, :207-208 @0.32.0)."""
    return int(watermark * num_gpu_blocks) if watermark > 0 else 0


def kv_admission_headroom(free: int, prompt_blocks: int, watermark: int = 0, running: int = 1) -> int:
    """Requests whose admission blocks fit in free blocks now: floor((free − watermark) / blocks), the watermark
    applied only once a request runs (vLLM: `has_scheduled_reqs=bool(self.running)`, so the first admission into
    an idle engine needs no watermark: 1 when it fits, then as many as fit above the watermark)."""
    per = max(prompt_blocks, 1)
    if watermark <= 0:
        return free // per
    if running <= 0:
        return 0 if free < per else max(1, (free - watermark) // per)
    return max(0, (free - watermark) // per)


def admission_headroom(slots: int | None, kv: int) -> int:
    """vLLM's real rule: min(max_num_seqs − running, floor(free / admission blocks)); KV alone if slots unknown."""
    return kv if slots is None else min(slots, kv)


def safe_headroom(capacity: int, used: int, running: int, worst_case: int) -> int:
    """More requests that fit if all reach max_tokens: floor((B − max(used, running × W)) / W); < 0 = oversubscribed."""
    return math.floor((capacity - max(used, running * worst_case)) / worst_case)


def worst_case_headroom(slots: int | None, safe: int) -> int:
    """Requests the engine can take now and still hold if every request reaches its worst case:
    max(0, min(max_num_seqs − running, safe headroom)); the safe headroom alone when max_num_seqs is unknown."""
    return max(0, safe if slots is None else min(slots, safe))


def effective_usage(capacity: int, worst_case: int, slots: int | None, safe: int) -> float:
    """Pool share a new worst-case request cannot have: 1 − max(0, min(slot headroom, safe headroom)) × W / B."""
    room = safe if slots is None else min(slots, safe)
    return min(1.0, max(0.0, 1.0 - max(0, room) * worst_case / capacity))


def max_concurrency(capacity: int, worst_case: int) -> int:
    """floor(B / W): requests that fit at once if each holds W blocks."""
    return capacity // worst_case


@quick_init
@dataclass(frozen=True)
class Inputs:
    """What one engine's derivation needs, already resolved."""

    num_gpu_blocks: int
    block_size: int
    has_null_block: bool
    usage_counts_null_block: bool
    usage: float
    running: int
    waiting: int
    max_model_len: int | None
    max_num_seqs: int | None
    prompt_tokens: int | None  # profile P
    max_tokens: int | None  # profile M
    kv_cache_max_concurrency: float | None = None  # vLLM ≥0.24, group-aware (hybrid/sliding window)
    kv_cache_size_tokens: int | None = None
    admission_rule: str = FULL_PROMPT  # the release's rule (the engine's release rules); see admission_blocks
    max_num_batched_tokens: int | None = None  # the token budget, for FIRST_CHUNK
    prefix_hit_share: float = 0.0  # share of prompt tokens found in the prefix cache lately (0..1)
    lookahead_tokens: int = 0  # the per-step gate's lookahead (the drafter's num_lookahead_tokens)
    watermark: float = 0.0  # vLLM's --watermark where the release applies it, else 0


@quick_init
@dataclass(frozen=True)
class Pool:
    """Everything derived for one engine at one scrape that does not depend on max_num_seqs: blocks, the queue
    head's admission blocks, the worst case per request and the safe headroom. The judgement reads it; the slot
    figures are added once the cap of the answer is known (`with_slots`)."""

    kv_capacity_blocks: int
    kv_capacity_tokens: int
    kv_used_blocks: int
    kv_free_blocks: int
    block_size_tokens: int
    panel_usage_ratio: float
    prompt_blocks: int
    worst_case_blocks_profile: int
    worst_case_blocks_max_model_len: int | None
    kv_admission_headroom_requests: int
    safe_headroom_requests: int
    max_concurrency_profile: int
    max_concurrency_max_model_len: int | None
    hybrid: bool
    held_blocks_per_running: int | None = None  # ceil(used / running): the in-flight floor of a request's size
    worst_case_blocks_profile_only: int = 0  # W from the profile alone, before the in-flight floor
    admission: AdmissionNeed | None = None  # what the head's admission takes (gates, watermark, lookahead)
    head_admissible: bool = True  # the queue head passes the admission gates with the free blocks now
    head_may_be_admissible: bool = False  # ... at the fewest blocks it may need (`AdmissionNeed.may_admit`)

    @property
    def head_fits(self) -> bool:
        """The queue head's blocks (and the watermark beside running requests) fit in the free blocks now."""
        return self.kv_free_blocks >= self.prompt_blocks and self.head_admissible

    @property
    def head_may_fit(self) -> bool:
        """The head fits at the fewest blocks it may need (`AdmissionNeed.least_blocks`): where it does and
        `head_fits` does not, how much of the head's prompt sits cached and evictable decides."""
        return self.head_fits or self.head_may_be_admissible


@quick_init
@dataclass(frozen=True, kw_only=True)
class Headroom(Pool):
    """The pool's figures and the slot figures under the answer's max_num_seqs (stated, inferred or unknown)."""

    effective_usage_ratio: float
    slot_headroom_requests: int | None
    admission_headroom_requests: int
    # The most requests vLLM may admit now when the exposition gives only a range (the LoRA cap: `with_lora`);
    # `admission_headroom_requests` is then the fewest. None: the figure is exact.
    admission_headroom_requests_max: int | None = None


def is_hybrid(num_gpu_blocks: int, block_size: int, kv_size_tokens: int | None, max_conc: float | None,
              max_model_len: int | None) -> bool:
    """vLLM's own group-aware capacity disagrees with N × bs: several KV groups (sliding window, Mamba, ...)."""
    if kv_size_tokens is None or max_conc is None or max_model_len is None:
        return False
    uniform = num_gpu_blocks / ceil_div(max_model_len, block_size)
    return abs(uniform - max_conc) > 0.01 * max(uniform, 1e-9)


def pool(x: Inputs) -> Pool:
    """The numbers of one engine that do not depend on max_num_seqs (`x.max_num_seqs` is not read)."""
    capacity = usable_blocks(x.num_gpu_blocks, x.has_null_block)
    used = min(capacity, used_blocks(x.usage, x.num_gpu_blocks, x.has_null_block, x.usage_counts_null_block))
    free = free_blocks(capacity, used)
    bs = x.block_size
    hybrid = is_hybrid(x.num_gpu_blocks, bs, x.kv_cache_size_tokens, x.kv_cache_max_concurrency, x.max_model_len)
    w_max: int | None = None
    if x.max_model_len is not None:
        if hybrid and x.kv_cache_max_concurrency:
            # Do not recompute group math vLLM already did: blocks per max_model_len request = N / concurrency.
            w_max = max(1, math.ceil(x.num_gpu_blocks / x.kv_cache_max_concurrency))
        else:
            w_max = blocks_for_tokens(x.max_model_len, bs)
    prompt = x.prompt_tokens if x.prompt_tokens is not None else 1
    need = admission_need(uncached_prompt(prompt, x.prefix_hit_share), bs, x.admission_rule,
                          x.max_num_batched_tokens, x.lookahead_tokens, watermark_blocks(x.watermark, x.num_gpu_blocks),
                          x.max_model_len)
    prompt_blocks = need.blocks
    if x.max_tokens is not None:
        w = worst_case_blocks(prompt, x.max_tokens, x.max_model_len, bs)
        if w_max is not None:
            w = min(w, w_max)
    elif w_max is not None:
        w = w_max
    else:
        w = max(1, blocks_for_tokens(prompt, bs))
    w_profile = w
    held = in_flight_floor(used, x.running)
    if held is not None and held > w:
        # Requests in flight already hold more than the profile's worst case: a new workload the profile (of
        # finished requests) has not seen. Each will end at least this large on average.
        w = held if w_max is None else min(max(w, held), max(w_max, held))
    kv = kv_admission_headroom(free, prompt_blocks, need.watermark_blocks, x.running)
    safe = safe_headroom(capacity, used, x.running, w)
    tokens = x.kv_cache_size_tokens if hybrid and x.kv_cache_size_tokens else capacity * bs
    return Pool(
        kv_capacity_blocks=capacity,
        kv_capacity_tokens=tokens,
        kv_used_blocks=used,
        kv_free_blocks=free,
        block_size_tokens=bs,
        panel_usage_ratio=x.usage,
        prompt_blocks=prompt_blocks,
        worst_case_blocks_profile=w,
        worst_case_blocks_max_model_len=w_max,
        kv_admission_headroom_requests=kv,
        safe_headroom_requests=safe,
        max_concurrency_profile=max_concurrency(capacity, w),
        max_concurrency_max_model_len=None if w_max is None else max_concurrency(capacity, w_max),
        hybrid=hybrid,
        held_blocks_per_running=held,
        worst_case_blocks_profile_only=w_profile,
        admission=need,
        head_admissible=need.admits(free, x.running),
    )


def with_head_floor(p: Pool, blocks: int, running: int, token_budget: int | None = None,
                    chunk_is_least: bool = False) -> Pool:
    """`p` with the queue head's prompt floored at `blocks` (what requests in flight hold each, when they already
    hold more than any finished request did: the head is as likely one of the new workload's), and the admission
    need and headroom under it (watermark and gates as in `pool`). The worst case per request is unchanged (it is
    floored by the same evidence).

    The floor is the head's size, not what each gate asks of it: the full-prompt gate asks the whole prompt, the
    per-step gate (every V1 release; the only one before 0.19) only the step's chunk, min(prompt, token budget)
    plus the lookahead (`num_new_tokens = min(num_new_tokens, token_budget)` before `allocate_slots`,
    vllm/v1/core/sched/scheduler.py:435/:474 @0.10.2, :1169/:1256 @0.32.0), as `admission_need` has it, but only
    with prefix caching off and the budget stated (`token_budget` given, `chunk_is_least` False). With prefix
    caching on the step gate also counts the head's cached prefix blocks that sit evictable in the free queue
    (`get_num_blocks_to_allocate` adds `num_evictable_computed_blocks`, vllm/v1/core/single_type_kv_cache_manager.py
    @0.10.2), which no metric shows: a head resumed after a preemption needs up to its whole prompt; with the budget
    not stated the chunk is not known either. Then (`chunk_is_least`, `token_budget` the budget or the smallest it
    may have) the need is a range: the whole prompt at most (`blocks`, what the headroom counts: never more
    admissions than the engine makes), the step's chunk at least (`AdmissionNeed.least_blocks`,
    `head_may_be_admissible`); where only that end fits, the verdict says what decides (verdict.classify). Engine
    truth, tests/fixtures/vllm-0.10.2/prod-kv: 304-573 blocks asked of 27-28k-token heads whose chunk is 256,
    beside 262-791 free. Without `token_budget` the step gate takes the whole prompt, one figure."""
    need = p.admission
    if need is None:
        if blocks <= p.prompt_blocks:
            return p
        return replace(p, prompt_blocks=blocks, head_admissible=p.kv_free_blocks >= blocks,
                       kv_admission_headroom_requests=kv_admission_headroom(p.kv_free_blocks, blocks, 0, running))
    step = blocks - need.reserved_blocks
    least: int | None = None
    if token_budget is not None:
        chunk = min(blocks, max(1, blocks_for_tokens(token_budget + max(need.lookahead_tokens, 0),
                                                     p.block_size_tokens)))
        if chunk_is_least:
            least = max(need.step_blocks, chunk)  # a range of the per-step gate only (below)
        else:
            step = chunk
    step = max(need.step_blocks, step)
    if need.full_prompt_blocks is not None:
        full = max(need.full_prompt_blocks, blocks)
        need = replace(need, full_prompt_blocks=full, step_blocks=step, blocks=max(full, step + need.reserved_blocks))
    else:
        need = replace(need, step_blocks=step, blocks=step + need.reserved_blocks,
                       least_blocks=least if least is not None and least < step else None)
    if need.blocks <= p.prompt_blocks and need == p.admission:
        return p
    return replace(p, prompt_blocks=need.blocks, admission=need, head_admissible=need.admits(p.kv_free_blocks, running),
                   head_may_be_admissible=need.may_admit(p.kv_free_blocks, running),
                   kv_admission_headroom_requests=kv_admission_headroom(p.kv_free_blocks, need.blocks,
                                                                        need.watermark_blocks, running))


def with_slots(p: Pool, max_num_seqs: int | None, running: int) -> Headroom:
    """`p` with the slot figures under `max_num_seqs` (None: unknown) for `running` requests."""
    slots = None if max_num_seqs is None else slot_headroom(max_num_seqs, running)
    return Headroom(
        kv_capacity_blocks=p.kv_capacity_blocks,
        kv_capacity_tokens=p.kv_capacity_tokens,
        kv_used_blocks=p.kv_used_blocks,
        kv_free_blocks=p.kv_free_blocks,
        block_size_tokens=p.block_size_tokens,
        panel_usage_ratio=p.panel_usage_ratio,
        prompt_blocks=p.prompt_blocks,
        worst_case_blocks_profile=p.worst_case_blocks_profile,
        worst_case_blocks_max_model_len=p.worst_case_blocks_max_model_len,
        kv_admission_headroom_requests=p.kv_admission_headroom_requests,
        safe_headroom_requests=p.safe_headroom_requests,
        max_concurrency_profile=p.max_concurrency_profile,
        max_concurrency_max_model_len=p.max_concurrency_max_model_len,
        hybrid=p.hybrid,
        held_blocks_per_running=p.held_blocks_per_running,
        worst_case_blocks_profile_only=p.worst_case_blocks_profile_only,
        admission=p.admission,
        head_admissible=p.head_admissible,
        head_may_be_admissible=p.head_may_be_admissible,
        effective_usage_ratio=effective_usage(p.kv_capacity_blocks, p.worst_case_blocks_profile, slots,
                                              p.safe_headroom_requests),
        slot_headroom_requests=slots,
        admission_headroom_requests=admission_headroom(slots, p.kv_admission_headroom_requests),
    )


def with_lora(h: Headroom, lora_admits: tuple[int, int] | None) -> Headroom:
    """`h` under vLLM's LoRA cap: of the waiting requests it lets through (fewest, most: verdict.lora_admissible;
    None: it holds none back) the next step admits no more than the slots and blocks allow. The admission headroom
    becomes the fewest, `admission_headroom_requests_max` the most: the exposition does not say how many waiting
    requests ask for a running adapter."""
    if lora_admits is None:
        return h
    fewest, most = lora_admits
    adm = h.admission_headroom_requests
    hi = min(adm, most)
    return replace(h, admission_headroom_requests=min(adm, fewest),
                   admission_headroom_requests_max=hi if hi != min(adm, fewest) else None)


def with_head_range(h: Headroom, kv_room_typical: int | None) -> Headroom:
    """`h` with the admission headroom as a range where the queue head's size is one: the fewest at the profile's
    quantile (`admission_headroom_requests`, as before), the most at its typical prompt, `kv_room_typical` heads
    of which the free blocks admit (`admission_headroom_requests_max`). A range already given (the LoRA cap's:
    `with_lora`) stands; None or no wider: unchanged."""
    if kv_room_typical is None or h.admission_headroom_requests_max is not None:
        return h
    most = admission_headroom(h.slot_headroom_requests, kv_room_typical)
    if most <= h.admission_headroom_requests:
        return h
    return replace(h, admission_headroom_requests_max=most)


def derive(x: Inputs) -> Headroom:
    """All headroom numbers of one engine: `pool`, then `with_slots` under `x.max_num_seqs`."""
    return with_slots(pool(x), x.max_num_seqs, x.running)


@dataclass(frozen=True)
class KvBytes:
    """Absolute KV bytes per device of one engine at one scrape (needs the model's shape: --model-config)."""

    kv_bytes_per_token: int  # all layers, one token
    kv_bytes_per_block: int  # one pool block: a page for every layer of a KV-cache group (model.kv_layout)
    kv_free_bytes: int
    worst_case_request_bytes: int


def kv_bytes(h: Headroom, bytes_per_token: int, bytes_per_block: int) -> KvBytes:
    """Free and worst-case bytes = blocks × bytes per block, the block sized by vLLM's layer grouping."""
    return KvBytes(bytes_per_token, bytes_per_block, h.kv_free_blocks * bytes_per_block,
                   h.worst_case_blocks_profile * bytes_per_block)


# -- block waste: token slots of used blocks that hold no token ------------------------------------------------
#
# vLLM allocates KV in whole blocks of bs token slots: a request holding t tokens has ceil(t / bs) blocks, so
# ceil(t / bs) × bs − t of its slots hold nothing (`get_num_blocks_to_allocate`: cdiv(num_tokens, block_size) for
# the tokens that need a slot, vllm/v1/core/single_type_kv_cache_manager.py:213 @0.32.0). Only the
# last block of a request is partly filled: at most bs − 1 empty slots per running request (more only with
# speculative decoding's lookahead slots). vLLM's usage gauge counts blocks, not tokens, so these slots read as
# used (vllm-project/vllm PR#57336, open: 17-token prompts at block 16 showed 66.7 % block usage while 36.5 % of
# token slots held KV). Prefix caching shares only full blocks, so the partly filled tail is never shared.


def empty_slots(tokens: int, block_size: int) -> int:
    """Slots of a request's blocks that hold no token: ceil(t / bs) × bs − t."""
    return blocks_for_tokens(tokens, block_size) * block_size - max(tokens, 0)


@quick_init
@dataclass(frozen=True)
class Waste:
    """Share of the token slots in used blocks that hold no token, with its range (0..1 each).

    `basis` says what it rests on: "profile" (the lengths of finished requests, every running request assumed at
    a random point of such a life), "in_flight" (running requests and used blocks alone: each request's last
    block is partly filled, from empty to full) or "profile+in_flight" (both: the profile's value inside the
    in-flight bounds)."""

    ratio: float
    low: float
    high: float
    basis: str


def _ceil_sum(n: int, bs: int) -> int:
    """Σ ceil(t / bs) for t = 1 .. n (0 for n ≤ 0): q full blocks of bs moments each, then r moments of block q + 1."""
    if n <= 0:
        return 0
    q, r = divmod(n, bs)
    return bs * q * (q + 1) // 2 + r * (q + 1)


def life_waste(prompt: int, generated: int, block_size: int) -> Waste:
    """The empty-slot share of one request's blocks over its life, and its lowest and highest moment.

    After its prefill a request's KV holds t = P tokens; each decode step adds one, up to P + G − 1 (the KV of the
    last sampled token is never computed): G moments of one engine step each. The share is Σ empty / Σ slots over
    those moments (what a scrape sees on average when running requests are at random points of such a life);
    `low`/`high` are the extreme moments (what it sees when they move in step). O(1): Σ slots = bs × Σ ceil(t/bs),
    Σ empty = Σ slots − Σ t; the emptiest moment is the first of a block (the first moment, or the first of the
    second block), the fullest the last of a block (0 once a block fills, else the last moment)."""
    bs = max(block_size, 1)
    first, last = max(prompt, 1), max(prompt, 1) + max(generated, 1) - 1
    slots_sum = bs * (_ceil_sum(last, bs) - _ceil_sum(first - 1, bs))
    empty_sum = slots_sum - (first + last) * (last - first + 1) // 2
    b_first, b_last = blocks_for_tokens(first, bs), blocks_for_tokens(last, bs)
    high = (b_first * bs - first) / (b_first * bs)
    if b_last > b_first:
        high = max(high, (bs - 1) / ((b_first + 1) * bs))
        low = 0.0
    else:
        low = (b_last * bs - last) / (b_last * bs)
    return Waste(empty_sum / slots_sum, low, high, "profile")


def profile_waste(prompt_mean: float, prompt_range: tuple[int, int], generated_mean: float,
                  generated_range: tuple[int, int], block_size: int) -> Waste:
    """The empty-slot share for the profile's requests: the life-average at the mean lengths (`life_waste`), and
    as range the lowest and highest moment of any request whose prompt and output lengths lie in the histogram
    buckets they were observed in (t from the smallest prompt to the longest prompt + output − 1)."""
    estimate = life_waste(round(prompt_mean), max(1, round(generated_mean)), block_size).ratio
    first = prompt_range[0] + 1  # a bucket's lower bound is exclusive (Prometheus' `le` buckets)
    last = max(first, prompt_range[1] + max(generated_range[1], 1) - 1)
    band = life_waste(first, last - first + 1, block_size)
    return Waste(min(max(estimate, band.low), band.high), band.low, band.high, "profile")


def in_flight_waste(used_blocks: int, running: int, block_size: int) -> Waste | None:
    """Bounds from the gauges alone: `running` requests each leave 0 .. bs − 1 slots of their last block empty, in
    `used_blocks` × bs slots; the middle (half a block per request, the field guides' B / 2S) is the estimate.
    None when nothing runs or no block is used."""
    if running <= 0 or used_blocks <= 0:
        return None
    slots = used_blocks * block_size
    high = min(1.0, running * (block_size - 1) / slots)
    return Waste(high / 2, 0.0, high, "in_flight")


def block_waste(used_blocks: int, running: int, block_size: int, profile: Waste | None) -> Waste | None:
    """The engine's empty-slot share now: the profile's life-average inside the in-flight bounds.

    Without running requests there is no used block to speak of (None). Without a profile (nothing finished yet),
    the in-flight bounds alone. When the profile's range and the in-flight bounds do not overlap, the requests in
    flight are not the profile's (a new workload): the in-flight bounds alone."""
    bounds = in_flight_waste(used_blocks, running, block_size)
    if bounds is None:
        return None
    if profile is None:
        return bounds
    low, high = max(profile.low, bounds.low), min(profile.high, bounds.high)
    if low > high:
        return bounds
    return Waste(min(max(profile.ratio, low), high), low, high, "profile+in_flight")


def token_usage(block_usage: float, waste: Waste) -> tuple[float, float, float]:
    """The share of the pool's token slots that hold KV: block usage × (1 − waste), (estimate, low, high)."""
    return block_usage * (1 - waste.ratio), block_usage * (1 - waste.high), block_usage * (1 - waste.low)


def prefix_boundary_loss(hit_share: float, prompt: int, block_size: int) -> Waste | None:
    """The share of prompt tokens a shared prefix holds but the prefix cache cannot serve, because they do not
    fill a block (0..1, with its range); None without a prompt length.

    vLLM hashes and caches full blocks only ("We only hash full blocks", `request_block_hasher`,
    vllm/v1/core/kv_cache_utils.py:978-981 @0.32.0), and never serves the last prompt token from the cache
    (`max_cache_hit_length = num_tokens − 1`, vllm/v1/core/kv_cache_manager.py:290-298): of a prefix of S shared
    tokens only floor(S / bs) × bs hit, and the rest, 0 .. bs − 1 tokens, every request computes again. The range
    is therefore 0 .. (bs − 1) / P whatever the hits say; hits show that a shared prefix exists (estimate: half a
    block, (bs − 1) / 2P), no hits that none of a block or more does (estimate 0: a shorter one would hit nothing
    and lose all its tokens, inside the range). A block's hash chains its parent's and includes the LoRA name,
    multimodal hashes and, in the first block, the request's `cache_salt` (`generate_block_hash_extra_keys`,
    kv_cache_utils.py:625-663): requests with another adapter or salt share nothing, whatever their tokens."""
    if prompt <= 0:
        return None
    high = min(1.0, (block_size - 1) / prompt)
    return Waste(high / 2, 0.0, high, "prefix_hits") if hit_share > 0 else Waste(0.0, 0.0, high, "no_hits")
