"""Median ms of one target forward of n new tokens after a cached context, per dtype.

    .venv/bin/python scripts/forward_curve.py --threads 2 --dtypes float32,bfloat16

Shows whether trees are cheap on this CPU: on a CPU without native bf16, bf16 forwards of many
tokens take a slow path whose cost grows with the tokens (docs/performance.md, session 4).
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import AutoModelForCausalLM

from treegraft_lab import kv
from treegraft_lab.zoo.target import ensure_target


def curve(model, sizes: list[int], context: int, reps: int) -> dict[int, float]:
    cache = kv.new_cache(model)
    kv.prefill(model, cache, list(range(1000, 1000 + context)))
    out = {}
    for n in sizes:
        allowed = torch.ones(n, context + n, dtype=torch.bool)
        allowed[:, context:] = torch.ones(n, n, dtype=torch.bool).tril()
        pos = torch.arange(context, context + n)
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            kv.masked_forward(model, cache, list(range(7, 7 + n)), pos, allowed)
            times.append(1000 * (time.perf_counter() - t))
            kv.truncate(cache, context)
        out[n] = sorted(times)[reps // 2]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--sizes", default="1,2,4,8,16,32")
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sizes = [int(x) for x in args.sizes.split(",")]
    print("| dtype | " + " | ".join(map(str, sizes)) + " |")
    print("|---" * (len(sizes) + 1) + "|")
    for name in args.dtypes.split(","):
        model = AutoModelForCausalLM.from_pretrained(ensure_target(), dtype=getattr(torch, name)).eval()
        c = curve(model, sizes, args.context, args.reps)
        print(f"| {name} | " + " | ".join(f"{c[n]:.1f}" for n in sizes) + " |", flush=True)


if __name__ == "__main__":
    main()
