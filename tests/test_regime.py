"""The regime map's replays: priced on any profile, they equal real decodes on that profile."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from treegraft_lab import costs, regime
from treegraft_lab.config import GROWTHS, DecodeConfig
from treegraft_lab.costs import SKIPPED, DeviceProfile
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.tiny import noisy_pair

PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 3, 5, 6]
STEEP = DeviceProfile("steep", {1: 5.0, 16: 20.0, 64: 80.0}, {1: 1.0, 8: 4.0, 64: 30.0}, small_ms=0.3)


def test_one_pricing_rule_for_skipped_and_empty_steps():
    prof = costs.load("a100-paper")
    assert prof.step_ms(False, SKIPPED) == 0.0 and prof.step_ms(True, SKIPPED) == 0.0
    assert prof.step_ms(True, 0) == prof.small_ms  # a mid step that forwarded nothing proposes from cached rows
    assert prof.step_ms(False, 7) == prof.small_ms and prof.step_ms(True, 7) == prof.mid_ms(7)


@pytest.fixture(scope="module")
def replays():
    pair = noisy_pair()
    cfg = DecodeConfig(depth=5, width=4, children=4, budget=24, prune="topk", small="ngram", **GROWTHS["lookup"])
    df = regime.collect(pair, [{"question_id": "q", "category": "code", "turns": [PROMPT]}], cfg, max_new=12, progress=False,
                        profile=STEEP)
    return pair, cfg, df


@pytest.mark.parametrize("schedule", ["small", "mid", "10101", "01100"])
@pytest.mark.parametrize("profile", [STEEP, "a100-paper"])
def test_replay_priced_runs_equal_real_decodes_on_the_same_profile(replays, schedule, profile):
    pair, cfg, df = replays
    prof = costs.load(profile) if isinstance(profile, str) else profile
    gen = TreeGraftDecoder(pair, replace(cfg, schedule=schedule), profile=prof).generate(PROMPT, max_new_tokens=12)
    name = {"small": "all-small", "mid": "all-mid"}.get(schedule, schedule)
    (rep,) = regime.split(df, cfg.depth)
    row = regime.price([rep], prof, [name]).iloc[0]
    assert row["tokens"] == gen.stats["new_tokens"] and row["rounds"] == gen.stats["rounds"]
    assert row["ms"] == pytest.approx(gen.stats["modelled_ms"], rel=1e-9)
    assert row["accepted"] / row["rounds"] == pytest.approx(gen.stats["accepted_per_round"])
    # the release's A: new tokens over target forwards, one verification a round plus the prefill
    a = regime.summary(regime.price([rep], prof, [name]))["A"].iloc[0]
    assert a == pytest.approx(gen.stats["new_tokens"] / (gen.stats["rounds"] + 1))


def test_the_oracle_walk_is_no_slower_than_any_fixed_mask(replays):
    _, cfg, df = replays
    reps = regime.split(df, cfg.depth)
    for prof in (STEEP, costs.load("a100-paper")):
        s = regime.summary(regime.price(reps, prof, ["all-small", "all-mid", "oracle", "best-fixed"])).set_index("schedule")
        assert s.loc["oracle", "speedup"] >= s.loc["best-fixed", "speedup"] - 1e-9
        assert s.loc["best-fixed", "speedup"] >= max(s.loc["all-small", "speedup"], s.loc["all-mid", "speedup"]) - 1e-9


def test_the_regime_command_refuses_bad_ratios_in_one_line(capsys):
    from treegraft_lab import cli

    assert cli.main(["regime", "--ratios", "0.1:x"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--ratios" in err


def test_ratio_profiles_set_the_scheduler_cost_ratio():
    from treegraft_lab.costs import scheduler_costs

    cfg = DecodeConfig(**GROWTHS["lookup"])
    for r, prof in regime.ratio_profiles(costs.load("a100-paper"), [0.02, 0.6, 1.0]):
        t_tgt, t_mid = scheduler_costs(prof, cfg)
        assert t_mid / t_tgt == pytest.approx(r) and prof.target == costs.load("a100-paper").target


def test_the_stored_replays_price_on_any_profile_without_a_model(capsys):
    from treegraft_lab import cli

    assert cli.main(["regime", "--ratios", "0.05,0.6", "--schedules", "all-small,all-mid"]) == 0
    out = capsys.readouterr().out
    assert "all-small" in out and "all-mid" in out and "0.6" in out


def test_the_markdown_map_sets_each_scheduler_beside_the_better_endpoint():
    import pandas as pd

    from treegraft_lab.regime import markdown

    rows = [("all-small", 2.0, 1.0, 0.0), ("all-mid", 1.0, 1.5, 5.0), ("oracle", 2.5, 2.0, 1.0),
            ("adaptive-family", 2.2, 1.2, 0.5)]
    m = pd.DataFrame([{"ratio": r, "schedule": s, "speedup": sp * (1 if r == 0.6 else 0.5), "speedup_pooled": po,
                       "mid_calls_per_round": c} for r in (0.1, 0.6) for s, sp, po, c in rows])
    lines = markdown(m, marks={"a100-paper": 0.601}).splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    row = dict(zip(head, (c.strip() for c in lines[3].strip("|").split("|"))))
    assert row["T_mid / T_tgt"] == "0.6 (a100-paper)" and row["oracle (calls)"] == "2.50 (1.00)"
    assert row["adaptive-family (calls)"] == "2.20 (0.50)" and row["adaptive-family / better endpoint"] == "1.100"
    assert row["pooled adaptive-family / better endpoint"] == "0.800"  # pooled, all-mid (1.5) is the better one
    assert lines[2].split("|")[1].strip() == "0.1"  # no mark more than 2% away


def test_a_switching_rule_is_decoded_on_the_map_like_an_artifact(replays):
    pair, cfg, _ = replays
    profiles = regime.ratio_profiles(STEEP, [0.1, 1.0])
    runs = regime.decode(pair, [{"question_id": "q", "category": "code", "turns": [PROMPT]}], cfg, profiles,
                         {"always": "rule:match=6", "never": "rule:match=0"}, max_new=12, progress=False)
    assert sorted(set(runs["schedule"])) == ["always", "never"] and sorted(set(runs["ratio"])) == [0.1, 1.0]
    assert (runs[runs.schedule == "always"]["mid_calls"] > 0).all() and (runs[runs.schedule == "never"]["mid_calls"] == 0).all()
    for ratio, prof in profiles:  # a rule that never calls grows all-small's trees, priced the same
        gen = TreeGraftDecoder(pair, replace(cfg, schedule="small"), profile=prof).generate(PROMPT, max_new_tokens=12)
        row = runs[(runs.schedule == "never") & (runs.ratio == ratio)].iloc[0]
        assert row["ms"] == pytest.approx(gen.stats["modelled_ms"], rel=1e-9)


def test_fixed_schedules_are_decoded_on_the_map_and_equal_their_replays(replays):
    pair, cfg, df = replays
    profiles = regime.ratio_profiles(STEEP, [0.3])
    runs = regime.decode(pair, [{"question_id": "q", "category": "code", "turns": [PROMPT]}], cfg, profiles,
                         {"all-small": "small", "10101": "10101"}, max_new=12, progress=False)
    (rep,) = regime.split(df, cfg.depth)
    priced = regime.price([rep], profiles[0][1], ["all-small", "10101"]).set_index("schedule")
    for name in ("all-small", "10101"):
        row = runs[runs.schedule == name].iloc[0]
        assert row["ms"] == pytest.approx(priced.loc[name, "ms"], rel=1e-9) and row["tokens"] == priced.loc[name, "tokens"]
    assert runs.set_index("schedule").loc["10101", "mid_calls"] > 0 == runs.set_index("schedule").loc["all-small", "mid_calls"]
    assert runs.set_index("schedule").loc["10101", "schedules"] == priced.loc["10101", "schedules"]  # round by round
    with pytest.raises(TreeGraftError, match="neither a scheduler folder nor a schedule"):
        regime.decode(pair, [], cfg, profiles, {"typo": "data/scheduler/no-such-folder"}, progress=False)


def test_step_shares_say_which_draft_steps_call_and_add_up_to_the_calls_per_round(replays):

    _, cfg, df = replays
    reps = regime.split(df, cfg.depth)
    rows = regime.priced(reps, STEEP, [0.1, 1.0], ["all-small", "10101", "oracle"])
    shares = regime.step_shares(rows).set_index(["ratio", "schedule", "step"])["share"].sort_index()
    for _, row in regime.by_ratio(rows).iterrows():
        assert shares.loc[(row["ratio"], row["schedule"])].sum() == pytest.approx(row["mid_calls_per_round"])
    assert list(shares.loc[(0.1, "10101")]) == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert shares.loc[(1.0, "all-small")].sum() == 0.0
    for rep in reps:  # the oracle's schedules, walked again round by round, are the oracle
        o = rep.oracle(STEEP)
        picks = iter(o["schedules"].split())
        assert rep.walk(STEEP, lambda j, b, p=picks: next(p)) == o


def test_the_steps_figure_draws_one_heatmap_per_schedule_with_every_share_printed(replays):
    from treegraft_lab.viz.regime import share_text, steps_figure

    _, cfg, df = replays
    rows = regime.priced(regime.split(df, cfg.depth), STEEP, [0.1, 0.6, 1.0], ["10101", "oracle"])
    shares = regime.step_shares(rows)
    fig = steps_figure(shares, ["oracle", "10101", "not-decoded"], marks={"a100-paper": 0.6})
    heat = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title().split(":")[0] for ax in heat] == ["oracle", "10101"]
    for ax, name in zip(heat, ("oracle", "10101")):
        printed = sorted(t.get_text() for t in ax.texts)
        assert printed == sorted(share_text(v) for v in shares[shares.schedule == name]["share"])
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0.1", "0.6\na100-paper", "1"]
    assert (share_text(0.0), share_text(0.004), share_text(0.44)) == ("0%", "<1%", "44%")


def test_the_stored_decodes_record_each_rounds_schedule():
    from treegraft_lab.paths import DATA_DIR

    runs = regime.load_decodes(DATA_DIR / "regime" / "smollm2-pocket-lookup-topk", "a100-paper")
    assert len(runs) and runs["schedules"].notna().all()
    for _, r in runs.iterrows():
        masks = r["schedules"].split()
        assert len(masks) == r["rounds"] and all(len(m) == 5 and set(m) <= {"0", "1"} for m in masks)
        assert sum(m.count("1") for m in masks) == r["mid_calls"]
        assert masks[0] == "00000" or r["schedule"] not in ("adaptive-family", "adaptive-single", "rule-match-2")


def test_the_regime_command_draws_the_steps_figure_from_the_stored_data(tmp_path, capsys):
    from treegraft_lab import cli

    out = tmp_path / "steps.png"
    assert cli.main(["regime", "--ratios", "0.0437,0.6", "--schedules", "all-small,oracle", "--steps-figure", str(out)]) == 0
    assert f"steps figure: {out}" in capsys.readouterr().out
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


FLAT_MID = DeviceProfile("flat-mid", {1: 10.0, 16: 14.0, 64: 40.0}, {1: 6.0, 500: 6.0}, small_ms=0.5)


def made_up_replays(seed: int, length: int = 7, depth: int = 2) -> regime.Replays:
    """Every schedule replayed at every start of a 7-token answer: random acceptance, kept nodes,
    step sizes and mid-drafter tails (what the walk carries as the backlog)."""
    import random

    import pandas as pd

    rng, rows = random.Random(seed), []
    for pos in range(length):
        for m in regime.masks(depth):
            calls = m.count("1")
            rows.append({"qid": "q", "category": "c", "length": length, "pos": pos, "schedule": m,
                         "accepted": rng.randint(0, 1 + 2 * calls), "kept": rng.randint(2, 64), "backlog": 0,
                         "tail": rng.randint(0, 2) if calls else -1, **{f"size{k + 1}": rng.randint(1, 60) for k in range(depth)}})
    return regime.Replays(pd.DataFrame(rows), depth)


def cheapest_walk_ms(rep: regime.Replays, profile: DeviceProfile, j: int = 0, backlog: int = 0) -> float:
    """The least modelled time over every walk (every sequence of one schedule per round), each
    round priced with the backlog it really carries."""
    from treegraft_lab.replay import leaf_ms

    if j >= rep.length:
        return 0.0
    best = float("inf")
    for m in regime.masks(rep.depth):
        lf = rep.rows[(j, m)]
        acc, tail = int(lf["accepted"]), int(lf["tail"])
        rest = cheapest_walk_ms(rep, profile, j + acc + 1, tail if tail >= 0 else backlog + acc + 1)
        best = min(best, sum(leaf_ms(profile, lf, rep.depth, backlog)) + rest)
    return best


def best_ratio_now(rep: regime.Replays, profile: DeviceProfile, j: int, backlog: int) -> str:
    """The schedule with the most tokens per ms in this round alone (a greedy walk's choice)."""
    from treegraft_lab.replay import leaf_ms

    def ratio(m: str) -> float:
        lf = rep.rows[(j, m)]
        return (int(lf["accepted"]) + 1) / sum(leaf_ms(profile, lf, rep.depth, backlog))

    return max(regime.masks(rep.depth), key=ratio)


def test_the_oracle_walk_is_the_cheapest_of_all_walks():
    """With a mid curve flat over backlogs (where `Replays.oracle` says it is exact) the oracle's
    walk costs what an exhaustive search over every walk finds; on these replays the best fixed
    mask and the round-by-round best ratio are often slower, so the search has something to find."""
    beaten = 0
    for seed in range(10):
        rep = made_up_replays(seed)
        best = cheapest_walk_ms(rep, FLAT_MID)
        out = rep.oracle(FLAT_MID)
        assert out["ms"] == pytest.approx(best, rel=1e-12), seed
        assert out["tokens"] == rep.length and len(out["schedules"].split()) == out["rounds"]
        fixed = min(rep.walk(FLAT_MID, lambda j, b, m=m: m)["ms"] for m in regime.masks(rep.depth))
        greedy = rep.walk(FLAT_MID, functools.partial(best_ratio_now, rep, FLAT_MID))["ms"]
        beaten += fixed > best + 1e-9 and greedy > best + 1e-9
    assert beaten >= 5


def test_where_when_pays_is_a_sentence_computed_from_the_speedups_over_the_better_endpoint():
    import pandas as pd

    gain = pd.Series({0.02: 1.231, 0.0437: 1.183, 0.209: 1.030, 0.457: 0.978, 0.6: 1.017, 1.0: 1.001})
    assert regime.when_pays(gain) == (
        "At T_mid / T_tgt = 0.02–0.209 (1.030–1.231x) and 0.6 (1.017x) the family scheduler beats the better fixed "
        "endpoint (all-small or all-mid); at 0.457 (0.978x) it loses to it; at 1 (1.001x) it ties with it (within 0.5%).")
    assert regime.when_pays(gain[gain < 1]) == ("At T_mid / T_tgt = 0.457 (0.978x) the family scheduler loses to the "
                                                "better fixed endpoint (all-small or all-mid).")
    assert "not decoded" in regime.when_pays(pd.Series({0.1: float("nan")}))


def test_a_schedule_decoded_at_one_ratio_is_drawn_large_on_top_and_named_in_words():
    import pandas as pd

    from treegraft_lab.viz.regime import PANELS, regime_figure

    rows = [{"ratio": r, "schedule": s, "speedup": 3.6, "A": 3.0, "mid_calls_per_round": 1.0}
            for r in (0.2, 0.6, 1.0) for s in ("all-small", "adaptive-family")]
    rows.append({"ratio": 0.6, "schedule": "adaptive-single", "speedup": 3.6, "A": 3.0, "mid_calls_per_round": 1.0})
    fig = regime_figure(pd.DataFrame(rows))
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    single = lines["TreeGraft adaptive, single-profile scheduler (one ratio, 0.6)"]
    others = [ln for name, ln in lines.items() if ln is not single]
    assert "family scheduler (reads T_tgt, T_mid)" in lines
    assert all(single.get_zorder() > ln.get_zorder() and single.get_markersize() > ln.get_markersize() for ln in others)
    assert [ax.get_title() for ax in fig.axes[:3]] == [title for _, title in PANELS]  # the panels keep their titles


def test_capture_is_the_share_of_the_oracles_gain_over_the_better_endpoint_in_the_cells_where_it_is_large():
    import pandas as pd

    from treegraft_lab import regime

    c = pd.DataFrame({"oracle_gain": [1.2, 1.5, 1.1, 1.3], "s_gain": [1.1, 1.0, 1.09, 0.9]})
    cap = regime.capture(c, "s")
    assert cap["cells"] == 3 and cap["priced"] == 3  # 1.1x is below the 1.15x threshold
    assert cap["mean_capture"] == pytest.approx((0.5 + 0.0 + (-0.1 / 0.3)) / 3)
    assert cap["pooled_capture"] == pytest.approx((0.1 + 0.0 - 0.1) / (0.2 + 0.5 + 0.3))
    assert cap["below_098"] == 1
    assert regime.capture(c, "missing")["priced"] == 0


def test_regime_capture_json_prints_one_object_per_scheduler_from_the_stored_map(capsys):
    import json

    from treegraft_lab.cli import main

    assert main(["regime", "--capture", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    fam = out["schedulers"]["adaptive-family"]
    assert {"mean_capture", "cells", "below_098", "split"} <= set(fam)
    assert fam["cells"] >= 1 and "eval" in fam["split"]
    assert "adaptive-map" in out["schedulers"]
    assert -1 <= fam["mean_capture"] <= 1


def test_stored_decodes_keep_a_schedulers_runs_at_other_ratios_and_replace_those_at_the_new_ones(tmp_path):
    import pandas as pd

    from treegraft_lab.commands.regime import store_decodes

    path = tmp_path / "decodes-a100-paper-x.parquet"
    store_decodes(path, pd.DataFrame({"ratio": [0.1, 0.6], "ms": [1.0, 2.0]}), [0.1, 0.6])
    store_decodes(path, pd.DataFrame({"ratio": [0.6, 1.0], "ms": [3.0, 4.0]}), [0.6, 1.0])
    got = pd.read_parquet(path)
    assert got.to_dict("records") == [{"ratio": 0.1, "ms": 1.0}, {"ratio": 0.6, "ms": 3.0}, {"ratio": 1.0, "ms": 4.0}]


def test_an_interrupted_collect_and_decode_says_how_much_of_each_is_stored():
    from types import SimpleNamespace

    from treegraft_lab.commands.regime import stored_words

    journal = SimpleNamespace(count=lambda prefix: {"collect/": 3, "decode/": 5}[prefix])
    both = SimpleNamespace(collect=True, decode=True)
    assert stored_words(both, journal, 4, 2, 3) == \
        "3 of 4 prompts replayed and 5 of 24 decodes (a prompt at a ratio with a scheduler)"
    assert stored_words(SimpleNamespace(collect=True, decode=False), journal, 4, 2, 3) == "3 of 4 prompts replayed"
