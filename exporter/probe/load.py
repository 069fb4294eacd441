"""The probe's load: closed-loop clients sending requests of one exact shape, never more than a budget.

Every request asks `/v1/completions` for exactly `max_tokens` tokens (`ignore_eos`, greedy), so the KV footprint is
known. Prompts are token ids when the server runs without a tokenizer (`--skip-tokenizer-init`), else text
calibrated with the server's own `/tokenize` to the stated length. No two requests share a prefix block: token-id
prompts differ in their first two ids, text prompts carry their own `cache_salt` (vLLM hashes it into the first
block, `generate_block_hash_extra_keys`, vllm/v1/core/kv_cache_utils.py @0.32.0), so the prefix cache gives no
request blocks another one paid for.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import httpx

from ..core import defaults

# Token ids 10..499: inside any vocabulary of at least 500 (the tiny test model's is 512) and clear of the
# special ids at the bottom of most vocabularies (<unk>, <s>, </s>, padding).
_LOW, _HIGH = 10, 500
_SPAN = _HIGH - _LOW


def token_ids(length: int, seed: int) -> list[int]:
    """`length` token ids whose first two spell `seed` (so two seeds below 490² differ in the first block)."""
    head = [_LOW + seed % _SPAN, _LOW + (seed // _SPAN) % _SPAN]
    body = [_LOW + (seed + i) % _SPAN for i in range(2, length)]
    return (head + body)[:length]


class ProbeError(Exception):
    """The load cannot go on (one sentence): the server refused the request shape, a prompt cannot be built."""


def _auth(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def has_tokenizer(client: httpx.AsyncClient, base: str, model: str, api_key: str | None) -> bool:
    """The server tokenizes text: `/tokenize` answers 200 (vLLM without --skip-tokenizer-init)."""
    try:
        r = await client.post(f"{base}/tokenize", json={"model": model, "prompt": "probe"}, headers=_auth(api_key),
                              timeout=10.0)
    except httpx.HTTPError:
        return False
    return r.status_code == 200 and isinstance(r.json().get("count"), int)


async def _count(client: httpx.AsyncClient, base: str, model: str, text: str, api_key: str | None) -> int:
    r = await client.post(f"{base}/tokenize", json={"model": model, "prompt": text}, headers=_auth(api_key),
                          timeout=30.0)
    if r.status_code != 200:
        raise ProbeError(f"{base}/tokenize answered HTTP {r.status_code}: cannot size a text prompt")
    return int(r.json()["count"])


async def text_prompt(client: httpx.AsyncClient, base: str, model: str, length: int,
                      api_key: str | None) -> str:
    """A text the server's tokenizer makes exactly `length` tokens (special tokens included, as /v1/completions
    counts them): repeated words, the count corrected from `/tokenize` until it matches."""
    for unit in (" probe", " a", " the", " x"):
        words = length
        for _ in range(6):
            text = "ready" + unit * max(0, words - 1)
            got = await _count(client, base, model, text, api_key)
            if got == length:
                return text
            words += length - got
            if words < 1:
                break
    raise ProbeError(f"the server's tokenizer makes no text of exactly {length} tokens from repeated words: pass "
                     "--prompt-kind token-ids (the server must run with --skip-tokenizer-init for that)")


@dataclass
class Counts:
    sent: int = 0
    finished: int = 0
    failed: int = 0


class Load:
    """Closed-loop clients: each sends a request, waits for its answer, sends the next, while the budget lasts.

    `grow(n)` adds clients up to n; `cancel()` cancels every request in flight (closing its connection, which makes
    vLLM abort it). `budget` requests at most are ever sent."""

    def __init__(self, client: httpx.AsyncClient, base: str, model: str, prompt: list[int] | str, max_tokens: int,
                 budget: int, api_key: str | None = None) -> None:
        self.client, self.base, self.model = client, base, model
        self.prompt, self.max_tokens, self.budget = prompt, max_tokens, budget
        self.headers = _auth(api_key)
        self.counts = Counts()
        self.tasks: list[asyncio.Task[None]] = []
        self.exhausted = asyncio.Event()  # the budget is spent (requests may still be in flight)
        self.fatal: str | None = None  # the server refused the request shape: no point in sending more
        # The server failed `defaults.PROBE_FAILURE_LIMIT` requests in a row (5xx, 429, connection lost): what it
        # shows from then on is its failure, not its capacity. The last error, in one sentence.
        self.broken: str | None = None
        self.failure_limit = defaults.PROBE_FAILURE_LIMIT
        self._in_a_row = 0

    def body(self, seed: int) -> dict[str, Any]:
        prompt: Any = token_ids(len(self.prompt), seed) if isinstance(self.prompt, list) else self.prompt
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": self.max_tokens,
                                "ignore_eos": True, "temperature": 0}
        if isinstance(self.prompt, str):
            body["cache_salt"] = f"vllm-headroom-probe-{seed}"
        return body

    @property
    def clients(self) -> int:
        return len(self.tasks)

    @property
    def stopped(self) -> bool:
        """No more requests will be sent: the shape was refused or the server keeps failing."""
        return self.fatal is not None or self.broken is not None

    def _failed(self, error: str) -> None:
        self.counts.failed += 1
        self._in_a_row += 1
        if self._in_a_row >= self.failure_limit and self.broken is None:
            self.broken = f"{self._in_a_row} requests in a row failed, the last with {error}"

    def grow(self, n: int) -> None:
        while len(self.tasks) < n and not self.exhausted.is_set() and not self.stopped:
            self.tasks.append(asyncio.create_task(self._client()))

    async def _client(self) -> None:
        c = self.counts
        while not self.stopped:
            if c.sent >= self.budget:
                self.exhausted.set()
                return
            c.sent += 1  # one event loop: counted before the request leaves, so the budget is never exceeded
            try:
                r = await self.client.post(f"{self.base}/v1/completions", json=self.body(c.sent),
                                           headers=self.headers)
            except httpx.HTTPError as exc:
                self._failed(f"{type(exc).__name__} ({exc or 'no message'}) from {self.base}/v1/completions")
                await asyncio.sleep(0.2)
                continue
            if r.status_code == 200:
                c.finished += 1
                self._in_a_row = 0
                continue
            if 400 <= r.status_code < 500 and r.status_code != 429:
                c.failed += 1
                self.fatal = f"{self.base}/v1/completions answered HTTP {r.status_code}: {_message(r)}"
                return
            self._failed(f"HTTP {r.status_code} from {self.base}/v1/completions: {_message(r)}")
            await asyncio.sleep(0.2)

    async def cancel(self) -> None:
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t


def _message(r: httpx.Response) -> str:
    """The server's error message, on one line."""
    try:
        doc = r.json()
        msg = doc.get("message") or (doc.get("error") or {}).get("message") or str(doc)
    except (ValueError, AttributeError):
        msg = r.text
    return " ".join(str(msg).split())[:300]
