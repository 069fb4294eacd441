"""Targets that misbehave on purpose, for the fault-injection tests (tests/unit/test_isolation_*) and the soak
(bench/soak.py): real loopback HTTP servers (asyncio, stdlib only) that serve a recorded real vLLM exposition,
or drip it, stall, reset, flap, send absurd values or huge bodies.

Each `Target` listens on its own port (distinct origins, as in a fleet) and counts the requests it saw per path
(`hits`); its `mode` may be changed while it runs. As a program it serves a fleet for the soak:

    python -m tests.hostile --count 100 --hostile 33 --rotate 120 --urls-file F --stats-port P

target i < hostile takes a hostile mode that moves to the next one every --rotate seconds (shifted per
target, so every mode is live at once); `GET http://127.0.0.1:P/stats` answers the /metrics request times of
every target since the last `GET /stats/reset`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).parent / "fixtures" / "vllm-0.32.0"
DRIP = 0.05  # s between two bytes of a dripped answer: always inside any read timeout


def snapshot(scenario: str = "false-full") -> str:
    return (ROOT / scenario / "snapshot.prom").read_text()


def models_json(scenario: str = "false-full") -> bytes:
    meta = json.loads((ROOT / scenario / "meta.json").read_text())
    return json.dumps(meta.get("v1_models") or {"object": "list", "data": []}).encode()


def _sub(text: str, pattern: str, repl: str) -> str:
    out, n = re.subn(pattern, repl, text, count=1)
    if n != 1:
        raise ValueError(f"no match for {pattern!r} in the recorded exposition")
    return out


def _value(name: str, value: str) -> Callable[[str], str]:
    return lambda text: _sub(text, rf"(?m)^({re.escape(name)}\{{[^}}]*\}}) \S+$", rf"\g<1> {value}")


def _label(key: str, value: str) -> Callable[[str], str]:
    return lambda text: _sub(text, rf'{key}="[^"]*"', f'{key}="{value}"')


def _duplicate(name: str) -> Callable[[str], str]:
    def dup(text: str) -> str:
        line = re.search(rf"(?m)^{re.escape(name)}\{{[^}}]*\}} \S+\n", text)
        if line is None:
            raise ValueError(name)
        return text[:line.end()] + line.group(0) + text[line.end():]
    return dup


# Absurd values, each the one change to a recorded real exposition (issue 21, kind 2 and 5).
ABSURD: dict[str, Callable[[str], str]] = {
    "num_gpu_blocks=1e308": _label("num_gpu_blocks", "1e308"),
    "num_gpu_blocks=inf": _label("num_gpu_blocks", "inf"),
    "num_gpu_blocks=-8": _label("num_gpu_blocks", "-8"),
    "block_size=0.5": _label("block_size", "0.5"),
    "gpu_memory_utilization=inf": _label("gpu_memory_utilization", "inf"),
    "block_size=1e30": _label("block_size", "1e30"),
    # Python's float() reads full-width digits and padded digits as numbers; vLLM writes neither.
    "num_gpu_blocks=full-width": _label("num_gpu_blocks", "\uff14\uff10"),
    "num_gpu_blocks=padded": _label("num_gpu_blocks", " 40"),
    "kv_cache_size_tokens=1e300": _label("kv_cache_size_tokens", "1e300"),
    "kv_cache_max_concurrency=nan": _label("kv_cache_max_concurrency", "nan"),
    "running=1e308": _value("vllm:num_requests_running", "1e308"),
    "running=-5": _value("vllm:num_requests_running", "-5"),
    "running=0.5": _value("vllm:num_requests_running", "0.5"),
    "waiting=NaN": _value("vllm:num_requests_waiting", "NaN"),
    "usage=1.5": _value("vllm:kv_cache_usage_perc", "1.5"),
    "usage=+Inf": _value("vllm:kv_cache_usage_perc", "+Inf"),
    "preemptions=NaN": _value("vllm:num_preemptions_total", "NaN"),
    "prompt_tokens=+Inf": _value("vllm:prompt_tokens_total", "+Inf"),
    "prompt_count=+Inf": _value("vllm:request_prompt_tokens_count", "+Inf"),
    "prompt_sum=NaN": _value("vllm:request_prompt_tokens_sum", "NaN"),
    "le=abc": lambda text: _sub(text, r'le="1\.0"', 'le="abc"'),
    "bucket=-1": lambda text: _sub(text, r'(?m)^(vllm:request_prompt_tokens_bucket\{[^}]*le="\+Inf"[^}]*\}) \S+$',
                                   r"\g<1> -1.0"),
    "duplicate running": _duplicate("vllm:num_requests_running"),
    "duplicate usage": _duplicate("vllm:kv_cache_usage_perc"),
}


def absurd(kind: str, scenario: str = "false-full") -> str:
    return ABSURD[kind](snapshot(scenario))


def huge(size: int, scenario: str = "false-full") -> str:
    """The recorded exposition and then families the sidecar does not read, up to `size` bytes (a vLLM with
    many LoRA adapters or a wide custom exporter in front of it)."""
    base = snapshot(scenario)
    pad = "".join(f'vllm:lora_padding_total{{adapter="a{i:07d}",engine="0",model_name="tiny-llama"}} {i}.0\n'
                  for i in range(2000))
    out = [base, "# HELP vllm:lora_padding_total padding\n# TYPE vllm:lora_padding_total counter\n"]
    total = sum(map(len, out))
    while total < size:
        out.append(pad)
        total += len(pad)
    return "".join(out)


def response(body: bytes, content_type: str = "text/plain; version=0.0.4", status: str = "200 OK") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: keep-alive\r\n\r\n").encode() + body


@functools.cache
def encoded(kind: str, scenario: str = "false-full") -> bytes:
    """A /metrics answer with a Content-Encoding although identity was asked (a compressing proxy, a hostile target):
    "gzip" the real snapshot gzipped; "bomb" 64 MiB of newlines in one gzip layer (65 KB on the wire); "stacked"
    256 MiB twice gzipped ("gzip, gzip", 1 KB); "not-gzip" a body that is no gzip at all; "br" brotli named. Built
    once per process (compressing 256 MiB takes seconds: a scrape of the first answer must not wait for it)."""
    import gzip

    body, names = {
        "gzip": (lambda: gzip.compress(snapshot(scenario).encode()), "gzip"),
        "bomb": (lambda: gzip.compress(b"\n" * (64 << 20), 9), "gzip"),
        "stacked": (lambda: gzip.compress(gzip.compress(b"\n" * (256 << 20), 9), 9), "gzip, gzip"),
        "not-gzip": (lambda: b"this is not gzip at all\n", "gzip"),
        "br": (lambda: b"\x00" * 64, "br"),
    }[kind]
    data = body()
    return (f"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Encoding: {names}\r\n"
            f"Content-Length: {len(data)}\r\nConnection: keep-alive\r\n\r\n").encode() + data


ENCODED = ("gzip", "bomb", "stacked", "not-gzip", "br")
MODES = ("ok", "drip-body", "drip-headers", "silent", "drip-models", "endless", "reset", "http500", "garbage",
         "flap", "huge", "redirect", "long-headers", *(f"absurd:{k}" for k in ABSURD),
         *(f"encoded:{k}" for k in ENCODED))
HOSTILE_ROTATION = ("drip-body", "drip-headers", "silent", "drip-models", "endless", "reset", "http500", "garbage",
                    "flap", "huge", "absurd:num_gpu_blocks=1e308", "absurd:usage=1.5", "absurd:waiting=NaN",
                    "absurd:duplicate running", "absurd:le=abc", "absurd:gpu_memory_utilization=inf")


class Target:
    """One loopback server acting as a vLLM in `mode`."""

    def __init__(self, mode: str = "ok", scenario: str = "false-full", huge_bytes: int = 15 * 1024 * 1024) -> None:
        self.mode = mode
        self.scenario = scenario
        self.ok = response(snapshot(scenario).encode())
        self.models = response(models_json(scenario), "application/json")
        self.version = response(b'{"version":"0.32.0"}', "application/json")
        self.huge_bytes = huge_bytes
        self._huge: bytes | None = None
        self._absurd: dict[str, bytes] = {}
        self.hits: dict[str, int] = {}
        self.metrics_at: list[float] = []  # monotonic time of each /metrics request
        self.metrics_head = b""  # the last /metrics request's head
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._flap = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> Target:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    def _body(self) -> bytes:
        if self.mode == "huge":
            if self._huge is None:
                self._huge = response(huge(self.huge_bytes, self.scenario).encode())
            return self._huge
        if self.mode.startswith("encoded:"):
            kind = self.mode.split(":", 1)[1]
            if self.mode not in self._absurd:
                self._absurd[self.mode] = encoded(kind, self.scenario)
            return self._absurd[self.mode]
        if self.mode.startswith("absurd:"):
            kind = self.mode.split(":", 1)[1]
            if kind not in self._absurd:
                self._absurd[kind] = response(absurd(kind, self.scenario).encode())
            return self._absurd[kind]
        return self.ok

    async def _drip(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        for i in range(len(data)):
            writer.write(data[i:i + 1])
            await writer.drain()
            await asyncio.sleep(DRIP)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode("latin-1")
                self.hits[path] = self.hits.get(path, 0) + 1
                mode = self.mode
                if path == "/metrics":
                    self.metrics_at.append(time.monotonic())
                    self.metrics_head = head
                if path == "/v1/models":
                    if mode == "drip-models":
                        await self._drip(writer, self.models)
                    else:
                        writer.write(self.models)
                elif path == "/version":
                    writer.write(self.version)
                elif path != "/metrics":
                    writer.write(response(b"not found\n", status="404 Not Found"))
                elif mode == "drip-body":
                    ok = self._body()
                    cut = ok.index(b"\r\n\r\n") + 4
                    writer.write(ok[:cut])
                    await self._drip(writer, ok[cut:])
                elif mode == "drip-headers":
                    await self._drip(writer, self._body())
                elif mode == "silent":
                    await asyncio.sleep(3600)
                elif mode == "endless":  # a body that never ends, each piece inside any read timeout
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
                    line = b'vllm:other_series{engine="0"} 1.0\n'
                    while True:
                        writer.write(b"%x\r\n%s\r\n" % (len(line), line))
                        await writer.drain()
                        await asyncio.sleep(DRIP)
                elif mode == "reset":
                    writer.transport.abort()
                    return
                elif mode == "http500" or (mode == "flap" and self._flap):
                    writer.write(response(b"boom\n", status="500 Internal Server Error"))
                elif mode == "redirect":  # to the cloud metadata address: said, never followed
                    writer.write(b"HTTP/1.1 301 Moved Permanently\r\nLocation: http://169.254.169.254/latest/meta-data/"
                                 b"\r\nContent-Length: 0\r\n\r\n")
                elif mode == "long-headers":  # 200 KB of headers before any body
                    writer.write(b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 200_000 + b"\r\n\r\n")
                elif mode == "garbage":
                    writer.write(response(bytes(range(256)) * 64))
                else:
                    writer.write(self._body())
                if mode == "flap":
                    self._flap = not self._flap
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, IndexError):
            pass
        finally:
            writer.close()


@contextlib.contextmanager
def serving(mode: str = "ok", timeout: float = 120.0) -> Iterator[Target]:
    """A `Target` in `mode` served by an event loop in a thread of its own, for tests whose sidecar runs in
    another process or another loop; stopped on exit."""
    ready, state = threading.Event(), {}

    def run() -> None:
        async def main() -> None:
            stop = asyncio.Event()
            state["target"], state["loop"], state["stop"] = await Target(mode).start(), asyncio.get_running_loop(), stop
            ready.set()
            await stop.wait()

        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not ready.wait(timeout):
        raise RuntimeError(f"the {mode} target did not start within {timeout:g} s")
    try:
        yield state["target"]  # type: ignore[misc]
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)  # type: ignore[attr-defined]
        thread.join(timeout)


async def _fleet(args: argparse.Namespace) -> None:
    targets = [await Target("ok").start() for _ in range(args.count)]
    tmp = args.urls_file.with_suffix(".tmp")
    tmp.write_text("".join(t.url + "\n" for t in targets))
    tmp.rename(args.urls_file)
    started = time.monotonic()

    async def rotate() -> None:
        while True:
            step = int((time.monotonic() - started) // args.rotate)
            for i, t in enumerate(targets[:args.hostile]):
                t.mode = HOSTILE_ROTATION[(i + step) % len(HOSTILE_ROTATION)]
            await asyncio.sleep(1.0)

    async def stats(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            if path == "/stats/reset":
                for t in targets:
                    t.metrics_at.clear()
                body = b"{}"
            else:
                body = json.dumps({"hostile": args.hostile, "targets": [
                    {"url": t.url, "mode": t.mode, "metrics_at": t.metrics_at} for t in targets]}).encode()
            writer.write(response(body, "application/json"))
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(stats, "127.0.0.1", args.stats_port)
    async with server:
        await asyncio.gather(server.serve_forever(), rotate())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--hostile", type=int, default=33)
    p.add_argument("--rotate", type=float, default=120.0)
    p.add_argument("--urls-file", type=Path, required=True)
    p.add_argument("--stats-port", type=int, required=True)
    asyncio.run(_fleet(p.parse_args()))


if __name__ == "__main__":
    main()
