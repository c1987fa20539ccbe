"""`treegraft-lab demo`: one prompt, plain decoding against TreeGraft and HF prompt lookup.

Prints this device's cost profile and what it implies, then a short table (tokens/s, speedup,
tokens per round, lossless) measured here with the settings the profile recommends, and the same
methods modelled on the paper's A100 profile (`a100-paper`, labelled modelled).
"""

from __future__ import annotations

import argparse
import time

from treegraft_lab.errors import TreeGraftError

DEFAULT_PROMPT = (
    "Write a Python function `fib(n)` that returns the n-th Fibonacci number iteratively, "
    "with a docstring and two examples."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pair", default="smollm2-pocket", help="a registered pair name")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="one user message")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate")


def _load(name: str):
    """The pair; without its mid drafter, said so, when the mid cannot be found."""
    import warnings

    from treegraft_lab.models import load_pair

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pair = load_pair(name, require_mid=False)
    for w in caught:
        if "loading the target alone" in str(w.message):
            print(f"note: {w.message}")
    return pair


METHODS = {"ar": "plain decoding", "small": "TreeGraft all-small", "adaptive": "TreeGraft adaptive",
           "10101": "TreeGraft fixed 10101", "hf-pld": "HF prompt lookup"}


def recommended(prof) -> dict:
    """Settings a device profile recommends: value pruning where every verified node costs."""
    steep = prof.target_ms(64) / prof.target_ms(1) >= 1.3
    return {"prune": "value" if steep else "topk", "budget": 63}


def _table(result, clock: str) -> list[str]:
    s = result.summary[(result.summary.clock == clock) & (result.summary.category == "overall")].set_index("method")
    rec = result.records[result.records.clock == clock]
    rows = [f"  {'method':<24}{'tokens/s':>9}{'speedup':>9}{'tokens/round':>14}  lossless"]
    for m, label in METHODS.items():
        if m not in s.index:
            continue
        r = s.loc[m]
        tpr = "-" if r.tokens_per_round != r.tokens_per_round else f"{r.tokens_per_round:.2f}"
        lossless = "yes" if bool(rec[rec.method == m].match.all()) else "NO"
        rows.append(f"  {label:<24}{r.tokens_per_s:>9.1f}{r.speedup:>8.2f}x{tpr:>14}  {lossless}")
    return rows


def run(args: argparse.Namespace) -> int:
    if args.max_new_tokens < 1:
        raise TreeGraftError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    t0 = time.perf_counter()
    pair = _load(args.pair)
    mid = type(pair.mid).__name__ if pair.mid is not None else "none"
    print(f"pair {pair.name}: target {pair.target_id}, mid {mid}; {pair.device}, "
          f"{str(pair.dtype).removeprefix('torch.')}; loaded in {time.perf_counter() - t0:.1f} s")  # fmt: skip
    print(f"dtype {pair.dtype_reason}; forward path: {pair.forward_path}")
    from treegraft_lab import bench, costs, measure
    from treegraft_lab.commands.profile import implication

    prof = measure.for_pair(pair)
    rec = recommended(prof)
    print(f"device profile {prof.name} ({prof.device}; {prof.source}):\n  {implication(prof)}")
    print(f"  recommended here: prune={rec['prune']}, budget {rec['budget']} (at most; value pruning sizes each round)")
    print(f"prompt: {args.prompt}\n")
    methods = list(METHODS) if pair.mid is not None else ["ar", "small", "hf-pld"]
    if pair.mid is None:
        print("note: no mid drafter, so only the n-gram drafter's methods run\n")
    result = bench.run_bench(pair, [{"question_id": "demo", "category": "demo", "turns": [args.prompt]}], methods,
                             args.max_new_tokens, budget=rec["budget"], prune=rec["prune"], warmup_tokens=8,
                             progress=False, model_on=["a100-paper"], prune_modelled="topk")
    n = args.max_new_tokens
    print(f"Measured on this machine ({prof.device}; {n} new tokens, greedy, prune={rec['prune']}):")
    print("\n".join(_table(result, "wall")))
    a100 = costs.load("a100-paper")
    print("\nModelled on a100-paper (the paper's A100 step costs, not measured: data/profiles/README.md; the same "
          "models run, every decision and every time on that profile; prune=topk, budget 63):")
    print("\n".join(_table(result, "a100-paper")))
    print(f"  ({implication(a100)})")
    for k, v in result.skipped.items():
        print(f"skipped {k}: {v}")
    print(f"\n(speedup: tokens/s over plain decoding on the same prompt; lossless: output identical to plain decoding; "
          f"{time.perf_counter() - t0:.0f} s in all)")
    return 0
