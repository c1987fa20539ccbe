"""Tree growth rules side by side: the release's (per-parent top-k, n-gram chains, depth window) and
the compact global top-W rule, on the same prompts, against the paper's EG statistics.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python scripts/growth_compare.py --per-category 2 --max-new 64

For every mid step at k > 1 (schedule 10101: steps 3 and 5): the candidate pool |C_k|, the
conventional pool |N_k| (the nodes the previous step grew), the share of the mid frontier at a
depth below the mean depth of N_k (reselected at an earlier depth), and per round A (accepted
draft tokens, bonus excluded). Every output is also compared with plain greedy decoding.
Writes data/growth/growth-compare.json and .md (the CPU, date, versions and command included).
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

from treegraft_lab import DecodeConfig, TreeGraftDecoder, load_pair, load_prompts, record
from treegraft_lab.baselines import autoregressive
from treegraft_lab.models import cpu_name
from treegraft_lab.viz.stats import reselected_share

PAPER = {"rule": "paper (release, fixed 10101)", "pool": 112.54, "pool_ratio": 2.38, "reselected_earlier": 0.6147,
         "A": 2.17}
RULES = {
    "release (default)": {},
    "compact (global top-W)": {"expansion": "global", "ngram_chain": False, "lookback": None},
}


def summarise(rule: str, steps: pd.DataFrame, rounds: pd.DataFrame, seconds: float, same: int, n: int) -> dict:
    mid = steps[steps["call_mid"] & (steps["step"] > 1)]
    return {
        "rule": rule, "mid_steps": len(mid), "pool": mid["pool_size"].mean(),
        "conventional_pool": mid["conventional_pool"].mean(),
        "pool_ratio": mid["pool_size"].mean() / mid["conventional_pool"].mean(),
        "reselected_earlier": reselected_share(steps), "A": rounds["accepted"].mean(),
        "rounds": len(rounds), "nodes_per_round": rounds["nodes"].mean(), "kept_per_round": rounds["kept"].mean(),
        "new_nodes_per_mid_step": mid["new_nodes"].mean(), "seconds": seconds, "identical_to_greedy": f"{same}/{n}",
    }


def markdown(df: pd.DataFrame) -> str:
    """A GitHub table (floats to 2 decimals, shares as percentages; blank where not measured)."""
    def cell(col: str, v) -> str:
        if isinstance(v, float):
            if v != v:
                return ""
            return f"{100 * v:.1f}%" if col == "reselected_earlier" else f"{v:.0f}" if col == "mid_steps" else f"{v:.2f}"
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
    prompts = load_prompts("treegraft-suite", split="eval", per_category=args.per_category)
    refs = [autoregressive(pair, p["turns"][0], max_new_tokens=args.max_new).token_ids for p in prompts]
    rows = []
    for rule, kw in RULES.items():
        dec = TreeGraftDecoder(pair, DecodeConfig(schedule=args.schedule, budget=args.budget, **kw))
        t, same = time.perf_counter(), 0
        with record(dec, snapshots=False) as rec:
            for p, ref in zip(prompts, refs):
                same += dec.generate(p["turns"][0], max_new_tokens=args.max_new).token_ids == ref
        f = rec.to_frame()
        rows.append(summarise(rule, f["steps"], f["rounds"], time.perf_counter() - t, same, len(prompts)))
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
    cols = ["rule", "mid_steps", "pool", "conventional_pool", "pool_ratio", "reselected_earlier", "A",
            "nodes_per_round", "identical_to_greedy"]
    md = markdown(table[cols])
    (out / "growth-compare.md").write_text(f"# Tree growth rules\n\n{md}\n\n" + "\n".join(f"- {k}: {v}" for k, v in meta.items()
                                                                                 if k != "rules") + "\n")
    print(md)


if __name__ == "__main__":
    main()
