"""Load driver and /metrics recorder for the real-vLLM end-to-end suite.

Everything runs on loopback against a server started by `vllm_server.VllmServer`. The load runs
on its own asyncio loop in a thread so synchronous pytest tests (and the recorder) can start it,
watch /metrics meanwhile, and wait for it with a deadline.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from .background import Background

VOCAB_IDS = 500  # token ids 1..500 stay inside the tiny model's vocab (512)


def prompt_ids(prompt_len: int, token: int = 7) -> list[int]:
    """A prompt of `prompt_len` token ids in 1..500 seeded by `token`.

    The seed is spelled in the first two ids (base 500), so prompts with different seeds
    (< 250,000) differ in their first block: prefix caching then shares nothing between
    requests and KV usage reflects every request's own blocks.
    """
    head = [token % VOCAB_IDS + 1, (token // VOCAB_IDS) % VOCAB_IDS + 1]
    body = [(token + i) % VOCAB_IDS + 1 for i in range(2, prompt_len)]
    return (head + body)[:prompt_len]


async def complete(
    client: httpx.AsyncClient,
    url: str,
    model: str,
    prompt_len: int,
    max_tokens: int,
    token: int = 7,
    **extra: Any,
) -> dict[str, Any]:
    """One /v1/completions call with a token-id prompt (the server runs without a tokenizer).

    `ignore_eos` makes the output length exactly `max_tokens` (the random model would otherwise
    stop whenever it samples EOS), so the KV footprint of a request is predictable.
    """
    body = {
        "model": model,
        "prompt": prompt_ids(prompt_len, token),
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        **extra,  # e.g. n (parallel sampling: n engine requests for one HTTP request)
    }
    started = time.monotonic()
    resp = await client.post(f"{url}/v1/completions", json=body)
    resp.raise_for_status()
    out: dict[str, Any] = resp.json()
    out["_timing"] = {"started": started, "finished": time.monotonic()}
    return out


def admitted_before_first_finish(url: str, model: str, prompt_len: int, max_tokens: int, n: int,
                                 token: int = 900_001) -> int:
    """Send one streamed completion with `n` sequences; how many the engine started before any of them finished.

    The count is read from the order of the engine's own output stream, not from the clock: the sequences reach
    the engine together; those admitted at once produce their first token in the first steps, and a sequence
    left waiting can only start when a slot or blocks free up, that is after some sequence ends (`max_tokens`
    decode steps later, with `ignore_eos`). Requests of other clients that end meanwhile free slots too: the
    caller keeps those running. Raises on an HTTP error or a stream in which no sequence finished.
    """
    body = {"model": model, "prompt": prompt_ids(prompt_len, token), "max_tokens": max_tokens, "ignore_eos": True,
            "temperature": 1.0, "n": n, "stream": True}  # vLLM refuses n > 1 with greedy sampling
    started: set[int] = set()
    with httpx.Client(timeout=600.0) as client, client.stream("POST", f"{url}/v1/completions", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line.removeprefix("data: ")).get("choices") or []:
                if choice.get("finish_reason") is not None:
                    return len(started | {choice["index"]})
                started.add(choice["index"])
    raise AssertionError(f"the stream ended before any of its {n} sequences finished")


@dataclass(frozen=True)
class Wave:
    """`count` identical requests sent together, `delay` seconds after the Load starts.

    With `duration`, the wave is closed-loop instead: `count` workers each send a new request
    as soon as their previous one returns, until `duration` seconds after the wave began. The
    tiny model decodes a step in ~1.5 ms, so a one-shot burst drains in about a second; a
    sustained state (e.g. a queue held for 15 s) needs the concurrency to be kept up.
    """

    count: int
    prompt_len: int
    max_tokens: int
    delay: float = 0.0
    duration: float | None = None
    n: int = 1

    def describe(self) -> dict[str, Any]:
        return {
            "concurrency" if self.duration else "requests": self.count,
            "prompt_len": self.prompt_len,
            "max_tokens": self.max_tokens,
            "delay_s": self.delay,
            **({"n": self.n} if self.n != 1 else {}),
            **({"closed_loop_s": self.duration} if self.duration else {}),
        }


class Load(Background):
    """Concurrent requests in the background.

    `waves` lets a scenario stage its traffic (e.g. short requests, then one long prompt, then
    more short ones) from one thread. Each request gets a distinct prompt seed (see prompt_ids).
    """

    thread_name = "e2e-load"

    def __init__(self, url: str, model: str, waves: list[Wave], request_timeout: float = 600.0) -> None:
        super().__init__()
        self.url = url
        self.model = model
        self.waves = waves
        self.request_timeout = request_timeout
        self.results: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self.retried: list[BaseException] = []  # transport errors a closed-loop client retried
        self._seed = 0

    def describe(self) -> list[dict[str, Any]]:
        return [w.describe() for w in self.waves]

    @classmethod
    def uniform(cls, url: str, model: str, n: int, prompt_len: int, max_tokens: int, **kw: Any) -> Load:
        return cls(url, model, [Wave(n, prompt_len, max_tokens)], **kw)

    async def _main(self) -> None:
        total = sum(w.count for w in self.waves)
        # One connection per request: the default pool (100) would otherwise queue requests
        # on the client side and the server would never see the whole burst.
        limits = httpx.Limits(max_connections=total + 4, max_keepalive_connections=total + 4)
        async with httpx.AsyncClient(timeout=self.request_timeout, limits=limits) as client:
            jobs = [
                asyncio.create_task(self._worker(client, wave, index))
                for index, wave in enumerate(self.waves)
                for _ in range(wave.count)
            ]
            await asyncio.gather(*jobs)

    async def _worker(self, client: httpx.AsyncClient, wave: Wave, index: int) -> None:
        """One client: a request (or, closed-loop, requests until the wave's duration ends), errors collected."""
        await asyncio.sleep(max(0.0, self.started_at + wave.delay - time.monotonic()))
        until = time.monotonic() + (wave.duration or 0.0)
        while True:
            self._seed += 1  # single event loop: no lock needed
            try:
                await self._request(client, wave, index, self._seed)
            except httpx.TransportError as exc:
                if wave.duration is None:
                    self.errors.append(exc)
                    return
                # A closed-loop client retries a dropped connection (seen on a loaded machine: ReadError('') from
                # a keep-alive connection the server closed), so the concurrency never silently shrinks.
                self.retried.append(exc)
                await asyncio.sleep(0.2)
            except Exception as exc:  # collected; the caller decides whether errors matter
                self.errors.append(exc)
                return
            if wave.duration is None or time.monotonic() >= until:
                return

    async def _request(self, client: httpx.AsyncClient, wave: Wave, index: int, seed: int) -> None:
        """One completion request of `wave`; raises on a failed one."""
        res = await complete(
            client,
            self.url,
            self.model,
            wave.prompt_len,
            wave.max_tokens,
            seed,
            # vLLM rejects n > 1 with greedy sampling; length is fixed by ignore_eos anyway.
            **({"n": wave.n, "temperature": 1.0} if wave.n != 1 else {}),
        )
        res["_wave"] = index
        self.results.append(res)


class MetricsTimeline:
    """Polls <url>/metrics every `interval` seconds in a background thread.

    Frames are `(t, text)` with t in seconds since `start()`. Scrapes that fail (e.g. the
    server is busy) are skipped rather than fatal: a gap in the timeline is visible in t.
    """

    def __init__(self, url: str, interval: float = 0.5) -> None:
        self.url = url
        self.interval = interval
        self.frames: list[tuple[float, str]] = []
        self.failures = 0
        self.content_types: dict[str, int] = {}  # Content-Type of /metrics -> frames (the Rust frontend: OpenMetrics)
        self.durations: list[float] = []  # seconds each successful scrape took
        self._t0 = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsTimeline:
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="e2e-metrics", daemon=True)
        self._thread.start()
        return self

    def now(self) -> float:
        return time.monotonic() - self._t0

    def _run(self) -> None:
        with httpx.Client(timeout=5.0) as client:
            next_at = time.monotonic()
            while not self._stop.is_set():
                t = self.now()
                try:
                    started = time.monotonic()
                    resp = client.get(f"{self.url}/metrics")
                    resp.raise_for_status()
                    self.durations.append(time.monotonic() - started)
                    self.frames.append((round(t, 3), resp.text))
                    kind = resp.headers.get("content-type", "")
                    self.content_types[kind] = self.content_types.get(kind, 0) + 1
                except httpx.HTTPError:
                    self.failures += 1
                # Fixed cadence (not sleep-after-scrape) so a slow scrape does not drift t.
                next_at += self.interval
                self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def latest(self) -> str | None:
        return self.frames[-1][1] if self.frames else None

    def save(self, directory: Path | str, meta: Mapping[str, Any]) -> None:
        """Write timeline.jsonl.gz and meta.json (meta gains interval and frames)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        # mtime=0: re-recording identical data gives identical bytes (clean diffs).
        with open(d / "timeline.jsonl.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            for t, text in self.frames:
                gz.write((json.dumps({"t": t, "metrics": text}) + "\n").encode())
        full = {**meta, "interval": self.interval, "frames": len(self.frames)}
        (d / "meta.json").write_text(json.dumps(full, indent=2, sort_keys=False) + "\n")


def families(text: str) -> list[Metric]:
    """prometheus_client's reading of an exposition (not ours): its OpenMetrics parser for a body that ends with
    `# EOF` (the Rust frontend's /metrics; it also reads exemplars), its text-format parser otherwise."""
    if text.rstrip("\n").endswith("# EOF"):
        return list(openmetrics_families(text))
    return list(text_string_to_metric_families(text))


def metric_value(text: str | list[Metric], name: str, **labels: str) -> float | None:
    """Sum of the samples called `name` whose labels include `labels`; None if none match.

    `name` is the sample name as exposed (e.g. "vllm:num_preemptions_total"). Summing makes
    the result independent of extra labels such as engine="0". `text` may be already parsed (families()).
    """
    total = 0.0
    found = False
    for family in families(text) if isinstance(text, str) else text:
        for sample in family.samples:
            if sample.name != name:
                continue
            if all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
                found = True
    return total if found else None


def engine_state(text: str) -> dict[str, float | None]:
    """The scheduler numbers the scenarios are about, from one exposition.

    `kv_cache_usage_perc` is the panel's usage as exported: vllm:kv_cache_usage_perc (V1 >= 0.9), else
    vllm:gpu_cache_usage_perc (V0, V1 0.8), each with its own release's denominator. `generation_tokens_total`
    tells whether the engine made progress between two frames (the Rust frontend's gauges may read 0 meanwhile).
    """
    fams = families(text)
    usage = metric_value(fams, "vllm:kv_cache_usage_perc")
    if usage is None:
        usage = metric_value(fams, "vllm:gpu_cache_usage_perc")
    return {
        "running": metric_value(fams, "vllm:num_requests_running"),
        "waiting": metric_value(fams, "vllm:num_requests_waiting"),
        "kv_cache_usage_perc": usage,
        "num_preemptions_total": metric_value(fams, "vllm:num_preemptions_total"),
        "generation_tokens_total": metric_value(fams, "vllm:generation_tokens_total"),
    }


def held_seconds(marks: Sequence[tuple[float, bool]], max_gap_frames: int = 0) -> float:
    """Longest stretch (in seconds of t) from the first to the last frame marked True.

    `max_gap_frames` lets that many consecutive False frames inside a stretch pass: a scrape
    can land on the step where one request finished and the next is not admitted yet (e.g.
    running 7 of 8 for one step), which says nothing about the state ending.
    """
    best = 0.0
    start: float | None = None
    gap = 0
    for t, ok in marks:
        if ok:
            start = t if start is None else start
            gap = 0
            best = max(best, t - start)
        elif start is not None:
            gap += 1
            if gap > max_gap_frames:
                start, gap = None, 0
    return best
