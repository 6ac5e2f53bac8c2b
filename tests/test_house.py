"""The house rules that a tree can break silently: no import circles among the five packages, layers imported
downwards only (function-local imports counted), no import of another package's ``_private`` names, no Python under
``reports/``, a ``conformance/`` root of entry points only, a written reason on every broad ``except``."""

from __future__ import annotations

import ast
import graphlib
import re
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


#: The layers of the tree, lowest first (data flows reference -> kernels -> faults -> checks -> suite -> front doors):
#: a module imports from its own layer or a lower one, a function-local import too. An entry is a package, a
#: sub-package or one module (the most specific entry naming a module decides its layer).
LAYERS = (
    ("reference", "conformance"),
    ("conformance.runtime.graceful_stop",),  # the stop signals the kernel runner reads
    ("conformance.kernels", "conformance.cases"),
    ("faults",),
    ("conformance.runtime", "predictions"),
    ("detllm", "conformance.checks", "conformance.bench"),
    ("conformance.suite",),
    ("conformance.gate", "conformance.scoreboard", "conformance.sweep", "conformance.study", "conformance.triage"),
    ("conformance.pytest_plugin", "conformance.commands"),
    ("conformance.cli",),
)


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the most specific entry that is ``module`` or a package above it."""
    best = (-1, None)
    for i, names in enumerate(LAYERS):
        for n in names:
            if (module == n or module.startswith(n + ".")) and len(n) > best[0]:
                best = (len(n), i)
    assert best[1] is not None, f"{module} is in no layer of LAYERS"
    return best[1]


def layer_violations(root: Path) -> list[str]:
    """``"<module> imports <target> (layer i < j)"`` for every import of a higher layer."""
    bad = []
    for mod, path in modules(root).items():
        for target, _ in imported(path):
            if target.split(".")[0] in PACKAGES and layer_of(target) > layer_of(mod):
                bad.append(f"{mod} imports {target} (layer {layer_of(mod)} < {layer_of(target)})")
    return bad


def test_layers_are_imported_downwards_only():
    assert layer_violations(ROOT) == []


def test_the_layer_check_finds_a_function_local_upward_import(tmp_path):
    (tmp_path / "conformance" / "runtime").mkdir(parents=True)
    (tmp_path / "conformance" / "runtime" / "pool.py").write_text("def f():\n    from conformance.suite import plan\n")
    assert layer_violations(tmp_path) == ["conformance.runtime.pool imports conformance.suite (layer 4 < 6)"]


def private_imports(root: Path) -> list[str]:
    """``"<module>: <target> [private parts]"`` for every import of a ``_private`` module or name of the project from
    another module (within one package too; a package's tests are outside ``root``'s packages)."""
    bad = []
    for mod, path in modules(root).items():
        for target, names in imported(path):
            if target.split(".")[0] in PACKAGES and target != mod:
                private = [p for p in target.split(".") + names if p.startswith("_") and not p.startswith("__")]
                bad += [f"{mod}: {target} {private}"] if private else []
    return bad


def test_no_private_names_imported_across_modules():
    assert private_imports(ROOT) == []


def test_the_private_import_check_finds_one_within_a_package(tmp_path):
    (tmp_path / "conformance" / "kernels").mkdir(parents=True)
    (tmp_path / "conformance" / "kernels" / "a.py").write_text("from conformance.kernels._digest import f\n")
    (tmp_path / "conformance" / "kernels" / "b.py").write_text("from conformance.kernels.c import _g\n")
    assert private_imports(tmp_path) == [
        "conformance.kernels.a: conformance.kernels._digest ['_digest']",
        "conformance.kernels.b: conformance.kernels.c ['_g']",
    ]


def test_reports_hold_no_python_and_the_conformance_root_holds_entry_points():
    assert sorted(str(p.relative_to(ROOT)) for p in (ROOT / "reports").rglob("*.py")) == []
    root_modules = sorted(p.name for p in (ROOT / "conformance").glob("*.py"))
    assert root_modules == ["__init__.py", "cli.py", "pytest_plugin.py"]


#: ``# noqa: BLE001 -- <reason>``: ruff's code (``BLE`` is selected in pyproject.toml), then a non-empty reason
BROAD_EXCEPT_REASON = re.compile(r"#\s*noqa:[\w\s,]*\bBLE001\b[\w\s,]*--\s*\S")


def is_broad(handler: ast.ExceptHandler) -> bool:
    """A bare ``except:`` or one naming ``Exception`` / ``BaseException`` (alone or in a tuple)."""
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in ("Exception", "BaseException") for t in types)


def unexplained_broad_excepts(root: Path) -> list[str]:
    """``"<path>:<line>"`` of every broad ``except`` whose header lines carry no :data:`BROAD_EXCEPT_REASON`: broad
    clauses belong at the isolation boundary only (a user's kernel, a plugin, a worker's top loop, cleanup then
    re-raise), each saying why."""
    bad = []
    for path in sorted(modules(root).values()):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ExceptHandler) and is_broad(node):
                last = node.lineno if node.type is None else node.type.end_lineno
                if not any(BROAD_EXCEPT_REASON.search(line) for line in lines[node.lineno - 1 : last]):
                    bad.append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return bad


def test_every_broad_except_gives_its_reason():
    assert unexplained_broad_excepts(ROOT) == []


def test_the_except_check_finds_a_planted_reasonless_clause(tmp_path):
    (tmp_path / "faults").mkdir()
    (tmp_path / "faults" / "a.py").write_text(
        "try:\n    x = 1\nexcept Exception:  # noqa: BLE001\n    pass\n"
        "try:\n    x = 2\nexcept (ValueError, BaseException):  # noqa: BLE001 -- a reason\n    pass\n"
        "try:\n    x = 3\nexcept:  # noqa: BLE001 --\n    pass\n"
        "try:\n    x = 4\nexcept ValueError:\n    pass\n"
    )
    assert unexplained_broad_excepts(tmp_path) == ["faults/a.py:3", "faults/a.py:11"]
