"""WHERE to graft (candidate pool, frontier selection) and HOW to graft (non-destructive or not).

WHERE. At a mid-drafter step the candidate pool is, with expanded graft-position selection (EG),
either (release, `lookback` = L) every live node whose depth lies within L depths above the
deepest frontier depth (nodes deeper than the frontier, such as the tails of n-gram chains,
cannot be reselected), or (the paper's text, lookback None) every live node the mid drafter has
not scored yet, C_k = V(T_k) minus P_k. Without EG it is only the nodes the previous step grew,
N_k. The mid drafter scores what it has not scored of the pool, and the frontier it expands is
the pool's top-W by path score s(v): this may reselect a node at an earlier depth that the small
drafter under-rated. A small-drafter step expands the top-W of N_k.

HOW. Non-destructive grafting (ND) appends the mid drafter's children as siblings of whatever
the parent already has (a child with the same token is reused and its score refreshed); nothing
is deleted. Without ND (cascade-style overwriting) a parent's other children and their subtrees
are discarded when the mid drafter grafts under it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from treegraft_lab.drafters import NgramDrafter
from treegraft_lab.parts import Proposal
from treegraft_lab.tree import SMALL, DraftTree


# ---- WHERE ------------------------------------------------------------------------------------
def candidate_pool(tree: DraftTree, last_new: list[int], expanded: bool, lookback: int | None = None,
                   previous: list[int] = ()) -> list[int]:
    """The nodes a mid-drafter step may choose its frontier from (see the module docstring).

    The depth window ends at the deepest node of N_k (`last_new`); when the previous step grew
    nothing, at the deepest node it tried to expand (`previous`), else at the deepest live node.
    """
    if not expanded:
        return [v for v in last_new if tree.alive[v]]
    if lookback is None:
        return [v for v in range(len(tree)) if tree.alive[v] and not tree.mid_scored[v]]
    ref = [v for v in last_new if tree.alive[v]] or [v for v in previous if tree.alive[v]] or tree.live_nodes()
    deepest = max(tree.depth[v] for v in ref)
    return [v for v in range(len(tree)) if tree.alive[v] and deepest - lookback <= tree.depth[v] <= deepest]


def to_forward(tree: DraftTree, pool: list[int]) -> list[int]:
    """The pool plus its ancestors the mid drafter has not scored (it needs their keys/values)."""
    need = set()
    for v in pool:
        while v >= 0 and not tree.mid_scored[v] and v not in need:
            need.add(v)
            v = tree.parent[v]
    return sorted(need)


def top_by_score(tree: DraftTree, nodes: list[int], width: int) -> list[int]:
    """The `width` nodes with the highest path score (ties: shallower, then older)."""
    live = [v for v in nodes if tree.alive[v]]
    return sorted(live, key=lambda v: (-tree.score[v], tree.depth[v], v))[:width]


# ---- HOW --------------------------------------------------------------------------------------
def graft(tree: DraftTree, proposals: list[Proposal], creator: int, step: int, non_destructive: bool,
          cap: int | None = None) -> list[int]:
    """Add the proposals to the tree; return the nodes their first tokens landed on (the next N_k).

    A proposal is (parent, token, log p, n) or, for an n-gram chain, (parent, token, log p, n,
    tail) with tail a tuple of (token, log p, n) hung below the first token. Proposals are added in
    order (the drafters give them best path score first); a new node that would take the live
    nodes past `cap` is dropped, with the rest of its chain (an existing child with the same token
    is still reused), so the cap keeps the best proposals.
    """
    if not non_destructive:
        chosen: dict[int, set[int]] = {}
        for p in proposals:
            chosen.setdefault(p[0], set()).add(p[1])
        for parent, toks in chosen.items():
            for tok, child in list(tree.children[parent].items()):
                if tok not in toks:
                    tree.kill_subtree(child)
    live = sum(tree.alive)
    cap = cap if cap is not None else float("inf")
    landed = []

    def add(parent: int, tok: int, lp: float, n: int) -> int | None:
        nonlocal live
        old = tree.children[parent].get(tok)
        if (old is None or not tree.alive[old]) and live >= cap:
            return None
        v, is_new = tree.add_child(parent, tok, lp, creator, step, n, refresh=False)
        live += is_new
        return v

    for p in proposals:
        if not tree.alive[p[0]]:
            continue
        v = add(*p[:4])
        if v is None:
            continue
        landed.append(v)
        for tok, lp, n in p[4] if len(p) > 4 else ():
            v = add(v, tok, lp, n)
            if v is None:
                break
    tree.refresh_scores()
    return landed


# ---- the release's rules (DecodeConfig: matcher, stop_on_relax_zero, first_step_fallback,
# frontier_order, mid_scores_all) --------------------------------------------------------------
def next_frontier(tree: DraftTree, candidates: dict[int, int], width: int, k: int) -> list[int]:
    """frontier_order "match": the candidates (node -> n-gram match size, 0 for mid children)
    ranked by match size, then path score, then age; cut to `width` after step 1."""
    order = sorted((v for v in candidates if tree.alive[v]), key=lambda v: (-candidates[v], -tree.score[v], v))
    return order if k == 1 else order[:width]


def ended_parents(tree: DraftTree, frontier: list[int], proposals: list[Proposal], before: dict[int, set[int]],
                  children: int) -> set[int]:
    """stop_on_relax_zero with the index matcher: the frontier parents whose live children before
    the step (`before`: parent -> tokens) and proposals give fewer than `children` distinct tokens."""
    cover = {f: set(before.get(f, ())) for f in frontier}
    for p in proposals:
        if p[0] in cover:
            cover[p[0]].add(p[1])
    return {f for f, toks in cover.items() if len(toks) < children}


def add_chain(tree: DraftTree, parent: int, chain: tuple[int, ...], n: int, lp: float, step: int, cap: int) -> None:
    """The release's way to hang an n-gram continuation under `parent`: missing nodes are created
    (none past `cap` live nodes), the first token's path score is the higher of its own and the
    parent's plus `lp`, the others are created unscored (-inf) and existing ones are left as they are."""
    v, live = parent, sum(tree.alive)
    for i, tok in enumerate(chain):
        c = tree.children[v].get(tok)
        if c is None or not tree.alive[c]:
            if live >= cap:
                return
            c = tree.append(tok, v, lp if i == 0 else -math.inf, SMALL, step, n if i == 0 else 0)
            live += 1
        else:
            tree.drafted_by[c] |= SMALL
            if i == 0 and tree.score[v] + lp > tree.score[c]:
                tree.score[c] = tree.score[v] + lp  # the release raises the node only, not its subtree
                tree.logp[c] = lp
        tree.add_source(c, "ngram")
        v = c


def release_small_step(tree: DraftTree, small: NgramDrafter, frontier: list[int], length: int, children: int,
                       cap: int, step: int, logp_at: Callable[[int, int], float], stop: bool) -> dict[int, int]:
    """One n-gram step of the release's matcher (`NgramDrafter.release_matches`) over `frontier`, in
    its order: each parent's chains are added (`add_chain`), and, unless the parent is ended (`stop`),
    its live children become candidates of the next frontier with the match size that proposed
    them (0 for another drafter's). `logp_at(pos, token)`: the first token's score (`DecodeConfig.matcher`)."""
    candidates: dict[int, int] = {}
    for f in frontier:
        chains, sizes, ended = small.release_matches(tree, f, length, children)
        for chain, n, pos in chains:
            add_chain(tree, f, chain, n, logp_at(pos - 1, chain[0]), step, cap)
        if stop and ended:
            continue
        for tok, c in tree.children[f].items():
            if tree.alive[c]:
                candidates[c] = max(candidates.get(c, -1), sizes.get(tok, 0))
    return candidates


def fallback_child(tree: DraftTree, token: int, step: int) -> int:
    """first_step_fallback: the root's one child `token`, path score 0."""
    v, _ = tree.add_child(0, token, 0.0, SMALL, step, 0)
    tree.add_source(v, "ngram")
    return v


def mid_override(tree: DraftTree, mid) -> None:
    """mid_scores_all: every live edge whose parent the mid drafter has scored takes its log q
    (one gather), and every path score is recomputed, as the release's whole-tree forward does."""
    kids = [v for v in range(1, len(tree)) if tree.alive[v] and mid.scored(tree.parent[v])]
    if kids:
        lp = mid.token_logq([tree.parent[v] for v in kids], [tree.tokens[v] for v in kids]).tolist()
        for v, x in zip(kids, lp):
            tree.logp[v] = x
    tree.refresh_scores()
