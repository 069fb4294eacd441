"""The listening side of the sidecar, without the web stack: the listen address, the socket, the file limit.

Kept apart from `server` so that the CLI can name a taken port or a bad address without importing FastAPI.
"""

from __future__ import annotations

import errno
import resource
import socket


def parse_listen_address(text: str) -> tuple[str, int]:
    """'0.0.0.0:9478', '[::]:9478' or ':9478' → (host, port); raises ValueError with one sentence."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listen address {text!r} is not host:port, e.g. 0.0.0.0:9478, [::1]:9478 or :9478")
    if int(port) == 0:
        raise ValueError(f"listen address {text!r}: port 0 (any free port) is not allowed, since Prometheus and "
                         "the health check need a known port: pick one such as :9478")
    if int(port) > 65535:
        raise ValueError(f"listen address {text!r}: port {int(port)} is not in 1-65535")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def host_port(host: str, port: int) -> str:
    """host:port as written in a URL: an IPv6 address in brackets ([::1]:9478)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def page_url(host: str, port: int) -> str:
    """The status page's URL for people: a wildcard address becomes the loopback of its family."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://{host_port(shown, port)}/"


class PortInUse(OSError):
    """The listen address cannot be had: one sentence for the user (exit code 1)."""


def bind(host: str, port: int, flag: str = "--web.listen-address") -> socket.socket:
    """A listening TCP socket on host:port, bound before anything says "listening".

    Raises PortInUse with one sentence when the port is taken or the address cannot be used.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP said, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on sockets whose proto says
    # TCP (base_events._set_nodelay), and the connections accepted here inherit it. With proto 0 every answer whose
    # body went out in a second write after its headers waited for the client's delayed ACK: 40 ms on Linux for a
    # gzipped /metrics, and /healthz's small answers the same (issue 25).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(f"port {port} on {host} is already in use (another vllm-headroom?): stop it or pick "
                            f"another with {flag} HOST:PORT") from None
        raise PortInUse(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    return sock


HEALTH_FILES = 2 * 64  # the health listener's connections (`health.MAX_CONNECTIONS`) and a burst of its accepts


def health_address(text: str, listen: tuple[str, int]) -> tuple[str, int] | None:
    """`--web.health-address`: '' is the listen address's host at its port + 1 (9479 beside the default 9478),
    'none' turns the listener off, else host:port as `parse_listen_address`; raises ValueError with one sentence
    (also when it is the listen address itself)."""
    if text.strip().lower() in ("none", "off"):
        return None
    if not text.strip():
        host, port = listen
        if port == 65535:
            raise ValueError("no port follows 65535 for the health listener: give --web.health-address HOST:PORT "
                             "(or none)")
        return host, port + 1
    address = parse_listen_address(text)
    if address[1] == listen[1] and (address[0] == listen[0] or {address[0], listen[0]} & {"0.0.0.0", "::"}):
        raise ValueError(f"health address {text!r} is the listen address's port {listen[1]}: the probes need a "
                         "listener of their own (another port, or none)")
    return address


def raise_file_limit() -> int:
    """Raise this process's soft limit of open files to its hard limit (as Go programs do at start) and return
    it: every client connection and every target connection is a file."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_limit(wanted: int, targets: int, files: int) -> int:
    """How many client connections to hold at most: `wanted`, but leaving files for the targets' connections
    (two each), the log, /proc reads, the worker threads and bursts of accepts, so that a flood of clients can
    never make the sidecar's own scrapes fail (issue 21: accept() failing with EMFILE took every target to
    `up 0`)."""
    from .http import ACCEPT_BURST

    # a burst of accepts lands before the limit can close any; the health listener holds its own (`health`)
    reserve = 2 * targets + 64 + 2 * ACCEPT_BURST + HEALTH_FILES
    return max(1, min(wanted, files - reserve))
