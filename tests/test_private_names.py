"""No module reaches into another module's private names: what one module uses of another is public.

Checked by parsing (never importing) the package, the scripts, the tests and the notebooks' code:
`from treegraft_lab.x import _y`, `x._y` on an imported treegraft_lab module and `treegraft_lab.x._y`
(after `import treegraft_lab.x`) are refused.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sources() -> list[tuple[str, str]]:
    """(where, Python source) of every .py file of treegraft_lab, scripts and tests, and every notebook."""
    out = [(str(p.relative_to(ROOT)), p.read_text()) for d in ("treegraft_lab", "scripts", "tests")
           for p in sorted((ROOT / d).rglob("*.py"))]
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = ["".join(c["source"]) for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
        out.append((str(nb.relative_to(ROOT)), "\n".join(c for c in cells if not c.lstrip().startswith(("%", "!")))))
    return out


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def is_module(name: str) -> bool:
    """Whether dotted `name` is a module or package of this repository (by its file: nothing imported)."""
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def private_uses(source: str) -> list[str]:
    """`module._name` for each private name of a treegraft_lab module that `source` imports or reads."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # local name -> treegraft_lab module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("treegraft_lab"):
            for a in node.names:
                if private(a.name):
                    found.append(f"{node.module}.{a.name}")
                elif is_module(f"{node.module}.{a.name}"):
                    modules[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            modules.update({a.asname: a.name for a in node.names if a.asname and a.name.startswith("treegraft_lab")})
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and private(node.attr)):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in modules:
            found.append(f"{modules[node.value.id]}.{node.attr}")
        elif (owner := dotted(node.value)).startswith("treegraft_lab") and is_module(owner):
            found.append(f"{owner}.{node.attr}")
    return found


def dotted(node: ast.expr) -> str:
    """"a.b.c" for a chain of names (`treegraft_lab.bench` as written after `import treegraft_lab.bench`), else ""."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def test_no_module_uses_another_modules_private_names():
    bad = {where: uses for where, src in sources() if (uses := private_uses(src))}
    assert bad == {}, f"make these public or move them: {bad}"


def test_a_private_import_and_a_private_attribute_are_both_caught():
    src = "from treegraft_lab.bench import _growth_name\nfrom treegraft_lab import measure\nmeasure._x()\n"
    assert private_uses(src) == ["treegraft_lab.bench._growth_name", "treegraft_lab.measure._x"]


def test_a_private_name_read_through_the_full_module_path_is_caught():
    src = "import treegraft_lab.schedule.choice\nimport treegraft_lab\ntreegraft_lab.schedule.choice._dtypes('cpu', 'wall')\n" \
          "treegraft_lab._PUBLIC\nself._cache\n"
    assert sorted(private_uses(src)) == ["treegraft_lab._PUBLIC", "treegraft_lab.schedule.choice._dtypes"]


def owned_private(source: str) -> set[str]:
    """The private attribute names a module defines: its methods and class attributes, what it
    assigns on any object (`self._x = ...`, `module._x = ...`) and passes by keyword."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.keyword) and node.arg:  # `parser.set_defaults(_run=...)`
            names.add(node.arg)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in ast.walk(t):
                    if isinstance(n, ast.Attribute):
                        names.add(n.attr)
                    elif isinstance(n, ast.Name):
                        names.add(n.id)
    return {n for n in names if private(n)}


def foreign_private_reads(modules: dict[str, str]) -> list[str]:
    """`where: x._y` for each private attribute `_y` read on another object (not `self` or `cls`) in a
    module that does not define `_y` itself while another module of `modules` does."""
    owned = {where: owned_private(src) for where, src in modules.items()}
    found = []
    for where, src in modules.items():
        others = set().union(*(names for w, names in owned.items() if w != where))
        for node in ast.walk(ast.parse(src)):
            if not (isinstance(node, ast.Attribute) and private(node.attr)):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in others and node.attr not in owned[where]:
                found.append(f"{where}: {ast.unparse(node)}")
    return found


def test_no_module_reads_a_private_attribute_another_module_defines_on_its_objects():
    package = {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "treegraft_lab").rglob("*.py"))}
    assert foreign_private_reads(package) == [], "make these public: a researcher's part must not need them"


def test_a_private_method_called_on_another_modules_object_is_caught():
    modules = {"decoder.py": "class D:\n    def _oracle_round(self):\n        return self._x\n",
               "replay.py": "def run(dec):\n    return dec._oracle_round()\n",
               "tree.py": "class T:\n    def f(self, other):\n        self._n = 1\n        return other._n\n"}
    assert foreign_private_reads(modules) == ["replay.py: dec._oracle_round"]
