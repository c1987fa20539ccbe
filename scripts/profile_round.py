"""Where the time of a decoding round goes: cProfile over `generate`, grouped into named parts.

    .venv/bin/python scripts/profile_round.py --schedule 10101 --budget 63 --prompts 2

Prints a markdown table: model forwards (target verification, mid drafter, prefill) against the
Python work of a round (n-gram lookups, tree bookkeeping, pruning, masks, acceptance, KV
surgery, scheduler), as seconds and shares of `generate`'s wall time, plus the top torch ops
of the forwards with `--ops` (torch.profiler). Numbers are only meaningful on an idle machine.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time


def parts():
    """(label, function) for every part of a round; times are the functions' cumulative times.

    "target tree forward" is `TargetVerifier.forward_tree` (its mask building included); "mid
    drafter forward" is every `kv.masked_forward` minus the target's (`part_times` subtracts).
    """
    from treegraft_lab import drafters, graft, kv, tree, verify
    from treegraft_lab.schedule import signals

    return [
        ("target tree forward", verify.TargetVerifier.forward_tree),
        ("mid drafter forward", kv.masked_forward),
        ("prefill (both models)", kv.prefill),
        ("n-gram propose", drafters.NgramDrafter.propose),
        ("mid propose (top-k over rows)", drafters.ModelDrafter.propose),
        ("mid score bookkeeping (excl. forward)", drafters.ModelDrafter.score),
        ("ancestor masks", tree.DraftTree.ancestor_matrix),
        ("budget pruning", tree.DraftTree.prune),
        ("grafting", graft.graft),
        ("candidate pool + to_forward", graft.candidate_pool),
        ("top-W selection", graft.top_by_score),
        ("greedy acceptance", verify.accept_greedy),
        ("KV keep (commit)", kv.keep),
        ("path-score refresh", tree.DraftTree.refresh_scores),
        ("scheduler signals", signals.compute_signals),
        ("n-gram index extend", drafters.NgramIndex.extend),
    ]


def part_times(stats: pstats.Stats) -> dict[str, float]:
    """Cumulative seconds of each part (a function, optionally only under one caller)."""
    import inspect

    table = parts()
    out = dict.fromkeys((label for label, _ in table), 0.0)
    for (file, line, name), (_, _, _, ct, _) in stats.stats.items():
        for label, fn in table:
            code = inspect.unwrap(fn).__code__
            if (file, line, name) == (code.co_filename, code.co_firstlineno, code.co_name):
                out[label] += ct
    out["mid drafter forward"] -= out["target tree forward"]
    out["mid score bookkeeping (excl. forward)"] -= out["mid drafter forward"]
    out["candidate pool + to_forward"] += sum(v[3] for (f, _, n), v in stats.stats.items()
                                              if n == "to_forward" and f.endswith("graft.py"))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", default="smollm2-pocket")
    p.add_argument("--schedule", default="10101")
    p.add_argument("--budget", default="63")
    p.add_argument("--prompts", type=int, default=2, help="first eval prompts of the code and qa categories, each")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--ops", action="store_true", help="also list the top torch ops (torch.profiler)")
    a = p.parse_args(argv)

    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.models import load_pair
    from treegraft_lab.prompts import load_prompts

    pair = load_pair(a.pair, require_mid=a.schedule != "small")
    budget = a.budget if a.budget == "auto" else int(a.budget)
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule=a.schedule, budget=budget))
    qs = load_prompts("treegraft-suite", split="eval", categories=["code", "qa"], per_category=a.prompts)
    prompts = [q["turns"][0] for q in qs]
    dec.generate(prompts[0], max_new_tokens=8)  # warm-up
    prof, rounds, tokens = cProfile.Profile(), 0, 0
    t = time.perf_counter()
    prof.enable()
    for text in prompts:
        gen = dec.generate(text, max_new_tokens=a.max_new_tokens)
        rounds, tokens = rounds + gen.stats["rounds"], tokens + gen.stats["new_tokens"]
    prof.disable()
    wall = time.perf_counter() - t
    times = part_times(pstats.Stats(prof))
    print(f"schedule {a.schedule}, budget {dec.budget}, {len(prompts)} prompts, {tokens} tokens, {rounds} rounds, "
          f"{wall:.2f} s ({tokens / wall:.1f} tokens/s, {1000 * wall / rounds:.1f} ms/round; cProfile adds overhead), "
          f"{pair.dtype}, load {os.getloadavg()[0]:.2f}\n")
    print("| part | s | share of wall | ms/round |\n|---|---|---|---|")
    for label, s in times.items():
        print(f"| {label} | {s:.3f} | {100 * s / wall:.1f}% | {1000 * s / rounds:.2f} |")
    fwd = times["target tree forward"] + times["mid drafter forward"] + times["prefill (both models)"]
    print(f"| **all model forwards** | {fwd:.3f} | {100 * fwd / wall:.1f}% | {1000 * fwd / rounds:.2f} |")
    print(f"| **everything else** | {wall - fwd:.3f} | {100 * (wall - fwd) / wall:.1f}% | {1000 * (wall - fwd) / rounds:.2f} |")
    if a.ops:
        import torch

        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as tp:
            dec.generate(prompts[0], max_new_tokens=a.max_new_tokens)
        print("\n" + tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    return 0


if __name__ == "__main__":
    sys.exit(main())
