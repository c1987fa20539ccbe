"""The scheduler: signals, collection replays, margin labels, the 3,265-parameter student, artifacts."""

from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from tests.test_decoder import hf_greedy
from treegraft_lab import cli, kv, measure
from treegraft_lab.baselines import autoregressive
from treegraft_lab.config import DecodeConfig, preset
from treegraft_lab.costs import DeviceProfile
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.drafters import NgramIndex
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.replay import DEEPEST, replay_all
from treegraft_lab.schedule import artifact
from treegraft_lab.schedule.adaptive import AdaptivePolicy
from treegraft_lab.schedule.context import StepContext
from treegraft_lab.schedule.policies import MaskPolicy
from treegraft_lab.schedule.signals import RELEASE_SIGNALS, SIGNALS, compute_signals
from treegraft_lab.tiny import noisy_pair, tiny_pair
from treegraft_lab.training.collect import (
    CollectConfig,
    apply_costs,
    next_state_id,
    read_shard,
    round_starts,
    state_rows,
)
from treegraft_lab.training.distill import (
    PipelineSetup,
    Student,
    canonical_states,
    check_pipeline_args,
    choose_offset,
    fit_student,
    margin_labels,
    margin_scale,
    margins,
    n_params,
    oracle_rounds,
    replay_margins,
    replay_policy,
    student_net,
    throughput,
    train_pipeline,
)
from treegraft_lab.training.value import Scaler, group_folds, input_names, student_inputs, targets
from treegraft_lab.tree import SMALL, DraftTree

pytestmark = pytest.mark.usefixtures("busy_machine")  # every test here runs beside two busy loops

L5, L25 = math.log(0.5), math.log(0.25)


# ---------------------------------------------------------------------------- signals
def hand_tree() -> DraftTree:
    """root -> a (0.5), b (0.25); a -> c (0.5, 3-gram), d (0.5, 2-gram). Two small steps done."""
    t = DraftTree.start(7)
    t.add_child(0, 11, L5, SMALL, 1, 1)  # 1: a
    t.add_child(0, 12, L25, SMALL, 1, 1)  # 2: b
    t.add_child(1, 13, L5, SMALL, 2, 3)  # 3: c
    t.add_child(1, 14, L5, SMALL, 2, 2)  # 4: d
    return t


def test_signals_on_a_hand_built_tree():
    s = compute_signals(hand_tree(), frontier=[3, 4], expanded_last=[1, 2], width=2, ngram_max=5)
    # would-be reselection: top-2 unscored by path score = root (0) and a (-0.69)
    assert s == pytest.approx({
        "mean_frontier_depth": 2.0, "frontier_leaf_ratio": 0.5, "collapse_debt": 1.5, "past_depth_ratio": 1.0,
        "reselect_overlap": 0.0, "mean_path_score": L5 / 2, "root_match": 0.0, "recent_hit_rate": 0.0,
        "score_spread": -L5, "ngram_match": 0.5,
    })


def test_signals_after_the_mid_drafter_scored_part_of_the_tree():
    t = hand_tree()
    t.mid_scored[0] = t.mid_scored[1] = True  # pool = b, c, d, all at log 0.25: b (shallower), then c
    s = compute_signals(t, frontier=[3, 4], expanded_last=[1, 2], width=2, ngram_max=5)
    assert s["collapse_debt"] == pytest.approx(0.5)
    assert s["past_depth_ratio"] == pytest.approx(0.5)
    assert s["reselect_overlap"] == pytest.approx(0.5)
    assert s["mean_path_score"] == pytest.approx(L25)
    assert s["score_spread"] == pytest.approx(0.0)


def test_signals_ignore_dead_nodes_and_absent_scores():
    t = hand_tree()
    t.kill_subtree(1)  # a, c, d dead
    t.logp[2] = -3e38  # an out-of-sub-vocabulary score: not finite for the signals
    t.refresh_scores()
    s = compute_signals(t, frontier=[3, 4], expanded_last=[1, 2], width=2, ngram_max=5)
    assert s["ngram_match"] == 0.0 and s["mean_frontier_depth"] == 0.0
    assert s["mean_path_score"] == 0.0  # only the root's score is finite
    assert all(math.isfinite(v) for v in s.values())


def test_context_signals_read_the_committed_text():
    idx = NgramIndex(nmax=5)
    idx.extend([7, 8, 9, 1, 2, 7, 8, 9])  # "7 8 9" repeats: 8 and 9 were guessed the second time
    assert idx.hits == [False, False, False, False, False, False, True, True]
    s = compute_signals(hand_tree(), frontier=[3, 4], expanded_last=[1, 2], width=2, ngram_max=5, index=idx)
    assert s["root_match"] == pytest.approx(3 / 5)  # "7 8 9" occurred before, "2 7 8 9" did not
    assert s["recent_hit_rate"] == pytest.approx(2 / 8)
    idx.extend([5])  # never seen: nothing matches a suffix ending in 5
    s = compute_signals(hand_tree(), frontier=[3, 4], expanded_last=[1, 2], width=2, ngram_max=5, index=idx)
    assert s["root_match"] == 0.0 and s["recent_hit_rate"] == pytest.approx(2 / 9)


# ---------------------------------------------------------------------------- collection
def test_the_prefix_sharing_replay_matches_every_decoder_round():
    pair = noisy_pair()
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule="mid", clock="a100-paper"))
    dec.start([5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 3, 5, 6])
    states, leaves, calls = replay_all(dec, shared_verify=False)
    assert len(states) == 31 and len(leaves) == 32 and len(calls) == 62 + 32
    s2, shared, c2 = replay_all(dec, shared_verify=True, timed=5)
    assert s2 == states and len(c2) == 62 + 5 and all(lf["check"] for lf in shared)
    assert [lf["accepted"] for lf in shared] == [lf["accepted"] for lf in leaves]
    by = {lf["schedule"]: lf for lf in leaves}
    for bits in itertools.product((0, 1), repeat=5):
        info, _ = dec.run_round(MaskPolicy(bits), commit=False)
        lf = by["".join(map(str, bits))]
        assert (info.accepted, info.nodes, info.kept + 1) == (lf["accepted"], lf["nodes"], lf["kept"])
        assert lf["n_mid"] == sum(bits) and lf["n_small"] == 5 - sum(bits)
    assert len({lf["accepted"] for lf in leaves}) > 1
    rows = state_rows(states, leaves, {"qid": "q"})
    assert len(rows) == 160
    assert all(r["a"] == int(r["schedule"][r["k"] - 1]) and r["schedule"].startswith(r["prefix"]) for r in rows)


def test_a_lagging_mid_drafter_replays_the_same_rounds_and_pays_its_backlog():
    ctx = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 3, 5, 6]
    fresh, stale = (TreeGraftDecoder(noisy_pair(), DecodeConfig(schedule="mid", clock="a100-paper")) for _ in range(2))
    fresh.start(ctx)
    stale.start(ctx)
    assert stale.lag_mid(4) == 4
    assert stale.mid.pending == ctx[-5:-1] and kv.cache_len(stale.mid.cache) == stale.mid.cached == len(ctx) - 5
    _, a, ca = replay_all(fresh, shared_verify=False)
    _, b, cb = replay_all(stale, shared_verify=False)
    assert [lf["accepted"] for lf in a] == [lf["accepted"] for lf in b]  # the same trees, the same outcomes
    mid_a = sum(lf["mid_tokens"] for lf in a)
    mid_b = sum(lf["mid_tokens"] for lf in b)
    assert mid_b == mid_a + 4 * sum(1 for lf in b if lf["n_mid"])  # each schedule's first call forwards the backlog
    assert fresh.lag_mid(10**6) == len(ctx) - 2  # never the whole cache: one token stays


def test_rows_are_priced_from_their_step_sizes_by_the_profile():
    prof = DeviceProfile("toy", {1: 20.0, 65: 84.0}, {1: 10.0, 101: 110.0}, small_ms=1.0)
    row = {"D": 3, "s1": 1, "s2": 0, "s3": 1, "size1": 11, "size2": 10, "size3": 51, "kept": 33}
    df = apply_costs(pd.DataFrame([row]), prof, {"depth": 3, "width": 10, "budget": 63})
    assert df["t_draft_ms"][0] == pytest.approx(20 + 1 + 60)  # mid(11) + one n-gram step + mid(51)
    assert df["t_verify_ms"][0] == pytest.approx(52)  # target(33)
    assert (df["t_tgt_ms"][0], df["t_mid_ms"][0]) == (pytest.approx(83.0), pytest.approx(109.0))  # target(64), mid(W*k = 100)


def test_collect_end_to_end_writes_parquet(tmp_path, tiny_llama_dir, tiny_qwen3_dir):
    out = tmp_path / "traj"
    args = ["collect", "--target", str(tiny_llama_dir), "--mid", str(tiny_qwen3_dir), "--limit", "1", "--states", "1",
            "--max-new", "6", "--out", str(out), "--quiet", "--device", "cpu", "--dtype", "float32"]
    assert cli.main(args) == 0
    assert cli.main(["collect", "--merge", "--out", str(out)]) == 0
    df = pd.read_parquet(out / "trajectories.parquet")
    assert len(df) == 160 and df["state"].nunique() == 1
    assert {f"sig_{s}" for s in SIGNALS} <= set(df.columns)
    assert {"a", "accepted", "t_draft_ms", "t_verify_ms", "meas_draft_ms", "t_tgt_ms", "t_mid_ms", "prompt_len"} <= set(df.columns)
    assert (df["t_verify_ms"] > 0).all() and (df["t_draft_ms"] > 0).all()
    prof = json.loads((out / "profile.json").read_text())
    assert prof["format"] == "treegraft-profile/1" and prof["key"]["device"] == "cpu"
    assert {f"size{k}" for k in range(1, 6)} <= set(df.columns)
    assert cli.main(["collect", "--shard", "3/2", "--out", str(out)]) == 2  # a clear error, nothing loaded


def test_a_known_answer_collection_accepts_what_verification_accepts(tmp_path, tiny_llama_dir, tiny_qwen3_dir):
    base = ["collect", "--target", str(tiny_llama_dir), "--mid", str(tiny_qwen3_dir), "--limit", "2", "--states", "2",
            "--max-new", "8", "--quiet", "--device", "cpu", "--dtype", "float32", "--exact-verify"]
    assert cli.main([*base, "--out", str(tmp_path / "v")]) == 0
    assert cli.main([*base, "--known-answer", "--out", str(tmp_path / "k")]) == 0
    v, k = (pd.read_parquet(tmp_path / d / "shard-000-of-001.parquet") for d in "vk")
    keys = ["qid", "position", "k", "prefix", "schedule"]
    v, k = (d.sort_values(keys).reset_index(drop=True) for d in (v, k))
    assert len(v) == len(k) == 2 * 2 * 160
    assert (v[keys] == k[keys]).all().all()
    assert (v["accepted"] == k["accepted"]).all() and (v["kept"] == k["kept"]).all()
    assert v["accepted"].max() > 0  # something was accepted: the comparison is not all zeros
    assert k["meas_verify_ms"].isna().all()  # nothing verified: nothing timed


def test_round_starts_are_drawn_in_the_first_max_new_tokens_and_none_lies_past_the_answers_end():
    pair, ids, cfg = tiny_pair(), [5, 6, 7, 8], CollectConfig(states=3, max_new=12)
    drawn = sorted(random.Random(0).sample(range(12), 3))
    spots, cont, full = round_starts(pair, cfg, random.Random(0), set(), ids)
    answer = autoregressive(pair, ids, max_new_tokens=drawn[-1]).token_ids
    assert spots == drawn and cont == full == answer  # the continuation reaches the last start
    end = drawn[-1] // 2  # the answer ends there: later starts are dropped, one at its end is kept
    spots, cont, _ = round_starts(pair, cfg, random.Random(0), {answer[end]}, ids)
    first = answer.index(answer[end])
    assert cont == answer[: first + 1] and spots == [j for j in drawn if j <= first] != drawn
    known = replace(cfg, known=True)
    spots, cont, full = round_starts(pair, known, random.Random(0), set(), ids)
    assert spots == drawn and len(full) == drawn[-1] + DEEPEST and cont == full[: drawn[-1]]
    assert round_starts(None, replace(cfg, warm=True), random.Random(0), set(), ids) == (drawn, [], [])


def test_a_shard_continues_after_its_stored_round_starts(tmp_path):
    assert read_shard(tmp_path / "rows.parquet", tmp_path / "calls.parquet") == ([], [], set())
    pd.DataFrame([{"qid": 7, "state": "0:4"}, {"qid": 8, "state": "0:11"}]).to_parquet(tmp_path / "rows.parquet")
    pd.DataFrame([{"state": "0:4", "ms": 1.0}]).to_parquet(tmp_path / "calls.parquet")
    rows, calls, done = read_shard(tmp_path / "rows.parquet", tmp_path / "calls.parquet")
    assert done == {"7", "8"} and calls == [{"state": "0:4", "ms": 1.0}]
    assert next_state_id(rows) == 12 and next_state_id([]) == 0


# ---------------------------------------------------------------------------- labels and student
def toy_states(D: int = 3) -> pd.DataFrame:
    """Every prefix at every step for two round starts: signal x = 0 (mid useless) and x = 1."""
    rows = []
    for x in (0.0, 1.0):
        for k in range(1, D + 1):
            for pre in itertools.product((0, 1), repeat=k - 1):
                bits = list(pre) + [0] * (D - k + 1)
                rows.append({"state": f"x{x}", "k": k, "prefix": "".join(map(str, pre)), "D": D, "prompt_len": 10,
                             "t_tgt_ms": 10.0, "t_mid_ms": 3.0, "sig_ngram_match": x,
                             **{f"s{j + 1}": b for j, b in enumerate(bits)}})
    return pd.DataFrame(rows)


def toy_eta(x: float, bits) -> float:
    """A = 1 + x * sum_j j * s_j (later mid calls help more), t = 10 + 3 * calls."""
    return (1 + x * sum((j + 1) * b for j, b in enumerate(bits))) / (10 + 3 * sum(bits))


def toy_eta_fn(D: int):
    """toy_eta as a value model: value-model inputs (`value_inputs` layout) -> eta."""

    def eta_fn(X: np.ndarray) -> np.ndarray:
        hist, x, a, fut = X[:, 6:6 + D], X[:, 6 + D], X[:, 7 + D], X[:, 8 + D:]
        k = np.rint(X[:, 4] * D).astype(int)
        full = hist + fut
        full[np.arange(len(X)), k - 1] = a
        return np.array([toy_eta(xi, b) for xi, b in zip(x, full)])

    return eta_fn


def test_margin_labels_on_a_toy_value_function_with_known_optimum():
    D, sig = 3, ["ngram_match"]
    st = toy_states(D)
    eta_fn = toy_eta_fn(D)

    y = margin_labels(eta_fn, st, sig, D)
    for (_, r), yi in zip(st.iterrows(), y):
        pre = [int(c) for c in r["prefix"]]
        best = {a: max(toy_eta(r["sig_ngram_match"], pre + [a, *f]) for f in itertools.product((0, 1), repeat=D - r["k"]))
                for a in (0, 1)}
        assert yi == pytest.approx(best[1] - best[0])
    assert (y[st["sig_ngram_match"] == 0] < 0).all()  # a useless mid drafter: never call
    x1 = st["sig_ngram_match"] == 1
    assert y[x1 & (st["k"] == 1)][0] < 0  # step 1 is worth least: 011 (6/16) beats 111 (7/19)
    assert y[x1 & (st["prefix"] == "11")][0] == pytest.approx(7 / 19 - 4 / 16)  # the last step is worth 3


def toy_replays(D: int = 3) -> pd.DataFrame:
    """Every schedule of two round starts, its outcome set by toy_eta (t = 10 + 3 calls)."""
    rows = []
    for x in (0.0, 1.0):
        for bits in itertools.product((0, 1), repeat=D):
            a, t = toy_eta(x, bits) * (10 + 3 * sum(bits)), 10 + 3 * sum(bits)
            for k in range(1, D + 1):
                rows.append({"state": f"x{x}", "k": k, "prefix": "".join(map(str, bits[: k - 1])), "D": D,
                             "schedule": "".join(map(str, bits)), "accepted": a - 1, "t_draft_ms": t - 9.0,
                             "t_verify_ms": 9.0, **{f"s{j + 1}": b for j, b in enumerate(bits)}})
    return pd.DataFrame(rows)


def test_the_relative_a_head_regresses_tokens_over_the_round_starts_all_small_tokens():
    df = toy_replays()
    y = targets(df, "relative")[:, 0]
    a = df["accepted"].to_numpy() + 1.0
    a0 = df["state"].map({"x0.0": 1.0, "x1.0": 1.0}).to_numpy()  # toy_eta: all-small emits one token
    assert y == pytest.approx(np.log(a / a0))
    assert (y[df["schedule"] == "000"] == 0).all() and y.max() > 0  # mid calls help the x = 1 start
    assert targets(df, "log")[:, 0] == pytest.approx(np.log(a)) and targets(df)[:, 0] == pytest.approx(a)
    with pytest.raises(TreeGraftError, match="all-small replay"):
        targets(df[~((df["state"] == "x1.0") & (df["schedule"] == "000"))], "relative")


def test_an_unknown_a_head_or_no_cost_copy_is_refused_before_training():
    with pytest.raises(TreeGraftError, match="a_head 'exp'"):
        train_pipeline(toy_replays(), None, "tiny", a_head="exp")
    with pytest.raises(TreeGraftError, match="cost_copies 0"):
        train_pipeline(toy_replays(), None, "tiny", cost_copies=0)


def test_replay_margins_read_the_best_realised_future_of_each_choice():
    D = 3
    df = toy_replays(D)
    st = canonical_states(df)
    y = replay_margins(df, st, D)
    for (_, r), yi in zip(st.iterrows(), y):
        x, pre = float(r["state"][1:]), [int(c) for c in r["prefix"]]
        best = {a: max(toy_eta(x, pre + [a, *f]) for f in itertools.product((0, 1), repeat=D - r["k"])) for a in (0, 1)}
        assert yi == pytest.approx(best[1] - best[0])
    assert (y[st["state"] == "x0.0"] < 0).all()
    with pytest.raises(TreeGraftError, match="both a call and a skip"):
        replay_margins(df[df["schedule"] != "111"], st, D)  # the state "11" at k = 3 lost its call


def test_the_teachers_margins_come_from_the_value_model_or_from_the_replays():
    D, sig = 3, ["ngram_match"]
    st = toy_states(D)
    val = SimpleNamespace(eta=toy_eta_fn(D))
    assert margins(PipelineSetup(st, sig, D), val, st, st) == pytest.approx(margin_labels(val.eta, st, sig, D))
    df = toy_replays(D)
    replayed = canonical_states(df)
    y = margins(PipelineSetup(df, sig, D, teacher="replay"), None, df, replayed)  # no value model read
    assert y == pytest.approx(replay_margins(df, replayed, D))
    # only the relative head's margins in ms per token are scaled, by the round start's all-small tokens
    assert margin_scale(PipelineSetup(df, sig, D, a_head="relative"), replayed) is None
    scale = margin_scale(PipelineSetup(df, sig, D, a_head="relative", margin_unit="ms-per-token"), replayed)
    assert scale == pytest.approx(np.ones(len(replayed)))  # toy_eta: all-small emits one token
    with pytest.raises(TreeGraftError, match="teacher 'oracle': use value or replay"):
        check_pipeline_args("linear", "oracle", "tokens-per-ms", None)
    with pytest.raises(TreeGraftError, match="margin unit 'ms'"):
        check_pipeline_args("linear", "value", "ms", None)


def test_the_student_has_exactly_3265_parameters():
    assert n_params(student_net(17)) == 3265 == artifact.PARAMS
    assert len(input_names(RELEASE_SIGNALS, 5)) == 17


def test_grouped_folds_never_split_a_prompt():
    groups = [f"p{i % 23}" for i in range(500)]
    folds = group_folds(groups, 5, seed=1)
    assert set(folds) == set(range(5))
    assert all(len(set(folds[np.array(groups) == g])) == 1 for g in set(groups))


def test_replaying_a_rule_picks_its_schedule_on_collected_rows():
    rows = []
    for sched in ("".join(b) for b in itertools.product("01", repeat=2)):
        for k in (1, 2):
            rows.append({"state": "r", "k": k, "prefix": sched[: k - 1], "D": 2, "schedule": sched,
                         "s1": int(sched[0]), "s2": int(sched[1]), "accepted": int(sched, 2), "t_draft_ms": 1.0,
                         "t_verify_ms": 1.0, "qid": "q", "category": "c"})
    df = pd.DataFrame(rows)
    out = replay_policy(df, lambda st: (st["k"] == 2).to_numpy(), 2)
    assert out["schedule"].tolist() == ["01"] and out["accepted"].tolist() == [1]
    assert len(canonical_states(df)) == 3


def test_modelled_throughput_is_tokens_over_time_per_sampled_position():
    # two positions: 1 token in 100 ms, 4 tokens in 100 ms -> 62.5 ms per token on average
    out = pd.DataFrame({"accepted": [0, 3], "t_draft_ms": [10.0, 20.0], "t_verify_ms": [90.0, 80.0]})
    assert throughput(out) == pytest.approx(1000 / 62.5)


def test_rules_are_fitted_on_the_schedulers_objective_not_on_summed_tokens_and_time():
    from treegraft_lab.schedule.rules import fit

    # two round starts, one step, both with a 3-token match; calling (tau=4) pays at r1, not at r2
    outcome = {("r1", "0"): (0, 10.0), ("r1", "1"): (9, 20.0), ("r2", "0"): (0, 100.0), ("r2", "1"): (0, 130.0)}
    rows = pd.DataFrame([{"state": st, "k": 1, "prefix": "", "schedule": sch, "D": 1, "sig_root_match": 0.6,
                          "sig_mean_path_score": 0.0, "accepted": a, "t_draft_ms": t - 5.0, "t_verify_ms": 5.0}
                         for (st, sch), (a, t) in outcome.items()])
    got = fit(rows, "rule:match", grid=(0, 4))
    never, always = (throughput(rows[rows["schedule"] == s]) for s in "01")
    assert [r["tokens_per_s"] for r in got["grid"]] == [never, always] == [1000 / 55, 1000 / 66]  # mean ms per token
    assert got["value"] == 0  # summed, 11 tokens in 150 ms would have beaten 2 in 110 ms: tau=4


def test_the_oracle_maximises_modelled_tokens_per_second_of_the_whole_set():
    first = pd.DataFrame({"state": ["r1", "r1", "r2", "r2"], "schedule": ["0", "1", "0", "1"], "k": 1,
                          "accepted": [0, 9, 0, 0], "t_draft_ms": [0.5, 10, 50, 60], "t_verify_ms": [0.5, 10, 50, 60]})
    best = oracle_rounds(first, ["state"])
    assert best.set_index("state")["schedule"].to_dict() == {"r1": "0", "r2": "0"}  # 1 token/ms, 0.01 tokens/ms
    combos = [first.iloc[[i, j]] for i in (0, 1) for j in (2, 3)]
    assert throughput(best) == pytest.approx(max(throughput(c) for c in combos))


# ---------------------------------------------------------------------------- artifact and policy
def make_artifact(folder, pair: str = "tiny", depth: int = 5, profile_class: str = "cpu-float32", prune: str = "topk",
                  margin=lambda x: x[:, 0] - x[:, 16] + 0.5, **meta):
    """A scheduler artifact whose student is fitted to `margin` (of the 17 inputs, `input_names`);
    `meta`: more of what it records (e.g. growth="lookup", small="suffix": the trees it is for)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 17)).astype(np.float32) * 3 + 1
    y = margin(x)
    stu = fit_student(x, y, steps=60)
    lin = [m for m in stu.net if isinstance(m, torch.nn.Linear)]
    w = {f"l{i + 1}.{p}": getattr(m, p).detach() for i, m in enumerate(lin) for p in ("weight", "bias")}
    sig = list(RELEASE_SIGNALS)
    art = artifact.SchedulerArtifact(pair, depth, input_names(sig, depth), sig, w, stu.xs.mean.tolist(),
                                     stu.xs.std.tolist(), stu.y_mean, stu.y_std,
                                     {"candidates": list(SIGNALS), "profile_class": profile_class, "prune": prune, **meta})
    artifact.save(art, folder)
    return stu, x


def test_artifact_round_trip_and_the_online_policy_agree_with_the_student(tmp_path):
    stu, x = make_artifact(tmp_path)
    art = artifact.load(tmp_path)
    assert art.params == 3265 and art.signals == list(RELEASE_SIGNALS) and art.meta["candidates"] == list(SIGNALS)
    pol = AdaptivePolicy(art)
    want = stu.score(x[:20])
    got = [pol.score(list(map(float, row))) for row in x[:20]]
    assert got == pytest.approx(want.tolist(), rel=1e-4, abs=1e-4)


def test_online_features_match_the_training_features(tmp_path):
    make_artifact(tmp_path)
    pol = AdaptivePolicy(artifact.load(tmp_path))
    t = hand_tree()
    ctx = StepContext(k=3, depth=5, history=[1, 0], tree=t, frontier=[3, 4], expanded_last=[1, 2], prompt_len=42,
                      t_tgt_ms=30.0, t_mid_ms=12.0, width=2, ngram_max=5)
    sig = ctx.signals()
    row = pd.DataFrame([{"k": 3, "prompt_len": 42, "t_tgt_ms": 30.0, "t_mid_ms": 12.0, "s1": 1, "s2": 0, "s3": 1, "s4": 1,
                         "s5": 0, **{f"sig_{s}": v for s, v in sig.items()}}])
    assert pol.features(ctx) == pytest.approx(student_inputs(row, RELEASE_SIGNALS, 5)[0].tolist(), rel=1e-6)
    decision = pol.decide(ctx)
    assert decision == (pol.last_score > 0) and math.isfinite(pol.last_score)


def test_adaptive_schedule_decodes_losslessly_with_an_artifact(tmp_path):
    make_artifact(tmp_path, pair="tiny-llama")
    pair = noisy_pair()
    ids = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]
    here = measure.resolve("wall", pair)  # this CPU's profile: the artifact's class, cpu-float32
    g = TreeGraftDecoder(pair, preset("full", schedule="adaptive", scheduler_path=str(tmp_path)), profile=here).generate(ids, max_new_tokens=12)
    assert g.token_ids == hf_greedy(pair.target, ids, 12)
    assert sum(r.mid_calls for r in g.rounds) > 0


@pytest.mark.parametrize("damage, words", [
    ("weights", "unusable"), ("json", "not valid JSON"), ("shape", "expected"), ("format", "not a"),
    ("signals", "unknown signals"), ("nan", "non-finite"), ("missing", "no scheduler artifact"),
])
def test_corrupt_artifacts_give_a_clear_error(tmp_path, damage, words):
    make_artifact(tmp_path)
    meta = tmp_path / artifact.META_NAME
    doc = json.loads(meta.read_text())
    if damage == "weights":
        (tmp_path / artifact.STUDENT_NAME).write_bytes(b"\x00garbage" * 10)
    elif damage == "json":
        meta.write_text("{not json")
    elif damage == "shape":
        from safetensors.torch import save_file

        save_file({"l1.weight": torch.zeros(64, 16)}, str(tmp_path / artifact.STUDENT_NAME))
    elif damage in ("format", "signals", "nan"):
        doc.update({"format": {"format": "other/9"}, "signals": {"signals": ["a", "b", "c", "d", "e", "f"]},
                    "nan": {"x_std": [float("nan")] * 17}}[damage])
        meta.write_text(json.dumps(doc))
    elif damage == "missing":
        meta.unlink()
    with pytest.raises(TreeGraftError, match=words):
        AdaptivePolicy.for_pair(None, DecodeConfig(schedule="small", scheduler_path=str(tmp_path)))


def test_a_mismatched_artifact_gives_a_clear_error(tmp_path, monkeypatch):
    make_artifact(tmp_path, pair="tiny")
    with pytest.raises(TreeGraftError, match="depth 5"):
        AdaptivePolicy.for_pair(None, DecodeConfig(depth=4, schedule="small", scheduler_path=str(tmp_path)))
    pair = tiny_pair("llama")
    pair.name = "another-pair"
    make_artifact(tmp_path / "cpu-float32-topk", pair="tiny")
    monkeypatch.setattr("treegraft_lab.schedule.adaptive.artifact_dir", lambda name: tmp_path)
    here = measure.resolve("wall", pair)  # this CPU's profile, class cpu-float32
    with pytest.raises(TreeGraftError, match="trained for pair 'tiny'"):
        TreeGraftDecoder(pair, preset("full", schedule="adaptive"), profile=here)
    with pytest.raises(TreeGraftError, match="no scheduler for pair 'another-pair' on profile 'cpu-float32' with "
                                             "prune='value'.*trained ones: cpu-float32-topk"):
        TreeGraftDecoder(pair, preset("full", schedule="adaptive", prune="value"), profile=here)


def test_scheduler_info_reports_the_artifact(tmp_path, capsys):
    make_artifact(tmp_path)
    assert cli.main(["scheduler", "info", "--path", str(tmp_path), "--no-measure", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params"] == 3265 and len(out["selected"]) == 6 and len(out["candidates"]) == 10


def test_scheduler_compare_merges_shards_into_one_table(tmp_path, capsys):
    def row(cat, s, tokens, seconds):
        return {"qid": f"{cat}-{s}", "category": cat, "schedule": s, "tokens": tokens, "seconds": seconds}

    a = {"rows": [row("code", "small", 100, 10.0), row("code", "adaptive", 100, 8.0)], "schedules": ["small", "adaptive"]}
    b = {"rows": [row("qa", "small", 50, 10.0), row("qa", "adaptive", 50, 12.0)], "schedules": ["small", "adaptive"]}
    for name, part in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_text(json.dumps(part))
    out = tmp_path / "all.json"
    assert cli.main(["scheduler", "compare", "--merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                     "--json", str(out)]) == 0
    table = json.loads(out.read_text())["tokens_per_s"]
    assert table["overall"] == {"small": 150 / 20.0, "adaptive": 150 / 20.0}
    assert table["code"]["adaptive"] == 100 / 8.0 and table["qa"]["adaptive"] == 50 / 12.0
    assert "overall" in capsys.readouterr().out


def test_the_margin_offset_is_raised_until_harmful_calls_stop():
    """D = 1 round starts where a mid call adds 0.1 tokens for 50 ms more: a student whose margin
    is 0.7 everywhere calls at offsets 0 .. 0.5 and stops from 1.0 on: the CV must stop it."""
    rows = []
    for i in range(6):
        for sched, acc, t in (("0", 1, 20.0), ("1", 1.1, 70.0)):
            rows.append({"state": f"s{i}", "qid": f"q{i}", "category": "c", "k": 1, "prefix": "", "D": 1,
                         "schedule": sched, "s1": int(sched), "a": int(sched), "accepted": acc, "t_draft_ms": t,
                         "t_verify_ms": 30.0, "prompt_len": 10, "t_tgt_ms": 30.0, "t_mid_ms": 10.0,
                         "sig_ngram_match": 0.5})
    df = pd.DataFrame(rows)
    net = student_net(8)
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
    always = Student(net, Scaler(np.zeros(8, np.float32), np.ones(8, np.float32)), y_mean=0.7, y_std=1.0)
    tau, table = choose_offset([(always, df)], ["ngram_match"], 1, scale=1.0)
    assert tau == 5.0  # every offset from 1 up stops the calls: the largest (fewest calls) is kept
    assert table["0 std"] < table["1 std"] == table["5 std"]
    df.loc[df["schedule"] == "1", "accepted"] = 5.0  # now the call pays: no offset is needed
    tau, table = choose_offset([(always, df)], ["ngram_match"], 1, scale=1.0)
    assert tau == 0.5 and table["0.5 std"] > table["1 std"]  # the largest offset that still makes the paying calls


def test_a_warm_collection_reaches_its_round_starts_by_decoding(tmp_path, tiny_llama_dir, tiny_qwen3_dir):
    out = tmp_path / "warm"
    args = ["collect", "--target", str(tiny_llama_dir), "--mid", str(tiny_qwen3_dir), "--limit", "1", "--states", "2",
            "--max-new", "12", "--out", str(out), "--quiet", "--device", "cpu", "--dtype", "float32", "--warm",
            "--prune", "value"]
    assert cli.main(args) == 0 and cli.main(["collect", "--merge", "--out", str(out)]) == 0
    df = pd.read_parquet(out / "trajectories.parquet")
    info = json.loads((out / "trajectories.json").read_text())
    assert info["prune"] == "value" and info["shard_meta"][0]["collect"]["warm"] is True
    assert df["state"].nunique() >= 1 and len(df) == 160 * df["state"].nunique()
    assert (df.groupby("state")["position"].first() >= 0).all()


def test_an_offset_gain_the_folds_disagree_on_is_not_taken():
    """Two folds: a mid call adds 18 tokens for 50 ms in one (worth it) and 1.2 in the other (not
    worth it): pooled, calling wins, but within one standard error: the student does not call."""
    def fold(gain: float, tag: str) -> pd.DataFrame:
        rows = []
        for i in range(4):
            for sched, acc, t in (("0", 1.0, 20.0), ("1", 1.0 + gain, 70.0)):
                rows.append({"state": f"{tag}{i}", "qid": f"{tag}{i}", "category": "c", "k": 1, "prefix": "", "D": 1,
                             "schedule": sched, "s1": int(sched), "a": int(sched), "accepted": acc, "t_draft_ms": t,
                             "t_verify_ms": 30.0, "prompt_len": 10, "t_tgt_ms": 30.0, "t_mid_ms": 10.0,
                             "sig_ngram_match": 0.5})
        return pd.DataFrame(rows)

    net = student_net(8)
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
    always = Student(net, Scaler(np.zeros(8, np.float32), np.ones(8, np.float32)), y_mean=0.7, y_std=1.0)
    folds = [(always, fold(18.0, "a")), (always, fold(1.2, "b"))]
    tau, table = choose_offset(folds, ["ngram_match"], 1, scale=1.0)
    assert table["0 std"] > table["5 std"] and tau == 5.0
    folds = [(always, fold(3.0, "a")), (always, fold(2.9, "b"))]  # both folds gain: call (offsets up to 0.5 do)
    assert choose_offset(folds, ["ngram_match"], 1, scale=1.0)[0] == 0.5


def test_margins_in_ms_per_token_keep_each_states_sign_and_weigh_slow_rounds_more():
    D, sig = 3, ["ngram_match"]
    st = toy_states(D)
    eta_fn = toy_eta_fn(D)

    per_ms = margin_labels(eta_fn, st, sig, D)
    per_token = margin_labels(eta_fn, st, sig, D, unit="ms-per-token")
    for (_, r), yi in zip(st.iterrows(), per_token):
        pre = [int(c) for c in r["prefix"]]
        best = {a: max(-1 / toy_eta(r["sig_ngram_match"], pre + [a, *f]) for f in itertools.product((0, 1), repeat=D - r["k"]))
                for a in (0, 1)}
        assert yi == pytest.approx(best[1] - best[0])
    assert (np.sign(per_token) == np.sign(per_ms)).all()  # the same best choice, other weights
    # eta in units of 2 tokens (the relative head's all-small A): half the ms per token
    assert margin_labels(eta_fn, st, sig, D, "ms-per-token", np.full(len(st), 2.0)) == pytest.approx(per_token / 2)
    df = toy_replays(D)
    rst = canonical_states(df)
    for (_, r), yi in zip(rst.iterrows(), replay_margins(df, rst, D, "ms-per-token")):
        x, pre = float(r["state"][1:]), [int(c) for c in r["prefix"]]
        best = {a: max(-1 / toy_eta(x, pre + [a, *f]) for f in itertools.product((0, 1), repeat=D - r["k"])) for a in (0, 1)}
        assert yi == pytest.approx(best[1] - best[0])
    with pytest.raises(TreeGraftError, match="margin unit 'ms'"):
        train_pipeline(toy_replays(), None, "tiny", margin_unit="ms")


def test_merged_shards_keep_every_row_in_order_and_take_the_first_shards_schedules(tmp_path):
    from treegraft_lab.commands.scheduler import merged

    def row(cat, s, tokens, seconds):
        return {"qid": f"{cat}-{s}", "category": cat, "schedule": s, "tokens": tokens, "seconds": seconds}

    a = {"rows": [row("code", "small", 10, 1.0)], "schedules": ["small"], "threads": 2}
    b = {"rows": [row("qa", "small", 30, 2.0)], "threads": 4}
    for name, part in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_text(json.dumps(part))
    res = merged([tmp_path / "a.json", tmp_path / "b.json"], "small,mid")
    assert res["rows"] == a["rows"] + b["rows"] and res["schedules"] == ["small"] and res["threads"] == [2, 4]
    assert res["tokens_per_s"] == {"overall": {"small": 40 / 3.0}, "code": {"small": 10.0}, "qa": {"small": 15.0}}
    assert merged([tmp_path / "b.json"], "small")["schedules"] == ["small"]  # no schedules recorded: --schedules


def test_scheduler_info_records_the_artifacts_meta_with_empty_defaults(tmp_path):
    from treegraft_lab.commands.scheduler import info_record

    art = SimpleNamespace(pair="tiny", params=3265, depth=5, inputs=["a"], signals=["s"], meta={"r2": {"A": 0.5}})
    out = info_record(art, tmp_path)
    assert out["path"] == str(tmp_path) and out["r2"] == {"A": 0.5} and out["selected"] == ["s"]
    assert out["cv_table"] == [] and out["margin_offset"] == {} and out["training"] == {}
