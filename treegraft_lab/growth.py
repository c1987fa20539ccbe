"""Growth: the rules a round's tree grows by, one object (`TreeGraftDecoder(..., growth=...)`).

A draft step (`TreeGraftDecoder.draft_step`) asks its growth which nodes a small step expands,
whether the step may be skipped, how long an n-gram chain is, what the mid drafter forwards, which
of the new nodes form the next frontier and when the round's growth ends. The named rules are
instances: `GROWTH_RULES["full"]` (the paper's), `["lookup"]` (plus prompt lookup's draft),
`["compact"]` (small trees) and `["release"]` (the authors' release). The release's six rules
(`presets.RELEASE_RULES`) are read only here and in the two release steps the decoder runs
(`graft.release_small_step`, `graft.mid_override`). A subclass overriding one method is a new rule.

The fields are `DecodeConfig`'s growth fields (`config.GROWTH_FIELDS`): `Growth.of(config)` reads
them, `settings()` gives them back, so the config a run records always says how its trees grew.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from treegraft_lab import graft
from treegraft_lab.drafters import NgramIndex
from treegraft_lab.parts import Proposal
from treegraft_lab.presets import GROWTHS
from treegraft_lab.tree import DraftTree


@dataclass(frozen=True)
class Growth:
    """How a round's tree grows (the full growth by default; each field is `DecodeConfig`'s)."""

    expansion: str = "per_parent"      # "per_parent": top-`children` per frontier node; "global": top-W overall
    ngram_chain: bool = True           # an n-gram continuation comes with the tokens that followed it
    chain_len: int | None = None       # tokens per chain (None: max(1, ngram_max - (k - 1)))
    lookback: int | None = 5           # WHERE's depth window above the frontier (None: every unscored node)
    lookup: int = 0                    # prompt lookup's draft (tokens) under the root at the first small step
    lookup_longest: bool = False       # with it, the chain after the longest earlier match too
    chain_frontier: bool = False       # that draft's deepest node joins the next frontier
    min_step_p: float = 0.0            # skip a small step whose best node's path probability is below this
    fuse_prompt: bool = True           # release: False (the prompt has a forward of its own)
    stop_on_relax_zero: bool = False   # release: a parent short of `children` tokens is ended; growth stops
    first_step_fallback: bool = False  # release: an empty first n-gram step gets the most frequent token
    matcher: str = "index"             # release: "release" (every continuation, prompt log-prob scores)
    frontier_order: str = "score"      # release: "match" (by n-gram match size, then score)
    mid_scores_all: bool = False       # release: a mid call scores every node and overrides every edge

    @classmethod
    def of(cls, config) -> Growth:
        """The growth a `DecodeConfig` describes."""
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls)})

    def settings(self) -> dict:
        """The `DecodeConfig` fields of this growth."""
        return asdict(self)

    @property
    def name(self) -> str:
        """Its name in `GROWTH_RULES`, else "custom"."""
        return next((n for n, g in GROWTH_RULES.items() if g == self), "custom")

    # ---- the rules a draft step reads ------------------------------------------------------------
    def children(self, children: int) -> int | None:
        """Children per frontier node (None: the global top-W of the frontier)."""
        return children if self.expansion == "per_parent" else None

    def chain(self, k: int, ngram_max: int) -> int:
        """Tokens per n-gram continuation at step k (1: no chain)."""
        return (self.chain_len or max(1, ngram_max - (k - 1))) if self.ngram_chain else 1

    def small_frontier(self, tree: DraftTree, last_new: list[int], width: int) -> list[int]:
        """The nodes a small step expands: the top-W of N_k (release: N_k as ranked)."""
        return last_new if self.frontier_order == "match" else graft.top_by_score(tree, last_new, width)

    def skips(self, tree: DraftTree, frontier: list[int], k: int) -> bool:
        """Skip this small step: nothing under so unlikely a frontier can pay for itself."""
        return bool(self.min_step_p and k > 1 and (not frontier or math.exp(tree.score[frontier[0]]) < self.min_step_p))

    def mid_forward(self, tree: DraftTree, pool: list[int]) -> list[int]:
        """The nodes a mid call forwards: the pool and its unscored ancestors (release: every unscored node)."""
        if self.mid_scores_all:
            return [v for v in range(len(tree)) if tree.alive[v] and not tree.mid_scored[v]]
        return graft.to_forward(tree, pool)

    def order_mid(self, proposals: list[Proposal], frontier: list[int]) -> list[Proposal]:
        """The mid drafter's proposals in grafting order (release: parent by parent, in frontier order)."""
        if self.frontier_order != "match":
            return proposals
        at = {f: i for i, f in enumerate(frontier)}
        return sorted(proposals, key=lambda p: at[p[0]])

    def children_before(self, tree: DraftTree, frontier: list[int], call: bool) -> dict[int, set[int]]:
        """What `settle` needs from before the graft: each frontier parent's live child tokens."""
        if call or not self.stop_on_relax_zero:
            return {}
        return {f: {t for t, c in tree.children[f].items() if tree.alive[c]} for f in frontier}

    def settle(self, tree: DraftTree, k: int, call: bool, frontier: list[int], proposals: list[Proposal],
               before: dict[int, set[int]], new: list[int], children: int, width: int,
               index: NgramIndex) -> list[int]:
        """The next frontier from the nodes a step grew (`new`): ended parents' children dropped, the
        first-step fallback, the release's ranking by match size."""
        if not call and self.stop_on_relax_zero:  # an ended parent carries no child into the next frontier
            ended = graft.ended_parents(tree, frontier, proposals, before, children)
            new = [v for v in new if tree.parent[v] not in ended]
        if not call and k == 1 and self.first_step_fallback and not tree.children[0]:
            graft.fallback_child(tree, index.most_frequent(), k)
            return []
        if self.frontier_order == "match":
            return graft.next_frontier(tree, {v: (0 if call else tree.ngram_n[v]) for v in new}, width, k)
        return new

    def release_frontier(self, tree: DraftTree, k: int, candidates: dict[int, int], width: int,
                         index: NgramIndex) -> list[int]:
        """The next frontier after a step of the release's matcher (`graft.release_small_step`)."""
        if k == 1 and self.first_step_fallback and not tree.children[0]:
            graft.fallback_child(tree, index.most_frequent(), k)
            return []
        if self.frontier_order == "match":
            return graft.next_frontier(tree, candidates, width, k)
        return graft.top_by_score(tree, list(candidates), width)

    def ends(self, tree: DraftTree, frontier: list[int], node_cap: int) -> bool:
        """The round's growth ends here: an empty frontier (every parent ended, or the first-step
        fallback) or a tree at the drafting cap (the release's stop rule)."""
        if not frontier:
            return self.stop_on_relax_zero or self.first_step_fallback
        return self.stop_on_relax_zero and sum(tree.alive) >= node_cap


GROWTH_RULES = {name: Growth(**rule) for name, rule in GROWTHS.items()}  # "full", "release", "lookup", "compact"
