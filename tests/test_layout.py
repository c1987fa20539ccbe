"""The package's shape: the decoding core stands apart from training and views, and never measures."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from treegraft_lab import costs, measure
from treegraft_lab.config import DecodeConfig
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.tiny import tiny_pair

PKG = Path(__file__).resolve().parent.parent / "treegraft_lab"
CORE = ["tree.py", "drafters.py", "graft.py", "verify.py", "decoder.py", "replay.py", "rounds.py", "costs.py",
        "config.py", "kv.py", "budget.py", "schedule/policies.py", "schedule/context.py", "schedule/signals.py", "schedule/adaptive.py",
        "schedule/artifact.py"]
OUTSIDE = ("treegraft_lab.training", "treegraft_lab.viz", "treegraft_lab.widgets", "treegraft_lab.bench",
           "treegraft_lab.commands", "treegraft_lab.workbench")


def imported(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


@pytest.mark.parametrize("name", CORE)
def test_the_decoding_core_imports_no_training_view_bench_or_command_code(name):
    bad = sorted(m for m in imported(PKG / name) if m.startswith(OUTSIDE))
    assert bad == [], f"{name} imports {bad}"


def test_importing_the_package_or_the_decoder_loads_no_training_code():
    code = ("import sys, treegraft_lab; a = [m for m in sys.modules if m.startswith('treegraft_lab.training')]; "
            "import treegraft_lab.decoder, treegraft_lab.replay, treegraft_lab.schedule.adaptive; "
            "b = [m for m in sys.modules if m.startswith(('treegraft_lab.training', 'sklearn', 'pandas'))]; print(a, b)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[] []"


@pytest.fixture
def no_measuring(tmp_path, monkeypatch):
    """An empty profile cache, measuring made to fail, and the decoder's own lookup (not the test
    session's measuring edge, conftest.py)."""
    monkeypatch.setattr(measure, "resolve", getattr(measure.resolve, "__wrapped__", measure.resolve))
    monkeypatch.setenv("TREEGRAFT_PROFILE_CACHE", str(tmp_path / "profiles"))
    monkeypatch.setattr(measure, "measure", lambda *a, **k: pytest.fail("the decoder measured the device"))
    monkeypatch.setattr(measure, "forward_ms", lambda *a, **k: pytest.fail("the decoder timed a forward"))
    return tmp_path


def test_the_decoder_never_measures_it_takes_a_named_saved_or_cached_profile(no_measuring):
    pair = tiny_pair("llama")
    toy = costs.DeviceProfile("toy", {1: 10.0, 64: 20.0}, {1: 2.0, 100: 8.0}, 0.5)
    saved = toy.save(no_measuring / "toy.json")
    for clock in ("a100-paper", str(saved), toy):
        dec = TreeGraftDecoder(pair, DecodeConfig(schedule="10101", budget="auto", clock=clock))
        assert dec.profile.name == ("a100-paper" if clock == "a100-paper" else "toy")
    with pytest.raises(TreeGraftError, match="not measured yet: run `treegraft-lab profile`"):
        TreeGraftDecoder(pair, DecodeConfig(schedule="small"))  # "wall" with nothing cached: one clear line
    toy.save(measure.cached_path(pair))  # what `measure.for_pair` leaves in the cache
    assert TreeGraftDecoder(pair, DecodeConfig(schedule="small")).profile == toy


def test_one_timing_helper_synchronises_every_cuda_device_of_the_models(monkeypatch):
    import torch

    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: synced.append(str(d)))
    out, seconds = measure.timed(lambda x: x + 1, 1, devices=(torch.device("cuda:0"), torch.device("cuda:1")))
    assert out == 2 and seconds >= 0 and synced == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert measure.cuda_devices(tiny_pair("llama").target, None) == ()  # a CPU pair: nothing to wait for
