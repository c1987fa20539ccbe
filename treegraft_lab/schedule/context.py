"""What a policy may look at before draft step k: the `StepContext`, shared by the decoder, replay,
training and the views (they import it from here; it imports no decoder)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from treegraft_lab.drafters import NgramIndex
from treegraft_lab.schedule.signals import compute_signals, context_signals, round_signals
from treegraft_lab.tree import DraftTree


@dataclass
class RoundHistory:
    """The rounds a generation has run so far, as a scheduler may read them before the next round:
    per round its accepted length, mid calls, accepted tokens the mid drafter drafted (None where
    not known: replays do not store it) and the target's top-1 probability at its bonus token.
    The decoder starts one per generation and adds a round after each committed verification."""

    depth: int
    accepted: list[int] = field(default_factory=list)
    mid_calls: list[int] = field(default_factory=list)
    mid_accepted: list[int | None] = field(default_factory=list)
    top1: list[float] = field(default_factory=list)
    modelled_ms: list[float] = field(default_factory=list)  # each round priced by the decoder's profile

    def add(self, accepted: int, mid_calls: int, mid_accepted: int | None, top1, modelled_ms: float = math.nan) -> None:
        """`top1`: a probability, or a callable that computes it (the decoder's: a softmax over the bonus
        token's logits), called only when a policy or the recorder reads the signals. Only the last
        round's is ever read: an earlier one never asked for is dropped (NaN), releasing its logits."""
        self.modelled_ms.append(float(modelled_ms))
        if self.top1 and callable(self.top1[-1]):
            self.top1[-1] = math.nan
        self.accepted.append(int(accepted))
        self.mid_calls.append(int(mid_calls))
        self.mid_accepted.append(mid_accepted)
        self.top1.append(top1)

    def __len__(self) -> int:
        return len(self.accepted)

    def signals(self) -> dict[str, float]:
        """`signals.round_signals` of these rounds."""
        if self.top1 and callable(self.top1[-1]):
            self.top1[-1] = float(self.top1[-1]())  # computed (one host read) the first time it is asked for
        return round_signals(self.accepted, self.mid_calls, self.mid_accepted, self.top1, self.depth)


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
    rounds: RoundHistory | None = None  # the generation's rounds so far (the round signals)
    small_size: int | Callable[[], int] | None = None  # what a small step would expand now (`small_step_size`)
    _signals: dict | None = field(default=None, repr=False)

    @classmethod
    def from_signals(cls, k: int, depth: int, history: list[int], prompt_len: int, t_tgt_ms: float,
                     t_mid_ms: float, signals: dict[str, float]) -> StepContext:
        """A context without a tree: a recorded step's inputs (the signals as they were computed)."""
        return cls(k=k, depth=depth, history=list(history), tree=None, frontier=[], expanded_last=[],
                   prompt_len=prompt_len, t_tgt_ms=t_tgt_ms, t_mid_ms=t_mid_ms, width=0, ngram_max=0,
                   _signals=dict(signals))

    def small_step_size(self) -> int:
        """How many frontier nodes a small step k would expand, -1 where the growth would skip it: what
        replays store as size_k of a mask whose bit k is 0. The decoder hands a callable
        (`TreeGraftDecoder.small_step_size`, the growth's own rule), computed once when first asked."""
        if callable(self.small_size):
            self.small_size = self.small_size()
        if self.small_size is None:
            raise ValueError("this StepContext was built without the small step's size")
        return self.small_size

    def context_signals(self) -> dict[str, float]:
        """root_match and recent_hit_rate alone (the tree signals not computed)."""
        if self._signals is not None:
            return {n: self._signals[n] for n in ("root_match", "recent_hit_rate")}
        return context_signals(self.index, self.ngram_max)

    def round_signals(self) -> dict[str, float]:
        """The round signals (`signals.ROUND_SIGNALS`): all 0 without a round history."""
        return (self.rounds or RoundHistory(self.depth)).signals()

    @property
    def mid_calls(self) -> int:
        return sum(self.history)

    def signals(self) -> dict[str, float]:
        """The 10 candidate signals, computed once per step on demand."""
        if self._signals is None:
            self._signals = compute_signals(self.tree, self.frontier, self.expanded_last, self.width, self.ngram_max,
                                            self.index, self.lookback)
        return self._signals
