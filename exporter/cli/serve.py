"""`vllm-headroom serve`: the sidecar next to one or more vLLM servers."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from .. import __version__
from ..core import defaults
from ..expose.listen import PortInUse, bind, health_address, host_port, page_url, parse_listen_address
from .flags import (
    Implicit,
    UsageError,
    add,
    add_config_flags,
    add_target_access_flags,
    base_url,
    check_target_url,
    duration,
    fraction,
    max_bytes,
    opt,
    positive_int,
    scrape_interval,
    scrape_timeout,
)

EXAMPLE = """example:
  vllm-headroom serve --target http://127.0.0.1:8000 --max-num-seqs 256
  curl -s localhost:9478/api/v1/diagnosis"""


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the sidecar next to one or more vLLM servers",
                       description="Scrape vLLM's /metrics every interval and serve a status page at /, our "
                       "/metrics, /api/v1/diagnosis, /api/v1/history, /healthz and /readyz. Every flag is also an "
                       "environment variable (shown with it). One target's faults never stop the others.",
                       epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("targets")
    add(g, "--target", action="append", help="vLLM base URL; repeat for several servers", metavar="URL")
    add(g, "--targets-file", help="file with one vLLM base URL per line")
    add_target_access_flags(g, timeout=False)
    add(g, "--vllm-cmdline-discovery", action=argparse.BooleanOptionalAction, default=defaults.CMDLINE_DISCOVERY,
        help="read vLLM's flags from /proc/<pid>/cmdline when the process is visible")
    g = p.add_argument_group("scraping and serving")
    add(g, "--web.listen-address", default=defaults.LISTEN_ADDRESS, help="address of our /metrics")
    add(g, "--web.health-address", default=defaults.HEALTH_ADDRESS,
        help="address of a listener for /healthz and /readyz alone, for the kubelet's probes: a crowd on the main "
        "port never queues them; empty: the --web.listen-address host at its port + 1 (9479), then a port already "
        "taken only turns it off with a warning; none: off (both paths stay on the main port either way)")
    add(g, "--scrape.interval", scrape_interval, defaults.SCRAPE_INTERVAL, help="how often to scrape vLLM's /metrics")
    add(g, "--scrape.timeout", scrape_timeout, Implicit(defaults.SCRAPE_TIMEOUT),
        help="timeout of one scrape, below the interval; when not given, 80 %% of an interval shorter than it")
    add(g, "--scrape.max-bytes", max_bytes, defaults.SCRAPE_MAX_BYTES, help="refuse expositions larger than this")
    add(g, "--web.max-connections", positive_int, defaults.WEB_MAX_CONNECTIONS,
        help="client connections held at once (fewer when the file limit asks); at the limit a new one closes the "
        "oldest idle one")
    add(g, "--web.read-timeout", duration, defaults.WEB_READ_TIMEOUT,
        help="how long a client's request may take to arrive whole before its connection is closed")
    add(g, "--web.enable-openapi", action=argparse.BooleanOptionalAction, default=defaults.WEB_OPENAPI,
        help="serve the OpenAPI schema of our HTTP API at /openapi.json")
    add(g, "--models.interval", duration, defaults.MODELS_INTERVAL,
        help="how often to read /v1/models and /version")
    add(g, "--log.level", default="info", choices=["debug", "info", "warning", "error"], help="log level")
    g = p.add_argument_group("autoscaling")
    add(g, "--autoscaling.target-utilization", fraction, defaults.TARGET_UTILIZATION,
        help="share of a replica's worst-case capacity the replica signal (vllm_headroom_replicas_needed) fills; "
        "1 - this is the headroom kept")
    add(g, "--autoscaling.load-window", duration, defaults.LOAD_WINDOW,
        help="how far back the replica signal reads the offered load (requests arrived and admitted, the running "
        "count's average over the sidecar's scrapes)")
    add_config_flags(p)
    p.set_defaults(run=run)


def target_urls(args: argparse.Namespace, notes: list[str] | None = None) -> list[str]:
    """The checked base URLs of every target; a URL ending in /metrics is taken as its base URL (a note
    saying so is appended to `notes`). Raises UsageError for a URL that cannot be used."""
    from ..pipeline.oneshot import check_url  # the pipeline only for the command that watches (see oneshot.py)

    given = args.target is not None or bool(args.targets_file)
    urls = list(args.target or [])
    if args.targets_file:
        try:
            lines = Path(args.targets_file).read_text().splitlines()
        except OSError as exc:
            raise UsageError(f"cannot read --targets-file {args.targets_file}: {exc.strerror}") from None
        urls += [ln.split("#", 1)[0].strip() for ln in lines if ln.split("#", 1)[0].strip()]
    if not urls and given:  # an empty file or a blank VLLM_HEADROOM_TARGET must not mean the default target
        where = (f"--targets-file {args.targets_file} lists" if args.targets_file
                 else "--target / VLLM_HEADROOM_TARGET give")
        raise UsageError(f"no targets: {where} no URL (leave both unset to watch {defaults.TARGET})")
    urls = urls or [defaults.TARGET]
    for u in urls:
        try:
            check_target_url(u)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    bases = []
    for u in urls:
        base, stripped = base_url(u)
        if stripped and notes is not None:
            notes.append(f"target {u} ends in /metrics: watching {base} (its /metrics, /v1/models and /version)")
        bases.append(base)
    urls = bases
    try:
        checked = [check_url(u) for u in urls]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if len(set(checked)) != len(checked):
        raise UsageError("the same target is given twice")
    return checked


def run(args: argparse.Namespace) -> int:
    from ..pipeline.target import Target
    from .settings import settings_for

    interval, timeout = opt(args, "scrape.interval"), opt(args, "scrape.timeout")
    if isinstance(timeout, Implicit):  # not given: the default, shortened for a short interval rather than refused
        timeout = defaults.scrape_timeout_for(interval)
        setattr(args, "scrape.timeout", timeout)
    if timeout >= interval:
        raise UsageError(f"--scrape.timeout ({timeout:g}s) must be shorter than --scrape.interval ({interval:g}s)")
    try:
        host, port = parse_listen_address(opt(args, "web.listen_address"))
    except ValueError as exc:
        raise UsageError(f"--web.listen-address: {exc}") from None
    health_given = opt(args, "web.health_address")
    try:
        health_at = health_address(health_given, (host, port))
    except ValueError as exc:
        raise UsageError(f"--web.health-address: {exc}") from None
    notes: list[str] = []
    targets = [Target(settings_for(u, args)) for u in target_urls(args, notes)]
    sock = bind(host, port)  # a taken port is said in one sentence, before any "listening" line
    health, health_note = None, None
    if health_at is not None:
        try:
            health = bind(*health_at, flag="--web.health-address")
        except PortInUse as exc:
            if health_given.strip():  # asked for: the probes point there, so it is an error
                sock.close()
                raise
            health_note = (f"no health listener: {exc}; /healthz and /readyz answer on {host_port(host, port)} "
                           "only (--web.health-address HOST:PORT or none)")
    logging.basicConfig(level=getattr(logging, opt(args, "log.level").upper()),
                        format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request would drown our own
    log = logging.getLogger("vllm_headroom")
    for note in notes:
        log.info("%s", note)
    if health_note is not None:
        log.warning("%s", health_note)
    log.info("vllm-headroom %s watching %s, listening on %s (status page %s)%s", __version__,
             ", ".join(t.settings.url for t in targets), host_port(host, port), page_url(host, port),
             f", probes on {host_port(*health_at)}" if health is not None and health_at is not None else "")
    from ..expose.http import Limits  # the web stack, only for the command that serves
    from ..expose.server import Sidecar

    sidecar = Sidecar(targets, interval)
    sidecar.limits = Limits(max_connections=opt(args, "web.max_connections"),
                            read_timeout=opt(args, "web.read_timeout"))
    sidecar.openapi = bool(opt(args, "web.enable_openapi"))
    serve(sidecar, sock, health)
    return 0


def serve(sidecar: Any, sock: Any, health: Any = None) -> None:
    """Serve `sidecar` on `sock` (and its probes on `health`) until stopped (`expose.server.serve`, imported only
    by this command)."""
    from ..expose.server import serve as run

    run(sidecar, sock, health)
