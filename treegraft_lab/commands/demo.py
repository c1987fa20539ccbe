"""`treegraft-lab demo`: decode one prompt with TreeGraft and with plain decoding, compare them."""

from __future__ import annotations

import argparse
import time

from treegraft_lab.errors import TreeGraftError

DEFAULT_PROMPT = (
    "Write a Python function `fib(n)` that returns the n-th Fibonacci number iteratively, "
    "with a docstring and two examples."
)
SCHEDULE = "10101"  # the paper's fixed ablation schedule: mid drafter at steps 1, 3 and 5


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


def _plain_generate(pair, prompt: str, max_new_tokens: int) -> tuple[str, int, float]:
    """Greedy HF `generate` with the target: (text, new tokens, seconds)."""
    import torch

    msgs = [{"role": "user", "content": prompt}]
    enc = pair.tokenizer.apply_chat_template(
        msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True
    ).to(pair.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = pair.target.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
    wall = time.perf_counter() - t0
    new = out[0, enc["input_ids"].shape[1] :]
    return pair.tokenizer.decode(new, skip_special_tokens=True), len(new), wall


def run(args: argparse.Namespace) -> int:
    if args.max_new_tokens < 1:
        raise TreeGraftError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    t0 = time.perf_counter()
    pair = _load(args.pair)
    mid = type(pair.mid).__name__ if pair.mid is not None else "none"
    print(f"pair {pair.name}: target {pair.target_id}, mid {mid}; {pair.device}, "
          f"{str(pair.dtype).removeprefix('torch.')}; loaded in {time.perf_counter() - t0:.1f} s")  # fmt: skip
    print(f"dtype {pair.dtype_reason}; forward path: {pair.forward_path}")
    print(f"prompt: {args.prompt}\n")
    try:
        from treegraft_lab.baselines import autoregressive
        from treegraft_lab.config import DecodeConfig
        from treegraft_lab.decoder import TreeGraftDecoder
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("treegraft_lab"):
            raise
        print(f"note: the TreeGraft decoder is not available yet ({e.name}); "
              "plain greedy `generate` with the target instead\n")  # fmt: skip
        text, n, wall = _plain_generate(pair, args.prompt, args.max_new_tokens)
        print(f"plain generate: {n} tokens, {n / wall:.1f} tokens/s\n--- output ---\n{text}")
        return 0

    schedule = SCHEDULE if pair.mid is not None else "small"
    if pair.mid is None:
        print("note: no mid drafter, so TreeGraft drafts with the n-gram drafter alone\n")
    # budget="auto": a CPU pays for every verified node, so the budget comes from a measured cost curve
    decoder = TreeGraftDecoder(pair, DecodeConfig(schedule=schedule, budget="auto"))
    print(f"verification budget (auto, from this device's measured cost curve): {decoder.budget} nodes")
    decoder.generate(args.prompt, max_new_tokens=4)  # warm-up: first-call costs, calibration
    autoregressive(pair, args.prompt, max_new_tokens=4)
    tg = decoder.generate(args.prompt, max_new_tokens=args.max_new_tokens)
    ar = autoregressive(pair, args.prompt, max_new_tokens=args.max_new_tokens)

    s, a = tg.stats, ar.stats
    print(f"TreeGraft (schedule {schedule}): {len(tg.token_ids)} tokens, "
          f"{s['tokens_per_s']:.1f} tokens/s, {s['tokens_per_round']:.2f} tokens per round "
          f"over {s['rounds']} rounds")  # fmt: skip
    print(f"autoregressive:        {len(ar.token_ids)} tokens, {a['tokens_per_s']:.1f} tokens/s")
    if a["tokens_per_s"] > 0:
        print(f"speedup: {s['tokens_per_s'] / a['tokens_per_s']:.2f}x")
    if tg.token_ids == ar.token_ids:
        print("outputs match token for token (lossless)")
    else:
        at = next(
            (i for i, (x, y) in enumerate(zip(tg.token_ids, ar.token_ids)) if x != y),
            min(len(tg.token_ids), len(ar.token_ids)),
        )
        print(f"outputs differ from token {at} on. In {str(pair.dtype).removeprefix('torch.')}, a tree forward "
              "and a one-token forward round differently and can flip a near-tie; "
              "`treegraft-lab check-lossless --dtype float32` checks exactness")
        print(f"\n--- autoregressive output ---\n{ar.text}")
    print(f"\n--- TreeGraft output ---\n{tg.text}")
    return 0
