"""The training-free small drafters (Token Recycling, suffix automaton), their peers and the rules."""

from __future__ import annotations

import random

import pytest
import torch

from treegraft_lab.baselines import RecyclingDecoder, SuffixDecoder
from treegraft_lab.config import DecodeConfig, preset
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.hooks import record
from treegraft_lab.retrieval import TEMPLATE, RecyclingDrafter, SuffixAutomaton, SuffixDrafter
from treegraft_lab.schedule.rules import RulePolicy
from treegraft_lab.tiny import tiny_pair
from treegraft_lab.tree import DraftTree

CLOCK = "a100-paper"  # the costs decisions read: a named profile, the same on any machine
PROMPTS = [
    [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7],
    [1, 2, 3, 4, 10, 11, 12, 13, 14, 40, 41, 3, 4, 10],
    list(range(20, 50)),
]


def logits_with_order(vocab: int, order: list[int]) -> torch.Tensor:
    """One row whose top tokens are `order`, best first."""
    row = torch.zeros(vocab)
    for i, t in enumerate(order):
        row[t] = 10.0 - i
    return row


def test_a_verification_overwrites_the_rows_of_every_verified_token_with_the_targets_top_k():
    d = RecyclingDrafter(k=3)
    assert d.row(4) == []  # nothing before the target processed the token
    d.observe([4, 7], torch.stack([logits_with_order(20, [9, 1, 2]), logits_with_order(20, [3, 5, 6])]))
    assert d.row(4) == [9, 1, 2] and d.row(7) == [3, 5, 6] and d.row(9) == []
    d.observe([4], logits_with_order(20, [11, 12, 13])[None])  # the next round's verification overwrites
    assert d.row(4) == [11, 12, 13] and d.row(7) == [3, 5, 6]


def test_the_template_is_filled_breadth_first_from_the_matrix_starting_at_the_last_committed_token():
    d = RecyclingDrafter(k=8)
    rows = {1: [2, 3, 4, 5, 6, 7, 8, 9], 2: [10, 11, 12, 13, 14, 15, 16, 17], 10: [18, 19, 1, 2, 3, 4, 5, 6]}
    for tok, order in rows.items():
        d.observe([tok], logits_with_order(32, order)[None])
    tree = DraftTree.start(1)
    d.fill_template(tree)
    assert [tree.tokens[c] for c in tree.children[0].values()] == rows[1]  # depth 1: the root's whole row
    two = tree.children[0][2]
    assert [tree.tokens[c] for c in tree.children[two].values()][:3] == [10, 11, 12]  # rank-0 child, wide
    ten = tree.children[two][10]
    assert tree.tokens[tree.children[ten][18]] == 18  # depth 3 from token 10's row
    assert max(tree.depth) <= 6 and len(tree) - 1 <= len(TEMPLATE) == 80
    assert set(tree.source[1:]) == {"recycling"}


def longest_earlier_match(seq: list[int], ctx: list[int]) -> int:
    """Brute force: the longest suffix of ctx occurring in seq."""
    best = 0
    for n in range(1, len(ctx) + 1):
        suf = ctx[-n:]
        if any(seq[i : i + n] == suf for i in range(len(seq) - n + 1)):
            best = n
    return best


def test_recycled_candidates_are_drafted_only_where_the_n_gram_match_is_shorter_than_recycle_below():
    from treegraft_lab.retrieval import SmallDrafters

    ctx = [1, 2, 3, 4, 5, 9, 1, 2, 3, 4]  # "1 2 3 4" occurred before: a 4-token match, continuation 5
    rec = RecyclingDrafter(k=3)
    rec.observe([4, 7], torch.stack([logits_with_order(20, [6, 8, 11]), logits_with_order(20, [12, 13, 14])]))
    for below, drafted in ((2, []), (5, [6, 8, 11]), (0, [6, 8, 11])):  # 0: everywhere
        small = SmallDrafters(("ngram", "recycling"), recycling=rec, recycle_below=below)
        small.extend(ctx)
        tree = DraftTree.start(4)
        groups = dict(small.propose_each(tree, [0], width=10, children=10))
        assert [p[1] for p in groups["ngram"]][:1] == [5]
        assert [p[1] for p in groups["recycling"]] == drafted
    small = SmallDrafters(("ngram", "recycling"), recycling=rec, recycle_below=2)
    small.extend([1, 2, 3, 7])  # token 7 never occurred before its end: no n-gram match under the root
    groups = dict(small.propose_each(DraftTree.start(7), [0], width=10, children=10))
    assert groups["ngram"] == [] and [p[1] for p in groups["recycling"]] == [12, 13, 14]


def test_the_suffix_automaton_finds_the_longest_match_and_counts_occurrences():
    rng = random.Random(0)
    for _ in range(30):
        seq = [rng.randrange(4) for _ in range(rng.randrange(1, 60))]
        sam = SuffixAutomaton()
        sam.extend(seq)
        path = [rng.randrange(5) for _ in range(rng.randrange(0, 6))]
        _, n = sam.walk(sam.last, sam.length[sam.last], path)
        assert n == longest_earlier_match(seq, seq + path)
        state, n2, conts = sam.continuations(sam.last, sam.length[sam.last])
        for tok, cnt, _ in conts:  # occurrences of match + tok, counted by brute force
            pat = seq[len(seq) - n2 :] + [tok]
            assert cnt == sum(seq[i : i + len(pat)] == pat for i in range(len(seq) - len(pat) + 1))


def test_the_suffix_drafter_drafts_the_most_frequent_continuation_for_as_long_as_the_match():
    d = SuffixDrafter()
    d.extend([1, 2, 3, 4, 9, 1, 2, 3, 4, 8, 1, 2, 3, 5, 1, 2, 3])  # "1 2 3" -> 4 twice, 5 once
    tree = DraftTree.start(3)
    props = d.propose(tree, [0], width=10, children=10)
    assert [p[1] for p in props] == [4, 5]
    assert props[0][3] == 3  # matched 3 tokens
    assert abs(props[0][2] - torch.log(torch.tensor(2 / 3 * 3 / 4)).item()) < 1e-6
    assert [t[0] for t in props[0][4]] == [9, 1]  # 3 tokens drafted for a 3-token match, ties: either 9 or 8
    # a longer match drafts longer: after "... 4 8 1 2 3 5 1 2 3 4 8" the match is 5 tokens
    d2 = SuffixDrafter()
    d2.extend([7, 7, 1, 2, 3, 4, 8, 6, 6, 6, 6, 1, 2, 3, 4, 8])
    p2 = d2.propose(DraftTree.start(8), [0], 10, 10)
    assert p2[0][1] == 6 and len(p2[0][4]) == 4  # 5 tokens for a 5-token match, every 6 after it


def test_the_suffix_peer_grows_at_most_as_many_nodes_as_the_match_is_long():
    d = SuffixDrafter()
    d.extend([1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3])
    tree = DraftTree.start(3)
    added = d.grow(tree, budget=63)
    assert [tree.tokens[v] for v in added] == [4, 5, 1]  # 3-token match: 3 nodes, most likely first
    assert tree.parent[added[2]] == added[0]


@pytest.mark.parametrize("small", ["recycling", "suffix", "ngram+suffix", "ngram+recycling+suffix"])
def test_every_small_drafter_keeps_treegraft_lossless(small):
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    for ids in PROMPTS:
        ref = pair.target.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False, min_new_tokens=24)[0, len(ids):].tolist()
        for s in ("small", "10101"):
            for growth in ({}, {"lookup": 16, "chain_frontier": True, "min_step_p": 0.1}):
                g = TreeGraftDecoder(pair, DecodeConfig(schedule=s, small=small, clock=CLOCK, **growth)).generate(ids, max_new_tokens=24)
                assert g.token_ids == ref, (small, s, ids)


def test_the_recycling_and_suffix_peers_match_plain_greedy_decoding():
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    rec, suf = RecyclingDecoder(pair, clock=CLOCK), SuffixDecoder(pair, clock=CLOCK)
    for ids in PROMPTS:
        ref = pair.target.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False, min_new_tokens=24)[0, len(ids):].tolist()
        assert rec.generate(ids, max_new_tokens=24).token_ids == ref
        assert suf.generate(ids, max_new_tokens=24).token_ids == ref
    assert rec.small.recycling.matrix is not None and (rec.small.recycling.matrix >= 0).any()  # kept across prompts


def test_the_recorder_names_the_drafter_of_every_node():
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    dec = TreeGraftDecoder(pair, preset("full", schedule="10101", small="ngram+suffix", clock=CLOCK))
    with record(dec) as rec:
        dec.generate(PROMPTS[0], max_new_tokens=16)
    nodes = rec.to_run().tree
    names = set("+".join(nodes.source).split("+"))
    assert {"root", "mid", "ngram", "suffix"} <= names
    assert (nodes[nodes.creator == "mid"].source.str.contains("mid")).all()


@pytest.mark.parametrize("kwargs,words", [
    (dict(small="trie"), "small must be one of ngram, recycling, suffix"),
    (dict(small="ngram+ngram"), "combination"),
    (dict(schedule="rule:speed"), "the rules are rule:match, rule:score"),
    (dict(schedule="rule:match=x"), "a number >= 0"),
])
def test_bad_small_drafters_and_rules_get_one_clear_line(kwargs, words):
    with pytest.raises(TreeGraftError, match=words):
        DecodeConfig(**kwargs)


def test_rules_call_the_mid_drafter_as_their_values_say_and_stay_lossless():
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    ids = PROMPTS[1]
    ref = pair.target.generate(torch.tensor([ids]), max_new_tokens=20, do_sample=False, min_new_tokens=20)[0, len(ids):].tolist()
    calls = {}
    for s in ("rule:match=0", "rule:match=6", "rule:score=0", "rule:score=1.01", "rule:match=2", "rule:score=0.3"):
        g = TreeGraftDecoder(pair, DecodeConfig(schedule=s, clock=CLOCK)).generate(ids, max_new_tokens=20)
        assert g.token_ids == ref, s
        calls[s] = [r.mid_calls for r in g.rounds]
    assert sum(calls["rule:match=0"]) == sum(calls["rule:score=0"]) == 0  # never shorter than 0 / below 0
    # always, from the second round on (DecodeConfig.mid_in_first_round): a match is at most ngram_max = 5
    # tokens; a probability is below 1.01
    for s in ("rule:match=6", "rule:score=1.01"):
        assert calls[s][0] == 0 and set(calls[s][1:]) == {5} and len(calls[s]) > 1, s


def test_a_rule_without_a_fitted_value_is_refused_in_one_line():
    pair = tiny_pair("llama", vocab=64)
    with pytest.raises(TreeGraftError, match="no fitted rule:match"):
        RulePolicy.for_config(DecodeConfig(schedule="rule:match"), pair)


def test_the_tree_view_colours_and_lists_each_small_drafter():
    from treegraft_lab.viz.tree import SMALL_KINDS, tree_figure

    pair = tiny_pair("llama", vocab=64, scale=4.0)
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule="small", small="ngram+suffix", clock=CLOCK))
    with record(dec) as rec:
        dec.generate(PROMPTS[0], max_new_tokens=12)
    run = rec.to_run()
    fig = tree_figure(run, 0)
    shown = {t.name for t in fig.data if t.showlegend}
    assert "small (suffix)" in shown and "small (recycling)" not in shown
    small = next(t for t in fig.data if t.name == "small (n-gram)" and t.mode == "markers+text")
    rows = run.tree_at(0)
    colours = dict(zip(rows[rows.drafted_by == "small"].source, small.marker.color))
    assert any(c == SMALL_KINDS["suffix"][0] for s, c in colours.items() if s.startswith("suffix"))


def test_a_rule_is_fitted_by_following_its_decisions_through_the_recorded_schedule_trees():
    import itertools

    import pandas as pd

    from treegraft_lab.schedule.rules import fit

    # one round start, depth 2: the root match is 3 tokens (0.6 x 5); calling mid at step 1 pays
    rows = []
    for sched in ("".join(b) for b in itertools.product("01", repeat=2)):
        for k in (1, 2):
            rows.append({"state": "s", "k": k, "prefix": sched[: k - 1], "schedule": sched, "D": 2,
                         "sig_root_match": 0.6, "sig_mean_path_score": 0.0 if k == 1 else -3.0,
                         "accepted": {"00": 1, "01": 1, "10": 7, "11": 7}[sched],
                         "t_draft_ms": 1.0 + 10 * sched.count("1"), "t_verify_ms": 50.0})
    got = fit(pd.DataFrame(rows), "rule:match", grid=(0, 3, 4, 6))
    assert [r["mid_calls_per_round"] for r in got["grid"]] == [0, 0, 2, 2]  # calls iff 3 < tau
    assert got["value"] == 4  # 8 tokens in 71 ms beat 2 in 51 ms; ties go to the smaller value
    score = fit(pd.DataFrame(rows), "rule:score", grid=(0.0, 0.1, 1.01))
    assert [r["mid_calls_per_round"] for r in score["grid"]] == [0, 1, 2]  # exp(-3) = 0.05 < 0.1 at step 2 only


def test_a_fitted_rule_is_read_by_name_and_offered_by_the_playground(tmp_path, monkeypatch):
    import json

    from treegraft_lab import costs
    from treegraft_lab.schedule import rules
    from treegraft_lab.schedule.discovery import rule_schedules

    pair = tiny_pair("llama", vocab=64)
    cfg = DecodeConfig(clock="a100-paper", budget=8)
    (tmp_path / "rules.json").write_text(json.dumps({rules.rules_key(cfg): {"rule:match": {"value": 2}}}))
    monkeypatch.setattr(rules, "rules_file", lambda name: tmp_path / "rules.json")
    assert rules.rules_key(cfg) == "a100-paper-topk-lookup-ngram+recycling"  # the default settings
    pol = RulePolicy.for_config(DecodeConfig(schedule="rule:match", clock="a100-paper", budget=8), pair)
    assert pol.name == "rule:match=2"
    a100 = costs.load("a100-paper")
    assert rule_schedules(pair, cfg, a100) == ["rule:match=2"]  # rule:score has no fitted value: not offered
    assert rule_schedules(pair, DecodeConfig(clock="a100-paper", small="suffix"), a100) == []  # fitted for the default small drafter only


def test_value_pruning_keeps_its_counts_of_recycled_candidates_across_runs_and_recounts_the_rest():
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule="small", small="ngram+recycling", prune="value", clock="a100-paper"))
    ref = pair.target.generate(torch.tensor([PROMPTS[0]]), max_new_tokens=24, do_sample=False, min_new_tokens=24)[0, len(PROMPTS[0]):].tolist()
    assert dec.generate(PROMPTS[0], max_new_tokens=24).token_ids == ref  # lossless with the kept counts
    first = dec.pruner
    bins_carried = {k for k in first.carried if k[1] >= 0}
    assert bins_carried and all(k[0] == "n0" for k in bins_carried)  # recycled candidates were tried, per score bin
    sources = {k[0] for k in first.carried if k[1] == -1}  # every source's pooled rate: the next run's prior
    assert sources == {k[0] for k in [*first.bins, *bins_carried]}
    assert all(k[0] != "n0" for k in first.bins)
    trials = sum(t for k, (_, t) in first.carried.items() if k[1] >= 0)
    carried, bins = first.carried, first.bins
    assert bins  # this run's n-gram bins
    dec.start(PROMPTS[1])
    assert dec.pruner is first and dec.pruner.carried is carried  # one pruner, one count across runs, like the matrix
    assert dec.pruner.bins == {} and dec.pruner.tokens == 0  # the n-gram bins and the rate start afresh each run
    dec.generate(PROMPTS[1], max_new_tokens=24)
    assert sum(t for k, (_, t) in dec.pruner.carried.items() if k[1] >= 0) > trials
