"""One observation of one vLLM server, for `diagnose` and `recommend`: a URL (GET /metrics, /v1/models,
/version) or a saved exposition file, judged on its gauges alone (no rates, no hold times).

Both commands take this one path, so they agree on the API key, the URL check and reading vLLM's flags
from /proc (only for a server on this machine, and only when `--vllm-args` is not given).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import replace
from pathlib import Path

from .scrape import ScrapeError, describe
from .target import Settings, TargetReport, one_shot

log = logging.getLogger("vllm_headroom")
_URL = re.compile(r"^https?://[^/\s]+")
_LOCAL = re.compile(r"^https?://(127\.|localhost|\[::1\])")


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def check_url(url: str) -> str:
    """`url` without a trailing slash; raises ValueError when it is not an http(s) URL."""
    if not _URL.match(url):
        raise ValueError(f"target {url!r} is not an http(s) URL such as http://127.0.0.1:8000")
    return url.rstrip("/")


def read_capped(path: Path, max_bytes: int) -> str:
    """A saved exposition as text, refusing one over `max_bytes` (ScrapeError `too_large`); OSError when it
    cannot be read."""
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    return decode_capped(data, max_bytes, str(path))


def decode_capped(data: bytes, max_bytes: int, name: str) -> str:
    if len(data) > max_bytes:
        raise ScrapeError("too_large", f"{name} holds more than the cap of {max_bytes} bytes (--scrape.max-bytes)")
    return data.decode("utf-8", errors="replace")


def observe(source: str, settings: Settings, text: str | None = None, data: bytes | None = None) -> TargetReport:
    """The report of one observation of `source` (a URL or a file path); `settings.url` is replaced by it.
    With `text` or `data` (standard input, capped at `settings.max_bytes`), that body is judged and `source`
    only names it.

    Raises ValueError for a bad URL and OSError for an unreadable file; a failed fetch, an unusable body or a
    fault of ours on it becomes a down report (`up` False, `error_reason` as in
    `vllm_headroom_scrape_errors_total`, one sentence in `error`), never a traceback.
    """
    url = is_url(source) and text is None and data is None
    name = check_url(source) if url else source
    local = url and _LOCAL.match(source) is not None
    target = one_shot(replace(settings, url=name,
                              discover_cmdline=settings.discover_cmdline and local and settings.vllm_args is None))
    wall, started = time.time(), time.perf_counter()
    try:
        if data is not None:
            text = decode_capped(data, settings.max_bytes, source)
        elif text is None and not url:
            text = read_capped(Path(source), settings.max_bytes)  # OSError: the caller's one sentence
    except ScrapeError as exc:
        return TargetReport(target.settings.url, up=False, error_reason=exc.reason, error=str(exc))
    try:
        if text is None:
            text = target.fetch_once()
        report = target.observe(time.monotonic(), text, gauges_only=True)
    except ScrapeError as exc:
        report = TargetReport(target.settings.url, up=False, error_reason=exc.reason, error=str(exc))
    except Exception as exc:  # a fault of ours on this input: one sentence and exit 1, never a traceback
        log.debug("%s: internal error", target.shown, exc_info=True)
        report = TargetReport(target.settings.url, up=False, error_reason="internal_error",
                              error=f"{target.shown}: internal error: {describe(exc)}")
    if url:  # a file or standard input was not scraped by us: no scrape time to give
        report.scraped_at, report.scrape_number = wall, 1
        report.scrape_duration_seconds = time.perf_counter() - started
    return report
