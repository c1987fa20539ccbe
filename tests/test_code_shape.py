"""The package stays readable in one sitting per part: no class over 20 methods, no function over
60 lines, and the decoder asks its parts nothing by `hasattr`/`getattr` (each protocol's base class
gives its optional methods no-op defaults). Checked by parsing the sources, never importing them.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "treegraft_lab"
MAX_METHODS, MAX_LINES = 20, 60


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """(name, lines) of every function or method of `source` longer than `limit` lines (decorators
    excluded, its docstring and nested functions included)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append((node.name, lines))
    return found


def big_classes(source: str, limit: int = MAX_METHODS) -> list[tuple[str, int]]:
    """(name, methods) of every class of `source` with more than `limit` methods of its own."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            n = sum(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) for b in node.body)
            if n > limit:
                found.append((node.name, n))
    return found


def probes(source: str) -> list[str]:
    """Each `hasattr(...)` / `getattr(...)` call of `source`, as written."""
    return [ast.unparse(n) for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("hasattr", "getattr")]


def test_the_checks_catch_a_long_function_a_big_class_and_a_probe():
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    assert long_functions(f"def f():\n{body}\n") == [("f", 62)]
    assert long_functions("def f():\n    return 1\n") == []
    methods = "\n".join(f"    def m{i}(self): pass" for i in range(21))
    assert big_classes(f"class C:\n{methods}\n") == [("C", 21)]
    assert probes("if hasattr(self.small, 'observe'): pass\ngetattr(x, 'y', None)") == [
        "hasattr(self.small, 'observe')", "getattr(x, 'y', None)"]


def test_no_function_in_the_package_is_over_60_lines():
    found = [f"{p.relative_to(ROOT)}: {name} ({n} lines)" for p in sorted(PACKAGE.rglob("*.py"))
             for name, n in long_functions(p.read_text())]
    assert not found, "split these into named steps:\n" + "\n".join(found)


def test_no_class_in_the_package_has_over_20_methods():
    found = [f"{p.relative_to(ROOT)}: {name} ({n} methods)" for p in sorted(PACKAGE.rglob("*.py"))
             for name, n in big_classes(p.read_text())]
    assert not found, "split these by job:\n" + "\n".join(found)


def test_the_decoder_probes_no_part_with_hasattr_or_getattr():
    assert probes((PACKAGE / "decoder.py").read_text()) == []
