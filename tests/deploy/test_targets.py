"""Every scrape and scale target of each render resolves in that render (issue 24 review, items 1 and 2).

Each overlay, recipe example and Helm release is rendered with the real tools (kubectl's kustomize, Helm 4's SDK),
then every PodMonitor, ServiceMonitor, Service, ScaledObject and HPA in it must find its pods, Service and port in the
same render (tests/deploy/targets.py says how each is resolved). Two instances applied to one namespace must not
write the same object twice, and each one's Service and PodMonitor must select only its own pods.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import DEPLOY, KUSTOMIZE, OVERLAYS, Doc, Tools, find, load_all
from .targets import clashes, selected, unresolved
from .test_helm import _patch_from_notes, notes, objects

Helm = Callable[..., dict[str, Any]]
EXISTING = "overlays/existing-vllm"


def kubectl_kustomize(tools: Tools, folder: Path) -> list[Doc]:
    proc = subprocess.run([tools.bin("kubectl"), "kustomize", str(folder)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return load_all(proc.stdout)


def existing_vllm(tools: Tools, tmp: Path, deployment: str, namespace: str, keda: bool = False,
                  instance: str | None = None, vllm_port: int | str = 8000) -> list[Doc]:
    """overlays/existing-vllm over a user's Deployment `deployment`, set up as its header says (instance = the
    Deployment's name unless `instance`), optionally with its KEDA scaler listed."""
    tree = tmp / "kubernetes"
    shutil.copytree(KUSTOMIZE, tree)
    overlay = tree / EXISTING
    user = yaml.safe_load((overlay / "my-vllm-deployment.yaml").read_text())
    user["metadata"]["name"] = deployment
    user["metadata"]["labels"] = user["spec"]["selector"]["matchLabels"] = \
        user["spec"]["template"]["metadata"]["labels"] = {"app": deployment}
    (overlay / "my-vllm-deployment.yaml").write_text(yaml.safe_dump(user))
    target, settings = load_all((overlay / "vllm-headroom.yaml").read_text())
    target["metadata"]["name"] = deployment
    settings.update(instance=instance or deployment, namespace=namespace, vllmPort=vllm_port)
    (overlay / "vllm-headroom.yaml").write_text(yaml.safe_dump_all([target, settings]))
    if keda:
        k = overlay / "kustomization.yaml"
        text = k.read_text()
        assert "  # - keda-scaledobject.yaml" in text
        k.write_text(text.replace("  # - keda-scaledobject.yaml", "  - keda-scaledobject.yaml"))
    return kubectl_kustomize(tools, overlay)


def with_autoscaling_examples(tools: Tools, tmp: Path) -> list[Doc]:
    """The base (vLLM + sidecar + Service) in namespace inference with deploy/autoscaling's examples beside it."""
    (tmp / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": "inference",
        "resources": [os.path.relpath(KUSTOMIZE / "base", tmp)]}))
    docs = kubectl_kustomize(tools, tmp)
    for name in ("keda-scaledobject.yaml", "keda-scaledobject-metrics-api.yaml", "hpa.yaml"):
        docs += load_all((DEPLOY / "autoscaling" / name).read_text())
    return docs


def stand_in(name: str, patch: Doc | None) -> Doc:
    """A user's vLLM Deployment (own labels, port `http` 8000) with the chart's printed patch applied, as
    `kubectl patch --type strategic` merges it (labels merged, the sidecar added, the field set)."""
    d: Doc = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "inference"},
              "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
                  "metadata": {"labels": {"app": name}},
                  "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.32.0",
                                           "ports": [{"name": "http", "containerPort": 8000}]}]}}}}
    if patch:
        tpl, p = d["spec"]["template"], patch["spec"]["template"]
        tpl["metadata"]["labels"].update(p["metadata"]["labels"])
        for field, value in p["spec"].items():
            tpl["spec"][field] = (tpl["spec"].get(field) or []) + value if isinstance(value, list) else value
    return d


def helm_release(helm: Helm, values: dict[str, Any], release: str, deployment: str = "vllm") -> list[Doc]:
    values = copy.deepcopy(values)
    values.setdefault("vllm", {})["deploymentName"] = deployment
    out = helm(values, release=release, namespace="inference")
    assert out["render_error"] is None and out["schema_error"] is None, out
    docs = objects(out)
    if not values["vllm"].get("deployment", {}).get("create"):
        docs.append(stand_in(deployment, _patch_from_notes(notes(out))))
    return docs


HELM_VARIANTS: dict[str, dict[str, Any]] = {
    "podmonitor": {},
    "servicemonitor": {"podMonitor": {"enabled": False}, "serviceMonitor": {"enabled": True}},
    "keda": {"autoscaling": {"keda": {"enabled": True}}},
    "keda-model": {"autoscaling": {"keda": {"enabled": True, "modelName": "Qwen/Qwen2.5-1.5B-Instruct"}}},
    "own-deployment-keda": {"vllm": {"deployment": {"create": True}}, "autoscaling": {"keda": {"enabled": True}}},
}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_resolves_its_targets(overlay: str, kustomize: Callable[[str], list[Doc]]) -> None:
    docs = kustomize(overlay)
    assert unresolved(docs) == []
    assert clashes(docs) == []


def test_existing_vllm_with_keda_resolves_its_targets(tools: Tools, tmp_path: Path,
                                                      validate: Callable[..., list[dict[str, Any]]]) -> None:
    docs = existing_vllm(tools, tmp_path, "llama-3-8b", "inference", keda=True)
    so = find(docs, "ScaledObject")
    assert so["spec"]["scaleTargetRef"]["name"] == "llama-3-8b"
    assert so["spec"]["triggers"][0]["metadata"]["url"] == \
        "http://llama-3-8b-headroom.inference.svc.cluster.local:9478/metrics"
    assert {(d["kind"], d["metadata"].get("namespace")) for d in docs if d["kind"] != "Deployment"} == {
        ("Service", "inference"), ("PodMonitor", "inference"), ("ScaledObject", "inference")}
    assert unresolved(docs, "inference") == []
    assert not [r for r in validate(docs) if r["error"]]


def test_a_port_name_as_vllm_port_is_caught(tools: Tools, tmp_path: Path) -> None:
    """vllmPort is vLLM's port number; a name (`api`) renders http://127.0.0.1:api, which the sidecar refuses at
    start, and a PodMonitor portNumber that is no number: the render check reports both."""
    docs = existing_vllm(tools, tmp_path, "llama", "inference", vllm_port="api")
    assert unresolved(docs, "inference") == [
        "Deployment inference/llama: sidecar target http://127.0.0.1:api has no port number",
        "PodMonitor inference/llama-headroom endpoint api: portNumber is no number"]


def test_a_dotted_instance_is_caught_and_keeps_its_url(tools: Tools, tmp_path: Path) -> None:
    """A Deployment named llama-3.1-8b (a valid Deployment name) as the instance: the KEDA URL keeps its host
    <instance>-headroom.<namespace> (before, the namespace replaced a piece between the instance's dots), and the
    Service name, which Kubernetes would refuse (dots are no DNS-1035 label), is reported by the render check."""
    docs = existing_vllm(tools, tmp_path, "llama-3.1-8b", "inference", keda=True)
    so = find(docs, "ScaledObject")
    assert so["spec"]["triggers"][0]["metadata"]["url"] == \
        "http://llama-3.1-8b-headroom.inference.svc.cluster.local:9478/metrics"
    # KEDA splits the host at its dots as well (<service>.<namespace>): it would look for Service llama-3 in
    # namespace 1-8b-headroom.
    assert unresolved(docs, "inference") == [
        "Service inference/llama-3.1-8b-headroom: the name is no DNS-1035 label (a-z, 0-9, '-', at most 63, a "
        "letter first)",
        "ScaledObject inference/llama-3.1-8b-headroom: URL names Service 1-8b-headroom/llama-3, not in the render"]
    # Without KEDA, the documented way: an instance without dots for that Deployment.
    docs = existing_vllm(tools, tmp_path / "b", "llama-3.1-8b", "inference", instance="llama-3-1-8b")
    assert unresolved(docs, "inference") == []


def test_an_instance_that_is_not_the_deployment_is_caught(tools: Tools, tmp_path: Path) -> None:
    """The check is not vacuous: an instance other than the Deployment's name scales a Deployment that is not
    there (the header's rule); a Service with a wrong port and a monitor of a missing label are caught too."""
    docs = existing_vllm(tools, tmp_path, "llama-3-8b", "inference", keda=True, instance="llama")
    assert unresolved(docs, "inference") == [
        "ScaledObject inference/llama-headroom scales Deployment inference/llama, not in the render"]
    docs = existing_vllm(tools, tmp_path / "b", "qwen", "inference", keda=True)
    service = find(docs, "Service")
    service["spec"]["ports"][0]["targetPort"] = 9477  # no port of the pod (9479 is the health listener's)
    monitor = find(docs, "PodMonitor")
    monitor["spec"]["selector"]["matchLabels"]["vllm-headroom/instance"] = "llama"
    assert unresolved(docs, "inference") == [
        "Service inference/qwen-headroom port headroom: Deployment/qwen has no port 9477",
        "ScaledObject inference/qwen-headroom: URL port 9478 is no endpoint port of Service qwen-headroom "
        "(its pods' target ports: [])",
        "PodMonitor inference/qwen-headroom selects no pod"]


def test_base_with_the_autoscaling_examples_resolves(tools: Tools, tmp_path: Path) -> None:
    docs = with_autoscaling_examples(tools, tmp_path)
    assert {d["kind"] for d in docs} >= {"ScaledObject", "HorizontalPodAutoscaler", "Service", "Deployment"}
    assert unresolved(docs, "inference") == []


@pytest.mark.parametrize("stack", ["production-stack", "llm-d", "kserve"])
def test_each_recipe_example_resolves_its_targets(stack: str, tools: Tools) -> None:
    docs = kubectl_kustomize(tools, DEPLOY / "recipes" / "examples" / stack)
    kinds = {d["kind"] for d in docs}
    assert "PodMonitor" in kinds and "Service" in kinds
    # The sidecar's port behind a Service, for KEDA's metrics-api scaler.
    assert [s for s in docs if s["kind"] == "Service" and any(
        p.get("targetPort") == "headroom" for p in s["spec"]["ports"])]
    assert unresolved(docs, "inference") == []


@pytest.mark.parametrize("variant", HELM_VARIANTS)
def test_each_helm_release_resolves_its_targets(variant: str, helm: Helm) -> None:
    docs = helm_release(helm, HELM_VARIANTS[variant], "vllm-headroom")
    if "keda" in variant:
        so = find(docs, "ScaledObject")
        assert so["spec"]["triggers"][0]["metadata"]["url"] == \
            "http://vllm-headroom.inference.svc.cluster.local:9478/metrics"
    assert unresolved(docs, "inference") == []


def test_keda_needs_the_service(helm: Helm) -> None:
    out = helm({"vllm": {"deploymentName": "vllm"}, "service": {"enabled": False},
                "autoscaling": {"keda": {"enabled": True}}})
    assert "autoscaling.keda.enabled reads the sidecars through the chart's Service" in out["render_error"]


def test_two_existing_vllm_instances_share_a_namespace(tools: Tools, tmp_path: Path) -> None:
    a = existing_vllm(tools, tmp_path / "a", "llama", "inference", keda=True)
    b = existing_vllm(tools, tmp_path / "b", "qwen", "inference", keda=True)
    both = a + b
    assert clashes(both, "inference") == []
    assert unresolved(both, "inference") == []
    for mine, theirs in ((a, "qwen"), (b, "llama")):
        for kind in ("Service", "PodMonitor"):
            owners = [p.owner for p in selected(both, find(mine, kind), "inference")]
            assert len(owners) == 1 and theirs not in owners[0], (kind, owners)
    # Before names followed the instance, both copies wrote PodMonitor vllm-headroom: the same render with the
    # instance left at its default shows that clash.
    same = existing_vllm(tools, tmp_path / "c", "llama", "inference", instance="vllm") + \
        existing_vllm(tools, tmp_path / "d", "qwen", "inference", instance="vllm")
    assert clashes(same, "inference") == ["PodMonitor inference/vllm-headroom x2", "Service inference/vllm-headroom x2"]


def test_two_helm_releases_share_a_namespace(helm: Helm) -> None:
    for values in ({}, {"podMonitor": {"enabled": False}, "serviceMonitor": {"enabled": True}},
                   {"autoscaling": {"keda": {"enabled": True}}}):
        a = helm_release(helm, values, "llama", "llama")
        b = helm_release(helm, values, "qwen", "qwen")
        both = a + b
        assert clashes(both, "inference") == [], values
        assert unresolved(both, "inference") == [], values
        assert all(d["metadata"].get("namespace") == "inference" for d in a + b), values
        for mine, theirs in ((a, "qwen"), (b, "llama")):
            service = find([d for d in mine if d["kind"] == "Service"], "Service")
            owners = [p.owner for p in selected(both, service, "inference")]
            assert owners and all(theirs not in o for o in owners), owners
