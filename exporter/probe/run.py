"""Running a probe: check the target is vLLM, predict, ramp the load, scrape each step through the pipeline.

Every scrape goes through `pipeline.target.Target` (the sidecar's own path: parse, read, resolve the config,
derive, judge), so the verdict per step is the product's, not a second judgement. The load runs on the same
event loop; Ctrl-C (SIGINT) cancels the ramp and every request in flight, and the steps seen so far are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from dataclasses import dataclass
from typing import TextIO

import httpx

from ..core import defaults
from ..pipeline.report import TargetReport
from ..pipeline.scrape import ScrapeError
from ..pipeline.target import Settings, Target, one_shot
from . import load as load_mod
from .load import Load, ProbeError
from .plan import Frame, Outcome, Plan, Prediction, Step, auto_ramp, predict


class NotVllm(Exception):
    """The target answers, but it is not a vLLM server (one sentence)."""


class Unreachable(Exception):
    """The target cannot be read (one sentence)."""


@dataclass(frozen=True)
class Ready:
    """What the pre-flight found: the server's report, the model to ask for, how prompts are sent, the plan."""

    report: TargetReport
    model: str
    prompt_kind: str
    prediction: Prediction
    ramp: tuple[int, ...]


class Progress:
    """A one-line progress bar on a terminal's stderr; silent when the stream is not a TTY."""

    def __init__(self, stream: TextIO | None = None, width: int = 24) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.width = width
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self._shown = False

    def update(self, done: float, text: str) -> None:
        if not self.enabled:
            return
        filled = round(self.width * min(max(done, 0.0), 1.0))
        self.stream.write(f"\r\x1b[2K[{'#' * filled}{'.' * (self.width - filled)}] {text}")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()


def _frame(report: TargetReport) -> Frame:
    engines = report.engines
    pre = [e.preemptions_total for e in engines]
    return Frame(
        running=sum(e.running for e in engines), waiting=sum(e.waiting for e in engines),
        free_blocks=sum(e.headroom.kv_free_blocks for e in engines) if engines else None,
        preemptions_total=None if not engines or any(p is None for p in pre) else sum(p or 0.0 for p in pre),
        verdict="/".join(sorted({str(e.verdict) for e in engines})) or None)


def _classify(exc: ScrapeError, url: str) -> Exception:
    """A failed pre-flight read: not vLLM (it answers, but with no vLLM exposition) or unreachable."""
    if exc.reason in ("no_vllm_metrics", "malformed") or (exc.reason == "http_status" and " 404" in str(exc)):
        return NotVllm(f"{url} is not a vLLM server: {exc}; the probe sends load only to vLLM")
    return Unreachable(str(exc))


async def _observe(target: Target, client: httpx.AsyncClient) -> TargetReport:
    now = time.monotonic()
    return target.observe(now, await target.fetch_metrics(client, now))


async def preflight(target: Target, client: httpx.AsyncClient, plan: Plan) -> Ready:
    """Read the server once (no load): refuse a target that is not vLLM, pick the model, the prompt kind, the
    prediction and the ramp. Raises NotVllm, Unreachable, ProbeError or plan.PlanRefused."""
    url = target.settings.url
    try:
        report = await _observe(target, client)
    except ScrapeError as exc:
        raise _classify(exc, url) from None
    models = target.models
    if (models is None or not models.ids) and plan.model is None:
        raise NotVllm(f"{url}/v1/models gives no OpenAI model list, so the model to ask for is unknown: "
                      "pass --model")
    model = plan.model or (models.ids[0] if models else "")
    if plan.model is not None and models is not None and models.ids and plan.model not in models.ids:
        raise ProbeError(f"{url} serves {', '.join(models.ids)}, not --model {plan.model}")
    prediction = predict(report, plan.prompt_tokens, plan.max_tokens)
    kind = plan.prompt_kind
    if kind == "auto":
        kind = "text" if await load_mod.has_tokenizer(client, url, model, target.settings.api_key) else "token_ids"
    ramp = plan.ramp if plan.ramp is not None else auto_ramp(prediction.max_concurrency)
    return Ready(report, model, kind, prediction, ramp)


class Prober:
    """One probe run; its state stays readable when it is cancelled (Ctrl-C)."""

    def __init__(self, target: Target, plan: Plan, ready: Ready, progress: Progress) -> None:
        self.target, self.plan, self.ready, self.progress = target, plan, ready, progress
        self.steps: list[Step] = []
        self.notes: list[str] = []
        self.stopped: str | None = None
        self.load: Load | None = None
        self.scrape_failures = 0
        self._scrapes_in_a_row = 0
        self._scrape_broken: str | None = None
        self.void: tuple[int, str] | None = None  # (the concurrency of the step it happened in, the error)

    def outcome(self) -> Outcome:
        counts = self.load.counts if self.load is not None else load_mod.Counts()
        return Outcome(self.plan, self.ready.ramp, self.ready.prediction, self.ready.model, self.ready.prompt_kind,
                       tuple(self.steps), counts.sent, counts.failed, self.stopped, tuple(self.notes),
                       void_from=None if self.void is None else self.void[0],
                       void_error=None if self.void is None else self.void[1])

    async def _frame(self, client: httpx.AsyncClient) -> Frame | None:
        try:
            frame = _frame(await _observe(self.target, client))
        except ScrapeError as exc:
            self.scrape_failures += 1
            self._scrapes_in_a_row += 1
            if self._scrapes_in_a_row >= defaults.PROBE_FAILURE_LIMIT and self._scrape_broken is None:
                self._scrape_broken = f"{self._scrapes_in_a_row} reads of /metrics in a row failed, the last: {exc}"
            elif self.scrape_failures == 1:
                self.notes.append(f"a scrape failed under load and was skipped: {exc}")
            return None
        self._scrapes_in_a_row = 0
        return frame

    def _failing(self, c: int) -> bool:
        """The server keeps failing (requests or /metrics): record from which step the result is void."""
        assert self.load is not None
        error = self.load.broken or self._scrape_broken
        if error is None:
            return False
        self.void = (c, error)
        self.stopped = "failed"
        return True

    def _show(self, index: int, c: int, phase: str, frame: Frame | None) -> None:
        assert self.load is not None
        state = "" if frame is None else f" running {frame.running} waiting {frame.waiting}"
        self.progress.update((index + (0.5 if phase == "watch" else 0.0)) / len(self.ready.ramp),
                             f"step {index + 1}/{len(self.ready.ramp)}: {c} clients, {phase}{state}; sent "
                             f"{self.load.counts.sent}/{self.plan.max_requests}")

    async def run(self) -> Outcome:
        plan = self.plan
        limits = httpx.Limits(max_connections=max(self.ready.ramp) + 4, max_keepalive_connections=max(self.ready.ramp))
        timeout = httpx.Timeout(30.0, read=None)  # a queued request may wait long for its answer
        prompt = await self._prompt()
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as sender, httpx.AsyncClient() as scraper:
            self.load = Load(sender, self.target.settings.url, self.ready.model, prompt, plan.max_tokens,
                             plan.max_requests, self.target.settings.api_key)
            try:
                await self._ramp(scraper)
            finally:
                await self.load.cancel()  # the normal end too: nothing the probe sent is left running
        if self.load.fatal:
            raise ProbeError(self.load.fatal)
        return self.outcome()

    async def _prompt(self) -> list[int] | str:
        if self.ready.prompt_kind == "token_ids":
            return load_mod.token_ids(self.plan.prompt_tokens, 0)
        async with httpx.AsyncClient() as client:
            return await load_mod.text_prompt(client, self.target.settings.url, self.ready.model,
                                              self.plan.prompt_tokens, self.target.settings.api_key)

    async def _ramp(self, scraper: httpx.AsyncClient) -> None:
        plan, load = self.plan, self.load
        assert load is not None
        last = await self._frame(scraper)
        for index, c in enumerate(self.ready.ramp):
            if self._failing(c):
                return
            if load.exhausted.is_set():
                self.stopped = "max_requests"
                return
            load.grow(c)
            start_pre = None if last is None else last.preemptions_total
            held = False
            deadline = time.monotonic() + plan.step_settle
            while time.monotonic() < deadline and not load.stopped and self._scrape_broken is None:
                frame = await self._frame(scraper)
                self._show(index, c, "settling", frame)
                if frame is not None and frame.running + frame.waiting >= c:
                    held = True
                    break
                await asyncio.sleep(plan.step_interval)
            frames: list[Frame] = []
            while len(frames) < plan.step_scrapes and not load.stopped and self._scrape_broken is None:
                await asyncio.sleep(plan.step_interval)
                frame = await self._frame(scraper)
                if frame is not None:
                    frames.append(frame)
                    last = frame
                    self._show(index, c, "watch", frame)
            if load.fatal is not None or self._failing(c):
                return  # the step in progress is dropped: its frames show the failure, not the capacity
            if load.exhausted.is_set():
                self.stopped = "max_requests"
                self.notes.append(f"step {c} was dropped: the --max-requests budget ran out during it, so its "
                                  "scrapes may show a draining engine")
                return
            end_pre = frames[-1].preemptions_total if frames else None
            pre = None if start_pre is None or end_pre is None else max(0.0, end_pre - start_pre)
            self.steps.append(Step(c, tuple(frames), held, pre))


def _target(settings: Settings) -> Target:
    # Judged like the sidecar (history, windows, rates) but with no hold time: a step lasts seconds.
    return one_shot(settings)


def dry_run(settings: Settings, plan: Plan) -> Ready:
    """The pre-flight alone: reads the server, sends nothing."""

    async def main() -> Ready:
        async with httpx.AsyncClient() as client:
            return await preflight(_target(settings), client, plan)

    return asyncio.run(main())


def run(settings: Settings, plan: Plan, progress: Progress | None = None) -> Outcome:
    """Pre-flight, then the probe. Ctrl-C stops it cleanly: the outcome says `stopped="interrupted"`, every
    request sent is cancelled, and a second Ctrl-C raises KeyboardInterrupt at once."""
    progress = progress or Progress()
    target = _target(settings)
    prober: list[Prober] = []
    interrupted = False

    async def main() -> Outcome:
        nonlocal interrupted
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def on_sigint() -> None:
            nonlocal interrupted
            interrupted = True
            loop.remove_signal_handler(signal.SIGINT)  # a second Ctrl-C: Python's own KeyboardInterrupt
            task.cancel()

        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread, or no signals here
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        try:
            async with httpx.AsyncClient() as client:
                ready = await preflight(target, client, plan)
            prober.append(Prober(target, plan, ready, progress))
            return await prober[0].run()
        except asyncio.CancelledError:
            if not interrupted or not prober:
                raise
            p = prober[0]
            p.stopped = "interrupted"
            return p.outcome()
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signal.SIGINT)

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None  # Ctrl-C before the load started: nothing was sent
    finally:
        progress.close()


__all__ = ["NotVllm", "ProbeError", "Progress", "Ready", "Unreachable", "dry_run", "run"]
