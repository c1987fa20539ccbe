"""The showcase setting (`presets.SHOWCASE_PROFILE`): where WHEN pays, named once; TreeGraft adaptive there is the
pair's family scheduler; the committed WHEN table holds adaptive calling the mid drafter and beating both endpoints."""

from __future__ import annotations

import json
import types

import pandas as pd
import pytest

from treegraft_lab import DecodeConfig, cli, costs, regime
from treegraft_lab.paths import DATA_DIR
from treegraft_lab.presets import SHOWCASE_CONFIG, SHOWCASE_PROFILE
from treegraft_lab.schedule import adaptive
from treegraft_lab.schedule.choice import adaptive_words, treegraft_adaptive

POCKET = types.SimpleNamespace(name="smollm2-pocket")


def test_the_showcase_config_is_the_regime_maps_settings_on_the_showcase_profile():
    assert DecodeConfig(**SHOWCASE_CONFIG) == regime.map_config("lookup", SHOWCASE_PROFILE)


def test_adaptive_loads_the_family_scheduler_where_no_single_profile_one_is_trained():
    cfg = DecodeConfig(**SHOWCASE_CONFIG)
    folder = adaptive.artifact_folder(POCKET, cfg, costs.load(SHOWCASE_PROFILE))
    assert folder.name == "family-topk-lookup" and (folder / "scheduler.json").is_file()
    assert treegraft_adaptive("smollm2-pocket", SHOWCASE_PROFILE, cfg) == folder
    said = adaptive_words("smollm2-pocket", SHOWCASE_PROFILE, cfg, folder)
    assert "is family-topk-lookup, the family scheduler" in said
    policy = adaptive.AdaptivePolicy.for_pair(POCKET, DecodeConfig(schedule="adaptive", **SHOWCASE_CONFIG),
                                              costs.load(SHOWCASE_PROFILE))
    assert policy.artifact.meta["profile_class"] == "family"


def test_a_single_profile_scheduler_is_preferred_where_one_is_trained():
    cfg = DecodeConfig(clock="a100-paper", prune="topk")  # the default trees: n-gram + recycling
    assert adaptive.artifact_folder(POCKET, cfg, costs.load("a100-paper")).name == "a100-paper-topk-lookup-ngram+recycling"


def test_with_family_falls_back_only_to_a_family_of_the_same_settings(tmp_path):
    def trained(name):
        (tmp_path / name).mkdir()
        (tmp_path / name / "scheduler.json").write_text("{}")

    assert adaptive.with_family(tmp_path, "p", "topk-lookup") == tmp_path / "p-topk-lookup"  # none: its own, empty
    trained("family-topk-lookup")
    assert adaptive.with_family(tmp_path, "p", "topk-lookup") == tmp_path / "family-topk-lookup"
    assert adaptive.with_family(tmp_path, "p", "value-lookup") == tmp_path / "p-value-lookup"  # another pruning: none
    trained("p-topk-lookup")
    assert adaptive.with_family(tmp_path, "p", "topk-lookup") == tmp_path / "p-topk-lookup"


def test_demo_out_without_when_is_refused_in_one_line(capsys):
    assert cli.main(["demo", "--out", "somewhere"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--out writes the WHEN table: use it with --when" in err and len(err.splitlines()) == 1


def run_of(steps: list[tuple], tree: list[tuple]):
    """A recorded run's step and tree tables, only the columns `called_round` reads."""
    return types.SimpleNamespace(steps=pd.DataFrame(steps, columns=["run", "round", "call_mid"]),
                                 tree=pd.DataFrame(tree, columns=["run", "round", "parent", "accepted", "drafted_by"]))


def test_called_round_prefers_a_mixed_schedule_whose_mid_call_drafted_an_accepted_node_only_it_drafted():
    from treegraft_lab.viz import called_round

    steps = [(0, 0, False), (0, 1, True), (0, 2, True), (0, 2, False), (0, 3, True), (0, 4, True), (0, 4, False)]
    tree = [(0, 0, -1, True, "root"), (0, 0, 0, True, "small"),
            (0, 1, -1, True, "root"), (0, 1, 0, True, "both"),  # round 1 called, its accepted node both drafted
            (0, 2, -1, True, "root"), (0, 2, 0, False, "mid"), (0, 2, 0, True, "small"),  # its mid node rejected
            (0, 3, -1, True, "root"), (0, 3, 0, True, "mid"),  # all-mid, a mid-only node accepted
            (0, 4, -1, True, "root"), (0, 4, 0, True, "small"), (0, 4, 1, True, "mid")]  # mixed, the same
    r, why = called_round(run_of(steps, tree))
    assert r == 4 and why.startswith("round 4: the scheduler calls the mid drafter at some steps, skips it at others")
    assert called_round(run_of(steps[:5], tree[:9]))[0] == 3  # else any round with a call whose mid-only node paid
    assert called_round(run_of(steps[:4], tree[:7]))[0] == 1  # else one whose accepted node the mid drafter drafted too
    assert called_round(run_of([(0, 0, False)], tree[:2])) is None


def showcase_rows() -> dict[str, dict[str, dict]]:
    data = json.loads((DATA_DIR / "showcase" / "smollm2-pocket-a100-paper@0.1" / "showcase.json").read_text())
    return data, {k: {r["schedule"]: r for r in rows} for k, rows in data["rows"].items()}


def test_the_committed_when_table_has_adaptive_calling_the_mid_drafter_and_beating_both_endpoints():
    data, rows = showcase_rows()
    assert data["profile"] == SHOWCASE_PROFILE and data["adaptive_scheduler"].endswith("family-topk-lookup")
    assert all(r["lossless"] for by in rows.values() for r in by.values())
    beats = [k for k, by in rows.items()
             if by["adaptive"]["mid_calls_per_round"] > 0
             and by["adaptive"]["speedup"] > max(by["small"]["speedup"], by["mid"]["speedup"])]
    assert len(beats) >= 2, rows  # on most of the three demo prompts
    assert all(by["oracle"]["speedup"] >= max(by["small"]["speedup"], by["mid"]["speedup"]) for by in rows.values())


@pytest.mark.parametrize("who", ["adaptive", "learned"])
def test_the_showcase_sentence_counts_wins_and_calls_from_the_rows(who):
    from treegraft_lab.commands.demo import showcase_sentence

    data, rows = showcase_rows()
    wins = sum(by[who]["speedup"] > max(by["small"]["speedup"], by["mid"]["speedup"]) for by in rows.values())
    calls = sum(by[who]["mid_calls_per_round"] for by in rows.values()) / len(rows)
    said = showcase_sentence(data["rows"]).lower()
    assert f"{who} made {calls:.2f} mid calls a round and beat both endpoints on {wins} of {len(rows)} prompts" in said


def test_a_profile_says_its_mid_cost_ratio_only_when_its_name_sets_one():
    from dataclasses import replace

    assert "mid drafter at T_mid / T_tgt = 0.1" in costs.profile_name(costs.load(SHOWCASE_PROFILE))
    measured = replace(costs.load("a100-paper"), name="smollm2-pocket@cpu-387188")  # a measured profile's cache name
    assert "T_mid / T_tgt" not in costs.profile_name(measured)


@pytest.mark.slow
def test_the_demos_when_table_has_adaptive_calling_the_mid_drafter_and_beating_both_endpoints(smollm2_dir, capsys):
    """`showcase` (what `treegraft-lab demo` prints after its speed tables) on the demo's prompt "in between":
    every row lossless, a progress bar while it decodes, adaptive (the family scheduler there) making mid calls
    and beating all-small and all-mid, and the printed row and sentence those of the returned rows."""
    from treegraft_lab.commands.demo import showcase, showcase_sentence
    from treegraft_lab.models import load_pair
    from treegraft_lab.presets import DEMO_PROMPTS

    out = showcase(load_pair("smollm2-pocket", dtype="float32"), {"in between": DEMO_PROMPTS["in between"]}, 64)
    printed, err = capsys.readouterr()
    by = {r["schedule"]: r for r in out["in between"]}
    assert all(r["lossless"] for r in by.values()) and "WHEN table" in err
    assert by["adaptive"]["mid_calls_per_round"] > 0
    assert by["adaptive"]["speedup"] > max(by["small"]["speedup"], by["mid"]["speedup"])
    assert f"{by['adaptive']['speedup']:.2f}x ({by['adaptive']['mid_calls_per_round']:.2f})" in printed
    assert showcase_sentence(out) in printed and "here family-topk-lookup, the family scheduler" in printed


def test_the_demo_names_each_prompt_by_its_first_line_cut_at_100_characters():
    from treegraft_lab.commands.demo import PROMPTS, prompt_lines

    long = "x" * 120
    assert prompt_lines({"poem": "A short poem.", "code": "def f():\n    return 1", "long": long}) == [
        "prompt (poem): A short poem.", "prompt (code): def f(): ...", f"prompt (long): {'x' * 100} ..."]
    assert [line.split(":")[0] for line in prompt_lines(PROMPTS)] == [f"prompt ({k})" for k in PROMPTS]
