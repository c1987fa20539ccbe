"""The notebooks decode the pair their parameter cell names: with TREEGRAFT_PAIR set to a folder
holding a tiny target/ and mid/, 01 and 02 run end to end under SMOKE and record that pair's run."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from treegraft_lab.tiny import save_tiny_pair

NB_DIR = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.mark.slow
def test_notebooks_01_and_02_run_on_the_pair_named_by_the_environment(tmp_path, monkeypatch):
    folder = save_tiny_pair(tmp_path / "tinypair", "qwen3")
    runs = tmp_path / "runs"
    for k, v in {"SMOKE": "1", "TREEGRAFT_RUNS_DIR": str(runs), "RERECORD": "0", "TREEGRAFT_PAIR": str(folder),
                 "TREEGRAFT_DEVICE": "cpu", "PYTHONPATH": os.pathsep.join([str(NB_DIR.parent), os.environ.get("PYTHONPATH", "")])}.items():
        monkeypatch.setenv(k, v)
    for name in ("01_step_through.ipynb", "02_tree_growth_animation.ipynb"):
        nb = nbformat.read(NB_DIR / name, as_version=4)
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NB_DIR)}}).execute()
        params = "".join(o.get("text", "") for o in nb.cells[1].outputs if o.output_type == "stream")
        assert f"pair {folder}, device cpu, clock wall" in params, params
        assert "treegraft-lab collect --target" in params  # no scheduler for this pair: the commands that make one
    assert (runs / "tinypair@wall" / "sample-smoke" / "meta.json").exists()
    from treegraft_lab import load_run

    run = load_run(runs / "tinypair@wall" / "sample-smoke")
    assert len(run.rounds) > 0
