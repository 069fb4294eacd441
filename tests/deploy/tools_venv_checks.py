"""Checks run by the deploy tools' Python (deploy/install-tools), not the test interpreter.

kubernetes-validate, the prometheus-operator models (pydantic) and helm-python-sdk live in their own cached venv
so their pins never meet the package's; the tests call this script there and read JSON from its stdout.

    python tools_venv_checks.py validate FILE VERSION...   # per object and Kubernetes version: error or null
    python tools_venv_checks.py helm CHART VALUES_JSON [RELEASE NAMESPACE [KUBE_VERSION]]
                                        # lint messages, rendered manifests, schema or template (`fail`) errors
    python tools_venv_checks.py kserve FILE VERSION    # per InferenceService: KServe schema error or null
    python tools_venv_checks.py helm-post-render CHART RELEASE NAMESPACE POST_RENDERER [ARG...]
                                        # `helm install --dry-run=client --post-renderer ... --post-renderer-args ...`
                                        # with Helm 4's own post-renderer lookup (plugins in $HELM_PLUGINS)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

CRD_GROUP = "monitoring.coreos.com/"


def validate(path: str, versions: list[str]) -> list[dict[str, Any]]:
    import kubernetes_validate
    from cloudcoil.models.prometheus_operator import v1
    from kubernetes_validate.utils import SchemaNotFoundError
    from pydantic import ValidationError as PydanticError

    models = {"PodMonitor": v1.PodMonitor, "ServiceMonitor": v1.ServiceMonitor, "PrometheusRule": v1.PrometheusRule}
    results: list[dict[str, Any]] = []
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for doc in docs:
        kind, name = doc.get("kind"), doc.get("metadata", {}).get("name")
        if str(doc.get("apiVersion", "")).startswith(CRD_GROUP):
            error = None
            if kind not in models:
                error = f"no model for {kind}"
            else:
                try:
                    models[kind].model_validate(doc)
                except PydanticError as exc:
                    error = str(exc)
            results.append({"kind": kind, "name": name, "validator": "prometheus-operator v0.80.1", "error": error})
            continue
        for version in versions:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
                error = None
            except SchemaNotFoundError as exc:
                error = f"no schema: {exc}"
            except kubernetes_validate.ValidationError as exc:
                error = f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"
            results.append({"kind": kind, "name": name, "validator": f"kubernetes {version} strict", "error": error})
    return results


KSERVE = "kserve==0.21.0"  # deploy/requirements-tools-nodeps.txt pins the same
_PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object, "datetime": str}


def _kserve_models() -> dict[str, tuple[dict[str, tuple[str, str]], set[str]]]:
    """KServe's own OpenAPI models of its CRDs, as shipped in the kserve SDK wheel (KSERVE): per class, its JSON
    keys → (attribute, type) and the keys the model refuses to be None. Read from the source (ast), not imported:
    the SDK's package imports its whole model server (numpy, grpc, ...), which the models do not need."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("kserve")
    assert spec and spec.submodule_search_locations, f"{KSERVE} is not installed in the tools venv"
    models: dict[str, tuple[dict[str, tuple[str, str]], set[str]]] = {}
    for path in (Path(next(iter(spec.submodule_search_locations))) / "models").glob("*.py"):
        tree = ast.parse(path.read_text())
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            dicts = {t.id: ast.literal_eval(a.value) for a in cls.body if isinstance(a, ast.Assign)
                     for t in a.targets if isinstance(t, ast.Name) and t.id in ("openapi_types", "attribute_map")}
            if len(dicts) != 2:
                continue
            required = set()
            for attr in __import__("re").findall(r"Invalid value for `(\w+)`, must not be `None`",
                                                  ast.get_source_segment(path.read_text(), cls) or ""):
                required.add(dicts["attribute_map"][attr])
            models[cls.name] = ({dicts["attribute_map"][a]: (a, t) for a, t in dicts["openapi_types"].items()},
                                required)
    return models


def _k8s_schema_file(type_name: str, schema_dir: Path) -> Path | None:
    """The kubernetes-validate schema of a Kubernetes client type name (V1Container, V1ObjectMeta,
    K8sIoApiAppsV1DeploymentStrategy, ...)."""
    import re

    m = re.fullmatch(r"K8sIoApi([A-Z][a-z]+)(V\d\w*?)([A-Z]\w+)", type_name)
    if m:
        group, version, name = m.group(1).lower(), m.group(2).lower(), m.group(3).lower()
        candidates = [schema_dir / f"{name}-{group}-{version}.json"]
    else:
        m = re.fullmatch(r"(V\d+(?:alpha\d+|beta\d+)?)([A-Z]\w+)", type_name)
        if not m:
            return None
        version, name = m.group(1).lower(), m.group(2).lower()
        candidates = [schema_dir / f"{name}-{version}.json", *sorted(schema_dir.glob(f"{name}-*-{version}.json"))]
    return next((c for c in candidates if c.exists()), None)


def kserve(path: str, version: str) -> list[dict[str, Any]]:
    """Each InferenceService of `path` against KServe's models (unknown keys, wrong types, required keys), with
    every embedded Kubernetes type (containers, metadata, ...) against kubernetes-validate's strict schemas."""
    import re

    import jsonschema
    import kubernetes_validate
    from referencing import Registry, Resource

    models = _kserve_models()
    schema_dir = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{version}.0-local-strict"
    defs = Resource.from_contents(json.loads((schema_dir / "_definitions.json").read_text()))
    registry = defs @ Registry()

    def check(value: Any, type_name: str, where: str, errors: list[str]) -> None:
        if m := re.fullmatch(r"list\[(.+)\]", type_name):
            if not isinstance(value, list):
                errors.append(f"{where}: not a list")
                return
            for i, item in enumerate(value):
                check(item, m.group(1), f"{where}[{i}]", errors)
            return
        if m := re.fullmatch(r"dict\(str, (.+)\)", type_name):
            if not isinstance(value, dict):
                errors.append(f"{where}: not a map")
                return
            for k, item in value.items():
                check(item, m.group(1), f"{where}.{k}", errors)
            return
        if type_name in _PRIMITIVES:
            if not isinstance(value, _PRIMITIVES[type_name]) or (type_name == "int" and isinstance(value, bool)):
                errors.append(f"{where}: {value!r} is not {type_name}")
            return
        if type_name in models:
            fields, required = models[type_name]
            if not isinstance(value, dict):
                errors.append(f"{where}: not an object ({type_name})")
                return
            for key in sorted(required - set(value)):
                errors.append(f"{where}.{key}: required by {type_name}")
            for key, item in value.items():
                if key not in fields:
                    errors.append(f"{where}.{key}: unknown field of {type_name}")
                else:
                    check(item, fields[key][1], f"{where}.{key}", errors)
            return
        schema_file = _k8s_schema_file(type_name, schema_dir)
        if schema_file is None:
            errors.append(f"{where}: no schema for {type_name}")
            return
        schema = json.loads(schema_file.read_text())
        validator = jsonschema.validators.Draft202012Validator(schema, registry=Resource.from_contents(schema)
                                                               @ registry)
        errors.extend(f"{where}.{'.'.join(str(p) for p in e.absolute_path)}: {e.message}".replace(".:", ":")
                      for e in validator.iter_errors(value))

    results = []
    with open(path) as f:
        for doc in (d for d in yaml.safe_load_all(f) if d):
            errors: list[str] = []
            if doc.get("apiVersion") != "serving.kserve.io/v1beta1" or doc.get("kind") != "InferenceService":
                errors.append("not a serving.kserve.io/v1beta1 InferenceService")
            else:
                check(doc, "V1beta1InferenceService", "", errors)
            results.append({"kind": doc.get("kind"), "name": doc.get("metadata", {}).get("name"),
                            "validator": f"{KSERVE} models + kubernetes {version} strict",
                            "error": "; ".join(e.lstrip(".") for e in errors) or None})
    return results


def helm(chart: str, values: dict[str, Any], release: str, namespace: str, kube_version: str | None = None
         ) -> dict[str, Any]:
    import helm_python

    out: dict[str, Any] = {"lint": helm_python.lint(chart, values, strict=True), "schema_error": None,
                           "render_error": None}
    with helm_python.Chart.load(chart) as ch:
        try:
            ch.validate_schema(values)
        except helm_python.HelmError as exc:
            out["schema_error"] = str(exc)
            return out
        try:
            if kube_version:  # `helm install` against a cluster of that version (Capabilities.KubeVersion)
                from helm_python import _native

                opts = {"name": release, "namespace": namespace, "is_install": True, "kube_version": kube_version}
                out["manifests"] = json.loads(_native.call_string("helm_render", ch._raw(), json.dumps(values),
                                                                  json.dumps(opts)))
            else:
                out["manifests"] = ch.render(values, name=release, namespace=namespace, is_install=True)
        except helm_python.HelmRenderError as exc:  # a template's `fail`: what `helm install` prints after "Error: "
            out["render_error"] = str(exc)
    return out


def helm_post_render(chart: str, release: str, namespace: str, post_renderer: str, args: list[str]
                     ) -> dict[str, Any]:
    """The manifest `helm install` would send, post-rendered by Helm 4 itself: --post-renderer names a plugin of
    type postrenderer/v1 that Helm finds in $HELM_PLUGINS (helm-python-sdk's install has no such keyword, so this
    calls the same C entry point with Helm's options)."""
    import helm_python
    from helm_python import _native

    with helm_python.Config(namespace=namespace) as cfg:
        handle, ref = cfg._chart_args(chart)
        opts = {"namespace": namespace, "dry_run": "client", "post_renderer": post_renderer,
                "post_renderer_args": args}
        try:
            out = _native.call_string("helm_install", cfg._raw(), cfg._context_arg(None), handle, ref, release, None,
                                      json.dumps(opts))
        except helm_python.HelmError as exc:
            return {"manifest": None, "error": str(exc), "helm": _native.helm_sdk_version()}
    return {"manifest": json.loads(out)["manifest"], "error": None, "helm": _native.helm_sdk_version()}


def main() -> None:
    if sys.argv[1] == "validate":
        print(json.dumps(validate(sys.argv[2], sys.argv[3:])))
    elif sys.argv[1] == "kserve":
        print(json.dumps(kserve(sys.argv[2], sys.argv[3])))
    elif sys.argv[1] == "helm-post-render":
        print(json.dumps(helm_post_render(*sys.argv[2:6], sys.argv[6:])))
    elif sys.argv[1] == "helm":
        release, namespace = sys.argv[4:6] if len(sys.argv) > 4 else ("vllm-headroom", "inference")
        kube_version = sys.argv[6] if len(sys.argv) > 6 else None
        print(json.dumps(helm(sys.argv[2], json.loads(sys.argv[3]), release, namespace, kube_version)))
    else:
        sys.exit(f"unknown check {sys.argv[1]!r}")


if __name__ == "__main__":
    main()
