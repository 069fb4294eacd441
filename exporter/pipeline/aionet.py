"""httpcore's network layer on asyncio's own transports, for plain-HTTP targets (issue 25).

httpx stays the client; only the streams under httpcore change (its public `AsyncNetworkBackend` interface).
httpcore on asyncio goes through anyio, and py-spy on a sidecar at one target put 62 % of its active samples
in the fetch, most of it anyio's stream: every send ends with a `sleep(0)` (one more turn of the event loop),
every receive turns reading on and off again (two epoll_ctl calls), every read and write opens cancel scopes,
and httpcore asks `select()` whether a kept-alive connection was closed before each request. Here a protocol
keeps reading (up to `HIGH_WATER` buffered) and a read or write that can finish at once never yields; whether a
kept connection was closed is what the protocol already saw.

The errors are httpcore's own, with anyio's wording (one vocabulary whichever backend a command uses): a
failed connect is `ConnectError("All connection attempts failed")`, a reset `ReadError("")` / `WriteError("")`,
timeouts `ConnectTimeout` / `ReadTimeout` / `WriteTimeout` (the scrape's own deadline is outside, in `fetch`).
TLS targets keep httpcore's anyio backend (`scrape.client`): their handshake errors are worded there.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterable
from typing import Any

import httpcore

HIGH_WATER = 1 << 20  # bytes buffered before the socket is no longer read (read() drains them)
SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self.readable: asyncio.Future[None] | None = None
        self.writable: asyncio.Future[None] | None = None
        self.paused = False  # our reading, above HIGH_WATER
        self.write_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def _wake_reader(self) -> None:
        if self.readable is not None and not self.readable.done():
            self.readable.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > HIGH_WATER and self.transport is not None and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_reader()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake_reader()
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)


async def _within(future: asyncio.Future[None], timeout: float | None,
                  timed_out: type[httpcore.TimeoutException]) -> None:
    """Wait for `future` (the protocol resolves it), raising httpcore's `timed_out` past `timeout` seconds."""
    try:
        if timeout is None:
            await future
        else:
            async with asyncio.timeout(timeout):
                await future
    except TimeoutError:
        raise timed_out("") from None


class Stream(httpcore.AsyncNetworkStream):
    """One TCP connection: httpcore's stream interface over an asyncio transport and `_Protocol`."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self._protocol
        if not p.buffer and not p.eof:
            p.readable = asyncio.get_running_loop().create_future()
            try:
                await _within(p.readable, timeout, httpcore.ReadTimeout)
            finally:
                p.readable = None
        if p.buffer:
            data = bytes(p.buffer[:max_bytes])
            del p.buffer[:max_bytes]
            if p.paused and len(p.buffer) <= HIGH_WATER // 2 and not self._transport.is_closing():
                p.paused = False
                self._transport.resume_reading()
            return data
        if p.error is not None:
            raise httpcore.ReadError("")
        return b""  # the peer closed: httpcore decides whether that was early

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        p = self._protocol
        if self._transport.is_closing() or p.error is not None:
            raise httpcore.WriteError("")
        self._transport.write(buffer)
        if p.write_paused:
            p.writable = asyncio.get_running_loop().create_future()
            try:
                await _within(p.writable, timeout, httpcore.WriteTimeout)
            finally:
                p.writable = None
            if p.error is not None or self._transport.is_closing():
                raise httpcore.WriteError("")

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("TLS is not served by this backend: an https target uses httpcore's own")

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # httpcore: a kept-alive connection the server closed (or wrote to) is dropped
            return bool(self._protocol.buffer) or self._protocol.eof
        if info == "ssl_object":
            return None
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        return None


class Backend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend on asyncio transports (plain TCP only)."""

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[SocketOption] | None = None) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        protocol = _Protocol()
        try:
            async with asyncio.timeout(timeout):
                transport, _ = await loop.create_connection(
                    lambda: protocol, host, port, local_addr=(local_address, 0) if local_address else None)
        except TimeoutError:
            raise httpcore.ConnectTimeout("") from None
        except OSError as exc:
            raise httpcore.ConnectError("All connection attempts failed") from exc
        sock = transport.get_extra_info("socket")
        for option in socket_options or ():
            with contextlib.suppress(OSError):
                sock.setsockopt(*option)
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):  # asyncio sets it too; said, as httpcore's anyio stream has it
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return Stream(transport, protocol)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[SocketOption] | None = None
                                  ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not served by this backend")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
