"""The regime map over its second axis, the mid drafter: cells keyed by mid drafter and ratio,
their table and heatmap, and the command's refusals."""

from __future__ import annotations

import pandas as pd
import pytest

from treegraft_lab import regime
from treegraft_lab.errors import TreeGraftError

# (ratio, all-small, all-mid, oracle, adaptive-family) speedups of two mid drafters
LOW = [(0.1, 2.0, 1.5, 2.1, 2.0), (0.6, 2.0, 1.0, 2.05, None)]
HIGH = [(0.1, 2.0, 3.0, 3.6, 3.3), (0.6, 2.0, 1.8, 2.6, None)]


def _by_ratio(cells) -> pd.DataFrame:
    rows = []
    for r, s, m, o, f in cells:
        rows += [{"ratio": r, "schedule": k, "speedup": v} for k, v in
                 (("all-small", s), ("all-mid", m), ("oracle", o), ("adaptive-family", f)) if v is not None]
    return pd.DataFrame(rows)


@pytest.fixture
def two_mids() -> pd.DataFrame:
    return regime.cells(regime.mid_axis_map({"high": (0.9, _by_ratio(HIGH)), "low": (0.45, _by_ratio(LOW))}))


def test_the_map_cells_are_keyed_by_mid_drafter_and_ratio(two_mids):
    c = two_mids.set_index(["mid", "ratio"])
    assert list(dict.fromkeys(two_mids["mid"])) == ["low", "high"]  # sorted by agreement
    assert c.loc[("high", 0.1), "better"] == "all-mid" and c.loc[("low", 0.1), "better"] == "all-small"
    assert c.loc[("high", 0.1), "oracle_gain"] == pytest.approx(3.6 / 3.0)
    assert c.loc[("high", 0.6), "oracle_gain"] == pytest.approx(2.6 / 2.0)
    assert c.loc[("low", 0.1), "agreement"] == 0.45
    assert c.loc[("high", 0.1), "adaptive-family_gain"] == pytest.approx(1.1)
    assert pd.isna(c.loc[("high", 0.6), "adaptive-family_gain"])  # not decoded there


def test_the_cells_table_has_a_row_per_mid_drafter_with_its_gains_and_better_endpoint(two_mids):
    lines = regime.cells_markdown(two_mids).splitlines()
    assert lines[0] == "| mid drafter (agreement) | 0.1 | 0.6 |"
    assert lines[2] == "| low (0.450) | 1.050 / 1.000 (S) | 1.025 (S) |"
    assert lines[3] == "| high (0.900) | 1.200 / 1.100 (M) | 1.300 (S) |"


def test_the_heatmap_prints_every_cell_of_each_panel(two_mids):
    from treegraft_lab.viz.regime import mid_axis_figure

    fig = mid_axis_figure(two_mids, "adaptive-family", marks={"a100-paper": 0.6})
    oracle, sched, better = [ax for ax in fig.axes if ax.images]  # the colorbars hold no image
    assert sorted(t.get_text() for t in oracle.texts) == ["1.025", "1.050", "1.200", "1.300"]
    assert sorted(t.get_text() for t in sched.texts) == ["1.000", "1.100"]  # the undecoded cells stay empty
    assert sorted(t.get_text() for t in better.texts) == ["M 3.00x", "S 2.00x", "S 2.00x", "S 2.00x"]
    assert [t.get_text() for t in oracle.get_yticklabels()] == ["high (0.90)", "low (0.45)"]
    assert [t.get_text() for t in oracle.get_xticklabels()] == ["0.1", "0.6\na100-paper"]


def test_a_map_without_the_oracle_is_refused_in_words():
    m = regime.mid_axis_map({"x": (0.5, _by_ratio(LOW).query("schedule != 'oracle'"))})
    with pytest.raises(TreeGraftError, match="lacks oracle"):
        regime.cells(m)


def test_the_mids_map_refuses_an_unknown_pair_or_a_missing_card_in_one_line(capsys, tmp_path, monkeypatch):
    from treegraft_lab import cli, paths

    assert cli.main(["regime", "--mids", "smollm2-pocket,nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown pair 'nope'" in err
    monkeypatch.setattr(paths, "MODELS_DIR", tmp_path)
    assert cli.main(["regime", "--mids", "smollm2-pocket"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "zoo card smollm2-pocket --write-card" in err
    assert cli.main(["regime", "--heatmap", str(tmp_path / "x.png")]) == 2
    assert "--mids" in capsys.readouterr().err


def test_the_stored_replays_map_three_mid_drafters_on_their_common_prompts(capsys):
    from treegraft_lab import cli

    mids = ["smollm2-pocket", "smollm2-int8", "smollm2-self"]
    assert cli.main(["regime", "--mids", ",".join(mids), "--ratios", "0.05,0.6", "--schedules", "all-small,all-mid,oracle"]) == 0
    out = capsys.readouterr().out
    cells = out.split("the switching rules")[0]  # the oracle's table; the rules' follows it
    rows = [line for line in cells.splitlines() if line.startswith("| smollm2-")]
    agreements = [regime.mid_agreement(m) for m in mids]
    assert [r.split(" (")[0].strip("| ") for r in rows] == [m for _, m in sorted(zip(agreements, mids))]
    assert all(len(r.strip("|").split("|")) == 3 for r in rows)  # the mid drafter and two ratios
    assert "common eval prompts" in out


def test_replays_of_several_mids_are_cut_to_their_common_prompts_and_first_tokens():
    def frame(qids, length):
        return pd.DataFrame([{"qid": q, "pos": j, "length": length, "ended": True, "schedule": "00000"}
                             for q in qids for j in range(length)])

    out = regime.common_prompts({"a": frame(["q1", "q2"], 6), "b": frame(["q2", "q3"], 3)}, 4)
    assert set(out["a"]["qid"]) == set(out["b"]["qid"]) == {"q2"}
    assert out["a"]["pos"].max() == 3 and set(out["a"]["length"]) == {4} and not out["a"]["ended"].any()
    assert set(out["b"]["length"]) == {3} and out["b"]["ended"].all()  # shorter answers are left whole
    with pytest.raises(TreeGraftError, match="share no prompt"):
        regime.common_prompts({"a": frame(["q1"], 3), "b": frame(["q3"], 3)}, 4)


# ---------------------------------------------------------------------------- schedulers on the map
PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 3, 5, 6]


@pytest.fixture(scope="module")
def tiny():
    """Replays of every start of a tiny pair's 12-token answer, and real decodes with a switching rule
    (it calls the mid drafter in some rounds only) at two ratios of a steep profile."""
    from treegraft_lab.config import GROWTHS, DecodeConfig
    from treegraft_lab.costs import DeviceProfile
    from treegraft_lab.tiny import noisy_pair

    steep = DeviceProfile("steep", {1: 5.0, 16: 20.0, 64: 80.0}, {1: 1.0, 8: 4.0, 64: 30.0}, small_ms=0.3)
    pair = noisy_pair()
    cfg = DecodeConfig(depth=5, width=4, children=4, budget=24, prune="topk", clock="steep", small="ngram", **GROWTHS["lookup"])
    prompt = [{"question_id": "q", "category": "code", "turns": [PROMPT]}]
    df = regime.collect(pair, prompt, cfg, max_new=12, progress=False, profile=steep)
    runs = regime.decode(pair, prompt, cfg, regime.ratio_profiles(steep, [0.1, 1.0]), {"rule": "rule:match=2"},
                         max_new=12, progress=False)
    return steep, df, runs


def test_a_decodes_recorded_run_walked_through_the_replays_is_priced_as_the_decode(tiny):
    steep, df, runs = tiny
    calls = runs["mid_calls"] / (5 * runs["rounds"])
    assert ((calls > 0) & (calls < 1)).any()  # a run that mixes schedules, not an endpoint
    walked, left = regime.refollow(regime.split(df, 5), runs, steep, [0.1, 1.0])
    assert left == 0 and len(walked) == len(runs)
    both = runs.merge(walked, on=["qid", "ratio", "schedule"], suffixes=("", "_walked"))
    for col in ("tokens", "rounds", "accepted", "mid_calls", "schedules"):
        assert (both[col] == both[f"{col}_walked"]).all(), col
    assert both["ms"].to_numpy() == pytest.approx(both["ms_walked"].to_numpy(), rel=1e-9)


def test_a_recorded_run_is_cut_to_shorter_replays_and_left_out_where_a_start_is_missing(tiny):
    steep, df, runs = tiny
    cut = regime.split(regime.common_prompts({"a": df}, 6)["a"], 5)
    walked, left = regime.refollow(cut, runs, steep, [0.1, 1.0])
    assert left == 0 and (walked["tokens"] == 6).all()
    full, _ = regime.refollow(regime.split(df, 5), runs, steep, [0.1, 1.0])
    assert (walked["ms"].to_numpy() < full["ms"].to_numpy()).all()
    second = int(df[(df["pos"] == 0) & (df["schedule"] == runs["schedules"].iloc[0].split()[0])]["accepted"].iloc[0]) + 1
    holed = regime.split(df[df["pos"] != second], 5)  # the start every run's second round begins at
    walked, left = regime.refollow(holed, runs, steep, [0.1, 1.0])
    assert left == len(runs) and walked.empty


def test_a_rule_that_never_calls_is_priced_as_all_small_and_one_reading_signals_is_not():
    assert regime.rule_mask("rule:match", 0, 5) == "00000" and regime.rule_mask("rule:score", 0.0, 3) == "000"
    assert regime.rule_mask("rule:match", 2, 5) is None and regime.rule_mask("rule:score", 0.01, 5) is None
    with pytest.raises(TreeGraftError, match="unknown switching rule"):
        regime.rule_mask("rule:nope", 0, 5)


def test_the_fitted_rules_are_read_for_the_maps_trees_and_profile():
    import json

    from treegraft_lab import costs
    from treegraft_lab.paths import SCHEDULER_DIR

    stored = json.loads((SCHEDULER_DIR / "smollm2-pocket" / "rules.json").read_text())["a100-paper-topk-lookup-ngram"]
    got = regime.fitted_rules("smollm2-pocket", regime.map_config("lookup"), costs.load("a100-paper"))
    assert got == {r: float(stored[r]["value"]) for r in regime.RULES}
    assert regime.fitted_rules("no-such-pair", regime.map_config("lookup"), costs.load("a100-paper")) == {}


def test_acceptance_counts_the_cells_where_the_oracle_pays_and_the_scheduler_reaches_it(two_mids):
    a = regime.acceptance(two_mids, "adaptive-family")
    assert (a["cells"], a["priced"], a["reached"]) == (2, 1, 1)  # high at 0.1 (priced, 1.1x) and 0.6 (not priced)
    assert regime.acceptance(two_mids, "adaptive-family", reach=1.2)["reached"] == 0
    assert regime.acceptance(two_mids, "adaptive-family", oracle_min=1.0)["cells"] == 4
    assert regime.acceptance(two_mids, "nobody") == {**a, "priced": 0, "reached": 0}
    assert regime.acceptance_text(a, "adaptive-family") == (
        "In 2 cells the oracle is at least 1.15x the better endpoint; adaptive-family reaches at least 1.05x it "
        "in 1 of the 1 it was priced at (1 not priced): 1/2 of all.")


def test_the_cpus_the_replays_were_collected_on_are_named_once_each(tmp_path):
    from treegraft_lab.viz.regime import cpus_text

    assert cpus_text({"a": "X", "b": "X"}) == "X"
    assert cpus_text({"a": "X", "b": "Y", "c": "X"}) == "X (a, c); Y (b)"
    assert regime.replay_cpu(tmp_path) == "CPU not recorded"
    assert "AMD EPYC" in regime.replay_cpu(regime.replay_folder("smollm2-pocket"))
    assert "Intel Xeon" in regime.replay_cpu(regime.replay_folder("smollm2-int8"))


def test_the_heatmap_sets_the_papers_pairs_on_the_ratio_axis_with_their_numbers(two_mids):
    from treegraft_lab import paper
    from treegraft_lab.viz.regime import PAPER_TAG, mid_axis_figure

    fig = mid_axis_figure(two_mids, "adaptive-family", marks={"a100-paper": 0.6}, paper=paper.MAIN, paper_how=paper.MAIN_HOW)
    heat = [ax for ax in fig.axes if ax.images]
    assert len(heat) == 3 and [ax.get_xticklabels()[1].get_text() for ax in heat] == [
        "0.6\na100-paper", "0.6\na100-paper", f"0.6\na100-paper\n\u25b2 {PAPER_TAG}"]  # tagged once, on the bottom axis
    (table,) = [ax for ax in fig.axes if ax.tables]
    text = [c.get_text().get_text() for c in table.tables[0].get_celld().values()]
    for name, small, mid, tg, n in paper.MAIN:
        assert {name, f"{small:.2f}x", f"{mid:.2f}x", f"{tg:.2f}x", f"{tg / max(small, mid):.3f}", str(n)} <= set(text)
    assert "no per-pair T_mid / T_tgt and no agreement" in table.get_title() and "a100-paper's column" in table.get_title()
    assert not [ax for ax in mid_axis_figure(two_mids, "adaptive-family").axes if ax.tables]  # no paper: no table


def test_the_stored_map_prices_the_family_scheduler_where_its_decisions_are_stored(capsys, tmp_path):
    from treegraft_lab import cli, costs

    mids = ["smollm2-pocket", "smollm2-int8", "smollm2-self"]
    png = tmp_path / "map.png"
    assert cli.main(["regime", "--mids", ",".join(mids), "--ratios", "0.02,0.6", "--heatmap", str(png)]) == 0
    out = capsys.readouterr().out
    ax = regime.mid_axis(mids, costs.load("a100-paper"), [0.02, 0.6], schedules=tuple(
        "all-small,all-mid,10101,best-fixed,oracle".split(",")))
    c = ax.cells.set_index(["mid", "ratio"])
    assert c["adaptive-family_gain"].xs("smollm2-pocket").notna().all()  # its 64-token decodes, walked to 24 tokens
    for p in mids:  # priced exactly at the ratios where the scheduler's decisions are stored
        path = regime.replay_folder(p) / "decodes-a100-paper-adaptive-family.parquet"
        stored = {round(r, 4) for r in pd.read_parquet(path)["ratio"]} if path.is_file() else set()
        assert {round(r, 4) for r in c["adaptive-family_gain"].xs(p).dropna().index} == stored & {0.02, 0.6}
        assert (f"{p}: no stored adaptive-family decodes" in out) == (not stored)
    for rule in ax.rules:  # rules that never call are all-small: all-small over the better endpoint
        assert c[f"{rule}_gain"].to_numpy() == pytest.approx((c["all-small"] / c[["all-small", "all-mid"]].max(axis=1)).to_numpy())
    assert ax.rules and "acceptance: " + regime.acceptance_text(regime.acceptance(ax.cells, ax.scheduler), ax.scheduler) in out
    assert "replays collected on 2-core AMD EPYC VM" in out and png.stat().st_size > 0


def test_the_pocket_family_decodes_walked_through_its_replays_match_their_own_rounds():
    """The stored 64-token decodes, priced through the stored replays where these cover their walk,
    reproduce each decode's rounds and modelled time: the walk cut to 24 tokens prices those decisions."""
    from treegraft_lab import costs

    folder = regime.replay_folder("smollm2-pocket")
    df, _ = regime.load(folder)
    ratios = [0.02, 0.0437, 0.0956, 0.209, 0.457, 0.6, 1.0]
    runs = regime.load_decodes(folder, "a100-paper", ratios=ratios)
    runs = runs[runs["schedule"] == "adaptive-family"]
    walked, _ = regime.refollow(regime.split(df, 5), runs, costs.load("a100-paper"), ratios)
    both = runs.merge(walked, on=["qid", "ratio", "schedule"], suffixes=("", "_walked"))
    assert len(both) == len(walked) >= len(runs) // 2
    assert (both["rounds"] == both["rounds_walked"]).all() and (both["schedules"] == both["schedules_walked"]).all()
    whole = both[both["accepted"] == both["accepted_walked"]]  # not the last round of an answer that ends early
    assert len(whole) >= len(both) - 5
    assert whole["ms"].to_numpy() == pytest.approx(whole["ms_walked"].to_numpy(), rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("smoke", ["1", "0"])
def test_notebook_08_draws_the_map_over_mid_drafters_with_the_scheduler_and_says_where_it_reaches_the_oracle(smoke, executed_notebook):
    """Notebook 08 reads stored data only, so it runs under SMOKE and at full size: its mid-drafter
    section draws the three-panel heatmap and states the acceptance count computed from the same cells."""
    from treegraft_lab import costs

    nb = executed_notebook("08_where_when_matters.ipynb", smoke)  # at full size, the run tests/test_notebooks.py reads
    (calc,) = [c for c in nb.cells if "regime.mid_axis(" in c.source]
    (fig,) = [c for c in nb.cells if "mid_axis_figure(axis" in c.source]
    (read,) = [c for c in nb.cells if "regime.acceptance(axis.cells" in c.source]
    assert "figure" in fig.metadata.get("tags", []) and any("image/png" in o.get("data", {}) for o in fig.outputs)
    ax = regime.mid_axis(list(regime.STORED_MIDS), costs.load("a100-paper"),
                         sorted([*regime.log_ratios(0.02, 1.0, 6), 0.6]))
    printed = "".join(o.get("text", "") for o in calc.outputs if o.output_type == "stream")
    assert regime.cells_markdown(ax.cells, ax.rules) in printed and all(n in printed for n in ax.notes)
    shown = "".join(o["data"].get("text/markdown", "") for o in read.outputs if o.output_type == "execute_result")
    assert regime.acceptance_text(regime.acceptance(ax.cells, ax.scheduler), ax.scheduler) in shown
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]


def test_the_map_holds_every_mid_drafter_whose_replays_are_stored():
    from treegraft_lab.paths import DATA_DIR

    stored = {p.parent.name.removesuffix("-lookup-topk") for p in (DATA_DIR / "regime").glob("*-lookup-topk/replays.parquet")}
    assert set(regime.STORED_MIDS) == stored


def test_the_heatmaps_grid_has_the_highest_agreement_on_top_and_marks_the_better_endpoint(two_mids):
    import numpy as np

    from treegraft_lab.viz.regime import PAPER_TAG, cell_grid, mid_axis_panels, ratio_tag

    rows, ratios = [("high", 0.9), ("low", 0.45)], [0.1, 0.6]
    assert cell_grid(two_mids, rows, ratios, "oracle_gain").ravel().tolist() == pytest.approx([1.2, 1.3, 1.05, 1.025])
    assert cell_grid(two_mids, rows, ratios, "better").tolist() == [[1.0, 0.0], [0.0, 0.0]]  # 1: all-mid is better
    fam = cell_grid(two_mids, rows, ratios, "adaptive-family_gain")
    assert fam[:, 0].tolist() == pytest.approx([1.1, 1.0]) and np.isnan(fam[:, 1]).all()  # not priced at 0.6: grey
    assert np.isnan(cell_grid(two_mids, rows, ratios, "nope")).all()
    assert [col for col, _ in mid_axis_panels(two_mids, "adaptive-family")] == [
        "oracle_gain", "adaptive-family_gain", "better"]
    assert mid_axis_panels(two_mids, "adaptive-family")[1][1].endswith("(grey: not priced)")
    assert [col for col, _ in mid_axis_panels(two_mids, None)] == ["oracle_gain", "better"]
    marks = {"a100-paper": 0.601, "cpu": 0.1}
    assert ratio_tag(0.6, marks, False, "a100-paper") == "\na100-paper"  # within 2%
    assert ratio_tag(0.6, marks, True, "a100-paper") == f"\na100-paper\n\u25b2 {PAPER_TAG}"
    assert ratio_tag(0.1, marks, True, "a100-paper") == "\ncpu" and ratio_tag(0.3, marks, True, "a100-paper") == ""
