"""The README is a page that fits (issue 20, item 5), and what moved out of it to docs/ can still be found: every
relative link of README.md, CHANGELOG.md, ARCHITECTURE.md and docs/ points at a file that exists and, for a
markdown anchor, at a heading that exists (GitHub's heading slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "ARCHITECTURE.md",
                *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
            broken.append(target)
    assert broken == []


def test_the_readme_fits_and_its_contents_name_its_sections() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    contents = text.split("## Contents\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"\]\(#([^)]+)\)", contents)
    sections = [slug(h) for h in re.findall(r"^## (.+)$", text, re.M) if h != "Contents"]
    assert listed == sections


def test_every_repository_path_the_readmes_commands_name_exists() -> None:
    """`kubectl apply -k deploy/...`, `helm install ... deploy/helm/...`, `tests/...`: the paths in the README's text
    and code blocks are files or folders of this repository."""
    text = (ROOT / "README.md").read_text()
    paths = set(re.findall(r"(?<![\w/.:-])((?:deploy|docs|tests|grafana|exporter|scripts|bench)/[\w./-]*\w)", text))
    assert len(paths) >= 10
    assert sorted(p for p in paths if not (ROOT / p).exists() and "*" not in p) == []


def test_the_readme_holds_no_notes_about_the_machine_it_was_written_on() -> None:
    """Build-environment notes belong in docs/ or nowhere; a first release has no "breaking change" notes."""
    text = (ROOT / "README.md").read_text().lower()
    assert [p for p in ("this machine", "not reachable here", "could not be reached", "breaking change",
                        "not installable here") if p in text] == []


def test_the_slugs_are_githubs() -> None:
    assert slug("Kubernetes in three steps") == "kubernetes-in-three-steps"
    assert slug("Your own Deployment: `deploy/kubernetes/overlays/existing-vllm`") == (
        "your-own-deployment-deploykubernetesoverlaysexisting-vllm")
    assert slug("Metrics and the JSON diagnosis") == "metrics-and-the-json-diagnosis"
