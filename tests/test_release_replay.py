"""Growth "release" replays the authors' release round for round.

data/reference holds what the release (commit f53e3a8, its own evaluator, float32 on the CPU) did
on this pair and the first two eval prompts of each category: every verification round's accepted
draft tokens, the mid calls by step and its reselection statistics. The release preset decodes the
same prompts here, counted the release's way: the prompt's own forward gives the token that roots
round 1, and a generation stops after the round that reaches 64 new tokens (our output holds the
prefill's token too, hence 65).

What is under test is the growth: which trees the drafters grow. Under greedy acceptance a tree's
verdict is the longest root path that spells the target's greedy continuation, so the 24 replays
answer each tree from that continuation (`ContinuationVerifier`) instead of a 63-row forward, which
keeps the file near a minute. The continuation is the real target's: the release's output,
forwarded behind the prompt, must be the target's argmax at every position (a short greedy
generation extends it should a tree reach past the release's last round). Everything the drafters read stays real: the
target's prompt forward (the release's n-gram scores), the n-gram index, the pocket drafter's
forwards. `test_the_real_tree_forward_gives_the_verdicts_of_the_continuation` decodes one question
per schedule with the real tree forward and asserts the same rounds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference" / "release-f53e3a8-smollm2-pocket-eval12.json"
SCHEDULES = {"10101": "10101", "all-small": "small"}


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(REFERENCE.read_text())


@pytest.fixture(scope="module")
def pair(smollm2_dir):
    from treegraft_lab import load_pair

    return load_pair(dtype="float32", device="cpu")


@pytest.fixture(scope="module")
def prompt_ids(pair, reference) -> dict[str, list[int]]:
    from treegraft_lab import load_prompts
    from treegraft_lab.prompting import encode_prompt

    prompts = {q["question_id"]: q for q in load_prompts(per_category=2)}
    out = {}
    for row in reference["rows"]:
        ids = encode_prompt(pair.tokenizer, prompts[row["question_id"]]["turns"][0])
        assert len(ids) == row["prompt_len"], row["question_id"]
        out[row["question_id"]] = ids
    return out


@pytest.fixture(scope="module")
def continuations(pair, reference, prompt_ids) -> dict[str, tuple[list[int], tuple]]:
    """Per question: (the prompt and the target's greedy continuation, the prompt forward's
    `kv.prefill` rows). One real prefill of the prompt (the rows the release's matcher reads, shared
    by both schedules), then the release's output forwarded behind it: the output must be the
    target's argmax at every position, and the last position gives one token more."""
    from treegraft_lab import kv
    from treegraft_lab.config import GROWTHS

    topk = release_config("10101").children
    assert GROWTHS["release"]["matcher"] == "release"
    out = {}
    model = pair.target
    for row in reference["rows"]:
        qid, ids = row["question_id"], prompt_ids[row["question_id"]]
        if qid in out:
            continue
        cache = kv.new_cache(model)
        rows = kv.prefill(model, cache, ids, topk)
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([row["output_ids"]]), use_cache=True, **kv.forward_kwargs(model, cache)).logits[0]
        argmax = [int(rows[2].argmax()), *logits.argmax(-1).tolist()]
        assert argmax[:-1] == row["output_ids"], f"{qid}: the release's output is not the target's greedy argmax"
        out[qid] = (ids + argmax, rows)
    return out


def continuation_decoder(pair, config, continuations):
    """A TreeGraftDecoder whose target answers every tree from the greedy continuation of the prompt
    being decoded, and serves the real prompt forward's rows computed once per question."""
    from treegraft_lab import TreeGraftDecoder
    from treegraft_lab.verify import TargetVerifier

    class ContinuationVerifier(TargetVerifier):
        def __init__(self, model, seq: list[int], rows: tuple) -> None:
            super().__init__(model)
            self.seq, self.rows = seq, rows

        def prefill(self, ids, fuse=True, topk=0):
            assert not fuse and topk == len(self.rows[0][0]) and ids == self.seq[:len(ids)]
            self.cached, self.pending = len(ids), []
            return self.rows

        def forward_tree(self, tree, kept):
            root = self.cached  # the root's position in the sequence
            logits = torch.zeros(len(kept), self.model.config.vocab_size, dtype=torch.uint8)  # argmax reads it at half the cost
            on = {0: self.seq[root] == tree.tokens[0]}
            for i, v in enumerate(kept):
                if v:
                    on[v] = on[tree.parent[v]] and tree.tokens[v] == self.seq[root + tree.depth[v]]
                if on[v]:  # off the continuation a row is never read: acceptance stops at its parent
                    nxt = root + tree.depth[v] + 1
                    if nxt >= len(self.seq):  # past the release's last round: greedy a few tokens more
                        x = torch.tensor([self.seq])
                        self.seq[:] = self.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=8,
                                                          do_sample=False, pad_token_id=0)[0].tolist()
                    logits[i, self.seq[nxt]] = 1
            return logits

        def commit(self, kept, path) -> None:
            self.cached += len(path)

        def rollback(self) -> None:
            pass

    class ContinuationDecoder(TreeGraftDecoder):
        question: str = ""

        def make_verifier(self):
            return ContinuationVerifier(self.pair.target, *continuations[self.question])

    return ContinuationDecoder(pair, config)


def release_config(name: str):
    from treegraft_lab.config import preset

    return preset("release", schedule=SCHEDULES[name], clock="a100-paper")


@pytest.fixture(scope="module")
def replay(reference, pair, prompt_ids, continuations):
    """replay(schedule) -> (reference rows, our generations, the recorded Run): every prompt of the
    schedule decoded now (once per test module)."""
    from treegraft_lab import record

    done: dict = {}

    def decode(name: str):
        if name not in done:
            rows = [r for r in reference["rows"] if r["schedule"] == name]
            dec = continuation_decoder(pair, release_config(name), continuations)
            gens = []
            with record(dec, snapshots=name == "10101") as rec:  # the statistics read 10101's trees
                for row in rows:
                    dec.question = row["question_id"]
                    gens.append(dec.generate(prompt_ids[row["question_id"]], max_new_tokens=65))
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


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_the_real_tree_forward_gives_the_verdicts_of_the_continuation(replay, pair, prompt_ids, schedule):
    """The shortest question of the schedule, decoded with the target's real 63-row tree forwards:
    the same rounds (accepted, schedule, tree sizes) and tokens as the continuation's replay."""
    from treegraft_lab import TreeGraftDecoder

    rows, gens, _ = replay(schedule)
    i = min(range(len(rows)), key=lambda j: len(gens[j].rounds))
    real = TreeGraftDecoder(pair, release_config(schedule)).generate(prompt_ids[rows[i]["question_id"]], max_new_tokens=65)
    def fields(g):
        return [(r.accepted, r.schedule, r.mid_calls, r.nodes, r.kept) for r in g.rounds]

    assert fields(real) == fields(gens[i]), rows[i]["question_id"]
    assert real.token_ids == gens[i].token_ids
