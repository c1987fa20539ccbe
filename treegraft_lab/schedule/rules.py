"""Two switching rules for WHEN, the simplest answers the learned scheduler must beat.

rule:match (SAM-Decoding's switch): call the mid drafter in a round iff the longest context match
is shorter than tau tokens: n of the longest n-gram (at most `ngram_max`) ending the committed
text that occurred before (the signal `root_match` x ngram_max), whichever small drafter runs.

rule:score (suffix decoding's hybrid switch): call it at a draft step iff the small drafter's
path probability is below a threshold: exp of the signal `mean_path_score`, the mean path score
over the top-W nodes a mid call would expand (at k = 1 the root alone: 1, so never at step 1).

Both read the scheduler's own signals (`StepContext.signals`), so a rule is fitted on the very
trajectories the learned scheduler was trained on (`fit`): the collected round starts of the
train split, each with every schedule replayed and priced by the trajectories' profile; each
value of a grid follows its decisions through the recorded schedule tree of every round start,
and the value with the highest modelled tokens/s wins, ranked on the objective the learned
scheduler is evaluated on (`rounds.tokens_per_s`: the mean time per token over the round starts;
ties: fewer mid calls, the smaller value). Fitted values live per pair in data/scheduler/<pair>/rules.json
under "<profile class>-<prune>-<growth>-<small>", with the grid's numbers and the command
(`treegraft-lab fit-rules` writes it and RULES.md, its card).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from treegraft_lab.config import DecodeConfig, rule_value
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.rounds import tokens_per_s
from treegraft_lab.schedule.context import StepContext

GRIDS = {"rule:match": (0, 1, 2, 3, 4, 5, 6), "rule:score": (0.0, 0.001, 0.01, 0.05, 0.1, 0.2, 0.5, 1.01)}


def match_len(signals: dict, ngram_max: int = 5) -> int:
    """n of the longest n-gram ending the committed text that occurred before."""
    return round(signals["root_match"] * ngram_max)


def path_p(signals: dict) -> float:
    """exp(mean path score over the would-be reselection R)."""
    return math.exp(signals["mean_path_score"])


class RulePolicy:
    """rule:match (call iff match_len < value) or rule:score (call iff best_p < value)."""

    def __init__(self, rule: str, value: float) -> None:
        self.rule, self.value = rule, value
        self.name = f"{rule}={value:g}"

    def decide(self, ctx: StepContext) -> bool:
        if self.value <= 0:  # a match length and a probability are never below 0: never call
            return False
        if self.rule == "rule:match" and ctx.index is not None:  # the one signal it reads, without the others
            return ctx.index.match_size() < self.value
        return self.decide_signals(ctx.signals(), ctx.ngram_max or 5)

    def decide_signals(self, signals: dict, ngram_max: int = 5) -> bool:
        x = match_len(signals, ngram_max) if self.rule == "rule:match" else path_p(signals)
        return x < self.value

    @classmethod
    def for_config(cls, config: DecodeConfig, pair=None, profile=None) -> RulePolicy:
        """The rule named by `config.schedule`, with its value, or the one fitted for the pair,
        profile class, pruning rule, growth and small drafter (refused in one line if none)."""
        rule, value = rule_value(config.schedule)
        if value is None:
            name = getattr(pair, "name", None)
            key = rules_key(config, profile)
            value = read_fitted(name).get(key, {}).get(rule, {}).get("value") if name else None
            if value is None:
                raise TreeGraftError(f"no fitted {rule} for pair {name!r} and {key} (data/scheduler/{name}/rules.json): "
                                     f"give a value ('{rule}={GRIDS[rule][3]}') or fit one with `treegraft-lab fit-rules TRAJECTORIES`")
        return cls(rule, float(value))


def rules_key(config: DecodeConfig, profile=None) -> str:
    """"<profile class>-<prune>-<growth>-<small>": what a fitted value was fitted for."""
    from treegraft_lab.costs import concrete_prune
    from treegraft_lab.schedule.adaptive import profile_class

    cls = profile_class(profile) if profile is not None else str(config.clock)
    return f"{cls}-{concrete_prune(config, profile)}-{config.growth}-{config.small}"


def rules_file(pair_name: str) -> Path:
    from treegraft_lab.schedule.adaptive import artifact_dir

    return artifact_dir(pair_name) / "rules.json"


def read_fitted(pair_name: str) -> dict:
    path = rules_file(pair_name)
    return json.loads(path.read_text()) if path.is_file() else {}


def fit(trajectories, rule: str, grid: tuple | None = None, ngram_max: int = 5) -> dict:
    """Follow `rule` at every grid value through each round start's recorded schedule tree (a
    trajectories table: one row per round start x schedule x step, priced); the best modelled
    tokens/s (`rounds.tokens_per_s`) wins. Returns {"value", "grid": [{"value", "tokens_per_s", "mid_calls_per_round",
    "tokens_per_forward"}]}."""
    df = trajectories
    steps = {(st, k, pre): sig for st, k, pre, sig in zip(
        df.state, df.k, df.prefix, df[[c for c in df.columns if c.startswith("sig_")]].to_dict("records"))}
    outcome = {(st, sch): (a, t) for st, sch, a, t in zip(df.state, df.schedule, df.accepted, df.t_draft_ms + df.t_verify_ms)}
    states, depth = list(dict.fromkeys(df.state)), int(df.D.iloc[0])
    rows = []
    for v in grid or GRIDS[rule]:
        pol = RulePolicy(rule, v)
        accepted, ms, calls = [], [], 0
        for st in states:
            pre = ""
            for k in range(1, depth + 1):
                sig = {c.removeprefix("sig_"): x for c, x in steps[(st, k, pre)].items()}
                pre += "1" if pol.decide_signals(sig, ngram_max) else "0"
            a, t = outcome[(st, pre)]
            accepted.append(a)
            ms.append(t)
            calls += pre.count("1")
        rows.append({"value": v, "tokens_per_s": tokens_per_s(accepted, ms), "mid_calls_per_round": calls / len(states),
                     "tokens_per_forward": (sum(accepted) + len(states)) / len(states)})
    best = max(rows, key=lambda r: (round(r["tokens_per_s"], 6), -r["mid_calls_per_round"], -r["value"]))
    return {"value": best["value"], "grid": rows}
