"""Growth "lookup": prompt lookup's draft (HF's matching rule) is a branch of the tree, deeper than
D, scored like any n-gram chain so that pruning keeps it when it scores best."""

from __future__ import annotations

import random

import pytest
import torch
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

from treegraft_lab.budget import ValuePruner
from treegraft_lab.config import DecodeConfig, preset
from treegraft_lab.costs import DeviceProfile
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.drafters import NgramDrafter, NgramIndex
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.tiny import tiny_pair
from treegraft_lab.tree import DraftTree

# "9 1 2" first continues with 3 4 5 6 7 8 10 11 12 13 (earliest), later with 3 40 41 (latest)
CONTEXT = [9, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 20, 21, 1, 2, 3, 40, 41, 22, 23, 1, 2]
PLD_DRAFT = [3, 4, 5, 6, 7, 8, 10, 11, 12, 13]


def hf_draft(tokens: list[int], length: int = 10) -> list[int]:
    """The candidates transformers' prompt lookup drafts after `tokens` (greedy, no EOS)."""
    gen = PromptLookupCandidateGenerator(num_output_tokens=length, max_matching_ngram_size=2, max_length=10_000)
    ids, _ = gen.get_candidates(torch.tensor([tokens]))
    return ids[0, len(tokens):].tolist()


def our_draft(tokens: list[int], length: int = 10) -> list[int]:
    small = NgramDrafter(5, 1)
    small.index.extend(tokens)
    props = small.lookup(length)
    return [props[0][1], *(t[0] for t in props[0][4])] if props else []


def path_of(tree: DraftTree, tokens: list[int]) -> list[int]:
    v, out = 0, []
    for tok in tokens:
        v = tree.children[v][tok]
        out.append(v)
    return out


def started(context: list[int] = CONTEXT, **cfg) -> TreeGraftDecoder:
    dec = TreeGraftDecoder(tiny_pair("llama", vocab=64, scale=4.0), preset("full", **{"schedule": "small", "clock": "a100-paper", **cfg}))
    dec.start(context)
    return dec


def test_the_lookup_draft_is_hf_prompt_lookups_draft():
    assert our_draft(CONTEXT) == hf_draft(CONTEXT) == PLD_DRAFT  # the earliest occurrence, 10 tokens
    rng = random.Random(0)
    for _ in range(300):  # short texts over small vocabularies: repeats, overlaps, draft cut at the end
        toks = [rng.randrange(rng.choice((3, 6, 20))) for _ in range(rng.randrange(2, 40))]
        length = rng.choice((1, 4, 10))
        assert our_draft(toks, length) == hf_draft(toks, length), toks


def test_the_latest_occurrence_is_offered_too_when_asked():
    small = NgramDrafter(5, 1)
    small.index.extend(CONTEXT)
    drafts = [[p[1], *(t[0] for t in p[4])] for p in small.lookup(10, latest=True)]
    assert drafts == [PLD_DRAFT, [3, 40, 41, 22, 23, 1, 2]]  # the latest one ends where the text ends
    assert NgramIndex().lookup_match() is None


def test_the_first_small_step_grafts_the_lookup_chain_deeper_than_d():
    dec = started(schedule="small", lookup=10)
    tree = DraftTree.start(dec.root)
    step = dec.draft_step(tree, 1, False, [0], [])
    frontier, new, chain = step.frontier, step.new, step.chain
    nodes = path_of(tree, PLD_DRAFT)
    assert [tree.depth[v] for v in nodes] == list(range(1, 11)) and max(tree.depth) == 10 > dec.config.depth
    assert nodes[0] in new and set(nodes[1:]) <= set(chain)  # the first token joins N_k as usual
    dec.draft_step(tree, 2, False, new, frontier)
    assert path_of(tree, PLD_DRAFT) == nodes and all(tree.step[v] == 1 for v in nodes)  # grafted once a round


def test_the_lookup_draft_is_matched_once_per_committed_text(monkeypatch):
    dec = started(schedule="small", lookup=10)
    calls = []
    from treegraft_lab import drafting as decoder_module

    real = decoder_module.lookup_draft
    monkeypatch.setattr(decoder_module, "lookup_draft", lambda idx, *a, **k: calls.append(len(idx.tokens)) or real(idx, *a, **k))
    dec.run_round()
    dec.run_round()
    assert len(calls) == 2 and calls[0] < calls[1]  # one match a round (five small steps), anew after a commit


def test_a_round_that_starts_with_a_mid_step_grafts_it_at_its_first_small_step():
    dec = started(schedule="10101", lookup=10)
    tree = DraftTree.start(dec.root)
    step = dec.draft_step(tree, 1, True, [0], [])
    frontier, new = step.frontier, step.new
    with pytest.raises(KeyError):
        path_of(tree, PLD_DRAFT)
    dec.draft_step(tree, 2, False, new, frontier)
    assert all(tree.step[v] in (1, 2) for v in path_of(tree, PLD_DRAFT))


def test_a_mid_step_never_lowers_the_lookup_chains_scores_and_rescores_the_rest():
    # the mid step scores every unscored node; prompt lookup's chain alone (the longest match's would
    # label every other node "lookup" in this short text)
    dec = started(schedule="10101", lookup=10, lookback=None, lookup_longest=False)
    tree = DraftTree.start(dec.root)
    step = dec.draft_step(tree, 1, False, [0], [])
    chain = path_of(tree, PLD_DRAFT)
    before = list(tree.logp)
    dec.draft_step(tree, 2, True, step.new, step.frontier)
    assert all(tree.mid_scored[v] for v in chain)
    q = dec.mid.token_logq([tree.parent[v] for v in chain], PLD_DRAFT).tolist()
    assert [tree.logp[v] for v in chain] == pytest.approx([max(b, x) for b, x in zip((before[v] for v in chain), q)])
    assert any(x < before[v] for v, x in zip(chain, q))  # the mid drafter did score some copied tokens lower
    other = [v for v in range(1, len(before)) if "lookup" not in tree.source[v] and tree.mid_scored[v]]
    assert other and all(tree.logp[v] == pytest.approx(float(dec.mid.token_logq([tree.parent[v]], [tree.tokens[v]])[0]))
                         for v in other)  # every other node takes the mid drafter's q


def test_without_lookup_the_release_tree_stops_at_depth_d():
    dec = started(schedule="small")
    tree = DraftTree.start(dec.root)
    last, exp = [0], []
    for k in range(1, 6):
        step = dec.draft_step(tree, k, False, last, exp)
        exp, last = step.frontier, step.new
    assert max(tree.depth) == 5
    with pytest.raises(TreeGraftError, match="lookup"):
        DecodeConfig(lookup=-1)


def test_top_k_pruning_keeps_the_whole_chain_when_its_nodes_score_best():
    ctx = [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18] * 3 + [7, 8]  # a text copied three times
    dec = TreeGraftDecoder(tiny_pair("llama", vocab=64, scale=4.0), preset("full", schedule="small", lookup=10, clock="a100-paper"))
    dec.start(ctx)
    tree = DraftTree.start(dec.root)
    dec.draft_step(tree, 1, False, [0], [])
    chain = path_of(tree, [9, 10, 11, 12, 13, 14, 15, 16, 17, 18])
    best = sorted(range(1, len(tree)), key=lambda v: -tree.score[v])[:10]
    assert sorted(best) == chain  # a unique 5-gram continuation scores 5/6 at every depth
    assert tree.prune(10) == [0, *chain]
    pruner = ValuePruner(DeviceProfile("flat", {1: 10.0, 64: 10.0}, {}, 1.0))  # verifying is free: keep what is likely
    assert set(chain) <= set(pruner.prune(tree, 63))


def test_the_lookup_chains_tail_joins_the_frontier_when_asked():
    dec = started(schedule="small", lookup=10, chain_frontier=True)
    tree = DraftTree.start(dec.root)
    new = dec.draft_step(tree, 1, False, [0], []).new
    assert path_of(tree, PLD_DRAFT)[-1] in new  # depth 10: the next small step may extend it


def test_a_small_step_from_unlikely_nodes_is_skipped_and_not_priced():
    dec = started(schedule="small", lookup=10, min_step_p=0.9)
    tree = DraftTree.start(dec.root)
    step = dec.draft_step(tree, 1, False, [0], [])  # the first step always drafts
    frontier, new, n = step.frontier, step.new, len(tree)
    assert step.ms == dec.profile.small_ms  # a drafting step is priced
    assert max(tree.score[v] for v in new) < -0.2  # no node as likely as 0.9
    step = dec.draft_step(tree, 2, False, new, frontier)
    frontier, new, chain = step.frontier, step.new, step.chain
    assert (frontier, new, chain, len(tree), step.ms) == ([], [], [], n, 0.0)
    with pytest.raises(TreeGraftError, match="min_step_p"):
        DecodeConfig(min_step_p=1.0)
    with pytest.raises(TreeGraftError, match="chain_frontier"):
        DecodeConfig(chain_frontier=1)


def test_the_growth_presets_are_named_by_their_fields():
    from treegraft_lab.config import GROWTHS

    assert DecodeConfig().growth == "lookup" and preset("full").growth == "full"
    assert all(DecodeConfig(**over, small="ngram").growth == name for name, over in GROWTHS.items())
    assert DecodeConfig(lookup=3).growth == "custom"


def test_a_scheduler_trained_on_full_trees_never_drives_lookup_or_release_trees(tmp_path):
    from treegraft_lab.config import GROWTHS
    from treegraft_lab.schedule.adaptive import artifact_folder, check_match

    meta = {"pair": "p", "profile_class": "a100-paper", "prune": "topk"}  # no growth recorded: the full growth
    prof = type("Prof", (), {"name": "a100-paper", "key": {}})()
    check_match(meta, "p", prof, "topk", tmp_path)  # full trees: fine
    for other in ("lookup", "release"):
        with pytest.raises(TreeGraftError, match=f"growth 'full'.*not '{other}'"):
            check_match(meta, "p", prof, "topk", tmp_path, other)
    check_match({**meta, "growth": "lookup"}, "p", prof, "topk", tmp_path, "lookup")
    pair = type("Pair", (), {"name": "p"})()
    assert artifact_folder(pair, preset("full"), prof).name == "a100-paper-topk"
    assert artifact_folder(pair, DecodeConfig(**GROWTHS["lookup"], small="ngram", prune="topk"), prof).name == "a100-paper-topk-lookup"
    assert artifact_folder(pair, preset("release"), prof).name == "a100-paper-topk-release"


def test_a_scheduler_trained_on_n_gram_trees_never_drives_trees_with_recycled_candidates(tmp_path):
    from treegraft_lab.config import GROWTHS
    from treegraft_lab.schedule.adaptive import artifact_folder, check_match

    meta = {"pair": "p", "profile_class": "a100-paper", "prune": "topk", "growth": "lookup"}  # no small: n-gram
    prof = type("Prof", (), {"name": "a100-paper", "key": {}})()
    with pytest.raises(TreeGraftError, match="small 'ngram'.*not 'ngram\\+recycling'"):
        check_match(meta, "p", prof, "topk", tmp_path, "lookup", "ngram+recycling")
    gated = {**meta, "small": "ngram+recycling", "recycle_below": 2}
    check_match(gated, "p", prof, "topk", tmp_path, "lookup", "ngram+recycling", 2)
    with pytest.raises(TreeGraftError, match="recycle_below 2.*not 0"):  # recycled candidates under every node
        check_match(gated, "p", prof, "topk", tmp_path, "lookup", "ngram+recycling", 0)
    pair = type("Pair", (), {"name": "p"})()
    cfg = DecodeConfig(**GROWTHS["lookup"], small="ngram+recycling", prune="topk")
    assert artifact_folder(pair, cfg, prof).name == "a100-paper-topk-lookup-ngram+recycling"


@pytest.mark.parametrize("argv, words", [
    (["bench", "--budget", "-3"], "budget must be an integer >= 1"),
    (["bench", "--methods", "small", "--budget", "x"], "--budget must be an integer"),
    (["bench", "--model-on", "a100-nope"], "no device profile 'a100-nope'"),
    (["generate", "hi", "--schedule", "10201"], "schedule '10201'"),
    (["generate", "hi", "--budget", "0"], "budget must be an integer >= 1"),
    (["check-lossless", "--prompts", "treegraft-suite", "--schedules", "small", "--model-on", "nope"], "no device profile"),
])
def test_bad_settings_are_refused_in_one_line_before_a_model_loads(argv, words, monkeypatch, capsys):
    from treegraft_lab import cli, models

    monkeypatch.setattr(models, "load_pair", lambda *a, **k: pytest.fail("a model was loaded"))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_check_lossless_takes_the_pruning_and_clock_options_of_bench(monkeypatch):
    from treegraft_lab import cli, config
    from treegraft_lab.commands import check_lossless

    made = []

    class Config(DecodeConfig):
        def __post_init__(self) -> None:
            super().__post_init__()
            if self.schedule == "adaptive":  # the run's configs, not the scheduler check's tree settings
                made.append((self.clock, self.prune, self.growth))

    def stop(*a, **k):
        raise SystemExit(0)

    monkeypatch.setattr(config, "DecodeConfig", Config)
    monkeypatch.setattr(check_lossless, "load_pair_from_args", stop)
    with pytest.raises(SystemExit):
        cli.main(["check-lossless", "--prompts", "treegraft-suite", "--schedules", "adaptive", "--prune", "value",
                  "--model-on", "a100-paper", "--prune-modelled", "topk", "--dtype", "float32"])  # schedulers exist
    assert made == [("wall", "value", "lookup"), ("a100-paper", "topk", "lookup")]


def test_the_longest_match_finds_where_in_a_document_the_text_is_and_its_chain_joins_the_tree():
    text = CONTEXT[:-4] + [21, 1, 2]  # "1 2" first continues with 3 4 5 ..., "21 1 2" with 3 40 41 21
    idx = NgramIndex()
    idx.extend(text)
    assert idx.lookup_match() == (2, 3)  # prompt lookup: the earliest "1 2"
    assert idx.longest_match() == (3, 18)  # "21 1 2" at positions 15..17, then 3 40 41
    assert NgramIndex().longest_match() is None
    longest = [3, 40, 41, 21, 1]
    for on in (True, False):
        dec = started(text, lookup=10, lookup_longest=on)
        tree = DraftTree.start(dec.root)
        dec.draft_step(tree, 1, False, [0], [])
        assert all("lookup" in tree.source[v] for v in path_of(tree, PLD_DRAFT))  # prompt lookup's chain either way
        after_3 = path_of(tree, longest)[1:]  # the n-gram drafter may hold it too; only the lookup grafts it whole
        assert all("lookup" in tree.source[v] for v in after_3) is on
