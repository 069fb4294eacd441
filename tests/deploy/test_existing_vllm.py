"""overlays/existing-vllm on the Deployments people already run: any name, a namespace, a port named or not.

Each case copies deploy/kubernetes to a temporary folder, puts a user's Deployment in place of the stand-in, sets
the two values of vllm-headroom.yaml as the overlay's header says, renders with kubectl's kustomize and validates
the result. A name that matches no Deployment must stop the build with kustomize's one-line error, never render a
PodMonitor that scrapes nothing.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import KUSTOMIZE, Doc, Tools, find, load_all, sidecar_of

OVERLAY = "overlays/existing-vllm"
Validate = Callable[..., list[dict[str, Any]]]


def deployment(name: str, port: dict[str, Any] | None, namespace: str | None = None, sidecars: int = 0) -> Doc:
    """A vLLM Deployment as people write it: their own labels, container name, port (named or not), maybe more
    containers beside vLLM."""
    meta: Doc = {"name": name, "labels": {"app": name}}
    if namespace:
        meta["namespace"] = namespace
    server: Doc = {"name": "server", "image": "vllm/vllm-openai:v0.32.0",
                   "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--port", str((port or {}).get(
                       "containerPort", 8000))]}
    if port is not None:
        server["ports"] = [port]
    containers = [server] + [{"name": f"proxy-{i}", "image": "envoyproxy/envoy:v1.31.0"} for i in range(sidecars)]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": containers}}}}


def render(tools: Tools, tmp: Path, user: list[Doc], name: str, port: int, namespace: str | None = None
           ) -> subprocess.CompletedProcess[str]:
    """The overlay over `user` (the file replacing my-vllm-deployment.yaml), with vllm-headroom.yaml set to
    `name` / `namespace` / `port` the way its comments say."""
    tree = tmp / "kubernetes"
    shutil.copytree(KUSTOMIZE, tree)
    overlay = tree / OVERLAY
    (overlay / "my-vllm-deployment.yaml").write_text(yaml.safe_dump_all(user))
    values = load_all((overlay / "vllm-headroom.yaml").read_text())
    target, settings = values
    target["metadata"]["name"] = name
    if namespace:
        target["metadata"]["namespace"] = namespace
    settings["vllmPort"] = port
    settings["instance"] = name  # the Deployment's name, as its comment says
    settings["namespace"] = namespace or "default"
    (overlay / "vllm-headroom.yaml").write_text(yaml.safe_dump_all(values))
    return subprocess.run([tools.bin("kubectl"), "kustomize", str(overlay)], capture_output=True, text=True,
                          timeout=60)


def scraped_ports(monitor: Doc, pod: Doc) -> dict[str, list[int]]:
    """Which container ports of `pod` each PodMonitor endpoint scrapes, as prometheus-operator selects them
    (`port` by the port's name, `portNumber` by its number; only ports the pod declares are discovered)."""
    declared = [(p.get("name"), p["containerPort"]) for c in pod["spec"]["containers"] + pod["spec"].get(
        "initContainers", []) for p in c.get("ports", [])]
    out: dict[str, list[int]] = {}
    for e in monitor["spec"]["podMetricsEndpoints"]:
        job = e["relabelings"][0]["replacement"]
        out[job] = [num for pname, num in declared
                    if ("port" in e and pname == e["port"]) or ("portNumber" in e and num == e["portNumber"])]
    return out


CASES = {
    # name, port of the vLLM container (None: not declared), namespace, extra containers
    "named-http": ("vllm", {"name": "http", "containerPort": 8000}, None, 0),
    "other-name-named-port": ("llama-3-8b", {"name": "api", "containerPort": 8080}, None, 0),
    "numbered-port": ("qwen", {"containerPort": 8000, "protocol": "TCP"}, None, 0),
    "namespaced-with-proxy": ("mistral", {"containerPort": 9000}, "inference", 1),
}


@pytest.mark.parametrize("case", CASES)
def test_existing_vllm_fits_the_users_deployment(case: str, tools: Tools, tmp_path: Path,
                                                 validate: Validate) -> None:
    name, port, namespace, extra = CASES[case]
    number = port["containerPort"]
    user = [deployment(name, port, namespace, extra),
            deployment("open-webui", {"name": "http", "containerPort": 8080}, namespace)]  # not vLLM: left alone
    proc = render(tools, tmp_path, user, name, number, namespace)
    assert proc.returncode == 0, proc.stderr
    docs = load_all(proc.stdout)
    assert not [d for d in docs if d["kind"] == "Settings"], "the local settings object must not reach the cluster"
    ours = find(docs, "Deployment", name)
    sidecar, where = sidecar_of(ours)
    assert where == "initContainers" and sidecar["restartPolicy"] == "Always"
    env = {e["name"]: e["value"] for e in sidecar["env"]}
    assert env["VLLM_HEADROOM_TARGET"] == f"http://127.0.0.1:{number}"
    pod = ours["spec"]["template"]
    assert pod["spec"]["shareProcessNamespace"] is True
    assert [c["name"] for c in pod["spec"]["containers"]] == [c["name"] for c in user[0]["spec"]["template"]["spec"][
        "containers"]], "the user's containers stay as they were"
    other = find(docs, "Deployment", "open-webui")["spec"]["template"]["spec"]
    assert "initContainers" not in other and "shareProcessNamespace" not in other
    monitor = find(docs, "PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert scraped_ports(monitor, pod) == {"vllm-headroom": [9478], "vllm": [number]}
    results = validate(docs)
    assert not [r for r in results if r["error"]], [r for r in results if r["error"]]


def test_existing_vllm_same_sidecar_as_the_component() -> None:
    ours = yaml.safe_load((KUSTOMIZE / OVERLAY / "sidecar-patch.yaml").read_text())
    component = yaml.safe_load((KUSTOMIZE / "components" / "sidecar" / "sidecar-patch.yaml").read_text())
    assert ours["spec"] == component["spec"]


@pytest.mark.parametrize(("names", "set_to", "namespace"), [
    (["llama"], "vllm", None),  # the overlay's default name, the user's Deployment is called otherwise
    (["llama"], "lama", None),  # a typo
    (["llama"], "llama", "inference"),  # the patch names a namespace the manifest does not have
])
def test_existing_vllm_refuses_when_no_deployment_matches(names: list[str], set_to: str, namespace: str | None,
                                                          tools: Tools, tmp_path: Path) -> None:
    user = [deployment(n, {"name": "http", "containerPort": 8000}) for n in names]
    proc = render(tools, tmp_path, user, set_to, 8000, namespace)
    assert proc.returncode != 0 and proc.stdout == "", "a name that matches nothing must not render a no-op"
    (line,) = proc.stderr.strip().splitlines()
    ns = namespace or "[noNs]"
    assert line.startswith(f'error: no resource matches strategic merge patch "Deployment.v1.apps/{set_to}.{ns}"'), \
        line


def test_existing_vllm_header_documents_the_refusal(tools: Tools, tmp_path: Path) -> None:
    """The overlay's header quotes the message kustomize gives, so a user can find what it means."""
    proc = render(tools, tmp_path, [deployment("llama", {"containerPort": 8000})], "vllm", 8000)
    header = (KUSTOMIZE / OVERLAY / "kustomization.yaml").read_text()
    quoted = 'no resource matches strategic merge patch "Deployment.v1.apps/<name>.[noNs]"'
    assert quoted in header
    assert quoted.replace("<name>", "vllm") in proc.stderr


def test_the_stand_in_is_a_user_deployment() -> None:
    """The stand-in keeps what the test cases vary out of the overlay's own files."""
    stand_in = yaml.safe_load((KUSTOMIZE / OVERLAY / "my-vllm-deployment.yaml").read_text())
    values = load_all((KUSTOMIZE / OVERLAY / "vllm-headroom.yaml").read_text())
    assert values[0]["metadata"]["name"] == stand_in["metadata"]["name"]
    ports = [p["containerPort"] for c in stand_in["spec"]["template"]["spec"]["containers"] for p in c["ports"]]
    assert values[1]["vllmPort"] in ports
    assert copy.deepcopy(values[0]["metadata"]["labels"]) == {"vllm-headroom/sidecar": "injected"}


def test_the_documented_path_puts_everything_in_one_namespace(tools: Tools, tmp_path: Path) -> None:
    """README step 1 / the overlay's header: a manifest without a namespace, `namespace` set once in
    vllm-headroom.yaml, `kubectl apply -k` without -n. Every object carries that one namespace (before, the
    Deployment had none and went wherever -n or the context pointed while its Service and PodMonitor went to the
    Settings' namespace), and the README's command names no other."""
    import re

    from .targets import unresolved

    tree = tmp_path / "kubernetes"
    shutil.copytree(KUSTOMIZE, tree)
    overlay = tree / OVERLAY
    (overlay / "my-vllm-deployment.yaml").write_text(yaml.safe_dump(deployment("llama", {"containerPort": 8000})))
    values = load_all((overlay / "vllm-headroom.yaml").read_text())
    values[0]["metadata"]["name"] = "llama"
    values[1].update(instance="llama", namespace="inference", vllmPort=8000)
    (overlay / "vllm-headroom.yaml").write_text(yaml.safe_dump_all(values))
    proc = subprocess.run([tools.bin("kubectl"), "kustomize", str(overlay)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    docs = load_all(proc.stdout)
    assert {(d["kind"], d["metadata"].get("namespace")) for d in docs} == {
        ("Deployment", "inference"), ("Service", "inference"), ("PodMonitor", "inference")}
    assert unresolved(docs, "elsewhere") == []  # resolves whatever namespace -n or the context names
    readme = (KUSTOMIZE.parents[1] / "README.md").read_text()
    line = re.search(r"kubectl apply -k deploy/kubernetes/overlays/existing-vllm([^\n#]*)", readme)
    assert line and "-n" not in line.group(1).split(), line
