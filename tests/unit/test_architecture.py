"""The layout shows the flow: wings import only downwards, no import circles, the CLI holds no KV arithmetic, and
vLLM's vocabulary lives in its wing only."""

from __future__ import annotations

import ast
import graphlib
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "exporter"
# Lowest first: a module may import its own wing and any wing before it, never one after it. `engines` holds
# what each serving engine is (names, readers, release rules, flags, start-up log, derived max_model_len).
WINGS = ["core", "engines", "model", "pipeline", "planning", "expose", "replay", "cli"]
VLLM_WING = PACKAGE / "engines" / "vllm"
# A vLLM metric name (`vllm:` and a letter); `http://vllm:8000` is a host name, not a metric.
VLLM_NAME = re.compile(r"vllm:[a-z_]")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Package modules imported by `path`, resolved to absolute dotted names."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "exporter":
                continue
            for alias in node.names:
                full = f"{mod}.{alias.name}"
                found.add(full if (PACKAGE.parent / (full.replace(".", "/") + ".py")).exists()
                          or (PACKAGE.parent / full.replace(".", "/")).is_dir() else mod)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "exporter"}
        elif isinstance(node, ast.Call) and (dynamic := _dynamic_import(node, package)):
            found.add(dynamic)
    return found - {here}


def _dynamic_import(node: ast.Call, package: str) -> str | None:
    """`importlib.import_module("exporter.x")`, `import_module(".x", __package__)` or `__import__("exporter.x")`
    with a literal name: the module imported, absolute; None for any other call."""
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if not isinstance(arg, ast.Constant) or not isinstance(arg.value, str):
        return None
    target = arg.value
    if target.startswith("."):
        level = len(target) - len(target.lstrip("."))
        base = package.split(".")
        base = base[: len(base) - level + 1]
        target = ".".join([*base, target.lstrip(".")] if target.lstrip(".") else base)
    return target if target.split(".")[0] == "exporter" else None


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for p in PACKAGE.rglob("*.py")}


def wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in WINGS else None


def test_no_import_circles() -> None:
    g = {m: {d for d in deps if d != "exporter"} for m, deps in graph().items()}
    graphlib.TopologicalSorter(g).prepare()  # raises CycleError naming the circle


def test_wings_import_only_downwards() -> None:
    upward = []
    for module, deps in graph().items():
        w = wing(module)
        if w is None:
            continue
        for dep in deps:
            d = wing(dep)
            if d is not None and WINGS.index(d) > WINGS.index(w):
                upward.append(f"{module} imports {dep}")
    assert upward == []


def test_every_module_lives_in_a_wing() -> None:
    loose = [m for m in graph() if wing(m) is None and m not in ("exporter", "exporter.__main__")]
    assert loose == []


def test_dynamic_imports_count() -> None:
    """importlib.import_module and __import__ with a literal name are imports too: an upward one is caught."""
    for code, package, expected in [
        ('importlib.import_module("exporter.cli.serve")', "exporter.pipeline", "exporter.cli.serve"),
        ('import_module("..cli.serve", __package__)', "exporter.pipeline", "exporter.cli.serve"),
        ('__import__("exporter.expose.server")', "exporter.core", "exporter.expose.server"),
        ('import_module(name)', "exporter.core", None),
        ('import_module("json")', "exporter.core", None),
    ]:
        call = ast.parse(code).body[0]
        assert isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)
        assert _dynamic_import(call.value, package) == expected, code


def test_cli_does_no_arithmetic() -> None:
    """The CLI parses and prints; sums, products and divisions about KV belong to a wing."""
    ops = (ast.Mult, ast.Div, ast.FloorDiv, ast.Sub, ast.Mod, ast.Pow)
    found = []
    for path in (PACKAGE / "cli").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ops):
                found.append(f"{path.name}:{node.lineno}")
    assert found == []


def literal_vllm_names(paths: list[Path]) -> list[str]:
    """Every line naming a vLLM metric literally (code, strings, comments), as path:line."""
    return [f"{p.relative_to(PACKAGE.parent)}:{i}" for p in paths
            for i, line in enumerate(p.read_text().splitlines(), 1) if VLLM_NAME.search(line)]


def test_vllm_metric_names_live_in_the_vllm_wing_only() -> None:
    """A renamed vLLM metric is one change in exporter/engines/vllm/metrics.py: no other module of exporter/ and
    no dashboard generator writes a vLLM name (grafana/rules.py and promtool_tests.py follow in issue 20 item 4)."""
    outside = [p for p in PACKAGE.rglob("*.py") if VLLM_WING not in p.parents]
    assert literal_vllm_names([*outside, PACKAGE.parent / "grafana" / "dashboards.py"]) == []
    assert literal_vllm_names([VLLM_WING / "metrics.py"])  # the check can fail: the table itself names them


def test_nothing_in_the_package_uses_the_old_vllm_module() -> None:
    """exporter/pipeline/vllm.py only keeps old imports of tools and tests working."""
    users = [m for m, deps in graph().items() if "exporter.pipeline.vllm" in deps]
    assert users == []


def test_the_engine_neutral_wing_names_no_engine() -> None:
    """engines/base.py is the interface: it imports no engine's sub-package."""
    assert {d for d in imports(PACKAGE / "engines" / "base.py") if d.startswith("exporter.engines.")} == set()


RENAME_CHECK = """
import json, sys
from pathlib import Path
from exporter.expose import diagnosis
from exporter.pipeline import oneshot
from exporter.pipeline.target import Settings
from grafana.dashboards import dashboards
old, new, exported, snapshot = sys.argv[1:5]
text = Path(snapshot).read_text()
settings = Settings("x", discover_cmdline=False)
ours = diagnosis.document([oneshot.observe("x", settings, text=text.replace(old, exported))])
bundle = json.dumps(dashboards())
print(json.dumps({"diagnosis": ours, "old_in_dashboards": old in bundle, "new_in_dashboards": new in bundle}))
"""


def test_a_renamed_vllm_metric_is_one_change_in_the_names_table(tmp_path: Path) -> None:
    """ARCHITECTURE.md's count, checked: a copy of exporter/ and grafana/ where vLLM renamed
    num_requests_running, changed in exporter/engines/vllm/metrics.py only, reads an exposition with the new
    name as the original reads the old one, and its dashboards query the new name only."""
    import json
    import shutil
    import subprocess
    import sys

    root = PACKAGE.parent
    for wing in ("exporter", "grafana"):
        shutil.copytree(root / wing, tmp_path / wing, ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    table = tmp_path / "exporter" / "engines" / "vllm" / "metrics.py"
    old, new = "vllm:num_requests_running", "vllm:num_requests_scheduled"
    assert table.read_text().count(f'"{old}"') == 1
    table.write_text(table.read_text().replace(f'"{old}"', f'"{new}"'))
    snapshot = root / "tests" / "fixtures" / "vllm-0.32.0" / "false-full" / "snapshot.prom"

    def run(where: Path, exported: str) -> dict[str, object]:
        out = subprocess.run([sys.executable, "-c", RENAME_CHECK, old, new, exported, str(snapshot)], cwd=where,
                             check=True,
                             capture_output=True, text=True, env={"PYTHONPATH": str(where), "PATH": "/usr/bin:/bin"})
        result: dict[str, object] = json.loads(out.stdout)
        return result

    before = run(root, old)  # this tree, the exposition as recorded
    after = run(tmp_path, new)  # the renamed table, an exposition with the new name
    assert before["old_in_dashboards"] and not before["new_in_dashboards"]
    assert after["new_in_dashboards"] and not after["old_in_dashboards"]
    assert after["diagnosis"] == before["diagnosis"]
    engines = before["diagnosis"]["targets"][0]["engines"]  # type: ignore[index]
    assert engines and engines[0]["requests_running"] > 0  # the renamed gauge is what the answer reads


def test_architecture_md_maps_every_module_and_names_real_checks() -> None:
    """ARCHITECTURE.md's module table lists every module, and each test it cites for a count exists."""
    doc = (PACKAGE.parent / "ARCHITECTURE.md").read_text()
    listed: set[str] = set()
    for line in doc.splitlines():
        paths = re.findall(r"`([a-z_/]+\.py)`", line) if line.startswith("| `") else []
        if paths:
            wing_of_line = paths[0].rsplit("/", 1)[0]
            listed |= {p if "/" in p else f"{wing_of_line}/{p}" for p in paths}
    modules = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
               if p.name != "__init__.py" or p.parent.parent.name == "engines"} - {"__main__.py"}
    assert modules - listed == set()
    tests = PACKAGE.parent / "tests" / "unit"
    cited = set(re.findall(r"`(test_\w+)`", doc))
    defined = {m for p in tests.glob("test_*.py") for m in re.findall(r"^def (test_\w+)", p.read_text(), re.M)}
    assert cited and cited <= defined
