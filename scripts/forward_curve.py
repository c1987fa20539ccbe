"""Median ms of one target forward of n new tokens after a cached context, per dtype.

    .venv/bin/python scripts/forward_curve.py --threads 2 --dtypes float32,bfloat16

Shows whether trees are cheap on this CPU: on a CPU without native bf16, bf16 forwards of many
tokens take a slow path whose cost grows with the tokens (docs/performance.md, session 4).
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForCausalLM

from treegraft_lab.budget import forward_cost_ms
from treegraft_lab.zoo.target import ensure_target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--sizes", default="1,2,4,8,16,32")
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--reps", type=int, default=7, help="timed forwards per size (median)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sizes = [int(x) for x in args.sizes.split(",")]
    print("| dtype | " + " | ".join(map(str, sizes)) + " |")
    print("|---" * (len(sizes) + 1) + "|")
    for name in args.dtypes.split(","):
        model = AutoModelForCausalLM.from_pretrained(ensure_target(), dtype=getattr(torch, name)).eval()
        c = {n: forward_cost_ms(model, n, args.context, args.reps) for n in sizes}
        print(f"| {name} | " + " | ".join(f"{c[n]:.1f}" for n in sizes) + " |", flush=True)


if __name__ == "__main__":
    main()
