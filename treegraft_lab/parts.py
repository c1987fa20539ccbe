"""The parts of a round, as base classes: what a researcher's own part implements to plug in.

    TreeGraftDecoder(pair, config, small=MySmall(), mid=MyMid(), pruner=MyPruner(), growth=...)

and `DecodeConfig(schedule=MyPolicy())` for WHEN (`schedule.policies.Policy`). Each base names the
methods a part must have and gives its optional ones no-op defaults, so the decoder calls every
method of every part without asking which it has. A part of one's own may subclass its base or
just have the required methods: `adopt` then gives it the base's defaults (its class gains the
base as a mixin). Each part is built once per decoder; `start` is called at every generation with
the committed text. A proposal is a `Proposal`. The built-in parts: `retrieval.SmallDrafters` (the
n-gram, Token Recycling and suffix drafters), `drafters.ModelDrafter` (the mid LM, KV-cached),
`TopKPruner` and `budget.ValuePruner`. docs/design.md ("Extending") has a worked example of each.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.tree import DraftTree

__all__ = ["Proposal", "SmallDrafter", "MidDrafter", "Pruner", "TopKPruner", "adopt"]


class Proposal(NamedTuple):
    """A child a drafter proposes: under node `parent`, `token` with log-probability `logp` (its
    n-gram match size `n`, 0 for a model's), optionally with a `chain` of further (token, log p, n)
    hung below it. A plain 4- or 5-tuple in this order is taken too."""

    parent: int
    token: int
    logp: float
    n: int = 0
    chain: tuple = ()


class SmallDrafter:
    """A cheap drafter that reads the committed text (no model call).

    Required: start(ids): a generation starts; `ids` is the committed text (prompt, root last).
    extend(tokens): tokens were committed after it (each round's accepted tokens and bonus).
    propose(tree, frontier, width, children, chain): children for the `frontier` nodes of `tree`,
    best path score first: with `children`, up to that many per node; else the global top-`width`.
    `chain` > 1 invites each proposal to carry up to chain - 1 further tokens.
    """

    REQUIRED = ("start", "extend", "propose")
    index = None  # the committed text's `drafters.NgramIndex`, where it keeps one (else the decoder keeps its own)

    def start(self, ids: list[int]) -> None:
        raise NotImplementedError

    def extend(self, tokens: list[int]) -> None:
        raise NotImplementedError

    def propose(self, tree: DraftTree, frontier: list[int], width: int, children: int | None = None,
                chain: int = 1) -> list[Proposal]:
        raise NotImplementedError

    @property
    def label(self) -> str:
        """What the viewer calls its nodes: its `name`, else its class's name."""
        return getattr(self, "name", type(self).__name__)

    def propose_each(self, tree: DraftTree, frontier: list[int], width: int, children: int | None = None,
                     chain: int = 1) -> list[tuple[str, list[Proposal]]]:
        """[(drafter name, proposals)]: one group unless the drafter combines several."""
        return [(self.label, self.propose(tree, frontier, width, children, chain))]

    def observe(self, tree: DraftTree, kept: list[int], logits: Any) -> None:
        """The target's logits over the verified nodes `kept` (Token Recycling learns from them)."""

    def carried_state(self) -> Any:
        """A copy of what it keeps across generations (None: nothing)."""
        return None

    def restore_state(self, state: Any) -> None:
        """Put back what `carried_state` copied (None: a fresh drafter's)."""


class MidDrafter:
    """A language-model drafter, called at the steps the policy picks.

    Required: start(context, lazy): a generation starts; `context` is the committed text before the
    round's root (`lazy`: the policy may never call it, so its prefill may wait). score(tree, nodes):
    read `nodes` (a mid step's candidate pool with its unread ancestors); it may rescore their edges
    (`tree.take_mid_logp`, then `tree.refresh_scores()`), and WHERE then picks the frontier from the
    pool by path score. propose(...): as `SmallDrafter.propose`. commit(tree, path): the target
    accepted `path` (root first, bonus excluded). rollback(): forget this round (a replay).
    """

    REQUIRED = ("start", "score", "propose", "commit", "rollback")

    def start(self, context: list[int], lazy: bool = False) -> None:
        raise NotImplementedError

    def score(self, tree: DraftTree, nodes: list[int]) -> None:
        raise NotImplementedError

    def propose(self, tree: DraftTree, frontier: list[int], width: int,
                children: int | None = None) -> list[Proposal]:
        raise NotImplementedError

    def commit(self, tree: DraftTree, path: list[int]) -> None:
        raise NotImplementedError

    def rollback(self) -> None:
        raise NotImplementedError

    def snapshot(self) -> Any:
        """Its round state, for a replay to come back to (the oracle, collection). None: it keeps none
        between draft steps (a drafter that does must override this and `restore`)."""
        return None

    def restore(self, state: Any) -> None:
        """Go back to a `snapshot`."""

    def backlog(self) -> int:
        """Committed tokens its next call forwards too (a lagging cache; 0: it keeps none)."""
        return 0

    def unforward(self, committed: list[int], n: int) -> int:
        """Let it lag the committed text by up to `n` tokens; returns the lag (0: it keeps no cache)."""
        return 0

    def held(self) -> set[int] | None:
        """The tree nodes it has read this round (None: not called this round); replays price the
        backlog a round leaves with it."""
        return None


class Pruner:
    """Global budget pruning: the nodes the target verifies.

    Required: prune(tree, budget, context) returns live node ids, the root (0) first, every other
    node's parent kept, at most `budget` besides the root (`context`: committed tokens before the
    tree; any such subset decodes losslessly, the decoder checks it).
    """

    REQUIRED = ("prune",)

    def prune(self, tree: DraftTree, budget: int, context: int | None = None) -> list[int]:
        raise NotImplementedError

    def start(self) -> None:
        """A generation starts."""

    def observe(self, tree: DraftTree, kept: list[int], path: list[int], round_ms: float) -> None:
        """After every round: what was verified and accepted, and the round's modelled time."""

    def chances(self, tree: DraftTree) -> list[float] | None:
        """Each node's acceptance chance, recorded with the round (None: it estimates none)."""
        return None

    def carried_state(self) -> Any:
        """A copy of what it keeps across generations (None: nothing)."""
        return None

    def restore_state(self, state: Any) -> None:
        """Put back what `carried_state` copied (None: a fresh pruner's)."""


class TopKPruner(Pruner):
    """The paper's pruning: the budget's best nodes by path score (`DraftTree.prune`)."""

    name = "topk"

    def prune(self, tree: DraftTree, budget: int, context: int | None = None) -> list[int]:
        return tree.prune(budget)


_ADOPTED: dict[tuple[type, type], type] = {}


def adopt(part: Any, base: type, arg: str) -> Any:
    """`part` as a `base` (SmallDrafter, MidDrafter or Pruner): as given if it subclasses it; else,
    if it has the base's required methods, with the base's defaults for the rest (its class gains
    `base` as a mixin: its own methods come first). Refused in one line otherwise (`arg`: the
    decoder's keyword it came in)."""
    if isinstance(part, base):
        return part
    missing = [m for m in base.REQUIRED if not callable(getattr(part, m, None))]
    if missing:
        raise TreeGraftError(f"{arg}= takes a {base.__name__} (methods: {', '.join(base.REQUIRED)}); "
                             f"{type(part).__name__} lacks {', '.join(missing)}: see treegraft_lab.parts")
    cls = type(part)
    if (cls, base) not in _ADOPTED:
        _ADOPTED[cls, base] = type(cls.__name__, (cls, base), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
    try:
        part.__class__ = _ADOPTED[cls, base]
    except TypeError as e:
        raise TreeGraftError(f"{arg}= {cls.__name__} cannot take {base.__name__}'s defaults ({e}): subclass "
                             f"treegraft_lab.parts.{base.__name__}") from None
    return part
