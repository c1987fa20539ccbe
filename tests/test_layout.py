"""The package's shape: the decoding core stands apart from training and views, and never measures."""

from __future__ import annotations

import ast
import dataclasses
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
        "schedule/artifact.py", "parts.py", "drafting.py", "growth.py", "resolve.py", "hooks.py"]
OUTSIDE = ("treegraft_lab.training", "treegraft_lab.viz", "treegraft_lab.views", "treegraft_lab.bench",
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


ORIGINAL_FOR_PAIR = measure.for_pair


@pytest.fixture
def no_measuring(tmp_path, monkeypatch):
    """An empty profile cache, and measuring made to fail."""
    monkeypatch.setenv("TREEGRAFT_PROFILE_CACHE", str(tmp_path / "profiles"))
    for name in ("measure", "measure_checked", "for_pair", "forward_ms"):
        monkeypatch.setattr(measure, name, lambda *a, **k: pytest.fail("the decoder measured the device"))
    return tmp_path


TOY = costs.DeviceProfile("toy", {1: 10.0, 64: 20.0}, {1: 2.0, 100: 8.0}, 0.5)


def test_the_decoder_measures_only_for_wall_and_only_what_is_not_cached(no_measuring, monkeypatch):
    pair = tiny_pair("llama")
    saved = TOY.save(no_measuring / "toy.json")
    for clock in ("a100-paper", str(saved)):
        dec = TreeGraftDecoder(pair, DecodeConfig(schedule="10101", budget="auto", clock=clock))
        assert dec.profile.name == ("a100-paper" if clock == "a100-paper" else "toy")
    measured, here = [], dataclasses.replace(TOY, n=5)  # what a measurement returns: its n with it
    monkeypatch.setattr(measure, "measure_checked", lambda p, progress=True, previous=None: measured.append(p) or here)
    monkeypatch.setattr(measure, "for_pair", ORIGINAL_FOR_PAIR)
    assert TreeGraftDecoder(pair, DecodeConfig(schedule="small")).profile == here  # "wall", nothing cached: measured
    assert measured == [pair] and measure.cached_path(pair).is_file()  # ... and cached
    assert TreeGraftDecoder(pair, DecodeConfig(schedule="small")).profile.name == "toy" and len(measured) == 1


def test_a_decoder_handed_a_profile_prices_every_round_with_exactly_it_and_looks_nothing_up(no_measuring, monkeypatch):
    """`profile=` is what the decoder decides on and prices with, as given: with clock "wall" and
    nothing cached it neither measures nor reads a profile, and its rounds cost what a decoder reading
    the same profile from its file prices them at (not what another profile would)."""
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]
    from_file = TreeGraftDecoder(pair, DecodeConfig(schedule="10101", clock=str(TOY.save(no_measuring / "toy.json"))))
    a100 = TreeGraftDecoder(pair, DecodeConfig(schedule="10101", clock="a100-paper"))
    monkeypatch.setattr(measure, "read_only", lambda *a, **k: pytest.fail("the decoder looked its profile up"))
    handed = TreeGraftDecoder(pair, DecodeConfig(schedule="10101"), profile=TOY)
    assert handed.profile is TOY
    gen, ref, other = (d.generate(prompt, max_new_tokens=16) for d in (handed, from_file, a100))
    assert gen.token_ids == ref.token_ids == other.token_ids  # top-k pruning, a fixed mask: the same trees
    assert [r.modelled_ms for r in gen.rounds] == [r.modelled_ms for r in ref.rounds]
    assert gen.stats["modelled_on"] == "toy" and gen.stats["modelled_ms"] != other.stats["modelled_ms"]


def test_a_device_profile_given_as_the_clock_is_refused_with_where_it_goes():
    a100 = costs.load("a100-paper")
    where = r"not the DeviceProfile 'a100-paper': pass it to the decoder as TreeGraftDecoder\(pair, config, profile=\.\.\.\)"
    with pytest.raises(TreeGraftError, match=where) as e:
        DecodeConfig(clock=a100)
    assert "\n" not in str(e.value)
    with pytest.raises(TreeGraftError, match=where):  # as an override too, before any decoding
        TreeGraftDecoder(tiny_pair("llama"), clock=a100)


def test_one_timing_helper_synchronises_every_cuda_device_of_the_models(monkeypatch):
    import torch

    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: synced.append(str(d)))
    out, seconds = measure.timed(lambda x: x + 1, 1, devices=(torch.device("cuda:0"), torch.device("cuda:1")))
    assert out == 2 and seconds >= 0 and synced == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert measure.cuda_devices(tiny_pair("llama").target, None) == ()  # a CPU pair: nothing to wait for
