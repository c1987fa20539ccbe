"""Scheduler artifacts against all-small on this machine's wall clock, side by side in one process:
the command line's default trees (lookup growth, n-gram + recycling), value pruning (at most 63
nodes), float32, 2 threads, 64 tokens. Meant for the TRAIN split: a check of an artifact's margin
offset on the real clock before it is used, without looking at the eval prompts.

    .venv/bin/python scripts/scheduler_wall_check.py --split train --per-category 2 \
        --scheduler cv=data/scheduler/smollm2-pocket/cpu-float32-value-lookup-ngram+recycling

Every method generates once untimed, then each prompt `--repeats` times, the order rotated from one
generation to the next. Prints tokens/s over all-small per prompt (mean of repeats) and overall.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics as st
import sys
from pathlib import Path

import torch

from treegraft_lab.bench import decoder_runner, interleaved
from treegraft_lab.config import GROWTHS, DecodeConfig
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.models import cpu_name, load_pair
from treegraft_lab.prompting import encode_prompt
from treegraft_lab.prompts import tuning_prompts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--split", default="train")
    p.add_argument("--per-category", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--scheduler", action="append", required=True, metavar="NAME=FOLDER")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(2)
    start = datetime.datetime.now()
    pair = load_pair("smollm2-pocket", dtype="float32")
    qs = tuning_prompts("treegraft-suite", purpose="the scheduler wall check", split=args.split, per_category=args.per_category)
    base = {"budget": 63, "prune": "value", "small": "ngram+recycling", **GROWTHS["lookup"]}
    runners = {"all-small": decoder_runner(TreeGraftDecoder(pair, DecodeConfig(schedule="small", **base)))}
    for item in args.scheduler:
        name, folder = item.split("=", 1)
        runners[name] = decoder_runner(TreeGraftDecoder(pair, DecodeConfig(schedule="adaptive", scheduler_path=folder, **base)))
    enc = [encode_prompt(pair.tokenizer, q["turns"][0]) for q in qs]
    names, recs = list(runners), interleaved(runners, enc, args.repeats, 64)
    rate = {n: [[len(o["token_ids"]) / o["wall_s"] for o in rs] for rs in recs[n]] for n in names}
    calls = {n: [[o["mid_calls"] / max(o["rounds"], 1) for o in rs] for rs in recs[n]] for n in names}
    rows = []
    for i, q in enumerate(qs):
        ref = st.mean(rate["all-small"][i])
        rows.append({"prompt": q["question_id"], **{n: st.mean(rate[n][i]) / ref for n in names[1:]},
                     **{f"{n} calls/round": st.mean(calls[n][i]) for n in names[1:]}})
    overall = {n: st.mean(r[n] for r in rows) for n in names[1:]}
    print(f"{cpu_name()}; {len(qs)} {args.split} prompts, 64 tokens, value pruning, float32, 2 threads; tokens/s over all-small")
    for r in rows:
        print(r["prompt"], " ".join(f"{n} {r[n]:.3f} ({r[f'{n} calls/round']:.2f} calls)" for n in names[1:]))
    print("overall (mean of per-prompt ratios):", {n: round(v, 4) for n, v in overall.items()})
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_name(), "start": start.isoformat(timespec="seconds"),
                                         "end": datetime.datetime.now().isoformat(timespec="seconds"),
                                         "command": " ".join(["python", *sys.argv]), "rows": rows, "overall": overall},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
