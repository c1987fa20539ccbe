"""What notebook 07 prints around the paper's tables (treegraft_lab.viz.paper_tables)."""

from __future__ import annotations

import json
import math

import pandas as pd


def test_a_schedule_without_mid_calls_is_named_as_the_all_small_trees_it_decoded():
    from treegraft_lab.viz.paper_tables import method_labels

    overall = pd.DataFrame({"mid_calls_per_round": [0.0, 0.0, 0.7]}, index=["small", "adaptive", "10101"])
    labels = method_labels(overall, {"small": "All Small", "adaptive": "TreeGraft adaptive", "10101": "fixed",
                                     "csd": "CSD"})
    assert labels == {"small": "All Small", "adaptive": "TreeGraft adaptive (= all-small, 0 mid calls)",
                      "10101": "fixed", "csd": "CSD"}


def test_missing_bars_are_marked_not_run_at_their_slot():
    from treegraft_lab.viz.paper_tables import mark_not_run
    from treegraft_lab.viz.stats import figure

    long = pd.DataFrame({"label": ["a", "a", "b", "b"], "source": ["paper", "ours"] * 2,
                         "speedup": [1.2, math.nan, 1.4, 1.1]})
    fig, (ax,) = figure()
    assert mark_not_run(ax, long, "label", "source", "speedup") == 1
    (text,) = ax.texts
    assert text.get_text() == "not run" and abs(text.get_position()[0] - 0.2) < 1e-9  # slot "a", second hue


def test_bench_card_names_machine_date_and_that_one_repeat_has_no_spread(tmp_path):
    from treegraft_lab.viz.paper_tables import bench_card

    meta = {"hardware": {"cpu": "Intel Xeon", "cores": 2, "torch_threads": 1, "device": "cpu", "dtype": "float32"},
            "finished": "2026-12-03 05:00:00", "settings": {"prompts": 12, "max_new_tokens": 64, "repeats": 1,
                                                            "model_on": ["a100-paper"], "model_only": True, "growth": "release"}}
    (tmp_path / "results.json").write_text(json.dumps({"meta": meta}))
    card = bench_card(tmp_path)
    for part in ("Intel Xeon", "2026-12-03", "12 prompts x 64 tokens", "clocks: a100-paper", "growth release", "no spread"):
        assert part in card, (part, card)
    meta["settings"]["repeats"] = 3
    (tmp_path / "results.json").write_text(json.dumps({"meta": meta}))
    assert "3 repeats" in bench_card(tmp_path)


def test_the_verdict_names_what_did_not_run_and_prints_no_nan():
    from treegraft_lab.viz.paper_tables import adaptive_verdict

    ov = pd.DataFrame({"speedup": [2.0, 1.5, 2.2], "prompts": [6, 6, 6], "mid_calls_per_round": [0.0, 0.7, 1.0]},
                      index=["small", "adaptive", "oracle"])
    text = adaptive_verdict(ov, "a100-paper")
    assert "nan" not in text and "does not beat all-small (2.00x)" in text
    assert "all-mid was not run (not among this benchmark's methods)" in text
    assert "oracle (2.20x) is 47% above adaptive" in text and "6 prompts" in text and "mid call" not in text
    ov.loc["adaptive", ["speedup", "mid_calls_per_round"]] = [2.0, 0.0]
    text = adaptive_verdict(ov, "a100-paper")
    # what made no mid call is adaptive, said beside adaptive's own number, before the method that did not run
    assert "adaptive (2.00x) made no mid call, so it decoded the all-small trees, and does not beat all-small" in text
    assert text.index("made no mid call") < text.index("all-mid was not run")
    assert "did not run" in adaptive_verdict(ov.drop(index="adaptive"), "a100-paper")


def test_the_growth_table_has_a_row_per_rule_of_the_committed_run():
    from treegraft_lab.paths import DATA_DIR
    from treegraft_lab.viz.paper_tables import growth_markdown

    doc = json.loads((DATA_DIR / "growth" / "growth-compare.json").read_text())
    lines = growth_markdown(doc["rows"]).splitlines()
    assert [line.split(" | ")[0].lstrip("| ") for line in lines[2:]] == [r["rule"] for r in doc["rows"]]
    assert {r["rule"] for r in doc["rows"]} >= {"release", "full", "authors' release (data/reference)"}


def test_the_release_ablation_table_says_not_run_where_its_benchmark_lacks_a_method():
    from treegraft_lab.paths import DATA_DIR
    from treegraft_lab.viz.paper_tables import ablation_markdown

    table = ablation_markdown(DATA_DIR / "bench" / "smollm2-pocket-a100-release-ablation")
    assert "| TreeGraft adaptive | not run |" in table  # no scheduler for release-grown trees: said, not blank
