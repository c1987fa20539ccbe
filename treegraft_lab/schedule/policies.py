"""Scheduling policies: WHEN the mid drafter expands the tree. Each answers `decide(ctx) -> bool`.

`StepContext` is what a policy may look at before draft step k: the tree, the frontier, which
earlier steps called the mid drafter, the prompt length, the measured per-call costs and the
committed text's n-gram index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from treegraft_lab.config import DecodeConfig, parse_mask
from treegraft_lab.drafters import NgramIndex
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.schedule.signals import compute_signals
from treegraft_lab.tree import DraftTree


@dataclass
class StepContext:
    """The decoder's state before draft step `k` (1-based) of a round."""

    k: int
    depth: int
    history: list[int]  # decisions of steps 1..k-1 (1 = mid)
    tree: DraftTree
    frontier: list[int]  # N_k
    expanded_last: list[int]  # the nodes the previous step expanded
    prompt_len: int
    t_tgt_ms: float
    t_mid_ms: float
    width: int
    ngram_max: int
    index: NgramIndex | None = None  # the committed text's n-gram index (the context signals)
    lookback: int | None = None  # the reselection depth window (DecodeConfig.lookback)
    _signals: dict | None = field(default=None, repr=False)

    @property
    def mid_calls(self) -> int:
        return sum(self.history)

    def signals(self) -> dict[str, float]:
        """The 10 candidate signals, computed once per step on demand."""
        if self._signals is None:
            self._signals = compute_signals(self.tree, self.frontier, self.expanded_last, self.width, self.ngram_max,
                                            self.index, self.lookback)
        return self._signals


class Policy(Protocol):
    name: str

    def decide(self, ctx: StepContext) -> bool: ...


class MaskPolicy:
    """A fixed per-step schedule: all-small is 00000, all-mid 11111, the paper's ablation 10101."""

    def __init__(self, bits: tuple[int, ...], name: str | None = None) -> None:
        self.bits = bits
        self.name = name or "".join(map(str, bits))

    def decide(self, ctx: StepContext) -> bool:
        return bool(self.bits[ctx.k - 1])


def make_policy(config: DecodeConfig, pair=None, profile=None) -> Policy:
    """The policy object for `config.schedule` (`profile`: the decoder's costs; adaptive picks the
    scheduler artifact trained for it)."""
    s = config.schedule
    if s == "small":
        return MaskPolicy((0,) * config.depth, "small")
    if s == "mid":
        return MaskPolicy((1,) * config.depth, "mid")
    if s == "adaptive":
        from treegraft_lab.schedule.adaptive import AdaptivePolicy

        return AdaptivePolicy.for_pair(pair, config, profile)
    if s == "oracle":
        return MaskPolicy((0,) * config.depth, "oracle")  # the decoder replays every mask itself
    mask = parse_mask(s, config.depth)
    if mask is not None:
        return MaskPolicy(mask)
    if hasattr(s, "decide"):
        return s
    raise TreeGraftError(f"unknown schedule {s!r}")
