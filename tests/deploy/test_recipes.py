"""Recipes for the stacks people already run vLLM with (deploy/recipes), and autoscaling (deploy/autoscaling).

Each recipe is rendered offline with kubectl's kustomize over a stand-in of that stack's rendered output (the real
charts cannot be downloaded here), then validated like our own manifests: core kinds with kubernetes-validate
--strict, PodMonitors with the prometheus-operator models, the ScaledObject with KEDA's CRD models.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from .conftest import DEPLOY, Doc, Tools, find, load_all

RECIPES = DEPLOY / "recipes"
SIDECAR = DEPLOY / "kubernetes" / "components" / "sidecar" / "sidecar-patch.yaml"
SCALEDOBJECT = DEPLOY / "autoscaling" / "keda-scaledobject.yaml"


def render(tools: Tools, folder: Path) -> list[Doc]:
    proc = subprocess.run([tools.bin("kubectl"), "kustomize", str(folder)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return load_all(proc.stdout)


def canonical(target: str, native: bool = True) -> Doc:
    """Our own sidecar container (deploy/kubernetes), pointed at `target`; without restartPolicy if not native."""
    c: Doc = copy.deepcopy(yaml.safe_load(SIDECAR.read_text())["spec"]["template"]["spec"]["initContainers"][0])
    for e in c["env"]:
        if e["name"] == "VLLM_HEADROOM_TARGET":
            e["value"] = target
    if not native:
        c.pop("restartPolicy")
    return c


def named(containers: list[Doc], name: str) -> Doc:
    (hit,) = [c for c in containers if c["name"] == name]
    return hit


def pod_of(spec: Doc, name: str) -> Doc:
    """A Pod holding a pod template's spec, so kubernetes-validate checks it like any pod."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def sidecar_only(monitor: Doc) -> None:
    endpoints = monitor["spec"]["podMetricsEndpoints"]
    assert [e["port"] for e in endpoints] == ["headroom"]  # vLLM is scraped by the stack already
    assert endpoints[0]["relabelings"] == [{"targetLabel": "job", "replacement": "vllm-headroom"}]


def no_errors(results: list[dict[str, Any]]) -> None:
    bad = [r for r in results if r["error"]]
    assert not bad, bad


@pytest.mark.parametrize(("stack", "deployment", "port", "vllm"),
                         [("production-stack", "vllm-llama3-deployment-vllm", 8000, "vllm"),
                          ("llm-d", "ms-llm-d-modelservice-decode", 8200, "vllm"),  # behind the routing proxy
                          ("llm-d", "ms-llm-d-modelservice-prefill", 8000, "vllm")])
def test_helm_stacks_get_the_native_sidecar(stack: str, deployment: str, port: int, vllm: str, tools: Tools,
                                            validate: Callable[..., list[dict[str, Any]]]) -> None:
    docs = render(tools, RECIPES / "examples" / stack)
    spec = find(docs, "Deployment", deployment)["spec"]["template"]["spec"]
    assert named(spec["initContainers"], "vllm-headroom") == canonical(f"http://127.0.0.1:{port}")
    assert spec["shareProcessNamespace"] is True  # reads --max-num-seqs from vLLM's /proc/<pid>/cmdline
    assert named(spec["containers"], vllm)["ports"][0]["containerPort"] == port  # the sidecar reads vLLM itself
    sidecar_only(find(docs, "PodMonitor"))
    no_errors(validate(docs))


def test_production_stack_router_is_left_alone(tools: Tools) -> None:
    docs = render(tools, RECIPES / "examples" / "production-stack")
    router = find(docs, "Deployment", "vllm-deployment-router")["spec"]["template"]["spec"]
    assert "initContainers" not in router and "shareProcessNamespace" not in router


def test_llm_d_keeps_its_routing_proxy(tools: Tools) -> None:
    spec = find(render(tools, RECIPES / "examples" / "llm-d"), "Deployment", "ms-llm-d-modelservice-decode")[
        "spec"]["template"]["spec"]
    assert sorted(c["name"] for c in spec["initContainers"]) == ["routing-proxy", "vllm-headroom"]
    proxy = named(spec["initContainers"], "routing-proxy")
    assert proxy["args"] == ["--port=8000", "--vllm-port=8200"] and proxy["restartPolicy"] == "Always"


def test_llm_d_values_file_adds_the_same_container(validate: Callable[..., list[dict[str, Any]]]) -> None:
    values = yaml.safe_load((RECIPES / "llm-d" / "values-vllm-headroom.yaml").read_text())
    pods = []
    for role, port in (("decode", 8200), ("prefill", 8000)):  # decode's vLLM sits behind the routing proxy
        want = canonical(f"http://127.0.0.1:{port}")
        assert values[role]["initContainers"] == [want]
        assert values[role]["extraConfig"] == {"shareProcessNamespace": True}  # the chart's pod-spec passthrough
        pods.append(pod_of({**values[role]["extraConfig"], "initContainers": [want],
                            "containers": [{"name": "vllm", "image": "vllm"}]}, f"llm-d-values-{role}"))
    no_errors(validate(pods))


def test_kserve_inference_service_gets_a_second_container(tools: Tools,
                                                          validate: Callable[..., list[dict[str, Any]]]) -> None:
    docs = render(tools, RECIPES / "examples" / "kserve")
    isvc = find(docs, "InferenceService", "llama3")
    predictor = isvc["spec"]["predictor"]
    assert [c["name"] for c in predictor["containers"]] == ["kserve-container", "vllm-headroom"]
    assert predictor["containers"][1] == canonical("http://127.0.0.1:8080", native=False)
    assert predictor["shareProcessNamespace"] is True
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "RawDeployment"
    sidecar_only(find(docs, "PodMonitor"))
    # The predictor is a pod spec inline: validate it as one, and the PodMonitor with the operator's models.
    pod = pod_of({k: v for k, v in predictor.items() if k != "minReplicas"}, "kserve-predictor")
    no_errors(validate([pod, find(docs, "PodMonitor")]))


def test_kserve_recipe_skips_services_not_labelled(tools: Tools, tmp_path: Path) -> None:
    isvc = yaml.safe_load((RECIPES / "examples" / "kserve" / "inferenceservice.yaml").read_text())
    del isvc["metadata"]["labels"]
    (tmp_path / "isvc.yaml").write_text(yaml.safe_dump(isvc))
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["isvc.yaml"],
        "components": [os.path.relpath(RECIPES / "kserve", tmp_path)]}))
    predictor = find(render(tools, tmp_path), "InferenceService")["spec"]["predictor"]
    assert [c["name"] for c in predictor["containers"]] == ["kserve-container"]


def test_post_renderer_gives_what_the_recipe_renders(tools: Tools) -> None:
    chart_output = (RECIPES / "examples" / "production-stack" / "chart-output.yaml").read_text()
    env = {**os.environ, "PATH": f"{Path(tools.bin('kubectl')).parent}:{os.environ['PATH']}"}
    proc = subprocess.run([str(RECIPES / "post-render"), "production-stack"], input=chart_output, capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert load_all(proc.stdout) == render(tools, RECIPES / "examples" / "production-stack")
    bad = subprocess.run([str(RECIPES / "post-render"), "no-such-stack"], input="", capture_output=True, text=True,
                         timeout=60, env=env)
    assert bad.returncode == 2 and "no recipe no-such-stack" in bad.stderr


def test_keda_scaledobject_matches_kedas_crd_schema(tools: Tools) -> None:
    proc = subprocess.run([tools.bin("python"), str(Path(__file__).with_name("recipes_checks.py")), "keda",
                           str(SCALEDOBJECT)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert [r["kind"] for r in results] == ["ScaledObject"]
    no_errors(results)


def test_keda_query_scales_on_admission_headroom_not_on_false_full() -> None:
    (obj,) = load_all(SCALEDOBJECT.read_text())
    (trigger,) = obj["spec"]["triggers"]
    query = trigger["metadata"]["query"]
    promql_parser.parse(query)  # raises on a syntax error
    assert "vllm_headroom_admission_headroom_requests" in query and "vllm_headroom_requests_waiting" in query
    assert "unless on (namespace, pod, model_name, engine)" in query and "vllm_headroom_false_full" in query
    assert "vllm:num_requests_waiting" not in query  # not the raw waiting count
    assert float(trigger["metadata"]["threshold"]) > float(trigger["metadata"]["activationThreshold"]) > 0
    assert obj["spec"]["minReplicaCount"] >= 1  # never to zero: a cold vLLM takes minutes
