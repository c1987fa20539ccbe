"""The release's growth rules, each on a hand-made context (no model)."""

from __future__ import annotations

import math

import pytest

from treegraft_lab import graft
from treegraft_lab.config import DecodeConfig
from treegraft_lab.drafters import NgramDrafter
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.tree import DraftTree

# context: 1 2 3 | 1 2 4 | 1 2 3 5 | 9 ... the root is the last token, 2
CONTEXT = [1, 2, 3, 1, 2, 4, 1, 2, 3, 5, 1, 2]


def drafter(tokens=CONTEXT) -> NgramDrafter:
    d = NgramDrafter(5, 1)
    d.extend(tokens)
    return d


def test_the_release_matcher_takes_every_continuation_of_every_match_most_specific_then_latest():
    d, tree = drafter(), DraftTree.start(CONTEXT[-1])
    chains, sizes, ended = d.release_matches(tree, 0, 2, k=10)
    # "1 2" matched at 0, 3 and 6 (sizes up to 2): continuations (3, 1), (4, 1), (3, 5); the latest first
    assert [c for c, _, _ in chains][:3] == [(3, 5), (4, 1), (3, 1)]
    assert sizes[3] == sizes[4] == 2
    assert ended  # far fewer than 10 distinct next tokens
    assert not d.release_matches(tree, 0, 2, k=2)[2]  # 3 and 4: enough for k = 2


def test_a_continuation_that_does_not_fit_in_the_context_is_not_a_match():
    d, tree = drafter(), DraftTree.start(CONTEXT[-1])
    chains, _, _ = d.release_matches(tree, 0, 5, k=10)
    # after position 8 only 4 tokens follow: that occurrence gives no chain
    assert [c for c, _, _ in chains] == [(4, 1, 2, 3, 5), (3, 1, 2, 4, 1)]


def test_a_chain_scores_its_first_token_only_and_keeps_the_higher_score():
    tree = DraftTree.start(2)
    graft.add_chain(tree, 0, (3, 5), 2, -1.0, 1, cap=100)
    first, tail = tree.children[0][3], tree.children[tree.children[0][3]][5]
    assert tree.score[first] == -1.0 and tree.score[tail] == -math.inf
    graft.add_chain(tree, 0, (3, 1), 1, -3.0, 1, cap=100)  # lower: kept at -1
    assert tree.score[first] == -1.0 and len(tree) == 4
    graft.add_chain(tree, 0, (3,), 1, -0.5, 1, cap=4)  # higher: raised; the cap stops new nodes
    assert tree.score[first] == -0.5
    graft.add_chain(tree, 0, (7,), 1, 0.0, 1, cap=4)
    assert 7 not in tree.children[0]


def test_an_ended_parent_adds_its_chains_but_no_child_to_the_next_frontier():
    d, tree = drafter(), DraftTree.start(CONTEXT[-1])
    kept = graft.release_small_step(tree, d, [0], 2, 10, 511, 1, lambda pos, tok: 0.0, stop=True)
    assert kept == {} and len(tree) > 1  # chains grafted, frontier empty
    tree = DraftTree.start(CONTEXT[-1])
    kept = graft.release_small_step(tree, d, [0], 2, 10, 511, 1, lambda pos, tok: 0.0, stop=False)
    assert set(kept) == set(tree.children[0].values())


def test_the_next_frontier_ranks_by_match_size_then_score_and_cuts_after_step_one():
    tree = DraftTree.start(0)
    a, b, c = (tree.add_child(0, t, lp, 1, 1)[0] for t, lp in ((1, -0.1), (2, -2.0), (3, -1.0)))
    assert graft.next_frontier(tree, {a: 1, b: 3, c: 1}, width=2, k=1) == [b, a, c]
    assert graft.next_frontier(tree, {a: 1, b: 3, c: 1}, width=2, k=2) == [b, a]


def test_the_fallback_is_the_most_frequent_token_latest_then_smallest_on_ties():
    assert drafter().index.most_frequent() == 2  # 1 and 2 four times each; 2 is the latest
    assert drafter([5, 4, 4, 5]).index.most_frequent() == 5
    assert drafter([7, 3]).index.most_frequent() == 3


def test_the_release_matcher_needs_its_own_prompt_forward_and_the_ngram_drafter():
    with pytest.raises(TreeGraftError, match="fuse_prompt=False"):
        DecodeConfig(matcher="release")
    with pytest.raises(TreeGraftError, match="small='ngram'"):
        DecodeConfig(matcher="release", fuse_prompt=False, small="ngram+suffix")
    with pytest.raises(TreeGraftError, match="frontier_order"):
        DecodeConfig(frontier_order="depth")
