"""Default settings on any CPU: bench and the notebooks pick the dtype and pruning rule the pair's
adaptive scheduler was trained for, say so, and otherwise run without adaptive and say why."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from treegraft_lab import cli, models
from treegraft_lab.commands import bench as cmd


class Stop(Exception):
    """Raised where a model would load: the settings it would load with were captured."""


@pytest.fixture
def bf16_cpu(monkeypatch):
    """A CPU with native bf16 instructions (so dtype "auto" is bfloat16) and no CUDA."""
    monkeypatch.setattr(models, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    monkeypatch.setattr(models, "cpu_supports_bf16", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def loads(monkeypatch):
    """The arguments bench would load its pair with (the load itself stops the command)."""
    seen = []

    def capture(args, require_mid=True):
        seen.append(args)
        raise Stop

    monkeypatch.setattr(cmd, "load_pair_from_args", capture)
    return seen


def test_bench_with_no_flags_on_a_bf16_cpu_runs_the_settings_its_scheduler_was_trained_for(bf16_cpu, loads, capsys):
    with pytest.raises(Stop):
        cli.main(["bench"])
    assert (loads[0].dtype, loads[0].prune) == ("float32", "value")
    err = capsys.readouterr().err
    assert ("bench: float32, prune=value: the settings the adaptive scheduler cpu-float32-value-lookup-ngram+recycling "
            "was trained for (not bfloat16, which has none; not prune=topk, which has none)") in err


def test_bench_keeps_a_dtype_and_pruning_given(bf16_cpu, loads):
    with pytest.raises(Stop):
        cli.main(["bench", "--methods", "ar,small", "--dtype", "bfloat16", "--prune", "topk"])
    assert (loads[0].dtype, loads[0].prune) == ("bfloat16", "topk")
    with pytest.raises(Stop):
        cli.main(["bench", "--methods", "ar,small"])  # no adaptive: the plain defaults
    assert (loads[1].dtype, loads[1].prune) == ("auto", "topk")


def test_bench_without_a_scheduler_runs_the_default_methods_without_adaptive_and_says_why(bf16_cpu, monkeypatch,
                                                                                           tmp_path, capsys):
    from treegraft_lab import bench

    monkeypatch.setattr("treegraft_lab.schedule.adaptive.artifact_dir", lambda name: tmp_path)  # none trained
    monkeypatch.setattr(cmd, "load_pair_from_args", lambda args, require_mid=True: SimpleNamespace(name="p"))
    ran = []

    def run_bench(pair, prompts, methods, *a, **k):
        ran.append(methods)
        raise Stop

    monkeypatch.setattr(bench, "run_bench", run_bench)
    with pytest.raises(Stop):
        cli.main(["bench"])
    assert "adaptive" not in ran[0] and "small" in ran[0]
    assert "bench: adaptive off: no scheduler for pair smollm2-pocket as cpu-bfloat16-topk-lookup-ngram+recycling or " \
           "cpu-bfloat16-value-lookup-ngram+recycling or cpu-float32-topk" in capsys.readouterr().err
    assert cli.main(["bench", "--methods", "ar,adaptive"]) == 2  # asked for by name: refused, not dropped


def test_bench_json_keeps_stdout_pure_json_while_progress_shows_on_stderr(bf16_cpu, monkeypatch, tmp_path, capsys):
    from treegraft_lab.tiny import tiny_pair

    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"question_id": "q", "category": "c", "turns": ["w1 w2 w1 w2 w1 w2 w1"]}))
    monkeypatch.setattr(cmd, "load_pair_from_args", lambda args, require_mid=True: tiny_pair(scale=4.0))
    assert cli.main(["bench", "--prompts", str(path), "--methods", "ar,small,adaptive", "--max-new-tokens", "4",
                     "--budget", "4", "--warmup-tokens", "2", "--out", str(tmp_path / "run"), "--json"]) == 0
    out, err = capsys.readouterr()
    assert set(json.loads(out)) == {"overall", "per_category", "specbench", "spread", "same_decisions"}  # stdout: one object
    assert "bench: 100%" in err and "6/6" in err  # the progress bar (2 methods x 3 repeats), on stderr
    assert "bench: float32, prune=value: the settings" in err  # and the note on the settings chosen


def test_notebooks_load_the_pair_in_the_dtype_its_scheduler_was_trained_for(bf16_cpu, monkeypatch, capsys):
    from treegraft_lab import workbench as wb

    seen = []
    monkeypatch.setattr(models, "load_pair", lambda *a, **k: seen.append(k) or object())
    wb.params("smollm2-pocket", "auto", "wall")
    wb.cached_pair.__wrapped__("smollm2-pocket", "auto")
    assert seen[0]["dtype"] == "float32"
    out = capsys.readouterr().out
    # the dtype only: the runs' own captions name their pruning (the sample run is top-k, the scheduler's value)
    assert "note: the pair loads in float32, the dtype its adaptive scheduler cpu-float32-value-lookup-ngram+recycling was trained " \
           "for (bfloat16, this device's default, has none)" in out and "prune=" not in out
    assert "adaptive scheduler for smollm2-pocket: " in repr(wb.current())


def test_notebooks_keep_auto_where_it_has_a_scheduler(monkeypatch):
    from treegraft_lab import workbench as wb

    monkeypatch.setattr(models, "cpu_flags", lambda: {"avx2"})
    monkeypatch.setattr(models, "cpu_supports_bf16", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert wb.pair_dtype("smollm2-pocket", "auto") == "auto"  # auto is float32 here: it has one


def test_demo_on_a_bf16_cpu_loads_the_dtype_its_scheduler_was_trained_for(bf16_cpu, monkeypatch, capsys):
    seen = []

    def capture(*a, **k):
        seen.append(k)
        raise Stop

    monkeypatch.setattr(models, "load_pair", capture)
    with pytest.raises(Stop):
        cli.main(["demo"])
    assert seen[0]["dtype"] == "float32"
    assert "note: float32, prune=value: the settings the adaptive scheduler cpu-float32-value-lookup-ngram+recycling" \
           in capsys.readouterr().out
