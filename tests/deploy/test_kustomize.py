"""deploy/kubernetes: every overlay renders with `kubectl kustomize`, validates offline, holds what issue #5 asks."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from .conftest import DEPLOY, K8S_VERSIONS, MONITORING, OVERLAYS, Doc, find, probes_on_health_listener, sidecar_of


def published_image() -> str:
    """The image every manifest names: deploy/image.json's release by digest, else the tag the first release pushes."""
    from exporter import __version__

    cfg = json.loads((DEPLOY / "image.json").read_text())
    if cfg["released"]:
        return f"{cfg['repository']}:{cfg['released']['version']}@{cfg['released']['digest']}"
    return f"{cfg['repository']}:{__version__}"


Render = Callable[[str], list[Doc]]
Validate = Callable[..., list[dict[str, Any]]]
MONITORS = {"PodMonitor", "ServiceMonitor"}
CLUSTER_WIDE = {"PrometheusRule", "ConfigMap"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_validates(overlay: str, kustomize: Render, validate: Validate) -> None:
    docs = kustomize(overlay)
    versions = ["1.27", *K8S_VERSIONS] if overlay.endswith("legacy-sidecar") else K8S_VERSIONS
    results = validate(docs, versions)
    errors = [r for r in results if r["error"]]
    assert not errors, errors
    kinds = {d["kind"] for d in docs}
    assert "Deployment" in kinds and not kinds & CLUSTER_WIDE, "cluster-wide objects: deploy/kubernetes/monitoring"
    crds = [r for r in results if r["validator"].startswith("prometheus-operator")]
    assert {r["kind"] for r in crds} == kinds & {"PodMonitor", "ServiceMonitor"}
    # Core objects were checked against every version.
    deploy = [r for r in results if r["kind"] == "Deployment"]
    assert {r["validator"] for r in deploy} == {f"kubernetes {v} strict" for v in versions}


def test_validation_catches_errors(kustomize: Render, validate: Validate) -> None:
    """The validators are not vacuous: a typo, a native sidecar on 1.27 and a bad interval all fail."""
    docs = kustomize("overlays/podmonitor")
    deployment = find(docs, "Deployment")
    sidecar, _ = sidecar_of(deployment)
    bad_field = {**deployment, "spec": {**deployment["spec"], "replica": 1}}
    assert validate([bad_field], ["1.31"])[0]["error"]
    assert validate([deployment], ["1.27"])[0]["error"]  # restartPolicy on an init container is new in 1.28
    monitor = find(docs, "PodMonitor")
    bad_monitor = {**monitor, "spec": {**monitor["spec"], "podMetricsEndpoints": [{"port": "x", "interval": "15 s"}]}}
    assert validate([bad_monitor])[0]["error"]
    assert sidecar["restartPolicy"] == "Always"


@pytest.mark.parametrize("overlay", ["overlays/podmonitor", "overlays/servicemonitor", "overlays/existing-vllm"])
def test_native_sidecar_beside_vllm(overlay: str, kustomize: Render) -> None:
    deployment = find(kustomize(overlay), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True
    sidecar, where = sidecar_of(deployment)
    assert where == "initContainers" and sidecar["restartPolicy"] == "Always"
    assert pod["initContainers"][0]["name"] == "vllm-headroom", "the sidecar starts before other init containers"
    assert sidecar["image"] == published_image()
    env = {e["name"]: e["value"] for e in sidecar["env"]}
    assert env["VLLM_HEADROOM_TARGET"] == "http://127.0.0.1:8000"
    assert all(name.startswith("VLLM_HEADROOM_") for name in env)
    assert sidecar["ports"] == [{"name": "headroom", "containerPort": 9478, "protocol": "TCP"},
                                {"name": "headroom-health", "containerPort": 9479, "protocol": "TCP"}]
    assert probes_on_health_listener(sidecar) == 9479
    assert set(sidecar["resources"]) == {"requests", "limits"}
    assert {"cpu", "memory"} <= set(sidecar["resources"]["requests"]) & set(sidecar["resources"]["limits"])
    sc = sidecar["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["vllm-headroom/sidecar"] == "injected"


def test_existing_vllm_overlay_keeps_the_users_pod(kustomize: Render) -> None:
    deployment = find(kustomize("overlays/existing-vllm"), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["server"]
    assert [c["name"] for c in pod["initContainers"]] == ["vllm-headroom", "fetch-model"]
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["selector"] == {"matchLabels": {"app": "my-llm"}}
    # Only the sidecar's own Service (for KEDA's metrics-api scaler), none in front of vLLM.
    (service,) = [d for d in kustomize("overlays/existing-vllm") if d["kind"] == "Service"]
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["headroom"]


def test_legacy_overlay_runs_a_plain_container(kustomize: Render) -> None:
    deployment = find(kustomize("overlays/legacy-sidecar"), "Deployment")
    sidecar, where = sidecar_of(deployment)
    assert where == "containers" and "restartPolicy" not in sidecar
    assert not deployment["spec"]["template"]["spec"].get("initContainers")
    native, _ = sidecar_of(find(kustomize("base"), "Deployment"))
    assert sidecar == {k: v for k, v in native.items() if k != "restartPolicy"}


def test_base_service_has_a_metrics_port(kustomize: Render) -> None:
    service = find(kustomize("base"), "Service")
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert ports["headroom"]["port"] == 9478 and ports["headroom"]["targetPort"] == "headroom"
    assert service["spec"]["selector"] == find(kustomize("base"), "Deployment")["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize(("overlay", "kind"), [("overlays/podmonitor", "PodMonitor"),
                                               ("overlays/servicemonitor", "ServiceMonitor"),
                                               ("overlays/legacy-sidecar", "PodMonitor"),
                                               ("overlays/existing-vllm", "PodMonitor")])
def test_one_monitor_per_overlay(overlay: str, kind: str, kustomize: Render) -> None:
    docs = kustomize(overlay)
    assert [d["kind"] for d in docs if d["kind"] in MONITORS] == [kind]
    monitor = find(docs, kind)
    endpoints = monitor["spec"]["podMetricsEndpoints" if kind == "PodMonitor" else "endpoints"]
    # The rules and dashboards select the sidecar by job=~".*headroom.*" and vLLM by job=~"vllm|vllm-.*".
    jobs = {e.get("port", e.get("portNumber")): e["relabelings"][0]["replacement"] for e in endpoints}
    # existing-vllm scrapes vLLM by the number in its vllm-headroom.yaml, whatever the user's port is named.
    assert jobs == {"headroom": "vllm-headroom", 8000 if overlay.endswith("existing-vllm") else "http": "vllm"}
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    selector = monitor["spec"]["selector"]["matchLabels"]
    target = find(docs, "Deployment" if kind == "PodMonitor" else "Service")
    labels = target["spec"]["template"]["metadata"]["labels"] if kind == "PodMonitor" else target["metadata"]["labels"]
    assert selector.items() <= labels.items()


def test_base_has_no_monitor(kustomize: Render) -> None:
    assert not [d for d in kustomize("base") if d["kind"] in MONITORS]


def test_monitoring_renders_and_validates(kustomize: Render, validate: Validate) -> None:
    """deploy/kubernetes/monitoring holds the cluster-wide objects and nothing else."""
    docs = kustomize(MONITORING)
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == [
        ("ConfigMap", "vllm-headroom-dashboards"), ("PrometheusRule", "vllm-headroom")]
    results = validate(docs)
    assert not [r for r in results if r["error"]]
    assert {r["kind"] for r in results if r["validator"].startswith("prometheus-operator")} == {"PrometheusRule"}


def test_a_fleet_of_overlays_pages_once(kustomize: Render) -> None:
    """Two vLLM deployments (two overlays, or one overlay applied in two namespaces) plus the monitoring kustomization
    applied once: one PrometheusRule and one copy of each dashboard uid in the cluster, as with the Helm chart."""
    fleet = [kustomize(o) for o in ("overlays/podmonitor", "overlays/existing-vllm", "overlays/podmonitor")]
    fleet.append(kustomize(MONITORING))
    everything = [d for docs in fleet for d in docs]
    assert [d["kind"] for d in everything].count("PrometheusRule") == 1
    uids = [json.loads(v)["uid"] for d in everything if d["kind"] == "ConfigMap" for v in d["data"].values()]
    assert uids and len(uids) == len(set(uids))
    assert [d["kind"] for d in everything].count("Deployment") == 3
