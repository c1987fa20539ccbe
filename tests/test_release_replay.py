"""Growth "release" replays the authors' release round for round.

data/reference holds what the release (commit f53e3a8, its own evaluator, float32 on the CPU) did
on this pair and the first two eval prompts of each category: every verification round's accepted
draft tokens, the mid calls by step and its reselection statistics. The release preset decodes the
same prompts here, counted the release's way: the prompt's own forward gives the token that roots
round 1, and a generation stops after the round that reaches 64 new tokens (our output holds the
prefill's token too, hence 65).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference" / "release-f53e3a8-smollm2-pocket-eval12.json"
SCHEDULES = {"10101": "10101", "all-small": "small"}


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(REFERENCE.read_text())


@pytest.fixture(scope="module")
def replay(reference, smollm2_dir):
    """replay(schedule) -> (reference rows, our generations, the recorded Run): every prompt of the
    schedule decoded now (once per test module)."""
    from treegraft_lab import DecodeConfig, TreeGraftDecoder, load_pair, load_prompts, record
    from treegraft_lab.config import GROWTHS
    from treegraft_lab.prompting import encode_prompt

    pair = load_pair(dtype="float32", device="cpu")
    prompts = {q["question_id"]: q for q in load_prompts(per_category=2)}
    done: dict = {}

    def decode(name: str):
        if name not in done:
            rows = [r for r in reference["rows"] if r["schedule"] == name]
            config = DecodeConfig(schedule=SCHEDULES[name], clock="a100-paper", **GROWTHS["release"])
            dec = TreeGraftDecoder(pair, config)
            gens = []
            with record(dec, snapshots=name == "10101") as rec:  # the statistics read 10101's trees
                for row in rows:
                    ids = encode_prompt(pair.tokenizer, prompts[row["question_id"]]["turns"][0])
                    assert len(ids) == row["prompt_len"], row["question_id"]
                    gens.append(dec.generate(ids, max_new_tokens=65))
            done[name] = (rows, gens, rec.to_run())
        return done[name]

    return decode


def first_difference(ours: list[int], theirs: list[int]) -> int | None:
    """The first round (0-based) whose accepted count differs, or where one run has ended."""
    return next((i for i in range(max(len(ours), len(theirs)))
                 if i >= len(ours) or i >= len(theirs) or ours[i] != theirs[i]), None)


def close(ours: float, theirs: float, rel: float = 0.01) -> bool:
    return abs(ours - theirs) <= rel * abs(theirs)


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_the_release_preset_accepts_what_the_release_accepted_round_for_round(replay, schedule):
    rows, gens, _ = replay(schedule)
    differ = []
    for row, gen in zip(rows, gens):
        ours = [r.accepted for r in gen.rounds]
        i = first_difference(ours, row["accept_lengths"])
        if i is not None:
            differ.append(f"{row['question_id']}: first differing round {i + 1}: ours {ours[i:i + 3]} "
                          f"({len(ours)} rounds), release {row['accept_lengths'][i:i + 3]} ({len(row['accept_lengths'])} rounds)")
    print(f"\n{schedule}: {len(rows) - len(differ)}/{len(rows)} questions identical round for round", *differ, sep="\n  ")
    assert len(rows) - len(differ) >= len(rows) - 1, differ

    for row, gen in zip(rows, gens):  # lossless: the release's output (plain greedy), token for token
        n = min(len(gen.token_ids), len(row["output_ids"]))
        assert gen.token_ids[:n] == row["output_ids"][:n], row["question_id"]

    forwards = sum(len(g.rounds) for g in gens)
    tokens = sum(r.accepted + 1 for g in gens for r in g.rounds)  # the release's new_token: each round's root + accepted
    assert close(forwards, sum(r["verify_forwards"] for r in rows)), forwards
    assert close(tokens, sum(r["new_tokens"] for r in rows)), tokens
    depth = len(rows[0]["middle_correction_layer_freq"])
    calls = [sum(r.schedule[k:k + 1] == "1" for g in gens for r in g.rounds) for k in range(depth)]
    theirs = [sum(r["middle_correction_layer_freq"][k] for r in rows) for k in range(depth)]
    assert all(close(a, b) for a, b in zip(calls, theirs)), (calls, theirs)


def test_the_release_statistics_on_release_trees_are_the_releases_own(replay, reference):
    from treegraft_lab.viz.stats import release_statistics

    _, _, run = replay("10101")
    stats = release_statistics(run)["value"]
    theirs = reference["summary"]["10101"]
    print("\n", release_statistics(run).to_string())
    assert abs(stats["reselected share, all mid calls"] - theirs["reselect_from_past_layer_ratio_pooled_over_calls"]) < 0.01
    assert abs(stats["reselected share, mid calls after step 1"] - theirs["reselect_from_past_layer_ratio_calls_after_step1"]) < 0.01
    assert close(stats["A, release count"], theirs["A_release_pooled"])
    for k, calls in theirs["reselect_by_layer"].items():
        assert close(stats[f"mid calls at step {k}"], calls["calls"]), k
