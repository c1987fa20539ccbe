"""Two switching rules for WHEN, the simplest answers the learned scheduler must beat.

rule:match (SAM-Decoding's switch): call the mid drafter at a draft step iff the longest context
match is shorter than tau tokens. The match: the longest n-gram (at most `ngram_max`) ending the
committed text + the path to the step's best frontier node (the root at k = 1) that occurred in
the committed text (`NgramIndex.lookup`, whichever small drafter runs).

rule:score (suffix decoding's hybrid switch): call it iff the small drafter's best path
probability is below a threshold: at k = 1 the best n-gram continuation's p of the committed
text (nothing drafted yet), after that the highest exp(s(v)) over the frontier N_k.

Fitting (`fit`): each value of a grid is decoded on the train split's prompts with the decoder's
profile and the one with the highest modelled tokens/s wins (ties: the smaller value, fewer mid
calls); modelled because the profile is what every decision reads and it is deterministic, so
the fit does not depend on the machine's load. Fitted values live per pair in
data/scheduler/<pair>/rules.json under "<profile class>-<prune>-<growth>-<small>", with the grid's
numbers and the command (scripts/fit_rules.py writes it and RULES.md, its card).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from treegraft_lab.config import DecodeConfig, rule_value
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.schedule.context import StepContext

GRIDS = {"rule:match": (0, 1, 2, 3, 4, 5, 6), "rule:score": (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.01)}


def match_len(ctx: StepContext) -> int:
    """n of the longest n-gram ending committed text + the best frontier node's path that occurred."""
    idx = ctx.index
    if idx is None:
        return 0
    best = max(ctx.frontier, key=lambda v: ctx.tree.score[v], default=0) if ctx.tree is not None else 0
    path = ctx.tree.path_tokens(best)[1:] if ctx.tree is not None else []
    return idx.lookup((idx.tokens[-idx.nmax:] + path)[-idx.nmax:])[0]


def best_p(ctx: StepContext) -> float:
    """The small drafter's best path probability before step k (see the module docstring)."""
    if ctx.k == 1 or ctx.tree is None:
        idx = ctx.index
        conts = idx.continuations(idx.tokens[-idx.nmax:], 1) if idx is not None else []
        return math.exp(conts[0][1]) if conts else 0.0
    live = [ctx.tree.score[v] for v in ctx.frontier if ctx.tree.alive[v]]
    return math.exp(max(live)) if live else 0.0


class RulePolicy:
    """rule:match (call iff match_len < value) or rule:score (call iff best_p < value)."""

    def __init__(self, rule: str, value: float) -> None:
        self.rule, self.value = rule, value
        self.name = f"{rule}={value:g}"

    def decide(self, ctx: StepContext) -> bool:
        x = match_len(ctx) if self.rule == "rule:match" else best_p(ctx)
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
                                     f"give a value ('{rule}={GRIDS[rule][3]}') or fit one with scripts/fit_rules.py")
        return cls(rule, float(value))


def rules_key(config: DecodeConfig, profile=None) -> str:
    """"<profile class>-<prune>-<growth>-<small>": what a fitted value was fitted for."""
    from treegraft_lab.schedule.adaptive import profile_class

    cls = profile_class(profile) if profile is not None else str(config.clock)
    return f"{cls}-{config.prune}-{config.growth}-{config.small}"


def rules_file(pair_name: str) -> Path:
    from treegraft_lab.schedule.adaptive import artifact_dir

    return artifact_dir(pair_name) / "rules.json"


def read_fitted(pair_name: str) -> dict:
    path = rules_file(pair_name)
    return json.loads(path.read_text()) if path.is_file() else {}


def fit(pair, prompts_ids: list[list[int]], config: DecodeConfig, rule: str, max_new_tokens: int = 64,
        grid: tuple | None = None, progress=None) -> dict:
    """Decode the prompts with every value of `rule`'s grid; the best modelled tokens/s wins.
    Returns {"value", "grid": [{"value", "tokens_per_s", "mid_calls_per_round", "tokens_per_forward"}]}."""
    from treegraft_lab.decoder import TreeGraftDecoder

    rows = []
    for v in grid or GRIDS[rule]:
        dec = TreeGraftDecoder(pair, replace(config, schedule=f"{rule}={v:g}"))
        tokens = ms = rounds = calls = 0
        for ids in prompts_ids:
            g = dec.generate(ids, max_new_tokens=max_new_tokens)
            tokens, ms, rounds = tokens + g.stats["new_tokens"], ms + g.stats["modelled_ms"], rounds + g.stats["rounds"]
            calls += sum(r.mid_calls for r in g.rounds)
        rows.append({"value": v, "tokens_per_s": 1000 * tokens / ms, "mid_calls_per_round": calls / rounds,
                     "tokens_per_forward": tokens / rounds})
        if progress:
            progress(rule, rows[-1])
    best = max(rows, key=lambda r: (round(r["tokens_per_s"], 6), -r["mid_calls_per_round"], -r["value"]))
    return {"value": best["value"], "grid": rows}
