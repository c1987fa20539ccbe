"""Tree growth follows the authors' release: per-parent top-k children, n-gram chains, the drafting
cap and the reselection depth window; the old global top-W rule stays selectable."""

from __future__ import annotations

import math

import pytest
import torch

from treegraft_lab import graft, kv
from treegraft_lab.config import DecodeConfig, preset
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.drafters import NgramDrafter
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.growth import Growth
from treegraft_lab.hooks import record
from treegraft_lab.retrieval import SmallDrafters
from treegraft_lab.tiny import tiny_pair
from treegraft_lab.tree import MID, SMALL, DraftTree

L5 = math.log(0.5)
CONTEXT = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 3, 5, 6]


def started(**cfg) -> TreeGraftDecoder:
    dec = TreeGraftDecoder(tiny_pair("llama", vocab=64, scale=4.0), preset("full", **{"schedule": "small", "clock": "a100-paper", **cfg}))
    dec.start(CONTEXT)
    return dec


def test_the_release_defaults_and_the_drafting_cap():
    cfg = DecodeConfig()
    assert (cfg.expansion, cfg.width, cfg.children, cfg.ngram_chain, cfg.lookback) == ("per_parent", 10, 10, True, 5)
    assert cfg.node_cap == 511  # 1 + k + D * k * k
    assert DecodeConfig(max_nodes=100).node_cap == 100


@pytest.mark.parametrize("kwargs, words", [
    (dict(expansion="wide"), "expansion"), (dict(children=0), "children"), (dict(max_nodes=1), "max_nodes"),
    (dict(lookback=-1), "lookback"), (dict(ngram_chain="yes"), "ngram_chain"),
])
def test_bad_growth_options_get_a_clear_error(kwargs, words):
    with pytest.raises(TreeGraftError, match=words):
        DecodeConfig(**kwargs)


# ---------------------------------------------------------------------------- mid steps
def test_a_mid_step_gives_each_reselected_parent_its_own_top_k_children():
    dec = started(schedule="mid", width=3, children=4)
    tree = DraftTree.start(dec.root)
    a, _ = tree.add_child(0, 11, L5, SMALL, 1, 1)
    b, _ = tree.add_child(0, 12, L5, SMALL, 1, 1)
    s = dec.draft_step(tree, 2, True, [a, b], [0])
    pool, frontier, new, chain, fwd = s.pool, s.frontier, s.new, s.chain, s.forwarded
    assert pool == [0, a, b] and sorted(fwd) == [0, a, b] and chain == []
    assert sorted(frontier) == [0, a, b]  # W = 3: the whole pool
    for f in frontier:
        want = torch.topk(dec.mid.logq([f])[0], 4).indices.tolist()
        assert sorted(tree.tokens[c] for c in tree.children[f].values() if tree.creator[c] == MID or tree.drafted_by[c] & MID) \
            == sorted(want)
        assert {tree.tokens[v] for v in new if tree.parent[v] == f} == set(want)
    assert len(new) == 12  # 3 parents x 4 children: more than W


def test_a_mid_proposal_of_an_existing_token_only_rescores_it():
    dec = started(schedule="mid", width=1, children=3)
    tree = DraftTree.start(dec.root)
    dec.mid.score(tree, [0])
    best = torch.topk(dec.mid.logq([0])[0], 3).indices.tolist()
    old, _ = tree.add_child(0, best[1], math.log(0.01), SMALL, 1, 2)  # the n-gram drafter put it there, under-rated
    grand, _ = tree.add_child(old, 40, L5, SMALL, 2, 2)
    dec.draft_step(tree, 2, True, [old], [0])
    kids = tree.children[0]
    assert len(kids) == 3 and kids[best[1]] == old  # reused, not duplicated; its subtree stays
    assert tree.drafted_by[old] == SMALL | MID
    assert tree.logp[old] == pytest.approx(float(dec.mid.logq([0])[0][best[1]]))
    assert tree.score[grand] == pytest.approx(tree.logp[old] + L5)


def test_the_global_rule_adds_at_most_w_children_per_step():
    dec = started(schedule="mid", width=3, expansion="global")
    tree = DraftTree.start(dec.root)
    a, _ = tree.add_child(0, 11, L5, SMALL, 1, 1)
    b, _ = tree.add_child(0, 12, L5, SMALL, 1, 1)
    s = dec.draft_step(tree, 2, True, [a, b], [0])
    frontier, new = s.frontier, s.new
    assert len(frontier) == 3 and len(new) == 3


# ---------------------------------------------------------------------------- the depth window
def window_tree() -> DraftTree:
    """root -> a (d1) -> c (d2) -> e (d3, a chain tail); root -> b (d1) -> d (d2). Root and a scored."""
    t = DraftTree.start(7)
    for parent, tok in ((0, 11), (0, 12), (1, 13), (2, 14), (3, 15)):
        t.add_child(parent, tok, L5, SMALL, 1, 1)
    t.mid_scored[0] = t.mid_scored[1] = True
    return t


def test_the_reselection_pool_is_a_depth_window_above_the_deepest_frontier_node():
    t = window_tree()
    n_k = [3, 4]  # the frontier at depth 2; e (depth 3) is deeper and cannot be reselected
    assert graft.candidate_pool(t, n_k, True, lookback=5) == [0, 1, 2, 3, 4]  # scored nodes included
    assert graft.candidate_pool(t, n_k, True, lookback=1) == [1, 2, 3, 4]
    assert graft.candidate_pool(t, n_k, True, lookback=0) == [3, 4]
    assert graft.candidate_pool(t, n_k, True, lookback=None) == [2, 3, 4, 5]  # the paper's text: every unscored node
    assert graft.candidate_pool(t, n_k, False, lookback=5) == n_k  # w/o EG: the conventional pool
    assert graft.candidate_pool(t, [], True, lookback=0, previous=[1, 2]) == [1, 2]  # nothing grew: the last frontier


def test_a_mid_step_forwards_only_what_it_has_not_scored():
    dec = started(schedule="mid")
    forwarded, cache = [], [kv.cache_len(dec.mid.cache)]

    def seen(ev) -> None:
        forwarded.append(list(ev.data["forwarded"]))
        cache.append(kv.cache_len(dec.mid.cache))

    with dec.hooks([("step.expand", seen)]):
        dec.run_round(commit=False)
    flat = [v for f in forwarded for v in f]
    assert len(flat) == len(set(flat)) > 100  # every node at most once a round, big trees
    assert [b - a for a, b in zip(cache, cache[1:])] == [len(f) for f in forwarded]  # one forward of just those


# ---------------------------------------------------------------------------- small steps
def test_ngram_chains_shrink_by_one_token_per_step():
    dec = started(schedule="small")
    dec.small = SmallDrafters(("ngram",), 5)
    dec.small.index.extend(list(range(10, 30)) + [10])  # 10 is followed by 11 12 13 ... once
    dec.root = 10
    for k in range(1, 6):
        tree = DraftTree.start(10)
        s = dec.draft_step(tree, k, False, [0], [])
        frontier, new, chain = s.frontier, s.new, s.chain
        assert frontier == [0] and len(new) == 1
        want = max(1, 5 - (k - 1))
        assert max(tree.depth) == want and len(chain) == want - 1
        assert tree.path_tokens(len(tree) - 1) == list(range(10, 11 + want))
        assert all(tree.step[v] == k and tree.ngram_n[v] >= 1 for v in range(1, len(tree)))
    dec.growth = Growth.of(preset("full", schedule="small", ngram_chain=False))
    tree = DraftTree.start(10)
    dec.draft_step(tree, 1, False, [0], [])
    assert max(tree.depth) == 1
    dec.growth = Growth.of(preset("full", schedule="small", chain_len=9))  # a fixed length, as prompt lookup drafts
    for k in (1, 5):
        tree = DraftTree.start(10)
        dec.draft_step(tree, k, False, [0], [])
        assert max(tree.depth) == 9 and tree.path_tokens(len(tree) - 1) == list(range(10, 20))
    with pytest.raises(TreeGraftError, match="chain_len"):
        DecodeConfig(chain_len=0)


def test_each_small_frontier_parent_backs_off_until_it_has_k_distinct_first_tokens():
    d = NgramDrafter(5)
    d.index.extend([1, 2, 3, 4, 9, 2, 3, 5, 3, 6, 3, 7, 3, 4, 1, 2, 3])  # after "2 3": 4, 5 (2-gram); after "3": 4 5 6 7
    t = DraftTree.start(3)
    props = d.propose(t, [0], width=10, children=3)
    assert [(p[1], p[3]) for p in props] == [(4, 3), (5, 2), (6, 1)]  # "1 2 3" -> 4 first, then back-off
    assert len(d.propose(t, [0], width=10, children=10)) == 4  # only 4 distinct continuations exist
    glob = d.propose(t, [0], width=10)  # the global rule: the longest match only
    assert [p[1] for p in glob] == [4]


def test_the_drafting_cap_keeps_the_best_proposals():
    dec = started(schedule="mid", max_nodes=6)
    tree = DraftTree.start(dec.root)
    dec.draft_step(tree, 1, True, [0], [])
    assert len(tree) == 6 and sum(tree.alive) == 6
    best = torch.topk(dec.mid.logq([0])[0], 5).indices.tolist()
    assert [tree.tokens[v] for v in range(1, 6)] == best
    new = dec.draft_step(tree, 2, True, [1, 2, 3, 4, 5], [0]).new
    assert len(tree) == 6 and set(new) <= set(range(1, 6))  # full: only existing children are reused


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_release_trees_grow_far_past_the_budget_and_prune_to_it(arch):
    pair = tiny_pair(arch, vocab=64, scale=4.0)
    dec = TreeGraftDecoder(pair, preset("full", schedule="10101", clock="a100-paper"))
    with record(dec) as rec:
        dec.generate(CONTEXT, max_new_tokens=6)
    f = rec.to_frame()
    assert f["rounds"]["nodes"].max() > 100 and (f["rounds"]["kept"] <= 63).all()
    assert (f["rounds"]["nodes"] <= 511).all()
    mid = f["steps"][f["steps"]["call_mid"] & (f["steps"]["step"] > 1)]
    assert (mid["pool_size"] > mid["conventional_pool"]).any()
    assert (f["steps"]["new_nodes"] > 10).any()  # more than W new nodes in one step
    assert (f["steps"]["chain_nodes"] > 0).any()  # small steps drafted chains
    n = f["nodes"]
    made = n[n["created_step"] == n["step"]]
    assert made["new"].all() and len(made) == f["steps"].eval("new_nodes + chain_nodes").sum() - reused(f)


def reused(f) -> int:
    """Landed first tokens that were existing children (counted in new_nodes, not created)."""
    n = f["nodes"]
    landed_old = n[n["new"] & (n["created_step"] != n["step"])]
    return len(landed_old)


def test_a_cached_run_recorded_before_the_growth_options_is_recorded_again(tmp_path, monkeypatch):
    from treegraft_lab import workbench as wb

    monkeypatch.setenv("TREEGRAFT_RUNS_DIR", str(tmp_path))
    monkeypatch.delenv("SMOKE", raising=False)
    monkeypatch.delenv("RERECORD", raising=False)
    old = wb.tiny_run(rounds=1)
    old.runs["config"] = ['{"depth": 5, "width": 10, "schedule": "10101"}']  # a run from before
    old.save(tmp_path / "x")
    calls = []

    def rec():
        calls.append(1)
        return wb.tiny_run(rounds=1)

    assert '"expansion"' in wb.cached_run("x", rec).runs["config"][0] and calls == [1]
    wb.cached_run("x", rec)
    assert calls == [1]  # a current run is loaded, not recorded again
