"""What a policy may look at before draft step k: the `StepContext`, shared by the decoder, replay,
training and the views (they import it from here; it imports no decoder)."""

from __future__ import annotations

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
