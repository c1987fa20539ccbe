"""The one resolution of a config's "auto" settings for a pair and a device profile.

`resolve(config, pair, profile)` returns what a decoder runs with: the config with schedule and
prune made concrete (`schedule.choice.resolve_auto`, said in one line), the policy (its artifact
loaded once), the verification budget (budget="auto": `budget.auto_budget` on the profile; the
config keeps "auto", so a recorded run says how its budget was set) and the scheduler's cost
inputs. The decoder calls it once, at construction; nothing rewrites it afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from treegraft_lab.budget import auto_budget
from treegraft_lab.config import DecodeConfig
from treegraft_lab.costs import DeviceProfile, scheduler_costs
from treegraft_lab.schedule.choice import resolve_auto
from treegraft_lab.schedule.policies import Policy, make_policy


@dataclass(frozen=True)
class Resolved:
    """A config's concrete settings for one pair and profile (`resolve`)."""

    config: DecodeConfig  # schedule and prune concrete; budget as given
    policy: Policy
    budget: int
    costs: dict[str, float]  # the scheduler's T_tgt / T_mid inputs: {"t_tgt_ms", "t_mid_ms"}
    said: str  # the one line saying what "auto" chose ("" when nothing was "auto")


def resolve(config: DecodeConfig, pair: Any, profile: DeviceProfile) -> Resolved:
    """Every "auto" of `config` made concrete for `pair` on `profile`, and the policy it runs."""
    config, said = resolve_auto(config, pair, profile)
    policy = make_policy(config, pair, profile)
    budget = config.budget if config.budget != "auto" else auto_budget(pair, config, profile, policy)
    t_tgt, t_mid = scheduler_costs(profile, config, budget)
    return Resolved(config, policy, budget, {"t_tgt_ms": t_tgt, "t_mid_ms": t_mid}, said)
