"""The paper's reported numbers are written once, in `treegraft_lab/paper.py`: the package and the notebooks
read them there, so a view can never show a number the module does not hold."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from treegraft_lab import paper

ROOT = Path(__file__).resolve().parent.parent


def paper_numbers() -> set[str]:
    """The paper's numbers as they would be typed: every speedup of its main table and ablation with its "x"
    ("1.49x"), and its distinctive statistics as plain numbers (the two acceptance lengths, the candidate pool,
    the pool ratio, the reselected share as a fraction and as a percentage). A bare "0.81" or "1.20" is too
    common a number to be sure it is the paper's."""
    speedups = {v for row in paper.MAIN for v in row[1:4]} | {s for _, _, s, _ in paper.ABLATION if s != 1.0}
    stats = [*paper.A.values(), paper.MEAN_POOL, paper.POOL_RATIO]
    return ({f"{v:.2f}x" for v in speedups} | {f"{v:.2f}" for v in stats}
            | {f"{100 * paper.RESELECTED_SHARE:.2f}", f"{paper.RESELECTED_SHARE:g}"})


def typed(text: str, numbers: set[str]) -> list[str]:
    """The paper's numbers typed in `text` (standing alone, not part of a longer number)."""
    return sorted({m for m in re.findall(r"(?<![\d.])\d+\.\d+x?(?![\d])", text) if m in numbers})


def sources() -> dict[str, str]:
    out = {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "treegraft_lab").rglob("*.py") if p.name != "paper.py"}
    for p in sorted((ROOT / "notebooks").glob("*.ipynb")):
        out[str(p.relative_to(ROOT))] = "\n".join(c.source for c in nbformat.read(p, as_version=4).cells)
    return out


def test_the_check_finds_a_typed_paper_number():
    numbers = paper_numbers()
    assert typed("TreeGraft 1.49x beside ours", numbers) == ["1.49x"]
    assert typed("the pool is 112.54 nodes, 61.47% reselected", numbers) == ["112.54", "61.47"]
    assert typed("ratio 11.49x, 1.495 and an agreement of 0.81", numbers) == []


def test_the_package_and_the_notebooks_type_none_of_the_papers_numbers():
    numbers = paper_numbers()
    found = {name: hits for name, text in sources().items() if (hits := typed(text, numbers))}
    assert not found, f"read these from treegraft_lab.paper instead: {found}"
