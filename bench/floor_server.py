"""The floor a load generator on this machine measures: a minimal asyncio HTTP/1.1 server that answers every
request on a kept-alive connection with one pre-built response of a given body (as is, or gzipped at the
sidecar's level with Content-Encoding: gzip). `bench/b8_serving.py` reads our own /metrics body and times this
server with the same hey load beside the sidecar's figure: what is left between the two is ours.

    python -m bench.floor_server PORT BODY_FILE [gzip] [uvloop]

`uvloop`: on uvloop's event loop instead of asyncio's (where uvloop can be imported), to tell what the loop
itself changes in the floor.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from exporter.expose.bodies import gzip_body
from exporter.replay import recording as replay

from . import fastreplay


def response(body: bytes, gzipped: bool) -> bytes:
    if gzipped:
        return fastreplay.response(gzip_body(body), replay.EXPOSITION_TYPE, headers="Content-Encoding: gzip\r\n")
    return fastreplay.response(body, replay.EXPOSITION_TYPE)


async def serve(port: int, answer: bytes) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    port, body, options = int(sys.argv[1]), Path(sys.argv[2]).read_bytes(), sys.argv[3:]
    server = serve(port, response(body, "gzip" in options))
    if "uvloop" in options:
        import uvloop  # type: ignore[import-not-found,unused-ignore]  # only where installed

        uvloop.run(server)
    else:
        asyncio.run(server)


if __name__ == "__main__":
    main()
