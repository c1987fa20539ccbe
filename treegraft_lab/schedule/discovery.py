"""Which schedulers a pair has for a setting: the adaptive scheduler (trained per profile class and
pruning rule) and the fitted switching rules, and the pruning rule to open a view with.

Each takes the device profile already resolved: turning a clock into a profile
(`measure.resolve`) sits a layer above, with the callers (the playground, the notebooks).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from treegraft_lab.config import RULES, DecodeConfig
from treegraft_lab.costs import DeviceProfile
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.schedule import adaptive
from treegraft_lab.schedule.artifact import META_NAME
from treegraft_lab.schedule.choice import SchedulerChoice, choose_settings
from treegraft_lab.schedule.policies import make_policy
from treegraft_lab.schedule.rules import RulePolicy


def adaptive_policy(pair: Any, config: DecodeConfig, profile: DeviceProfile | None) -> Any:
    """The adaptive policy a decoder with `config` runs on `profile`; raises TreeGraftError when
    no scheduler is trained for that profile and pruning (or there is no pair or profile)."""
    if pair is None:
        raise TreeGraftError("no model pair")
    if profile is None:
        raise TreeGraftError(f"no device profile for the clock {config.clock!r}")
    return make_policy(replace(config, schedule="adaptive"), pair, profile)


def adaptive_status(pair: Any, config: DecodeConfig, profile: DeviceProfile | None) -> str | None:
    """None when the adaptive scheduler can run for `pair` under `config` on `profile`; otherwise why not."""
    try:
        adaptive_policy(pair, config, profile)
        return None
    except Exception as e:  # noqa: BLE001 - any failure means "not available", with its reason
        return f"{type(e).__name__}: {e}"


def rule_schedules(pair: Any, config: DecodeConfig, profile: DeviceProfile | None) -> list[str]:
    """The rule schedules fitted for `pair` under `config` on `profile` (its class, pruning, growth and
    small drafter), with their values: ["rule:match=0", "rule:score=0.05"] or fewer; none without a profile."""
    if profile is None:  # no profile for this clock yet: no rule can be looked up
        return []
    out = []
    for rule in RULES:
        try:
            out.append(RulePolicy.for_config(replace(config, schedule=rule), pair, profile).name)
        except TreeGraftError:  # a rule not fitted for this setting is simply not offered
            continue
    return out


def scheduler_name(pair: Any, config: DecodeConfig, profile: DeviceProfile) -> str:
    """The artifact folder name ("<profile class>-<pruning>...") a decoder with `config` loads on `profile`."""
    return adaptive.artifact_folder(pair, config, profile).name


def trained_schedulers(pair: Any) -> list[str]:
    """The (profile class)-(pruning) folders holding a scheduler artifact for `pair`."""
    name = getattr(pair, "name", None)
    folder = adaptive.artifact_dir(name) if name else None
    if folder is None or not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if (p / META_NAME).is_file())


def scheduler_choice(pair: Any, trees: DecodeConfig, clock: str, prune: str | None,
                     prefer_prune: str = "topk") -> SchedulerChoice:
    """`choice.choose_settings` for `pair` (its name, device and dtype), `clock` and the trees of `trees`
    (growth rule, small drafter); `prune` None: `prefer_prune` first, then the other rule."""
    dtype = str(getattr(pair, "dtype", "auto")).removeprefix("torch.")
    return choose_settings(getattr(pair, "name", None), device=str(getattr(pair, "device", "auto")), dtype=dtype,
                           prune=prune, clock=clock, growth=trees.growth, small=trees.small, prefer_prune=prefer_prune)


def scheduler_prune(pair: Any, trees: DecodeConfig, clock: str, recorded: str) -> tuple[str, str]:
    """The `recorded` pruning rule, or the other one where only that has an adaptive scheduler for
    `pair` on `clock`; with a note saying so ("" where the recorded rule is kept)."""
    if pair is None:
        return recorded, ""
    try:
        choice = scheduler_choice(pair, trees, clock, None, recorded)
    except Exception:  # noqa: BLE001 - an unknown device or profile: keep the recorded rule
        return recorded, ""
    return choice.prune, "" if choice.prune == recorded else f"pruning set to {choice.prune}: {choice.note}"
