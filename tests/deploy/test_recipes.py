"""Recipes for the stacks people already run vLLM with (deploy/recipes); autoscaling: test_autoscaling.py.

Each recipe is rendered offline with kubectl's kustomize over a stand-in of that stack's rendered output (the real
charts cannot be downloaded here), then validated like our own manifests: core kinds with kubernetes-validate
--strict, PodMonitors with the prometheus-operator models.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import DEPLOY, Doc, Tools, find, load_all

RECIPES = DEPLOY / "recipes"
SIDECAR = DEPLOY / "kubernetes" / "components" / "sidecar" / "sidecar-patch.yaml"


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
                          ("llm-d", "pd-llm-d-modelservice-decode", 8200, "vllm"),  # behind the routing proxy
                          ("llm-d", "pd-llm-d-modelservice-prefill", 8000, "vllm")])
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
    spec = find(render(tools, RECIPES / "examples" / "llm-d"), "Deployment", "pd-llm-d-modelservice-decode")[
        "spec"]["template"]["spec"]
    assert sorted(c["name"] for c in spec["initContainers"]) == ["routing-proxy", "vllm-headroom"]
    proxy = named(spec["initContainers"], "routing-proxy")
    assert proxy["args"][:2] == ["--port=8000", "--vllm-port=8200"] and proxy["restartPolicy"] == "Always"


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


def kserve_check(tools: Tools, docs: list[Doc], tmp: Path, version: str = "1.33") -> list[dict[str, Any]]:
    """InferenceServices against KServe's own CRD models (the pinned kserve SDK), embedded Kubernetes types against
    kubernetes-validate's strict schemas."""
    path = tmp / "isvc.yaml"
    path.write_text(yaml.safe_dump_all([d for d in docs if d["kind"] == "InferenceService"]))
    proc = subprocess.run([tools.bin("python"), str(Path(__file__).with_name("tools_venv_checks.py")), "kserve",
                           str(path), version], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    results: list[dict[str, Any]] = json.loads(proc.stdout)
    return results


@pytest.mark.parametrize(("name", "form"), [("qwen", "model"), ("llama3", "containers")])
def test_kserve_inference_service_gets_the_native_sidecar(name: str, form: str, tools: Tools, tmp_path: Path,
                                                          validate: Callable[..., list[dict[str, Any]]]) -> None:
    """Both forms people write: the standard `spec.predictor.model` (huggingface runtime) and a custom
    kserve-container. KServe keeps the predictor's init containers in both, but drops extra `containers` in the
    `model` form, so the sidecar is a native sidecar there."""
    docs = render(tools, RECIPES / "examples" / "kserve")
    isvc = find(docs, "InferenceService", name)
    predictor = isvc["spec"]["predictor"]
    assert form in predictor
    assert predictor["initContainers"] == [canonical("http://127.0.0.1:8080")]  # vLLM on KServe's port
    if form == "containers":
        assert [c["name"] for c in predictor["containers"]] == ["kserve-container"]  # KServe's [0], untouched
    assert predictor["shareProcessNamespace"] is True
    assert predictor["labels"] == {"vllm-headroom/sidecar": "injected"}  # reaches the pods; the PodMonitor's
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "RawDeployment"
    monitor = find(docs, "PodMonitor")
    sidecar_only(monitor)
    assert monitor["spec"]["selector"]["matchLabels"].items() <= predictor["labels"].items()
    assert "Pod" not in {d["kind"] for d in docs}, "the recipe's local sidecar object must not be emitted"
    no_errors(kserve_check(tools, [isvc], tmp_path))
    # The pod KServe builds from it: the predictor's pod fields, vLLM as kserve-container beside the sidecar.
    spec = {k: v for k, v in predictor.items() if k not in ("minReplicas", "model", "labels")}
    runtime = [{"name": "kserve-container", "image": "kserve/huggingfaceserver"}]
    spec["containers"] = predictor.get("containers") or runtime
    no_errors(validate([pod_of(spec, f"kserve-{name}"), monitor]))


def test_kserve_schema_check_is_not_vacuous(tools: Tools, tmp_path: Path) -> None:
    isvc = find(render(tools, RECIPES / "examples" / "kserve"), "InferenceService", "qwen")
    bad = copy.deepcopy(isvc)
    bad["spec"]["predictor"]["initContainer"] = bad["spec"]["predictor"].pop("initContainers")  # a typo
    del bad["spec"]["predictor"]["model"]["modelFormat"]
    bad["spec"]["predictor"]["minReplicas"] = "1"
    (result,) = kserve_check(tools, [bad], tmp_path)
    assert "spec.predictor.initContainer: unknown field of V1beta1PredictorSpec" in result["error"]
    assert "spec.predictor.model.modelFormat: required by V1beta1ModelSpec" in result["error"]
    assert "spec.predictor.minReplicas: '1' is not int" in result["error"]
    worse = copy.deepcopy(isvc)
    del worse["spec"]["predictor"]["initContainers"][0]["name"]
    (result,) = kserve_check(tools, [worse], tmp_path)
    assert "spec.predictor.initContainers[0]: 'name' is a required property" in result["error"]


def test_kserve_recipe_skips_services_not_labelled(tools: Tools, tmp_path: Path) -> None:
    for source in ("inferenceservice.yaml", "inferenceservice-huggingface.yaml"):
        isvc = yaml.safe_load((RECIPES / "examples" / "kserve" / source).read_text())
        del isvc["metadata"]["labels"]
        (tmp_path / "isvc.yaml").write_text(yaml.safe_dump(isvc))
        (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["isvc.yaml"],
            "components": [os.path.relpath(RECIPES / "kserve", tmp_path)]}))
        predictor = find(render(tools, tmp_path), "InferenceService")["spec"]["predictor"]
        assert predictor == isvc["spec"]["predictor"], source


def recipe_only(tools: Tools, tmp: Path, stack: str) -> list[Doc]:
    """What the post-renderer builds: the stand-in chart output with the recipe, without the example's additions
    (its namespace and KEDA scaler)."""
    (tmp / "chart-output.yaml").write_text((RECIPES / "examples" / stack / "chart-output.yaml").read_text())
    (tmp / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["chart-output.yaml"],
        "components": [os.path.relpath(RECIPES / stack, tmp)]}))
    return render(tools, tmp)


def post_render(tools: Tools, *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    """The script as Helm 3 runs it (--post-renderer <path> --post-renderer-args ...): manifests on stdin."""
    env = {**os.environ, "PATH": f"{Path(tools.bin('kubectl')).parent}:{os.environ['PATH']}"}
    return subprocess.run([str(RECIPES / "post-render"), *args], input=stdin, capture_output=True, text=True,
                          timeout=60, env=env)


def test_post_renderer_gives_what_the_recipe_renders(tools: Tools, tmp_path: Path) -> None:
    chart_output = (RECIPES / "examples" / "production-stack" / "chart-output.yaml").read_text()
    proc = post_render(tools, "production-stack", stdin=chart_output)
    assert proc.returncode == 0, proc.stderr
    assert load_all(proc.stdout) == recipe_only(tools, tmp_path, "production-stack")
    bad = post_render(tools, "no-such-stack", stdin="")
    assert bad.returncode == 2 and "no recipe no-such-stack" in bad.stderr
    for setting, said in (("vllm-port=http", "is not a port number"), ("vllm-port=70000", "is not in 1-65535"),
                          ("port=8080", "unknown setting port=8080")):
        bad = post_render(tools, "production-stack", setting, stdin=chart_output)
        assert bad.returncode == 2 and said in bad.stderr and bad.stdout == "", setting


def test_post_renderer_follows_the_charts_container_port(tools: Tools) -> None:
    """servingEngineSpec.containerPort other than 8000: `--post-renderer-args vllm-port=N` points the sidecar at it."""
    chart_output = (RECIPES / "examples" / "production-stack" / "chart-output.yaml").read_text().replace(
        '"8000"', '"8080"').replace("containerPort: 8000", "containerPort: 8080")
    proc = post_render(tools, "production-stack", "vllm-port=8080", stdin=chart_output)
    assert proc.returncode == 0, proc.stderr
    spec = find(load_all(proc.stdout), "Deployment", "vllm-llama3-deployment-vllm")["spec"]["template"]["spec"]
    assert named(spec["initContainers"], "vllm-headroom") == canonical("http://127.0.0.1:8080")
    assert "Settings" not in {d["kind"] for d in load_all(proc.stdout)}


def test_llm_d_post_renderer_patches_the_real_chart_output_or_refuses(tools: Tools) -> None:
    """The llm-d-modelservice chart's own rendering (v0.4.12: role labels on the pod template only, the key
    llm-d.ai/inference-serving) gets the sidecar in both roles and every target resolves; an output with no
    decode or prefill Deployment is refused in one sentence instead of passing through unchanged."""
    from .targets import unresolved

    chart_output = (RECIPES / "examples" / "llm-d" / "chart-output.yaml").read_text()
    assert "llm-d-modelservice-v0.4.12" in chart_output and "inferenceServing" not in chart_output
    proc = post_render(tools, "llm-d", stdin=chart_output)
    assert proc.returncode == 0, proc.stderr
    docs = load_all(proc.stdout)
    for role in ("decode", "prefill"):
        spec = find(docs, "Deployment", f"pd-llm-d-modelservice-{role}")["spec"]["template"]["spec"]
        assert "vllm-headroom" in [c["name"] for c in spec["initContainers"]], role
    assert unresolved(docs, "inference") == []
    renamed = chart_output.replace("-decode\n", "-dec\n").replace("-prefill\n", "-pre\n")
    bad = post_render(tools, "llm-d", stdin=renamed)
    assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "added the sidecar to no Deployment" in bad.stderr


LLM_D_CHART = Path("/work/.mirror/llm-d-incubation+llm-d-modelservice/repo")  # a local mirror, where there is one


def test_llm_d_values_file_labels_the_pods_the_monitors_select(tools: Tools, tmp_path: Path) -> None:
    """The values path: the chart labels pods with modelArtifacts.labels + llm-d.ai/role only
    (templates/_helpers.tpl pdlabels/decodelabels @v0.4.12), so the values file must put the label the PodMonitor,
    Service and KEDA example select there. Rendered with the real chart where a mirror of it exists."""
    from .targets import unresolved

    values = yaml.safe_load((RECIPES / "llm-d" / "values-vllm-headroom.yaml").read_text())
    podmonitor = yaml.safe_load((RECIPES / "llm-d" / "podmonitor.yaml").read_text())
    service = yaml.safe_load((RECIPES / "llm-d" / "service.yaml").read_text())
    for role in ("decode", "prefill"):
        labels = {**values["modelArtifacts"]["labels"], "llm-d.ai/inference-serving": "true", "llm-d.ai/role": role}
        pod = {"kind": "Deployment", "metadata": {"name": role}, "spec": {"template": {
            "metadata": {"labels": labels}, "spec": {"initContainers": values[role]["initContainers"]}}}}
        assert unresolved([pod, podmonitor], "inference") == [], role
        if role == "decode":
            assert unresolved([pod, service], "inference") == []
    if not (LLM_D_CHART / "HEAD").exists() and not (LLM_D_CHART / ".git").exists():
        pytest.skip("no local mirror of llm-d-modelservice to render the real chart")
    archive = subprocess.run(["git", "-C", str(LLM_D_CHART), "archive", "HEAD", "charts/llm-d-modelservice",
                              "examples/values-pd.yaml"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive, check=True)
    user = yaml.safe_load((tmp_path / "examples" / "values-pd.yaml").read_text())

    def merged(a: Any, b: Any) -> Any:  # Helm's -f a -f b: maps merge, lists and scalars are replaced
        if isinstance(a, dict) and isinstance(b, dict):
            return {**a, **{k: merged(a.get(k), v) for k, v in b.items()}}
        return b

    out = tools.run_json("helm", str(tmp_path / "charts" / "llm-d-modelservice"), json.dumps(merged(user, values)),
                         "pd", "inference")
    assert out["schema_error"] is None and out["render_error"] is None, out
    docs = [d for text in out["manifests"].values() for d in load_all(text)] + [podmonitor, service]
    assert len([d for d in docs if d["kind"] == "Deployment"]) == 2
    assert unresolved(docs, "inference") == []


def documented_post_renderer(section: str) -> tuple[str, list[str]]:
    """The --post-renderer and its --post-renderer-args that docs/platforms.md's sh block for `section` tells Helm 4
    users."""
    text = (DEPLOY.parent / "docs" / "platforms.md").read_text().split(section, 1)[1]
    block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert block, f"no sh block after {section}"
    line = " ".join(ln.split("#", 1)[0].rstrip(" \\") for ln in block.group(1).splitlines())
    m = re.search(r"--post-renderer (\S+)((?: --post-renderer-args \S+)+)", line)
    assert m, line
    return m.group(1), re.findall(r"--post-renderer-args (\S+)", m.group(2))


def stand_in_chart(tmp: Path) -> Path:
    """A chart whose one template is the vllm-stack chart's own rendering (its chart-output.yaml example)."""
    chart = tmp / "vllm-stack"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: vllm-stack\nversion: 0.1.12\n")
    shutil.copy(RECIPES / "examples" / "production-stack" / "chart-output.yaml", chart / "templates" / "engine.yaml")
    return chart


def helm4_install(tools: Tools, tmp: Path, post_renderer: str, args: list[str]) -> dict[str, Any]:
    """`helm plugin install deploy/recipes` (a local folder: Helm links it into $HELM_PLUGINS), then
    `helm install --dry-run=client --post-renderer ... --post-renderer-args ...` with Helm 4's SDK."""
    plugins = tmp / "plugins"
    plugins.mkdir()
    (plugins / "vllm-headroom").symlink_to(RECIPES)
    env = {**os.environ, "HELM_PLUGINS": str(plugins),
           "PATH": f"{Path(tools.bin('kubectl')).parent}:{os.environ['PATH']}"}
    proc = subprocess.run([tools.bin("python"), str(Path(__file__).with_name("tools_venv_checks.py")),
                           "helm-post-render", str(stand_in_chart(tmp)), "vllm", "inference", post_renderer, *args],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    assert out["helm"].startswith("v4."), out["helm"]
    return out


def test_helm4_runs_the_documented_post_renderer(tools: Tools, tmp_path: Path) -> None:
    """Helm 4 takes a plugin name for --post-renderer (a script path is refused: "plugin ... not found"); the
    documented command (docs/platforms.md), run by Helm 4.2's own post-renderer code, gives what the recipe renders."""
    post_renderer, args = documented_post_renderer("## Where people already run vLLM")
    out = helm4_install(tools, tmp_path, post_renderer, args)
    assert out["error"] is None, out["error"]
    docs = load_all(out["manifest"])
    (tmp_path / "recipe").mkdir()

    def key(d: Doc) -> tuple[str, str]:  # Helm sends objects in its install order (by kind), kustomize in its own
        return d["kind"], d["metadata"]["name"]

    assert sorted(docs, key=key) == sorted(recipe_only(tools, tmp_path / "recipe", "production-stack"), key=key)
    plugin = yaml.safe_load((RECIPES / "plugin.yaml").read_text())
    assert plugin["name"] == post_renderer and plugin["type"] == "postrenderer/v1"


def test_helm4_refuses_a_script_path(tools: Tools, tmp_path: Path) -> None:
    out = helm4_install(tools, tmp_path, str(RECIPES / "post-render"), ["production-stack"])
    assert out["manifest"] is None and "not found" in out["error"], out


def test_llm_d_scheduler_config_reads_metrics_the_sidecar_exports() -> None:
    """The EPP example maps llm-d's queue/running/KV-usage inputs to sidecar series that exist in our /metrics
    (the golden copies of every recorded scenario), with the meaning the comment gives."""
    config = yaml.safe_load((RECIPES / "llm-d" / "epp-config-vllm-headroom.yaml").read_text())
    assert config["kind"] == "EndpointPickerConfig" and config["apiVersion"] == "llm-d.ai/v1alpha1"
    extractor = next(p for p in config["plugins"] if p["type"] == "core-metrics-extractor")
    (engine,) = extractor["parameters"]["engineConfigs"]
    assert engine["name"] == "vllm-headroom"
    golden = "".join(p.read_text() for p in (DEPLOY.parent / "tests" / "fixtures").glob("vllm-*/*/golden-metrics.prom"))
    exported = set(re.findall(r"^# TYPE (\S+) gauge$", golden, re.M))
    specs = [engine[k] for k in ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec")]
    assert set(specs) <= exported, set(specs) - exported
    assert "DEPRECATED" not in re.search(rf"^# HELP {engine['kvUsageSpec']} (.*)$", golden, re.M)[1]
    refs = {r["pluginRef"] for prof in config["schedulingProfiles"] for r in prof["plugins"]}
    assert refs <= {p["type"] for p in config["plugins"]}


def test_kserve_examples_leave_scaling_to_the_scaled_object() -> None:
    """KServe RawDeployment makes its own HPA for a predictor unless serving.kserve.io/autoscalerClass is external
    (kserve @aaac4e29 pkg/constants AutoscalerClassExternal, autoscaler_reconciler.go): every example says so, and
    the docs that send KServe users to a ScaledObject say it too."""
    isvcs = [d for f in sorted((RECIPES / "examples" / "kserve").glob("inferenceservice*.yaml"))
             for d in load_all(f.read_text()) if d["kind"] == "InferenceService"]
    assert len(isvcs) == 2
    for isvc in isvcs:
        assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "external", isvc["metadata"]
    for doc in ("autoscaling.md", "platforms.md"):
        assert "serving.kserve.io/autoscalerClass: external" in (DEPLOY.parent / "docs" / doc).read_text(), doc
