"""The device check on the CPU: every step, run here in one process (`scripts/device_check.py`'s own
entry point, small shapes), and the script around them (one real step in its own process); the profile
its decoding steps decide on, the time budget of a run, its host-read counter and the headline under
its summary. A GPU machine runs the same steps with `DEVICE=cuda scripts/device_check.sh`."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from treegraft_lab import costs, measure
from treegraft_lab.tiny import tiny_pair

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dc():
    spec = importlib.util.spec_from_file_location("device_check", ROOT / "scripts" / "device_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def measured(monkeypatch):
    """measure.for_pair faked: a profile named 'measured here', and the pairs it was asked for."""
    asked = []
    prof = costs.load("a100-paper")

    def for_pair(pair, refresh=False, progress=True):
        asked.append(pair)
        return type(prof).from_dict({**prof.to_dict(), "name": "measured here"})

    monkeypatch.setattr(measure, "for_pair", for_pair)
    monkeypatch.delenv("CLOCK", raising=False)
    return asked


def test_on_a_gpu_the_decoding_steps_decide_on_the_measured_profile(dc, measured):
    pair = tiny_pair()
    assert dc.clock(torch.device("cuda"), pair).name == "measured here" and measured == [pair]


def test_a_named_profile_overrides_the_measured_one_and_the_cpu_run_stays_on_a100_paper(dc, measured, monkeypatch):
    pair = tiny_pair()
    assert dc.clock(torch.device("cuda"), pair, given="a100-paper").name == "a100-paper"
    monkeypatch.setenv("CLOCK", "a100-paper")
    assert dc.clock(torch.device("cuda"), pair).name == "a100-paper"
    monkeypatch.delenv("CLOCK")
    assert dc.clock(torch.device("cpu"), pair).name == "a100-paper" and not measured


def test_the_wall_clock_is_printed_beside_the_modelled_one(dc):
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder

    pair = tiny_pair("llama", scale=4.0)
    gen = TreeGraftDecoder(pair, DecodeConfig(schedule="10101"), profile=costs.load("a100-paper")).generate(
        [5, 6, 7, 5, 6, 7, 5], max_new_tokens=6)
    line = dc.clocks([gen, gen])
    assert line["modelled_on"] == "a100-paper"
    assert line["wall_ms"] == round(2000 * gen.stats["wall_s"], 1) and line["modelled_ms"] == round(2 * gen.stats["modelled_ms"], 1)


def test_a_step_that_would_start_past_the_runs_budget_is_listed_as_skipped(tmp_path):
    env = {**os.environ, "DEVICE": "cpu", "PY": "false", "OUT": str(tmp_path / "out"), "STEPS": "versions speed",
           "TOTAL_BUDGET": "10", "TREEGRAFT_CHECK_WORK": str(tmp_path / "work")}
    run = subprocess.run(["bash", str(ROOT / "scripts" / "device_check.sh")], env=env, capture_output=True, text=True,
                         timeout=60)
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert run.returncode == 1 and "2 failed or skipped" in summary
    assert [line.split()[0] for line in summary.splitlines() if "skipped: the run's 10 s are spent" in line] == ["versions", "speed"]


OUT = ROOT / "test-artifacts" / "device-check"  # what each step wrote: results.jsonl, profile.json, speed.json, headline.txt


@pytest.fixture(scope="module")
def check_work(tmp_path_factory):
    """The script's environment for in-process steps: a work folder (tiny pairs saved once, profiles) and no $CLOCK."""
    work = tmp_path_factory.mktemp("device-check-work")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TREEGRAFT_CHECK_WORK", str(work))
        mp.setenv("TREEGRAFT_PROFILE_CACHE", str(work / "profiles"))
        mp.delenv("CLOCK", raising=False)
        if OUT.is_dir():
            shutil.rmtree(OUT)
        yield work


STEPS = ["versions", "load", "tree", "cache", "greedy", "sampling", "pocket", "hf", "costs", "profile", "speed"]


def test_the_cpu_run_covers_every_step_in_the_scripts_order(dc):
    assert list(dc.STEPS) == STEPS


@pytest.mark.parametrize("step", STEPS)
def test_every_step_of_the_device_check_passes_on_the_cpu(dc, check_work, step, monkeypatch, capsys):
    """Each step through the script's entry point, as `device_check.sh` calls it: a failing check raises."""
    monkeypatch.setattr("sys.argv", ["device_check.py", step, "--device", "cpu", "--out", str(OUT)])
    assert dc.main() == 0
    assert f"RESULT {step}: ok in" in capsys.readouterr().out
    last = json.loads((OUT / "results.jsonl").read_text().splitlines()[-1])
    assert last["step"] == step and last["status"] == "ok" and last["result"] is not None


def test_the_script_runs_a_step_in_its_own_process_and_tables_its_result(tmp_path):
    env = {**os.environ, "DEVICE": "cpu", "PY": sys.executable, "OUT": str(tmp_path / "out"), "STEPS": "versions",
           "TREEGRAFT_CHECK_WORK": str(tmp_path / "work")}
    run = subprocess.run(["bash", str(ROOT / "scripts" / "device_check.sh")], env=env, capture_output=True, text=True,
                         timeout=120)
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert run.returncode == 0 and "0 failed or skipped" in summary, run.stdout[-2000:] + run.stderr[-2000:]
    (row,) = [line.split() for line in summary.splitlines() if line.startswith("versions")]
    assert row[1] == "0" and row[3:5] == ["ok", "in"]


def test_host_reads_count_the_devices_reads_and_put_the_methods_back(dc):
    x = torch.arange(4.0)
    before = torch.Tensor.tolist
    with dc.HostReads(torch.device("cpu")) as reads:
        x.tolist()
        float(x[0])
        x.sum().item()
    assert reads.count == 3 and torch.Tensor.tolist is before
    with dc.HostReads(torch.device("cuda")) as reads:  # a CPU tensor's read is no wait for a GPU
        x.tolist()
    assert reads.count == 0


def test_the_headline_names_the_overhead_share_and_verify_cost_first(dc):
    row = {"ms_per_round": 40.0, "draft_ms": 12.0, "verify_ms": 20.0, "overhead_ms": 10.0, "overhead_share": 0.25,
           "syncs": 4.0, "tokens_per_round": 1.0, "modelled_ms_per_round": 30.0}
    speed = {"modelled_on": "measured here", "verify_ms": {"1": 10.0, "64": 30.0, "ratio": 3.0},
             "methods": {"plain": {"ms_per_round": 9.0, "tokens_per_round": 1.0}, "treegraft-10101": row}}
    lines = dc.headline(speed, torch.device("cuda")).splitlines()
    assert "Qwen3-8B-like bf16" in lines[0] and "measured here" in lines[0]
    assert lines[1].strip() == "overhead share of a 10101 round: 25% (10.0 of 40.0 ms)"
    assert lines[2].strip() == "verify: 30.0 ms at 64 nodes vs 10.0 ms for 1 token (3.0x)"
    assert lines[-1].split() == ["treegraft-10101", "40.0", "12.0", "20.0", "10.0", "4.0", "1.0", "30.0"]
