"""Named settings, written once: the default pair, the tree-growth rules and the decoding presets.

`SPEED` is what `DecodeConfig()` and the command line mean with no flags: the growth measured
fastest ("lookup": the full rule plus prompt lookup's draft) with the n-gram and Token Recycling
small drafters, budget 63, and schedule and pruning "auto" (chosen per pair and device when the
decoder is built: adaptive where trained, else all-small; value pruning where nodes cost). `RELEASE` is the authors' release as its
evaluator runs it (growth "release", the n-gram drafter alone); `FULL` the full growth with the n-gram
drafter alone. `config.preset(name, **overrides)` builds
the `DecodeConfig` of either. Pure data: this module imports no other (the config imports it), and
importing it loads neither numpy nor torch.
"""

from __future__ import annotations

DEFAULT_PAIR = "smollm2-pocket"  # the offline pair: every command, notebook and helper defaults to it
POCKET_DRAFTER = f"{DEFAULT_PAIR}-drafter"  # its mid drafter (`treegraft-lab zoo distill` makes it)
LOOKUP_TOKENS = 16  # prompt lookup's draft grafted under the root at a round's first small step

# The tree-growth rules, each every growth field (`config.GROWTH_FIELDS`). "full": per-parent top-k
# children, n-gram chains and the reselection depth window at every one of the D steps; "release":
# the authors' release (`RELEASE_RULES`, each a DecodeConfig field); "lookup": the full rule plus
# prompt lookup's draft (LOOKUP_TOKENS) under the root at the first small step, with the chain after the
# longest earlier match beside it (suffix decoding's match), its tail joining the frontier, and small steps skipped where they cannot pay; "compact": the global top-W children per
# step, no chains, every unscored node reselectable.
FULL_GROWTH = {"expansion": "per_parent", "ngram_chain": True, "chain_len": None, "lookback": 5, "lookup": 0,
               "lookup_longest": False, "chain_frontier": False, "min_step_p": 0.0, "fuse_prompt": True, "stop_on_relax_zero": False,
               "first_step_fallback": False, "matcher": "index", "frontier_order": "score", "mid_scores_all": False}
RELEASE_RULES = {"fuse_prompt": False, "stop_on_relax_zero": True, "first_step_fallback": True,
                 "matcher": "release", "frontier_order": "match", "mid_scores_all": True}
GROWTHS = {
    "full": FULL_GROWTH,
    "release": {**FULL_GROWTH, **RELEASE_RULES},
    "lookup": {**FULL_GROWTH, "lookup": LOOKUP_TOKENS, "lookup_longest": True, "chain_frontier": True, "min_step_p": 0.1},
    "compact": {**FULL_GROWTH, "expansion": "global", "ngram_chain": False, "lookback": None},
}

SPEED_GROWTH, SPEED_SMALL = "lookup", "ngram+recycling"
# schedule and prune "auto": the decoder chooses them for its pair and device profile
# (`schedule.choice.resolve_auto`): adaptive where a scheduler is trained for them, else all-small; value
# pruning where a verified node costs (a 64-token target forward >= 1.3x a 1-token one), else top-k.
SPEED = {**GROWTHS[SPEED_GROWTH], "small": SPEED_SMALL, "schedule": "auto", "depth": 5, "width": 10,
         "children": 10, "budget": 63, "prune": "auto", "recycle_below": 2}
FIXED = {"schedule": "10101", "prune": "topk"}  # the paper's fixed schedule and pruning: every tree shows grafting
FULL = {**SPEED, **GROWTHS["full"], "small": "ngram", **FIXED}  # the full growth, n-gram drafter: WHERE and HOW alone
RELEASE = {**SPEED, **GROWTHS["release"], "small": "ngram", **FIXED}
PRESETS = {"speed": SPEED, "full": FULL, "release": RELEASE}
# What a settings dict of trajectory collection means where it leaves a field out: the full growth and
# the n-gram drafter (collection's own defaults, and what the committed trajectories recorded against).
COLLECT_BASE = {**GROWTHS["full"], "small": "ngram", "schedule": "small"}  # the schedule: collection replays every one
# The schedules the regime map prices from its stored replays: `treegraft-lab regime --schedules`' default,
# and the map docs/results.md shows (`report.regime_rows`).
REGIME_SCHEDULES = "all-small,all-mid,10101,best-fixed,oracle"

# Where WHEN pays, named once: the demo's WHEN table, notebooks 05 and 06 and the README's WHEN table read it. The offline pair on the paper's A100 step costs with its mid drafter at a tenth of a verification's
# cost, decoded with the regime map's settings (top-k pruning at 63, the lookup growth, the n-gram drafter,
# D 5, W 10; `regime.map_config`). Why this point: on the regime map (docs/results.md) a mid call is cheap
# enough there that the oracle beats the better fixed endpoint by about 1.36x, and the schedulers learned for
# these settings call the mid drafter; on this CPU's wall clock a mid call costs about a third of a
# verification and all-small wins, which the wall-clock tables say as measured.
SHOWCASE_PROFILE = "a100-paper@0.1"
SHOWCASE_SCHEDULES = ("small", "mid", "adaptive", "learned", "oracle")  # both endpoints, both schedulers, the bound
# Its DecodeConfig overrides of the defaults (the defaults hold D 5, W 10 and the lookup growth; together these give
# `regime.map_config("lookup", SHOWCASE_PROFILE)`); there TreeGraft adaptive is the pair's family scheduler (no
# single-profile one is trained for a100-paper@0.1).
SHOWCASE_CONFIG = {"clock": SHOWCASE_PROFILE, "budget": 63, "prune": "topk", "small": "ngram"}

# The demo's three prompts, kind -> one user message: one that copies from its prompt, one in between, one with
# nothing to copy (`treegraft-lab demo`, its WHEN table, notebook 05's WHEN section).
DEMO_PROMPTS = {
    "copies": ("Add type hints and a docstring to this function; keep its body exactly as it is.\n\n"
               "def moving_average(values, window):\n    result = []\n    total = 0.0\n"
               "    for i, value in enumerate(values):\n        total += value\n        if i >= window:\n"
               "            total -= values[i - window]\n        if i >= window - 1:\n"
               "            result.append(total / window)\n    return result\n"),
    "in between": ("The library opens at 9 am on weekdays and at 10 am on Saturdays. It is closed on Sundays. "
                   "Members may borrow up to five books for three weeks. Late books cost 20 cents a day.\n\n"
                   "When does the library open on Saturdays, how many books may a member borrow, and for how long?"),
    "fresh": "Write a short poem about a lighthouse keeper who waits for a storm.",
}
