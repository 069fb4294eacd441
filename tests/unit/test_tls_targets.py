"""Scraping vLLM behind TLS (its --ssl-certfile/--ssl-keyfile, and --ssl-ca-certs with --ssl-cert-reqs 2 for client
certificates): `vllm-headroom diagnose https://...` against a real local https server (Python's ssl, certificates
made here with the openssl command line) that serves a recorded vLLM 0.32.0 exposition, /v1/models and /version.

Verification is on by default: a private CA must be named (--scrape.ca-file), a certificate issued for another name
needs --scrape.tls-server-name, a server that asks for a client certificate gets one from --scrape.client-cert/-key,
and --scrape.insecure-skip-verify (off unless given) accepts anything.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

REPO = Path(__file__).resolve().parents[2]
RECORDING = REPO / "tests" / "fixtures" / "vllm-0.32.0" / "idle"
OPENSSL = shutil.which("openssl")
pytestmark = pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command line to make certificates")


def openssl(*args: str, cwd: Path) -> None:
    assert OPENSSL is not None
    proc = subprocess.run([OPENSSL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def issue(pki: Path, name: str, san: str, client: bool = False) -> None:
    """`name`.pem / `name`-key.pem signed by the CA in `pki`, for `san` (a subjectAltName value)."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}-key.pem", "-out", f"{name}.csr",
            "-subj", f"/CN={name}", cwd=pki)
    usage = "clientAuth" if client else "serverAuth"
    (pki / f"{name}.ext").write_text(f"subjectAltName={san}\nextendedKeyUsage={usage}\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
            "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext", cwd=pki)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=test CA", cwd=folder)
    issue(folder, "loopback", "IP:127.0.0.1,DNS:localhost")   # a certificate for the address the sidecar scrapes
    issue(folder, "service", "DNS:vllm.inference.svc")        # one for the Service name only, as pods often get
    issue(folder, "sidecar", "DNS:vllm-headroom", client=True)  # the sidecar's client certificate
    return folder


class Vllm(BaseHTTPRequestHandler):
    """The recorded server's three answers."""

    meta: ClassVar[dict[str, Any]] = json.loads((RECORDING / "meta.json").read_text())
    bodies: ClassVar[dict[str, bytes]] = {
        "/metrics": (RECORDING / "snapshot.prom").read_bytes(), "/v1/models": json.dumps(meta["v1_models"]).encode(),
        "/version": json.dumps(meta["version"]).encode()}

    def do_GET(self) -> None:  # http.server's name
        body = self.bodies.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def https(pki: Path) -> Iterator[tuple[ThreadingHTTPServer, ssl.SSLContext]]:
    """A real https server on 127.0.0.1; the test loads its certificate (and client checks) into the context."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Vllm)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    wrapped = False

    def serve() -> None:
        server.serve_forever(poll_interval=0.05)

    def start() -> None:
        nonlocal wrapped
        if not wrapped:
            server.socket = ctx.wrap_socket(server.socket, server_side=True)
            wrapped = True
            threading.Thread(target=serve, daemon=True).start()

    server.start = start  # type: ignore[attr-defined]
    yield server, ctx
    server.shutdown()
    server.server_close()


def diagnose(server: ThreadingHTTPServer, *flags: str) -> subprocess.CompletedProcess[str]:
    server.start()  # type: ignore[attr-defined]
    url = f"https://127.0.0.1:{server.server_address[1]}"
    return subprocess.run([sys.executable, "-m", "exporter", "diagnose", url, "--json", "--scrape.timeout", "10s",
                           *flags], cwd=REPO, capture_output=True, text=True, timeout=90)


def refusal(proc: subprocess.CompletedProcess[str]) -> str:
    """The one-sentence error of a target the sidecar could not read (exit 1, `up` false)."""
    assert proc.returncode == 1, proc.stderr
    (doc,) = json.loads(proc.stdout)["targets"]
    assert doc["up"] is False and doc["error_reason"] == "connect", doc
    return str(doc["error"])


def read_over_tls(proc: subprocess.CompletedProcess[str]) -> None:
    """The sidecar read the recording's /metrics and /v1/models (max_model_len 512 is only in /v1/models here)."""
    assert proc.returncode == 0, proc.stderr
    (doc,) = json.loads(proc.stdout)["targets"]
    assert doc["up"] is True and doc["vllm_version"] == Vllm.meta["version"]["version"], doc
    (engine,) = doc["engines"]
    assert engine["model_name"] == "tiny-llama"
    assert engine["config"]["max_model_len"]["value"] == 512, engine["config"]


def test_a_private_ca_must_be_named(https: tuple[ThreadingHTTPServer, ssl.SSLContext], pki: Path) -> None:
    server, ctx = https
    ctx.load_cert_chain(pki / "loopback.pem", pki / "loopback-key.pem")
    refused = refusal(diagnose(server))
    assert "CERTIFICATE_VERIFY_FAILED" in refused and "--scrape.ca-file" in refused, refused
    read_over_tls(diagnose(server, "--scrape.ca-file", str(pki / "ca.pem")))


def test_insecure_skip_verify_is_off_unless_given(https: tuple[ThreadingHTTPServer, ssl.SSLContext], pki: Path) -> None:
    server, ctx = https
    ctx.load_cert_chain(pki / "loopback.pem", pki / "loopback-key.pem")
    assert "CERTIFICATE_VERIFY_FAILED" in refusal(diagnose(server, "--no-scrape.insecure-skip-verify"))
    read_over_tls(diagnose(server, "--scrape.insecure-skip-verify"))


def test_a_certificate_for_the_service_name(https: tuple[ThreadingHTTPServer, ssl.SSLContext], pki: Path) -> None:
    """vLLM's certificate names the Service, the sidecar scrapes 127.0.0.1: --scrape.tls-server-name."""
    server, ctx = https
    ctx.load_cert_chain(pki / "service.pem", pki / "service-key.pem")
    ca = ("--scrape.ca-file", str(pki / "ca.pem"))
    mismatch = refusal(diagnose(server, *ca))
    assert "IP address mismatch" in mismatch and "--scrape.tls-server-name" in mismatch, mismatch
    assert "Hostname mismatch" in refusal(diagnose(server, *ca, "--scrape.tls-server-name", "other.inference.svc"))
    read_over_tls(diagnose(server, *ca, "--scrape.tls-server-name", "vllm.inference.svc"))


def test_a_client_certificate_when_vllm_asks(https: tuple[ThreadingHTTPServer, ssl.SSLContext], pki: Path) -> None:
    """vLLM with --ssl-ca-certs and --ssl-cert-reqs 2 (ssl.CERT_REQUIRED) refuses a sidecar without a certificate."""
    server, ctx = https
    ctx.load_cert_chain(pki / "loopback.pem", pki / "loopback-key.pem")
    ctx.load_verify_locations(pki / "ca.pem")
    ctx.verify_mode = ssl.CERT_REQUIRED
    ca = ("--scrape.ca-file", str(pki / "ca.pem"))
    refused = refusal(diagnose(server, *ca))
    assert "--scrape.client-cert" in refused, refused
    read_over_tls(diagnose(server, *ca, "--scrape.client-cert", str(pki / "sidecar.pem"),
                           "--scrape.client-key", str(pki / "sidecar-key.pem")))


@pytest.mark.parametrize(("flags", "said"), [
    (["--scrape.client-key", "k.pem"], "--scrape.client-key needs --scrape.client-cert"),
    (["--scrape.client-cert", "missing.pem"], "cannot load --scrape.client-cert missing.pem"),
    (["--scrape.insecure-skip-verify", "--scrape.ca-file", "CA"], "ignores --scrape.ca-file"),
])
def test_tls_flags_that_cannot_work_are_usage_errors(flags: list[str], said: str, pki: Path) -> None:
    flags = [str(pki / "ca.pem") if f == "CA" else f for f in flags]
    proc = subprocess.run([sys.executable, "-m", "exporter", "diagnose", "https://127.0.0.1:1", *flags], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
