"""Scheduler artifacts against all-small on TRAIN prompts no collection used, on the regime map's
modelled clock: a validation set for choosing among scheduler variants without the eval prompts.

    .venv/bin/python scripts/regime_validate.py --from 33 --to 40 --ratio 0.6 \\
        --scheduler family=data/scheduler/smollm2-pocket/family-topk-lookup --json OUT.json

Decodes (greedy, 64 tokens, top-k B_ver 63, lookup growth, n-gram small drafter, as the regime map)
train prompts number FROM..TO of every category with all-small and each artifact, on `a100-paper`
with the mid curve scaled to `--ratio`; prints each artifact's speedup over all-small on the mean
over prompts, pooled over tokens, and per prompt (geometric mean), with its mid calls a round.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import numpy as np
import torch

from treegraft_lab import costs, regime
from treegraft_lab.models import cpu_name, load_pair
from treegraft_lab.prompts import tuning_prompts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--from", dest="lo", type=int, default=33, help="first train prompt number of each category")
    p.add_argument("--to", dest="hi", type=int, default=40, help="last train prompt number of each category")
    p.add_argument("--ratio", type=float, default=0.6, help="T_mid / T_tgt (default: %(default)s)")
    p.add_argument("--scheduler", action="append", required=True, metavar="NAME=FOLDER")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    start = datetime.datetime.now()
    qs = [q for q in tuning_prompts("treegraft-suite", purpose="scheduler variant choice", split="train")
          if args.lo <= int(str(q["question_id"]).rsplit("-", 1)[1]) <= args.hi]
    pair = load_pair("smollm2-pocket", dtype="float32")
    cfg = regime.map_config("lookup")
    profs = regime.ratio_profiles(costs.load("a100-paper"), [args.ratio])
    specs = {"all-small": "small", **dict(s.split("=", 1) for s in args.scheduler)}
    df = regime.decode(pair, qs, cfg, profs, specs)
    w = df.pivot_table(index="qid", columns="schedule", values="speedup")
    summ = regime.summary(df).set_index("schedule")  # mean over prompts, pooled, calls a round: the map's measures
    out = {"cpu": cpu_name(), "start": start.isoformat(timespec="seconds"),
           "end": datetime.datetime.now().isoformat(timespec="seconds"), "ratio": args.ratio, "prompts": len(qs),
           "first_last": [args.lo, args.hi], "schedulers": specs, "results": {}}
    print(f"{len(qs)} train prompts ({args.lo}..{args.hi} of each category), ratio {args.ratio}; over all-small:")
    for name in [n for n in specs if n != "all-small"]:
        r = {"mean": float(summ.loc[name, "speedup"] / summ.loc["all-small", "speedup"]),
             "pooled": float(summ.loc[name, "speedup_pooled"] / summ.loc["all-small", "speedup_pooled"]),
             "geomean": float(np.exp(np.log(w[name] / w["all-small"]).mean())),
             "calls_per_round": float(summ.loc[name, "mid_calls_per_round"]),
             "per_prompt": (w[name] / w["all-small"]).round(4).to_dict()}
        out["results"][name] = r
        print(f"  {name}: mean {r['mean']:.3f}  pooled {r['pooled']:.3f}  per-prompt geomean {r['geomean']:.3f}  "
              f"calls/round {r['calls_per_round']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
