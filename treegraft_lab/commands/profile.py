"""`treegraft-lab profile`: time the parts of a decoding round on a model pair.

Prints the small drafter's step time on a long context (goal <= 1 ms at 2,000 tokens), the share
of round time spent outside model forwards (goal <= 15%), and tokens per round per schedule.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from treegraft_lab.commands.common import add_pair_arguments, load_pair_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompts", default="treegraft-suite", help="suite name or JSONL file")
    parser.add_argument("--split", default="eval")
    parser.add_argument("--per-category", type=int, default=1, help="prompts per category")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--schedules", default="small,mid,10101")
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--context", type=int, default=2000, help="context length for the n-gram timing")
    parser.add_argument("--json", action="store_true")
    add_pair_arguments(parser)


def ngram_step_ms(tokenizer, prompts: list[dict], context: int, width: int = 10, reps: int = 200) -> float:
    """Median time of one small-drafter step (W frontier nodes at depth 3) on `context` tokens."""
    from treegraft_lab.drafters import NgramDrafter
    from treegraft_lab.tree import SMALL, DraftTree

    text = "\n".join(t for q in prompts for t in q["turns"])
    ids = tokenizer(text)["input_ids"]
    while len(ids) < context:
        ids = ids + ids
    ids = ids[:context]
    small = NgramDrafter(5, 1)
    small.index.extend(ids)
    tree = DraftTree.start(ids[-1])
    frontier = [0]
    for step in range(1, 4):  # W distinct context tokens per level: a full-width frontier at depth 3
        toks = list(dict.fromkeys(ids[step * 97 :]))[:width]
        frontier = [tree.add_child(frontier[i % len(frontier)], t, -1.0, SMALL, step)[0] for i, t in enumerate(toks)]
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        small.propose(tree, frontier, width)
        times.append(1000 * (time.perf_counter() - t))
    return statistics.median(times)


def run(args: argparse.Namespace) -> int:
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.prompts import load_prompts

    prompts = load_prompts(args.prompts, split=args.split, per_category=args.per_category)
    schedules = [s.strip() for s in args.schedules.split(",") if s.strip()]
    pair = load_pair_from_args(args, require_mid=any(s != "small" for s in schedules))
    out: dict = {"pair": pair.name, "device": str(pair.device), "dtype": str(pair.dtype).removeprefix("torch.")}
    out["ngram_step_ms"] = ngram_step_ms(pair.tokenizer, prompts, args.context)
    out["schedules"] = {}
    for s in schedules:
        dec = TreeGraftDecoder(pair, DecodeConfig(schedule=s, budget=args.budget))
        dec.generate(prompts[0]["turns"][0], max_new_tokens=8)  # warm-up
        rows = [dec.generate(q["turns"][0], max_new_tokens=args.max_new_tokens).stats for q in prompts]
        tot = {k: sum(r[k] for r in rows) for k in ("new_tokens", "rounds", "forward_s", "overhead_s", "draft_s", "verify_s")}
        round_s = tot["forward_s"] + tot["overhead_s"]
        out["schedules"][s] = {
            "tokens_per_round": tot["new_tokens"] / tot["rounds"],
            "overhead_share": tot["overhead_s"] / round_s,
            "draft_share": tot["draft_s"] / round_s,
            "verify_share": tot["verify_s"] / round_s,
            "ms_per_round": 1000 * round_s / tot["rounds"],
        }
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"pair {out['pair']} on {out['device']} ({out['dtype']}), {len(prompts)} prompts, "
          f"{args.max_new_tokens} new tokens, budget {args.budget}")
    print(f"n-gram step (W=10 frontier nodes, {args.context}-token context): median {out['ngram_step_ms']:.3f} ms (goal <= 1 ms)")
    print(f"{'schedule':>10} {'tokens/round':>13} {'ms/round':>9} {'draft':>7} {'verify':>7} {'outside forwards':>17}")
    for s, r in out["schedules"].items():
        print(f"{s:>10} {r['tokens_per_round']:>13.2f} {r['ms_per_round']:>9.1f} {r['draft_share']:>7.1%} "
              f"{r['verify_share']:>7.1%} {r['overhead_share']:>17.1%}")
    print("(outside forwards = round time not spent in a model forward; goal <= 15%)")
    return 0
