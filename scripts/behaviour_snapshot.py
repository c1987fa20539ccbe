"""Decode a fixed set of runs and write what they did to JSON, to compare two versions of the code.

The set: the tiny random pair (schedules small and 10101) and the offline pair smollm2-pocket
(small, 10101 and adaptive), each under the wall clock (this device's cached profile) and the
a100-paper profile; one short prompt each, 24 new tokens. Per run it writes the tokens, and per
round the schedule, accepted tokens, kept and live nodes and the modelled ms.

    python scripts/behaviour_snapshot.py OUT.json
    python -c "import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); print(a==b)" A.json B.json
"""

from __future__ import annotations

import inspect
import json
import sys
from dataclasses import replace

from treegraft_lab import DecodeConfig, TreeGraftDecoder, load_pair

try:
    from treegraft_lab.tiny import tiny_pair
except ImportError:  # an older layout kept the tiny models with the tests
    sys.path.insert(0, "tests")
    from tiny import tiny_pair

TOKENS = 24
TINY_PROMPT = [3, 17, 5, 9, 3, 17, 5, 9, 3, 17, 22, 41, 7]
POCKET_PROMPT = "Write a Python function that returns the sum of the squares of a list of numbers."
# (pair, schedule, clock, prune): adaptive reads the artifact trained for its profile and pruning
RUNS = [(p, s, c, "topk") for p in ("tiny", "pocket") for s in ("small", "10101") for c in ("wall", "a100-paper")]
RUNS += [("pocket", "adaptive", "a100-paper", "topk"), ("pocket32", "adaptive", "wall", "value")]  # CPU scheduler: float32


def decoder(pair, schedule: str, clock: str, prune: str) -> TreeGraftDecoder:
    """The decoder of one run, its profile resolved here, at the edge, as this version of the code takes it."""
    try:
        from treegraft_lab.measure import resolve
    except ImportError:  # an older layout: the decoder resolved (and measured) the clock itself
        return TreeGraftDecoder(pair, DecodeConfig(schedule=schedule, clock=clock, prune=prune, seed=0))
    cfg = DecodeConfig(schedule=schedule, clock=clock, prune=prune, seed=0)
    if "profile" in inspect.signature(TreeGraftDecoder).parameters:
        return TreeGraftDecoder(pair, cfg, profile=resolve(clock, pair))
    return TreeGraftDecoder(pair, replace(cfg, clock=resolve(clock, pair)))  # an older layout: the profile in the config


def snapshot(pair, prompt, schedule: str, clock: str, prune: str) -> dict:
    gen = decoder(pair, schedule, clock, prune).generate(prompt, max_new_tokens=TOKENS)
    return {"tokens": gen.token_ids, "modelled_ms": round(gen.stats["modelled_ms"], 6),
            "rounds": [{"schedule": r.schedule, "accepted": r.accepted, "kept": r.kept, "nodes": r.nodes,
                        "modelled_ms": round(r.modelled_ms, 6)} for r in gen.rounds]}


def main(out: str) -> None:
    pairs = {"tiny": (tiny_pair("llama", vocab=64, scale=4.0), TINY_PROMPT),
             "pocket": (load_pair("smollm2-pocket"), POCKET_PROMPT),
             "pocket32": (load_pair("smollm2-pocket", dtype="float32"), POCKET_PROMPT)}
    result = {}
    for name, schedule, clock, prune in RUNS:
        pair, prompt = pairs[name]
        key = f"{name} {schedule} {clock} {prune}"
        result[key] = snapshot(pair, prompt, schedule, clock, prune)
        r = result[key]
        print(f"{key:36s} {len(r['rounds']):3d} rounds  {r['modelled_ms']:9.3f} modelled ms", flush=True)
        with open(out, "w") as f:  # after every run: a failure keeps what came before
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/behaviour_snapshot.py OUT.json")
    main(sys.argv[1])
