"""Wall time of the oracle schedule: shared-prefix replay (default) against 2^D full rounds.

    .venv/bin/python scripts/oracle_speed.py --prompts 2 --max-new-tokens 32 --threads 1

Decodes the same eval prompts with both oracles, interleaved, and prints wall seconds per round
(replays included), the mean accepted tokens per round and whether both outputs equal each other.
"""

from __future__ import annotations

import argparse
import json
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", default="smollm2-pocket")
    p.add_argument("--prompts", type=int, default=2, help="first eval prompts of the code and qa categories, each")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--dtype", default="auto", help="float32 to check that both outputs are identical")
    a = p.parse_args(argv)

    import torch

    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.models import load_pair
    from treegraft_lab.prompts import load_prompts

    if a.threads:
        torch.set_num_threads(a.threads)
    pair = load_pair(a.pair, dtype=a.dtype)
    prompts = load_prompts("treegraft-suite", split="eval", categories=["code", "qa"], per_category=a.prompts)
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule="oracle"))
    full = TreeGraftDecoder(pair, DecodeConfig(schedule="oracle"))
    full._oracle_round = full._oracle_full_rounds  # the brute-force oracle on the same decoder class
    res = {"shared-prefix replay": [], "2^D full rounds": []}
    same = True
    for q in prompts:
        outs = []
        for name, d in (("shared-prefix replay", dec), ("2^D full rounds", full)):
            t = time.perf_counter()
            g = d.generate(q["turns"][0], max_new_tokens=a.max_new_tokens)
            res[name].append((time.perf_counter() - t, len(g.rounds), g.stats["accepted_per_round"]))
            outs.append(g.token_ids)
        same &= outs[0] == outs[1]
    table = {name: {"s_per_round": sum(r[0] for r in rs) / sum(r[1] for r in rs),
                    "accepted_per_round": sum(r[2] for r in rs) / len(rs)} for name, rs in res.items()}
    a_, b_ = table["2^D full rounds"]["s_per_round"], table["shared-prefix replay"]["s_per_round"]
    print(json.dumps({**table, "speedup": a_ / b_, "outputs_equal": same, "threads": torch.get_num_threads(),
                      "prompts": len(prompts), "max_new_tokens": a.max_new_tokens, "dtype": str(pair.target.dtype)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
