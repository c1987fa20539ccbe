"""The parts of a round, as protocols: what a researcher's own part implements to plug in.

    TreeGraftDecoder(pair, config, small=MySmall(), mid=MyMid(), pruner=MyPruner(), growth=...)

and `DecodeConfig(schedule=MyPolicy())` for WHEN. Each part is built once per decoder; `start`
(where a part has one) is called at every generation with the committed text. A proposal is
`(parent node, token, log p, n-gram size or 0)`, optionally with a fifth item: a chain of further
`(token, log p, n-gram size)` below it. The built-in parts: `retrieval.SmallDrafters` (the
n-gram, Token Recycling and suffix drafters), `drafters.ModelDrafter` (the mid LM, KV-cached),
`TopKPruner` and `budget.ValuePruner`, the policies of `schedule.policies`. docs/design.md
("Extending") has a worked example of each.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from treegraft_lab.drafters import Proposal
from treegraft_lab.schedule.context import StepContext
from treegraft_lab.schedule.policies import Policy
from treegraft_lab.tree import DraftTree

__all__ = ["SmallDrafter", "MidDrafter", "Pruner", "Policy", "StepContext", "TopKPruner", "Proposal"]


@runtime_checkable
class SmallDrafter(Protocol):
    """A cheap drafter that reads the committed text (no model call).

    start(ids): a generation starts; `ids` is the committed text (prompt, root last).
    extend(tokens): tokens were committed after it (each round's accepted tokens and bonus).
    propose(...): children for the `frontier` nodes of `tree`, best path score first: with
    `children`, up to that many per node; else the global top-`width`. `chain` > 1 invites each
    proposal to carry up to chain - 1 further tokens. Optional: `observe(tree, kept, logits)`, the
    target's logits over the verified nodes (Token Recycling learns from them).
    """

    def start(self, ids: list[int]) -> None: ...

    def extend(self, tokens: list[int]) -> None: ...

    def propose(self, tree: DraftTree, frontier: list[int], width: int, children: int | None = None,
                chain: int = 1) -> list[Proposal]: ...


@runtime_checkable
class MidDrafter(Protocol):
    """A language-model drafter, called at the steps the policy picks.

    start(context, lazy): a generation starts; `context` is the committed text before the round's
    root (`lazy`: the policy may never call it, so its prefill may wait). score(tree, nodes): read
    `nodes` (a mid step's candidate pool with its unread ancestors); it may rescore their edges
    (`tree.take_mid_logp`, then `tree.refresh_scores()`), and WHERE then picks the frontier from the
    pool by path score. propose(...): as `SmallDrafter.propose`. commit(tree, path): the target
    accepted `path` (root first, bonus excluded). rollback(): forget this round (a replay).
    Optional, for replays and the oracle: `snapshot()` / `restore(state)`; for pricing a lagging
    cache: `backlog()` (committed tokens its next call forwards too).
    """

    def start(self, context: list[int], lazy: bool = False) -> None: ...

    def score(self, tree: DraftTree, nodes: list[int]) -> None: ...

    def propose(self, tree: DraftTree, frontier: list[int], width: int,
                children: int | None = None) -> list[Proposal]: ...

    def commit(self, tree: DraftTree, path: list[int]) -> None: ...

    def rollback(self) -> None: ...


@runtime_checkable
class Pruner(Protocol):
    """Global budget pruning: the nodes the target verifies.

    prune(tree, budget, context) returns live node ids, the root (0) first, every other node's
    parent kept, at most `budget` besides the root (`context`: committed tokens before the tree;
    any such subset decodes losslessly, the decoder checks it). Optional: `start()` at every
    generation, `observe(tree, kept, path, round_ms)` after every round, `chances(tree)` (each
    node's acceptance chance, recorded with the round).
    """

    def prune(self, tree: DraftTree, budget: int, context: int | None = None) -> list[int]: ...


class TopKPruner:
    """The paper's pruning: the budget's best nodes by path score (`DraftTree.prune`)."""

    name = "topk"

    def prune(self, tree: DraftTree, budget: int, context: int | None = None) -> list[int]:
        return tree.prune(budget)
