"""Container HEALTHCHECK: exit 0 when the running command answers on its own address (stdlib only, no shell).

The address is the one the process actually listens on: read from the main process's arguments
(/proc/1/cmdline: `serve --web.listen-address :9000`), else the command's own environment variable
(VLLM_HEADROOM_WEB_LISTEN_ADDRESS for serve, VLLM_HEADROOM_DEMO_LISTEN_ADDRESS for demo,
VLLM_HEADROOM_REPLAY_LISTEN_ADDRESS for replay), else its default. serve and demo answer /healthz, replay
(a recorded vLLM) /health; one-shot commands (diagnose, recommend, estimate, demo --once) serve nothing and
are healthy while they run.

serve answers its probes on a listener of its own (`--web.health-address`, VLLM_HEADROOM_WEB_HEALTH_ADDRESS;
'' = the listen host at its port + 1, 'none' = off), so a crowd or a slow page on the main port never fails the
check: that listener is asked first, and the main port only when nothing listens there (serve falls back to
the main port when the default health port is taken, exporter/cli/serve.py).
"""

import os
import sys
import urllib.error
import urllib.request

SERVERS = {  # command: (environment variable, default address, health path)
    "serve": ("VLLM_HEADROOM_WEB_LISTEN_ADDRESS", "0.0.0.0:9478", "/healthz"),
    "demo": ("VLLM_HEADROOM_DEMO_LISTEN_ADDRESS", "127.0.0.1:9478", "/healthz"),
    "replay": ("VLLM_HEADROOM_REPLAY_LISTEN_ADDRESS", "127.0.0.1:8000", "/health"),
}
FLAG = "--web.listen-address"
HEALTH_FLAG, HEALTH_ENV = "--web.health-address", "VLLM_HEADROOM_WEB_HEALTH_ADDRESS"


def main_argv(cmdline: str = "/proc/1/cmdline") -> list[str]:
    try:
        with open(cmdline, "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def flag_value(argv: list[str], flag: str, default: str) -> str:
    """The last value of `flag` in `argv` (`--flag V` or `--flag=V`), else `default`."""
    value = default
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def split(address: str) -> tuple[str, str]:
    """(host for a URL, port) of a listen address; a wildcard host is asked on loopback."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return host, port


def targets(argv: list[str], environ: dict[str, str]) -> list[str]:
    """The health URLs of the command in `argv` (the entrypoint's arguments), in the order to ask them (the next
    only when nothing listens on one); [] when it serves nothing."""
    # `python /opt/vllm-headroom/bin/vllm-headroom serve ...`: the command follows the console script.
    start = next((i + 1 for i, a in enumerate(argv) if a.rsplit("/", 1)[-1] == "vllm-headroom"), len(argv))
    command = next((a for a in argv[start:] if not a.startswith("-")), "serve")
    if command not in SERVERS or (command == "demo" and "--once" in argv):
        return []
    env, default, path = SERVERS[command]
    host, port = split(flag_value(argv, FLAG, environ.get(env) or default))
    main_url = f"http://{host}:{port}{path}"
    if command != "serve":
        return [main_url]
    health = flag_value(argv, HEALTH_FLAG, environ.get(HEALTH_ENV, "")).strip()
    if health.lower() in ("none", "off"):
        return [main_url]
    if not health:
        if not port.isdigit() or int(port) >= 65535:
            return [main_url]
        return [f"http://{host}:{int(port) + 1}{path}", main_url]
    health_host, health_port = split(health)
    return [f"http://{health_host}:{health_port}{path}", main_url]


def check(urls: list[str]) -> int:
    """0 when the first URL that something listens on answers 200; 1 otherwise, with the reason on stderr."""
    for n, url in enumerate(urls):
        try:
            with urllib.request.urlopen(url, timeout=4) as answer:
                return 0 if answer.status == 200 else 1
        except urllib.error.URLError as exc:
            refused = isinstance(exc.reason, ConnectionRefusedError)
            if refused and n + 1 < len(urls):
                continue  # nothing listens here (serve fell back to its main port): ask the next
            print(f"healthcheck: {url}: {exc}", file=sys.stderr)
            return 1
        except Exception as exc:  # any failure is "unhealthy"; say why in `docker inspect`
            print(f"healthcheck: {url}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(check(targets(main_argv(), dict(os.environ))))
