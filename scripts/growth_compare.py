"""Tree growth rules side by side on the same prompts, under the statistics the authors' release
records: the release preset (growth "release"), this project's default (growth "full") and the
compact global top-W rule, beside the release's own counts on the same prompts (data/reference)
and the paper's numbers.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python scripts/growth_compare.py --per-category 2 --max-new 64

Per rule (`viz.stats.release_statistics`, each with a 95% bootstrap interval over the prompts):
the reselected share at every mid call (k = 1 counted as 0) and over the calls after step 1, A on
the release's count (each round's root and accepted draft tokens over rounds plus prompt forwards),
the candidate pool before each mid call, the mid calls at each step; and from
`viz.stats.paper_statistics` the conventional pool (inferred) and the pool ratio. A generation that
prefills its prompt alone (the release preset) decodes one token more: the prefill's token is not a
new token in the release's count. Every output is compared with plain greedy decoding. Writes
data/growth/growth-compare.json and .md (the CPU, date, versions and command included).
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

from treegraft_lab import DecodeConfig, TreeGraftDecoder, load_pair, load_prompts, paper, record
from treegraft_lab.baselines import autoregressive
from treegraft_lab.config import GROWTHS
from treegraft_lab.models import cpu_name
from treegraft_lab.paths import DATA_DIR
from treegraft_lab.viz.paper_tables import growth_markdown
from treegraft_lab.viz.stats import RELEASE_STATS, paper_statistics, release_statistics

RULES = {"release": GROWTHS["release"], "full (default)": GROWTHS["full"], "compact": GROWTHS["compact"]}
KEYS = dict(zip(RELEASE_STATS, ("reselected_calls", "reselected_after_step1", "A", "pool_calls", "pool_after_step1")))
REFERENCE = DATA_DIR / "reference" / "release-f53e3a8-smollm2-pocket-eval12.json"


def summarise(rule: str, run, seconds: float, same: int, n: int) -> dict:
    rs, ps = release_statistics(run), paper_statistics(run)["paper definition"]
    row = {"rule": rule}
    for stat, key in KEYS.items():
        row |= {key: rs.loc[stat, "value"], f"{key}_low": rs.loc[stat, "low"], f"{key}_high": rs.loc[stat, "high"],
                f"{key}_n": rs.loc[stat, "n"]}
    calls = [int(rs.loc[i, "value"]) for i in rs.index if i.startswith("mid calls at step")]
    return row | {"mid_calls_by_step": " / ".join(map(str, calls)), "conventional_pool": ps["conventional pool"],
                  "pool_ratio": ps["pool ratio"], "rounds": len(run.rounds), "nodes_per_round": run.rounds["nodes"].mean(),
                  "kept_per_round": run.rounds["kept"].mean(), "prompts": int(rs["prompts"].iloc[0]),
                  "seconds": seconds, "identical_to_greedy": f"{same}/{n}"}


def reference_row(schedule: str) -> dict:
    """The release's own counts on the same prompts (data/reference), where it records them."""
    ref = json.loads(REFERENCE.read_text())["summary"][schedule]
    by = ref["reselect_by_layer"]
    return {"rule": "authors' release (data/reference)", "reselected_calls": ref["reselect_from_past_layer_ratio_pooled_over_calls"],
            "reselected_after_step1": ref["reselect_from_past_layer_ratio_calls_after_step1"], "A": ref["A_release_pooled"],
            "mid_calls_by_step": " / ".join(str(by.get(str(k), {}).get("calls", 0)) for k in range(1, 6)),
            "rounds": ref["total_verify_forwards"], "prompts": ref["n_questions"], "identical_to_greedy": f"{ref['lossless_count']['hf5']}/{ref['n_questions']}"}


PAPER = {"rule": "paper (fixed 10101 for A)", "reselected_calls": paper.RESELECTED_SHARE, "A": paper.A["10101"],
         "pool_after_step1": paper.MEAN_POOL, "conventional_pool": paper.CONVENTIONAL_POOL, "pool_ratio": paper.POOL_RATIO}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--budget", type=int, default=63)
    ap.add_argument("--schedule", default="10101")
    ap.add_argument("--clock", default="a100-paper", help="the profile decisions are priced on (top-k pruning reads none)")
    ap.add_argument("--out", default="data/growth")
    args = ap.parse_args()
    pair = load_pair("smollm2-pocket", dtype=args.dtype)
    prompts = load_prompts("treegraft-suite", split="eval", per_category=args.per_category)
    refs = [autoregressive(pair, p["turns"][0], max_new_tokens=args.max_new + 1).token_ids for p in prompts]
    rows = []
    for rule, kw in RULES.items():
        cfg = DecodeConfig(schedule=args.schedule, budget=args.budget, clock=args.clock, **kw)
        dec = TreeGraftDecoder(pair, cfg)
        extra = 0 if cfg.fuse_prompt else 1  # the release's count: its prefill's token is not a new token
        t, same = time.perf_counter(), 0
        with record(dec) as rec:  # the node snapshots: the paper's definitions need the tree before each step
            for p, ref in zip(prompts, refs):
                out = dec.generate(p["turns"][0], max_new_tokens=args.max_new + extra).token_ids
                same += out == ref[: len(out)]
        rows.append(summarise(rule, rec.to_run(), time.perf_counter() - t, same, len(prompts)))
        del rec
        print(rows[-1], flush=True)
    table = pd.DataFrame([*rows, reference_row(args.schedule), PAPER])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": datetime.date.today().isoformat(), "cpu": cpu_name(), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "dtype": str(pair.dtype), "pair": pair.name,
        "prompts": f"treegraft-suite eval, {args.per_category} per category ({len(prompts)})",
        "max_new_tokens": args.max_new, "budget": args.budget, "schedule": args.schedule, "clock": args.clock,
        "command": f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')} python scripts/growth_compare.py "
                   + " ".join(sys.argv[1:]),
        "rules": {k: {**DecodeConfig(**v).to_dict(), "extra": None} for k, v in RULES.items()},
    }
    (out / "growth-compare.json").write_text(json.dumps({"meta": meta, "rows": table.to_dict("records")}, indent=1,
                                                        default=str) + "\n")
    md = growth_markdown(table.to_dict("records"))
    legend = ("The release's definitions (`viz.stats.release_statistics`), each with a 95% bootstrap interval over "
              "the prompts in brackets: reselected_calls = per mid call, the share of its reselected frontier at a depth "
              "not among the depths of the frontier before (a step-1 call: 0), mean over calls; reselected_after_step1 = "
              "the same over the calls after step 1; A = new tokens (each round's root and accepted draft tokens) / "
              "target forwards (rounds + prompt forwards); pool_calls / pool_after_step1 = the candidate pool before "
              "each mid call; mid_calls_by_step = calls at steps 1 / 2 / 3 / 4 / 5; pool_ratio = mean pool / mean "
              "conventional pool (nodes at the frontier's depths, inferred; `paper_statistics`). The paper reports "
              "61.47% without saying over which calls.")
    (out / "growth-compare.md").write_text(f"# Tree growth rules\n\n{md}\n\n{legend}\n\n" + "\n".join(f"- {k}: {v}" for k, v in meta.items()
                                                                                 if k != "rules") + "\n")
    print(md)


if __name__ == "__main__":
    main()
