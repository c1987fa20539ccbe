"""The views open where the mechanisms show, and keep what a step changed in view.

On the notebooks' recorded sample run (the offline pair, schedule 10101, 96 tokens, budget 63: the run
01, 02 and 06 open), the round the views open on has a mid step that reselects an earlier node and an
accepted node the mid drafter drafted; at every draft step of every round, the step's new nodes and its
frontier lie inside the focused figure's axes (the step-through viewer and every frame of the animation)."""

from __future__ import annotations

import pytest

from treegraft_lab import viz
from treegraft_lab.viz.tree import step_nodes


@pytest.fixture(scope="module")
def sample(smollm2_dir):
    from treegraft_lab import DecodeConfig, load_pair
    from treegraft_lab import workbench as wb

    S = wb.sizes(False)
    cfg = DecodeConfig(schedule="10101", prune="topk", budget=S.budget, clock="a100-paper")  # a mask: decisions read no clock
    return wb.record_runs(load_pair("smollm2-pocket", dtype="float32"), [wb.SAMPLE_PROMPT], cfg, S.max_new_tokens)


def points(fig, step: int) -> list[tuple[float, float]]:
    """(x, y) of every drawn node created at `step` (customdata[1] is a node's created step)."""
    out = []
    for t in fig.data:
        if t.customdata is not None and t.x is not None:
            out += [(x, y) for x, y, c in zip(t.x, t.y, t.customdata) if c[0] >= 0 and c[1] == step]
    return out


def inside(pts, xr, yr) -> bool:
    return all(xr[0] <= x <= xr[1] and yr[0] <= y <= yr[1] for x, y in pts)


@pytest.mark.slow
def test_the_views_open_on_a_round_where_the_mid_drafter_reselects_and_drafts_an_accepted_node(sample):
    rd, why = viz.showcase_round(sample)
    assert "reselects an earlier node and the accepted path goes through" in why, why
    st = sample.steps[sample.steps["round"] == rd]
    assert (st["call_mid"].astype(bool) & (st["reselected_earlier"] > 0)).any()
    tr = sample.tree[(sample.tree["round"] == rd) & sample.tree["accepted"].astype(bool) & (sample.tree["parent"] >= 0)]
    assert tr["drafted_by"].isin(["mid", "both"]).any()
    step = viz.showcase_step(sample, rd)
    assert bool(st[st["step"] == step]["call_mid"].iloc[0]) and float(st[st["step"] == step]["reselected_earlier"].iloc[0]) > 0


@pytest.mark.slow
def test_every_step_keeps_its_new_nodes_inside_the_focused_figure(sample):
    checked = 0
    rounds = sorted({*sample.rounds["round"][:8], viz.showcase_round(sample)[0]})  # the first rounds, and the one views open
    for rd in rounds:
        steps = sorted(sample.steps[sample.steps["round"] == rd]["step"])
        anim = viz.growth_animation(sample, int(rd))
        frames = {f.name: f for f in anim.frames}
        for k in steps:
            fig = viz.tree_figure(sample, int(rd), int(k), scroll=True, caption=None, focus=True)
            pts = points(fig, int(k))
            assert inside(pts, fig.layout.xaxis.range, fig.layout.yaxis.range), (rd, k)
            assert fig.layout.height <= 800 - 200  # with the viewer's controls above it, on a 1280 x 800 screen
            f = frames[f"step {k}"]
            assert inside(points(go_figure(f), int(k)), f.layout.xaxis.range, f.layout.yaxis.range), (rd, k)
            checked += len(pts)
    assert checked > 100  # the steps drew new nodes, and each was checked
    assert anim.layout.height <= 800 - 150  # play, slider and the tree on one 1280 x 800 screen
    assert all(m.y > 1 for m in anim.layout.updatemenus) and all(s.y > 1 for s in anim.layout.sliders)  # above the tree


def go_figure(frame):
    import plotly.graph_objects as go

    return go.Figure(data=frame.data)


def test_a_focus_holds_the_nodes_it_is_given_and_stays_inside_the_tree():
    pos = {i: (float(i), -float(i % 3)) for i in range(40)}
    xr, yr = [-1.0, 40.0], [-2.45, 0.3]
    fx, fy = viz.focus_ranges(pos, [20, 21, 25], xr, yr, 600)
    assert fx[0] <= 20 and fx[1] >= 25 and fy[0] <= -2 and fy[1] >= -1
    assert fx[0] >= xr[0] and fx[1] <= xr[1] and fx[1] - fx[0] < xr[1] - xr[0]  # zoomed in, not past the tree
    assert viz.focus_ranges(pos, [], xr, yr, 600) == (xr, yr)  # nothing new: the whole tree


def test_step_nodes_are_the_nodes_created_at_the_step_and_the_frontier():
    import pandas as pd

    rows = pd.DataFrame({"node": [0, 1, 2, 3], "created_step": [0, 1, 2, 2], "in_frontier": [False, True, False, False]})
    assert step_nodes(rows, 2) == [1, 2, 3]


@pytest.mark.slow
def test_two_methods_from_one_round_start_are_drawn_side_by_side_aligned_by_token_path(sample, monkeypatch):
    from treegraft_lab import load_pair
    from treegraft_lab import workbench as wb
    from treegraft_lab.views.compare import compare_round
    from treegraft_lab.viz.compare import depth_table, kept_rows, side_by_side

    monkeypatch.setenv(wb.CLOCK_ENV, "a100-paper")
    monkeypatch.setattr(wb, "_PARAMS", [None])
    rd, _ = viz.showcase_round(sample)
    runs = compare_round(load_pair("smollm2-pocket", dtype="float32"), sample, rd, ("10101", "hf-pld"))
    a, b = kept_rows(runs["10101"]), kept_rows(runs["hf-pld"])
    assert (runs["10101"].rounds["schedule"] == "10101").all() and (runs["hf-pld"].rounds["schedule"] == "lookup").all()
    figs = side_by_side(runs["10101"], runs["hf-pld"], ("TreeGraft 10101", "prompt lookup"))
    where = {}
    for side, fig in zip("ab", figs):  # the same token path sits at the same place in both figures
        for t in fig.data:
            if t.customdata is not None and t.x is not None:
                for x, y, c in zip(t.x, t.y, t.customdata):
                    where.setdefault(c[0], {})[side] = (x, y)
    both = [v for v in where.values() if len(v) == 2]
    assert all(v["a"] == v["b"] for v in both) and (both or not set(a["path"]) & set(b["path"]))
    assert figs[0].layout.xaxis.range == figs[1].layout.xaxis.range  # one layout, one scale
    rings = [next(t for t in fig.data if t.name == "only in this tree") for fig in figs]
    only_a, only_b = set(a["path"]) - set(b["path"]), set(b["path"]) - set(a["path"])
    assert [len(t.x) for t in rings] == [len(only_a), len(only_b)]
    table = depth_table(a, b, ("TreeGraft 10101", "prompt lookup"))
    assert table["TreeGraft 10101: verified"].sum() == len(a) - 1 and table["prompt lookup: verified"].sum() == len(b) - 1
    acc_a = int(runs["10101"].rounds.iloc[0]["accepted"])
    assert table["TreeGraft 10101: accepted"].sum() == acc_a  # one accepted node per depth, A of them
    assert f"A = {acc_a} accepted" in figs[0].layout.title.text


@pytest.mark.slow
def test_the_picker_refuses_a_bad_pair_in_one_line_and_records_a_typed_prompt_into_the_viewer(sample, monkeypatch):
    from treegraft_lab import workbench as wb
    from treegraft_lab.views.picker import RunPicker
    from treegraft_lab.views.step_through import StepThroughViewer

    monkeypatch.setenv(wb.CLOCK_ENV, "a100-paper")
    monkeypatch.setattr(wb, "_PARAMS", [None])
    viewer = StepThroughViewer(sample)
    picker = RunPicker(viewer, max_new_tokens=12, budget=16)
    picker.pair.value = "no-such-pair"
    assert picker.record() is None and "neither a registered pair nor a folder" in picker.status.value
    picker.pair.value, picker.typed.value = "smollm2-pocket", "Count from one to ten."
    picker.schedule.value = "small"
    run = picker.record()
    assert run is not None and viewer.run is run and picker.bar.value == 12
    assert run.runs.iloc[0]["prompt_text"].count("Count from one to ten.") == 1
    assert (run.rounds["schedule"] == "00000").all()
