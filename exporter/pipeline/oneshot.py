"""One observation of one vLLM server, for `diagnose` and `recommend`: a URL (GET /metrics, /v1/models,
/version) or a saved exposition file, judged on its gauges alone (no rates, no hold times).

Both commands take this one path, so they agree on the API key, the URL check and reading vLLM's flags
from /proc (only for a server on this machine, and only when `--vllm-args` is not given).
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path

from .scrape import ScrapeError
from .target import Settings, TargetReport, one_shot

_URL = re.compile(r"^https?://[^/\s]+")
_LOCAL = re.compile(r"^https?://(127\.|localhost|\[::1\])")


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def check_url(url: str) -> str:
    """`url` without a trailing slash; raises ValueError when it is not an http(s) URL."""
    if not _URL.match(url):
        raise ValueError(f"target {url!r} is not an http(s) URL such as http://127.0.0.1:8000")
    return url.rstrip("/")


def observe(source: str, settings: Settings, text: str | None = None) -> TargetReport:
    """The report of one observation of `source` (a URL or a file path); `settings.url` is replaced by it.
    With `text` (standard input), that body is judged and `source` only names it.

    Raises ValueError for a bad URL and OSError for an unreadable file; a failed fetch or an unusable body
    becomes a down report (`up` False, `error_reason` as in `vllm_headroom_scrape_errors_total`).
    """
    url = is_url(source) and text is None
    name = check_url(source) if url else source
    local = url and _LOCAL.match(source) is not None
    target = one_shot(replace(settings, url=name,
                              discover_cmdline=settings.discover_cmdline and local and settings.vllm_args is None))
    wall, started = time.time(), time.perf_counter()
    try:
        if text is None:
            text = target.fetch_once() if url else Path(source).read_text(encoding="utf-8", errors="replace")
        report = target.observe(time.monotonic(), text, gauges_only=True)
    except ScrapeError as exc:
        report = TargetReport(target.settings.url, up=False, error_reason=exc.reason, error=str(exc))
    if url:  # a file or standard input was not scraped by us: no scrape time to give
        report.scraped_at, report.scrape_number = wall, 1
        report.scrape_duration_seconds = time.perf_counter() - started
    return report
