"""The paper's reported numbers are written once, in `treegraft_lab/paper.py`: the package and the notebooks
read them there, so a view can never show a number the module does not hold."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from treegraft_lab import paper

ROOT = Path(__file__).resolve().parent.parent


def paper_numbers() -> set[str]:
    """The paper's numbers as they would be typed: the main table's speedups, the ablation's speedups and
    acceptance lengths, and the graft statistics (each with 2 decimals, the share also as a percentage)."""
    values = [v for row in paper.MAIN for v in row[1:4]]
    values += [v for _, _, s, a in paper.ABLATION for v in (s, a) if v == v and v != 1.0]
    values += [paper.MEAN_POOL, paper.POOL_RATIO, *paper.A.values()]
    return {f"{v:.2f}" for v in values} | {f"{100 * paper.RESELECTED_SHARE:.2f}", f"{paper.RESELECTED_SHARE:g}"}


def typed(text: str, numbers: set[str]) -> list[str]:
    """The paper's numbers typed in `text` (a number standing alone, not part of a longer one)."""
    return sorted({m for m in re.findall(r"(?<![\d.])\d+\.\d+(?![\d])", text) if m in numbers})


def sources() -> dict[str, str]:
    out = {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "treegraft_lab").rglob("*.py") if p.name != "paper.py"}
    for p in sorted((ROOT / "notebooks").glob("*.ipynb")):
        out[str(p.relative_to(ROOT))] = "\n".join(c.source for c in nbformat.read(p, as_version=4).cells)
    return out


def test_the_check_finds_a_typed_paper_number():
    numbers = paper_numbers()
    assert typed("TreeGraft 1.49x beside ours", numbers) == ["1.49"]
    assert typed("the pool is 112.54 nodes, 61.47% reselected", numbers) == ["112.54", "61.47"]
    assert typed("ratio 11.49 and 1.495", numbers) == []


def test_the_package_and_the_notebooks_type_none_of_the_papers_numbers():
    numbers = paper_numbers()
    found = {name: hits for name, text in sources().items() if (hits := typed(text, numbers))}
    assert not found, f"read these from treegraft_lab.paper instead: {found}"
