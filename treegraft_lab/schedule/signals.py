"""The 10 candidate tree signals the scheduler may look at before each draft step.

Computed from the tree state before the decision at step k. Terms: the *frontier* F is N_k, the
nodes the previous step created (at k = 1 the root); the *would-be reselection* R is the top-W of
the EG candidate pool (live nodes the mid drafter has not scored) by the current path scores,
i.e. what a mid call would expand if the scores did not change.

The six the authors' release uses:
  mean_frontier_depth   mean depth of F                                        [0, D]
  frontier_leaf_ratio   share of the previous step's expanded nodes left without
                        children (the drafter found nothing there)              [0, 1]
  collapse_debt         max(0, -(mean depth of R - mean depth of F))            [0, D]
  past_depth_ratio      share of R whose depth is not a depth present in F      [0, 1]
  reselect_overlap      share of R already in F                                 [0, 1]
  mean_path_score       mean finite s(v) over R (log-probability, <= 0)         (-inf, 0]
Four of our own (the release names none):
  frontier_size         |F| / W: how much the last step grew the tree           [0, 1]
  log_tree_size         log(1 + live nodes)                                     [0, ~6]
  score_spread          max - min finite s(v) over R: a flat spread means no
                        clear best continuation                                 [0, inf)
  ngram_match           mean n-gram match size of the small-drafted nodes of F,
                        divided by ngram_max (0 when F holds none)              [0, 1]
"""

from __future__ import annotations

import math

from treegraft_lab.tree import SMALL, DraftTree

SIGNALS = (
    "mean_frontier_depth",
    "frontier_leaf_ratio",
    "collapse_debt",
    "past_depth_ratio",
    "reselect_overlap",
    "mean_path_score",
    "frontier_size",
    "log_tree_size",
    "score_spread",
    "ngram_match",
)
RELEASE_SIGNALS = SIGNALS[:6]


def compute_signals(
    tree: DraftTree, frontier: list[int], expanded_last: list[int], width: int, ngram_max: int
) -> dict[str, float]:
    """All 10 signals for one decision (see the module docstring)."""
    fr = [v for v in frontier if tree.alive[v]]
    pool = [v for v in range(len(tree)) if tree.alive[v] and not tree.mid_scored[v]]
    resel = sorted(pool, key=lambda v: (-tree.score[v], tree.depth[v], v))[:width]
    fdepths = [tree.depth[v] for v in fr]
    mfd = sum(fdepths) / len(fdepths) if fdepths else 0.0
    mrd = sum(tree.depth[v] for v in resel) / len(resel) if resel else mfd
    finite = [tree.score[v] for v in resel if math.isfinite(tree.score[v]) and tree.score[v] > -1e30]
    small = [tree.ngram_n[v] for v in fr if tree.creator[v] == SMALL]
    exp = [v for v in expanded_last if tree.alive[v]]
    fset, dset = set(fr), set(fdepths)
    return {
        "mean_frontier_depth": mfd,
        "frontier_leaf_ratio": sum(tree.is_leaf(v) for v in exp) / len(exp) if exp else 0.0,
        "collapse_debt": max(0.0, -(mrd - mfd)),
        "past_depth_ratio": sum(tree.depth[v] not in dset for v in resel) / len(resel) if resel else 0.0,
        "reselect_overlap": sum(v in fset for v in resel) / len(resel) if resel else 0.0,
        "mean_path_score": sum(finite) / len(finite) if finite else 0.0,
        "frontier_size": len(fr) / width,
        "log_tree_size": math.log1p(sum(tree.alive)),
        "score_spread": (max(finite) - min(finite)) if finite else 0.0,
        "ngram_match": (sum(small) / len(small) / ngram_max) if small else 0.0,
    }
