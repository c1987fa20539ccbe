"""The decoder is lossless, keeps its KV caches right, and refuses bad input clearly."""

from __future__ import annotations

import itertools

import pytest
import torch

from treegraft_lab import cpu_path, kv
from treegraft_lab.baselines import CascadeDecoder, autoregressive
from treegraft_lab.config import GROWTH_FIELDS, GROWTHS, DecodeConfig
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.hooks import record
from treegraft_lab.rounds import Draft
from treegraft_lab.tiny import noisy_pair, tiny_pair
from treegraft_lab.tree import MID, SMALL, DraftTree

CLOCK = "a100-paper"  # the costs decisions read: a named profile, the same on any machine
PROMPTS = [
    [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7],  # repetitive: the n-gram drafter finds matches
    [1, 2, 3, 4, 10, 11, 12, 13, 14, 40, 41, 3, 4, 10],
    list(range(20, 50)),
]
SETTINGS = [
    dict(schedule="small"),
    dict(schedule="mid"),
    dict(schedule="10101"),
    dict(schedule="01010", budget=6),
    dict(schedule="10101", expanded_graft=False),
    dict(schedule="10101", non_destructive=False),
    dict(schedule="mid", width=3, budget=4, depth=3),
    dict(schedule="10101", prune="value"),
    dict(schedule="10101", lookback=None),  # the paper's pool: every node the mid drafter has not scored
    dict(schedule="01101", max_nodes=40, children=4, lookback=2),
    dict(schedule="10101", expansion="global", ngram_chain=False, lookback=None),  # the compact rule
    dict(schedule="small", expansion="global", ngram_chain=False),
]


def hf_greedy(model, ids, n):
    out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, min_new_tokens=n)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("path", ["stock", "packed"])
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_every_schedule_matches_plain_greedy_decoding(arch, path):
    pair = tiny_pair(arch, vocab=64, scale=4.0)
    stock_refs = [hf_greedy(pair.target, ids, 24) for ids in PROMPTS]
    if path == "packed":  # the CPU path of load_pair: both models, plain decoding included
        assert cpu_path.install(pair.target) and cpu_path.install(pair.mid)
    for ids, stock_ref in zip(PROMPTS[:2] if arch == "qwen3" else PROMPTS, stock_refs):
        ref = hf_greedy(pair.target, ids, 24)
        assert ref == stock_ref
        assert autoregressive(pair, ids, max_new_tokens=24).token_ids == ref
        for s in SETTINGS:
            g = TreeGraftDecoder(pair, DecodeConfig(**s, clock=CLOCK)).generate(ids, max_new_tokens=24)
            assert g.token_ids == ref, (s, ids)
        assert CascadeDecoder(pair, DecodeConfig(clock=CLOCK)).generate(ids, max_new_tokens=24).token_ids == ref


@pytest.mark.parametrize("expansion", ["per_parent", "global"])
def test_target_acting_as_its_own_drafter_accepts_every_draft_token(expansion):
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    pair.mid = pair.target
    # lookback=None: with W = 1 the release's depth window would reselect the root at every step
    cfg = DecodeConfig(clock=CLOCK, schedule="mid", depth=4, width=1, expansion=expansion, lookback=None)
    g = TreeGraftDecoder(pair, cfg).generate(PROMPTS[2], max_new_tokens=20)
    assert g.token_ids == hf_greedy(pair.target, PROMPTS[2], 20)
    assert g.stats["accepted_per_round"] == 4.0
    assert g.stats["tokens_per_round"] == 5.0


SMALLS = ("ngram", "ngram+recycling", "recycling", "suffix")
MID_SCHEDULES = ("10101", "01011", "mid", "adaptive", "rule:match=3", "rule:score=0.9", "oracle")
DEEP_PROMPTS, N_DEEP = (PROMPTS[2], PROMPTS[1]), 12  # text the n-gram drafter has not seen: the mid drafter's paths get accepted


def agreeing_pairs() -> dict:
    """Mid drafters that agree with the target: the target itself, and a slightly noisy copy of it."""
    own = tiny_pair("llama", vocab=64, scale=4.0)
    own.mid = own.target
    return {"the target itself": own, "a noisy copy": noisy_pair()}


def deep_mid_counter(counts: dict, key: str):
    """A round.accept hook adding, per committed round, the accepted nodes the mid drafter created
    at depth >= 2 (a replayed round of the oracle is not committed and not counted)."""
    def hook(ev) -> None:
        if ev.data["committed"]:
            t = ev.tree
            counts[key] += sum(1 for v in ev.data["path"][1:] if t.creator[v] == MID and t.depth[v] >= 2)
    return hook


@pytest.mark.parametrize("growth, small", [(g, s) for g in ("full", "lookup") for s in SMALLS] + [("release", "ngram")])
def test_agreeing_mid_drafters_stay_lossless_on_deep_mid_drafted_paths(small, growth, tmp_path):
    """Every schedule, with a mid drafter whose drafts the target accepts deep into the tree, gives
    the target's greedy tokens (HF `generate`), and each mid schedule did accept mid-drafted nodes
    at depth 2 or more: the check cannot go shallow unnoticed."""
    from tests.test_scheduler import make_artifact

    # a student that calls the mid drafter at every step from the second round on (the first is never
    # asked): its prompt is prefilled late, at the first call
    make_artifact(tmp_path, pair="tiny-llama", profile_class="a100-paper", margin=lambda x: x[:, 14] - 0.5,
                  growth=growth, small=small)
    base = dict(small=small, clock="a100-paper", scheduler_path=str(tmp_path), **GROWTHS[growth])
    deep = dict.fromkeys(MID_SCHEDULES, 0)
    for name, pair in agreeing_pairs().items():
        refs = [hf_greedy(pair.target, ids, N_DEEP) for ids in DEEP_PROMPTS]
        small_only = TreeGraftDecoder(pair, DecodeConfig(schedule="small", **base))
        assert [small_only.generate(ids, max_new_tokens=N_DEEP).token_ids for ids in DEEP_PROMPTS] == refs
        for s in MID_SCHEDULES:
            dec = TreeGraftDecoder(pair, DecodeConfig(schedule=s, **base))
            with dec.hooks({"round.accept": deep_mid_counter(deep, s)}):
                for ids, ref in zip(DEEP_PROMPTS[: 1 if s == "oracle" else None], refs):  # the oracle: 32 replays a round
                    assert dec.generate(ids, max_new_tokens=N_DEEP).token_ids == ref, (name, s, ids)
    # the release's parent-ending rule stops most trees after a small step: there, the schedules that call at
    # every step from step 1 (mid; adaptive's student from round 2 on) must still go deep
    must = ("mid", "adaptive") if growth == "release" else MID_SCHEDULES
    assert all(deep[s] for s in must), f"schedules that accepted no mid-drafted node at depth >= 2: {deep}"


def test_kv_caches_hold_exactly_the_committed_context():
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    dec = TreeGraftDecoder(pair, DecodeConfig(clock=CLOCK, schedule="10101", budget=8))
    dec.generate(PROMPTS[0], max_new_tokens=17)
    ids = dec.ids
    fresh = kv.new_cache(pair.target)
    kv.prefill(pair.target, fresh, ids[:-1])
    assert kv.cache_len(dec.target.cache) == len(ids) - 1
    for a, b in zip(dec.target.cache.layers, fresh.layers):
        torch.testing.assert_close(a.keys, b.keys, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(a.values, b.values, atol=1e-5, rtol=1e-4)
    mid = dec.mid
    assert mid.cached + len(mid.pending) == len(ids) - 1
    assert ids[mid.cached: len(ids) - 1] == mid.pending
    fresh = kv.new_cache(pair.mid)
    kv.prefill(pair.mid, fresh, ids[: mid.cached])
    for a, b in zip(mid.cache.layers, fresh.layers):
        torch.testing.assert_close(a.keys, b.keys, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("fuse", [1024, 5])
def test_the_prompt_rides_in_the_first_tree_forward(monkeypatch, fuse):
    """A prompt up to FUSE tokens costs no forward of its own (the first round's forward carries
    it); a longer one is prefilled up to its last FUSE tokens. Outputs and caches stay exact."""
    from treegraft_lab.verify import TargetVerifier

    monkeypatch.setattr(TargetVerifier, "FUSE", fuse)
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    ids = PROMPTS[0]  # repetitive: the first round verifies draft nodes behind the prompt
    ref = hf_greedy(pair.target, ids, 20)
    sizes = []
    hook = pair.target.register_forward_pre_hook(lambda m, a, kw: sizes.append(kw["input_ids"].shape[1]), with_kwargs=True)
    try:
        dec = TreeGraftDecoder(pair, DecodeConfig(clock=CLOCK, schedule="small", budget=8))
        g = dec.generate(ids, max_new_tokens=20)
    finally:
        hook.remove()
    assert g.token_ids == ref
    prompt = len(ids) - 1
    if fuse >= prompt:
        assert len(sizes) == g.stats["rounds"]  # one target forward a round, none for the prompt
        assert sizes[0] == prompt + 1 + g.rounds[0].kept > prompt + 1  # kept: draft nodes, the root not counted
    else:
        assert sizes[0] == prompt - fuse and sizes[1] == fuse + 1 + g.rounds[0].kept
        assert len(sizes) == g.stats["rounds"] + 1
    fresh = kv.new_cache(pair.target)
    kv.prefill(pair.target, fresh, dec.ids[:-1])
    assert kv.cache_len(dec.target.cache) == len(dec.ids) - 1
    for a, b in zip(dec.target.cache.layers, fresh.layers):
        torch.testing.assert_close(a.keys, b.keys, atol=1e-5, rtol=1e-4)


class AlwaysMid:
    name = "always"

    def decide(self, ctx) -> bool:
        return True


@pytest.mark.parametrize("schedule,first_ok,first", [(AlwaysMid(), False, "00000"), (AlwaysMid(), True, "11111"),
                                                      ("11111", False, "11111")])
def test_a_policy_calls_the_mid_drafter_from_the_second_round_on(schedule, first_ok, first):
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    ref = hf_greedy(pair.target, PROMPTS[1], 16)
    cfg = DecodeConfig(clock=CLOCK, schedule=schedule, budget=8, mid_in_first_round=first_ok)
    g = TreeGraftDecoder(pair, cfg).generate(PROMPTS[1], max_new_tokens=16)
    assert g.token_ids == ref
    assert [r.schedule for r in g.rounds[:2]] == [first, "11111"]


def test_generation_stops_at_eos_and_drops_tokens_after_it():
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    ref = hf_greedy(pair.target, PROMPTS[0], 24)
    eos = ref[5]
    pair.target.generation_config.eos_token_id = eos
    g = TreeGraftDecoder(pair, DecodeConfig(clock=CLOCK, schedule="mid")).generate(PROMPTS[0], max_new_tokens=24)
    assert g.token_ids == ref[: ref.index(eos) + 1]


def test_replayed_rounds_leave_no_trace():
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    ref = hf_greedy(pair.target, PROMPTS[1], 16)
    g = TreeGraftDecoder(pair, DecodeConfig(clock=CLOCK, schedule="oracle", depth=3, budget=6)).generate(PROMPTS[1], max_new_tokens=16)
    assert g.token_ids == ref


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(budget=0), "budget"),
        (dict(depth=0), "depth"),
        (dict(width=0), "width"),
        (dict(schedule="1010"), "depth=5"),
        (dict(schedule="10201"), "mask"),
        (dict(temperature=-1.0), "temperature"),
        (dict(ngram_max=0), "n-gram"),
    ],
)
def test_bad_config_gets_a_clear_error(kwargs, words):
    with pytest.raises(TreeGraftError, match=words):
        DecodeConfig(**kwargs)


def test_bad_prompts_get_a_clear_error_and_change_nothing():
    pair = tiny_pair("llama", vocab=64, window=64)
    dec = TreeGraftDecoder(pair, DecodeConfig(clock=CLOCK, schedule="10101"))
    with pytest.raises(TreeGraftError, match="empty"):
        dec.generate([], max_new_tokens=4)
    with pytest.raises(TreeGraftError, match="context window"):
        dec.generate(list(range(60)), max_new_tokens=8)
    with pytest.raises(TreeGraftError, match="outside the vocabulary"):
        dec.generate([1, 2, 999], max_new_tokens=4)
    with pytest.raises(TreeGraftError, match="max_new_tokens"):
        dec.generate([1, 2], max_new_tokens=0)
    assert dec.round_idx == 0


def test_a_mid_schedule_without_a_mid_model_is_refused():
    pair = tiny_pair("llama")
    pair.mid = None
    with pytest.raises(TreeGraftError, match="mid drafter"):
        TreeGraftDecoder(pair, DecodeConfig(clock=CLOCK, schedule="10101"))
    TreeGraftDecoder(pair, DecodeConfig(clock=CLOCK, schedule="small")).generate([1, 2, 3], max_new_tokens=3)


class _CallAfter:
    """A custom policy: call the mid drafter at step 1 once `after` tokens are committed."""

    name = "call-after"

    def __init__(self, after: int) -> None:
        self.after = after

    def decide(self, ctx) -> bool:
        return ctx.k == 1 and len(ctx.index.tokens) >= self.after


def test_a_policy_that_may_skip_the_mid_drafter_prefills_it_only_when_it_first_calls():
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    ids = PROMPTS[1]
    ref = hf_greedy(pair.target, ids, 20)
    never = TreeGraftDecoder(pair, DecodeConfig(clock=CLOCK, schedule=_CallAfter(10**9)))
    assert never.generate(ids, max_new_tokens=20).token_ids == ref
    assert never.mid.cached == 0 and kv.cache_len(never.mid.cache) == 0  # never called: never forwarded
    assert never.mid.pending == never.ids[:-1]
    late = TreeGraftDecoder(pair, DecodeConfig(clock=CLOCK, schedule=_CallAfter(len(ids) + 6)))
    g = late.generate(ids, max_new_tokens=20)
    assert g.token_ids == ref and sum(r.mid_calls for r in g.rounds) > 0
    mid = late.mid
    assert mid.cached > len(ids) and ids == late.ids[: len(ids)]  # the deferred prompt went in with the first call
    assert late.ids[mid.cached: len(late.ids) - 1] == mid.pending
    fresh = kv.new_cache(pair.mid)
    kv.prefill(pair.mid, fresh, late.ids[: mid.cached])
    for a, b in zip(mid.cache.layers, fresh.layers):
        torch.testing.assert_close(a.keys, b.keys, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(a.values, b.values, atol=1e-5, rtol=1e-4)


def test_the_command_lines_default_settings_decode_as_hf_greedy(tmp_path, monkeypatch, capsys):
    """`treegraft-lab generate` given only a pair decodes with the command line's defaults (its
    growth and small drafter: lookup, ngram+recycling; budget 63; schedule 10101 asked for by name, as
    the default "auto" is all-small for a pair with no trained scheduler) and prints the target's greedy
    tokens (HF `generate` on the model loaded afresh). The mid drafter is the target itself: prompt
    lookup's chain, n-gram, recycled and deep mid-drafted nodes are all accepted."""
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from treegraft_lab import cli
    from treegraft_lab.commands.common import DEFAULT_GROWTH, DEFAULT_SMALL
    from treegraft_lab.hooks import load_run
    from treegraft_lab.prompting import encode_prompt
    from treegraft_lab.tiny import save_tiny_pair

    monkeypatch.setenv("TREEGRAFT_PROFILE_CACHE", str(tmp_path / "profiles"))
    folder = save_tiny_pair(tmp_path / "pair", scale=16.0) / "target"  # sharp: the mid's drafts pass min_step_p
    prompt, n = "the cat sat on the mat; the cat sat on the hat; the cat", 40
    assert cli.main(["generate", prompt, "--target", str(folder), "--mid", str(folder), "--device", "cpu",
                     "--dtype", "float32", "--max-new-tokens", str(n), "--record", str(tmp_path / "run"), "--json",
                     "--schedule", "10101"]) == 0
    out = json.loads(capsys.readouterr().out)
    ids = encode_prompt(AutoTokenizer.from_pretrained(folder), prompt)
    assert out["token_ids"] == hf_greedy(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), ids, n)
    run = load_run(tmp_path / "run")
    cfg = json.loads(run.runs.config[0])
    assert cfg["small"] == DEFAULT_SMALL and DecodeConfig(**{f: cfg[f] for f in GROWTH_FIELDS}).growth == DEFAULT_GROWTH
    accepted = run.tree[run.tree.accepted & (run.tree.depth > 0)]
    sources = set("+".join(accepted.source).split("+"))
    assert {"lookup", "ngram", "recycling", "mid"} <= sources
    assert (accepted[accepted.creator == "mid"].depth >= 2).any()


def oracle_value(leaf: dict, profile, tokens: float, ms: float) -> float:
    """A replayed schedule's worth to a run that has made `tokens` in `ms` modelled ms: tokens per ms
    in the first round, else tokens - lambda x ms with lambda = tokens / ms (Dinkelbach)."""
    from treegraft_lab.replay import leaf_ms

    t = sum(leaf_ms(profile, leaf, 5))
    return (leaf["accepted"] + 1) / t if ms == 0 else leaf["accepted"] + 1 - tokens / ms * t


ORACLE_PROFILES = {  # a sloped one, and one where every schedule accepting as many tokens ties
    "sloped": dict(target={1: 10.0, 16: 14.0, 64: 30.0}, mid={1: 2.0, 100: 6.0, 500: 20.0}, small_ms=0.5),
    "flat": dict(target={1: 10.0, 64: 10.0}, mid={1: 0.5, 500: 0.5}, small_ms=0.5),
}


@pytest.mark.parametrize("costs_of", ORACLE_PROFILES)
def test_an_oracle_round_commits_the_best_of_its_replayed_schedules(monkeypatch, costs_of):
    """Each oracle round replays all 32 schedules and commits the one maximising tokens per modelled
    ms (first round) or tokens - lambda x ms with lambda the run's tokens per ms so far (ties: fewer
    mid calls); the committed round is that replay: same acceptance, same price."""
    from treegraft_lab import costs
    from treegraft_lab import replay as replay_module
    from treegraft_lab.replay import leaf_ms

    replays = []

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        replays.append(out[1])
        return out

    real = replay_module.replay_all
    monkeypatch.setattr(replay_module, "replay_all", spy)
    prof = costs.DeviceProfile(costs_of, **ORACLE_PROFILES[costs_of])
    pair = noisy_pair()
    g = TreeGraftDecoder(pair, DecodeConfig(schedule="oracle"), profile=prof).generate(PROMPTS[2], max_new_tokens=24)
    assert g.token_ids == hf_greedy(pair.target, PROMPTS[2], 24)
    assert len(replays) == len(g.rounds)
    tokens = ms = 0.0
    ties = 0  # rounds where the best value was shared by schedules with different mid calls
    for leaves, info in zip(replays, g.rounds):
        assert sorted(lf["schedule"] for lf in leaves) == sorted(map("".join, itertools.product("01", repeat=5)))
        values = {lf["schedule"]: oracle_value(lf, prof, tokens, ms) for lf in leaves}
        (chosen,) = [lf for lf in leaves if lf["schedule"] == info.schedule]
        top = max(values.values())
        assert values[info.schedule] == pytest.approx(top, rel=1e-12, abs=1e-12)
        tied = [lf["n_mid"] for lf in leaves if values[lf["schedule"]] == pytest.approx(top, rel=1e-12)]
        assert chosen["n_mid"] == min(tied)
        ties += len(set(tied)) > 1
        assert info.accepted == chosen["accepted"] and info.modelled_ms == pytest.approx(sum(leaf_ms(prof, chosen, 5)))
        tokens, ms = tokens + info.accepted + 1, ms + info.modelled_ms
    assert len({r.schedule for r in g.rounds}) > 1  # the choice changed from round to round
    if costs_of == "flat":
        assert ties, "no round had tied schedules: the tie-break went unchecked"


class AnswerChain:
    """A user's drafter: the next `depth` tokens of a known greedy answer as one chain under the
    root, and one wrong sibling at each depth (kept out of the accepted path by verification)."""

    def __init__(self, prompt: list[int], answer: list[int]) -> None:
        self.prompt, self.answer = prompt, answer

    def draft(self, dec, policy) -> Draft:
        tree, v = DraftTree.start(dec.root), 0
        done = len(dec.ids) - len(self.prompt)  # answer tokens committed so far (the root among them)
        for k, tok in enumerate(self.answer[done:done + dec.config.depth], start=1):
            tree.add_child(v, (tok + 1) % 64, -1.0, SMALL, k)  # a wrong guess beside the right one
            v, _ = tree.add_child(v, tok, 0.0, SMALL, k)
        return Draft(tree, "chain", ms=dec.profile.small_ms)


@pytest.mark.parametrize("where", ["decoder", "class"])
def test_a_users_drafter_decodes_losslessly_and_its_nodes_are_recorded(where):
    pair, ids = tiny_pair("llama", vocab=64, scale=4.0), PROMPTS[1]
    ref = hf_greedy(pair.target, ids, 24)
    drafter = AnswerChain(ids, ref)
    if where == "class":
        dec = type("ChainDecoder", (TreeGraftDecoder,), {"drafter": drafter})(pair, DecodeConfig(clock=CLOCK, schedule="small"))
    else:
        dec = TreeGraftDecoder(pair, DecodeConfig(clock=CLOCK, schedule="small"))
        dec.drafter = drafter
    with record(dec) as rec:
        gen = dec.generate(ids, max_new_tokens=24)
    assert gen.token_ids == ref
    first = gen.rounds[0]  # priced as the drafter priced its drafting, plus the verification
    assert first.modelled_ms == dec.profile.small_ms + dec.profile.target_ms(first.kept + 1)
    run = rec.to_run()
    assert set(run.rounds["schedule"]) == {"chain"}
    assert (run.rounds["accepted"][:-1] == 5).all()  # every right token accepted, every wrong one refused
    tree = run.tree[run.tree["round"] == 0]
    assert tree["token"].tolist()[1:] == [t for r in ref[:5] for t in ((r + 1) % 64, r)]
    assert tree["accepted"].tolist()[1:] == [False, True] * 5
    assert TreeGraftDecoder.drafter is not drafter  # the default stays TreeGraft's own
