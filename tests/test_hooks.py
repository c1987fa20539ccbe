"""Hook points are named and scoped; recording captures every round and round-trips via parquet."""

from __future__ import annotations

import pytest

from treegraft_lab import hooks as hooks_module
from treegraft_lab.config import DecodeConfig
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.hooks import HOOK_POINTS, load_run, record
from treegraft_lab.tiny import tiny_pair

PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]
CLOCK = "a100-paper"  # the costs decisions read: a named profile, the same on any machine


@pytest.fixture(scope="module")
def pair():
    return tiny_pair("llama", vocab=64, scale=4.0)


def test_hooks_fire_in_order_and_detach_after_the_block(pair):
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule="10101", depth=5, clock=CLOCK))
    seen = []
    with dec.hooks([(name, lambda ev: seen.append((ev.name, ev.step))) for name in HOOK_POINTS]):
        dec.generate(PROMPT, max_new_tokens=4)
    assert seen[0] == ("run.start", 0) and seen[-1][0] == "run.end"
    first_round = [n for n, _ in seen[1:14]]
    assert first_round == ["round.start"] + ["step.decide", "step.expand"] * 5 + ["round.prune", "round.verify"]
    assert dec._hooks == {}
    n = len(seen)
    dec.generate(PROMPT, max_new_tokens=4)
    assert len(seen) == n


def test_without_hooks_no_event_is_even_built(pair, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("an event was built with no hook attached")

    monkeypatch.setattr("treegraft_lab.hooks.HookEvent", boom)
    TreeGraftDecoder(pair, DecodeConfig(schedule="10101", clock=CLOCK)).generate(PROMPT, max_new_tokens=6)


def test_an_unknown_hook_point_is_refused_with_the_list(pair):
    dec = TreeGraftDecoder(pair, DecodeConfig(clock=CLOCK))
    with pytest.raises(TreeGraftError, match="step.expand"):
        with dec.hooks({"step.grow": print}):
            pass


def test_a_recorded_run_round_trips_through_parquet(pair, tmp_path):
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule="10101", budget=10, clock=CLOCK))
    with record(dec) as rec:
        g = dec.generate(PROMPT, max_new_tokens=12)
    frames = rec.to_frame()
    assert set(frames) == set(hooks_module.TABLES)
    rounds, steps, nodes, tree = frames["rounds"], frames["steps"], frames["nodes"], frames["tree"]
    assert len(rounds) == g.stats["rounds"] and len(steps) == 5 * len(rounds)
    assert list(steps["call_mid"][:5]) == [True, False, True, False, True]
    assert (tree.groupby("round")["accepted"].sum() - 1).tolist() == rounds["accepted"].tolist()
    assert (tree.groupby("round")["kept"].sum() - 1 <= 10).all()
    # every snapshot after step k holds exactly the nodes created up to step k
    for (r, k), snap in nodes.groupby(["round", "step"]):
        assert (snap["created_step"] <= k).all()
        assert len(snap) == len(tree[(tree["round"] == r) & (tree["created_step"] <= k)])
    run = load_run(rec.save(tmp_path / "run"))
    assert run.runs["output_ids"][0].tolist() == g.token_ids
    assert run.tree_at(0, 3).equals(rec.to_run().tree_at(0, 3))
    assert len(run.tree_at(1)) > 0


def test_a_recorded_run_names_the_profile_its_decoder_priced_with(pair):
    """The config a run records carries, as its clock, the name of the profile handed to the decoder
    (here a scaled one), as its rounds' `modelled_on` does, not only the name the config gave."""
    import json

    from treegraft_lab import costs

    scaled = costs.load(CLOCK).scaled(mid=0.5)
    with record(TreeGraftDecoder(pair, DecodeConfig(schedule="10101", clock=CLOCK), profile=scaled)) as rec:
        rec.decoder.generate(PROMPT, max_new_tokens=4)
    run = rec.to_run()
    assert json.loads(run.runs["config"][0])["clock"] == scaled.name != CLOCK
    assert set(run.rounds["modelled_on"]) == {scaled.name}


def test_loading_something_that_is_not_a_run_says_so(tmp_path):
    with pytest.raises(TreeGraftError, match="not a saved run"):
        load_run(tmp_path)


def test_value_pruning_records_each_nodes_acceptance_chance(pair):
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule="10101", prune="value", clock=CLOCK))
    with record(dec) as rec:
        dec.generate(PROMPT, max_new_tokens=12)
    tree = rec.to_frame()["tree"]
    root, live = tree[tree.node == 0], tree[(tree.node > 0) & tree.alive]
    assert (root.accept_chance == 1.0).all()
    assert live.accept_chance.between(0.0, 1.0).all() and live.accept_chance.notna().all()
    parent = tree.set_index(["round", "node"]).accept_chance
    assert (live.accept_chance.values <= parent.loc[list(zip(live["round"], live.parent))].values + 1e-12).all()
    with record(TreeGraftDecoder(pair, DecodeConfig(schedule="10101", clock=CLOCK))) as rec2:
        rec2.decoder.generate(PROMPT, max_new_tokens=4)
    assert rec2.to_frame()["tree"].accept_chance.isna().all()  # prune="topk" has no chances


def test_each_hook_point_has_a_typed_payload_read_as_attributes_or_as_a_mapping(pair):
    from treegraft_lab.hooks import PAYLOADS, RoundAccept, StepExpand

    assert set(PAYLOADS) == set(HOOK_POINTS)
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule="10101", prune="topk", clock="a100-paper"))
    seen = {}
    with dec.hooks({p: (lambda ev: seen.setdefault(ev.name, ev.data) and None) for p in HOOK_POINTS}):
        dec.generate([1, 2, 3, 4, 1, 2], max_new_tokens=4)
    assert set(seen) == set(HOOK_POINTS)
    expand, accept = seen["step.expand"], seen["round.accept"]
    assert isinstance(expand, StepExpand) and expand.new == expand["new"] and set(expand) >= {"pool", "frontier"}
    assert isinstance(accept, RoundAccept) and accept.info.accepted == len(accept.path) - 1
    with pytest.raises(KeyError):
        expand["no such field"]
    with pytest.raises(TypeError):
        PAYLOADS["round.prune"](kept=[0])  # a payload missing a field is refused where it is built
