"""Flags for every subcommand: Prometheus-style names, each also an environment variable, converted with
the one grammar of `core.units` and defaults from `core.defaults`.

Every flag `--a.b-c` can be set as `VLLM_HEADROOM_A_B_C`; a flag on the command line wins over its env var.
A bad value raises `UsageError` (one sentence, exit code 2).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
from collections.abc import Callable, Sequence
from typing import Any, NoReturn
from urllib.parse import urlsplit

from ..core import defaults, units
from ..engines.vllm import VLLM, attention

ENV_PREFIX = "VLLM_HEADROOM_"
# Environment variables of ours that are no flag: the API key itself, and the scripts' cache folder.
OTHER_ENV = {ENV_PREFIX + "TARGET_API_KEY", ENV_PREFIX + "CACHE"}
ENV_NAMES: set[str] = set()  # every flag's variable, filled as the parsers are built

# Flags people type from habit (other tools, vLLM itself) and the flag of ours that does the job.
HABITS = {
    "--interval": "--scrape.interval", "--scrape-interval": "--scrape.interval",
    "--timeout": "--scrape.timeout", "--scrape-timeout": "--scrape.timeout",
    "--port": "--web.listen-address :PORT", "--listen": "--web.listen-address HOST:PORT",
    "--host": "--web.listen-address HOST:PORT", "--listen-address": "--web.listen-address HOST:PORT",
    "--tp": "--tensor-parallel-size", "--url": "--target", "--targets": "--target", "--endpoint": "--target",
}


class Implicit(float):
    """A default value the user did not state (neither flag nor env var), so a command may adapt it."""


class UsageError(Exception):
    """A bad flag or value: one sentence for the user, exit code 2."""


class RuntimeFailure(Exception):
    """The command was right but could not be carried out (target down, port taken): one sentence, exit 1."""


# vLLM sizes a drafter's KV only for the method --speculative-config names (vllm/config/speculative.py @0.33.0).
DRAFT_WITHOUT_SPEC = ("--draft-model-config sizes a speculative drafter, but {where} no --speculative-config: "
                      "vLLM runs no drafter without it; give vLLM's --speculative-config or drop --draft-model-config")


def _arg_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def conv(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    conv.__name__ = parse.__name__
    return conv


def _positive_duration(text: str) -> float:
    value = units.parse_duration(text)
    if value <= 0:
        raise ValueError(f"{text!r} must be longer than 0s")
    return value


def _tokens(text: str) -> int:
    value = units.parse_tokens(text)
    if value is None:
        raise ValueError(f"{text!r} is not a token count such as 4096, 32k or 32K")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None


def _positive_int(text: str) -> int:
    value = _whole(text)
    if value <= 0:
        raise ValueError(f"{text!r} must be greater than 0")
    return value


def _blocks(text: str) -> int:
    value = _whole(text)
    if value < 2:
        raise ValueError(f"{text!r} leaves no usable block: vLLM keeps one null block, so at least 2 are needed")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{text!r} must be between 0 and 1")
    return value


def _multiple(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not value > 0:
        raise ValueError(f"{text!r} must be greater than 0")
    return value


MIN_SCRAPE_INTERVAL = 0.1  # s: below this a sidecar would hammer vLLM's /metrics (a 53 KB body each time)
MAX_SCRAPE_INTERVAL = 3600.0  # s: vLLM's queue changes every step; an hour between looks judges nothing
MIN_SCRAPE_TIMEOUT = 0.05  # s: under this no HTTP exchange is sure to finish, even on loopback
MIN_MAX_BYTES = units.parse_size("64KiB")  # one vLLM exposition is ~53 KB; a smaller cap would refuse every scrape
MAX_MAX_BYTES = units.parse_size("256MiB")  # the pod's memory limit: a larger body could not be parsed within it


def _scrape_interval(text: str) -> float:
    value = _positive_duration(text)
    if value < MIN_SCRAPE_INTERVAL:
        raise ValueError(f"{text!r} is shorter than {units.format_duration(MIN_SCRAPE_INTERVAL)}: vLLM's /metrics "
                         "would be read faster than it changes")
    if value > MAX_SCRAPE_INTERVAL:
        raise ValueError(f"{text!r} is longer than {units.format_duration(MAX_SCRAPE_INTERVAL)}: vLLM's queue "
                         "changes every engine step, and answers that old would judge nothing")
    return value


def _scrape_timeout(text: str) -> float:
    value = _positive_duration(text)
    if value < MIN_SCRAPE_TIMEOUT:
        raise ValueError(f"{text!r} is shorter than {units.format_duration(MIN_SCRAPE_TIMEOUT)}: no fetch of "
                         "/metrics is sure to finish in it, so every scrape would time out")
    return value


def _max_bytes(text: str) -> int:
    if re.fullmatch(r"\s*\d*\.\d+\s*[bB]?\s*", text):
        raise ValueError(f"{text!r} is a fraction of a byte: give a whole size such as 16MiB")
    value = units.parse_size(text)
    if value < MIN_MAX_BYTES:
        raise ValueError(f"{text!r} is below {units.format_size(MIN_MAX_BYTES)}: one vLLM exposition is about "
                         "53 KB, so every scrape would be refused")
    if value > MAX_MAX_BYTES:
        raise ValueError(f"{text!r} is above {units.format_size(MAX_MAX_BYTES)}: a body that large could not be "
                         "parsed within the pod's memory (vLLM's exposition is about 53 KB per engine)")
    return value


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def parse_bool(text: str) -> bool:
    """true/false, 1/0, yes/no, on/off (trimmed, any case); ValueError for anything else."""
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(f"{text!r} is not a boolean: use true or false (also 1/0, yes/no, on/off)")


duration = _arg_type(_positive_duration)
scrape_interval = _arg_type(_scrape_interval)
scrape_timeout = _arg_type(_scrape_timeout)
max_bytes = _arg_type(_max_bytes)
hold = _arg_type(units.parse_duration)  # a hold time: 0s means "at once"
size = _arg_type(units.parse_size)
tokens = _arg_type(_tokens)
positive_int = _arg_type(_positive_int)


def _block_size(text: str) -> int:
    n = _positive_int(text)
    attention.check_block_size(n)  # the one rule estimate, recommend, diagnose and serve refuse by
    return n


block_size = _arg_type(_block_size)
blocks = _arg_type(_blocks)
fraction = _arg_type(_fraction)
multiple = _arg_type(_multiple)
params = _arg_type(units.parse_params)


def vllm_bytes(flag: str = "--kv-cache-memory-bytes") -> Callable[[str], int]:
    """vLLM's `--kv-cache-memory-bytes` read as vLLM reads it (bytes, k/m/g/t ×1000, K/M/G/T ×1024), checked
    against the pool's range under its own name."""
    from ..planning.memory import check_size, parse_vllm_bytes

    def read(text: str) -> int:
        value = parse_vllm_bytes(flag, text)
        check_size(flag, value)
        return value

    conv = _arg_type(read)
    conv.__name__ = "bytes"
    return conv


def add_kv_cache_memory_bytes(group: Any) -> None:
    """vLLM's own KV pool flag, one definition for every command that takes --kv-cache-memory."""
    add(group, "--kv-cache-memory-bytes", vllm_bytes(), help="vLLM's own flag, read as vLLM reads it: bytes, or "
        "with k/m/g/t (x1000) or K/M/G/T (x1024), e.g. 6990059274 or 7G; the same pool as --kv-cache-memory")


def gib_size(flag: str) -> Callable[[str], int]:
    """`flag`'s size, a bare number read as GiB; one that cannot be GiB is refused as bytes, with the conversion."""
    from ..planning.memory import parse_gib_size

    conv = _arg_type(lambda text: parse_gib_size(flag, text))
    conv.__name__ = "size"
    return conv


class Parser(argparse.ArgumentParser):
    """argparse with one-sentence errors (UsageError) that name the nearest flag for an unknown one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # `--targets` must not silently mean `--targets-file`
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        m = re.match(r"argument (--[\w.-]+)(?:/\S+)?: expected one argument$", message)
        if m:  # `--vllm-args "--max-model-len 8k"`: argparse takes a value starting with -- for a flag
            flag = m.group(1)
            example = '"--max-model-len 8k --max-num-seqs 64"' if flag == "--vllm-args" else "VALUE"
            raise UsageError(f"{message}: a value that starts with - must be joined to its flag with =, e.g. "
                             f"{flag}={example} (see '{self.prog} --help')")
        raise UsageError(f"{message} (see '{self.prog} --help')")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            sub = self._subparser(getattr(parsed, "command", None)) or self
            raise UsageError(sub.unknown(extras))
        return parsed

    def _subparser(self, command: str | None) -> Parser | None:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and command in action.choices:
                found = action.choices[command]
                return found if isinstance(found, Parser) else None
        return None

    def flags(self) -> list[str]:
        return [o for a in self._actions for o in a.option_strings if o.startswith("--")]

    def unknown(self, extras: list[str]) -> str:
        """One sentence for unknown arguments: the nearest flag of this (sub)command, and where help is."""
        flag = next((x for x in extras if x.startswith("-")), None)
        where = f"see '{self.prog} --help'"
        if flag is None:
            return f"unexpected argument {extras[0]!r} ({where})"
        name = flag.split("=", 1)[0]
        known = [f for f in self.flags() if f != "--help"]
        habit = HABITS.get(name)
        if habit is not None and habit.split()[0] in known:
            hint = f"did you mean {habit}?"
        else:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.7)
            if not close:  # --interval → --scrape.interval: match the flag's last dotted part too
                tails = {k.rsplit(".", 1)[-1].lstrip("-"): k for k in known}
                close = [tails[t] for t in difflib.get_close_matches(name.lstrip("-"), list(tails), 1, 0.8)]
            hint = f"did you mean {close[0]}?" if close else ""
        return f"unknown flag {name}{': ' + hint if hint else ''} ({where})"


# Kubernetes injects <SERVICE>_SERVICE_HOST, <SERVICE>_PORT_9478_TCP, ... into every pod for each Service of the
# namespace (enableServiceLinks): a Service named vllm-headroom[-x] yields VLLM_HEADROOM_* names that are no typo.
_SERVICE_LINK = re.compile(
    r"_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT|PORT_\d+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)$")


def unknown_env(environ: dict[str, str] | None = None) -> list[str]:
    """One warning per VLLM_HEADROOM_* variable that is no setting, with the nearest one when close.

    Variables Kubernetes derives from Service names (`VLLM_HEADROOM_SERVICE_HOST`, `VLLM_HEADROOM_PORT_9478_TCP`)
    are not warned about.
    """
    environ = dict(os.environ) if environ is None else environ
    known = ENV_NAMES | OTHER_ENV
    out = []
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX) and name not in known and not _SERVICE_LINK.search(name):
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
            hint = f" (did you mean {close[0]}?)" if close else ""
            out.append(f"environment variable {name} is not a vllm-headroom setting{hint}; it is ignored")
    return out


_HOST_PORT = re.compile(r"^(localhost|\[?[0-9a-fA-F:.]+\]?|[A-Za-z0-9][A-Za-z0-9.-]*):\d{1,5}(/.*)?$")


def looks_like_host_port(text: str) -> bool:
    """`127.0.0.1:8000`, `vllm:8000/metrics`: an address written without its http:// scheme."""
    return _HOST_PORT.match(text) is not None


def check_target_url(url: str) -> str:
    """`url` if vLLM can be reached at it (http or https, a host, a port in 1-65535, no user or password, no query
    or fragment), else ValueError with one sentence that never repeats a password; `/v1` (the OpenAI base URL)
    is refused with the base URL meant."""
    from ..pipeline.scrape import redact

    shown = redact(url)
    if "@" in url.split("//", 1)[-1].split("/", 1)[0]:
        raise ValueError(f"target {shown!r} carries a user name or password: it would be shown in every target "
                         "label, the status page, the log and /readyz; vLLM takes its API key as a bearer token, "
                         "so give it with --target-api-key-file and the URL without it")
    if looks_like_host_port(url):
        raise ValueError(f"target {url!r} has no scheme: did you mean http://{url}?")
    example = "such as http://127.0.0.1:8000"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        detail = "its port is not a number in 1-65535" if "port" in str(exc).lower() else str(exc)
        raise ValueError(f"target {url!r} is not a usable URL: {detail}") from None
    if parts.scheme not in ("http", "https") or any(c.isspace() for c in url):
        raise ValueError(f"target {url!r} is not an http(s) URL {example}")
    if not parts.hostname:
        raise ValueError(f"target {url!r} names no host: give vLLM's base URL {example}")
    if port == 0:
        raise ValueError(f"target {url!r} is not a usable URL: its port is not a number in 1-65535")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        cut = url.split("?", 1)[0].split("#", 1)[0]  # a query may hold a token: never repeated
        raise ValueError(f"target {cut + '?...'!r} has a query or fragment (?... or #...): give vLLM's base URL "
                         f"{example}")
    if parts.path.rstrip("/").endswith("/v1"):
        base = url.rstrip("/")[: -len("/v1")]
        raise ValueError(f"target {url!r} is the OpenAI base URL: vLLM's base URL is without /v1, {base}")
    import httpx  # only to check the URL as httpx will read it

    try:
        httpx.URL(url)
    except Exception as exc:  # whatever httpx refuses would otherwise fail on every scrape
        raise ValueError(f"target {url!r} is not a usable URL: {exc}") from None
    return url


def base_url(url: str) -> tuple[str, bool]:
    """`url` without a trailing `/metrics` (and slash); True when `/metrics` was removed."""
    stripped = url.rstrip("/")
    if stripped.endswith("/metrics"):
        return stripped[: -len("/metrics")], True
    return stripped, False


def env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").replace(".", "_").replace("-", "_").upper()


def _shown(default: Any, conv: Callable[[str], Any] | None) -> str:
    """A default as a user writes it: 5s, 16MiB, 0.8."""
    if default in (None, [], ""):
        return ""
    if conv in (duration, hold, scrape_interval, scrape_timeout):
        return units.format_duration(float(default))
    if conv in (size, max_bytes):
        return units.format_size(int(default))
    if isinstance(default, bool):
        return "on" if default else "off"
    return str(default)


class _AppendReplacingDefault(argparse._AppendAction):
    """`append` whose first use on the command line replaces the env var's list: a flag wins over its env var
    (argparse's own `append` would add the flag's values to the env var's)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) is self.default:
            setattr(namespace, self.dest, None)
        super().__call__(parser, namespace, values, option_string)


def add(group: Any, flag: str, conv: Callable[[str], Any] | None = None, default: Any = None,
        help: str = "", env: str | None = None, **kw: Any) -> None:
    """Add a flag whose default comes from its env var (`env`, else derived from the flag's name), converted and
    checked like the flag itself."""
    env = env or env_name(flag)
    ENV_NAMES.add(env)
    raw = os.environ.get(env)
    if kw.get("action") == "append":
        kw["action"] = _AppendReplacingDefault
    if raw is not None and raw != "":
        try:
            if kw.get("action") == argparse.BooleanOptionalAction:
                default = parse_bool(raw)
            elif kw.get("action") is _AppendReplacingDefault:
                default = [conv(x.strip()) if conv else x.strip() for x in raw.split(",") if x.strip()]
            else:
                default = conv(raw) if conv else raw
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise UsageError(f"environment variable {env}: {exc}") from None
    shown = _shown(default, conv)
    if conv is not None:
        kw["type"] = conv
    group.add_argument(flag, default=default, help=f"{help}{f' (default {shown})' if shown else ''} [env {env}]",
                       **kw)


_CACHE_CONFIG = VLLM.names.cache_config


def add_config_flags(p: argparse.ArgumentParser, verdict: bool = True) -> None:
    """Serving config vLLM does not export, the profile and (with `verdict`) the verdict knobs (serve, diagnose;
    recommend, which judges no verdict, takes no verdict knobs)."""
    g = p.add_argument_group("serving config (wins over what vLLM reports)")
    add(g, "--max-num-seqs", positive_int, help="vLLM's max_num_seqs; not exported by vLLM")
    add(g, "--max-num-batched-tokens", tokens, help="vLLM's max_num_batched_tokens")
    add(g, "--max-model-len", tokens, help="vLLM's max_model_len, e.g. 32k (else from /v1/models)")
    add(g, "--block-size", block_size, help=f"KV block size in tokens, a multiple of 16; where vLLM exports "
        f"{_CACHE_CONFIG}, vLLM's own wins (the flag is noted as contradicting it)")
    add(g, "--num-gpu-blocks", blocks, help=f"KV blocks per engine, at least 2 (else from {_CACHE_CONFIG})")
    add(g, "--vllm-args", help="vLLM's command line as one string, e.g. \"vllm serve M --max-num-seqs 64\"")
    add(g, "--model-config", help="the model's config.json (or folder): adds KV bytes per token, bytes free and "
        "bytes per worst-case request")
    add(g, "--draft-model-config", help="the speculative drafter's config.json (or folder), with --model-config: "
        "its layers join the KV cache (EAGLE, EAGLE3, DFlash, a draft model; MTP needs none)")
    add(g, "--vllm-startup-log", help="vLLM's start-up log (a file): capacity, KV memory and flags when vLLM "
        f"exports no {_CACHE_CONFIG} (the Rust frontend), and the attention backend it selected, the block size "
        "and KV dtype in effect; read again every --models.interval")
    g = p.add_argument_group("KV pool per device, with --model-config: an estimated capacity when vLLM states none "
                             "(a bare number is GiB)")
    add(g, "--kv-cache-memory", gib_size("--kv-cache-memory"), help="the KV pool per device, as vLLM's "
        "'Available KV cache memory' (e.g. 6.51GiB)")
    add_kv_cache_memory_bytes(g)
    add(g, "--gpu-memory", gib_size("--gpu-memory"), help="memory of one device; with the weights (the model "
        "folder's safetensors index, --weights-bytes or --params) and vLLM's gpu_memory_utilization")
    add(g, "--weights-bytes", gib_size("--weights-bytes"), help="the whole model's weights, e.g. 140GB")
    add(g, "--params", params, help="parameter count when there is no safetensors index, e.g. 70B")
    add(g, "--activation-memory", gib_size("--activation-memory"), help="activations, non-torch memory and CUDA "
        "graphs per device (unstated: anywhere from 0 to 4GiB, the estimate's range)")
    g = p.add_argument_group("request profile and verdict" if verdict else "request profile")
    add(g, "--profile.quantile", fraction, defaults.PROFILE_QUANTILE, help="quantile of request lengths for "
        "worst-case math")
    add(g, "--profile.window", duration, defaults.PROFILE_WINDOW, help="window of the length quantiles")
    if not verdict:
        return
    add(g, "--verdict.full-usage", fraction, defaults.FULL_USAGE, help="usage at which waiting is judged KV-bound")
    add(g, "--verdict.false-full-hold", hold, defaults.FALSE_FULL_HOLD,
        help="how long false-full must hold before it is flagged")
    add(g, "--verdict.stuck-after", hold, defaults.STUCK_AFTER,
        help="no engine step for this long while requests wait: stuck")
    add(g, "--verdict.leak-after", hold, defaults.LEAK_AFTER,
        help="blocks used with nothing running for this long: leak")
    add(g, "--verdict.preempt-window", hold, defaults.PREEMPT_WINDOW,
        help="preempting while a preemption happened this recently")


def add_target_access_flags(p: argparse.ArgumentParser, timeout: bool = True) -> None:
    """How to reach a target: its API key, proxies and CA, and (for one-shot commands) the fetch timeout and the
    size cap of what is read (a URL, a file or standard input)."""
    add(p, "--target-api-key-file", help="file holding vLLM's --api-key (env VLLM_HEADROOM_TARGET_API_KEY holds "
        "the key itself); sent only to the targets, as a bearer token; one trailing line break is dropped; "
        "another, a non-ASCII character or an empty key is refused")
    add(p, "--scrape.trust-env", action=argparse.BooleanOptionalAction, default=defaults.SCRAPE_TRUST_ENV,
        help="reach the targets through HTTP(S)_PROXY/NO_PROXY, .netrc and SSL_CERT_FILE of the environment (off: "
        "a proxy meant for the pod's egress must not carry the scrapes and the API key); loopback targets never "
        "go through a proxy, and a proxy httpx cannot use is refused at start-up")
    add(p, "--scrape.ca-file", help="PEM file of the CA(s) that sign https targets' certificates (a private CA), "
        "used instead of the public roots")
    add(p, "--scrape.tls-server-name", help="name to check an https target's certificate against (and send as SNI) "
        "instead of the URL's host, e.g. the Service name vLLM's certificate is issued for while the sidecar scrapes "
        "127.0.0.1")
    add(p, "--scrape.client-cert", help="PEM file of the client certificate to present when vLLM asks for one "
        "(its --ssl-ca-certs with --ssl-cert-reqs); with its key unless --scrape.client-key")
    add(p, "--scrape.client-key", help="PEM file of --scrape.client-cert's private key, if not in that file")
    add(p, "--scrape.insecure-skip-verify", action=argparse.BooleanOptionalAction,
        default=defaults.SCRAPE_INSECURE_SKIP_VERIFY, help="accept any certificate of an https target, unverified "
        "(the scrape and the API key are then open to a man-in-the-middle; prefer --scrape.ca-file)")
    if timeout:
        add(p, "--scrape.timeout", scrape_timeout, defaults.SCRAPE_TIMEOUT, help="deadline of one fetch, all of "
            "it (connect, headers, body)")
        add(p, "--scrape.max-bytes", max_bytes, defaults.SCRAPE_MAX_BYTES,
            help="refuse a larger exposition (from a URL, a file or standard input)")


def opt(args: argparse.Namespace, name: str) -> Any:
    """A parsed flag by its dotted name (`scrape.timeout`), None when this subcommand has no such flag."""
    return getattr(args, name, None)
