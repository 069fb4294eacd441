"""HTTP access to one vLLM server: /metrics, /v1/models and /version, with every failure named."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

import httpx

from ..core.defaults import SCRAPE_MAX_BYTES as DEFAULT_MAX_BYTES


class ScrapeError(Exception):
    """A failed fetch; `reason` is the label of vllm_headroom_scrape_errors_total."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class ModelsInfo:
    """What GET /v1/models says: served names and the base model's max_model_len."""

    ids: tuple[str, ...]
    max_model_len: int | None


async def fetch(
    client: httpx.AsyncClient,
    url: str,
    timeout: float,
    max_bytes: int = DEFAULT_MAX_BYTES,
    headers: dict[str, str] | None = None,
) -> str:
    """GET `url` as text, refusing bodies over `max_bytes`; raises ScrapeError."""
    try:
        async with client.stream("GET", url, timeout=timeout, headers=headers) as response:
            if response.status_code != 200:
                raise ScrapeError("http_status", f"{url} answered HTTP {response.status_code}")
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                raise ScrapeError("too_large", f"{url} sent {declared} bytes, over the cap of {max_bytes}")
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise ScrapeError("too_large", f"{url} sent more than the cap of {max_bytes} bytes")
                chunks.append(chunk)
    except httpx.TimeoutException:
        raise ScrapeError("timeout", f"{url} did not answer within {timeout:g} s") from None
    except httpx.ConnectError as exc:
        raise ScrapeError("connect", f"cannot connect to {url}: {exc}") from None
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        raise ScrapeError("truncated", f"{url} closed the connection mid-body: {exc}") from None
    except httpx.HTTPError as exc:
        raise ScrapeError("connect", f"{url}: {exc}") from None
    except ScrapeError:
        raise
    except Exception as exc:  # httpx/anyio raise others for URLs they cannot use (OverflowError in a group)
        raise ScrapeError("connect", f"cannot fetch {url}: {describe(exc)}") from None
    return b"".join(chunks).decode("utf-8", errors="replace")


def describe(exc: BaseException) -> str:
    """One line naming an unexpected exception: the first leaf of an exception group, its type and message."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def parse_models(body: str) -> ModelsInfo:
    """Read /v1/models; LoRA adapter cards carry max_model_len null and are skipped for it."""
    try:
        doc: Any = json.loads(body)
        data = doc["data"]
    except (ValueError, KeyError, TypeError):
        raise ScrapeError("models", "/v1/models did not return an OpenAI model list") from None
    ids: list[str] = []
    max_len: int | None = None
    for card in data if isinstance(data, list) else []:
        if not isinstance(card, dict):
            continue
        ids.append(str(card.get("id", "")))
        value = card.get("max_model_len")
        if isinstance(value, int) and value > 0 and max_len is None:
            max_len = value
    return ModelsInfo(tuple(ids), max_len)


def parse_version(body: str) -> str | None:
    try:
        doc: Any = json.loads(body)
    except ValueError:
        return None
    version = doc.get("version") if isinstance(doc, dict) else None
    return str(version) if version else None


def parse_frontend(body: str) -> str | None:
    """The API server in front of the engine, from /version: "rust 0.32.0" when vLLM's Rust frontend answers
    (`VLLM_USE_RUST_FRONTEND=1`: `{"version":"0.32.0","rust_frontend_version":"0.32.0"}`, seen on this machine
    with the 0.32.0 wheel's vllm-rs), None for the Python one (its /version has `version` only)."""
    try:
        doc: Any = json.loads(body)
    except ValueError:
        return None
    rust = doc.get("rust_frontend_version") if isinstance(doc, dict) else None
    return f"rust {rust}" if rust else None


def auth(api_key: str | None) -> dict[str, str] | None:
    """The headers vLLM's --api-key asks for (on /v1/models; /metrics and /version are open)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else None


@dataclass(frozen=True)
class ServerInfo:
    """One round of /v1/models and /version: each answer, and whether /v1/models failed (kept values stay)."""

    models: ModelsInfo | None
    models_failed: bool
    version: str | None
    version_answered: bool
    frontend: str | None = None  # "rust X" when the Rust frontend answered /version (`parse_frontend`)


async def server_info(client: httpx.AsyncClient, url: str, timeout: float, api_key: str | None) -> ServerInfo:
    """GET /v1/models (needed only for max_model_len) and /version (optional: older or proxied servers lack it)."""
    base = url.rstrip("/")
    models: ModelsInfo | None = None
    with contextlib.suppress(ScrapeError):
        models = parse_models(await fetch(client, base + "/v1/models", timeout, 1024 * 1024, auth(api_key)))
    version: str | None = None
    frontend: str | None = None
    answered = True
    try:
        body = await fetch(client, base + "/version", timeout, 65536)
        version, frontend = parse_version(body), parse_frontend(body)
    except ScrapeError:
        answered = False
    return ServerInfo(models, models is None, version, answered, frontend)

