"""One watched server: its scrape (HTTP, `scrape.py`), its configuration sources, and one judgement per engine
(`judge.py`) into the report presenters read (`report.py`).

`Target.observe()` is the synchronous core (text in, report out) used by the sidecar loop, by one-shot
diagnosis of a saved exposition and by the tests; `Target.scrape()` adds the HTTP side and the scrape
bookkeeping; `Target.status()` is what the collector reads.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..core import defaults
from ..engines.base import AttentionFacts, CapacityInfo, Engine, InvalidValue, LogFacts
from ..engines.vllm import VLLM
from ..model.shape import ModelShape
from . import exposition
from .capacity import KvPool, with_capacity
from .config import (
    FoundCmdline,
    Overrides,
    ServingConfig,
    Source,
    asked_versus_running,
    contradictions,
    find_vllm_cmdline,
    resolve,
)
from .judge import EngineHistory, Judging, judge
from .replicas import LoadWindow, replica_signal
from .report import BudgetUse as BudgetUse
from .report import EngineGap as EngineGap
from .report import EngineReport as EngineReport
from .report import ProfileQuality as ProfileQuality
from .report import TargetReport as TargetReport
from .report import TargetStatus
from .scrape import ModelsInfo, ScrapeError, Tls, client, describe, fetch, redact, server_info
from .verdict import Thresholds

if TYPE_CHECKING:  # asyncio and httpx on first use (a one-shot on a file needs neither)
    import asyncio

    import httpx

log = logging.getLogger("vllm_headroom")
STARTUP_LOG_MAX_BYTES = 64 * 1024 * 1024  # a start-up log is a few hundred KB; a whole day's log is read in part


@dataclass(frozen=True)
class Settings:
    """How to watch one target."""

    url: str
    overrides: Overrides = field(default_factory=Overrides)
    vllm_args: list[str] | None = None  # the vLLM command line as given with --vllm-args
    discover_cmdline: bool = defaults.CMDLINE_DISCOVERY
    api_key: str | None = None
    quantile: float = defaults.PROFILE_QUANTILE
    window: float = defaults.PROFILE_WINDOW  # s
    thresholds: Thresholds = field(default_factory=Thresholds)
    timeout: float = defaults.SCRAPE_TIMEOUT  # s
    max_bytes: int = defaults.SCRAPE_MAX_BYTES
    models_interval: float = defaults.MODELS_INTERVAL  # s
    model_shape: ModelShape | None = None  # from --model-config: adds absolute bytes
    draft_shape: ModelShape | None = None  # from --draft-model-config: a speculative drafter's layers
    engine: Engine = VLLM  # the serving engine behind the URL: its metric names, readers and flags
    trust_env: bool = False  # proxies, .netrc and SSL_CERT_* from the environment for this target
    tls: Tls = field(default_factory=Tls)  # how to reach an https target: CA, client certificate, name to verify
    max_samples: int = defaults.SCRAPE_MAX_SAMPLES  # kept samples per scrape (Prometheus' sample_limit)
    startup_log: str | None = None  # vLLM's start-up log (a file): capacity when vLLM exports none
    kv_pool: KvPool | None = None  # the KV pool per device we were told (--kv-cache-memory, --gpu-memory)
    target_utilization: float = defaults.TARGET_UTILIZATION  # of a replica's capacity, for the replica signal
    load_window: float = defaults.LOAD_WINDOW  # s, over which the replica signal reads the offered load


class Target:
    """State of one watched server across scrapes: what it answered (/v1/models, /version, its command line), each
    engine's history, and the scrape bookkeeping."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.judging = Judging(settings.thresholds, settings.quantile, settings.window, settings.model_shape,
                               draft_shape=settings.draft_shape, engine=settings.engine)
        self.histories: dict[tuple[str, str], EngineHistory] = {}  # per (model_name, engine)
        self.load = LoadWindow(settings.load_window)  # the replica signal's offered load, per model
        self.models: ModelsInfo | None = None
        self.version: str | None = None
        self.frontend: str | None = None  # "rust X" behind vLLM's Rust frontend (its /version says so)
        self._models_at: float | None = None
        self._cmdline: FoundCmdline | None = None
        self._cmdline_at: float | None = None
        self._cmdline_args: dict[str, object] | None = None
        self._given_args: dict[str, object] | None = None
        self._args_notes: list[str] = []  # values of the vLLM command line that vLLM would not take
        self._log: LogFacts | None = None  # what the start-up log states, re-read every --models.interval
        self._log_at: float | None = None
        self._log_note: str | None = None  # why the start-up log gave nothing (unreadable, no capacity line yet)
        self._attention: AttentionFacts | None = None  # the log's attention backend, block size, KV dtype
        self.errors: dict[str, int] = {}
        self.models_error: str | None = None  # why the last read of /v1/models failed (None: it answered)
        self.scrapes = 0  # scrapes begun by `scrape()` since start
        self.known_engines: set[tuple[str, str]] = set()
        # Per engine: the inputs of its resolved config, the notes on contradicting flags, and the config.
        self._configs: dict[str, tuple[tuple[object, ...], list[str], ServingConfig]] = {}
        self.seen_up = False  # a report with the target up has been kept since start (see `last`)
        self._last = TargetReport(settings.url, up=False, error="not scraped yet", error_reason="not_scraped")
        # Unix time of the first failed scrape of the current outage (None while up): how long vLLM has been down
        # or loading, for a pod's first start and every later reload alike (the alerts' start-up grace).
        self.down_since: float | None = None

    @property
    def last(self) -> TargetReport:
        """The latest report; keeping one with the target up marks it seen up."""
        return self._last

    @last.setter
    def last(self, report: TargetReport) -> None:
        self._last = report
        if report.up:
            self.seen_up = True

    def status(self) -> TargetStatus:
        """The latest report and the scrape bookkeeping, read-only (what the collector exports)."""
        return TargetStatus(self.settings.url, self._last, self.errors, self.known_engines, self.down_since,
                            self.seen_up)

    # -- configuration sources ------------------------------------------------------------------
    def _vllm_args(self, now: float) -> tuple[dict[str, object] | None, Source]:
        engine = self.settings.engine
        if self.settings.vllm_args is not None:
            if self._given_args is None:
                self._given_args, self._args_notes = engine.parse_args(self.settings.vllm_args)
            return self._given_args, Source.VLLM_ARGS
        if not self.settings.discover_cmdline:
            return None, Source.CMDLINE
        if self._cmdline_at is None or now - self._cmdline_at >= self.settings.models_interval:
            self._cmdline_at = now
            parts = urlsplit(self.settings.url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            self._cmdline = find_vllm_cmdline(port, engine=engine)
            self._cmdline_args, self._args_notes = (
                engine.parse_args(self._cmdline.argv, f"{engine.name}'s command line (/proc/{self._cmdline.pid})")
                if self._cmdline else (None, []))
        return self._cmdline_args, Source.CMDLINE

    def _startup_log(self, now: float) -> LogFacts | None:
        """The start-up log's facts, read again every --models.interval (vLLM writes it while it starts; a log
        shipped into a volume appears late). A log that cannot be read or states no capacity is a note, never
        a failed scrape."""
        path = self.settings.startup_log
        if path is None:
            return None
        if self._log_at is not None and now - self._log_at < self.settings.models_interval:
            return self._log
        self._log_at = now
        try:
            with open(path, errors="replace") as f:
                text = f.read(STARTUP_LOG_MAX_BYTES)
        except OSError as exc:
            self._log, self._log_note = None, f"--vllm-startup-log {path} cannot be read: {exc.strerror}"
            self._attention = None
            return None
        # The backend, block size and KV dtype are read from any log, also one without a capacity line yet.
        self._attention = self.settings.engine.attention_facts(text)
        try:
            self._log, self._log_note = self.settings.engine.parse_startup_log(text), None
        except ValueError as exc:
            self._log, self._log_note = None, f"--vllm-startup-log {path}: {exc}"
        return self._log

    def _config(self, engine: str, args: dict[str, object] | None, args_source: Source, cache: CapacityInfo | None,
                data_parallel_engines: int, models_len: int | None,
                log: LogFacts | None = None) -> tuple[list[str], ServingConfig]:
        """The engine's resolved config and the notes on flags that contradict vLLM, kept while their inputs
        stay equal: between two scrapes they seldom change, and resolving them anew for every engine of every
        scrape was a sizeable share of a data-parallel server's scrape."""
        inputs = (args, args_source, cache, data_parallel_engines, models_len, log)
        kept = self._configs.get(engine)
        if kept is not None and kept[0] == inputs:
            return kept[1], kept[2]
        overrides = self.settings.overrides
        where = "--vllm-args" if args_source == Source.VLLM_ARGS else "vLLM's command line"
        notes = contradictions(overrides, cache, data_parallel_engines) + asked_versus_running(args, where, cache)
        cfg = resolve(overrides, args, args_source, cache, data_parallel_engines, models_len, log)
        cfg, problem = with_capacity(cfg, log, self.settings.model_shape, self.settings.kv_pool,
                                     self.settings.engine, self.settings.draft_shape)
        if problem:
            notes.append(problem)
        if self.settings.draft_shape is not None and cfg.speculative_method is None:
            known = "vLLM's command line has" if args is not None else "no command line of vLLM is known, so it shows"
            notes.append(f"--draft-model-config is not used: {known} no --speculative-config, and vLLM runs no "
                         "drafter without it")
        self._configs[engine] = (inputs, notes, cfg)
        return notes, cfg

    # -- the synchronous core ------------------------------------------------------------------
    def parser(self) -> exposition.Parser:
        """An incremental parser of this target's engine's families (see `exposition.Parser`)."""
        engine = self.settings.engine
        return exposition.Parser(engine.wanted, engine.names.prefix, engine.renames, self.settings.max_samples)

    def parsed(self, parser: exposition.Parser) -> exposition.Exposition:
        """The exposition `parser` was fed; raises ScrapeError for an unusable body."""
        engine = self.settings.engine
        try:
            expo = parser.close()
        except exposition.ExpositionError as exc:
            raise ScrapeError(exc.reason, f"{self.shown}: {exc}") from None
        if not expo.family_seen and (empty := parser.blank()) is not None:
            raise ScrapeError("malformed", f"{self.shown}: {empty}")
        if not expo.family_seen and defaults.METRIC_PREFIX in parser.head:
            raise ScrapeError("no_vllm_metrics", f"{self.shown} is a vllm-headroom sidecar's /metrics, not "
                              f"{engine.name}'s: point it at {engine.name}'s own (its --port, {engine.default_port} "
                              "by default)")
        if not expo.family_seen:
            raise ScrapeError("no_vllm_metrics", engine.no_metrics(self.shown))
        return expo

    @property
    def shown(self) -> str:
        """The target's URL as logs and messages show it (credentials redacted)."""
        return redact(self.settings.url)

    def observe(self, now: float, text: str, gauges_only: bool = False, received: float | None = None) -> TargetReport:
        """Turn one /metrics body into a report; raises ScrapeError for unusable bodies.

        `gauges_only` marks a one-shot diagnosis (see `one_shot`): a single observation, no rates. `received`:
        when the body arrived (monotonic s), if later than `now`, when it was asked for.
        """
        parser = self.parser()
        try:
            parser.feed(text)
        except exposition.ExpositionError as exc:
            raise ScrapeError(exc.reason, f"{self.shown}: {exc}") from None
        return self.judge_exposition(now, self.parsed(parser), gauges_only, received)

    def judge_exposition(self, now: float, expo: exposition.Exposition, gauges_only: bool = False,
                         received: float | None = None) -> TargetReport:
        """The report of a parsed exposition: each engine judged (`judge.judge`), or named as a gap when its
        capacity cannot be derived or one of its series holds a value it cannot hold (only that engine).
        `now`: when the body was asked for; `received`: when it arrived (both monotonic s; None: at `now`)."""
        engine = self.settings.engine
        try:
            snap = engine.read(expo, self.version)
        except InvalidValue as exc:  # an engine wing that still raises for the whole exposition
            raise ScrapeError("invalid_value", f"{self.shown}: {exc}") from None
        if len(snap.engines) > defaults.SCRAPE_MAX_ENGINES:
            raise ScrapeError("too_large", f"{self.shown}: the exposition has {len(snap.engines):,} engines "
                              f"(model_name x engine), more than the {defaults.SCRAPE_MAX_ENGINES:,} one sidecar "
                              "judges per target")
        args, args_source = self._vllm_args(now)
        log = self._startup_log(now)
        report = TargetReport(self.settings.url, up=True, version=self.version, frontend=self.frontend,
                              observed_at=now, models_error=self.models_error,
                              notes=list(self._args_notes) + ([self._log_note] if self._log_note else []),
                              rules=snap.rules, attention=self._attention)
        if self._attention is not None:
            report.notes += [f"vLLM's start-up log: {n}" for n in self._attention.notes]
        for info in snap.cache_info.values():
            report.notes += [n for n in info.rejected() if n not in report.notes]
        if not snap.engines:  # the server answered, but no series names an engine: nothing to judge, said once
            n = engine.names
            report.notes.append(f"the exposition names no engine (no {n.running}, {n.waiting} or {n.kv_usage} "
                                "series): nothing is judged")
        models_len = self.models.max_model_len if self.models else None
        found = self._cmdline if self.settings.vllm_args is None and self.settings.discover_cmdline else None
        # /version answered with a version: `frontend` is known (None: the engine's own API server)
        doubt = engine.idle_gauges_doubt(self.frontend, self.version is not None or self.frontend is not None, snap)
        undetermined: list[tuple[str, float | None]] = []  # engines without capacity: the replica signal holds them
        for e in snap.engines:
            bad = snap.bad_values.get((e.model_name, e.engine))
            if bad is not None:
                report.gaps.append(EngineGap(e.model_name, e.engine, "", bad_value=bad))
                continue
            cache = snap.cache_info.get(e.engine) or (next(iter(snap.cache_info.values()), None))
            notes, cfg = self._config(e.engine, args, args_source, cache, snap.data_parallel_engines, models_len, log)
            report.notes += [n for n in notes if n not in report.notes]
            key = (e.model_name, e.engine)
            history = self.histories.get(key) or self.histories.setdefault(
                key, EngineHistory(self.settings.thresholds, one_shot=gauges_only))
            item = judge(now, e, cfg, snap, history, self.judging, gauges_only, found,
                         idle_gauges_doubt=doubt, received=received)
            if isinstance(item, EngineGap):
                if not snap.cache_info and ("num_gpu_blocks" in item.missing or "block_size" in item.missing):
                    item = replace(item, hint=(
                        f"the server exports no {engine.names.cache_config} (the Rust frontend exports none); "
                        f"give {engine.name}'s --num-gpu-blocks-override and --block-size (--vllm-args, or its "
                        "command line), its start-up log (--vllm-startup-log), or --model-config with "
                        "--kv-cache-memory or --gpu-memory"))
                report.gaps.append(item)
                held = None if e.running is None or e.waiting is None else e.running + e.waiting
                undetermined.append((e.model_name, held))
            else:
                report.engines.append(item)
        # Forget engines that are gone (a restart under another name), so history cannot grow without bound; an
        # engine with a bad value keeps its history (its next good scrape goes on from it).
        live = {(e.model_name, e.engine) for e in snap.engines}
        self.histories = {k: v for k, v in self.histories.items() if k in live}
        live_engines = {engine for _model, engine in live}
        self._configs = {k: v for k, v in self._configs.items() if k in live_engines}
        load = None if gauges_only else self.load.observe(now, report.engines)
        report.replicas = replica_signal(report.engines, self.settings.target_utilization, undetermined, load)
        return report

    # -- the HTTP side ----------------------------------------------------------------------------
    def models_due(self, now: float) -> bool:
        return self._models_at is None or now - self._models_at >= self.settings.models_interval

    async def _refresh_models(self, client: httpx.AsyncClient, now: float, deadline: float | None = None) -> None:
        """/v1/models and /version, at most once per --models.interval whether they answered or not; their
        failures count under the reason `models` (never as a failed scrape of /metrics). Never raises."""
        if not self.models_due(now):
            return
        self._models_at = now
        try:
            info = await server_info(client, self.settings.url, self.settings.timeout, self.settings.api_key,
                                     deadline)
        except Exception as exc:  # a bug here must not fail the scrape of /metrics
            log.debug("%s: /v1/models and /version", self.shown, exc_info=True)
            self.errors["models"] = self.errors.get("models", 0) + 1
            self.models_error = f"{self.shown}/v1/models: {describe(exc)}"
            return
        if info.models_failed:
            self.errors["models"] = self.errors.get("models", 0) + 1
            self.models_error = info.models_error
        else:
            self.models = info.models
            self.models_error = None
        if info.version_answered:
            self.version = info.version
            self.frontend = info.frontend

    async def fetch_metrics(self, client: httpx.AsyncClient, now: float, deadline: float | None = None) -> str:
        """GET /metrics (raises ScrapeError) and /v1/models with /version when they are due, within one
        deadline of --scrape.timeout from now (or by `deadline`, on the event loop's clock); the body as text
        (one-shot use: the sidecar parses as it reads)."""
        import asyncio

        if deadline is None:
            deadline = asyncio.get_running_loop().time() + self.settings.timeout
        models = asyncio.ensure_future(self._refresh_models(client, now, deadline))
        try:
            return await fetch(client, self.settings.url.rstrip("/") + "/metrics", self.settings.timeout,
                               self.settings.max_bytes, deadline=deadline)
        finally:
            await _settle(models)

    async def fetch_parsed(self, client: httpx.AsyncClient, now: float) -> exposition.Exposition:
        """GET /metrics, parsed chunk by chunk as it arrives, beside /v1/models and /version when due, all within
        one deadline of --scrape.timeout from now (connect, headers, body, parse); raises ScrapeError."""
        import asyncio

        deadline = asyncio.get_running_loop().time() + self.settings.timeout
        models = asyncio.ensure_future(self._refresh_models(client, now, deadline))
        parser = self.parser()

        def feed(text: str) -> None:
            try:
                parser.feed(text)
            except exposition.ExpositionError as exc:
                raise ScrapeError(exc.reason, f"{self.shown}: {exc}") from None

        try:
            await fetch(client, self.settings.url.rstrip("/") + "/metrics", self.settings.timeout,
                        self.settings.max_bytes, sink=feed, deadline=deadline)
        finally:
            await _settle(models)
        return self.parsed(parser)

    def refresh_cmdline(self, now: float) -> None:
        """Read vLLM's command line from /proc when due (a walk of /proc: the sidecar runs it off the loop)."""
        self._vllm_args(now)

    def fetch_once(self) -> str:
        """One synchronous fetch for the one-shot commands (diagnose, recommend), within --scrape.timeout."""
        import asyncio

        async def run() -> str:
            # The deadline starts before the client: building its TLS context (certifi's roots) is a blocking
            # 20-300 ms, more on a loaded machine, and it belongs to the user's --scrape.timeout too.
            deadline = asyncio.get_running_loop().time() + self.settings.timeout
            async with client(self.settings.trust_env, self.settings.tls) as c:
                return await self.fetch_metrics(c, time.monotonic(), deadline)

        return asyncio.run(run())

    async def scrape(self, client: httpx.AsyncClient, now: float | None = None,
                     wall: float | None = None) -> TargetReport:
        """One scrape of the target; never raises, failures become a down report. `wall`: unix time (tests).

        The whole request has one deadline (--scrape.timeout); a body with many engines is judged in a worker
        thread, so the event loop (the HTTP side, the other targets) never waits for it.
        """
        import asyncio

        now = time.monotonic() if now is None else now
        wall = time.time() if wall is None else wall
        started = time.perf_counter()
        self.scrapes += 1
        number = self.scrapes
        try:
            expo = await self.fetch_parsed(client, now)
            # The clock the caller gave `now` on (tests pass their own) moved on by the fetch's length.
            received = now + (time.perf_counter() - started)
            if self.settings.vllm_args is None and self.settings.discover_cmdline and (
                    self._cmdline_at is None or now - self._cmdline_at >= self.settings.models_interval):
                await asyncio.to_thread(self.refresh_cmdline, now)
            if sum(len(v) for v in expo.samples.values()) > THREAD_SAMPLES:
                report = await asyncio.to_thread(self.judge_exposition, now, expo, False, received)
            else:
                report = self.judge_exposition(now, expo, received=received)
        except ScrapeError as exc:
            self.errors[exc.reason] = self.errors.get(exc.reason, 0) + 1
            report = TargetReport(self.settings.url, up=False, error_reason=exc.reason, error=str(exc),
                                  version=self.version, observed_at=now)
        except Exception as exc:  # a bug on one target's input must not stop the tick or other targets
            # One clean line, logged by the sidecar when the error changes; the traceback only at debug level.
            log.debug("%s: internal error while judging the scrape", self.shown, exc_info=True)
            self.errors["internal_error"] = self.errors.get("internal_error", 0) + 1
            report = TargetReport(self.settings.url, up=False, error_reason="internal_error",
                                  error=f"{self.shown}: internal error: {describe(exc)}",
                                  version=self.version, observed_at=now)
        report.scrape_duration_seconds = time.perf_counter() - started
        report.scraped_at, report.scrape_number = wall, number
        if report.up:
            self.known_engines = {(e.model_name, e.engine) for e in report.engines}
            self.down_since = None
        else:
            report.known_engines = sorted(self.known_engines)
            if self.down_since is None:
                self.down_since = wall
        self.last = report
        return report


THREAD_SAMPLES = 5000  # kept samples (~100 vLLM engines) above which a scrape is judged in a worker thread


async def _settle(task: asyncio.Future[None]) -> None:
    """Wait for `task` (it never raises); cancel it when we are cancelled."""
    import asyncio

    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        raise


def one_shot(settings: Settings) -> Target:
    """A fresh target for judging a single observation: nothing can be held, so holds are zero."""
    t = settings.thresholds
    return Target(replace(settings, thresholds=replace(t, false_full_hold=0.0)))
