"""Notebook 07's logic (treegraft_lab.viz.paper_bench): which benchmark it reads and the paper's layouts filled with ours."""

from __future__ import annotations

import json
import math

import pandas as pd


def write_bench(folder, finished: str, methods: dict[str, list[str]]) -> None:
    """A minimal recorded benchmark: results.json with its finish time, overall rows per clock."""
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"meta": {"finished": finished}}))
    rows = [{"clock": c, "category": "overall", "method": m, "speedup": 1.0} for c, ms in methods.items() for m in ms]
    pd.DataFrame(rows).to_parquet(folder / "summary.parquet")


def test_the_newest_benchmark_is_chosen_by_its_recorded_finish_time_and_must_hold_small_and_adaptive(tmp_path):
    from treegraft_lab.viz import paper_bench as pb

    write_bench(tmp_path / "a-late", "2026-12-03 10:00:00", {"wall": ["small", "adaptive"]})
    write_bench(tmp_path / "z-early", "2026-12-01 10:00:00", {"wall": ["small", "adaptive"], "a100-paper": ["small", "adaptive"]})
    write_bench(tmp_path / "m-newest", "2026-12-04 10:00:00", {"wall": ["small"]})
    found = pb.recorded(tmp_path)
    assert [p.name for p in found] == ["z-early", "a-late", "m-newest"]
    assert pb.newest(found, "wall").name == "a-late"
    assert pb.newest(found, "a100-paper").name == "z-early"
    assert pb.newest(found, "cpu") is None


def test_the_main_layout_puts_ours_beside_the_papers_rows_with_plain_decoding_first():
    from treegraft_lab import paper
    from treegraft_lab.viz import paper_bench as pb

    rows = pd.DataFrame({"speedup": [2.0, 0.5, 2.1, 2.4], "prompts": [6, 6, 6, 6]}, index=["small", "mid", "adaptive", "oracle"])
    main = pb.main_layout(rows, "ours")
    assert list(main.index) == [p[0] for p in paper.MAIN] + ["ours"] and main.columns[0] == "Plain decoding"
    assert main.loc["ours", ["All Small", "All Mid", "TreeGraft", "n"]].tolist() == [2.0, 0.5, 2.1, 6]
    assert "Oracle" not in main
    with_oracle = pb.main_layout(rows, "ours", oracle=True)
    assert with_oracle.loc["ours", "Oracle"] == 2.4 and math.isnan(with_oracle.iloc[0]["Oracle"])
    assert "Oracle" not in pb.main_layout(rows.drop(index="oracle"), "ours", oracle=True)


def test_the_ablation_layout_labels_a_schedule_without_mid_calls_and_leaves_unrun_methods_empty():
    from treegraft_lab.paths import DATA_DIR
    from treegraft_lab.viz import paper_bench as pb

    folder = DATA_DIR / "bench" / "smollm2-pocket-a100-release-ablation"
    rows = pb.overall(pb.read_summary(folder), "a100-paper")
    abl = pb.ablation_layout(folder, rows, "a100-paper")
    assert abl["ours n"].eq(12).all()
    assert math.isnan(abl.loc["TreeGraft adaptive", "ours speedup"])  # not run on the release's trees
    assert abl.loc["TreeGraft fixed (10101)", "ours speedup"] == rows.loc["10101", "speedup"]
    assert abl.loc["TreeGraft fixed (10101)", "ours A"] == pb.acceptance(folder, "a100-paper")["10101"]


def test_the_release_ablation_is_none_without_its_benchmark_and_sets_both_growths_side_by_side(tmp_path):
    from treegraft_lab.paths import DATA_DIR
    from treegraft_lab.viz import paper_bench as pb

    default = DATA_DIR / "bench" / "smollm2-pocket-a100-modelled"
    drows = pb.overall(pb.read_summary(default), "a100-paper")
    assert pb.release_ablation(tmp_path / "missing", drows, default) is None
    rel = pb.release_ablation(DATA_DIR / "bench" / "smollm2-pocket-a100-release-ablation", drows, default)
    assert rel.loc["CSD", "default growth speedup"] == drows.loc["csd", "speedup"]
    assert rel.loc["CSD", "release preset speedup"] != rel.loc["CSD", "default growth speedup"]


def test_the_cost_note_says_whether_decisions_read_a_device_profile(tmp_path):
    from treegraft_lab.viz import paper_bench as pb

    rows = pd.DataFrame({"mid_calls_per_round": [0.25]}, index=["adaptive"])
    meta = {"hardware": {"cpu": "AMD EPYC", "device": "cpu", "dtype": "float32"}, "settings": {"prune": "value", "model_on": []}}
    (tmp_path / "results.json").write_text(json.dumps({"meta": meta}))
    note = pb.cost_note(tmp_path, rows)
    assert note.startswith("adaptive made 0.250 mid calls per round here (prune=value)") and "AMD EPYC" in note
    del meta["settings"]["model_on"]
    (tmp_path / "results.json").write_text(json.dumps({"meta": meta}))
    assert "recorded before decisions read a device profile" in pb.cost_note(tmp_path, rows)


def test_rows_a_benchmark_did_not_run_are_left_out_with_the_reason_and_where_they_are(tmp_path):
    from treegraft_lab.paths import DATA_DIR
    from treegraft_lab.viz import paper_bench as pb

    write_bench(tmp_path / "b", "2026-12-03 10:00:00", {"a100-paper": ["ar", "small", "adaptive"]})
    meta = {"finished": "2026-12-03 10:00:00", "settings": {"methods": ["ar", "small", "adaptive"]}}
    (tmp_path / "b" / "results.json").write_text(json.dumps({"meta": meta}))
    rows = pd.DataFrame({"speedup": [1.0, 2.0, 2.0], "prompts": [6, 6, 6], "mid_calls_per_round": [math.nan, 0.0, 0.0]},
                        index=["ar", "small", "adaptive"])
    abl = pb.paper_ablation().assign(ours=rows["speedup"]).set_index("label")
    keep = pb.ran(abl, ["ours"])
    assert list(abl[keep].index) == ["plain decoding (autoregressive)", "TreeGraft adaptive"]
    note = pb.not_run_note(abl, "ours", tmp_path / "b")
    assert note.startswith("CSD, w/o EG, w/o ND and TreeGraft fixed (10101): not among the methods b ran (ar, small, "
                           "adaptive), so their rows are left out of the table")
    assert "Table 2 on the release's trees" in note
    assert pb.not_run_note(abl[keep], "ours", tmp_path / "b") == ""
    assert pb.main_note(rows, tmp_path / "b") == "ours, All Mid: — , not among the methods b ran (ar, small, adaptive)"
    assert pb.main_note(rows.reindex([*rows.index, "mid"]), tmp_path / "b") == ""
    long = pb.ablation_long({"paper": abl["paper speedup"], "ours": abl["ours"]}, keep=keep)
    assert set(long["label"]) == {"plain decoding (autoregressive)", "TreeGraft adaptive"} and long["speedup"].notna().all()
    # the release-grown ablation runs what the default growth's benchmark left out
    release = pb.overall(pb.read_summary(DATA_DIR / "bench" / "smollm2-pocket-a100-release-ablation"), "a100-paper")
    assert {"csd", "no-eg", "no-nd", "10101"} <= set(release.index)
