"""Each rule of the release's growth switched on alone over the `lookup` growth (the speed default),
modelled on a100-paper and on this CPU's wall clock, to decide whether the speed default takes it.

    PYTHONPATH=. OMP_NUM_THREADS=2 .venv/bin/python scripts/release_rules_ab.py --per-category 2 --repeats 3

Modelled: top-k pruning on a100-paper, tokens/s = new tokens / the modelled draft and verification ms
of every round, schedules small and 10101 (decisions read no clock, so one pass). Wall: the speed
default as `make demo` runs it (value pruning on this device's profile, float32), schedule small,
every variant interleaved per prompt (`bench.interleaved`, the order rotated), `--repeats` times;
per repeat the ratio of a variant's summed wall time to the default's, reported as the median and
the min-max over repeats. Every output is checked against the default's (greedy: identical).
Writes a JSON of the rows and the run (data/growth/release-rules-ab-modelled.json and -wall.json hold the
runs docs/performance.md reports).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
from pathlib import Path

import torch

from treegraft_lab import DecodeConfig, TreeGraftDecoder, load_pair, load_prompts
from treegraft_lab.bench import decoder_runner, interleaved
from treegraft_lab.config import GROWTHS
from treegraft_lab.models import cpu_name
from treegraft_lab.prompting import encode_prompt

VARIANTS = {"lookup (default)": {}, "+ own prompt forward": {"fuse_prompt": False},
            "+ stop_on_relax_zero": {"stop_on_relax_zero": True}, "+ first_step_fallback": {"first_step_fallback": True},
            "+ frontier_order=match": {"frontier_order": "match"}, "+ mid_scores_all": {"mid_scores_all": True}}


def config(schedule: str, rule: dict, **kw) -> DecodeConfig:
    return DecodeConfig(schedule=schedule, budget=63, small="ngram+recycling", **{**GROWTHS["lookup"], **rule}, **kw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-wall", action="store_true")
    ap.add_argument("--skip-modelled", action="store_true")
    ap.add_argument("--out", default="data/growth/release-rules-ab.json")
    args = ap.parse_args()
    pair = load_pair("smollm2-pocket", dtype="float32", device="cpu")
    prompts = [encode_prompt(pair.tokenizer, q["turns"][0])
               for q in load_prompts(split="eval", per_category=args.per_category)]
    rows = []
    for name, rule in VARIANTS.items():
        row = {"variant": name}
        for schedule in () if args.skip_modelled else ("small", "10101"):
            dec = TreeGraftDecoder(pair, config(schedule, rule, clock="a100-paper", prune="topk"))
            gens = [dec.generate(ids, max_new_tokens=args.max_new) for ids in prompts]
            row[f"modelled {schedule} tokens/s"] = 1000 * sum(len(g.token_ids) for g in gens) / sum(g.stats["modelled_ms"] for g in gens)
            row[f"modelled {schedule} rounds"] = sum(len(g.rounds) for g in gens)
            row[f"modelled {schedule} mid calls"] = sum(r.mid_calls for g in gens for r in g.rounds)
        rows.append(row)
        print(row, flush=True)
    base = rows[0]
    for row in rows:
        for schedule in () if args.skip_modelled else ("small", "10101"):
            row[f"modelled {schedule} ratio"] = row[f"modelled {schedule} tokens/s"] / base[f"modelled {schedule} tokens/s"]
    if not args.skip_wall:
        runners = {name: decoder_runner(TreeGraftDecoder(pair, config("small", rule, prune="value")))
                   for name, rule in VARIANTS.items()}
        out = interleaved(runners, prompts, repeats=args.repeats, max_new_tokens=args.max_new)
        ref = out["lookup (default)"]
        for row in rows:
            recs = out[row["variant"]]
            assert all(r["token_ids"] == b["token_ids"] for rs, bs in zip(recs, ref) for r, b in zip(rs, bs))
            per_rep = [sum(b[k]["wall_s"] for b in ref) / sum(r[k]["wall_s"] for r in recs) for k in range(args.repeats)]
            tokens = sum(len(r[0]["token_ids"]) for r in recs)
            row |= {"wall small tokens/s": tokens / statistics.median(sum(r[k]["wall_s"] for r in recs) for k in range(args.repeats)),
                    "wall small ratio": statistics.median(per_rep), "wall small ratio min": min(per_rep),
                    "wall small ratio max": max(per_rep), "wall small rounds": sum(r[0]["rounds"] for r in recs)}
            print(row["variant"], f"{row['wall small ratio']:.3f} [{min(per_rep):.3f}-{max(per_rep):.3f}]", flush=True)
    meta = {"date": datetime.date.today().isoformat(), "cpu": cpu_name(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "prompts": f"treegraft-suite eval, {args.per_category} per category ({len(prompts)})",
            "max_new_tokens": args.max_new, "repeats": args.repeats,
            "command": "PYTHONPATH=. python scripts/release_rules_ab.py " + " ".join(
                f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("out", "skip_wall", "skip_modelled"))}
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
