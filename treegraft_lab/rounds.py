"""The data of one decoding round, shared by the decoder, its policies, replay and training.

`StepContext` is what a policy may look at before draft step k; `StepResult` is what a draft step
did; `RoundInfo` is what a round did; `RoundStart` is a round start's snapshot (what a replay
restores between schedules). Nothing here runs a model, so every side imports it without a cycle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from treegraft_lab.drafters import NgramIndex
from treegraft_lab.schedule.signals import compute_signals
from treegraft_lab.tree import DraftTree


@dataclass
class StepContext:
    """The decoder's state before draft step `k` (1-based) of a round: the tree, the frontier,
    which earlier steps called the mid drafter, the prompt length, the profile's per-call costs
    and the committed text's n-gram index. Build it by keyword, or with `from_signals`."""

    k: int
    depth: int
    history: list[int]  # decisions of steps 1..k-1 (1 = mid)
    tree: DraftTree | None
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

    @classmethod
    def from_signals(cls, k: int, depth: int, history: list[int], prompt_len: int, t_tgt_ms: float,
                     t_mid_ms: float, signals: dict[str, float]) -> StepContext:
        """A context without a tree: a recorded step's inputs (the signals as they were computed)."""
        return cls(k=k, depth=depth, history=list(history), tree=None, frontier=[], expanded_last=[],
                   prompt_len=prompt_len, t_tgt_ms=t_tgt_ms, t_mid_ms=t_mid_ms, width=0, ngram_max=0,
                   _signals=dict(signals))

    @property
    def mid_calls(self) -> int:
        return sum(self.history)

    def signals(self) -> dict[str, float]:
        """The 10 candidate signals, computed once per step on demand."""
        if self._signals is None:
            self._signals = compute_signals(self.tree, self.frontier, self.expanded_last, self.width, self.ngram_max,
                                            self.index, self.lookback)
        return self._signals


@dataclass
class StepResult:
    """What draft step k did. pool: the nodes WHERE considered; frontier: the nodes expanded; new:
    the nodes the first proposed tokens landed on (the next N_k); chain: nodes created below them
    by n-gram chains; forwarded: the nodes the mid drafter scored; mid_s: its measured seconds."""

    pool: list[int]
    frontier: list[int]
    new: list[int]
    chain: list[int]
    forwarded: list[int]
    mid_s: float = 0.0


@dataclass
class RoundInfo:
    """What one round did. `accepted` counts draft tokens; the bonus token is not included."""

    accepted: int
    schedule: str
    mid_calls: int
    nodes: int
    kept: int
    draft_s: float
    verify_s: float
    forward_s: float
    round_s: float
    modelled_ms: float = math.nan  # the round priced by the decoder's profile (draft steps + verification)


@dataclass(frozen=True)
class RoundStart:
    """A round start's restorable state: the mid drafter's round state (scored rows and slots,
    cache length) and its unpriced prompt backlog. Target and n-gram index hold only committed
    tokens at a round start and are rolled back by the round itself."""

    mid: tuple | None
    prompt_backlog: int
