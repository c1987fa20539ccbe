"""Target forward cost per new-token count: stock transformers path vs the packed CPU path.

    .venv/bin/python scripts/forward_curve.py --json data/perf/forward-curve.json

One process, one float32 target: each size is timed on the stock forwards (`cpu_path.disabled`,
a concatenating DynamicCache) and on the packed path (`cpu_path.install`, a preallocated cache),
interleaved size by size so load drift hits both alike. Also measured here, side by side:
- the memory floor: the target's weight bytes / the streaming-read bandwidth of this machine
  (the best of `--reps` sums of a 1 GiB float32 buffer on the same threads);
- one mid-drafter call on W nodes (score + propose of the pocket drafter, as the decoder makes it).
Prints a markdown table and the acceptance ratios; `--json` saves everything with the CPU model.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch


def stream_gbps(reps: int) -> float:
    """Streaming-read bandwidth: the best of `reps` sums over a 1 GiB float32 buffer."""
    x = torch.ones(256 * 1024 * 1024)
    x.sum()
    best = min(_time(x.sum) for _ in range(reps))
    return x.numel() * 4 / best / 1e9


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def weight_bytes(model) -> int:
    """Bytes of the model's parameters, each storage once (a tied embedding counts once)."""
    seen, total = set(), 0
    for p in model.parameters():
        key = p.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            total += p.numel() * p.element_size()
    return total


def mid_call_ms(pair, ids: list[int], width: int, reps: int) -> float:
    """Median ms of one mid call: score the root and `width` children, propose the top-`width`."""
    from treegraft_lab.drafters import ModelDrafter
    from treegraft_lab.tree import SMALL, DraftTree

    d = ModelDrafter(pair.mid)
    d.prefill(ids[:-1])
    times = []
    for i in range(reps + 1):
        tree = DraftTree.start(ids[-1])
        for j in range(width):
            tree.add_child(0, 1000 + j, -1.0, SMALL, 1, 1)
        t = time.perf_counter()
        d.score(tree, list(range(len(tree))))
        d.propose(tree, list(range(1, len(tree))), width)
        if i:  # the first is a warm-up
            times.append(1000 * (time.perf_counter() - t))
        d.rollback()
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--sizes", default="1,2,4,8,16,32,64")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--reps", type=int, default=7, help="timed forwards per size and path (median)")
    ap.add_argument("--width", type=int, default=10, help="frontier width W of the timed mid call")
    ap.add_argument("--json", default=None, help="save the results to this file")
    args = ap.parse_args()

    from treegraft_lab import cpu_path
    from treegraft_lab.measure import forward_ms as forward_cost_ms
    from treegraft_lab.models import cpu_name, load_pair

    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = [int(x) for x in args.sizes.split(",")]
    pair = load_pair("smollm2-pocket", dtype="float32")
    if pair.forward_path != "treegraft-cpu":
        raise SystemExit(f"the packed CPU path does not apply here: {cpu_path.supported(pair.target)}")
    model = pair.target
    gbps = stream_gbps(args.reps)
    wbytes = weight_bytes(model)
    floor = wbytes / gbps / 1e6
    ids = list(range(1000, 1000 + args.context + 1))

    curve: dict[str, dict[int, float]] = {"stock": {}, "packed": {}}
    for n in sizes:  # interleaved: both paths at each size before the next
        with cpu_path.disabled(model), cpu_path.disabled(pair.mid):
            curve["stock"][n] = forward_cost_ms(model, n, args.context, args.reps)
        curve["packed"][n] = forward_cost_ms(model, n, args.context, args.reps)
    with cpu_path.disabled(model), cpu_path.disabled(pair.mid):
        mid_stock = mid_call_ms(pair, ids, args.width, args.reps)
    mid_packed = mid_call_ms(pair, ids, args.width, args.reps)

    print(f"CPU: {cpu_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}, float32, "
          f"{args.context} cached tokens, medians of {args.reps}")
    print(f"memory floor: {wbytes / 1e6:.0f} MB of weights / {gbps:.1f} GB/s streaming read = {floor:.1f} ms\n")
    print("| path | " + " | ".join(f"n={n}" for n in sizes) + f" | mid call (W={args.width}) |")
    print("|---" * (len(sizes) + 2) + "|")
    for name, mid in (("stock", mid_stock), ("packed", mid_packed)):
        print(f"| {name} | " + " | ".join(f"{curve[name][n]:.1f}" for n in sizes) + f" | {mid:.1f} |")
    p = curve["packed"]
    ratios = {"one_token_over_floor": p[1] / floor,
              "sixteen_over_one": p[16] / p[1] if 16 in p else float("nan"),
              "mid_call_over_one_token": mid_packed / p[1],
              "speedup_one_token": curve["stock"][1] / p[1],
              "speedup_sixteen": curve["stock"][16] / p[16] if 16 in p else float("nan")}
    print(f"\npacked path: 1-token forward = {ratios['one_token_over_floor']:.2f}x the memory floor; "
          f"16 tokens = {ratios['sixteen_over_one']:.2f}x one token; mid call (W={args.width}) = "
          f"{ratios['mid_call_over_one_token']:.2f}x a 1-token target forward")
    print(f"packed over stock: {ratios['speedup_one_token']:.2f}x at 1 token, {ratios['speedup_sixteen']:.2f}x at 16")
    if args.json:
        out = {"cpu": cpu_name(), "threads": torch.get_num_threads(), "torch": torch.__version__,
               "date": time.strftime("%Y-%m-%d"), "dtype": "float32", "context": args.context, "reps": args.reps,
               "stream_gbps": gbps, "weight_mb": wbytes / 1e6, "floor_ms": floor,
               "curve_ms": {k: {str(n): v for n, v in c.items()} for k, c in curve.items()},
               "mid_call_ms": {"stock": mid_stock, "packed": mid_packed, "width": args.width}, "ratios": ratios}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
        print(f"saved {args.json}")


if __name__ == "__main__":
    main()
