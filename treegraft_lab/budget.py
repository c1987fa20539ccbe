"""`budget="auto"` and `prune="value"`: verification budgets from the device profile's costs.

A tree of B non-root nodes costs the target one forward of B + 1 tokens (the root included). On
a GPU that costs about the same for 1 or 64 tokens; on a small CPU it grows steeply (64 tokens
~4x one token, docs/performance.md). The best budget therefore depends on the device, and both
rules here read its costs from one `DeviceProfile` (treegraft_lab.costs), never from live timings.

Model of one round for `budget="auto"` (documented, deliberately simple):

- cost(B) = fixed_ms + target_ms(B + 1), fixed_ms the drafting cost, which does not depend on B:
  the expected mid-drafter calls per round times one mid call on the nodes a step grows (W, or
  W x k with per-parent expansion), plus the profile's n-gram step for the other steps.
- tokens per round E(B) = 1 + A(B), A(B) = a_max * x / (1 + x), x = (B / half) ** power:
  accepted draft tokens grow with the budget, fast at first, and saturate at a_max (half: the
  budget giving a_max / 2; the 1 is the bonus token). The defaults (`ACCEPTANCE`) were fitted on
  the offline pair (docs/performance.md); override with `auto_budget(..., acceptance=(a_max, half, power))`.

The budget maximising E(B) / cost(B) over 1..`max_budget` (63) is returned.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import least_squares

from treegraft_lab import costs
from treegraft_lab.config import parse_mask
from treegraft_lab.parts import Pruner
from treegraft_lab.tree import MID

# (a_max, half, power) fitted by scripts/calibrate_budget.py (removed in commit 9416a6d; git history) on the offline pair's final drafter,
# 6 train prompts x 64 tokens, budgets 2..63 (docs/performance.md). "small": the n-gram drafter
# alone; "default": any schedule calling the mid drafter (fitted on 10101).
ACCEPTANCE = {"small": (0.619, 1.5, 1.4), "default": (1.972, 3.5, 0.9)}


def accepted(budget: float, a_max: float, half: float, power: float) -> float:
    """Accepted draft tokens per round (bonus excluded) under the saturating acceptance model."""
    x = (budget / half) ** power
    return a_max * x / (1.0 + x)


def fit_acceptance(points: dict[int, float]) -> tuple[float, float, float]:
    """Least-squares (a_max, half, power) of `accepted` to {budget: A} (A: bonus excluded), by
    scipy's bounded trust-region least squares from (the largest A, the middle budget, 1)."""
    x, y = np.array(list(points), dtype=float), np.array(list(points.values()), dtype=float)
    start = [max(float(y.max()), 1e-3), float(np.median(x)), 1.0]
    fit = least_squares(lambda p: accepted(x, *p) - y, start, bounds=([0.0, 1e-3, 0.05], [np.inf, np.inf, 5.0]))
    return tuple(float(v) for v in fit.x)


def choose_budget(profile, fixed_ms: float = 0.0,
                  acceptance: tuple[float, float, float] = ACCEPTANCE["default"], max_budget: int = 63) -> int:
    """The budget in 1..max_budget maximising expected tokens (bonus included) per ms on `profile`."""

    def eta(b: int) -> float:
        return (1.0 + accepted(b, *acceptance)) / (fixed_ms + profile.target_ms(b + 1))

    return max(range(1, max_budget + 1), key=eta)


def expected_mid_calls(config, policy=None) -> float:
    """Mid calls per round implied by the schedule: adaptive from its artifact's recorded call rate
    (`policy`: the decoder's policy, whose artifact is read where it was loaded), oracle and other
    policies half the steps."""
    name = config.schedule_name
    if name == "small":
        return 0.0
    if name == "mid":
        return float(config.depth)
    rate = call_rate(policy) if name == "adaptive" else None
    if rate is not None:
        return rate * config.depth
    mask = parse_mask(config.schedule, config.depth) if isinstance(config.schedule, (str, list, tuple)) else None
    return float(sum(mask)) if mask is not None else config.depth / 2


def call_rate(policy) -> float | None:
    """The share of steps at which a scheduler artifact called the mid drafter on its training data
    (None: no artifact, or none recorded)."""
    art = getattr(policy, "artifact", None)
    rate = art.meta.get("student_train", {}).get("call_rate") if art is not None else None
    return float(rate) if rate is not None else None


def auto_budget(pair, config, profile, policy=None, acceptance: tuple[float, float, float] | None = None,
                max_budget: int = 63) -> int:
    """The budget for `config` on `pair` with the costs of `profile` (`policy`: the decoder's, for
    its call rate; `acceptance`: (a_max, half, power), default `ACCEPTANCE` for the schedule)."""
    calls = expected_mid_calls(config, policy)
    mid_ms = 0.0
    if calls and profile.mid:  # a call forwards about the nodes a step grows: W, or W x k per parent
        n = config.width * (config.children if config.expansion == "per_parent" else 1)
        mid_ms = profile.mid_ms(min(n, config.node_cap))
    fixed = calls * mid_ms + (config.depth - calls) * profile.small_ms
    acc = acceptance or ACCEPTANCE["small" if calls == 0 else "default"]
    return choose_budget(profile, fixed, tuple(acc), max_budget)


class ValuePruner(Pruner):
    """`prune="value"`: each round, verify only the best nodes whose expected accepted tokens pay
    for their verification time on this device (a per-round budget, at most B_ver).

    Acceptance chances are calibrated online. An edge (a node given its parent) is binned by who
    scored it (the mid drafter, or the n-gram drafter by match size n) and by its own score p in
    fifths; a bin's chance is (hits + PRIOR * base) / (trials + PRIOR), counted over this run's kept
    edges whose parent the target accepted (a trial; a hit when the edge was accepted too). Its prior
    `base` is the edge's source's rate over every run so far, (hits + PRIOR * p) / (trials + PRIOR)
    summed over the source's bins and kept in `carried`: a run's first rounds start from what that
    drafter's edges earned before, not from its own score (measured on train prompts: a drafter's
    score alone overstated the accepted tokens of a round, most where little is accepted, and value
    pruning then verified nodes that did not pay). A
    node's chance P(v) is the product over its path, so it never exceeds its parent's and every
    prefix of the nodes sorted by P is closed under ancestors. With the nodes sorted by P (ties:
    shallower first), the kept prefix k in 0..budget maximises

        sum_{i <= k} P(v_i)  -  lam * verify_ms(k + 1)

    where verify_ms is the profile's target curve after the round's context (a tree token costs more
    after a long prompt: `DeviceProfile.target_ms`) and lam the run's tokens per ms so far, priced
    by the same profile (at least 1 / verify_ms(1), the rate of plain decoding): a node is worth verifying when its expected
    tokens beat what the time it costs would earn otherwise. k = 0 verifies the root alone, a plain
    decoding step. Any kept subset is lossless; only speed depends on this choice.

    Edges scored by no n-gram match (bin "n0": Token Recycling's candidates, whose adjacency matrix
    the decoder keeps across runs) are counted in `carried`, a dict the decoder keeps across runs too:
    the matrix's priors (`retrieval.RANK_P`) are the paper's, and calibrating them afresh each run
    let a run's first rounds verify up to the whole budget of recycled guesses.
    """

    PRIOR = 2.0
    CARRIED = "n0"  # the bin source whose counts persist across runs (in `carried`)

    def __init__(self, profile, carried: dict | None = None) -> None:
        self.profile = profile
        self._verify_ms: list[float] = []  # verify_ms(k) for k = 1.., read from the profile once
        self._verify_long: list[float] = []  # the same after the profile's long context (where it has one)
        self.bins: dict[tuple[str, int], list[float]] = {}  # bin -> [hits, trials], this run
        self.carried = carried if carried is not None else {}  # CARRIED bins -> [hits, trials], across runs
        self.tokens, self.ms = 0, 0.0

    def carried_state(self) -> dict:
        """A copy of the counts kept across runs (`carried`)."""
        return {k: list(v) for k, v in self.carried.items()}

    def restore_state(self, state: dict | None) -> None:
        """Put back a `carried_state` copy (None: no counts), in place: the dict stays the same object."""
        self.carried.clear()
        self.carried.update({k: list(v) for k, v in (state or {}).items()})

    def start(self) -> None:
        """A generation starts: this run's bins and rate start afresh (the carried counts stay)."""
        self.bins, self.tokens, self.ms = {}, 0, 0.0

    def _counts(self, key: tuple[str, int]) -> dict:
        return self.carried if key[0] == self.CARRIED else self.bins

    @staticmethod
    def bin(tree, v: int) -> tuple[str, int]:
        src = "mid" if tree.drafted_by[v] & MID else f"n{tree.ngram_n[v]}"
        return src, min(int(math.exp(tree.logp[v]) * 5), 4)

    @staticmethod
    def source_key(key: tuple[str, int]) -> tuple[str, int]:
        """The carried key of a bin's source (all its score fifths pooled)."""
        return key[0], -1

    def edge_chance(self, tree, v: int) -> float:
        p = math.exp(tree.logp[v])
        key = self.bin(tree, v)
        src_hits, src_trials = self.carried.get(self.source_key(key), (0.0, 0.0))
        base = (src_hits + self.PRIOR * p) / (src_trials + self.PRIOR)
        hits, trials = self._counts(key).get(key, (0.0, 0.0))
        return (hits + self.PRIOR * base) / (trials + self.PRIOR)

    def chances(self, tree) -> list[float]:
        """P(v) for every node (root 1, dead nodes 0); ids are topological."""
        out = [1.0] * len(tree)
        for v in range(1, len(tree)):
            out[v] = out[tree.parent[v]] * self.edge_chance(tree, v) if tree.alive[v] else 0.0
        return out

    def verify_ms(self, tokens: int, context: int | None = None) -> float:
        """The profile's verification cost of `tokens` tokens (the root included) after `context` cached
        ones (`DeviceProfile.target_ms`), from the two curves tabulated once."""
        while len(self._verify_ms) < tokens:
            k = len(self._verify_ms) + 1
            self._verify_ms.append(self.profile.target_ms(k))
            self._verify_long.append(costs.interpolate(self.profile.target_long, k) if self.profile.target_long else 0.0)
        short = self._verify_ms[tokens - 1]
        w = self.profile.context_weight(context) if context is not None else 0.0
        return short + w * (self._verify_long[tokens - 1] - short) if w else short

    def rate(self) -> float:
        """lam: tokens per ms the run earns, at least plain decoding's."""
        floor = 1.0 / self.verify_ms(1)
        return max(floor, self.tokens / self.ms) if self.ms > 0 else floor

    def prune(self, tree, budget: int, context: int | None = None) -> list[int]:
        """The kept node ids (root first, increasing ids); `context`: the tokens already cached before the
        tree (a tree token costs more after a long context, where the profile measured that)."""
        chance = self.chances(tree)
        order = sorted((v for v in range(1, len(tree)) if tree.alive[v]), key=lambda v: (-chance[v], tree.depth[v], v))
        order = order[:budget]
        lam = self.rate()
        total, best, best_k = 0.0, -lam * self.verify_ms(1, context), 0
        for k, v in enumerate(order, 1):
            total += chance[v]
            value = total - lam * self.verify_ms(k + 1, context)
            if value > best:
                best, best_k = value, k
        return sorted([0, *order[:best_k]])

    def observe(self, tree, kept: list[int], path: list[int], round_ms: float) -> None:
        """Count the round's trials and hits, and its tokens and (modelled) time."""
        on_path = set(path)
        for v in kept[1:]:
            if tree.parent[v] in on_path:
                key = self.bin(tree, v)
                for counts, k in ((self._counts(key), key), (self.carried, self.source_key(key))):
                    b = counts.setdefault(k, [0.0, 0.0])
                    b[0] += v in on_path
                    b[1] += 1
        self.tokens += len(path)  # accepted draft tokens plus the bonus token
        self.ms += round_ms
