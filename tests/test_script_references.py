"""Every `scripts/<name>` that a notebook, the package, the docs or the README names is in scripts/, so a
reader who runs what a page says finds the script there. A notebook names none that is gone. The docs and the
package may cite a removed experiment script (its data stay in data/) only in a file that says which commit
removed it; where git history is at hand, that commit must have deleted the script."""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = re.compile(r"(?<![\w/.-])scripts/([\w.+-]+\.(?:py|sh))")
REMOVED_IN = re.compile(r"removed in commit ([0-9a-f]{7,40})")


def sources() -> dict[str, str]:
    """{path: text} of what a reader is told to run: every notebook cell, the package, docs/, README, Makefile."""
    out = {str(p.relative_to(ROOT)): "\n".join(c.source for c in nbformat.read(p, as_version=4).cells)
           for p in sorted((ROOT / "notebooks").glob("*.ipynb"))}
    for p in [*sorted((ROOT / "treegraft_lab").rglob("*.py")), *sorted((ROOT / "docs").rglob("*.md")),
              ROOT / "README.md", ROOT / "Makefile"]:
        out[str(p.relative_to(ROOT))] = p.read_text()
    return out


@functools.cache
def deleted_by(sha: str) -> frozenset[str] | None:
    """The paths commit `sha` deleted, or None where git or that commit is not at hand (a shallow clone)."""
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "show", "--diff-filter=D", "--name-only", "--format=", sha],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return frozenset(done.stdout.split()) if done.returncode == 0 else None


def missing_script_references(texts: dict[str, str], scripts_dir: Path = ROOT / "scripts") -> list[str]:
    """`path: scripts/<name>` for each named script not in `scripts_dir` that its file may not cite: any in a
    notebook; elsewhere one the file does not say a commit removed, or that the named commit did not delete."""
    out = []
    for path, text in texts.items():
        commits = REMOVED_IN.findall(text)
        for name in sorted(set(SCRIPT.findall(text))):
            if (scripts_dir / name).exists():
                continue
            ref = f"scripts/{name}"
            if path.endswith(".ipynb"):
                out.append(f"{path}: {ref} (a notebook names only scripts that exist)")
            elif not commits:
                out.append(f"{path}: {ref} (not in scripts/, and the file says no commit removed it)")
            elif all(deleted_by(c) is not None and ref not in deleted_by(c) for c in commits):
                out.append(f"{path}: {ref} (not deleted by commit {', '.join(sorted(set(commits)))})")
    return out


def test_every_script_the_notebooks_package_and_docs_name_exists_or_is_cited_as_removed():
    assert missing_script_references(sources()) == []


def test_the_check_catches_a_removed_script_in_a_notebook_and_an_uncited_one_in_the_docs(tmp_path):
    (tmp_path / "kept.py").write_text("")
    texts = {"notebooks/03_x.ipynb": "rerun `scripts/growth_compare.py` (removed in commit 9416a6d)",
             "docs/a.md": "run `scripts/kept.py`, then `python scripts/gone.py --fast`",
             "docs/b.md": "`scripts/growth_compare.py` was removed in commit 9416a6d; see git history.",
             "README.md": "see https://github.com/x/y/blob/main/scripts/theirs.py and `scripts/kept.py`"}
    found = missing_script_references(texts, tmp_path)
    assert found[:2] == ["notebooks/03_x.ipynb: scripts/growth_compare.py (a notebook names only scripts that exist)",
                         "docs/a.md: scripts/gone.py (not in scripts/, and the file says no commit removed it)"]
    if deleted_by("9416a6d") is not None:  # git history at hand: the cited commit must have deleted the script
        assert len(found) == 2
        wrong = {"docs/c.md": "`scripts/never_there.py` was removed in commit 9416a6d."}
        assert missing_script_references(wrong, tmp_path) == [
            "docs/c.md: scripts/never_there.py (not deleted by commit 9416a6d)"]
