"""The target's forward cost curve per dtype and forward path on this CPU, as a markdown table.

    .venv/bin/python scripts/forward_curves.py [--pair smollm2-pocket] [--context 512] [--repeats 7]

Each row: the median ms of a forward of n new tokens after `context` cached ones
(`measure.forward_times`, a causal mask; a tree mask of the same size costs the same), the sizes
interleaved `repeats` times so that a busy spell slows every size alike. Rows: float32 and bfloat16
on the packed path (`treegraft_lab.cpu_path`) and on the stock transformers path, and int8 (torch's
dynamic quantisation of every linear layer, fbgemm/oneDNN kernels: another model, listed for its
price only). With --identity N, N train prompts are decoded by all-small and by plain decoding in
each float dtype on the packed path and the prompts with identical outputs are counted.
"""

from __future__ import annotations

import argparse
import statistics
import warnings

import torch

SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


def curve(model, context: int, repeats: int) -> dict[int, float]:
    from treegraft_lab import measure

    times: dict[int, list[float]] = {n: [] for n in SIZES}
    with torch.inference_mode(), measure.prefilled():
        for _ in range(repeats):
            for n in SIZES:
                times[n] += measure.forward_times(model, n, context, 1)
    return {n: statistics.median(t) for n, t in times.items()}


def identity(pair, prompts: int) -> str:
    from treegraft_lab import bench
    from treegraft_lab import prompts as suite
    from treegraft_lab.baselines import autoregressive
    from treegraft_lab.commands.common import DEFAULT_GROWTH, DEFAULT_SMALL
    from treegraft_lab.config import GROWTHS
    from treegraft_lab.prompting import encode_prompt

    qs = suite.load_prompts("treegraft-suite", split="train")[::6][:prompts]
    dec = bench.tree_decoder(pair, "small", 63, "value", "a100-paper", {**GROWTHS[DEFAULT_GROWTH], "small": DEFAULT_SMALL})
    same = 0
    for q in qs:
        ids = encode_prompt(pair.tokenizer, q["turns"][0])
        same += dec.generate(ids, max_new_tokens=48).token_ids == autoregressive(pair, ids, max_new_tokens=48).token_ids
    return f"{same} of {len(qs)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="smollm2-pocket")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--identity", type=int, default=0, metavar="N", help="check tree == plain on N train prompts")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from treegraft_lab import cpu_path, models
    from treegraft_lab.bench import hardware

    hw = hardware()
    print(f"{hw['cpu']} (CPU flags {hw['cpu_isa']}; {torch.get_num_threads()} torch threads), "
          f"{args.context} cached tokens, medians of {args.repeats}, ms")
    print("| dtype, path | " + " | ".join(map(str, SIZES)) + " | 64 / 1 | tree == plain |")
    print("|---|" + "---|" * (len(SIZES) + 2))
    for dtype in ("float32", "bfloat16"):
        pair = models.load_pair(args.pair, dtype=dtype, require_mid=False)
        same = identity(pair, args.identity) if args.identity else "not run"
        for label, packed in (("packed", True), ("stock", False)):
            if packed and not cpu_path.installed(pair.target):
                print(f"| {dtype}, packed | {cpu_path.supported(pair.target)} |")
                continue
            if packed:
                c = curve(pair.target, args.context, args.repeats)
            else:
                with cpu_path.disabled(pair.target):
                    c = curve(pair.target, args.context, args.repeats)
            print(f"| {dtype}, {label} | " + " | ".join(f"{c[n]:.1f}" for n in SIZES)
                  + f" | {c[64] / c[1]:.2f}x | {same if packed else '–'} |", flush=True)
        del pair
    stock = models.load_pair(args.pair, dtype="float32", require_mid=False, cpu_path=False)
    q = torch.ao.quantization.quantize_dynamic(stock.target, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    c = curve(q, args.context, args.repeats)
    print("| int8 dynamic, stock | " + " | ".join(f"{c[n]:.1f}" for n in SIZES) + f" | {c[64] / c[1]:.2f}x | another model |")


if __name__ == "__main__":
    main()
