"""Seeded workloads and a lean keep-alive load driver for production-shaped runs against a real vLLM.

A `Workload` is phases of traffic, each an arrival process (open-loop Poisson at a rate, closed-loop with a
number of clients, or a burst of N at once) over a mix of request classes (`Mix`: prompt and max_tokens
ranges, a shared system prompt, ignore_eos, LoRA adapters). Everything random comes from the workload's seed,
so the same seed sends the same requests in the same order; `Workload.parse` reads the one-line form

    "seed=7 | poisson rate=40 for=20 mix=chat | burst n=300 at=25 mix=chat:3,rag:1 | closed clients=64 for=10"

in which each phase names classes from `CLASSES` (weight after a colon) and `at=` starts a phase at an offset
(default: when the previous one ends). `random_workload(seed)` draws a whole workload from the seed (the
randomized sweep of `make score`).

`Driver` sends it over raw asyncio HTTP/1.1 with keep-alive connections and pre-encoded bodies: no HTTP
library, no JSON parse of the answers (only the status line, headers and, when streaming, the first chunk's
arrival), so the client costs the shared CPU as little as possible (vLLM's API server, not the engine, is what
limits a 2-core machine otherwise). Each request carries `X-Request-Id` (vLLM names the engine request
`cmpl-<id>-0`), and the driver keeps, per request, when it was sent, when its first byte of output and its
answer arrived, on the monotonic clock the engine-truth recorder uses.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .background import Background
from .load import VOCAB_IDS, prompt_ids


@dataclass(frozen=True)
class Mix:
    """One class of requests: the request's own prompt and max_tokens drawn log-uniformly in [lo, hi] (inclusive),
    after a shared system prompt of `shared_prefix` tokens (one of `prefixes` distinct ones, so the whole prompt is
    shared_prefix + own), LoRA adapters chosen uniformly (None = base)."""

    name: str
    prompt: tuple[int, int]
    max_tokens: tuple[int, int]
    shared_prefix: int = 0
    prefixes: int = 1
    adapters: tuple[str | None, ...] = (None,)
    ignore_eos: bool = True


CLASSES: dict[str, Mix] = {m.name: m for m in [
    Mix("chat", (64, 1024), (32, 256), shared_prefix=512, prefixes=4),
    Mix("rag", (2048, 8192), (32, 256), shared_prefix=1024, prefixes=2),
    Mix("doc", (12000, 30000), (64, 512)),
    Mix("tiny", (8, 32), (16, 64)),
    Mix("short", (16, 64), (256, 512)),
    Mix("long-gen", (64, 256), (1500, 3000)),
    Mix("prefill", (6000, 8000), (32, 128)),
    Mix("grow", (1800, 2200), (1200, 1600)),
    Mix("bigdoc", (28000, 29000), (300, 400)),
    Mix("huge", (660000, 660000), (1, 1)),
    Mix("lora", (64, 512), (64, 256), adapters=("adapter-a", "adapter-b")),
]}


@dataclass(frozen=True)
class Phase:
    """`kind` is "poisson" (rate per second for `duration` s), "closed" (`clients` each sending the next request
    when the last returns, for `duration` s) or "burst" (`n` requests at once). `at`: start offset (s)."""

    kind: str
    mix: tuple[tuple[str, float], ...]
    rate: float = 0.0
    clients: int = 0
    n: int = 0
    duration: float = 0.0
    at: float | None = None

    def ends(self, start: float) -> float:
        return start + (0.0 if self.kind == "burst" else self.duration)


@dataclass(frozen=True)
class Planned:
    """One request to send: its id, class, prompt (built from seeds on demand), max_tokens, adapter."""

    rid: str
    cls: str
    prompt_len: int
    shared_prefix: int
    prefix_seed: int
    own_seed: int
    max_tokens: int
    adapter: str | None
    ignore_eos: bool
    phase: int
    at: float | None  # open loop: offset from the start; closed loop: None (sent when its client is free)

    @property
    def prompt(self) -> list[int]:
        own = prompt_ids(self.prompt_len - self.shared_prefix, self.own_seed)
        return (prompt_ids(self.shared_prefix, self.prefix_seed) + own) if self.shared_prefix else own


@dataclass(frozen=True)
class Workload:
    seed: int
    phases: tuple[Phase, ...]
    classes: dict[str, Mix] = field(default_factory=lambda: dict(CLASSES))

    def describe(self) -> str:
        """The one-line form (Workload.parse(w.describe()) == w for the CLASSES)."""
        parts = [f"seed={self.seed}"]
        for p in self.phases:
            mix = ",".join(f"{n}:{w:g}" if w != 1 else n for n, w in p.mix)
            args = {"poisson": f"rate={p.rate:g} for={p.duration:g}",
                    "closed": f"clients={p.clients} for={p.duration:g}", "burst": f"n={p.n}"}[p.kind]
            parts.append(f"{p.kind} {args}" + (f" at={p.at:g}" if p.at is not None else "") + f" mix={mix}")
        return " | ".join(parts)

    @classmethod
    def parse(cls, text: str, classes: dict[str, Mix] | None = None) -> Workload:
        """The one-line form; raises ValueError with one sentence on a bad part."""
        known = dict(CLASSES if classes is None else classes)
        parts = [p.strip() for p in text.split("|") if p.strip()]
        if not parts or not parts[0].startswith("seed="):
            raise ValueError(f"a workload starts with seed=N: {text!r}")
        seed = int(parts[0].removeprefix("seed="))
        phases = []
        for part in parts[1:]:
            kind, *kvs = part.split()
            kv = dict(x.split("=", 1) for x in kvs)
            if kind not in ("poisson", "closed", "burst"):
                raise ValueError(f"unknown arrival {kind!r} in {part!r}")
            mix = []
            for item in kv.pop("mix", "chat").split(","):
                name, _, weight = item.partition(":")
                if name not in known:
                    raise ValueError(f"unknown class {name!r} (known: {sorted(known)})")
                mix.append((name, float(weight or 1)))
            at = kv.pop("at", None)
            phases.append(Phase(kind, tuple(mix), rate=float(kv.pop("rate", 0)), clients=int(kv.pop("clients", 0)),
                                n=int(kv.pop("n", 0)), duration=float(kv.pop("for", 0)),
                                at=None if at is None else float(at)))
            if kv:
                raise ValueError(f"unknown settings {sorted(kv)} in {part!r}")
        return cls(seed, tuple(phases), known)

    def starts(self) -> list[float]:
        out, t = [], 0.0
        for p in self.phases:
            start = t if p.at is None else p.at
            out.append(start)
            t = p.ends(start)
        return out

    @property
    def span(self) -> float:
        """Seconds from the first send to the last planned arrival (closed loops: their end)."""
        return max((p.ends(s) for p, s in zip(self.phases, self.starts(), strict=True)), default=0.0)

    def _draw(self, rng: random.Random, phase: int, p: Phase, at: float | None, serial: str) -> Planned:
        names = [n for n, _w in p.mix]
        mix = self.classes[rng.choices(names, weights=[w for _n, w in p.mix])[0]]
        shared = mix.shared_prefix
        prompt_len = shared + _log_uniform(rng, *mix.prompt)
        max_tokens = _log_uniform(rng, *mix.max_tokens)
        adapter = rng.choice(mix.adapters)
        # Own tokens start with a seed no other request has (prompt_ids spells it in the first two ids), so
        # prefix caching shares only the class's system prompt, one of `prefixes`, seeded by class and index.
        own_seed = 1000 + rng.randrange(248_000)
        prefix_seed = 1 + zlib.crc32(mix.name.encode()) % 997 + rng.randrange(mix.prefixes)
        return Planned(f"s{self.seed}{serial}", mix.name, prompt_len, shared, prefix_seed, own_seed, max_tokens,
                       adapter, mix.ignore_eos, phase, at)

    def open_loop(self) -> list[Planned]:
        """The requests of the burst and Poisson phases, with their send offsets, in a fixed order from the seed."""
        rng = random.Random(self.seed)
        out: list[Planned] = []
        for i, (p, start) in enumerate(zip(self.phases, self.starts(), strict=True)):
            if p.kind == "burst":
                out += [self._draw(rng, i, p, start, f"p{i}n{j}") for j in range(p.n)]
            elif p.kind == "poisson":
                t, j = start, 0
                while p.rate > 0:
                    t += rng.expovariate(p.rate)
                    if t >= start + p.duration:
                        break
                    out.append(self._draw(rng, i, p, round(t, 4), f"p{i}n{j}"))
                    j += 1
        return out

    def client(self, phase: int, client: int) -> Iterator[Planned]:
        """The requests one closed-loop client sends, in order (its own stream from the seed; endless)."""
        rng = random.Random(f"{self.seed}/{phase}/{client}")
        j = 0
        while True:
            yield self._draw(rng, phase, self.phases[phase], None, f"p{phase}c{client}n{j}")
            j += 1


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    if lo >= hi:
        return lo
    return min(hi, max(lo, round(math.exp(rng.uniform(math.log(lo), math.log(hi))))))


def random_workload(seed: int, span_s: float = 40.0) -> Workload:
    """A workload drawn from the seed: 1-3 phases of any arrival over 1-3 classes (the randomized sweep)."""
    rng = random.Random(seed)
    phases = []
    t = 0.0
    names = [n for n in CLASSES if n != "lora"]
    for _ in range(rng.randint(1, 3)):
        mix = tuple((n, float(rng.randint(1, 4))) for n in rng.sample(names, rng.randint(1, 3)))
        kind = rng.choice(["poisson", "closed", "burst"])
        dur = round(rng.uniform(5, span_s / 2), 1)
        if kind == "poisson":
            phases.append(Phase(kind, mix, rate=round(rng.uniform(5, 60), 1), duration=dur, at=round(t, 1)))
        elif kind == "closed":
            phases.append(Phase(kind, mix, clients=rng.choice([16, 64, 200, 300]), duration=dur, at=round(t, 1)))
        else:
            phases.append(Phase(kind, mix, n=rng.choice([50, 200, 400]), at=round(t, 1)))
        t += dur if kind != "burst" else rng.uniform(3, 10)
    return Workload(seed, tuple(phases))


# -- the driver --------------------------------------------------------------------------------------------------


def _body(model: str, p: Planned, stream: bool) -> bytes:
    ids = ",".join(map(str, p.prompt))
    eos = "true" if p.ignore_eos else "false"
    tail = ',"stream":true' if stream else ""
    return (f'{{"model":{json.dumps(p.adapter or model)},"prompt":[{ids}],"max_tokens":{p.max_tokens},'
            f'"ignore_eos":{eos},"temperature":0{tail}}}').encode()


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = time.monotonic()


KEEP_IDLE_S = 3.0  # uvicorn closes a kept-alive connection after 5 s idle: never reuse one that old


class Driver(Background):
    """Runs a Workload against `url` on its own event loop thread; `records` holds one dict per request sent.

    Record keys: id, cls, phase, prompt_len, shared_prefix, max_tokens, adapter, sent, first (streaming:
    first output bytes), finished, status, error; times are time.monotonic() minus `t0`.
    """

    thread_name = "workload-driver"

    def __init__(self, url: str, model: str, workload: Workload, t0: float, stream: bool = False,
                 request_timeout: float = 900.0) -> None:
        super().__init__()
        host, _, port = url.removeprefix("http://").partition(":")
        self.host, self.port = host, int(port or 80)
        self.model = model
        self.workload = workload
        self.t0 = t0
        self.stream = stream
        self.request_timeout = request_timeout
        self.records: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._idle: list[_Conn] = []
        self.stop_at: float | None = None  # closed loops stop sending at their phase end, or at stop()

    # -- sending ---------------------------------------------------------------------------------------------
    async def _main(self) -> None:
        self.started_at = time.monotonic()
        starts = self.workload.starts()
        jobs = [asyncio.create_task(self._open(p)) for p in self.workload.open_loop()]
        for i, ph in enumerate(self.workload.phases):
            if ph.kind == "closed":
                end = starts[i] + ph.duration
                jobs += [asyncio.create_task(self._closed(self.workload.client(i, c), starts[i], end))
                         for c in range(ph.clients)]
        try:
            await asyncio.gather(*jobs)
        finally:
            for c in self._idle:
                c.writer.close()

    async def _open(self, p: Planned) -> None:
        assert p.at is not None
        await asyncio.sleep(max(0.0, self.started_at + p.at - time.monotonic()))
        await self._send(p)

    async def _closed(self, requests: Iterator[Planned], start: float, end: float) -> None:
        await asyncio.sleep(max(0.0, self.started_at + start - time.monotonic()))
        for p in requests:
            if time.monotonic() >= self.started_at + end:
                return
            await self._send(p)

    async def _conn(self, fresh: bool = False) -> _Conn:
        while self._idle and not fresh:
            conn = self._idle.pop()
            if time.monotonic() - conn.idle_since < KEEP_IDLE_S:
                return conn
            conn.writer.close()
        reader, writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        return _Conn(reader, writer)

    async def _send(self, p: Planned) -> None:
        body = _body(self.model, p, self.stream)
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"X-Request-Id: {p.rid}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        rec: dict[str, Any] = {"id": p.rid, "cls": p.cls, "phase": p.phase, "prompt_len": p.prompt_len,
                               "shared_prefix": p.shared_prefix, "max_tokens": p.max_tokens, "adapter": p.adapter}
        self.records.append(rec)
        for attempt in range(2):  # a kept-alive connection the server closed meanwhile: one fresh retry
            conn = await self._conn(fresh=attempt > 0)
            rec["sent"] = round(time.monotonic() - self.t0, 4)
            try:
                conn.writer.write(head + body)
                await conn.writer.drain()
                status, keep = await asyncio.wait_for(self._answer(conn, rec), self.request_timeout)
            except asyncio.CancelledError:
                rec["cancelled"] = round(time.monotonic() - self.t0, 4)
                conn.writer.close()
                raise
            except (ConnectionError, asyncio.IncompleteReadError, OSError) as exc:
                conn.writer.close()
                if attempt == 0 and "first" not in rec:
                    continue
                rec["error"] = repr(exc)[:200]
                self.errors.append(rec["error"])
                return
            except TimeoutError:
                conn.writer.close()
                rec["error"] = "timeout"
                self.errors.append("timeout")
                return
            rec["finished"] = round(time.monotonic() - self.t0, 4)
            rec["status"] = status
            if status != 200:
                self.errors.append(f"HTTP {status}: {rec.get('error', '')}")
            if keep:
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
            else:
                conn.writer.close()
            return

    async def _answer(self, conn: _Conn, rec: dict[str, Any]) -> tuple[int, bool]:
        """Read one response; (status, keep-alive). Streaming bodies are chunked: the first chunk's arrival is
        the first output; a body is only skipped, except an error's first 200 bytes."""
        reader = conn.reader
        status_line = await reader.readline()
        if not status_line:
            raise ConnectionError("closed before the answer")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        keep = headers.get("connection", "").lower() != "close"
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    await reader.readline()
                    break
                chunk = await reader.readexactly(size + 2)
                if "first" not in rec and b'"text"' in chunk:
                    rec["first"] = round(time.monotonic() - self.t0, 4)
        else:
            data = await reader.readexactly(int(headers.get("content-length", "0")))
            if status != 200:
                rec["error"] = data[:200].decode(errors="replace")
        return status, keep


def prompt_vocab_ok(p: Planned) -> bool:
    """Every token id inside the tiny model's vocabulary (1..VOCAB_IDS)."""
    return all(1 <= t <= VOCAB_IDS for t in p.prompt)
