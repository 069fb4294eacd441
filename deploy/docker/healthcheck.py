"""Container HEALTHCHECK: exit 0 when the running command answers on its own address (stdlib only, no shell).

The address is the one the process actually listens on: read from the main process's arguments
(/proc/1/cmdline: `serve --web.listen-address :9000`), else the command's own environment variable
(VLLM_HEADROOM_WEB_LISTEN_ADDRESS for serve, VLLM_HEADROOM_DEMO_LISTEN_ADDRESS for demo,
VLLM_HEADROOM_REPLAY_LISTEN_ADDRESS for replay), else its default. serve and demo answer /healthz, replay
(a recorded vLLM) /health; one-shot commands (diagnose, recommend, estimate, demo --once) serve nothing and
are healthy while they run.
"""

import os
import sys
import urllib.request

SERVERS = {  # command: (environment variable, default address, health path)
    "serve": ("VLLM_HEADROOM_WEB_LISTEN_ADDRESS", "0.0.0.0:9478", "/healthz"),
    "demo": ("VLLM_HEADROOM_DEMO_LISTEN_ADDRESS", "127.0.0.1:9478", "/healthz"),
    "replay": ("VLLM_HEADROOM_REPLAY_LISTEN_ADDRESS", "127.0.0.1:8000", "/health"),
}
FLAG = "--web.listen-address"


def main_argv(cmdline: str = "/proc/1/cmdline") -> list[str]:
    try:
        with open(cmdline, "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def target(argv: list[str], environ: dict[str, str]) -> str | None:
    """The health URL of the command in `argv` (the entrypoint's arguments), None when it serves nothing."""
    # `python /opt/vllm-headroom/bin/vllm-headroom serve ...`: the command follows the console script.
    start = next((i + 1 for i, a in enumerate(argv) if a.rsplit("/", 1)[-1] == "vllm-headroom"), len(argv))
    command = next((a for a in argv[start:] if not a.startswith("-")), "serve")
    if command not in SERVERS or (command == "demo" and "--once" in argv):
        return None
    env, default, path = SERVERS[command]
    address = environ.get(env) or default
    for i, a in enumerate(argv):
        if a == FLAG and i + 1 < len(argv):
            address = argv[i + 1]
        elif a.startswith(FLAG + "="):
            address = a.split("=", 1)[1]
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"


if __name__ == "__main__":
    url = target(main_argv(), dict(os.environ))
    if url is None:
        sys.exit(0)
    try:
        with urllib.request.urlopen(url, timeout=4) as answer:
            sys.exit(0 if answer.status == 200 else 1)
    except Exception as exc:  # any failure is "unhealthy"; say why in `docker inspect`
        print(f"healthcheck: {url}: {exc}", file=sys.stderr)
        sys.exit(1)
