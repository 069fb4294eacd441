"""docs/reference/*.md are generated (issue 20, item 5): the CLI flags from the argument parser, the /metrics families
from the collector's descriptors, the verdicts from the catalogue. A page that differs from what the code generates
fails here with the command that rewrites it, as kube-state-metrics checks its generated docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.cli import build_parser, docs
from exporter.expose.collector import HeadroomCollector
from exporter.pipeline.catalogue import CATALOGUE

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", sorted(docs.pages()), ids=str)
def test_the_committed_page_is_the_generated_one(page: Path) -> None:
    committed = ROOT / page
    assert committed.exists(), f"{page} is missing: run `{docs.REGENERATE}` (make docs) and commit it"
    assert committed.read_text() == docs.pages()[page], (
        f"{page} differs from what the code generates: run `{docs.REGENERATE}` (make docs) and commit it")


def test_no_page_in_docs_reference_is_left_over_from_an_old_generator() -> None:
    on_disk = {p.relative_to(ROOT) for p in (ROOT / docs.REFERENCE).glob("*.md")}
    assert on_disk == set(docs.pages())


def test_the_check_fails_on_a_stale_page_and_names_the_command(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert docs.main(["--root", str(tmp_path)]) == 2  # not a checkout: nothing written
    assert "no vllm-headroom checkout" in capsys.readouterr().err and not (tmp_path / "docs").exists()
    (tmp_path / "pyproject.toml").write_text("")
    assert docs.main(["--root", str(tmp_path)]) == 0
    capsys.readouterr()
    assert docs.main(["--check", "--root", str(tmp_path)]) == 0
    cli_page = tmp_path / docs.REFERENCE / "cli.md"
    cli_page.write_text(cli_page.read_text().replace("`5s`", "`10s`", 1))
    assert docs.main(["--check", "--root", str(tmp_path)]) == 1
    said = capsys.readouterr().err
    assert "docs/reference/cli.md is stale" in said and docs.REGENERATE in said


def test_the_defaults_shown_are_the_codes_not_the_shells(monkeypatch: pytest.MonkeyPatch) -> None:
    """A VLLM_HEADROOM_* variable in the generator's shell moves a flag's default; the page must not follow it."""
    before = docs.cli_page()
    monkeypatch.setenv("VLLM_HEADROOM_SCRAPE_INTERVAL", "17s")
    assert docs.cli_page() == before
    assert "VLLM_HEADROOM_SCRAPE_INTERVAL" in __import__("os").environ  # and the shell keeps its variable


def test_every_flag_of_every_subcommand_is_on_the_cli_page() -> None:
    page = docs.cli_page()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sub.choices
    for name, p in sub.choices.items():  # type: ignore[union-attr]
        section = page.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        for action in p._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    shown = flag.replace("--no-", "--", 1)
                    assert f"`{shown}`" in section or f"`{shown.replace('--', '--[no-]', 1)}`" in section, (name, flag)


def test_every_family_the_collector_exports_on_a_recording_is_described() -> None:
    """The golden /metrics of every recorded scenario: each family in them is one of describe()'s, with its type."""
    described = {f.name + docs._SUFFIXES.get(f.type, ""): f.type for f in HeadroomCollector([]).describe()}
    goldens = sorted((ROOT / "tests" / "fixtures").glob("*/*/golden-metrics.prom"))
    assert goldens
    seen: dict[str, str] = {}
    for path in goldens:
        for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", path.read_text(), re.M):
            seen[name.removesuffix("_total") + ("_total" if kind == "counter" else "")] = kind
    assert {n: k for n, k in seen.items() if described.get(n) != k} == {}
    # and the page lists each of them
    page = docs.metrics_page()
    assert [n for n in described if f"| `{n}` |" not in page] == []


def test_every_verdict_is_on_the_verdict_page() -> None:
    page = docs.verdicts_page()
    assert [str(v) for v in CATALOGUE if f"| `{v}` |" not in page] == []
