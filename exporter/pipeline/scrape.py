"""HTTP access to one vLLM server: /metrics, /v1/models and /version, with every failure named.

Every request has one deadline for all of it (connect, headers, body, decode), as blackbox_exporter gives each
probe: httpx's own timeouts apply to each read, so a body sent one byte at a time inside them would never end
(issue 21). httpx is imported on first use: the one-shot commands that read a file never need it.
"""

from __future__ import annotations

import codecs
import functools
import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from ..core.defaults import SCRAPE_MAX_BYTES as DEFAULT_MAX_BYTES

if TYPE_CHECKING:  # httpx, asyncio and ssl are imported on first use: a one-shot on a file needs none
    import ssl

    import httpx

MODELS_MAX_BYTES = 1024 * 1024  # /v1/models: a list of model cards
VERSION_MAX_BYTES = 65536  # /version: {"version": "..."}
MAX_MODEL_LEN = 2**31  # a /v1/models max_model_len above this is no real model's


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


def redact(url: str) -> str:
    """`url` as it may be shown: a user name or password in it becomes `***` (they are refused as targets, so
    this only guards what a message quotes)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.split("@", 1)[-1] if "@" in url else url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


@dataclass(frozen=True)
class Tls:
    """How to reach an https target (vLLM behind TLS: its --ssl-certfile/--ssl-keyfile, --ssl-ca-certs with
    --ssl-cert-reqs for client certificates). `ca_file`: PEM CA(s) that sign its certificate, instead of the public
    roots; `insecure_skip_verify`: accept any certificate (off by default; the scrape is then open to a
    man-in-the-middle); `client_cert`/`client_key`: PEM certificate (and its key, if not in the same file) to
    present when vLLM asks for one; `server_name`: the name to check the certificate against (and send as SNI)
    instead of the URL's host, e.g. the Service name a pod's certificate is issued for while the sidecar scrapes
    127.0.0.1 (Prometheus' tls_config server_name)."""

    ca_file: str | None = None
    insecure_skip_verify: bool = False
    client_cert: str | None = None
    client_key: str | None = None
    server_name: str | None = None


@functools.lru_cache(maxsize=8)
def ssl_context(ca_file: str | None = None, insecure_skip_verify: bool = False, client_cert: str | None = None,
                client_key: str | None = None) -> ssl.SSLContext:
    """The TLS context of every target client: certifi's roots (httpx's default), or only `ca_file`'s (a
    private CA, --scrape.ca-file); no verification at all with `insecure_skip_verify`; `client_cert` (with
    `client_key`) presented when the server asks. One per combination: a context is costly and holds the loaded
    roots. Raises OSError (ssl.SSLError) or ValueError for files it cannot use."""
    import ssl

    if ca_file:
        ctx = ssl.create_default_context(cafile=ca_file)
    else:
        import httpx

        ctx = httpx.create_ssl_context()
    if insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if client_cert:
        ctx.load_cert_chain(client_cert, client_key)
    return ctx


def client(trust_env: bool = False, tls: Tls | None = None, plain: bool = False) -> httpx.AsyncClient:
    """A small client for one target: two connections (/metrics beside /v1/models or /version) and no proxy,
    .netrc or SSL_CERT_* from the environment unless `trust_env` (--scrape.trust-env): an HTTP_PROXY meant for
    the pod's egress must not carry loopback scrapes, and the API key, through a proxy. `tls`: how to reach an
    https target (`Tls`). `plain`: the target is http://, and its connections run on asyncio's transports
    (`aionet`) instead of anyio's streams: the same httpx, less than half the CPU per request (issue 25)."""
    import httpx

    tls = tls or Tls()
    verify = ssl_context(tls.ca_file, tls.insecure_skip_verify, tls.client_cert, tls.client_key)
    limits = httpx.Limits(max_connections=2, max_keepalive_connections=2)
    # Even with the environment trusted, loopback never goes through a proxy: the sidecar's own pod is the one
    # place an egress proxy must not see, with the API key on /v1/models (a None mount is httpx's "no proxy").
    mounts: dict[str, httpx.AsyncBaseTransport | None] | None = (
        dict.fromkeys(LOOPBACK_MOUNTS) if trust_env else None)
    if plain:
        pooled = httpx.AsyncHTTPTransport(verify=verify, limits=limits, trust_env=trust_env)
        on_asyncio(pooled)
        return httpx.AsyncClient(limits=limits, verify=verify, trust_env=trust_env, transport=pooled, mounts=mounts)
    if tls.server_name is None:
        return httpx.AsyncClient(limits=limits, verify=verify, trust_env=trust_env, mounts=mounts)
    transport = _server_name_transport(tls.server_name, verify=verify, limits=limits, trust_env=trust_env)
    return httpx.AsyncClient(limits=limits, verify=verify, trust_env=trust_env, transport=transport, mounts=mounts)


LOOPBACK_MOUNTS = ("all://127.0.0.1", "all://localhost", "all://[::1]", "all://*.localhost")


def proxy_problem() -> str | None:
    """One sentence when the environment names a proxy the scrape cannot use (a SOCKS proxy without httpx's
    `socksio` extra, or a scheme httpx has no transport for), for --scrape.trust-env at start-up; None when
    every proxy it names can be used. Names the variable, never its value (it may carry credentials)."""
    import importlib.util
    import os

    for var in ("ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        value = os.environ.get(var, "").strip()
        if not value:
            continue
        scheme = value.split("://", 1)[0].lower() if "://" in value else "http"
        if scheme in ("socks5", "socks5h") and importlib.util.find_spec("socksio") is None:
            return (f"{var} names a SOCKS proxy, which httpx uses only with its socksio package: install "
                    f"httpx[socks], unset {var}, or drop --scrape.trust-env")
        if scheme not in ("http", "https", "socks5", "socks5h"):
            return (f"{var} names a proxy of scheme {scheme!r}, which httpx cannot use: unset it or drop "
                    "--scrape.trust-env")
    return None


def on_asyncio(transport: httpx.AsyncHTTPTransport) -> bool:
    """Put `transport`'s connection pool on `aionet.Backend`; False (and the transport unchanged) when this httpx
    or httpcore keeps its pool otherwise (a test fails then, rather than the speed going silently)."""
    import httpcore

    from .aionet import Backend

    pool = getattr(transport, "_pool", None)
    if not isinstance(pool, httpcore.AsyncConnectionPool) or not hasattr(pool, "_network_backend"):
        return False
    pool._network_backend = Backend()
    return True


def _server_name_transport(name: str, **kwargs: Any) -> httpx.AsyncBaseTransport:
    """httpx's transport (`kwargs`: its verify, limits, trust_env) checking certificates against `name`."""
    import httpx

    class ServerName(httpx.AsyncHTTPTransport):
        """Checks the certificate against (and sends as SNI) a given name, not the URL's host: httpcore's
        `sni_hostname` request extension, which becomes the TLS handshake's server_hostname."""

        def __init__(self, name: str, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.name = name

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            request.extensions = {**request.extensions, "sni_hostname": self.name}
            return await super().handle_async_request(request)

    return ServerName(name, **kwargs)


def _timeout_message(url: str, timeout: float, phase: str, size: int) -> str:
    if phase == "body":
        return f"{url} did not send its whole body within {timeout:g} s ({size:,} bytes arrived)"
    return f"{url} did not answer within {timeout:g} s"


async def fetch(
    client: httpx.AsyncClient,
    url: str,
    timeout: float,
    max_bytes: int = DEFAULT_MAX_BYTES,
    headers: dict[str, str] | None = None,
    sink: Callable[[str], None] | None = None,
    deadline: float | None = None,
) -> str:
    """GET `url` as text within `timeout` seconds for the whole request (or by `deadline`, on the event loop's
    clock), refusing bodies over `max_bytes`; raises ScrapeError.

    With `sink`, the body is decoded chunk by chunk as it arrives and each piece handed to `sink` (which may
    raise ScrapeError to stop), and "" is returned: a big body is never held whole.
    """
    import asyncio

    import httpx

    shown = redact(url)
    loop = asyncio.get_running_loop()
    phase, size = "connect", 0
    try:
        async with asyncio.timeout_at(deadline if deadline is not None else loop.time() + timeout):
            # Uncompressed, so the cap counts what we hold (httpx would inflate each chunk whole: a 7 KB gzip bomb
            # is 4 GiB); a body compressed anyway is inflated here, never past the cap.
            asked = {"accept-encoding": "identity", **(headers or {})}
            async with client.stream("GET", url, timeout=timeout, headers=asked) as response:
                phase = "body"
                if response.status_code != 200:
                    where = response.headers.get("location", "") if 300 <= response.status_code < 400 else ""
                    raise ScrapeError("http_status", f"{shown} answered HTTP {response.status_code}"
                                      + (f", redirecting to {redact(where[:200])} (not followed)" if where else ""))
                declared = response.headers.get("content-length")
                if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                    raise ScrapeError("too_large", f"{shown} sent {declared} bytes, over the cap of {max_bytes}")
                inflate = _inflater(shown, response.headers.get("content-encoding", ""))
                decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
                chunks: list[str] = []
                put = sink if sink is not None else chunks.append
                raws = response.aiter_raw()
                if response.is_stream_consumed:  # a mock transport's answer, read (and decoded) when it was made
                    inflate, raws = None, response.aiter_bytes()
                async for raw in raws:
                    chunk = raw if inflate is None else _inflate(shown, inflate, raw, max_bytes - size + 1)
                    size += len(chunk)
                    if size > max_bytes:
                        raise ScrapeError("too_large", f"{shown} sent more than the cap of {max_bytes} bytes")
                    put(decoder.decode(chunk))
                put(decoder.decode(b"", final=True))
    except TimeoutError:
        raise ScrapeError("timeout", _timeout_message(shown, timeout, phase, size)) from None
    except httpx.TimeoutException:
        raise ScrapeError("timeout", _timeout_message(shown, timeout, phase, size)) from None
    except httpx.ConnectError as exc:
        raise ScrapeError("connect", f"cannot connect to {shown}: {exc}{_tls_hint(exc)}") from None
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        said = f": {exc}" if str(exc) else ""
        if hint := _tls_hint(exc):  # TLS 1.3: a refused client certificate surfaces on the first read
            raise ScrapeError("connect", f"cannot connect to {shown}: {exc}{hint}") from None
        if phase == "connect" and url.startswith("https:"):  # ...or as a bare close, before any answer
            raise ScrapeError("connect", f"cannot connect to {shown}: it closed the TLS connection before answering"
                              f"{said} (if vLLM asks for a client certificate: "
                              "--scrape.client-cert and --scrape.client-key)") from None
        if "Receive buffer too long" in str(exc):  # h11's bound on a response's head
            raise ScrapeError("malformed", f"{shown} sent response headers longer than 100 KB") from None
        if phase == "connect":
            raise ScrapeError("truncated", f"{shown} closed the connection before answering{said}") from None
        raise ScrapeError("truncated", f"{shown} closed the connection mid-body{said}") from None
    except httpx.HTTPError as exc:
        raise ScrapeError("connect", f"{shown}: {exc}") from None
    except ScrapeError:
        raise
    except Exception as exc:  # httpx/anyio raise others for URLs they cannot use (OverflowError in a group)
        said = describe(exc)  # an ssl.SSLError raised past httpx, e.g. a refused client certificate
        raise ScrapeError("connect", f"cannot fetch {shown}: {said}{_tls_hint(said)}") from None
    return "".join(chunks)


def _inflater(shown: str, encoding: str) -> Any:
    """A zlib inflater for a body sent gzip- or deflate-encoded (None: identity); another or a stacked encoding
    ("gzip, gzip", br) is refused: the sidecar asks for identity, so such a body is the target's fault."""
    enc = encoding.strip().lower()
    if enc in ("", "identity"):
        return None
    if enc in ("gzip", "x-gzip", "deflate"):
        return zlib.decompressobj(wbits=47)  # 32 + 15: a gzip or a zlib header, detected
    raise ScrapeError("malformed", f"{shown} sent its body with Content-Encoding {encoding!r}, which the sidecar "
                                   "does not read (it asks for identity)")


def _inflate(shown: str, inflate: Any, raw: bytes, room: int) -> bytes:
    """`raw` inflated, at most `room` bytes: one more than the cap allows is enough to refuse the body, and what
    did not fit stays uninflated (zlib's max_length), so a bomb costs no more memory than the cap."""
    try:
        out: bytes = inflate.decompress(raw, max(room, 1))
    except zlib.error as exc:
        raise ScrapeError("malformed", f"{shown} sent a body its Content-Encoding does not describe: {exc}") from None
    return out


def _tls_hint(exc: Exception | str) -> str:
    """Which flag fixes a TLS failure, from OpenSSL's reason in the message ("" for any other failure)."""
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return (" (--scrape.ca-file names the CA that signs vLLM's certificate, --scrape.tls-server-name the name it "
                "is issued for)")
    if "CERTIFICATE_REQUIRED" in text.upper().replace(" ", "_"):
        return " (vLLM asks for a client certificate: --scrape.client-cert and --scrape.client-key)"
    return ""


def describe(exc: BaseException) -> str:
    """One line naming an unexpected exception: the first leaf of an exception group, its type and message."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def parse_models(body: str) -> ModelsInfo:
    """Read /v1/models: OpenAI's list (`{"object": "list", "data": [cards]}`), or KServe's V1 protocol list
    (`{"models": [names]}`), which KServe's model server (e.g. huggingfaceserver running vLLM in-process) answers
    on /v1/models beside its OpenAI list under /openai/v1/models (kserve/kserve @aaac4e29
    python/kserve/kserve/protocol/rest/v1_endpoints.py); neither of KServe's lists carries max_model_len
    (its OpenAI cards say null). LoRA adapter cards carry max_model_len null and are skipped for it, and so is a
    length no model has (above 2^31 tokens). Raises ScrapeError("models") for anything else."""
    try:
        doc: Any = json.loads(body)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and "data" not in doc and isinstance(doc.get("models"), list):
        return ModelsInfo(tuple(str(n) for n in doc["models"] if isinstance(n, str)), None)
    try:
        data = doc["data"]
    except (KeyError, TypeError):
        raise ScrapeError("models", "/v1/models did not return an OpenAI model list") from None
    ids: list[str] = []
    max_len: int | None = None
    for card in data if isinstance(data, list) else []:
        if not isinstance(card, dict):
            continue
        ids.append(str(card.get("id", "")))
        value = card.get("max_model_len")
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_MODEL_LEN and max_len is None:
            max_len = value
    return ModelsInfo(tuple(ids), max_len)


VERSION_RE = re.compile(r"v?[0-9]+(\.[0-9]+){0,3}[0-9A-Za-z.+_-]{0,48}")  # "0.32.0", "0.11.0rc2.dev45+g1a2b3c.cpu"


def parse_version(body: str) -> str | None:
    """/version's `version` when it is a release as vLLM writes one (a string of digits and dots and a PEP 440 or
    local suffix); None for anything else (no answer, a number, an object, a text with markup or line breaks),
    which then decides no rule."""
    try:
        doc: Any = json.loads(body)
    except (ValueError, RecursionError):
        return None
    version = doc.get("version") if isinstance(doc, dict) else None
    return version if isinstance(version, str) and VERSION_RE.fullmatch(version) else None


def parse_frontend(body: str) -> str | None:
    """The API server in front of the engine, from /version: "rust 0.32.0" when vLLM's Rust frontend answers
    (`VLLM_USE_RUST_FRONTEND=1`: `{"version":"0.32.0","rust_frontend_version":"0.32.0"}`, seen on this machine
    with the 0.32.0 wheel's vllm-rs), None for the Python one (its /version has `version` only)."""
    try:
        doc: Any = json.loads(body)
    except (ValueError, RecursionError):  # a document nested past the parser's depth is no /version either
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
    models_error: str | None = None  # why /v1/models failed, one sentence
    frontend: str | None = None  # "rust X" when the Rust frontend answered /version (`parse_frontend`)


async def server_info(client: httpx.AsyncClient, url: str, timeout: float, api_key: str | None,
                      deadline: float | None = None) -> ServerInfo:
    """GET /v1/models (needed only for max_model_len) and /version (optional: older or proxied servers lack it),
    one after the other within one deadline (`timeout` from now unless `deadline`); never raises ScrapeError."""
    import asyncio

    base = url.rstrip("/")
    if deadline is None:
        deadline = asyncio.get_running_loop().time() + timeout
    models: ModelsInfo | None = None
    error: str | None = None
    try:
        body = await fetch(client, base + "/v1/models", timeout, MODELS_MAX_BYTES, auth(api_key), deadline=deadline)
        try:
            models = parse_models(body)
        except ScrapeError as exc:  # its sentence names the path; the log needs the target too
            raise ScrapeError(exc.reason, f"{redact(base)}{exc}") from None
    except ScrapeError as exc:
        error = str(exc)
        if "HTTP 401" in error or "HTTP 403" in error:
            error += (": vLLM refused the API key" if api_key else ": vLLM asks for an API key") + \
                " (--target-api-key-file)"
    version: str | None = None
    frontend: str | None = None
    answered = True
    try:
        body = await fetch(client, base + "/version", timeout, VERSION_MAX_BYTES, deadline=deadline)
        version, frontend = parse_version(body), parse_frontend(body)
    except ScrapeError:
        answered = False
    return ServerInfo(models, models is None, version, answered, error, frontend)

