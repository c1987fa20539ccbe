"""Measure accepted tokens per round against the verification budget; fit budget.ACCEPTANCE.

    .venv/bin/python scripts/calibrate_budget.py --per-category 1 --max-new-tokens 64

Runs each schedule at each budget on the first train prompts of every category (train split, so
the benchmark's eval prompts never tune anything) and prints A (accepted draft tokens per round,
bonus excluded) per budget, the fitted (a_max, b_scale) of `budget.fit_acceptance`, and the
target's measured cost curve with the budget `auto_budget` then picks. A does not depend on the
machine's load; the cost curve does (measure it on an idle machine).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", default="smollm2-pocket")
    p.add_argument("--schedules", default="small,10101")
    p.add_argument("--budgets", default="2,4,8,16,32,63")
    p.add_argument("--per-category", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=64)
    a = p.parse_args(argv)

    from treegraft_lab import budget, measure
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.models import load_pair
    from treegraft_lab.prompts import tuning_prompts

    pair = load_pair(a.pair)
    prompts = [q["turns"][0] for q in tuning_prompts("treegraft-suite", purpose="budget calibration", split="train", per_category=a.per_category)]
    budgets = [int(b) for b in a.budgets.split(",")]
    fits = {}
    for sched in a.schedules.split(","):
        points = {}
        for b in budgets:
            dec = TreeGraftDecoder(pair, DecodeConfig(schedule=sched, budget=b))
            acc = rounds = 0
            for text in prompts:
                s = dec.generate(text, max_new_tokens=a.max_new_tokens).stats
                acc, rounds = acc + s["accepted_per_round"] * s["rounds"], rounds + s["rounds"]
            points[b] = acc / rounds
            print(f"{sched} budget {b}: A = {points[b]:.3f} ({rounds} rounds)", file=sys.stderr)
        fits[sched] = {"A": points, "fit": budget.fit_acceptance(points)}
    prof = measure.for_pair(pair)
    picks = {s: budget.choose_budget(prof, acceptance=f["fit"]) for s, f in fits.items()}
    print(json.dumps({"prompts": len(prompts), "max_new_tokens": a.max_new_tokens, "fits": fits,
                      "profile": prof.name, "cost_curve_ms": prof.target, "load": os.getloadavg()[0],
                      "picked_without_draft_cost": picks,
                      "auto_budget": {s: budget.auto_budget(pair, DecodeConfig(schedule=s, extra={"acceptance": f["fit"]}), prof)
                                      for s, f in fits.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
