"""`treegraft-lab check-lossless`: TreeGraft's greedy output vs the target's plain greedy `generate`.

Every prompt (first turn) x every schedule; prints the match rate and, for a mismatch, the first
divergence (position, tokens, and the target's logit gap between the two tokens there, with the
size of one rounding step of the pair's dtype at that logit, float32 logits or not). In float32
any mismatch is a bug. In bf16 a gap within a few steps is numerics: a tree forward of many rows and HF's one-row decode
round differently, and two near-equal logits can swap; `--float32-logits` computes both sides'
logits in float32 (the hidden states stay bf16), `--dtype float32` removes the question. Exits 1
on any mismatch.
"""

from __future__ import annotations

import argparse
import json
import sys

from treegraft_lab.commands.common import (
    add_clock_arguments,
    add_growth_arguments,
    add_pair_arguments,
    check_pair,
    check_positive,
    check_prompts,
    check_scheduler,
    clocks_from_args,
    growth_from_args,
    load_pair_from_args,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompts", required=True, help="suite name (e.g. treegraft-suite) or a JSONL file")
    parser.add_argument("--split", default="eval", help="eval, validation, train or all")
    parser.add_argument("--categories", default=None, help="comma-separated categories (default: all)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many prompts")
    parser.add_argument("--per-category", type=int, default=None, help="the first N prompts of each category")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--schedules", default="small,mid,10101",
                        help="comma-separated schedules, or the peers recycling / suffix (their own trees)")
    parser.add_argument("--budget", type=int, default=63)
    parser.add_argument("--json", action="store_true", help="print one JSON object with matches and total")
    parser.add_argument("--float32-logits", action="store_true",
                        help="the target's head computes logits in float32 (verification and the reference alike)")
    add_growth_arguments(parser)
    add_clock_arguments(parser)
    add_pair_arguments(parser)


def divergence(pair, prompt_ids: list[int], ours: list[int], ref: list[int]) -> dict:
    import torch

    i = next((j for j, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
    info = {"position": i, "ours": ours[i] if i < len(ours) else None, "reference": ref[i] if i < len(ref) else None}
    if info["ours"] is not None and info["reference"] is not None:
        x = torch.tensor([prompt_ids + ref[:i]], device=pair.device)
        with torch.inference_mode():
            logits = pair.target(input_ids=x, logits_to_keep=1).logits[0, -1]
        # rounding is the pair's: float32 logits (--float32-logits) of bf16 hidden states still tie
        # within bf16 steps
        dt = getattr(pair, "dtype", logits.dtype)
        a, b = float(logits[info["reference"]].float()), float(logits[info["ours"]].float())
        info["logit_gap"] = a - b
        info["logit_dtype"] = str(logits.dtype).removeprefix("torch.")
        info["pair_dtype"] = str(dt).removeprefix("torch.")
        info["step"] = rounding_step(max(abs(a), abs(b)), dt)
        info["numerics"] = dt != torch.float32 and abs(a - b) <= NUMERIC_STEPS * info["step"]
    return info


NUMERIC_STEPS = 4  # a gap within this many rounding steps of the pair's dtype reads as numerics


def rounding_step(x: float, dtype) -> float:
    """The spacing of representable numbers of `dtype` at magnitude `x` (one ulp)."""
    import math

    import torch

    mant = {torch.bfloat16: 7, torch.float16: 10}.get(dtype, 23)
    return 2.0 ** (math.floor(math.log2(max(abs(x), 1e-30))) - mant)


def run(args: argparse.Namespace) -> int:
    import torch
    from tqdm.auto import tqdm

    from treegraft_lab import measure
    from treegraft_lab.baselines import PEERS
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.prompting import encode_prompt
    from treegraft_lab.prompts import load_prompts

    cats = args.categories.split(",") if args.categories else None
    prompts = load_prompts(args.prompts, split=args.split, categories=cats, limit=args.limit, per_category=args.per_category)
    check_prompts(prompts, args)
    check_positive(max_new_tokens=args.max_new_tokens)
    check_pair(None if args.target else args.pair)
    schedules = [s.strip() for s in args.schedules.split(",") if s.strip()]
    configs = {s if c == "wall" else f"{s}@{c}": DecodeConfig(schedule="small" if s in PEERS else s, budget=args.budget, prune=p,
                                                              clock=c, **growth_from_args(args))
               for s in schedules for c, p in clocks_from_args(args)}  # validates early
    if "adaptive" in schedules:
        check_scheduler(args, clocks_from_args(args), growth_from_args(args))
    pair = load_pair_from_args(args, require_mid=any(c.schedule_name != "small" for c in configs.values()))
    peer = {k: PEERS.get(k.split("@")[0]) for k in configs}
    profiles = {c.clock: measure.resolve(c.clock, pair) for c in configs.values()}  # each clock resolved once
    matches, total, failures = 0, 0, []
    for q in tqdm(prompts, desc="check-lossless", disable=args.json):
        ids = encode_prompt(pair.tokenizer, q["turns"][0])
        with torch.inference_mode():
            out = pair.target.generate(torch.tensor([ids], device=pair.device), max_new_tokens=args.max_new_tokens,
                                       do_sample=False, attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=pair.device))
        ref = out[0, len(ids):].tolist()
        for s, cfg in configs.items():
            dec = (peer[s] or TreeGraftDecoder)(pair, cfg, profile=profiles[cfg.clock])
            ours = dec.generate(ids, max_new_tokens=args.max_new_tokens).token_ids
            total += 1
            if ours == ref:
                matches += 1
            else:
                failures.append({"question_id": q["question_id"], "schedule": s, **divergence(pair, ids, ours, ref)})
    rate = matches / total if total else 0.0
    if args.json:
        print(json.dumps({"matches": matches, "total": total, "match_rate": rate, "dtype": str(pair.dtype),
                          "float32_logits": bool(args.float32_logits), "mismatches": failures}))
    else:
        logits = "float32 logits" if args.float32_logits else "logits in the model's dtype"
        print(f"{matches} / {total} outputs identical to plain greedy decoding, match rate {rate:.1%} "
              f"({len(prompts)} prompts x {len(schedules)} schedules, {args.max_new_tokens} new tokens, {pair.dtype}, "
              f"{logits}, {args.growth} growth, small drafter {args.small})")
        for f in failures:
            gap = f.get("logit_gap", float("nan"))
            why = ""
            if "step" in f:
                why = (f" = {abs(gap) / f['step']:.1f} {f['pair_dtype']} steps of {f['step']:.3g}: "
                       + ("within rounding, numerics (tree vs one-row forward), not a broken rule" if f["numerics"]
                          else "beyond rounding: inspect this case"))
            print(f"  MISMATCH {f['question_id']} schedule {f['schedule']}: first divergence at position "
                  f"{f['position']}: ours {f['ours']} vs reference {f['reference']}, "
                  f"target logit gap {gap:.4g}{why}", file=sys.stderr)
    return 0 if matches == total else 1
