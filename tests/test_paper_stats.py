"""The paper's statistics under the release's definitions, pinned on a hand-built run and a recorded one."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from treegraft_lab import DecodeConfig, TreeGraftDecoder, record
from treegraft_lab.hooks import Run
from treegraft_lab.tiny import tiny_pair
from treegraft_lab.viz.stats import paper_statistics, paper_steps

# One round of schedule 10111, W = 2, lookback 5. Node: (parent, depth, score).
NODES = {0: (-1, 0, 0.0), 1: (0, 1, -0.1), 2: (0, 1, -0.5), 3: (1, 2, -0.3), 4: (2, 2, -0.9), 5: (3, 3, -5.0),
         6: (2, 2, -2.0), 7: (3, 3, -0.4), 8: (3, 3, -0.6), 9: (7, 4, -0.5), 10: (6, 3, -0.7), 11: (6, 3, -3.0)}
# step: (call_mid, frontier F_k, first tokens landed (next N_k), chain nodes, pool_size, conventional_pool as recorded)
STEPS = {1: (True, [0], [1, 2], [], 1, 1),
         2: (False, [1, 2], [3, 4], [5], 2, 2),
         3: (True, [2, 3], [6, 7, 8], [], 5, 2),
         4: (True, [6, 7], [9, 10, 11], [], 9, 3),
         5: (True, [1, 10], [], [], 12, 3)}


def hand_run(output_tokens: int = 4, accepted: int = 3, **config) -> Run:
    cfg = {**DecodeConfig(schedule="10111", width=2, lookback=5, **config).to_dict()}
    runs = pd.DataFrame([{"run": 0, "prompt_ids": [1, 2], "output_ids": list(range(output_tokens)),
                          "config": json.dumps(cfg, default=str), "category": "x"}])
    rounds = pd.DataFrame([{"run": 0, "round": 0, "accepted": accepted}])
    steps, nodes, made = [], [], 1
    for k, (call, front, new, chain, pool, conv) in STEPS.items():
        made = max([made, *[v + 1 for v in new + chain]])
        steps.append({"run": 0, "round": 0, "step": k, "call_mid": call, "pool_size": pool, "conventional_pool": conv,
                      "frontier_size": len(front)})
        for v in range(made):
            p, d, s = NODES[v]
            nodes.append({"run": 0, "round": 0, "step": k, "node": v, "parent": p, "depth": d, "score": s,
                          "alive": True, "mid_scored": False, "in_frontier": v in front, "new": v in new + chain,
                          "chain": v in chain})
    return Run(runs=runs, rounds=rounds, steps=pd.DataFrame(steps), nodes=pd.DataFrame(nodes), tree=pd.DataFrame())


def test_a_prompt_forward_of_its_own_counts_as_a_target_forward_and_a_fused_one_does_not():
    fused, own = (paper_statistics(hand_run(fuse_prompt=f)) for f in (True, False))
    assert fused.loc["acceptance length A", "paper definition"] == pytest.approx(4 / 1)
    assert own.loc["acceptance length A", "paper definition"] == pytest.approx(4 / 2)  # 1 round + 1 prompt forward
    assert fused.loc["acceptance length A", "n"].endswith("(1 rounds + 0 prompt forwards)")


def test_pool_and_reference_depths_before_each_step_by_hand():
    s = paper_steps(hand_run()).set_index("step")
    # k = 1 the root alone; k = 2 depths <= 1; k = 3 depths <= 2 (the chain tail at 3 is out); then all
    assert s["pool"].tolist() == [1, 3, 5, 9, 12]
    # nodes at the depths of the top-W of N_k: k = 4 takes {7, 8} (depth 3), not node 6 (depth 2)
    assert s["ref_depths"].tolist() == [[0], [1], [2], [3], [3, 4]]
    assert s["conventional"].tolist() == [1, 2, 2, 3, 6]
    assert s.loc[[1, 3, 4, 5], "reselected"].tolist() == [0, 1, 1, 1]
    assert math.isnan(s.loc[2, "reselected"])  # a small step reselects nothing


def test_paper_statistics_by_hand():
    t = paper_statistics(hand_run())
    assert list(t.columns) == ["paper definition", "ours", "n", "paper", "definition"]
    v = t["paper definition"]
    assert v["acceptance length A"] == pytest.approx(4 / 1)  # 4 new tokens / 1 round: the prompt rode in it
    assert t.loc["acceptance length A", "ours"] == 3  # accepted draft tokens per round
    # mid calls k = 1, 3, 4, 5: shares 0, 1/2, 1/2, 1/2 (k = 1 counted as 0)
    assert v["reselected share (mean of per-call shares)"] == pytest.approx(1.5 / 4)
    assert v["reselected share (pooled)"] == pytest.approx(3 / 7)
    # ours: k >= 2 pooled, below the mean depth of N_k: 1 of 2, 1 of 2 (6 < 8/3), 2 of 2 (10 < 10/3)
    assert t.loc["reselected share (pooled)", "ours"] == pytest.approx(4 / 6)
    assert v["mean candidate pool"] == pytest.approx(30 / 5)
    assert v["conventional pool"] == pytest.approx(14 / 5)
    assert v["pool ratio"] == pytest.approx(30 / 14)
    assert t.loc["mean candidate pool", "ours"] == pytest.approx(26 / 3)
    assert t.loc["pool ratio", "ours"] == pytest.approx(26 / 8)
    assert t.loc["reselected share (pooled)", "paper"] == pytest.approx(0.6147)
    assert t.loc["pool ratio", "paper"] == 2.38 and t.loc["mean candidate pool", "paper"] == 112.54
    assert "INFERRED" in t.loc["conventional pool", "definition"]
    assert t.loc["reselected share (mean of per-call shares)", "n"].startswith("4 mid calls (1 at k = 1")


@pytest.mark.parametrize("growth", ["full", "release"])
def test_acceptance_length_equals_committed_tokens_over_counted_target_forwards(growth):
    from treegraft_lab.config import GROWTHS

    pair = tiny_pair(scale=4.0)
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule="10101", budget=16, clock="a100-paper", small="ngram", **GROWTHS[growth]))
    forwards, committed, returned = [], [], 0
    pair.target.register_forward_hook(lambda *a: forwards.append(1))  # every target forward
    prompts = ([3, 5, 7, 9, 3, 5, 7], [1, 2, 3, 1, 2, 3, 1, 2])
    with record(dec) as rec, dec.hooks([("round.accept", lambda ev: committed.append(len(ev.data["path"])))]):
        for prompt in prompts:
            returned += len(dec.generate(prompt, max_new_tokens=20).token_ids)
    run = rec.to_run()
    own = len(prompts) if growth == "release" else 0  # the release's prompt forward; else it rides in round 1
    assert len(forwards) == len(run.rounds) + own
    t = paper_statistics(run).loc["acceptance length A"]
    # a verification commits its accepted path and the bonus token: len(path) with the root, the last round whole
    assert t["paper definition"] == pytest.approx(sum(committed) / len(forwards))
    assert t["paper definition"] > run.rounds["accepted"].mean()  # the bonus token is counted
    assert t["n"].startswith(f"{sum(committed):,} tokens committed / {len(forwards):,} target forwards")


def test_both_tables_of_notebook_03_read_one_acceptance_length_where_max_new_tokens_cut_the_output():
    """The release comparison and the paper's statistics count A alike: the tokens the verifications
    committed (the last round whole, as the release counts), not the fewer the call returned."""
    from treegraft_lab.viz.stats import acceptance_length, release_statistics

    run = hand_run(output_tokens=2, accepted=3)  # 4 tokens committed, 2 returned: max_new_tokens cut the round
    a, tokens, forwards = acceptance_length(run)
    assert (a, tokens, forwards) == (4.0, 4, 1)
    t = paper_statistics(run).loc["acceptance length A"]
    assert t["paper definition"] == a == release_statistics(run).loc["A, release count", "value"]
    assert t["n"] == "4 tokens committed / 1 target forwards (1 rounds + 0 prompt forwards); 2 returned, the rest cut " \
                     "by max_new_tokens or the end of text"
    own = hand_run(output_tokens=2, accepted=3, fuse_prompt=False)  # a prompt forward of its own counts one more
    assert acceptance_length(own)[0] == paper_statistics(own).loc["acceptance length A", "paper definition"] == 2.0
    assert release_statistics(own).loc["A, release count", "value"] == 2.0


def test_bench_acceptance_counts_one_prefill_per_generation():
    from treegraft_lab.viz.stats import bench_acceptance

    recs = pd.DataFrame([
        {"clock": "wall", "category": "a", "method": "x", "new_tokens": 30, "rounds": 9.0, "accepted": 21.0},
        {"clock": "wall", "category": "b", "method": "x", "new_tokens": 10, "rounds": 4.0, "accepted": 6.0},
        {"clock": "wall", "category": "a", "method": "ar", "new_tokens": 30, "rounds": math.nan, "accepted": math.nan},
    ])
    a = bench_acceptance(recs).set_index(["category", "method"])
    assert a.loc[("a", "x"), "A"] == pytest.approx(30 / 10)
    assert a.loc[("overall", "x"), "A"] == pytest.approx(40 / 15)
    assert a.loc[("overall", "x"), "accepted per round"] == pytest.approx(27 / 13)
    assert "ar" not in a.index.get_level_values("method")  # plain decoding has no rounds


def test_table_figures_and_categories_share_the_paper_definitions():
    from treegraft_lab.viz.stats import paper_by_category, paper_summary, reselection_by_step

    run = hand_run()
    s = paper_summary(run, by_category=True)
    t = paper_statistics(run)["paper definition"]
    assert s.loc["all", "reselected (mean of calls)"] == pytest.approx(t["reselected share (mean of per-call shares)"])
    assert s.loc["all", "reselected (pooled)"] == s.loc["x", "reselected (pooled)"] == pytest.approx(3 / 7)
    assert s.loc["all", "pool ratio"] == pytest.approx(t["pool ratio"])
    assert s.loc["all", "ours: reselected share"] == pytest.approx(4 / 6)
    fig = reselection_by_step(run)
    assert fig.axes[1].get_title().startswith("42.9% of 7 graft positions")
    assert [round(p.get_height(), 3) for p in fig.axes[1].patches] == [0.0, 0.5, 0.5, 0.5]  # k = 1, 3, 4, 5
    assert paper_by_category(s)._repr_png_()[:4] == b"\x89PNG"


def test_bootstrap_interval_holds_the_pooled_ratio_and_closes_when_prompts_agree():
    import pandas as pd

    from treegraft_lab.viz.stats import bootstrap_ratio

    num, den = pd.Series([1.0, 4.0, 2.0, 9.0]), pd.Series([2.0, 5.0, 4.0, 10.0])
    low, high = bootstrap_ratio(num, den)
    assert low < num.sum() / den.sum() < high
    assert low >= (num / den).min() and high <= (num / den).max()  # a ratio of sums lies between the prompts' ratios
    same = bootstrap_ratio(pd.Series([3.0, 6.0, 1.5]), pd.Series([2.0, 4.0, 1.0]))
    assert same == pytest.approx((1.5, 1.5))
    assert all(math.isnan(x) for x in bootstrap_ratio(pd.Series([1.0]), pd.Series([2.0])))


def test_graft_figures_keep_axis_titles_apart_and_bar_labels_above_the_paper_line():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from treegraft_lab.viz.stats import paper_by_category, paper_summary, reselection_by_step

    run = hand_run()
    summary = paper_summary(run, by_category=True)
    fig = paper_by_category(pd.concat([summary.loc[["all"]].assign(**{"mid calls": 1234})] * 3).set_axis(pd.Index(["all", "code", "summarization"], name="group")))
    FigureCanvasAgg(fig).draw()
    r = fig.canvas.get_renderer()
    left, right = (ax.xaxis.label.get_window_extent(r) for ax in fig.axes[:2])
    assert left.x1 < right.x0, (left, right)  # the two x-axis titles do not run together
    for ax in fig.axes[:2]:  # bar labels drawn over the dashed paper line, on an opaque box
        line = next(ln for ln in ax.get_lines() if ln.get_linestyle() == "--")
        assert ax.texts and all(t.get_zorder() > line.get_zorder() and t.get_bbox_patch() is not None for t in ax.texts)
    fig = reselection_by_step(run)
    line = next(ln for ln in fig.axes[1].get_lines() if ln.get_linestyle() == "--")
    for text in fig.axes[1].texts:  # "50%\nn=1": drawn over the dashed paper line, on an opaque box
        assert text.get_zorder() > line.get_zorder() and text.get_bbox_patch() is not None
        assert text.get_bbox_patch().get_facecolor()[3] == 1.0
