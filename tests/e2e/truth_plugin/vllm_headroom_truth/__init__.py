"""The engine's own truth, per scheduler step, from inside vLLM's V1 engine core (tests only).

A vLLM general plugin (entry point group `vllm.general_plugins`, see ../pyproject.toml). vLLM loads it in every
process; it does nothing unless the environment variable VLLM_HEADROOM_TRUTH names an output file. Then it wraps
`vllm.v1.core.sched.scheduler.Scheduler.schedule` and, inside each call, three instance methods the scheduler
consults while admitting waiting requests (`kv_cache_manager.allocate_slots`, the coordinator's
`get_num_blocks_to_allocate`, the block pool's `get_num_free_blocks`), plus the release's record of skipped
(deferred) requests. Nothing the engine decides is changed: every wrapper calls the original and returns its
result.

Output: JSON lines (append), one per scheduler step whose state or events differ from the last line written
("write on change": a steady decode step that admits, refuses, defers and preempts nothing and leaves every
state field equal is not written; its step number is skipped). `t` is the engine's `time.monotonic()` at the
start of the step (the same clock the load driver and the scraper use: CLOCK_MONOTONIC is system-wide), `k` the
step number (schedule() calls since start). State fields, written when they change (a reader carries them
forward):

    sr, sw   running / waiting as vLLM last reported them to its metrics (`make_stats`, the values a /metrics
             scrape shows until the next report) before this step: a scrape is joined to the step by these
    r0, w0   running / waiting (vLLM's own counts: waiting includes deferred and KV-holding requests) at entry
    r, w     the same after the step
    wd       waiting requests vLLM counts as deferred (`num_requests_waiting_by_reason{reason="deferred"}`, 0.32)
    free0, free   free KV blocks at entry / after the step (the block pool's free queue: cached-evictable count
             as free, the null block does not)
    left     token budget left after the step (max_num_scheduled_tokens minus the tokens it scheduled)
    head     id of the waiting request the admission scan stopped at (None: nothing waits but deferred ones)
    hp       its tokens (prompt, plus output for a resumed request)
    hb       its uncached prompt blocks, when this step (or an earlier one, for the same head) tried to allocate
             for it: cdiv(tokens - prefix-cache hits, block_size); None when the engine never looked it up
    stop     why the admission scan ended, in the release's own loop order: empty, deferred (every waiting
             request was skipped), preempted (no admission in a step that preempted), paused, token_budget,
             max_num_seqs, max_num_active_seqs, kv (allocate_slots refused the head), prefill_cadence,
             no_chunk_budget (chunked prefill off and the prompt exceeds the budget left), other
    pause    the scheduler's pause state when not UNPAUSED (0.32)

Events, written only in the step they happen: `adm` ids admitted (new and resumed), `res` the resumed ones,
`pre` ids preempted, `ref` {id, need, had, gate[, wm][, reserved]} when allocate_slots refused a waiting
request (`need` blocks against `had` free at the failing comparison; gate "full" is 0.32's full-prompt check,
"step" the per-step one), `dfr` {cause: count} requests skipped this step (lora, grammar, remote_kv, streaming,
stale_output, no_chunk_budget, encoder_cache, other), `hold` 1 when the step deferred prefills (DP prefill
cadence). Lines with `hdr` describe the engine (written once per scheduler), `cost` the recorder's own CPU time
(every 5 s), `error` a recorder fault (the recorder then stops; vLLM goes on).

Release adapters (each written from that release's scheduler source, vllm/v1/core/sched/scheduler.py):
`V032` for 0.32.x, `V010` for 0.10.x. Any other release gets an `error` line and no wrapper.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

ENV = "VLLM_HEADROOM_TRUTH"
STATE = ("sr", "sw", "r0", "w0", "r", "w", "wd", "free0", "free", "left", "head", "hp", "hb", "stop", "pause")
EVENTS = ("adm", "res", "pre", "ref", "dfr", "hold")
COST_EVERY_S = 5.0
FLUSH_EVERY_S = 0.2
_MISSING = object()
_installed = False


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _rid(request_id: str) -> str:
    return request_id[5:] if request_id.startswith("cmpl-") else request_id


class Writer:
    """The output file: opened on first write (only the engine core process writes). A daemon thread flushes it
    every 0.2 s, so the last steps before the engine goes idle reach the file too (buffered IO is thread-safe)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.f: Any = None
        self.last: dict[str, Any] = {}
        self.dirty = False

    def emit(self, line: dict[str, Any], now: float) -> None:
        if self.f is None:
            self.f = open(self.path, "a", buffering=1 << 20)  # noqa: SIM115 - kept open for the process
            threading.Thread(target=self._flusher, name="headroom-truth-flush", daemon=True).start()
        self.f.write(json.dumps(line, separators=(",", ":")) + "\n")
        self.dirty = True

    def _flusher(self) -> None:
        while True:
            time.sleep(FLUSH_EVERY_S)
            if self.dirty:
                self.dirty = False
                self.flush()

    def step(self, t: float, k: int, state: dict[str, Any], events: dict[str, Any]) -> None:
        last = self.last
        changed = {key: v for key, v in state.items() if last.get(key, _MISSING) != v}
        if not changed and not events:
            return
        last.update(changed)
        self.emit({"t": round(t, 4), "k": k, **changed, **events}, t)

    def flush(self) -> None:
        if self.f is not None:
            self.f.flush()


class Step:
    """Per-scheduler recorder state: the wrappers' captures for the step under way."""

    def __init__(self, adapter: Adapter, sched: Any, writer: Writer) -> None:
        self.adapter = adapter
        self.sched = sched
        self.w = writer
        self.k = 0
        self.on = False  # inside schedule()
        self.in_alloc = False  # inside allocate_slots for a waiting request
        self.needs: list[int] = []
        self.frees: list[int] = []
        self.tried: dict[str, int] = {}  # request id -> uncached prompt blocks, this step
        self.head_blocks: tuple[str, int] | None = None  # the last head whose blocks are known
        self.refused: dict[str, Any] | None = None
        self.deferred: list[tuple[Any, str]] = []
        self.skipq: Any = None  # 0.10: the queue schedule() collects skipped requests in
        self.loras: set[int] | None = None
        self.preempted_ids: set[str] = set()
        self.cost = 0.0
        self.inner = 0.0
        self.n = 0
        self.cost_t = time.monotonic()
        self.broken = False
        self.stats: tuple[int, int] | None = None  # (running, waiting) of the last make_stats

    def reported(self, stats: Any) -> None:
        """make_stats returned `stats` (None without log_stats): what /metrics shows from now on."""
        if stats is not None:
            self.stats = (int(stats.num_running_reqs),
                          int(stats.num_waiting_reqs) + int(getattr(stats, "num_skipped_waiting_reqs", 0) or 0))

    # -- the wrapper ------------------------------------------------------------------------------------------
    def around(self, orig: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.broken:
            return orig(self.sched, *args, **kwargs)
        p0 = time.perf_counter()
        now = time.monotonic()
        sched = self.sched
        try:
            self.k += 1
            before = sched.running[:]
            w0 = self.adapter.waiting(sched)
            free0 = sched.kv_cache_manager.block_pool.get_num_free_blocks()
            hold = self.adapter.hold(sched, args, kwargs)
            self.tried = {}
            self.refused = None
            self.deferred = []
            self.skipq = None
            self.loras = None
            self.on = True
        except Exception as exc:  # never break the engine: stop recording instead
            self._fail(exc, now)
            return orig(sched, *args, **kwargs)
        p1 = time.perf_counter()
        try:
            out = orig(sched, *args, **kwargs)
        finally:
            self.on = False
        p2 = time.perf_counter()
        try:
            self._after(now, before, w0, free0, hold, out)
        except Exception as exc:
            self._fail(exc, now)
        p3 = time.perf_counter()
        self.cost += (p1 - p0) + (p3 - p2)
        self.inner += p2 - p1
        self.n += 1
        if now - self.cost_t >= COST_EVERY_S and self.n:
            self.w.emit({"t": round(now, 4), "k": self.k, "cost": {
                "steps": self.n, "recorder_us_per_step": round(1e6 * self.cost / self.n, 1),
                "schedule_us_per_step": round(1e6 * self.inner / self.n, 1)}}, now)
            self.cost = self.inner = 0.0
            self.n = 0
            self.cost_t = now
        return out

    def _fail(self, exc: BaseException, now: float) -> None:
        self.broken = True
        self.on = False
        self.w.emit({"t": round(now, 4), "k": self.k, "error": f"{type(exc).__name__}: {exc}"[:500]}, now)
        self.w.flush()

    def _after(self, now: float, before: list[Any], w0: int, free0: int, hold: bool, out: Any) -> None:
        sched = self.sched
        after = sched.running
        n = len(before)
        if len(after) >= n and after[:n] == before:
            preempted: list[Any] = []
            admitted = after[n:]
        else:
            kept = {id(r) for r in after}
            old = {id(r) for r in before}
            preempted = [r for r in before if id(r) not in kept]
            admitted = [r for r in after if id(r) not in old]
        adapter = self.adapter
        skipped = adapter.skipped(self)
        w = adapter.waiting(sched)
        left = 0 if adapter.paused_all(sched) else sched.max_num_scheduled_tokens - out.total_num_scheduled_tokens
        head = adapter.head(sched, {id(r) for r, _c in skipped})
        hb = None
        if head is not None:
            hid = head.request_id
            if hid in self.tried:
                self.head_blocks = (hid, self.tried[hid])
            if self.head_blocks is not None and self.head_blocks[0] == hid:
                hb = self.head_blocks[1]
        stop = adapter.stop(self, preempted, w, len(skipped), left, hold, head)
        sr, sw = self.stats if self.stats is not None else (None, None)
        state = {"sr": sr, "sw": sw, "r0": n, "w0": w0, "r": len(after), "w": w, "free0": free0,
                 "free": sched.kv_cache_manager.block_pool.get_num_free_blocks(), "left": left,
                 "head": None if head is None else _rid(head.request_id),
                 "hp": None if head is None else head.num_tokens, "hb": hb, "stop": stop,
                 **adapter.extra_state(sched)}
        events: dict[str, Any] = {}
        if admitted:
            ids = [r.request_id for r in admitted]
            events["adm"] = [_rid(i) for i in ids]
            resumed = [_rid(i) for i in ids if i in self.preempted_ids]
            if resumed:
                events["res"] = resumed
                self.preempted_ids.difference_update(ids)
        if preempted:
            ids = [r.request_id for r in preempted]
            events["pre"] = [_rid(i) for i in ids]
            self.preempted_ids.update(ids)
        if self.refused is not None:
            events["ref"] = self.refused
        if skipped:
            causes: dict[str, int] = {}
            for _r, cause in skipped:
                causes[cause] = causes.get(cause, 0) + 1
            events["dfr"] = causes
        if hold:
            events["hold"] = 1
        self.w.step(now, self.k, state, events)

    # -- allocate_slots capture ------------------------------------------------------------------------------
    def allocate(self, orig: Any, request: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not self.on or self.broken or request.status == self.adapter.RUNNING:
            return orig(request, *args, **kwargs)
        self.needs = []
        self.frees = []
        self.in_alloc = True
        try:
            res = orig(request, *args, **kwargs)
        finally:
            self.in_alloc = False
        try:
            hits = self.adapter.hits(request, args, kwargs)
            uncached = _cdiv(max(request.num_tokens - hits, 0), self.sched.block_size)
            self.tried[request.request_id] = uncached
            if res is None and self.needs and self.frees:
                ref: dict[str, Any] = {"id": _rid(request.request_id), "need": self.needs[-1],
                                       "had": self.frees[-1], "gate": self.adapter.gate(self, kwargs)}
                ref.update(self.adapter.margins(self.sched, request, kwargs))
                self.refused = ref
        except Exception as exc:
            self._fail(exc, time.monotonic())
        return res

    def count_need(self, value: int) -> int:
        if self.in_alloc:
            self.needs.append(value)
        return value

    def count_free(self, value: int) -> int:
        if self.in_alloc:
            self.frees.append(value)
        return value


class Adapter:
    """What differs between releases: where the queues are, how a skip is recorded, the loop's stop order."""

    name = "?"
    RUNNING: Any = None

    def __init__(self, mod: Any) -> None:
        from vllm.v1.request import RequestStatus

        self.mod = mod
        self.status = RequestStatus
        self.RUNNING = RequestStatus.RUNNING

    def attach(self, st: Step) -> None:
        """Instance wrappers on the scheduler's KV manager, coordinator and block pool."""
        sched = st.sched
        kvm = sched.kv_cache_manager
        orig_alloc = kvm.allocate_slots
        orig_need = kvm.coordinator.get_num_blocks_to_allocate
        orig_free = kvm.block_pool.get_num_free_blocks

        def allocate_slots(request: Any, *args: Any, **kwargs: Any) -> Any:
            return st.allocate(orig_alloc, request, args, kwargs)

        def get_num_blocks_to_allocate(*args: Any, **kwargs: Any) -> int:
            return st.count_need(orig_need(*args, **kwargs))

        def get_num_free_blocks() -> int:
            return st.count_free(orig_free())

        kvm.allocate_slots = allocate_slots
        kvm.coordinator.get_num_blocks_to_allocate = get_num_blocks_to_allocate
        kvm.block_pool.get_num_free_blocks = get_num_free_blocks

    def header(self, sched: Any) -> dict[str, Any]:
        import vllm

        pool = sched.kv_cache_manager.block_pool
        lora = sched.lora_config
        return {"vllm": vllm.__version__, "adapter": self.name, "pid": os.getpid(),
                "max_num_seqs": sched.max_num_running_reqs, "budget": sched.max_num_scheduled_tokens,
                "blocks": pool.num_gpu_blocks - 1, "block_size": sched.block_size,
                "max_model_len": sched.max_model_len,
                "max_loras": None if lora is None else lora.max_loras,
                "chunked_prefill": bool(self.chunked(sched)),
                "prefix_caching": bool(sched.cache_config.enable_prefix_caching),
                "policy": str(getattr(sched.policy, "value", sched.policy))}

    def waiting(self, sched: Any) -> int:
        return len(sched.waiting)

    def paused_all(self, sched: Any) -> bool:
        return False

    def hold(self, sched: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        return False

    def extra_state(self, sched: Any) -> dict[str, Any]:
        return {}

    def chunked(self, sched: Any) -> bool:
        raise NotImplementedError

    def head(self, sched: Any, skipped: set[int]) -> Any:
        return self._first(sched.waiting, skipped)

    @staticmethod
    def _first(queue: Any, skipped: set[int]) -> Any:
        if not queue:
            return None
        first = queue.peek_request()
        if id(first) not in skipped:
            return first
        for r in queue:
            if id(r) not in skipped:
                return r
        return None

    def lora_cause(self, st: Step, request: Any) -> bool:
        """The release's LoRA skip: max_loras adapters scheduled this step, and not this request's."""
        sched = st.sched
        lora = sched.lora_config
        if not lora or request.lora_request is None:
            return False
        if st.loras is None:  # once per step: the set cannot grow once it is full (the only case that skips)
            st.loras = {r.lora_request.lora_int_id for r in sched.running
                        if r.lora_request and r.lora_request.lora_int_id > 0}
        return len(st.loras) >= lora.max_loras and request.lora_request.lora_int_id not in st.loras

    def skipped(self, st: Step) -> list[tuple[Any, str]]:
        raise NotImplementedError

    def hits(self, request: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        raise NotImplementedError

    def gate(self, st: Step, kwargs: dict[str, Any]) -> str:
        return "step"

    def margins(self, sched: Any, request: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {}

    def stop(self, st: Step, preempted: list[Any], w: int, skipped: int, left: int, hold: bool,
             head: Any) -> str:
        raise NotImplementedError


class V032(Adapter):
    """vLLM 0.32.x, `Scheduler.schedule(self, throttle_prefills=False)` (scheduler.py:591 @0.32.0).

    Read from that source: phase 2 runs `if not preempted_reqs and self._pause_state != PAUSED_ALL`, then
    `while token_budget > 0`: the KV-holding queue is drained before `self.waiting` (only it under PAUSED_NEW);
    it breaks on an empty queue, `input_budget <= draft_slots`, `len(running) + num_waiting_for_streaming_input
    >= max_num_active_reqs`, DP prefill deferral (`defer_prefills`), chunked prefill off with the prompt over
    the budget, a zero-token chunk, or `allocate_slots(..., full_sequence_must_fit=scheduler_reserve_full_isl)`
    returning None; it skips (`skip_request` -> `self.deferred_waiting.add`) blocked statuses (remote KV,
    grammar, streaming), stale async output, the LoRA budget, a connector that cannot count matched tokens,
    pending encoder-cache transfers and async KV loads. Stats: waiting = len(waiting) + len(kv_holding_waiting),
    deferred = len(deferred_waiting) (make_stats, :2915)."""

    name = "0.32"

    def attach(self, st: Step) -> None:
        super().attach(st)
        sched = st.sched
        adapter = self

        class DeferSet(set):  # type: ignore[type-arg]
            """`deferred_waiting` that also notes which requests schedule() skips, and why."""

            def add(self, request: Any) -> None:
                if st.on:
                    st.deferred.append((request, adapter.cause(st, request)))
                set.add(self, request)

        sched.deferred_waiting = DeferSet(sched.deferred_waiting)

    def header(self, sched: Any) -> dict[str, Any]:
        return {**super().header(sched), "max_num_active_seqs": sched.max_num_active_reqs,
                "watermark_blocks": getattr(sched.kv_cache_manager, "watermark_blocks", 0),
                "full_prompt_gate": bool(sched.scheduler_reserve_full_isl)}

    def chunked(self, sched: Any) -> bool:
        return bool(sched.scheduler_config.enable_chunked_prefill)

    def waiting(self, sched: Any) -> int:
        return len(sched.waiting) + len(sched.kv_holding_waiting)

    def _pause(self, sched: Any) -> str:
        return str(sched._pause_state.name)

    def paused_all(self, sched: Any) -> bool:
        return self._pause(sched) == "PAUSED_ALL"

    def hold(self, sched: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        throttle = bool(args[0]) if args else bool(kwargs.get("throttle_prefills", False))
        return throttle and not sched.prefill_capacity_bound and any(not r.is_prefill_chunk for r in sched.running)

    def extra_state(self, sched: Any) -> dict[str, Any]:
        pause = self._pause(sched)
        return {"wd": len(sched.deferred_waiting), "pause": None if pause == "UNPAUSED" else pause}

    def head(self, sched: Any, skipped: set[int]) -> Any:
        return self._first(sched.kv_holding_waiting, skipped) or self._first(sched.waiting, skipped)

    def cause(self, st: Step, request: Any) -> str:
        s = self.status
        status = request.status
        if status == s.WAITING_FOR_REMOTE_KVS:
            return "remote_kv"
        if status == s.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR:
            return "grammar"
        if status == s.WAITING_FOR_STREAMING_REQ:
            return "streaming"
        if request.num_stale_output_tokens and not request.drop_stale_output:
            return "stale_output"
        if self.lora_cause(st, request):
            return "lora"
        if st.sched.connector is not None:
            return "remote_kv"
        if st.sched.ec_connector is not None:
            return "encoder_cache"
        return "other"

    def skipped(self, st: Step) -> list[tuple[Any, str]]:
        return st.deferred

    def hits(self, request: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        # allocate_slots(request, num_new_tokens, num_new_computed_tokens=..., new_computed_blocks=..., ...,
        # num_external_computed_tokens=...) as schedule() calls it for a waiting request (:1240 @0.32.0).
        local = kwargs.get("num_new_computed_tokens", args[1] if len(args) > 1 else 0)
        return int(request.num_computed_tokens + local + kwargs.get("num_external_computed_tokens", 0))

    def gate(self, st: Step, kwargs: dict[str, Any]) -> str:
        # The full-prompt check calls get_num_blocks_to_allocate once and fails before the per-step one.
        return "full" if kwargs.get("full_sequence_must_fit") and len(st.needs) == 1 else "step"

    def margins(self, sched: Any, request: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        out = {}
        wm = getattr(sched.kv_cache_manager, "watermark_blocks", 0)
        if wm and kwargs.get("has_scheduled_reqs", True):
            out["wm"] = wm
        if kwargs.get("reserved_blocks"):
            out["reserved"] = kwargs["reserved_blocks"]
        return out

    def stop(self, st: Step, preempted: list[Any], w: int, skipped: int, left: int, hold: bool,
             head: Any) -> str:
        sched = st.sched
        pause = self._pause(sched)
        if pause == "PAUSED_ALL":
            return "paused"
        if preempted:
            return "preempted"
        if w - skipped <= 0:
            return "deferred" if skipped else "empty"
        if pause == "PAUSED_NEW" and head is not None and head not in sched.kv_holding_waiting:
            return "paused"
        if left <= 0:
            return "token_budget"
        if len(sched.running) + sched.num_waiting_for_streaming_input >= sched.max_num_active_reqs:
            return "max_num_active_seqs" if sched.max_num_active_reqs < sched.max_num_running_reqs else "max_num_seqs"
        if st.refused is not None:
            return "kv"
        if hold:
            return "prefill_cadence"
        if head is not None and not self.chunked(sched) and head.num_tokens - head.num_computed_tokens > left:
            return "no_chunk_budget"
        return "other"


class V010(Adapter):
    """vLLM 0.10.x, `Scheduler.schedule(self)` (scheduler.py:177 @0.10.2).

    Read from that source: phase 2 runs `if not preempted_reqs`, then `while self.waiting and token_budget >
    0`, breaking on `len(self.running) == self.max_num_running_reqs`, a zero-token encoder chunk, or
    `allocate_slots(request, num_new_tokens + external, num_new_local_computed_tokens, new_computed_blocks,
    ...)` returning None (first chunk only: no full-prompt gate before 0.19). Skipped requests (remote KV
    still loading, WAITING_FOR_FSM, the LoRA budget, a connector that cannot count matched tokens, chunked
    prefill off with the prompt over the budget, async KV loads) go into a local queue made by the module's
    `create_request_queue(self.policy)` and are prepended back at the end: the recorder captures that queue.
    No deferred count in the stats (waiting = len(self.waiting)), no pause state, no max_num_active_seqs."""

    name = "0.10"

    def attach(self, st: Step) -> None:
        super().attach(st)

    def install_module(self, st_of: Any) -> None:
        """The skip queue: the first queue create_request_queue returns during a step."""
        mod = self.mod
        orig = mod.create_request_queue

        def create_request_queue(policy: Any) -> Any:
            q = orig(policy)
            st = st_of()
            if st is not None and st.on and st.skipq is None:
                st.skipq = q
            return q

        mod.create_request_queue = create_request_queue

    def chunked(self, sched: Any) -> bool:
        return bool(sched.scheduler_config.chunked_prefill_enabled)

    def cause(self, st: Step, request: Any) -> str:
        s = self.status
        if request.status == s.WAITING_FOR_REMOTE_KVS:
            return "remote_kv"
        if request.status == s.WAITING_FOR_FSM:
            return "grammar"
        if self.lora_cause(st, request):
            return "lora"
        if not self.chunked(st.sched):  # the only other skip left once the statuses and LoRA are ruled out
            return "no_chunk_budget"
        if st.sched.connector is not None:
            return "remote_kv"
        return "other"

    def skipped(self, st: Step) -> list[tuple[Any, str]]:
        if not st.skipq:
            return []
        return [(r, self.cause(st, r)) for r in st.skipq]

    def hits(self, request: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        # num_new_tokens there already includes the connector's external tokens (scheduler.py:516 @0.10.2).
        local = kwargs.get("num_new_computed_tokens", args[1] if len(args) > 1 else 0)
        return int(request.num_computed_tokens + local)

    def stop(self, st: Step, preempted: list[Any], w: int, skipped: int, left: int, hold: bool,
             head: Any) -> str:
        sched = st.sched
        if preempted:
            return "preempted"
        if w - skipped <= 0:
            return "deferred" if skipped else "empty"
        if left <= 0:
            return "token_budget"
        if len(sched.running) >= sched.max_num_running_reqs:
            return "max_num_seqs"
        if st.refused is not None:
            return "kv"
        return "other"


ADAPTERS: dict[str, type[Adapter]] = {"0.32": V032, "0.10": V010}


def _release(version: str) -> str:
    parts = version.split("+")[0].split(".")
    return ".".join(parts[:2])


def register() -> None:
    """vLLM's entry point: install the wrappers when VLLM_HEADROOM_TRUTH is set (in every vLLM process; only
    the engine core ever calls schedule(), so only it writes)."""
    global _installed
    path = os.environ.get(ENV)
    if not path or _installed:
        return
    _installed = True
    writer = Writer(path)
    try:
        import vllm
        from vllm.v1.core.sched import scheduler as mod
    except Exception as exc:  # pragma: no cover - depends on the vLLM at hand
        writer.emit({"t": round(time.monotonic(), 4), "k": 0, "error": f"import: {exc!r}"[:500]}, 0.0)
        writer.flush()
        return
    cls = ADAPTERS.get(_release(vllm.__version__))
    if cls is None:
        writer.emit({"t": round(time.monotonic(), 4), "k": 0,
                     "error": f"no adapter for vLLM {vllm.__version__} (have {sorted(ADAPTERS)})"}, 0.0)
        writer.flush()
        return
    adapter = cls(mod)
    steps: dict[int, Step] = {}
    current: list[Step | None] = [None]
    if isinstance(adapter, V010):
        adapter.install_module(lambda: current[0])
    scheduler_cls = mod.Scheduler
    orig_schedule = scheduler_cls.schedule

    def schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        st = steps.get(id(self))
        if st is None:
            st = steps[id(self)] = Step(adapter, self, writer)
            try:
                adapter.attach(st)
                now = time.monotonic()
                writer.emit({"t": round(now, 4), "k": 0, "hdr": adapter.header(self)}, now)
                writer.flush()
            except Exception as exc:
                st._fail(exc, time.monotonic())
        current[0] = st
        return st.around(orig_schedule, args, kwargs)

    schedule.__wrapped__ = orig_schedule  # type: ignore[attr-defined]
    scheduler_cls.schedule = schedule
    orig_stats = scheduler_cls.make_stats

    def make_stats(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig_stats(self, *args, **kwargs)
        st = steps.get(id(self))
        if st is not None and not st.broken:
            try:
                st.reported(out)
            except Exception as exc:
                st._fail(exc, time.monotonic())
        return out

    scheduler_cls.make_stats = make_stats
    if hasattr(scheduler_cls, "set_pause_state"):
        orig_pause = scheduler_cls.set_pause_state

        def set_pause_state(self: Any, pause_state: Any) -> None:
            orig_pause(self, pause_state)
            now = time.monotonic()
            st = steps.get(id(self))
            writer.emit({"t": round(now, 4), "k": 0 if st is None else st.k, "pause_set": pause_state.name}, now)
            writer.flush()

        scheduler_cls.set_pause_state = set_pause_state
    import atexit

    atexit.register(writer.flush)
