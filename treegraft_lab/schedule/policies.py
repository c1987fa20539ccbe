"""Scheduling policies: WHEN the mid drafter expands the tree. Each answers `decide(ctx) -> bool`
for a `context.StepContext` (what a policy may look at before draft step k)."""

from __future__ import annotations

from typing import Protocol

from treegraft_lab.config import DecodeConfig, parse_mask
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.schedule.adaptive import AdaptivePolicy
from treegraft_lab.schedule.context import StepContext


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
        return AdaptivePolicy.for_pair(pair, config, profile)
    if s == "learned":
        from treegraft_lab.schedule.stepwise import learned_policy

        return learned_policy(pair, config, profile) or MaskPolicy((0,) * config.depth, "learned (fallback: small)")
    if s == "oracle":
        return MaskPolicy((0,) * config.depth, "oracle")  # the decoder replays every mask itself
    if isinstance(s, str) and s.startswith("rule:"):
        from treegraft_lab.schedule.rules import RulePolicy

        return RulePolicy.for_config(config, pair, profile)
    mask = parse_mask(s, config.depth)
    if mask is not None:
        return MaskPolicy(mask)
    if hasattr(s, "decide"):
        return s
    raise TreeGraftError(f"unknown schedule {s!r}")
