"""Tree figures as a researcher reads them, on runs recorded with the tiny model pair: every node on the
accepted path labelled, every kept node drawn, titles below the toolbar and never cut, rings only on the
nodes a step created, and an "all children" view as wide as it needs to be."""

from __future__ import annotations

import re

import pytest

from tests.test_viz import label_boxes
from tests.test_widgets import PROMPT, tiny_pair
from treegraft_lab import DecodeConfig, TreeGraftDecoder, record
from treegraft_lab.viz.tree import (
    LEAF_PX,
    MAX_WIDTH,
    TITLE_CHAR_W,
    TOOLBAR_PX,
    growth_animation,
    retitle,
    tree_figure,
    wrap_title,
)


@pytest.fixture(scope="module")
def runs():
    """Two recorded tiny runs: the paper's budget (wide trees, many pruned) and a small one without ND."""
    pair, out = tiny_pair(), []
    for cfg in (DecodeConfig(schedule="10101", budget=63, clock="a100-paper"),
                DecodeConfig(schedule="11111", budget=8, non_destructive=False, expanded_graft=False, clock="a100-paper")):
        dec = TreeGraftDecoder(pair, cfg)
        with record(dec) as rec:
            dec.generate(PROMPT, max_new_tokens=16)
        out.append(rec.to_run())
    return out


def points(fig_or_traces):
    """(customdata, text, x, y, marker line colour) of every node point (fold marks included)."""
    out = []
    for tr in getattr(fig_or_traces, "data", fig_or_traces):
        if tr.customdata is None or not len(tr.customdata):
            continue
        colors = tr.marker.line.color if tr.marker.line.color is not None else [None] * len(tr.x)
        colors = [colors] * len(tr.x) if isinstance(colors, str) else colors
        out += list(zip(tr.customdata, tr.text, tr.x, tr.y, colors))
    return out


def rounds(run):
    return [int(r) for r in run.rounds["round"]]


def test_every_node_on_the_accepted_path_is_labelled_the_deepest_included(runs):
    seen = 0
    for run in runs:
        for rd in rounds(run):
            for kids in (4, None):
                fig = tree_figure(run, rd, max_children=kids)
                acc = [(c, t) for c, t, *_ in points(fig) if c[3] and not c[4]]
                assert len(acc) == run.rounds.set_index("round").loc[rd, "accepted"] + 1  # the root and A tokens
                assert all(t for _, t in acc), f"round {rd}: accepted nodes without a label: {acc}"
                seen += len(acc)
    assert seen > 10
    for y in {b[0] for b in label_boxes(tree_figure(runs[0], 0))}:  # and labels still never overlap
        row = sorted((lo, hi) for yy, lo, hi, _ in label_boxes(tree_figure(runs[0], 0)) if yy == y)
        assert all(h1 <= l2 for (_, h1), (l2, _) in zip(row, row[1:]))


def test_every_kept_node_is_drawn_inside_the_axes_and_only_pruned_nodes_fold(runs):
    for run in runs:
        for rd in rounds(run):
            kept = int(run.rounds.set_index("round").loc[rd, "kept"])
            for kids in (1, 4, None):
                fig = tree_figure(run, rd, max_children=kids)
                xr, yr = fig.layout.xaxis.range, fig.layout.yaxis.range
                drawn = [c for c, _, x, y, _ in points(fig) if c[2] and not c[4] and c[5] > 0
                         and xr[0] <= x <= xr[1] and yr[0] <= y <= yr[1]]
                assert len(drawn) == kept, f"round {rd}, {kids} children: {len(drawn)} of {kept} kept nodes drawn"
                t = run.tree_at(rd)
                assert len(points(fig)) - sum(c[4] for c, *_ in points(fig)) >= int(t["kept"].sum())


def test_titles_start_below_the_toolbar_and_wrap_to_the_figure_width(runs):
    run = runs[1]
    for fig in (tree_figure(run, 0), tree_figure(run, 0, 2), growth_animation(run, 0)):
        t = fig.layout.title
        assert (1 - t.y) * fig.layout.height >= TOOLBAR_PX - 0.01 and t.yanchor == "top" and t.yref == "container"
        for f in [fig, *fig.frames]:
            lines = [re.sub("<[^>]+>", "", line) for line in f.layout.title.text.split("<br>")]  # markup is not drawn
            assert all(len(line) * TITLE_CHAR_W <= fig.layout.width - 20 for line in lines), lines
        assert fig.layout.margin.t >= TOOLBAR_PX + 19 * max(len(f.layout.title.text.split("<br>")) for f in [fig, *fig.frames])
    fig = retitle(tree_figure(run, 0, width=400), "a long name for a setting, " * 6 + "· verified")
    assert len(fig.layout.title.text.split("<br>")) >= 3 and fig.layout.margin.t >= TOOLBAR_PX + 3 * 19
    assert wrap_title("a · b", 400) == "a · b" and "·<br>" in wrap_title("x" * 40 + " · " + "y" * 40, 400)


def test_a_ring_marks_exactly_the_nodes_created_at_the_step_shown(runs):
    for run in runs:
        for rd in rounds(run)[:3]:
            steps = sorted(run.steps[run.steps["round"] == rd]["step"])
            anim = growth_animation(run, rd)
            for k in steps:
                for fig_points in (points(tree_figure(run, rd, k)), points(anim.frames[k - 1].data)):
                    ringed = {c[0] for c, *_, col in fig_points if col == "#111"}
                    created = {c[0] for c, *_ in fig_points if c[1] == k and not c[4]}
                    assert ringed == created, f"round {rd} step {k}: ringed {ringed}, created {created}"


def test_the_all_children_view_is_as_wide_as_the_tree_needs_in_a_scrolling_box(runs):
    run = runs[0]
    rd = int(run.rounds.sort_values("nodes").iloc[-1]["round"])
    every = tree_figure(run, rd, max_children=None, scroll=True)
    xr = every.layout.xaxis.range
    m = every.layout.margin
    px = (every.layout.width - m.l - m.r) / (xr[1] - xr[0])
    assert px >= LEAF_PX - 1  # one leaf column per LEAF_PX: nodes never pile up
    assert tree_figure(run, rd, max_children=None).layout.width <= MAX_WIDTH  # unless asked to scroll
    boxes = label_boxes(every)
    for y in {b[0] for b in boxes}:
        row = sorted((lo, hi) for yy, lo, hi, _ in boxes if yy == y)
        assert all(h1 <= l2 for (_, h1), (l2, _) in zip(row, row[1:]))
