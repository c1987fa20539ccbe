"""WHEN, WHERE and HOW as three named methods of `drafting.GraftDrafter`, each called on its own;
the parts' base classes; hooks that return a replacement; the oracle as a drafter."""

from __future__ import annotations

import pytest

from treegraft_lab.config import DecodeConfig
from treegraft_lab.costs import DeviceProfile
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.drafting import GraftDrafter, ReleaseDrafter, drafter_for
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.growth import GROWTH_RULES
from treegraft_lab.parts import MidDrafter, Pruner, SmallDrafter, adopt
from treegraft_lab.replay import OracleDrafter
from treegraft_lab.schedule.policies import MaskPolicy
from treegraft_lab.tiny import tiny_pair
from treegraft_lab.tree import MID, SMALL, DraftTree

PROFILE = DeviceProfile("test", target={1: 10.0, 64: 16.0}, mid={1: 2.0, 64: 5.0}, small_ms=0.1)
CONTEXT = [5, 6, 7, 8, 5, 6, 7, 9, 5, 6, 7, 8, 5, 6]


def started(**cfg) -> TreeGraftDecoder:
    dec = TreeGraftDecoder(tiny_pair(), DecodeConfig(**{"prune": "topk", "small": "ngram", **cfg}), profile=PROFILE)
    dec.start(list(CONTEXT))
    return dec


def test_when_asks_the_policy_unless_the_call_cap_is_reached():
    dec, g = started(schedule="10101", call_budget=1), GraftDrafter()
    ctx = dec.step_context(1, [], DraftTree.start(dec.root), [0], [])
    assert g.when(dec, MaskPolicy((1, 0, 1, 0, 1)), ctx) is True
    assert g.when(dec, MaskPolicy((0, 0, 1, 0, 1)), ctx) is False
    capped = dec.step_context(3, [1, 0], DraftTree.start(dec.root), [0], [])
    assert g.when(dec, MaskPolicy((1, 0, 1, 0, 1)), capped) is None  # one call made: the policy is not asked


def test_where_a_small_step_expands_the_top_w_of_the_new_nodes_and_a_mid_step_reselects_from_the_pool():
    dec, g = started(schedule="10101", width=2), GraftDrafter()
    tree = DraftTree.start(dec.root)
    kids = [tree.add_child(0, t, lp, SMALL, 1)[0] for t, lp in ((7, -0.1), (8, -2.0), (9, -0.5))]
    grand, _ = tree.add_child(kids[1], 3, -0.1, SMALL, 2)
    small = g.where(dec, tree, 2, False, kids)
    assert small.frontier == [kids[0], kids[2]] and small.forwarded == [] and small.size == 2
    mid = g.where(dec, tree, 3, True, [grand], [kids[1]])
    assert set(mid.pool) >= {kids[0], kids[2], grand}  # earlier depths are in the window: reselectable
    assert len(mid.frontier) == 2 and set(mid.frontier) <= set(mid.pool)
    assert mid.size >= len(mid.forwarded) > 0 and all(tree.mid_scored[v] for v in mid.forwarded)


def test_how_grafts_beside_what_is_there_and_labels_each_node_with_its_drafter():
    dec, g = started(schedule="10101", lookup=0), GraftDrafter()
    tree = DraftTree.start(dec.root)
    old, _ = tree.add_child(0, 7, -0.1, SMALL, 1)
    new = g.how(dec, tree, 2, True, [0], [("mid", [(0, 11, -0.3, 0), (0, 7, -0.2, 0)])])
    assert tree.alive[old] and tree.children[0][7] == old  # the same token is reused, not replaced
    (fresh,) = [v for v in new if v != old]
    assert tree.tokens[fresh] == 11 and tree.creator[fresh] == MID and "mid" in tree.source[fresh]
    overwrite = started(schedule="10101", lookup=0, non_destructive=False)
    t2 = DraftTree.start(overwrite.root)
    other, _ = t2.add_child(0, 9, -0.1, SMALL, 1)
    g.how(overwrite, t2, 2, True, [0], [("mid", [(0, 11, -0.3, 0)])])
    assert not t2.alive[other]  # without ND a parent's other children are discarded


def test_the_drafter_for_a_config_is_the_releases_the_oracles_or_treegrafts():
    assert type(drafter_for(DecodeConfig(), GROWTH_RULES["lookup"])) is GraftDrafter
    assert type(drafter_for(DecodeConfig(), GROWTH_RULES["release"])) is ReleaseDrafter
    oracle = drafter_for(DecodeConfig(schedule="oracle"), GROWTH_RULES["release"])
    assert isinstance(oracle, OracleDrafter) and type(oracle.inner) is ReleaseDrafter


def test_a_part_with_the_required_methods_gains_the_bases_defaults_and_one_without_is_refused():
    class Mine:
        def prune(self, tree, budget, context=None):
            return [0]

    part = Mine()
    assert adopt(part, Pruner, "pruner") is part and isinstance(part, Mine) and isinstance(part, Pruner)
    assert part.chances(DraftTree.start(1)) is None and part.carried_state() is None
    assert type(part).__name__ == "Mine"

    class NoScore:
        def start(self, context, lazy=False): ...

    with pytest.raises(TreeGraftError, match="mid= takes a MidDrafter .* lacks score, propose, commit, rollback"):
        adopt(NoScore(), MidDrafter, "mid")
    small = SmallDrafter()
    with pytest.raises(NotImplementedError):
        small.propose(DraftTree.start(1), [0], 4)  # a required method has no default


def test_a_hook_may_replace_the_pruned_set_and_decoding_stays_lossless():
    dec = TreeGraftDecoder(tiny_pair(), DecodeConfig(schedule="small", prune="topk", small="ngram"), profile=PROFILE)
    plain = dec.generate(CONTEXT, max_new_tokens=12)
    with dec.hooks([("round.prune", lambda ev: [0])]):  # verify the root alone: plain decoding
        rooted = dec.generate(CONTEXT, max_new_tokens=12)
    assert rooted.token_ids == plain.token_ids
    assert all(r.kept == 0 and r.accepted == 0 for r in rooted.rounds)


def test_a_hook_may_replace_the_decision_at_a_step():
    dec = TreeGraftDecoder(tiny_pair(), DecodeConfig(schedule="10000", prune="topk", small="ngram"), profile=PROFILE)
    reference = dec.generate(CONTEXT, max_new_tokens=12)
    with dec.hooks([("step.decide", lambda ev: True if ev.step == 2 else None)]):
        forced = dec.generate(CONTEXT, max_new_tokens=12)
    assert forced.token_ids == reference.token_ids
    assert {r.schedule[:2] for r in reference.rounds} == {"10"} and {r.schedule[:2] for r in forced.rounds} == {"11"}
