"""Every workbench notebook runs top to bottom with SMOKE=1 (nbclient), and is committed clean.

The notebooks share one folder of recorded runs for the whole test session (what one notebook
records, the next one loads), so the model decodes each small run once.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NB_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(p.name for p in NB_DIR.glob("*.ipynb"))
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CELL_TIMEOUT_S = 420
TIMES: dict[str, float] = {}


def shared_runs_dir(tmp_path_factory) -> Path:
    """One folder of recorded runs per test session, shared by the notebook and browser tests."""
    path = tmp_path_factory.getbasetemp() / "workbench-runs"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="module")
def smoke_env(tmp_path_factory):
    """SMOKE=1 and the session's runs folder, in this process's environment (kernels inherit it)."""
    saved = {k: os.environ.get(k) for k in ("SMOKE", "TREEGRAFT_RUNS_DIR", "RERECORD")}
    os.environ.update(SMOKE="1", TREEGRAFT_RUNS_DIR=str(shared_runs_dir(tmp_path_factory)), RERECORD="0")
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "notebook_times.json").write_text(json.dumps({**TIMES, "total": sum(TIMES.values())}, indent=1))


def test_there_are_seven_notebooks():
    assert len(NOTEBOOKS) == 7, NOTEBOOKS


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_committed_with_outputs_cleared(name):
    nb = nbformat.read(NB_DIR / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{name}: clear the outputs before committing"
    assert "SMOKE" in "".join(c.source for c in nb.cells) or "wb.sizes()" in "".join(c.source for c in nb.cells)


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_with_smoke(name, smoke_env):
    nb = nbformat.read(NB_DIR / name, as_version=4)
    t = time.perf_counter()
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(NB_DIR)}}).execute()  # raises on any cell error
    TIMES[name] = round(time.perf_counter() - t, 1)
    text = json.dumps(nb)
    # plotly's JS is embedded (its bundle merely mentions a CDN address for map topologies), never loaded by URL
    assert not re.search(r"<script[^>]*src=[\\\"']*https?://", text), "a script is loaded from the internet"
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
