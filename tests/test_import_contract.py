"""The import structure: data flows one way, models -> drafters -> decoder -> records -> analysis -> views ->
commands (pyproject.toml's [tool.importlinter] maps each module to its layer).

`lint-imports` checks the contracts (the layers, no cycles, the settings and cost model load no model). An
import inside a function counts like any other (checked here on a package made for it), and the package's lazy
front door (`from treegraft_lab import TreeGraftDecoder`, resolved at run time, so the contract sees only
`treegraft_lab`) is used only where the layers would allow the module behind the name.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    assert LINT_IMPORTS.is_file(), f"no {LINT_IMPORTS}: install the dev extras (`pip install -e '.[dev]'`, import-linter)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_import_contracts_are_kept():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 broken" in done.stdout and "Layers: models -> drafters" in done.stdout


def test_an_import_inside_a_function_counts(tmp_path):
    pkg = tmp_path / "layered"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "high.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from layered import high\n\n    return high\n")
    (tmp_path / ".importlinter").write_text("[importlinter]\nroot_package = layered\n\n"
                                            "[importlinter:contract:layers]\nname = layers\ntype = layers\n"
                                            "layers =\n    layered.high\n    layered.low\n")
    done = lint_imports(tmp_path)
    assert done.returncode == 1 and "layered.low -> layered.high" in done.stdout, done.stdout + done.stderr


def layers() -> list[set[str]]:
    """The layers contract's layers, top first, each a set of child module names of treegraft_lab."""
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [{m.strip() for m in layer.replace("|", ":").split(":")} for layer in contract["layers"]]


def front_door() -> dict[str, str]:
    """Name -> module of each name `treegraft_lab` exports lazily (read from its source, not imported)."""
    tree = ast.parse((ROOT / "treegraft_lab" / "__init__.py").read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            out.update(ast.literal_eval(node.value))
    return out


def test_the_lazy_front_door_is_used_only_above_what_it_opens():
    grimp = pytest.importorskip("grimp")
    rank = {name: i for i, layer in enumerate(layers()) for name in layer}  # 0: the top layer
    names, graph = front_door(), grimp.build_graph("treegraft_lab", cache_dir=None)
    assert names and {m.split(".")[1] for m in names.values()} <= set(rank)
    bad = []
    for importer in sorted(graph.find_modules_that_directly_import("treegraft_lab")):
        for detail in graph.get_import_details(importer=importer, imported="treegraft_lab"):
            (stmt,) = ast.parse(detail["line_contents"].strip()).body
            for alias in stmt.names if isinstance(stmt, ast.ImportFrom) else []:
                if f"treegraft_lab.{alias.name}" in graph.modules:
                    continue  # a module: the contracts see it
                target = names.get(alias.name)
                if target is None or rank[importer.split(".")[1]] > rank[target.split(".")[1]]:
                    bad.append(f"{importer} (l.{detail['line_number']}): {alias.name} from {target}")
    assert bad == [], f"these would break the layers if written out: {bad}"


def test_every_module_imports():
    """Each module of the package imports, all in one fresh interpreter (the contracts rule out cycles)."""
    code = ("import importlib, pkgutil, treegraft_lab\n"
            "for m in sorted(pkgutil.walk_packages(treegraft_lab.__path__, 'treegraft_lab.'), key=lambda m: m.name):\n"
            "    importlib.import_module(m.name)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stderr[-3000:]
