"""Tree figures, the growth animation and the summary plots build from recorded runs and stay legible."""

from __future__ import annotations

import pytest

from treegraft_lab.viz import stats
from treegraft_lab.viz.tree import (
    DRAFTER_LABELS,
    FOLD,
    FONT_SIZE,
    MARGIN,
    MAX_CHILDREN,
    MAX_WIDTH,
    SIZE_MAX,
    fit_label,
    fold,
    growth_animation,
    label_width,
    shown_nodes,
    tidy_layout,
    tree_figure,
)
from treegraft_lab.workbench import tiny_run

COMPACT = {"expansion": "global", "ngram_chain": False, "lookback": None, "width": 24}  # wide, few children per parent


@pytest.fixture(scope="module")
def run63():
    """Three rounds at the paper's budget of 63 with generous trees (more nodes than the budget)."""
    return tiny_run(rounds=3, budget=63, seed=1, **COMPACT)


@pytest.fixture(scope="module")
def run_release():
    """Trees grown by the release's rule: mid steps add 10 children to each of 10 parents."""
    return tiny_run(rounds=2, budget=63, seed=1)


def label_boxes(fig):
    """(row y, left px, right px, text) of every drawn label, from the figure's own ranges and size."""
    xr, width, m = fig.layout.xaxis.range, fig.layout.width, fig.layout.margin
    px = (width - m.l - m.r) / (xr[1] - xr[0])
    out = []
    for tr in fig.data:
        if tr.mode and "text" in tr.mode and tr.text is not None:
            for x, y, t in zip(tr.x, tr.y, tr.text):
                if t:
                    c = (x - xr[0]) * px
                    out.append((y, c - label_width(t) / 2, c + label_width(t) / 2, t))
    return out


def test_the_budget_63_tree_is_bigger_than_the_budget_and_prunes(run63):
    t = run63.tree_at(0)
    assert len(t) > 64 and int(t["kept"].sum()) == 64  # the root and 63 kept nodes


@pytest.mark.parametrize("step", [None, 1, 3, 5])
def test_labels_never_overlap_at_budget_63(run63, step):
    for rd in range(3):
        fig = tree_figure(run63, rd, step)
        boxes = label_boxes(fig)
        drawn = sum(len(tr.x) for tr in fig.data if tr.mode and "markers" in tr.mode and tr.x and tr.x[0] is not None)
        assert len(boxes) >= 0.25 * drawn, "many drawn nodes should keep a label (wide sibling rows are folded)"
        plot_w = fig.layout.width - MARGIN["l"] - MARGIN["r"]
        assert all(0 <= lo and hi <= plot_w for _, lo, hi, _ in boxes), "a label would be clipped at the edge"
        rows: dict = {}
        for y, lo, hi, t in boxes:
            rows.setdefault(y, []).append((lo, hi, t))
        for labels in rows.values():
            labels.sort()
            for (_l1, h1, t1), (l2, _h2, t2) in zip(labels, labels[1:]):
                assert h1 <= l2, f"labels {t1!r} and {t2!r} overlap in round {rd}"
        # rows are far enough apart that a label under a node cannot reach the next row's markers
        span = fig.layout.yaxis.range[1] - fig.layout.yaxis.range[0]
        row_px = (fig.layout.height - MARGIN["t"] - MARGIN["b"]) / span
        assert row_px >= SIZE_MAX + 1.5 * FONT_SIZE + SIZE_MAX / 2


def test_tree_has_a_legend_for_every_drafter_and_hidden_axes(run63):
    fig = tree_figure(run63, 0)
    names = {tr.name for tr in fig.data if tr.showlegend is not False}
    assert set(DRAFTER_LABELS.values()) <= names
    assert {"accepted path", "pruned (faded)", "dead (overwritten)"} <= names
    assert fig.layout.xaxis.visible is False and fig.layout.yaxis.visible is False


def test_hover_text_tells_token_depth_scores_step_and_rescoring(run63):
    fig = tree_figure(run63, 1, 5)
    hover = " ".join(h for tr in fig.data if tr.hovertext for h in tr.hovertext)
    for word in ("depth", "p =", "s =", "created at step", "mid-rescored"):
        assert word in hover


def test_accepted_path_and_pruned_nodes_are_marked(run63):
    fig = tree_figure(run63, 1, max_children=None)
    acc = next(tr for tr in fig.data if tr.name == "accepted path")
    n_acc = int(run63.tree_at(1)["accepted"].sum()) - 1
    assert sum(x is None for x in acc.x) == n_acc  # one segment per accepted edge
    faded = [o for tr in fig.data if tr.marker and tr.marker.opacity is not None and not isinstance(tr.marker.opacity, float)
             for o in tr.marker.opacity]
    assert faded.count(0.22) == int((~run63.tree_at(1)["kept"]).sum())


def test_dead_nodes_are_crossed_without_nd():
    run = tiny_run(rounds=1, budget=24, non_destructive=False, seed=3)
    dead = int((~run.tree_at(0)["alive"]).sum())
    assert dead > 0
    fig = tree_figure(run, 0, max_children=None)
    symbols = [s for tr in fig.data if tr.marker and isinstance(tr.marker.symbol, tuple) for s in tr.marker.symbol]
    assert symbols.count("x") == dead


def test_tidy_layout_runs_the_accepted_path_down_the_left_edge_and_centres_the_other_parents(run63):
    for rd in range(3):
        rows = run63.tree_at(rd)
        pos = tidy_layout(rows)
        leaves = sorted(pos[v][0] for v in rows["node"] if v not in set(rows["parent"]))
        assert leaves == list(range(len(leaves)))  # leaves one unit apart
        left = min(x for x, _ in pos.values())
        path = rows[rows["accepted"].astype(bool)]
        assert len(path) >= 1 and all(pos[v][0] == left for v in path["node"])  # the root and the accepted path
        spine = {v for v in rows["node"] if pos[v][0] == left}
        for v in rows["node"]:
            kids = [pos[c][0] for c in rows["node"][rows["parent"] == v]]
            if kids:
                want = min(kids) if v in spine else (min(kids) + max(kids)) / 2
                assert pos[v][0] == pytest.approx(want)
                assert all(pos[c][1] == pos[v][1] - 1 for c in rows["node"][rows["parent"] == v])


@pytest.mark.parametrize("width", [None, 640, 840])
def test_accepted_labels_show_whole_and_no_node_sits_within_edge_px_of_the_plot_edge(run_release, width):
    """A tree squeezed into a narrow figure used to cut the deepest accepted token at the edge ("i" for "is")."""
    from treegraft_lab.viz.tree import EDGE_PX, whole_label

    for rd in range(2):
        fig = tree_figure(run_release, rd, width=width, max_children=None)
        xr, m = fig.layout.xaxis.range, fig.layout.margin
        px = (fig.layout.width - m.l - m.r) / (xr[1] - xr[0])
        accepted = 0
        for tr in fig.data:
            if tr.customdata is None or not len(tr.customdata):
                continue
            for x, text, c in zip(tr.x, tr.text, tr.customdata):
                assert min(x - xr[0], xr[1] - x) * px >= EDGE_PX - 1e-6
                if c[3] and c[5] > 0:
                    accepted += 1
                    assert text == c[6] and c[6] == whole_label(c[6]) and text
        assert accepted == int(run_release.rounds.loc[rd, "accepted"])


def test_a_scrolling_tree_has_its_legend_docked_outside_the_figure(run63):
    from treegraft_lab.viz.tree import legend_html

    fig = tree_figure(run63, 0, scroll=True)
    assert fig.layout.showlegend is False and fig.layout.margin.r < MARGIN["r"]
    docked = legend_html(fig)
    for name in [*DRAFTER_LABELS.values(), "accepted path", "pruned (faded)", "+m: folded children"]:
        assert f"</svg>{name}</span>" in docked
    assert tree_figure(run63, 0).layout.showlegend is not False  # a figure on its own keeps its own legend


def test_fit_label_shortens_or_drops():
    assert fit_label("hash", 1000) == "hash"
    short = fit_label("collision", label_width("coll…") + 0.1)
    assert short == "coll…"
    assert fit_label("collision", 3) == ""


def test_growth_animation_has_one_frame_per_step_then_verify(run63):
    fig = growth_animation(run63, 0)
    assert [f.name for f in fig.frames] == ["step 1", "step 2", "step 3", "step 4", "step 5", "verify"]
    assert len({len(f.data) for f in fig.frames}) == 1  # every frame has the same traces
    assert fig.layout.updatemenus[0].buttons[0].method == "animate"
    assert len(fig.layout.sliders[0].steps) == 6


def test_a_step_tree_differs_from_the_next(run63):
    a, b = tree_figure(run63, 0, 2), tree_figure(run63, 0, 3)  # step 3 calls the mid drafter: it always grows
    assert sum(len(t.x) for t in a.data if t.x) < sum(len(t.x) for t in b.data if t.x)


def test_summary_plots_have_labelled_axes(run63):
    other = tiny_run(rounds=3, schedule="11000", seed=2, **COMPACT)
    figs = [stats.acceptance_by_depth({"10101": run63, "11000": other}), stats.graft_depth_hist(run63),
            stats.decisions_by_step({"10101": run63, "11000": other}),
            stats.signal_heatmap(stats.signal_correlations(run63))]
    for fig in figs:
        for ax in fig.axes:
            if ax.get_label() == "<colorbar>":
                continue
            assert ax.get_xlabel() and ax.get_ylabel(), fig


def test_graft_depths_find_earlier_reselections(run63):
    df = stats.graft_depths(run63)
    assert set(df["step"]) <= {1, 3, 5} and len(df)
    assert (df["offset"] < 0).any()


def test_graft_statistics_have_one_definition_for_table_figure_and_categories(run63):
    run = tiny_run(rounds=6, budget=63, seed=4)
    s = stats.graft_summary(run, by_category=True)
    depths = stats.graft_depths(run)
    later = depths[depths["step"] > 1]
    assert s.loc["all", "frontier nodes"] == len(later)
    assert s.loc["all", "reselected share"] == pytest.approx(float((later["offset"] < 0).mean()))
    mid = run.steps[run.steps["call_mid"] & (run.steps["step"] > 1)]
    assert s.loc["all", "pool ratio"] == pytest.approx(mid["pool_size"].mean() / mid["conventional_pool"].mean())
    assert s.loc["all", "mid steps"] == len(mid) == s.drop(index="all")["mid steps"].sum()
    title = stats.graft_depth_hist(run).axes[1].get_title()
    assert title.startswith(f"{s.loc['all', 'reselected share']:.1%} of {len(later):,}")


def test_summary_plots_render_as_png_images(run63):
    png = stats.graft_depth_hist(run63)._repr_png_()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_styled_tables_show_shares_ratios_ms_and_a_dash_for_what_does_not_apply():
    import math

    import pandas as pd

    from treegraft_lab.viz.style import styled

    df = pd.DataFrame({"share": [0.6147, math.nan], "ratio": [2.38, 1.0], "t (ms)": [1927.212185, 3.4], "x": [1.23456, 2.0]})
    html = styled(df, pct=["share"], ratio=["ratio"], ms=["t (ms)"]).to_html()
    for shown in ("61.5%", "2.38x", "1,927", "1.23", "—"):
        assert shown in html
    assert "1927.21" not in html and "NaN" not in html and "nan" not in html


def test_a_100_node_step_folds_siblings_and_stays_legible(run_release):
    st = run_release.steps
    big = st[(st["round"] == 0) & (st["new_nodes"] >= 100)]
    assert len(big), "the release's rule adds 100 nodes in a mid step"
    for step in [*big["step"].astype(int), None]:
        rows = run_release.tree_at(0, step)
        assert tree_figure(run_release, 0, step).layout.width <= MAX_WIDTH
        fig = tree_figure(run_release, 0, step, scroll=True)  # in a box that scrolls sideways, as the viewer shows it
        drawn = sum(len(tr.x) for tr in fig.data if tr.mode and "markers" in tr.mode and tr.x and tr.x[0] is not None)
        folds = next(tr for tr in fig.data if tr.name == "folded children")
        kept = int(run_release.tree_at(0)["kept"].sum())  # kept nodes are never folded; pruned siblings are
        assert 0 < len(folds.x) and kept <= drawn < len(rows)
        boxes = label_boxes(fig)
        assert len(boxes) >= 0.9 * drawn  # nearly every drawn node keeps its label
        for y in {b[0] for b in boxes}:
            row = sorted((lo, hi) for yy, lo, hi, _ in boxes if yy == y)
            assert all(h1 <= l2 for (_, h1), (l2, _) in zip(row, row[1:]))
    everything = tree_figure(run_release, 0, max_children=None)  # every node on request
    assert sum(len(tr.x) for tr in everything.data if tr.name in DRAFTER_LABELS.values() and tr.x and tr.x[0] is not None) \
        == len(run_release.tree_at(0))


def test_folding_hides_whole_subtrees_and_counts_them(run_release):
    rows = run_release.tree_at(0, 5)
    shown = shown_nodes(run_release.tree_at(0), MAX_CHILDREN)
    out = fold(rows, shown)
    marks = out[out["node"] >= FOLD]
    real = out[out["node"] < FOLD]
    assert len(real) + marks["folded_all"].sum() == len(rows)  # every node is drawn or counted in a fold
    assert set(real["parent"]) - set(real["node"]) == {-1}  # drawn nodes are closed under ancestors
    final = run_release.tree_at(0)
    pruned = real[~real["node"].isin(final[final["kept"]]["node"])]
    assert (pruned.groupby("parent").size() <= MAX_CHILDREN).all()  # kept nodes are all drawn, pruned ones fold
    assert set(final[final["kept"]]["node"]) <= set(real["node"])
    for _, m in marks.iterrows():
        p = m["node"] - FOLD
        assert m["parent"] == p and m["folded"] == int((rows["parent"] == p).sum()) - int((real["parent"] == p).sum())
    acc = run_release.tree_at(0)
    assert set(acc[acc["accepted"]]["node"]) <= shown  # the accepted path is never folded


def test_the_growth_animation_folds_every_frame_alike(run_release):
    fig = growth_animation(run_release, 0)
    assert len(fig.frames) == 6 and len({len(f.data) for f in fig.frames}) == 1
    assert max(sum(len(tr.x or ()) for tr in f.data if tr.mode == "markers+text") for f in fig.frames) < 120


def test_the_reselected_share_from_steps_equals_the_one_from_nodes():
    from treegraft_lab import TreeGraftDecoder, record
    from treegraft_lab.config import preset
    from treegraft_lab.tiny import tiny_pair

    pair = tiny_pair("llama", vocab=64, scale=4.0)
    dec = TreeGraftDecoder(pair, preset("full", schedule="10101", clock="a100-paper"))  # the full growth: chains, windows
    with record(dec) as rec:
        dec.generate([5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7], max_new_tokens=24)
    run = rec.to_run()
    s = stats.graft_summary(run)
    assert s.loc["all", "mid steps"] > 0
    assert stats.reselected_share(run.steps) == pytest.approx(s.loc["all", "reselected share"])


def test_the_animation_controls_sit_above_the_tree_in_a_figure_that_fits_a_laptop_screen(run63):
    """Play and the slider sit between the title and the plot, so that pressing play leaves the tree in view,
    whatever the tree's depth (a long prompt-lookup chain): the figure's height is bounded."""
    for rd in sorted(run63.rounds["round"].unique())[:4]:
        fig = growth_animation(run63, int(rd))
        plot_h = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
        for control in (fig.layout.updatemenus[0], fig.layout.sliders[0]):
            assert control.y > 1 and (control.y - 1) * plot_h < fig.layout.margin.t  # above the plot, inside the figure
        assert fig.layout.height <= 800 - 150


def test_a_wrapped_caption_never_leaves_the_word_profile_apart_from_the_profiles_name():
    from treegraft_lab.viz.tree import wrap_title

    caption = ("pair smollm2-pocket · scheduler a100-paper-topk-lookup-ngram+recycling, top-k pruning, 1 prompt(s) · "
               "profile NVIDIA A100 (the paper's setting, fp16) · derived from published costs")
    for width in range(300, 1400, 7):
        lines = wrap_title(caption, width).split("<br>")
        assert not any(line.rstrip(" ·").endswith("profile") for line in lines), (width, lines)
        assert " ".join(lines).replace("· ·", "·").split() == caption.split()  # nothing lost or added but breaks


def test_signal_tables_read_in_words_with_the_recorded_name_beside_and_no_row_numbers():
    import pandas as pd

    from treegraft_lab.schedule.signals import SIGNAL_WORDS

    cv = pd.DataFrame({"signal": ["root_match", "collapse_debt"], "gain": [0.3, 0.1]}, index=[7, 3])
    shown = stats.in_words(cv, {"gain": "gain over the context features alone"})
    assert list(shown.columns) == ["signal", "recorded as", "gain over the context features alone"]
    assert shown["signal"].tolist() == [SIGNAL_WORDS["root_match"][0], SIGNAL_WORDS["collapse_debt"][0]]
    assert shown["recorded as"].tolist() == ["root_match", "collapse_debt"] and shown.index.tolist() == [0, 1]
    html = shown.style.hide(axis="index").to_html()
    assert not any("_" in h for h in pd.Series(shown.columns)) and ">7<" not in html


def test_the_correlation_sentence_names_what_correlates_and_which_scheduler_inputs_hold_it():
    import pandas as pd

    from treegraft_lab.schedule.signals import RELEASE_SIGNALS, SIGNALS

    rho = dict.fromkeys(SIGNALS, 0.1) | {"root_match": 0.45, "recent_hit_rate": -0.38}
    corr = pd.DataFrame({"accepted": rho, "eta": dict.fromkeys(SIGNALS, 0.05)})
    hits = stats.correlated(corr)
    assert hits["signal"].tolist() == ["root_match", "recent_hit_rate"] and hits["rho"].tolist() == [0.45, -0.38]
    release = list(RELEASE_SIGNALS)
    text = stats.correlation_sentence(corr, {"cpu-value": release, "cpu-lookup": ["root_match", *release[:5]]}, release)
    assert text.startswith("Only 2 of the 10 signals correlate with the round's outcome here (|Spearman rho| >= 0.3): "
                           "context n-gram match (root_match), rho +0.45 with A")
    assert "recent copy hit rate (recent_hit_rate), rho -0.38 with A" in text
    assert "Neither is among the inputs of the scheduler cpu-value" in text
    assert "only context n-gram match (root_match) is among the inputs of the scheduler cpu-lookup" in text
    assert text.endswith("neither is among the six signals of the authors' release.")
    both = stats.correlation_sentence(corr, {"a": ["root_match", "recent_hit_rate"], "b": ["root_match", "recent_hit_rate"]},
                                      release)
    assert "Both are among the inputs of the schedulers a and b" in both
    assert "No scheduler is trained for this pair" in stats.correlation_sentence(corr, {}, release)
    quiet = stats.correlation_sentence(corr * 0.2, {"a": release}, release)
    assert quiet.startswith("No signal correlates") and "context n-gram match (root_match), |rho| 0.09" in quiet
