"""Fixtures of the deploy tests: the cached tools venv (deploy/install-tools) and helpers that run its checks."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUSTOMIZE = DEPLOY / "kubernetes"
CHART = DEPLOY / "helm" / "vllm-headroom"
CHECKS = Path(__file__).with_name("tools_venv_checks.py")
# Core objects are validated against these Kubernetes versions (native sidecars need >= 1.29).
K8S_VERSIONS = ["1.29", "1.31", "1.33"]
# Per vLLM deployment: the workload and its scrape path, no cluster-wide object.
OVERLAYS = ["base", "overlays/podmonitor", "overlays/servicemonitor", "overlays/legacy-sidecar",
            "overlays/existing-vllm"]
# Once per cluster: the PrometheusRule and the dashboards ConfigMap.
MONITORING = "monitoring"

Doc = dict[str, Any]
KEDA_KINDS = {"ScaledObject", "TriggerAuthentication"}  # validated with KEDA's CRD models, not kubernetes-validate


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "docker: builds and runs the container image with a private dockerd (minutes)")


@dataclass(frozen=True)
class Tools:
    venv: Path

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def run_json(self, *args: str) -> Any:
        proc = subprocess.run([self.bin("python"), str(CHECKS), *args], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture(scope="session")
def tools() -> Tools:
    """Installs (first time) or finds the tools venv and the Debian packages of deploy/install-tools."""
    proc = subprocess.run([str(DEPLOY / "install-tools")], capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        pytest.fail(f"deploy/install-tools failed:\n{proc.stderr[-3000:]}")
    return Tools(Path(proc.stdout.strip().splitlines()[-1]))


def load_all(text: str) -> list[Doc]:
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.fixture(scope="session")
def kustomize(tools: Tools) -> Callable[[str], list[Doc]]:
    cache: dict[str, list[Doc]] = {}

    def render(overlay: str) -> list[Doc]:
        if overlay not in cache:
            proc = subprocess.run([tools.bin("kubectl"), "kustomize", str(KUSTOMIZE / overlay)], capture_output=True,
                                  text=True, timeout=60)
            assert proc.returncode == 0, f"kubectl kustomize {overlay}: {proc.stderr}"
            cache[overlay] = load_all(proc.stdout)
        return cache[overlay]

    return render


@pytest.fixture(scope="session")
def validate(tools: Tools, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., list[dict[str, Any]]]:
    """Validates objects: core kinds with kubernetes-validate --strict per version, CRDs with the operator models."""

    def run(docs: list[Doc], versions: list[str] = K8S_VERSIONS) -> list[dict[str, Any]]:
        folder = tmp_path_factory.mktemp("validate")
        keda = [d for d in docs if d["kind"] in KEDA_KINDS]
        path = folder / "objects.yaml"
        path.write_text(yaml.safe_dump_all([d for d in docs if d["kind"] not in KEDA_KINDS]))
        results: list[dict[str, Any]] = tools.run_json("validate", str(path), *versions)
        if keda:  # KEDA's CRD models (recipes_checks.py), unknown fields refused
            (folder / "keda.yaml").write_text(yaml.safe_dump_all(keda))
            proc = subprocess.run([tools.bin("python"), str(CHECKS.with_name("recipes_checks.py")), "keda",
                                   str(folder / "keda.yaml")], capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr
            results += [{**r, "validator": "keda 2.16.1 CRD"} for r in json.loads(proc.stdout)]
        assert len({(r["kind"], r["name"]) for r in results}) == len({(d["kind"], d["metadata"]["name"]) for d in docs})
        return results

    return run


@pytest.fixture(scope="session")
def helm(tools: Tools) -> Callable[..., dict[str, Any]]:
    """Lints, schema-checks and renders the chart as `helm install RELEASE -n NAMESPACE` would, by a user of an
    existing Deployment named vllm (vllm.deploymentName, required for the printed patch) unless `values` set it."""

    def run(values: dict[str, Any], release: str = "vllm-headroom", namespace: str = "inference",
            kube_version: str | None = None) -> dict[str, Any]:
        if "deploymentName" not in values.get("vllm", {}):
            values = {**values, "vllm": {**values.get("vllm", {}), "deploymentName": "vllm"}}
        out: dict[str, Any] = tools.run_json("helm", str(CHART), json.dumps(values), release, namespace,
                                             *([kube_version] if kube_version else []))
        return out

    return run


def find(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    hits = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(hits) == 1, f"expected one {kind} {name or ''}, found {len(hits)}"
    return hits[0]


def sidecar_of(deployment: Doc) -> tuple[Doc, str]:
    """The vllm-headroom container of a Deployment and the list holding it."""
    spec = deployment["spec"]["template"]["spec"]
    for field in ("initContainers", "containers"):
        for c in spec.get(field) or []:
            if c["name"] == "vllm-headroom":
                return c, field
    raise AssertionError("no vllm-headroom container")




PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


def probes_on_health_listener(sidecar: Doc) -> int:
    """Every probe of the sidecar asks /healthz on its health listener (issue 21: a crowd on the main port queued
    the kubelet's probes): the port each probe names is the container port the sidecar's
    VLLM_HEADROOM_WEB_HEALTH_ADDRESS listens on, and not the main listener's. Returns that port."""
    env = {e["name"]: e.get("value") for e in sidecar["env"]}
    health = int(env["VLLM_HEADROOM_WEB_HEALTH_ADDRESS"].rpartition(":")[2])
    main = int(env["VLLM_HEADROOM_WEB_LISTEN_ADDRESS"].rpartition(":")[2])
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    assert health != main and set(ports.values()) >= {health, main}, (ports, health, main)
    for probe in PROBES:
        get = sidecar[probe]["httpGet"]
        assert get["path"] == "/healthz", (probe, get)
        assert ports.get(get["port"], get["port"]) == health, (probe, get, ports)
    return health
