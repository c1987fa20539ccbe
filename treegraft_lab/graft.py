"""WHERE to graft (candidate pool, frontier selection) and HOW to graft (non-destructive or not).

WHERE. At a mid-drafter step the candidate pool is, with expanded graft-position selection (EG),
every live node the mid drafter has not scored yet, C_k = V(T_k) minus P_k; without EG only the
nodes the previous step created, N_k. The mid drafter scores the pool, and the frontier it
expands is the pool's top-W by path score s(v): this may reselect a node at an earlier depth
that the small drafter under-rated. A small-drafter step expands the top-W of N_k.

HOW. Non-destructive grafting (ND) appends the mid drafter's children as siblings of whatever
the parent already has (a child with the same token is reused and its score refreshed); nothing
is deleted. Without ND (cascade-style overwriting) a parent's other children and their subtrees
are discarded when the mid drafter grafts under it.
"""

from __future__ import annotations

from treegraft_lab.drafters import Proposal
from treegraft_lab.tree import DraftTree


# ---- WHERE ------------------------------------------------------------------------------------
def candidate_pool(tree: DraftTree, last_new: list[int], expanded: bool) -> list[int]:
    """The nodes a mid-drafter step may choose its frontier from."""
    if expanded:
        return [v for v in range(len(tree)) if tree.alive[v] and not tree.mid_scored[v]]
    return [v for v in last_new if tree.alive[v]]


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
def graft(tree: DraftTree, proposals: list[Proposal], creator: int, step: int, non_destructive: bool) -> list[int]:
    """Add the proposals to the tree; return the nodes they landed on (the next N_k)."""
    if not non_destructive:
        chosen: dict[int, set[int]] = {}
        for parent, tok, _, _ in proposals:
            chosen.setdefault(parent, set()).add(tok)
        for parent, toks in chosen.items():
            for tok, child in list(tree.children[parent].items()):
                if tok not in toks:
                    tree.kill_subtree(child)
    landed = []
    for parent, tok, lp, n in proposals:
        if not tree.alive[parent]:
            continue
        v, _ = tree.add_child(parent, tok, lp, creator, step, n)
        landed.append(v)
    return landed
