"""The 10 candidate tree signals the scheduler may look at before each draft step.

Computed from the tree state before the decision at step k. Terms: the *frontier* F is N_k, the
nodes the previous step created (at k = 1 the root); the *would-be reselection* R is the top-W of
the EG candidate pool (`graft.candidate_pool`: the depth window of `lookback` depths above the
deepest node of F, or with lookback None the live nodes the mid drafter has not scored) by the
current path scores, i.e. what a mid call would expand if the scores did not change.

The six the authors' release uses:
  mean_frontier_depth   mean depth of F                                        [0, D]
  frontier_leaf_ratio   share of the previous step's expanded nodes left without
                        children (the drafter found nothing there)              [0, 1]
  collapse_debt         max(0, -(mean depth of R - mean depth of F))            [0, D]
  past_depth_ratio      share of R whose depth is not a depth present in F      [0, 1]
  reselect_overlap      share of R already in F                                 [0, 1]
  mean_path_score       mean finite s(v) over R (log-probability, <= 0)         (-inf, 0]
Four of our own (the release names none). The first two read the committed context, not the
tree, so they carry information already at k = 1, where the tree is only the root and every
tree signal is the same for all rounds:
  root_match            n of the longest n-gram ending the committed text that occurred
                        before, / ngram_max: how much context the small drafter's
                        first step can copy from (0: nothing matches)            [0, 1]
  recent_hit_rate       share of the last 16 committed tokens that were the n-gram
                        index's top-1 guess just before they came: are we in a
                        copying stretch (code, rewrites) or writing new text     [0, 1]
  score_spread          max - min finite s(v) over R: a flat spread means no
                        clear best continuation                                 [0, inf)
  ngram_match           mean n-gram match size of the small-drafted nodes of F,
                        divided by ngram_max (0 when F holds none)              [0, 1]

Round signals: how the rounds already run went (`context.RoundHistory`, kept by the decoder after
each verification; free: the target's logits are computed anyway). a_r is round r's accepted
length, m_r its mid calls, c_r how many of its accepted tokens the mid drafter drafted; all are 0
before the first round. Over the rounds run so far:
  prev_accepted         a_{r-1} / D                                             [0, 1]
  prev_mid_calls        m_{r-1} / D                                             [0, 1]
  prev_mid_share        c_{r-1} / a_{r-1} (0 when a_{r-1} = 0)                   [0, 1]
  target_top1           the target's top-1 probability at the last committed
                        token (the last round's bonus): how sure it was there    [0, 1]
  recent_accepted       mean a over the last 3 rounds / D                       [0, 1]
  mid_gain_estimate     (mean a of the rounds that called the mid drafter - mean
                        a of those that did not) / D: a running estimate of its
                        marginal gain on this prompt (0 until both kinds ran)    [-1, 1]
"""

from __future__ import annotations

import math

from treegraft_lab.drafters import NgramIndex
from treegraft_lab.graft import candidate_pool
from treegraft_lab.tree import SMALL, DraftTree

SIGNALS = (
    "mean_frontier_depth",
    "frontier_leaf_ratio",
    "collapse_debt",
    "past_depth_ratio",
    "reselect_overlap",
    "mean_path_score",
    "root_match",
    "recent_hit_rate",
    "score_spread",
    "ngram_match",
)
RELEASE_SIGNALS = SIGNALS[:6]
ROUND_SIGNALS = ("prev_accepted", "prev_mid_calls", "prev_mid_share", "target_top1", "recent_accepted",
                 "mid_gain_estimate")

# The signals (and the two costs the scheduler reads) in words: (axis label, what it measures). The one
# source for every view that shows them (`words`, `glossary`); the module docstring has the formulas.
SIGNAL_WORDS = {
    "mean_frontier_depth": ("frontier depth", "mean depth of the nodes the previous draft step created (the frontier)"),
    "frontier_leaf_ratio": ("dead-end share", "share of the nodes the previous step expanded that got no child: the "
                            "drafter found nothing there"),
    "collapse_debt": ("depth lost by reselecting", "how much shallower the nodes a mid call would expand are than the "
                      "frontier (0 when not shallower)"),
    "past_depth_ratio": ("reselected off the frontier's depths", "share of the nodes a mid call would expand that lie at "
                         "a depth the frontier does not reach"),
    "reselect_overlap": ("reselected frontier share", "share of the nodes a mid call would expand that are already on "
                         "the frontier"),
    "mean_path_score": ("mean path log-probability", "mean path score s(v) (log-probability, at most 0) of the nodes a "
                        "mid call would expand"),
    "root_match": ("context n-gram match", "length of the longest n-gram ending the committed text that occurred "
                   "before, over the longest n-gram used: how much the small drafter can copy (0: nothing)"),
    "recent_hit_rate": ("recent copy hit rate", "share of the last 16 committed tokens that the n-gram index guessed "
                        "first: a copying stretch (code, rewrites) or new text"),
    "score_spread": ("path score spread", "highest minus lowest path score of the nodes a mid call would expand: a "
                     "small spread means no clear best continuation"),
    "ngram_match": ("frontier n-gram match", "mean n-gram match length of the frontier's small-drafted nodes, over "
                    "the longest n-gram used (0 when it has none)"),
    "prev_accepted": ("last round's accepted length", "tokens the target accepted in the previous round, over the depth D"),
    "prev_mid_calls": ("last round's mid calls", "draft steps of the previous round that called the mid drafter, over D"),
    "prev_mid_share": ("last round's mid share", "share of the previous round's accepted tokens that the mid drafter "
                       "drafted"),
    "target_top1": ("target's confidence", "the target's top-1 probability at the last committed token (read from the "
                    "last verification's logits)"),
    "recent_accepted": ("recent accepted length", "mean accepted length of the last 3 rounds, over D"),
    "mid_gain_estimate": ("mid drafter's running gain", "mean accepted length of this prompt's rounds that called the mid "
                          "drafter minus that of the rounds that did not, over D (0 until both ran)"),
}
COST_WORDS = {
    "t_tgt_ms": ("target verification T_tgt (ms)", "one target forward verifying the budget's tree, on the profile"),
    "t_mid_ms": ("mid drafter call T_mid (ms)", "one mid-drafter call on the nodes a step grows, on the profile"),
}


def words(name: str) -> str:
    """A signal's or cost's axis label in words (`SIGNAL_WORDS`, `COST_WORDS`); other names as they are."""
    return {**SIGNAL_WORDS, **COST_WORDS}.get(name, (name,))[0]


def glossary(names=SIGNALS) -> list[dict[str, str]]:
    """One row per signal (or cost) in `names`: its label in words, its recorded name, what it measures."""
    table = {**SIGNAL_WORDS, **COST_WORDS}
    return [{"in words": table[n][0], "recorded as": n, "what it measures": table[n][1]} for n in names]


def context_signals(index: NgramIndex | None, ngram_max: int) -> dict[str, float]:
    """root_match and recent_hit_rate of the committed text's n-gram index (0 without one)."""
    if index is None:
        return {"root_match": 0.0, "recent_hit_rate": 0.0}
    return {"root_match": index.match_size() / ngram_max, "recent_hit_rate": index.recent_hit_rate()}


def compute_signals(
    tree: DraftTree, frontier: list[int], expanded_last: list[int], width: int, ngram_max: int,
    index: NgramIndex | None = None, lookback: int | None = None,
) -> dict[str, float]:
    """All 10 signals for one decision (see the module docstring); the two context signals are 0
    without the committed text's n-gram `index`."""
    fr = [v for v in frontier if tree.alive[v]]
    pool = candidate_pool(tree, frontier, True, lookback, expanded_last)
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
        **context_signals(index, ngram_max),
        "score_spread": (max(finite) - min(finite)) if finite else 0.0,
        "ngram_match": (sum(small) / len(small) / ngram_max) if small else 0.0,
    }


def round_signals(accepted: list[int], mid_calls: list[int], mid_accepted: list[int | None], top1: list[float],
                  depth: int) -> dict[str, float]:
    """The round signals (see the module docstring) from the rounds run so far, oldest first:
    each round's accepted length, mid calls, accepted tokens the mid drafter drafted (None: not
    known, read as 0) and the target's top-1 probability at its bonus token."""
    if not accepted:
        return dict.fromkeys(ROUND_SIGNALS, 0.0)
    a, D = accepted[-1], depth
    mid = [x for x, m in zip(accepted, mid_calls) if m]
    small = [x for x, m in zip(accepted, mid_calls) if not m]
    last3 = accepted[-3:]
    return {
        "prev_accepted": a / D,
        "prev_mid_calls": mid_calls[-1] / D,
        "prev_mid_share": (mid_accepted[-1] or 0) / a if a else 0.0,
        "target_top1": top1[-1],
        "recent_accepted": sum(last3) / len(last3) / D,
        "mid_gain_estimate": (sum(mid) / len(mid) - sum(small) / len(small)) / D if mid and small else 0.0,
    }
