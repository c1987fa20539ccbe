"""One TreeGraft adaptive: for a pair, profile class, pruning rule, tree growth and small drafter, "TreeGraft adaptive"
is the one artifact `DecodeConfig(schedule="adaptive")` loads; every other scheduler is named for what it is (the
family scheduler, the map scheduler, a single-profile scheduler). And a scheduler's field is read from its own
decisions: one that never (or always) calls the mid drafter is said to have no boundary to show."""

from __future__ import annotations

import types

import numpy as np
import pandas as pd
import pytest

from treegraft_lab import DecodeConfig, costs, regime
from treegraft_lab.config import preset
from treegraft_lab.paths import DATA_DIR, SCHEDULER_DIR
from treegraft_lab.schedule.adaptive import artifact_folder
from treegraft_lab.schedule.choice import adaptive_words, scheduler_kind, treegraft_adaptive
from treegraft_lab.viz.boundary import Field, field

POCKET = SCHEDULER_DIR / "smollm2-pocket"
MAP_FOLDER = DATA_DIR / "regime" / "smollm2-pocket-lookup-topk"  # the regime map's replays and stored decodes
BENCH = DATA_DIR / "bench" / "smollm2-pocket-a100-lookup"  # the README's modelled column


def test_treegraft_adaptive_is_the_artifact_a_decoder_with_schedule_adaptive_loads():
    a100 = costs.load("a100-paper")
    pair = types.SimpleNamespace(name="smollm2-pocket")
    for cfg in (regime.map_config("lookup", "a100-paper"), preset("speed", prune="topk", clock="a100-paper"),
                preset("full", clock="a100-paper")):
        assert treegraft_adaptive("smollm2-pocket", "a100-paper", cfg) == artifact_folder(pair, cfg, a100)
    assert treegraft_adaptive("smollm2-pocket", "a100-paper", regime.map_config("lookup")).name == "a100-paper-topk-lookup"
    speed = treegraft_adaptive("smollm2-pocket", "a100-paper", preset("speed", prune="topk"))
    assert speed.name == "a100-paper-topk-lookup-ngram+recycling"


def test_every_scheduler_artifact_is_named_for_what_it_is():
    assert scheduler_kind(POCKET / "a100-paper-topk-lookup") == "single-profile scheduler for a100-paper"
    assert scheduler_kind(POCKET / "cpu-float32-value") == "single-profile scheduler for cpu-float32"
    family = scheduler_kind(POCKET / "family-topk-lookup")
    assert family.startswith("family scheduler (trained over 16 device profiles") and "cost ratio" in family
    mapped = scheduler_kind(POCKET / "map-topk-lookup")
    assert mapped.startswith("map scheduler (trained over 3 mid drafters and 16 device profiles") and "agreement" in mapped


def test_adaptive_words_name_the_artifact_and_say_when_none_is_trained():
    cfg = regime.map_config("lookup", "a100-paper")
    said = adaptive_words("smollm2-pocket", "a100-paper", cfg, treegraft_adaptive("smollm2-pocket", "a100-paper", cfg))
    assert said.startswith("TreeGraft adaptive for smollm2-pocket on a100-paper (prune=topk, growth lookup, small drafter "
                           "ngram) is a100-paper-topk-lookup, the single-profile scheduler for a100-paper")
    none = DecodeConfig(clock="a100-paper", prune="value")
    said = adaptive_words("smollm2-pocket", "a100-paper", none, treegraft_adaptive("smollm2-pocket", "a100-paper", none))
    assert "no scheduler is trained (a100-paper-value-lookup-ngram+recycling holds none)" in said


def test_the_stored_decodes_name_the_artifacts_they_ran_and_one_of_them_is_treegraft_adaptive():
    stored = regime.stored_schedulers(MAP_FOLDER)
    assert {n: f.name for n, f in stored.items()} == {"adaptive-family": "family-topk-lookup",
                                                      "adaptive-single": "a100-paper-topk-lookup"}  # a rule is no folder
    base, cfg = costs.load("a100-paper"), regime.map_config("lookup")
    assert regime.adaptive_name(MAP_FOLDER, "smollm2-pocket", base, cfg) == "adaptive-single"
    assert regime.adaptive_name(MAP_FOLDER, "smollm2-pocket", base, preset("speed", prune="topk")) is None


def test_which_adaptive_says_from_the_stored_data_what_each_scheduler_decides():
    base, cfg = costs.load("a100-paper"), regime.map_config("lookup")
    runs = regime.load_decodes(MAP_FOLDER, "a100-paper")
    text = regime.which_adaptive(MAP_FOLDER, "smollm2-pocket", base, cfg, runs, 0.6, BENCH)
    at = regime.by_ratio(runs[runs["ratio"] == 0.6]).set_index("schedule")
    single, family = at.loc["adaptive-single"], at.loc["adaptive-family"]
    assert text.startswith("**TreeGraft adaptive** for smollm2-pocket on a100-paper")
    assert (f"Its decodes on this map are `adaptive-single`: at T_mid / T_tgt 0.6 it makes "
            f"{single['mid_calls_per_round']:.2f} mid calls a round ({single['speedup']:.2f}x plain decoding)") in text
    assert ("`adaptive-family` is family-topk-lookup, the family scheduler (trained over 16 device profiles; the cost "
            "ratio T_mid / T_tgt is an input), not TreeGraft adaptive for any one profile") in text
    assert f"it makes {family['mid_calls_per_round']:.2f} mid calls a round ({family['speedup']:.2f}x" in text
    b = regime.bench_calls(BENCH)
    assert b["settings"]["small"] == "ngram+recycling" and b["clock"] == "a100-paper"
    assert (f"have their own TreeGraft adaptive on a100-paper, a100-paper-topk-lookup-ngram+recycling: on the "
            f"{b['prompts']} eval prompts of `{BENCH.name}` it made {b['mid_calls']} mid calls in {b['rounds']} rounds") in text


def test_the_most_mixed_ratio_is_where_the_calls_are_nearest_half_the_draft_steps():
    runs = pd.DataFrame({"schedule": ["s"] * 3 + ["t"], "ratio": [0.1, 0.3, 1.0, 0.3],
                         "mid_calls": [40, 22, 0, 50], "rounds": [10, 10, 10, 10]})
    assert regime.mixed_ratio(runs, "s") == (0.3, pytest.approx(0.44))
    assert regime.mixed_ratio(runs, "absent") is None and regime.mixed_ratio(runs.iloc[:0], "s") is None


PLANES = (("root_match", "ngram_match"), ("score_spread", "recent_hit_rate"), ("t_tgt_ms", "t_mid_ms"))


def test_a_scheduler_that_never_calls_is_said_to_have_no_boundary_to_show():
    flat = Field(35, 0, tuple((sx, sy, -9.0, -1.0) for sx, sy in PLANES))
    assert flat.uniform and flat.one_sided
    assert flat.text("the scheduler", "On a100-paper") == (
        "On a100-paper, the scheduler never calls the mid drafter: it skips at all 35 decisions it was asked, and g < 0 "
        "on every plane, so there is no boundary to show.")
    costs_cross = Field(35, 0, (*flat.planes[:2], ("t_tgt_ms", "t_mid_ms", -9.0, 4.0)))
    assert costs_cross.one_sided and costs_cross.crossing() == [("t_tgt_ms", "t_mid_ms")]
    assert "g < 0 on every plane of its signals, so there is no boundary to show at this profile's costs; only the plane " \
           "of the two costs crosses g = 0" in costs_cross.text("the scheduler", "On a100-paper")
    always = Field(8, 8, tuple((sx, sy, 1.0, 9.0) for sx, sy in PLANES))
    assert always.one_sided and "always calls the mid drafter: it calls at all 8 decisions it was asked, and g > 0 on " \
                                "every plane" in always.text("it", "Here")


def test_a_scheduler_whose_decisions_are_mixed_or_whose_signals_cross_is_not_one_sided():
    mixed = Field(10, 6, tuple((sx, sy, -3.0, 5.0) for sx, sy in PLANES))
    assert not mixed.uniform and not mixed.one_sided
    assert mixed.text("it", "Here") == ("Here, it calls the mid drafter at 6 of its 10 decisions (60%); g changes sign on "
                                        "3 of 3 planes: the black line is where the decision flips.")
    beyond = Field(10, 0, (("root_match", "ngram_match", -3.0, 2.0), *((sx, sy, -3.0, -1.0) for sx, sy in PLANES[1:])))
    assert beyond.uniform and not beyond.one_sided
    assert "though g changes sign on 1 of 3 planes" in beyond.text("it", "Here")
    assert "no decision to read a boundary from" in Field(0, 0, ()).text("it", "Here")


@pytest.mark.parametrize("margin, never", [(lambda x: -5.0 - 0.01 * x[:, 0], True), (lambda x: x[:, 11] - 1.0, False)])
def test_the_field_of_recorded_decisions_counts_what_the_scheduler_was_asked_and_where_g_changes_sign(tmp_path, margin,
                                                                                                      never):
    from tests.test_scheduler import make_artifact
    from treegraft_lab.schedule.adaptive import AdaptivePolicy
    from treegraft_lab.schedule.artifact import load

    make_artifact(tmp_path, margin=margin)
    policy = AdaptivePolicy(load(tmp_path))
    art, rng = policy.artifact, np.random.default_rng(1)
    rows = []
    for i in range(30):
        x = np.asarray(art.x_mean) + rng.normal(size=len(art.inputs)) * np.asarray(art.x_std)
        x[1:3] = np.abs(x[1:3]) + 1.0  # positive costs
        g = 1000.0 * policy.score(x.tolist()) if i >= 5 else np.nan  # the first round's five steps: not asked
        rows.append({**dict(zip(art.inputs, x)), "run": 0, "round": i // 5, "step": i % 5 + 1, "g": g,
                     "call": bool(g > 0), "recorded g": g, "recorded call": bool(g > 0)})
    inputs = pd.DataFrame(rows)
    sig = art.signals
    planes = [(sig[0], sig[1]), (sig[2], sig[3]), (sig[4], sig[5]), ("t_tgt_ms", "t_mid_ms")]
    f = field(policy, inputs, 2, planes)
    assert f.decisions == 25 and f.calls == int((inputs["g"] > 0).sum()) and len(f.planes) == 4
    assert f.one_sided == never and ("never calls the mid drafter" in f.text("it", "Here")) == never


def test_a_schedulers_decisions_are_said_at_the_asked_ratio_and_across_the_ratios_it_was_decoded_at():
    s = pd.DataFrame({"schedule": ["a", "a", "a", "b"], "ratio": [0.6, 0.02, 0.2, 0.6],
                      "mid_calls_per_round": [0.5, 2.0, 1.25, 0.0], "speedup": [1.5, 2.25, 1.75, 1.1]})
    assert regime.calls_at(s, "a", 0.60001) == 0.5 and regime.calls_at(s, "a", 0.3) is None  # within 0.05%
    assert regime.decided_at(s, "a", 0.6) == "at T_mid / T_tgt 0.6 it makes 0.50 mid calls a round (1.50x plain decoding)"
    assert regime.decided_at(s, "b", 0.2) == "it was not decoded at T_mid / T_tgt 0.2"
    assert regime.calls_span(s, "a") == "; it reads the ratio, and its calls follow it: 2.00 a round at 0.02, 0.50 at 0.6"
    assert regime.calls_span(s, "b") == ""  # one ratio: nothing to follow


def test_the_boundary_title_says_which_steps_the_scheduler_was_not_asked_at():
    from treegraft_lab.viz.boundary import left_out_words, one_sign_note

    assert left_out_words(2, True, 3) == "<br><sup>2 first-round step(s) left out: the scheduler is not asked there</sup>"
    assert left_out_words(0, True, 3) == ""
    assert left_out_words(0, False, 3).startswith("<br><sup>no step-3 decision was asked in this run (first round only)")
    note = one_sign_note("root_match", "ngram_match", np.array([[0.5, 1.0], [2.0, 3.0]]))
    assert "g stays above 0 over the whole plane (0.50 to 3.00 tokens/s), so the scheduler calls everywhere there" in note
    assert "stays below 0" in one_sign_note("root_match", "ngram_match", -np.ones((2, 2))) and "skips" in \
        one_sign_note("root_match", "ngram_match", -np.ones((2, 2)))
