"""Tree invariants, checked on random trees (hypothesis)."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from treegraft_lab import graft
from treegraft_lab.tree import MID, SMALL, DraftTree

# a random tree: for each new node, (parent choice in [0, 1), token, log p, creator is mid?)
nodes = st.lists(
    st.tuples(st.floats(0, 0.999), st.integers(0, 7), st.floats(-6, 0), st.booleans()), min_size=0, max_size=60
)


def build(spec) -> DraftTree:
    t = DraftTree.start(100)
    for u, tok, lp, mid in spec:
        t.add_child(int(u * len(t)), tok, lp, MID if mid else SMALL, 1)
    return t


@settings(max_examples=200, deadline=None)
@given(nodes, st.integers(1, 70))
def test_pruning_keeps_ancestor_closure_and_the_budget(spec, budget):
    t = build(spec)
    kept = t.prune(budget)
    assert kept[0] == 0 and kept == sorted(set(kept))
    assert len(kept) - 1 == min(budget, len(t) - 1)
    ks = set(kept)
    assert all(t.parent[v] in ks for v in kept[1:])
    # the kept nodes are the best by path score: nothing dropped beats a kept node
    dropped = [v for v in range(1, len(t)) if v not in ks]
    if dropped and len(kept) > 1:
        assert max(t.score[v] for v in dropped) <= min(t.score[v] for v in kept[1:]) + 1e-9


@settings(max_examples=200, deadline=None)
@given(nodes, st.lists(st.tuples(st.floats(0, 0.999), st.integers(0, 7), st.floats(-6, 0)), max_size=20))
def test_non_destructive_grafting_never_removes_a_node(spec, proposals):
    t = build(spec)
    before = [(v, t.tokens[v], t.parent[v]) for v in range(len(t))]
    props = [(int(u * len(t)), tok, lp, 0) for u, tok, lp in proposals]
    landed = graft.graft(t, props, MID, 2, non_destructive=True)
    assert all(t.alive)
    assert [(v, t.tokens[v], t.parent[v]) for v, _, _ in before] == before
    for (p, tok, _, _), v in zip(props, landed):
        assert t.parent[v] == p and t.tokens[v] == tok
    # tokens stay unique among a node's children (duplicates from the two drafters merge)
    for v in range(len(t)):
        kids = [c for c in range(len(t)) if t.parent[c] == v]
        assert len({t.tokens[c] for c in kids}) == len(kids)


@settings(max_examples=200, deadline=None)
@given(nodes, st.lists(st.floats(0, 0.999), max_size=30))
def test_the_expanded_pool_is_every_live_node_the_mid_drafter_has_not_scored(spec, scored):
    t = build(spec)
    for u in scored:  # mark an ancestor-closed set as scored
        for v in t.path(int(u * len(t))):
            t.mid_scored[v] = True
    pool = graft.candidate_pool(t, [len(t) - 1], expanded=True)
    assert pool == [v for v in range(len(t)) if not t.mid_scored[v]]
    assert graft.candidate_pool(t, [len(t) - 1], expanded=False) == [len(t) - 1]
    fwd = graft.to_forward(t, pool)
    assert set(fwd) == set(pool)


def subtree(t: DraftTree, v: int) -> set[int]:
    out, stack = set(), [v]
    while stack:
        u = stack.pop()
        out.add(u)
        stack.extend(c for c in range(len(t)) if t.parent[c] == u)
    return out


@settings(max_examples=100, deadline=None)
@given(nodes, st.lists(st.tuples(st.floats(0, 0.999), st.integers(0, 7), st.floats(-6, 0)), min_size=1, max_size=10))
def test_overwriting_removes_exactly_the_grafted_parents_other_children(spec, proposals):
    t = build(spec)
    props = [(int(u * len(t)), tok, lp, 0) for u, tok, lp in proposals]
    proposed: dict[int, set[int]] = {}
    for p, tok, _, _ in props:
        proposed.setdefault(p, set()).add(tok)
    doomed = set().union(*(subtree(t, c) for c in range(1, len(t)) if t.parent[c] in proposed
                           and t.tokens[c] not in proposed[t.parent[c]]))
    assume(doomed)  # a case where overwriting has something to remove
    n0 = len(t)
    graft.graft(t, props, MID, 2, non_destructive=False)
    assert {v for v in range(n0) if not t.alive[v]} == doomed
    for p, tok, _, _ in props:  # every proposal under a surviving parent is its live child
        if t.alive[p]:
            assert t.alive[t.children[p][tok]]
    assert all(t.alive[v] for v in range(n0, len(t)))


def test_path_scores_are_sums_of_edge_scores_after_a_refresh():
    t = DraftTree.start(1)
    a, _ = t.add_child(0, 5, -0.5, SMALL, 1)
    b, _ = t.add_child(a, 6, -1.0, SMALL, 2)
    t.add_child(0, 5, -0.1, MID, 3)  # the mid drafter proposes the same token: reuse, refresh
    assert t.score[b] == -1.1 and t.drafted_by[a] == SMALL | MID and len(t) == 3


def test_ancestor_matrix_marks_self_and_ancestors():
    t = DraftTree.start(1)
    a, _ = t.add_child(0, 2, -1, SMALL, 1)
    b, _ = t.add_child(0, 3, -1, SMALL, 1)
    c, _ = t.add_child(a, 4, -1, SMALL, 2)
    m = t.ancestor_matrix([0, a, b, c]).int().tolist()
    assert m == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]
