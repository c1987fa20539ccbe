"""WHEN learned from the oracle: the round signals, the learned per-step scheduler, its replay walks
(equal to real decodes) and its held-out capture."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from treegraft_lab import regime
from treegraft_lab.baselines import autoregressive
from treegraft_lab.config import GROWTHS, DecodeConfig
from treegraft_lab.costs import DeviceProfile
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.schedule.context import RoundHistory
from treegraft_lab.schedule.signals import ROUND_SIGNALS, SIGNAL_WORDS, round_signals
from treegraft_lab.schedule.stepwise import STEP_FEATURES, StepwisePolicy, signal_set
from treegraft_lab.tiny import noisy_pair
from treegraft_lab.training import imitation as im

PROMPTS = [[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 3, 5, 6], [3, 4, 5, 3, 4, 6, 7, 3, 4, 5, 8, 9, 3, 4]]
CHEAP_MID = DeviceProfile("cheap-mid", {1: 5.0, 16: 20.0, 64: 80.0}, {1: 0.2, 8: 0.5, 64: 2.0}, small_ms=0.3)


def test_round_signals_follow_their_formulas():
    assert round_signals([], [], [], [], 5) == dict.fromkeys(ROUND_SIGNALS, 0.0)
    s = round_signals([2, 4, 1], [0, 2, 0], [None, 3, 0], [0.9, 0.5, 0.25], 5)
    assert s["prev_accepted"] == 1 / 5 and s["prev_mid_calls"] == 0 and s["prev_mid_share"] == 0
    assert s["target_top1"] == 0.25 and s["recent_accepted"] == pytest.approx(7 / 3 / 5)
    assert s["mid_gain_estimate"] == pytest.approx((4 - 1.5) / 5)  # mid rounds' mean minus the others'
    assert round_signals([3], [1], [2], [0.5], 5)["prev_mid_share"] == pytest.approx(2 / 3)
    assert round_signals([3], [1], [2], [0.5], 5)["mid_gain_estimate"] == 0  # only one kind of round ran
    assert all(n in SIGNAL_WORDS for n in ROUND_SIGNALS)


def test_the_decoder_keeps_each_rounds_outcome_for_the_next():
    pair = noisy_pair()
    cfg = DecodeConfig(depth=4, width=4, children=4, budget=16, prune="topk", small="ngram", schedule="1010")
    dec = TreeGraftDecoder(pair, cfg, profile=CHEAP_MID)
    gen = dec.generate(PROMPTS[0], max_new_tokens=12)
    h = dec.round_history
    assert h.accepted == [r.accepted for r in gen.rounds] and h.mid_calls == [r.mid_calls for r in gen.rounds]
    assert all(0 <= c <= a for c, a in zip(h.mid_accepted, h.accepted)) and 0 < h.signals()["target_top1"] <= 1
    assert all(math.isnan(p) for p in h.top1[:-1])  # never read: their logits were released
    seen = []
    with dec.hooks({"step.decide": lambda ev: seen.append(ev.data["ctx"].round_signals()["prev_accepted"])}):
        dec.generate(PROMPTS[0], max_new_tokens=12)
    assert seen[0] == 0 and seen[len(seen) - 1] == h.accepted[-2] / 4  # the last round reads the one before


@pytest.fixture(scope="module")
def learned():
    pair = noisy_pair()
    cfg = DecodeConfig(depth=5, width=4, children=4, budget=24, prune="topk", small="ngram", **GROWTHS["lookup"])
    prompts = [{"question_id": f"q{i}", "category": "code", "turns": [p]} for i, p in enumerate(PROMPTS)]
    df = regime.collect(pair, prompts, cfg, max_new=12, progress=False, profile=CHEAP_MID)
    sig = im.context_signals(pair, prompts, df)
    held = im.prompts_of(regime.split(df, cfg.depth), sig)
    profiles = regime.ratio_profiles(CHEAP_MID, [0.05, 0.5])  # what the ratios of stored walks stand for
    policy = im.train(held, profiles, cfg, list(signal_set("+rounds")), "imitation", dagger=1, hidden=8)
    return pair, cfg, prompts, held, profiles, policy


def test_every_start_is_replayed_so_any_walk_is_priced(learned):
    _, _, _, held, _, _ = learned
    assert all(im.complete(p) for p in held)


def test_a_replay_walk_makes_the_real_decodes_decisions_and_the_decode_is_lossless(learned):
    pair, cfg, prompts, held, profiles, policy = learned
    calls = 0
    for p, prompt in zip(held, prompts):
        for _, prof in profiles:
            walked = im.walk(p, prof, cfg, policy.decide)
            gen = TreeGraftDecoder(pair, replace(cfg, schedule=policy), prof).generate(prompt["turns"][0], max_new_tokens=12)
            assert " ".join(r.schedule for r in gen.rounds) == walked["schedules"]
            assert gen.stats["modelled_ms"] == pytest.approx(walked["ms"], rel=1e-9)
            assert gen.token_ids == autoregressive(pair, prompt["turns"][0], max_new_tokens=12).token_ids[: len(gen.token_ids)]
            calls += walked["mid_calls"]
    assert calls > 0  # the learned scheduler does call the mid drafter here


def test_the_experts_walk_is_the_oracles_speed(learned):
    _, cfg, _, held, profiles, _ = learned
    for p in held:
        for _, prof in profiles:
            out, states = im.expert_walk(p, prof, cfg, im.values(p, prof))
            assert states and all(j > 0 for _, j, _, _ in states)  # the first round asks no policy
            # the first round is all-small (the decoder asks no policy there): at most the oracle's speed
            assert out["ms"] >= p.rep.oracle(prof)["ms"] - 1e-9
            assert out["ms"] <= p.rep.walk(prof, lambda j, b: "00000")["ms"] + 1e-9


def test_the_learned_scheduler_saves_loads_and_refuses_a_bad_file(learned, tmp_path):
    *_, policy = learned
    policy.save(tmp_path / "s")
    back = StepwisePolicy.load(tmp_path / "s")
    x = [0.3] * len(policy.features)
    assert back.score(x) == pytest.approx(policy.score(x)) and back.parameters == policy.parameters < 5000
    assert set(policy.features) <= set(STEP_FEATURES)
    with pytest.raises(TreeGraftError, match="stepwise.json missing"):
        StepwisePolicy.load(tmp_path / "nothing")
    doc = json.loads((tmp_path / "s" / "stepwise.json").read_text())
    (tmp_path / "s" / "stepwise.json").write_text(json.dumps({**doc, "features": ["oracle_peek"]}))
    with pytest.raises(TreeGraftError, match="unknown inputs"):
        StepwisePolicy.load(tmp_path / "s")


def test_held_out_capture_reads_the_stored_walks_of_every_learner(learned, tmp_path):
    _, cfg, _, held, profiles, _ = learned
    walks, rows = im.learn(held, [], profiles, cfg, folds=2, dagger=0, signal_sets=("tree+costs",), log=lambda s: None)
    assert {r["learner"] for r in rows} == set(im.LEARNERS) and set(walks["qid"]) == {p.qid for p in held}
    folder = tmp_path / "held"
    regime.save(_frame(held), folder, {"split": "validation", "prompts": "test", "max_new": 12})
    walks.to_parquet(folder / im.WALKS.format(profile=CHEAP_MID.name), index=False)
    out = im.held_out_capture(folder, CHEAP_MID, cfg, n_boot=50)
    assert set(out) == {"learned-imitation:tree+costs", "learned-value:tree+costs", "learned-imitation:tree+costs+hindsight"}
    assert [n for n, c in out.items() if not c["causal"]] == ["learned-imitation:tree+costs+hindsight"]
    for row in rows:  # read back from the stored walks, the same capture as the fit computed
        cap = out[f"learned-{row['learner']}:{row['signal_set']}"]
        assert {"mean_capture", "cells", "below_098", "split", "ci95", "prompts"} <= set(cap)
        assert cap["split"].startswith("validation") and cap["prompts"] == len(held) and len(cap["ci95"]) == 2
        assert (cap["cells"], cap["below_098"]) == (row["cells"], row["below_098"])
        assert cap["mean_capture"] == pytest.approx(row["mean_capture"], nan_ok=True)


def _frame(held):
    import pandas as pd

    return pd.DataFrame([row for p in held for row in p.rep.rows.values()])


def test_round_history_counts_rounds():
    h = RoundHistory(5)
    h.add(3, 1, 2, 0.5)
    assert len(h) == 1 and h.signals()["prev_mid_share"] == pytest.approx(2 / 3)


def test_a_profile_at_a_cost_ratio_is_named_and_priced_at_that_ratio():
    from treegraft_lab import costs

    p = costs.load("a100-paper@0.1")
    t_tgt, t_mid = costs.scheduler_costs(p, regime.map_config())
    assert p.name == "a100-paper@0.1" and t_mid / t_tgt == pytest.approx(0.1)
    assert p.target == costs.load("a100-paper").target  # only the mid drafter's curve moves
    with pytest.raises(TreeGraftError, match="NAME@RATIO"):
        costs.load("a100-paper@cheap")
    with pytest.raises(TreeGraftError, match="cost ratio"):
        costs.load("a100-paper@0")


def test_schedule_learned_loads_the_named_folder_and_refuses_another_depth(learned, tmp_path):
    pair, cfg, prompts, *_, policy = learned
    policy.doc["depth"] = cfg.depth
    policy.save(tmp_path / "s")
    dec = TreeGraftDecoder(pair, replace(cfg, schedule="learned", scheduler_path=str(tmp_path / "s")), CHEAP_MID)
    assert isinstance(dec.policy, StepwisePolicy) and dec.policy.features == policy.features
    with pytest.raises(TreeGraftError, match="D = 5 draft steps"):
        TreeGraftDecoder(pair, replace(cfg, depth=4, schedule="learned", scheduler_path=str(tmp_path / "s")), CHEAP_MID)
    with pytest.raises(TreeGraftError, match="regime --learn"):
        TreeGraftDecoder(pair, replace(cfg, schedule="learned", scheduler_path=str(tmp_path / "none")), CHEAP_MID)


def test_regime_capture_json_prints_every_schedulers_capture_from_stored_data_alone(monkeypatch, capsys):
    import treegraft_lab.models as models
    from treegraft_lab import cli

    def no_model(*a, **k):
        raise AssertionError("--capture loads no model")

    monkeypatch.setattr(models, "load_pair", no_model)
    assert cli.main(["regime", "--capture", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    caps = doc["schedulers"]
    assert {"adaptive-family", "adaptive-map"} <= set(caps)  # for comparison, on the eval map over mid drafters
    learned = {n: c for n, c in caps.items() if n.startswith("learned-")}
    assert learned, "no held-out walks stored: treegraft-lab regime --learn"
    for name, c in caps.items():
        assert {"mean_capture", "cells", "below_098", "split"} <= set(c), name
    assert all(c["split"].startswith("validation") and len(c["ci95"]) == 2 for c in learned.values())
    assert caps["adaptive-family"]["split"].startswith("eval")
    assert sum(c["chosen"] for c in learned.values()) == 1 and not any(c["chosen"] and not c["causal"] for c in learned.values())


def test_schedule_learned_falls_back_to_all_small_and_says_so_off_the_settings_it_was_learned_for(learned, tmp_path, capsys):
    from treegraft_lab.schedule.policies import MaskPolicy

    pair, cfg, *_, policy = learned
    policy.doc.update(depth=cfg.depth, profile="cheap-mid")
    policy.save(tmp_path / "s")
    learned_cfg = replace(cfg, schedule="learned", scheduler_path=str(tmp_path / "s"))
    assert isinstance(TreeGraftDecoder(pair, learned_cfg, CHEAP_MID).policy, StepwisePolicy)  # its own settings
    at_ratio = replace(CHEAP_MID, name="cheap-mid@0.3")  # a cost ratio of its profile is still its profile
    assert isinstance(TreeGraftDecoder(pair, learned_cfg, at_ratio).policy, StepwisePolicy)
    for other, profile in [(replace(learned_cfg, prune="value"), CHEAP_MID),
                           (replace(learned_cfg, small="ngram+recycling"), CHEAP_MID),
                           (learned_cfg, replace(CHEAP_MID, name="another-device"))]:
        dec = TreeGraftDecoder(pair, other, profile)
        assert isinstance(dec.policy, MaskPolicy) and not any(dec.policy.bits)
        gen = dec.generate(PROMPTS[0], max_new_tokens=8)
        assert all(r.mid_calls == 0 for r in gen.rounds)
        assert gen.token_ids == autoregressive(pair, PROMPTS[0], max_new_tokens=8).token_ids
    err = capsys.readouterr().err
    assert "falls back to all-small" in err and "prune topk, this run has prune value" in err
