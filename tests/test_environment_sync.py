"""environment.yml (conda) must list the same pip requirements as pyproject.toml."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python >= 3.11")

ROOT = Path(__file__).resolve().parent.parent


def _norm(req: str) -> tuple[str, str]:
    r = Requirement(req)
    return re.sub(r"[-_.]+", "-", r.name).lower(), str(r.specifier)


def pyproject_requirements() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = data["dependencies"] + data.get("optional-dependencies", {}).get("dev", [])
    return dict(_norm(r) for r in reqs)


def environment_yml(text: str) -> tuple[list[str], dict[str, str]]:
    """(conda dependencies, pip requirements) of a simple environment.yml, without PyYAML."""
    conda, pip, pip_indent = [], {}, None
    in_deps = False
    for raw in text.splitlines():
        line = raw.split(" #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            in_deps, pip_indent = line.startswith("dependencies:"), None
            continue
        item = line.strip()[2:].strip() if line.strip().startswith("- ") else None
        if not in_deps or item is None:
            continue
        if pip_indent is not None and indent > pip_indent:
            if not item.startswith("-"):  # skip pip options such as `-e .`
                name, spec = _norm(item)
                pip[name] = spec
        elif item == "pip:":
            pip_indent = indent
        else:
            pip_indent = None
            conda.append(item)
    return conda, pip


def test_parser_reads_the_pip_section():
    text = "name: x\ndependencies:\n  - python=3.11\n  - pip\n  - pip:\n      - Foo_Bar>=1  # c\n      - -e .\n"
    assert environment_yml(text) == (["python=3.11", "pip"], {"foo-bar": ">=1"})


def test_environment_yml_matches_pyproject():
    conda, pip = environment_yml((ROOT / "environment.yml").read_text())
    want = pyproject_requirements()
    missing = sorted(set(want) - set(pip))
    extra = sorted(set(pip) - set(want))
    assert not missing and not extra, (
        f"environment.yml pip section differs from pyproject.toml: missing {missing}, extra {extra}"
    )
    differ = {n: (pip[n], want[n]) for n in want if pip[n] != want[n]}
    assert not differ, f"version specifiers differ (environment.yml, pyproject.toml): {differ}"
    assert "python=3.11" in conda and "pip" in conda
