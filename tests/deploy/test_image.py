"""The container image: hadolint-clean Dockerfile; built with a private dockerd, run against the demo replay."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter import __version__
from tests.net import free_port

from .conftest import DEPLOY, ROOT, Tools

IMAGE = "vllm-headroom:test"


def test_hadolint_clean(tools: Tools) -> None:
    proc = subprocess.run([tools.bin("hadolint"), "Dockerfile"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerignore_keeps_the_context_small() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert lines[lines.index("*")] == "*" and "!exporter/" in lines and "!pyproject.toml" in lines


def test_dockerfile_labels_the_package_version() -> None:
    # The version is written once (pyproject.toml); the Dockerfile repeats none, deploy/docker/build passes it.
    text = (ROOT / "Dockerfile").read_text()
    assert 'ARG VERSION=""\n' in text and __version__ not in text
    build = (ROOT / "deploy/docker/build").read_text()
    assert "pyproject.toml" in build and "VERSION=$version" in build
    assert 'ENTRYPOINT ["/opt/vllm-headroom/bin/vllm-headroom"]\nCMD ["serve"]\n' in text


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read().decode()
    except OSError:
        return 0, ""


class Docker:
    def __init__(self, host: str) -> None:
        self.env = {**os.environ, "DOCKER_HOST": host, "DOCKER_BUILDKIT": "0"}

    def __call__(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["docker", *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check:
            assert proc.returncode == 0, f"docker {' '.join(args)}: {proc.stderr[-3000:]}"
        return proc


@pytest.fixture(scope="module")
def docker(tools: Tools) -> Iterator[Docker]:
    """A dockerd of our own on a socket in a temp dir (no iptables, no bridge), stopped afterwards."""
    if not (shutil.which("dockerd") and shutil.which("docker")):
        pytest.skip("no dockerd/docker and deploy/install-tools could not install docker.io (not root, no sudo)")
    if os.geteuid() != 0:
        pytest.skip("dockerd needs root")
    work = Path(tempfile.mkdtemp(prefix="vhd-", dir="/tmp"))
    sock = f"unix://{work}/docker.sock"
    with open(work / "dockerd.log", "w") as log:
        proc = subprocess.Popen(
            ["dockerd", "--data-root", str(work / "data"), "--exec-root", str(work / "exec"), "--host", sock,
             "--pidfile", str(work / "docker.pid"), "--iptables=false", "--ip6tables=false", "--bridge=none",
             "--storage-driver=overlay2"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    client = Docker(sock)
    try:
        deadline = time.monotonic() + 60
        while client("version", check=False, timeout=10).returncode != 0:
            assert proc.poll() is None and time.monotonic() < deadline, (work / "dockerd.log").read_text()[-3000:]
            time.sleep(0.5)
        yield client
    finally:
        for cid in client("ps", "-aq", check=False, timeout=30).stdout.split():
            client("rm", "-f", cid, check=False, timeout=60)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        # dockerd leaves its network namespace mounted under the exec root.
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        for mount in sorted((m for m in mounts if m.startswith(f"{work}/")), reverse=True):
            subprocess.run(["umount", "-l", mount], check=False)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def image(docker: Docker) -> str:
    base = subprocess.run([str(DEPLOY / "build-base-image")], env=docker.env, capture_output=True, text=True,
                          timeout=900)
    assert base.returncode == 0, base.stderr[-3000:]
    docker("build", "--network", "host", "--build-arg", f"BASE_IMAGE={base.stdout.strip()}", "--build-arg",
           "SOURCE=https://example.org/vllm-headroom.git", "--build-arg", f"VERSION={__version__}", "-t", IMAGE,
           str(ROOT), timeout=900)
    return IMAGE


@pytest.mark.docker
def test_image_config(docker: Docker, image: str) -> None:
    cfg = json.loads(docker("image", "inspect", image).stdout)[0]["Config"]
    assert cfg["User"] == "65532:65532"
    assert "9478/tcp" in cfg["ExposedPorts"]
    # The CLI is the entrypoint and `serve` its default command, so `docker run IMAGE diagnose URL` works.
    assert cfg["Entrypoint"] == ["/opt/vllm-headroom/bin/vllm-headroom"]
    assert cfg["Cmd"] == ["serve"]
    labels = cfg["Labels"]
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.source"] == "https://example.org/vllm-headroom.git"  # from --build-arg
    assert labels["org.opencontainers.image.title"] == "vllm-headroom"
    assert cfg["Healthcheck"]["Test"][0] == "CMD"  # exec form: no shell
    assert "/healthz" in (ROOT / "deploy/docker/healthcheck.py").read_text()
    # The venv holds the runtime dependencies and the package, not the build tools.
    code = "import importlib.metadata as m, json; print(json.dumps([d.metadata['Name'] for d in m.distributions()]))"
    listing = docker("run", "--rm", "--entrypoint", "/opt/vllm-headroom/bin/python", image, "-c", code)
    names = {n.lower().replace("_", "-") for n in json.loads(listing.stdout)}
    assert {"vllm-headroom", "prometheus-client", "httpx", "fastapi", "uvicorn"} <= names
    assert not names & {"pip", "setuptools", "pytest"}


@pytest.mark.docker
def test_image_serves_the_demo_replay_and_stops_on_sigterm(docker: Docker, image: str) -> None:
    vllm_port, our_port = free_port(), free_port()
    # The replayed vLLM runs from the same image; both use the host's loopback.
    docker("run", "-d", "--name", "replay", "--network", "host", "--read-only", image,
           "replay", "--web.listen-address", f"127.0.0.1:{vllm_port}", "--speed", "4")
    docker("run", "-d", "--name", "sidecar", "--network", "host", "--read-only", "--cap-drop", "ALL",
           "--security-opt", "no-new-privileges", "--health-interval", "1s", "--health-start-period", "1s",
           "-e", f"VLLM_HEADROOM_TARGET=http://127.0.0.1:{vllm_port}",
           "-e", "VLLM_HEADROOM_SCRAPE_INTERVAL=1s", "-e", "VLLM_HEADROOM_SCRAPE_TIMEOUT=0.8s", image,
           # The address as a flag, not the image's VLLM_HEADROOM_WEB_LISTEN_ADDRESS: the HEALTHCHECK follows it.
           "serve", "--web.listen-address", f"127.0.0.1:{our_port}")
    deadline, body = time.monotonic() + 60, ""
    while time.monotonic() < deadline:
        status, body = _get(f"http://127.0.0.1:{our_port}/metrics")
        up = f'vllm_headroom_up{{target="http://127.0.0.1:{vllm_port}"}} 1.0'
        if status == 200 and up in body and "vllm_headroom_kv_capacity_blocks{" in body:
            break
        time.sleep(0.5)
    else:
        logs = docker("logs", "sidecar", check=False).stderr
        pytest.fail(f"no metrics from the sidecar:\n{body[-2000:]}\n{logs[-2000:]}")
    assert any(line.startswith("vllm_headroom_verdict{") and line.endswith(" 1.0") for line in body.splitlines())
    status, diagnosis = _get(f"http://127.0.0.1:{our_port}/api/v1/diagnosis")
    assert status == 200 and json.loads(diagnosis)["targets"][0]["engines"]
    status, page = _get(f"http://127.0.0.1:{our_port}/")
    assert status == 200 and "<svg" in page and "data-verdict=" in page  # the status page, offline in the image
    # Any subcommand through the same entrypoint: a one-shot diagnosis of the replayed vLLM.
    oneshot = docker("run", "--rm", "--network", "host", "--read-only", image, "diagnose", "--json",
                     f"http://127.0.0.1:{vllm_port}")
    assert json.loads(oneshot.stdout)["targets"][0]["up"] is True
    # Non-root: every process of the container runs as 65532.
    top = docker("top", "sidecar", "-eo", "uid,pid,args").stdout.splitlines()[1:]
    assert top and all(line.split()[0] == "65532" for line in top), top
    deadline = time.monotonic() + 30
    while docker("inspect", "-f", "{{.State.Health.Status}}", "sidecar").stdout.strip() != "healthy":
        assert time.monotonic() < deadline, docker("inspect", "-f", "{{json .State.Health}}", "sidecar").stdout
        time.sleep(0.5)
    started = time.monotonic()
    docker("stop", "--time", "10", "sidecar")
    took = time.monotonic() - started
    state = json.loads(docker("inspect", "-f", "{{json .State}}", "sidecar").stdout)
    assert took < 5, f"SIGTERM took {took:.1f} s"
    assert state["ExitCode"] == 0, state
    assert "Traceback" not in docker("logs", "sidecar").stderr


def _healthcheck() -> object:
    import importlib.util
    spec = importlib.util.spec_from_file_location("healthcheck", ROOT / "deploy/docker/healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("argv", "env", "urls"), [
    # `docker run IMAGE serve --web.listen-address :9000`: the flag, not the image's env var, is followed; serve's
    # probes are asked on its health listener (the listen port + 1 unless given), the main port only if that
    # refuses (serve falls back to it when the default health port is taken).
    (["python", "/opt/vllm-headroom/bin/vllm-headroom", "serve", "--web.listen-address", ":9000"],
     {"VLLM_HEADROOM_WEB_LISTEN_ADDRESS": "0.0.0.0:9478"},
     ["http://127.0.0.1:9001/healthz", "http://127.0.0.1:9000/healthz"]),
    (["python", "/opt/vllm-headroom/bin/vllm-headroom", "serve", "--web.listen-address=[::1]:9001"], {},
     ["http://[::1]:9002/healthz", "http://[::1]:9001/healthz"]),
    (["python", "/opt/vllm-headroom/bin/vllm-headroom", "serve"], {"VLLM_HEADROOM_WEB_LISTEN_ADDRESS": "[::]:9002"},
     ["http://[::1]:9003/healthz", "http://[::1]:9002/healthz"]),
    (["python", "/opt/vllm-headroom/bin/vllm-headroom", "serve", "--web.health-address", "127.0.0.1:7000"], {},
     ["http://127.0.0.1:7000/healthz", "http://127.0.0.1:9478/healthz"]),
    (["python", "/opt/vllm-headroom/bin/vllm-headroom", "serve"], {"VLLM_HEADROOM_WEB_HEALTH_ADDRESS": ":7001"},
     ["http://127.0.0.1:7001/healthz", "http://127.0.0.1:9478/healthz"]),
    (["python", "/opt/vllm-headroom/bin/vllm-headroom", "serve", "--web.health-address=none"], {},
     ["http://127.0.0.1:9478/healthz"]),
    # replay and demo have their own env names, so the image's serve address does not move them.
    (["python", "/opt/vllm-headroom/bin/vllm-headroom", "replay"],
     {"VLLM_HEADROOM_WEB_LISTEN_ADDRESS": "0.0.0.0:9478", "VLLM_HEADROOM_REPLAY_LISTEN_ADDRESS": "0.0.0.0:8000"},
     ["http://127.0.0.1:8000/health"]),
    (["python", "/opt/vllm-headroom/bin/vllm-headroom", "demo"], {"VLLM_HEADROOM_DEMO_LISTEN_ADDRESS": ":9478"},
     ["http://127.0.0.1:9478/healthz"]),
    (["python", "/opt/vllm-headroom/bin/vllm-headroom", "diagnose", "http://vllm:8000"], {}, []),
    (["python", "/opt/vllm-headroom/bin/vllm-headroom", "demo", "--once"], {}, []),
])
def test_healthcheck_follows_the_running_commands_address(argv: list[str], env: dict[str, str],
                                                           urls: list[str]) -> None:
    assert _healthcheck().targets(argv, env) == urls  # type: ignore[attr-defined]


def test_healthcheck_asks_the_health_listener_and_falls_back_only_when_nothing_listens() -> None:
    """Against real listeners: a health port that answers decides (even when the main port is wedged); a health
    port nothing listens on falls back to the main port; a health port answering 503 is unhealthy."""
    import http.server
    import threading

    check = _healthcheck().check  # type: ignore[attr-defined]

    def server(status: int) -> http.server.HTTPServer:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass
        httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return httpd

    ok, failing = server(200), server(503)
    closed = free_port()  # nothing listens here
    try:
        url = "http://127.0.0.1:{}/healthz".format
        assert check([url(ok.server_port), url(failing.server_port)]) == 0
        assert check([url(closed), url(ok.server_port)]) == 0
        assert check([url(closed), url(failing.server_port)]) == 1
        assert check([url(failing.server_port), url(ok.server_port)]) == 1
        assert check([url(closed)]) == 1
    finally:
        ok.shutdown()
        failing.shutdown()
