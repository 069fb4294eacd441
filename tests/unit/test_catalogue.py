"""The verdict catalogue is complete, and every place that speaks of verdicts reads it (issue 20, item 1)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from exporter.expose import diagnosis, page
from exporter.pipeline import catalogue, verdict
from exporter.pipeline.catalogue import CATALOGUE, COLOURS, SEVERITIES, Entry, Verdict
from grafana import dashboards

ROOT = Path(__file__).resolve().parents[2]
SEVERITY_ORDER = {s: i for i, s in enumerate(SEVERITIES)}


def problems(cat: dict[Verdict, Entry]) -> list[str]:
    """Every verdict without an entry, and every entry with a field missing or unknown to its reader."""
    out = [f"{v}: no entry" for v in Verdict if v not in cat]
    for v, e in cat.items():
        if not e.meaning.strip():
            out.append(f"{v}: no meaning")
        if e.severity not in SEVERITIES:
            out.append(f"{v}: severity {e.severity!r}")
        if e.colour not in COLOURS:
            out.append(f"{v}: colour {e.colour!r}")
        if (e.alert is None) != (e.severity == "none") or (e.alert is None and not e.no_alert):
            out.append(f"{v}: an alert and a severity, or neither with the reason why")
        if e.explanation not in diagnosis.EXPLANATIONS and e.explanation not in diagnosis.TARGET_EXPLANATIONS:
            out.append(f"{v}: no explanation {e.explanation!r}")
        if e.actions not in diagnosis.ACTIONS:
            out.append(f"{v}: no actions {e.actions!r}")
    return out


def test_every_verdict_has_a_complete_entry() -> None:
    assert problems(CATALOGUE) == []


def test_the_check_fails_for_a_verdict_without_an_entry_or_a_field() -> None:
    missing = {v: e for v, e in CATALOGUE.items() if v is not Verdict.NEVER_FITS}
    assert problems(missing) == ["never_fits: no entry"]
    broken = dict(CATALOGUE)
    broken[Verdict.LEAK] = Entry("", "loud", "grey", False, False, None, "nope", "nope")
    assert len(problems(broken)) == 6


def test_no_reader_keeps_a_text_no_verdict_uses() -> None:
    used = {e.explanation for e in CATALOGUE.values()}
    assert set(diagnosis.EXPLANATIONS) | set(diagnosis.TARGET_EXPLANATIONS) == used
    assert set(diagnosis.ACTIONS) == {e.actions for e in CATALOGUE.values()}


def test_the_families_of_the_judgement_are_the_catalogue_s() -> None:
    assert {v for v, e in CATALOGUE.items() if e.false_full} == verdict.FALSE_FULL_VERDICTS
    assert not (verdict.FALSE_FULL_VERDICTS & {Verdict.KV_FULL, Verdict.PREEMPTING, Verdict.TRANSIENT})


def test_the_status_page_and_the_dashboards_draw_each_verdict_in_its_catalogue_colour() -> None:
    """The status page once drew never_fits, budget_full and transient in target_down's grey (no entry, a grey
    default) and four more verdicts in other colours than the dashboards: both read the catalogue now."""
    for v, e in CATALOGUE.items():
        assert page.VERDICT_COLOURS[str(v)] == page.SHADES[e.colour], v
    assert {str(v): e.colour for v, e in CATALOGUE.items()} == dashboards.VERDICT_COLORS
    assert list(dashboards.VERDICT_COLORS) == [str(v) for v in Verdict]  # the dashboards' order, unchanged
    assert page.VERDICT_COLOURS["never_fits"] != page.VERDICT_COLOURS["undetermined"]


def test_the_verdict_reference_is_the_generated_table() -> None:
    """docs/reference/verdicts.md holds `catalogue.markdown_table()` verbatim (`python -m exporter.cli.docs` writes
    it; tests/unit/test_docs_reference.py checks the whole page)."""
    text = (ROOT / "docs" / "reference" / "verdicts.md").read_text()
    m = re.search(r"<!-- verdicts: generated[^\n]*-->\n(.*?)<!-- end of verdicts -->", text, re.S)
    assert m is not None
    assert m.group(1) == catalogue.markdown_table()
    # The rule the code has (a prompt filling the whole budget), not the README's old "half of the budget".
    assert "half" not in CATALOGUE[Verdict.BUDGET_FULL].meaning


def _alert_severities() -> dict[str, str]:
    """The highest severity of each alert in the generated rule files."""
    out: dict[str, str] = {}
    for path in sorted((ROOT / "deploy" / "prometheus").glob("*.yaml")):
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups", []):
            for rule in group.get("rules", []):
                if "alert" in rule:
                    sev = rule.get("labels", {}).get("severity", "none")
                    name = rule["alert"]
                    if SEVERITY_ORDER.get(sev, 0) >= SEVERITY_ORDER.get(out.get(name, "none"), 0):
                        out[name] = sev
    return out


def test_each_alert_of_the_catalogue_exists_at_its_severity_with_a_runbook_section() -> None:
    severities = _alert_severities()
    assert severities, "no alert rules found under deploy/prometheus"
    headings = {re.sub(r"[^a-z0-9_-]", "", h.lower())
                for h in re.findall(r"^## (.+)$", (ROOT / "docs" / "runbook.md").read_text(), re.M)}
    for v, e in CATALOGUE.items():
        if e.alert is None:
            continue
        assert severities.get(e.alert) == e.severity, (v, e.alert, severities.get(e.alert))
        assert e.runbook_anchor in headings, (v, e.runbook_anchor)
