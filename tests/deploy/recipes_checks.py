"""Checks of deploy/autoscaling run by the deploy tools' Python (deploy/install-tools), not the test interpreter.

    python recipes_checks.py keda FILE    # per object: the KEDA CRD model's validation error or null, as JSON
"""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml


def unknown_fields(given: Any, kept: Any, path: str = "") -> list[str]:
    """Paths in `given` that the model dropped: the CRD models ignore unknown fields, the API server does not."""
    if isinstance(given, dict) and isinstance(kept, dict):
        out = []
        for key, value in given.items():
            if key not in kept:
                out.append(f"{path}.{key}".lstrip("."))
            else:
                out += unknown_fields(value, kept[key], f"{path}.{key}")
        return out
    if isinstance(given, list) and isinstance(kept, list):
        pairs = enumerate(zip(given, kept, strict=False))
        return [p for i, (g, k) in pairs for p in unknown_fields(g, k, f"{path}[{i}]")]
    return []


def keda(path: str) -> list[dict[str, Any]]:
    from cloudcoil.models.keda import v1alpha1
    from pydantic import ValidationError

    models = {"ScaledObject": v1alpha1.ScaledObject, "TriggerAuthentication": v1alpha1.TriggerAuthentication}
    results: list[dict[str, Any]] = []
    with open(path) as f:
        for doc in (d for d in yaml.safe_load_all(f) if d):
            kind = doc.get("kind")
            error = None
            try:
                kept = models[kind].model_validate(doc).model_dump(by_alias=True, exclude_unset=True, mode="json")
                extra = unknown_fields(doc, kept)
                if extra:
                    error = f"unknown field(s): {', '.join(extra)}"
            except KeyError:
                error = f"no KEDA model for {kind}"
            except ValidationError as exc:
                error = str(exc)
            results.append({"kind": kind, "name": doc.get("metadata", {}).get("name"), "error": error})
    return results


if __name__ == "__main__":
    if sys.argv[1] != "keda":
        sys.exit(f"unknown check {sys.argv[1]!r}")
    print(json.dumps(keda(sys.argv[2])))
