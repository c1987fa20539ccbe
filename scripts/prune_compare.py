"""Value pruning against top-k pruning, side by side in one process (interleaved per prompt).

    .venv/bin/python scripts/prune_compare.py --dtype bfloat16 --per-category 1 --schedule small

Each setting decodes every prompt (the order rotates per prompt); tokens/s = new tokens / wall
time (prefill included), per category and overall, plus tokens per round and kept nodes.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
import torch

from treegraft_lab import DecodeConfig, TreeGraftDecoder, load_pair
from treegraft_lab.prompts import tuning_prompts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--schedule", default="small")
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--with-63", action="store_true", help="also top-k at the paper's 63 (slow on a CPU)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    pair = load_pair("smollm2-pocket", dtype=args.dtype, require_mid=args.schedule != "small")
    settings = {"topk, budget auto": DecodeConfig(schedule=args.schedule, budget="auto"),
                "value, cap 63": DecodeConfig(schedule=args.schedule, budget=63, prune="value")}
    if args.with_63:
        settings["topk, budget 63"] = DecodeConfig(schedule=args.schedule, budget=63)
    decs = {name: TreeGraftDecoder(pair, cfg) for name, cfg in settings.items()}
    prompts = tuning_prompts("treegraft-suite", purpose="the pruning comparison", split="eval", per_category=args.per_category)
    for d in decs.values():  # warm-up (and the value pruner's cost curve, measured at build time)
        d.generate(prompts[0]["turns"][0], max_new_tokens=8)
    rows, names = [], list(decs)
    for i, p in enumerate(prompts):
        for name in names[i % len(names):] + names[: i % len(names)]:
            t = time.perf_counter()
            g = decs[name].generate(p["turns"][0], max_new_tokens=args.max_new)
            rows.append({"category": p["category"], "setting": name, "tokens": len(g.token_ids),
                         "seconds": time.perf_counter() - t, "rounds": g.stats["rounds"],
                         "kept": sum(r.kept for r in g.rounds)})
    df = pd.DataFrame(rows)
    per = df.groupby(["category", "setting"])[["tokens", "seconds"]].sum()
    table = (per.tokens / per.seconds).unstack("setting")
    tot = df.groupby("setting")[["tokens", "seconds", "rounds", "kept"]].sum()
    table.loc["overall"] = tot.tokens / tot.seconds
    print(f"tokens/s, {args.schedule}, {pair.dtype}, budgets " + ", ".join(f"{n}: {d.budget}" for n, d in decs.items()))
    print(table[names].round(2).to_string())
    print("tokens per round", (tot.tokens / tot.rounds).round(2).to_dict(), "kept nodes per round", (tot.kept / tot.rounds).round(2).to_dict())


if __name__ == "__main__":
    main()
