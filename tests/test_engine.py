"""The offline stage on Ray (`treegraft_lab.engine`): units return in order, each stored in the journal as it
finishes; a worker killed mid-unit is replaced and its unit run again, so a collection equals a one-process run's."""

from __future__ import annotations

import os
import signal
import threading
import time

import pandas as pd
import pytest

import treegraft_lab
from treegraft_lab import cli, engine, resume
from treegraft_lab.engine import Engine, PairLoader, Unit
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.tiny import noisy_pair


def square(x: int) -> list[int]:
    return [x * x]


def test_units_run_here_in_order_and_each_is_stored_as_it_finishes(tmp_path):
    stored = []
    journal = resume.Journal.open(tmp_path / "j", {}, "cmd", False, "test", "--out")
    out = engine.run([Unit(f"u/{i}", square, (i,)) for i in range(4)], Engine(workers=0), journal, progress=False,
                     on_done=lambda u, r: stored.append((u.key, journal.count())))
    assert out == [[0], [1], [4], [9]] and stored == [("u/0", 1), ("u/1", 2), ("u/2", 3), ("u/3", 4)]
    again = resume.Journal.open(tmp_path / "j", {}, "cmd", True, "test", "--out")  # resumed: nothing runs again
    assert engine.run([Unit(f"u/{i}", pow, (i, 0)) for i in range(4)], Engine(workers=0), again, progress=False) == out


def test_engine_flags_are_checked_in_one_line():
    with pytest.raises(TreeGraftError, match="give workers >= 0"):
        Engine(workers=-1)
    args = type("A", (), {"no_ray": False, "workers": 0, "address": None})()
    with pytest.raises(TreeGraftError, match="--no-ray to run in this process"):
        engine.from_args(args)
    assert engine.from_args(type("A", (), {"no_ray": True, "workers": None, "address": None})()).workers == 0
    assert "Ray workers" in Engine(workers=2).words() and Engine(workers=0).words() == "in one process, without Ray"


PROMPTS = [{"question_id": f"r{i}", "category": "code", "turns": [[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 1 + i, 2, 3, 5, 6]]}
           for i in range(4)]


def kill_one_running_unit(stop: threading.Event, killed: list[int]) -> None:
    """Kill (SIGKILL) the first Ray worker seen running a unit (its process title "ray::_task")."""
    import psutil

    while not stop.is_set() and not killed:
        for p in psutil.process_iter(["pid", "cmdline"]):
            if " ".join(p.info["cmdline"] or []).startswith("ray::_task"):
                time.sleep(0.3)  # mid-unit: the tiny pair loaded, its replays under way
                try:
                    os.kill(p.info["pid"], signal.SIGKILL)
                    killed.append(p.info["pid"])
                except ProcessLookupError:
                    continue
                return
        time.sleep(0.02)


@pytest.mark.slow
def test_regime_collect_on_two_ray_workers_with_one_killed_mid_run_stores_the_one_process_replays(tmp_path, monkeypatch,
                                                                                                  capsys):
    from treegraft_lab.commands import regime as regime_cmd

    monkeypatch.setattr(treegraft_lab, "load_prompts", lambda *a, **k: PROMPTS)
    monkeypatch.setattr(treegraft_lab, "load_pair", lambda *a, **k: noisy_pair())  # the one-process run
    monkeypatch.setattr(regime_cmd, "pair_loader", lambda *a: PairLoader(build=noisy_pair))  # each Ray worker's
    args = ["regime", "--collect", "--max-new", "10", "--ratios", "0.1,0.6", "--schedules", "all-small,all-mid,oracle"]
    assert cli.main([*args, "--no-ray", "--replays", str(tmp_path / "one")]) == 0
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=kill_one_running_unit, args=(stop, killed), daemon=True)
    killer.start()
    try:
        assert cli.main([*args, "--workers", "2", "--replays", str(tmp_path / "ray")]) == 0
    finally:
        stop.set()
        killer.join()
    assert killed, "no Ray worker was seen running a unit"
    err = capsys.readouterr().err
    assert "replay (prompts) (2 Ray workers)" in err and "4/4" in err  # one bar of units, with the worker count
    one, two = (pd.read_parquet(tmp_path / n / "replays.parquet") for n in ("one", "ray"))
    pd.testing.assert_frame_equal(one, two)
    assert not (tmp_path / "ray" / "partial").exists()  # complete: the journal is gone


@pytest.mark.slow
def test_learning_through_ray_gives_the_one_process_walks_and_capture_rows():
    from treegraft_lab import regime
    from treegraft_lab.config import GROWTHS, DecodeConfig
    from treegraft_lab.costs import DeviceProfile
    from treegraft_lab.training import imitation as im

    pair = noisy_pair()
    cheap_mid = DeviceProfile("cheap-mid", {1: 5.0, 16: 20.0, 64: 80.0}, {1: 0.2, 8: 0.5, 64: 2.0}, small_ms=0.3)
    cfg = DecodeConfig(depth=5, width=4, children=4, budget=24, prune="topk", small="ngram", **GROWTHS["lookup"])
    prompts = PROMPTS[:3]
    df = regime.collect(pair, prompts, cfg, max_new=12, progress=False, profile=cheap_mid)
    held = im.prompts_of(regime.split(df, cfg.depth), im.context_signals(pair, prompts, df))
    profiles = regime.ratio_profiles(cheap_mid, [0.05, 0.5])
    kw = dict(folds=3, dagger=0, signal_sets=("tree+costs",), log=lambda s: None)
    one_walks, one_rows = im.learn(held, [], profiles, cfg, **kw)
    ray_walks, ray_rows = im.learn(held, [], profiles, cfg, engine=Engine(workers=2), **kw)
    pd.testing.assert_frame_equal(one_walks, ray_walks)
    assert one_rows == ray_rows and len(one_rows) == 3  # two learners and the hindsight diagnostic


@pytest.mark.slow
def test_collect_shards_on_ray_equal_the_same_shards_collected_one_after_another(tmp_path, monkeypatch, capsys):
    import functools
    import json

    from treegraft_lab.commands import collect as collect_cmd
    from treegraft_lab.tiny import tiny_pair

    words = [" ".join(f"w{j % k}" for j in range(n)) for k, n in ((5, 24), (3, 20), (4, 22), (6, 21))]
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"question_id": f"q{i}", "category": "code", "turns": [w], "split": "train"}) + "\n"
                            for i, w in enumerate(words)))
    monkeypatch.setattr(collect_cmd, "pair_loader", lambda args: PairLoader(build=functools.partial(tiny_pair, scale=4.0)))
    args = ["collect", "--prompts", str(path), "--shards", "2", "--states", "2", "--max-new", "8", "--known-answer",
            "--profile", "a100-paper", "--depth", "3", "--width", "4", "--children", "4", "--budget", "16", "--quiet"]
    assert cli.main([*args, "--no-ray", "--out", str(tmp_path / "one")]) == 0
    assert cli.main([*args, "--workers", "2", "--out", str(tmp_path / "ray")]) == 0
    one, two = (pd.read_parquet(tmp_path / n / "trajectories.parquet") for n in ("one", "ray"))
    keep = [c for c in one.columns if not c.startswith("meas_")]
    assert one["qid"].nunique() == 4 and len(one) > 0
    pd.testing.assert_frame_equal(one[keep], two[keep])
    assert not list((tmp_path / "ray").glob("*.partial"))  # every shard's journal closed
    capsys.readouterr()
