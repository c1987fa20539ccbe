"""Tree growth rules side by side: the release's (per-parent top-k, n-gram chains, depth window) and
the compact global top-W rule, on the same prompts, against the paper's EG statistics.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python scripts/growth_compare.py --per-category 2 --max-new 64

Each statistic under the paper's (the release's) definition, `viz.stats.paper_statistics`: A = new
tokens / target forwards (prefill one forward); reselected share at every mid call (k = 1 counted
as 0) against the depths of the frontier before reselection, averaged over calls and pooled; the
candidate pool before every step, root included; the conventional pool (inferred: nodes at the
frontier's depths). Beside them, named "ours", this project's own definitions over the mid steps
at k > 1: |C_k|, |N_k|, the share below the mean depth of N_k, A = accepted draft tokens per round.
Every output is also compared with plain greedy decoding. Writes data/growth/growth-compare.json
and .md (the CPU, date, versions and command included).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from treegraft_lab import DecodeConfig, TreeGraftDecoder, load_pair, record
from treegraft_lab.baselines import autoregressive
from treegraft_lab.models import cpu_name
from treegraft_lab.prompts import tuning_prompts
from treegraft_lab.viz.stats import paper_statistics

PAPER = {"rule": "paper (release, fixed 10101)", "A": 2.17, "reselected_calls": 0.6147, "reselected_pooled": 0.6147,
         "pool": 112.54, "conventional_pool": 112.54 / 2.38, "pool_ratio": 2.38}
RULES = {
    "release (default)": {},
    "compact (global top-W)": {"expansion": "global", "ngram_chain": False, "lookback": None},
}


def summarise(rule: str, run, seconds: float, same: int, n: int) -> dict:
    steps, rounds = run.steps, run.rounds
    mid = steps[steps["call_mid"] & (steps["step"] > 1)]
    p = paper_statistics(run)
    v, ours = p["paper definition"], p["ours"]
    return {
        "rule": rule, "A": v["acceptance length A"], "reselected_calls": v["reselected share (mean of per-call shares)"],
        "reselected_pooled": v["reselected share (pooled)"], "pool": v["mean candidate pool"],
        "conventional_pool": v["conventional pool"], "pool_ratio": v["pool ratio"],
        "mid_calls": int(steps["call_mid"].sum()), "steps": len(steps),
        "ours_A": ours["acceptance length A"], "ours_reselected": ours["reselected share (pooled)"],
        "ours_pool": ours["mean candidate pool"], "ours_conventional_pool": ours["conventional pool"],
        "ours_pool_ratio": ours["pool ratio"], "ours_mid_steps": len(mid),
        "rounds": len(rounds), "nodes_per_round": rounds["nodes"].mean(), "kept_per_round": rounds["kept"].mean(),
        "new_nodes_per_mid_step": mid["new_nodes"].mean(), "seconds": seconds, "identical_to_greedy": f"{same}/{n}",
    }


def markdown(df: pd.DataFrame) -> str:
    """A GitHub table (floats to 2 decimals, shares as percentages; blank where not measured)."""
    def cell(col: str, v) -> str:
        if isinstance(v, float):
            if v != v:
                return ""
            return f"{100 * v:.1f}%" if "reselected" in col else f"{v:.0f}" if col.endswith(("steps", "calls")) else f"{v:.2f}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(c, v) for c, v in zip(df.columns, r)) + " |" for r in df.itertuples(index=False)]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--budget", type=int, default=63)
    ap.add_argument("--schedule", default="10101")
    ap.add_argument("--out", default="data/growth")
    args = ap.parse_args()
    pair = load_pair("smollm2-pocket", dtype=args.dtype)
    prompts = tuning_prompts("treegraft-suite", purpose="the growth comparison", split="eval", per_category=args.per_category)
    refs = [autoregressive(pair, p["turns"][0], max_new_tokens=args.max_new).token_ids for p in prompts]
    rows = []
    for rule, kw in RULES.items():
        dec = TreeGraftDecoder(pair, DecodeConfig(schedule=args.schedule, budget=args.budget, **kw))
        t, same = time.perf_counter(), 0
        with record(dec) as rec:  # the node snapshots: the paper's definitions need the tree before each step
            for p, ref in zip(prompts, refs):
                same += dec.generate(p["turns"][0], max_new_tokens=args.max_new).token_ids == ref
        rows.append(summarise(rule, rec.to_run(), time.perf_counter() - t, same, len(prompts)))
        del rec
        print(rows[-1], flush=True)
    table = pd.DataFrame([*rows, PAPER])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": datetime.date.today().isoformat(), "cpu": cpu_name(), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "dtype": str(pair.dtype), "pair": pair.name,
        "prompts": f"treegraft-suite eval, {args.per_category} per category ({len(prompts)})",
        "max_new_tokens": args.max_new, "budget": args.budget, "schedule": args.schedule,
        "command": f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')} python scripts/growth_compare.py "
                   + " ".join(sys.argv[1:]),
        "rules": {k: {**DecodeConfig(**v).to_dict(), "extra": None} for k, v in RULES.items()},
    }
    (out / "growth-compare.json").write_text(json.dumps({"meta": meta, "rows": table.to_dict("records")}, indent=1,
                                                        default=str) + "\n")
    cols = ["rule", "A", "reselected_calls", "reselected_pooled", "pool", "conventional_pool", "pool_ratio", "mid_calls",
            "ours_A", "ours_reselected", "ours_pool", "ours_pool_ratio", "ours_mid_steps", "nodes_per_round",
            "identical_to_greedy"]
    md = markdown(table[cols])
    legend = ("Paper's definitions (`viz.stats.paper_statistics`): A = new tokens / target forwards (prefill one); "
              "reselected_calls / _pooled = share of each mid call's frontier at a depth not among the depths of the "
              "frontier before reselection (k = 1 counted as 0), mean over calls / pooled over nodes; pool = candidate "
              "pool before every step, root included; conventional_pool = nodes at the frontier's depths (inferred); "
              "pool_ratio = their ratio of means. ours_*: this project's definitions over the mid steps at k > 1 "
              "(|C_k|, |N_k|, share below the mean depth of N_k, accepted draft tokens per round).")
    (out / "growth-compare.md").write_text(f"# Tree growth rules\n\n{md}\n\n{legend}\n\n" + "\n".join(f"- {k}: {v}" for k, v in meta.items()
                                                                                 if k != "rules") + "\n")
    print(md)


if __name__ == "__main__":
    main()
