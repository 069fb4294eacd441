"""Checks run by the deploy tools' Python (deploy/install-tools), not the test interpreter.

kubernetes-validate, the prometheus-operator models (pydantic) and helm-python-sdk live in their own cached venv
so their pins never meet the package's; the tests call this script there and read JSON from its stdout.

    python tools_venv_checks.py validate FILE VERSION...   # per object and Kubernetes version: error or null
    python tools_venv_checks.py helm CHART VALUES_JSON [RELEASE NAMESPACE]
                                        # lint messages, rendered manifests, schema or template (`fail`) errors
"""

from __future__ import annotations

import json
import sys
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


def helm(chart: str, values: dict[str, Any], release: str, namespace: str) -> dict[str, Any]:
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
            out["manifests"] = ch.render(values, name=release, namespace=namespace, is_install=True)
        except helm_python.HelmRenderError as exc:  # a template's `fail`: what `helm install` prints after "Error: "
            out["render_error"] = str(exc)
    return out


def main() -> None:
    if sys.argv[1] == "validate":
        print(json.dumps(validate(sys.argv[2], sys.argv[3:])))
    elif sys.argv[1] == "helm":
        release, namespace = sys.argv[4:6] if len(sys.argv) > 4 else ("vllm-headroom", "inference")
        print(json.dumps(helm(sys.argv[2], json.loads(sys.argv[3]), release, namespace)))
    else:
        sys.exit(f"unknown check {sys.argv[1]!r}")


if __name__ == "__main__":
    main()
