"""One mid-drafter call with the sub-vocabulary fast path against the full-vocabulary path.

    .venv/bin/python scripts/mid_call_speed.py --reps 41 --threads 1

Both drafters share the pair's mid model and score the same tree (the root and W children, over a
real prompt's cached context) and propose the top-W, alternating at every repetition. Prints the
median ms of score + propose for each path and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", default="smollm2-pocket")
    p.add_argument("--reps", type=int, default=41)
    p.add_argument("--width", type=int, default=10)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args(argv)

    import torch

    from treegraft_lab.drafters import ModelDrafter
    from treegraft_lab.models import load_pair
    from treegraft_lab.prompting import encode_prompt
    from treegraft_lab.prompts import load_prompts
    from treegraft_lab.tree import SMALL, DraftTree

    if a.threads:
        torch.set_num_threads(a.threads)
    pair = load_pair(a.pair)
    prompt = load_prompts("treegraft-suite", split="eval", categories=["summarization"], per_category=1)[0]
    ids = encode_prompt(pair.tokenizer, prompt["turns"][0])
    drafters = {"sub-vocabulary": ModelDrafter(pair.mid), "full vocabulary": ModelDrafter(pair.mid, sub_vocab=False)}
    for d in drafters.values():
        d.prefill(ids[:-1])
    times: dict[str, list[float]] = {k: [] for k in drafters}

    def call(d: ModelDrafter) -> float:
        tree = DraftTree.start(ids[-1])
        for i in range(a.width):
            tree.add_child(0, 1000 + i, -1.0, SMALL, 1, 1)
        t = time.perf_counter()
        d.score(tree, list(range(len(tree))))
        d.propose(tree, list(range(1, len(tree))), a.width)
        ms = 1000 * (time.perf_counter() - t)
        d.rollback()
        return ms

    with torch.inference_mode():
        for d in drafters.values():
            call(d)  # warm-up
        for _ in range(a.reps):
            for name, d in drafters.items():
                times[name].append(call(d))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"{k:<16} {v:7.2f} ms (median of {a.reps}; context {len(ids) - 1} tokens, {a.width + 1} nodes, "
              f"{torch.get_num_threads()} thread(s))")
    print(f"sub / full: {med['sub-vocabulary'] / med['full vocabulary']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
