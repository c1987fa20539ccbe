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
    rows = [line for line in out.splitlines() if line.startswith("| smollm2-")]
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
