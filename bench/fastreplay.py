"""A light replay server standing in for many vLLM servers at once: one asyncio process, one loopback port.

Target i is the base URL `http://127.0.0.1:PORT/t/i`; the sidecar appends `/metrics`, `/v1/models` and
`/version`. Bodies are whole pre-built HTTP/1.1 responses (keep-alive), so serving a 53 KB exposition costs
one `write`. Two modes:

- timeline (default): the recorded real timeline of a scenario, looping; target i is offset by i frames so
  the fleet does not move in lockstep;
- `--snapshots`: every target shows one recorded scenario snapshot, switched by `GET /control/<scenario>`
  (answers the CLOCK_MONOTONIC time of the switch, comparable across processes on Linux).

With `--count N --urls-file F` it listens on N loopback ports instead (one per target, distinct origins like
a real fleet, so the sidecar holds one connection per target) and writes their base URLs to F.

`GET /stats` answers, per target, the gaps between consecutive /metrics requests (the achieved scrape
interval); `GET /stats/reset` clears them.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import statistics
import time
from pathlib import Path

from exporter.replay import recording as replay

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "vllm-0.32.0"
SCENARIOS = ("idle", "false-full", "kv-full", "preemption", "head-of-line")


def response(body: bytes, content_type: str, status: str = "200 OK", headers: str = "") -> bytes:
    """One whole HTTP/1.1 keep-alive response; `headers`: more header lines, each ending in CRLF."""
    head = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            f"{headers}Connection: keep-alive\r\n\r\n")
    return head.encode() + body


NOT_FOUND = response(b"not found\n", "text/plain", "404 Not Found")


class Server:
    def __init__(self, scenario: str, snapshots: bool, speed: float) -> None:
        rec = replay.load(FIXTURES / scenario)
        self.meta = rec.meta
        self.frame_s = float(rec.meta.get("interval", 0.5)) / speed
        self.frames = [response(text.encode(), replay.EXPOSITION_TYPE) for _, text in rec.frames]
        self.snapshots = {name: response((FIXTURES / name / "snapshot.prom").read_bytes(), replay.EXPOSITION_TYPE)
                          for name in SCENARIOS} if snapshots else {}
        self.current = self.snapshots.get("idle")
        models = rec.meta.get("v1_models") or {"object": "list", "data": []}
        version = rec.meta.get("version") or {"version": rec.meta.get("vllm_version", "unknown")}
        self.models = response(json.dumps(models).encode(), "application/json")
        self.version = response(json.dumps(version).encode(), "application/json")
        self.started = time.monotonic()
        self.seen: dict[str, list[float]] = {}
        self.requests = 0

    def metrics(self, target: str) -> bytes:
        now = time.monotonic()
        self.seen.setdefault(target, []).append(now)
        if self.current is not None:
            return self.current
        offset = int(target) if target.isdigit() else 0
        return self.frames[(int((now - self.started) / self.frame_s) + offset) % len(self.frames)]

    def stats(self) -> bytes:
        gaps = [b - a for times in self.seen.values() for a, b in itertools.pairwise(times)]
        per_target = [len(t) for t in self.seen.values()]
        doc = {"targets": len(self.seen), "requests": self.requests, "scrapes": sum(per_target),
               "gaps": len(gaps),
               "interval_median_s": statistics.median(gaps) if gaps else None,
               "interval_p95_s": sorted(gaps)[int(0.95 * (len(gaps) - 1))] if gaps else None,
               "interval_max_s": max(gaps) if gaps else None}
        return response(json.dumps(doc).encode(), "application/json")

    def route(self, path: str, port_target: str) -> bytes:
        self.requests += 1
        if path.startswith("/t/"):
            target, _, rest = path[3:].partition("/")
            rest = "/" + rest
        else:
            target, rest = port_target, path
        if rest == "/metrics":
            return self.metrics(target)
        if rest == "/v1/models":
            return self.models
        if rest == "/version":
            return self.version
        if rest == "/health":
            return response(b"", "text/plain")
        if path == "/stats":
            return self.stats()
        if path == "/stats/reset":
            self.seen.clear()
            return response(b"{}", "application/json")
        if path.startswith("/control/") and path[9:] in self.snapshots:
            self.current = self.snapshots[path[9:]]
            return response(json.dumps({"switched_at": time.monotonic()}).encode(), "application/json")
        return NOT_FOUND

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: str = "0") -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                parts = head.split(b" ", 2)
                if len(parts) < 3:
                    break
                writer.write(self.route(parts[1].decode("latin-1").split("?", 1)[0], target))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()


async def serve(port: int, server: Server) -> None:
    srv = await asyncio.start_server(server.handle, "127.0.0.1", port, backlog=4096)
    async with srv:
        await srv.serve_forever()


async def serve_many(count: int, urls_file: Path, server: Server) -> None:
    servers = []
    for i in range(count):
        servers.append(await asyncio.start_server(functools.partial(server.handle, target=str(i)), "127.0.0.1", 0))
    ports = [srv.sockets[0].getsockname()[1] for srv in servers]
    tmp = urls_file.with_suffix(".tmp")
    tmp.write_text("".join(f"http://127.0.0.1:{p}\n" for p in ports))
    tmp.rename(urls_file)  # complete when it appears
    await asyncio.gather(*(srv.serve_forever() for srv in servers))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--port", type=int, default=0, help="one port, targets /t/<i> (or with --count: /stats only)")
    p.add_argument("--count", type=int, default=0, help="listen on this many ports, one per target")
    p.add_argument("--urls-file", type=Path, help="with --count: where to write the targets' base URLs")
    p.add_argument("--scenario", default="false-full", choices=SCENARIOS)
    p.add_argument("--snapshots", action="store_true")
    p.add_argument("--speed", type=float, default=1.0)
    args = p.parse_args()
    server = Server(args.scenario, args.snapshots, args.speed)
    if args.count:
        if args.urls_file is None:
            p.error("--count needs --urls-file")

        async def both() -> None:
            await asyncio.gather(serve(args.port, server), serve_many(args.count, args.urls_file, server))

        asyncio.run(both())
    else:
        asyncio.run(serve(args.port, server))


if __name__ == "__main__":
    main()
