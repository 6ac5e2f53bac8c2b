"""The house rules that a tree can break silently: no import circles among the five packages, no import of another
package's ``_private`` names, no Python under ``reports/``, a ``conformance/`` root of entry points only."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("reference", "faults", "conformance", "predictions", "detllm")


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (root / pkg).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) of every absolute import in the file, function-local ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [a.name for a in node.names]))
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the project modules it imports; a package's ``__init__`` hands names on and is no node."""
    mods = modules(root)
    graph = {m: set() for m, p in mods.items() if p.name != "__init__.py"}
    for m in graph:
        for mod, names in imported(mods[m]):
            for target in [mod] + [f"{mod}.{n}" for n in names]:
                if target in graph and target != m:
                    graph[m].add(target)
    return graph


def test_no_import_cycles():
    graphlib.TopologicalSorter(import_graph(ROOT)).prepare()  # raises CycleError naming the circle


def test_the_cycle_check_finds_a_planted_circle(tmp_path):
    (tmp_path / "faults").mkdir()
    (tmp_path / "faults" / "a.py").write_text("from faults.b import x\n")
    (tmp_path / "faults" / "b.py").write_text("def x():\n    from faults import a\n")
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(import_graph(tmp_path)).prepare()


def test_no_private_names_across_packages():
    bad = []
    for mod, path in modules(ROOT).items():
        for target, names in imported(path):
            top = target.split(".")[0]
            if top in PACKAGES and top != mod.split(".")[0]:
                private = [p for p in target.split(".") + names if p.startswith("_") and not p.startswith("__")]
                bad += [f"{mod}: {target} {private}"] if private else []
    assert bad == []


def test_reports_hold_no_python_and_the_conformance_root_holds_entry_points():
    assert sorted(str(p.relative_to(ROOT)) for p in (ROOT / "reports").rglob("*.py")) == []
    root_modules = sorted(p.name for p in (ROOT / "conformance").glob("*.py"))
    assert root_modules == ["__init__.py", "cli.py", "pytest_plugin.py"]
