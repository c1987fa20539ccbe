"""The decoder's behaviour, pinned: a fixed set of runs must give the tokens, rounds, per-round
schedule, accepted tokens, kept and live nodes and modelled ms recorded in tests/golden/.

Every run is priced by a committed profile (the named a100-paper, or tests/golden's measured CPU
profile standing in for this device's "wall" clock), so the snapshot is the same on any machine.
Each run spells out its whole config: a change of `DecodeConfig`'s defaults does not move it.

    python tests/test_behaviour_snapshot.py    # rewrite the golden file (after an intended change)
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path

import pytest

from treegraft_lab import DecodeConfig, TreeGraftDecoder, load_pair
from treegraft_lab.tiny import tiny_pair

GOLDEN = Path(__file__).resolve().parent / "golden"
SNAPSHOT = GOLDEN / "behaviour_snapshot.json"
PINNED = str(GOLDEN / "cpu-float32-profile.json")  # "wall" on any machine: a CPU, float32 (scheduler class cpu-float32)
TOKENS = 16
TINY_PROMPT = [3, 17, 5, 9, 3, 17, 5, 9, 3, 17, 22, 41, 7]
POCKET_PROMPT = "Write a Python function that returns the sum of the squares of a list of numbers."

# every tree and drafting field, written out (not read from the defaults or presets this snapshot guards)
BASE = dict(depth=5, width=10, children=10, budget=63, max_nodes=None, ngram_max=5, ngram_min=1, expansion="per_parent",
            ngram_chain=True, chain_len=None, lookback=5, fuse_prompt=True, stop_on_relax_zero=False,
            first_step_fallback=False, matcher="index", frontier_order="score", mid_scores_all=False, recycle_below=2,
            temperature=0.0, expanded_graft=True, non_destructive=True, call_budget=None, mid_in_first_round=False, seed=0)
FULL = dict(BASE, lookup=0, lookup_longest=False, chain_frontier=False, min_step_p=0.0, small="ngram")
LOOKUP = dict(BASE, lookup=16, lookup_longest=True, chain_frontier=True, min_step_p=0.1, small="ngram+recycling")
RELEASE = dict(FULL, fuse_prompt=False, stop_on_relax_zero=True, first_step_fallback=True, matcher="release",
               frontier_order="match", mid_scores_all=True)
GROWTHS = {"full": FULL, "lookup": LOOKUP, "release": RELEASE}

# (pair, growth, schedule, clock, prune); adaptive reads the artifact trained for its clock, pruning and growth
RUNS = [("tiny", "full", s, c, "topk") for s in ("small", "10101") for c in ("pinned", "a100-paper")]
RUNS += [("tiny", "lookup", "10101", "a100-paper", "topk"), ("pocket", "full", "small", "pinned", "topk"),
         ("pocket", "full", "10101", "a100-paper", "topk"), ("pocket", "full", "adaptive", "pinned", "value"),
         ("pocket", "lookup", "10101", "pinned", "topk"), ("pocket", "lookup", "adaptive", "a100-paper", "topk"),
         ("pocket", "release", "10101", "a100-paper", "topk")]


@cache
def pair_and_prompt(name: str):
    if name == "tiny":
        return tiny_pair("llama", vocab=64, scale=4.0), TINY_PROMPT
    return load_pair("smollm2-pocket", dtype="float32"), POCKET_PROMPT


def key(run: tuple) -> str:
    return " ".join(run)


def snapshot(run: tuple) -> dict:
    """What decoding `run` did: its tokens and, per round, schedule, accepted, kept, nodes and modelled ms."""
    name, growth, schedule, clock, prune = run
    pair, prompt = pair_and_prompt(name)
    cfg = DecodeConfig(**GROWTHS[growth], schedule=schedule, clock=PINNED if clock == "pinned" else clock, prune=prune)
    gen = TreeGraftDecoder(pair, cfg).generate(prompt, max_new_tokens=TOKENS)
    return {"tokens": gen.token_ids, "modelled_ms": round(gen.stats["modelled_ms"], 6),
            "rounds": [{"schedule": r.schedule, "accepted": r.accepted, "kept": r.kept, "nodes": r.nodes,
                        "modelled_ms": round(r.modelled_ms, 6)} for r in gen.rounds]}


@pytest.mark.parametrize("run", RUNS, ids=key)
def test_decoding_matches_the_behaviour_snapshot(run):
    golden = json.loads(SNAPSHOT.read_text())
    assert snapshot(run) == golden[key(run)]


def test_the_snapshot_holds_every_run_and_no_other():
    assert sorted(json.loads(SNAPSHOT.read_text())) == sorted(map(key, RUNS))


if __name__ == "__main__":
    out = {}
    for run in RUNS:
        out[key(run)] = snapshot(run)
        print(f"{key(run):40s} {len(out[key(run)]['rounds']):3d} rounds", file=sys.stderr, flush=True)
    SNAPSHOT.write_text(json.dumps(out, indent=1) + "\n")
