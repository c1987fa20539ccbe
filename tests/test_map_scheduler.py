"""One scheduler across both axes of the regime map: the mid drafter's agreement as an 18th input."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.schedule import artifact
from treegraft_lab.schedule.adaptive import AdaptivePolicy
from treegraft_lab.schedule.context import StepContext
from treegraft_lab.schedule.signals import RELEASE_SIGNALS, SIGNALS
from treegraft_lab.training.distill import fit_student
from treegraft_lab.training.value import AGREEMENT, input_names, student_inputs


def make_map_artifact(folder, margin=lambda x: x[:, 6] - 0.6):
    """An 18-input artifact (the agreement at input 7) whose student is fitted to `margin`, on inputs
    around those of `ctx()` with agreements from 0.3 to 1."""
    rng = np.random.default_rng(0)
    x = (np.array(CTX_INPUTS, dtype=np.float32) + rng.normal(size=(400, 18)) * 0.3).astype(np.float32)
    x[:, 6] = rng.uniform(0.3, 1.0, size=400)
    stu = fit_student(x, margin(x), steps=400)
    lin = [m for m in stu.net if isinstance(m, torch.nn.Linear)]
    w = {f"l{i + 1}.{p}": getattr(m, p).detach() for i, m in enumerate(lin) for p in ("weight", "bias")}
    sig = list(RELEASE_SIGNALS)
    art = artifact.SchedulerArtifact("smollm2-pocket", 5, input_names(sig, 5, agreement=True), sig, w,
                                     stu.xs.mean.tolist(), stu.xs.std.tolist(), stu.y_mean, stu.y_std,
                                     {"candidates": list(SIGNALS), "profile_class": "family", "prune": "topk",
                                      "growth": "lookup"})
    artifact.save(art, folder)
    return stu


def pair_with_card(folder, agreement: float | None):
    """A stand-in for a loaded pair whose mid drafter's folder holds a card with `agreement` (None: no card)."""
    folder.mkdir(parents=True, exist_ok=True)
    if agreement is not None:
        (folder / "card.json").write_text(json.dumps({"agreement": agreement}))
    return SimpleNamespace(name="smollm2-x", mid_id=str(folder))


# `ctx()`'s inputs with the agreement slot at 0.5: log1p(40), T_tgt, T_mid, log(30 / 12), k / D, calls / D, agreement,
# the history bits, the six signals at 0.5
CTX_INPUTS = [float(np.log1p(40)), 30.0, 12.0, float(np.log(30 / 12)), 0.4, 0.2, 0.5, 1, 0, 0, 0, 0, *[0.5] * 6]


def ctx() -> StepContext:
    sig = {s: 0.5 for s in SIGNALS}
    return StepContext.from_signals(2, 5, [1], 40, 30.0, 12.0, sig)


def map_config(folder):
    """The map's trees (top-k, lookup growth) with the artifact in `folder`."""
    from dataclasses import replace

    from treegraft_lab.regime import map_config

    return replace(map_config("lookup"), schedule="adaptive", scheduler_path=str(folder))


def test_the_agreement_input_is_read_from_the_running_mid_drafters_card(tmp_path):
    make_map_artifact(tmp_path / "art")
    cfg = map_config(tmp_path / "art")
    good = AdaptivePolicy.for_pair(pair_with_card(tmp_path / "good", 0.95), cfg)
    poor = AdaptivePolicy.for_pair(pair_with_card(tmp_path / "poor", 0.40), cfg)
    assert good.features(ctx())[6] == 0.95 and poor.features(ctx())[6] == 0.40
    assert len(good.features(ctx())) == 18
    assert good.decide(ctx()) and not poor.decide(ctx())  # the student learned: call iff agreement > 0.6


def test_a_scheduler_that_needs_the_agreement_is_refused_for_a_mid_drafter_without_a_card(tmp_path):
    make_map_artifact(tmp_path / "art")
    with pytest.raises(TreeGraftError, match="zoo card"):
        AdaptivePolicy.for_pair(pair_with_card(tmp_path / "bare", None), map_config(tmp_path / "art"))
    with pytest.raises(TreeGraftError, match="agreement"):
        AdaptivePolicy(artifact.load(tmp_path / "art"))


def test_a_17_input_artifact_decides_as_before_whatever_the_mid_drafters_card_says(tmp_path):
    folder = "data/scheduler/smollm2-pocket/family-topk-lookup"
    art = artifact.load(folder)
    plain = AdaptivePolicy(art)
    cfg = map_config(folder)
    for a in (0.1, 0.99):
        pol = AdaptivePolicy.for_pair(pair_with_card(tmp_path / str(a), a), cfg)
        assert pol.features(ctx()) == plain.features(ctx()) and len(pol.features(ctx())) == 17
        assert pol.decide(ctx()) == plain.decide(ctx()) and pol.last_score == plain.last_score


def test_an_agreement_artifact_round_trips_and_is_refused_with_the_agreement_out_of_place(tmp_path):
    stu = make_map_artifact(tmp_path)
    art = artifact.load(tmp_path)
    assert art.params == artifact.params(18) == 3265 + 64 and art.inputs[6] == AGREEMENT
    meta = json.loads((tmp_path / artifact.META_NAME).read_text())
    names = meta["inputs"]
    names[6], names[7] = names[7], names[6]
    (tmp_path / artifact.META_NAME).write_text(json.dumps(meta))
    with pytest.raises(TreeGraftError, match="7th input"):
        artifact.load(tmp_path)
    assert stu is not None


def write_trajectories(folder, pair: str, qids: list[str]) -> None:
    """A two-row trajectories file of `pair` (the columns `student_inputs` reads) with its json."""
    folder.mkdir(parents=True)
    rows = [{"qid": q, "category": "qa", "state": "0:0", "k": 1, "prompt_len": 10, "t_tgt_ms": 30.0, "t_mid_ms": 10.0,
             **{f"s{j}": 0 for j in range(1, 6)}, **{f"sig_{s}": 0.0 for s in SIGNALS}} for q in qids]
    pd.DataFrame(rows).to_parquet(folder / "trajectories.parquet")
    (folder / "trajectories.json").write_text(json.dumps({"pair": pair, "profile": {"name": "a100-paper"}, "shard_meta": [
        {"split": "train", "mid_id": f"data/models/{pair}", "collect": {"decode": {"prune": "topk"}}}]}))


def test_training_across_mid_drafters_gives_each_round_start_its_drafters_card_agreement(tmp_path):
    from treegraft_lab.commands.train_scheduler import combined, read_info
    from treegraft_lab.regime import mid_agreement

    paths = []
    for pair in ("smollm2-pocket", "smollm2-cut28"):
        write_trajectories(tmp_path / pair, pair, ["qa-001"])
        paths.append(tmp_path / pair / "trajectories.parquet")
    infos = [read_info(p, "smollm2-pocket") for p in paths]
    df = combined(paths, infos, agreement=True)
    assert df["state"].nunique() == 2  # one prompt's start 0:0 of each drafter stays two round starts
    x = student_inputs(df, RELEASE_SIGNALS, 5)
    assert x.shape[1] == 18
    assert x[:, 6].tolist() == pytest.approx([mid_agreement("smollm2-pocket"), mid_agreement("smollm2-cut28")])
    assert student_inputs(df.drop(columns=[AGREEMENT]), RELEASE_SIGNALS, 5).shape[1] == 17


def test_training_refuses_trajectories_of_eval_prompts_before_reading_any(tmp_path):
    from treegraft_lab.commands.train_scheduler import read_info

    write_trajectories(tmp_path / "p", "smollm2-cut28", ["qa-041"])
    info = json.loads((tmp_path / "p" / "trajectories.json").read_text())
    info["shard_meta"][0]["split"] = "eval"
    (tmp_path / "p" / "trajectories.json").write_text(json.dumps(info))
    with pytest.raises(TreeGraftError, match="train split only"):
        read_info(tmp_path / "p" / "trajectories.parquet", "smollm2-cut28")


def stored_map_decodes(pair: str) -> pd.DataFrame:
    """adaptive-map's stored decodes of a pair at the map's answer length (the pocket drafter's in the
    `mids` subfolder of its 64-token replays)."""
    from treegraft_lab import regime

    folder = regime.replay_folder(pair)
    for f in (folder / regime.MIDS_DECODES, folder):
        path = f / "decodes-a100-paper-adaptive-map.parquet"
        if path.is_file():
            return pd.read_parquet(path)
    return pd.DataFrame(columns=["qid", "ratio", "schedule", "speedup"])


def test_the_map_command_prices_the_map_scheduler_from_its_decodes_at_every_stored_cell(capsys):
    from treegraft_lab import cli, costs, regime

    mids = list(regime.STORED_MIDS)
    ratios = [0.02, 0.209]
    assert cli.main(["regime", "--mids", ",".join(mids), "--ratios", ",".join(map(str, ratios))]) == 0
    out = capsys.readouterr().out
    ax = regime.mid_axis(mids, costs.load("a100-paper"), ratios)
    c = ax.cells.set_index(["mid", "ratio"])
    assert ax.schedulers == ["adaptive-family", "adaptive-map"]
    priced = 0
    for p in mids:
        runs = stored_map_decodes(p)
        runs = runs[runs["ratio"].round(4).isin(ratios) & runs["qid"].isin(ax.prompts)]
        assert {round(r, 4) for r in c["adaptive-map_gain"].xs(p).dropna().index} == {round(r, 4) for r in runs["ratio"]}
        for r, g in runs.groupby("ratio"):  # its mean speedup over the better endpoint's
            cell = c.loc[(p, r)]
            assert cell["adaptive-map_gain"] == pytest.approx(g["speedup"].mean() / max(cell["all-small"], cell["all-mid"]))
            priced += 1
    assert priced >= 4  # decodes of at least one drafter are stored
    assert "acceptance: " + regime.acceptance_text(regime.acceptance(ax.cells, "adaptive-map"), "adaptive-map") in out
    assert "acceptance: " + regime.acceptance_text(regime.acceptance(ax.cells, "adaptive-family"), "adaptive-family") in out


def test_the_pocket_drafters_map_decodes_stay_out_of_its_own_64_token_map():
    from treegraft_lab import regime

    runs = regime.load_decodes(regime.replay_folder("smollm2-pocket"), "a100-paper")
    assert "adaptive-map" not in set(runs["schedule"]) and len(stored_map_decodes("smollm2-pocket"))


def test_training_refuses_trajectories_of_drafters_replayed_on_other_trees(tmp_path, capsys):
    from treegraft_lab import cli

    write_trajectories(tmp_path / "a", "smollm2-pocket", ["qa-001"])
    write_trajectories(tmp_path / "b", "smollm2-cut28", ["qa-001"])
    info = json.loads((tmp_path / "b" / "trajectories.json").read_text())
    info["shard_meta"][0]["collect"]["decode"]["budget"] = 31
    (tmp_path / "b" / "trajectories.json").write_text(json.dumps(info))
    args = ["train-scheduler", "--agreement", "--trajectories", str(tmp_path / "a" / "trajectories.parquet"),
            "--trajectories", str(tmp_path / "b" / "trajectories.parquet")]
    assert cli.main(args) == 2
    assert "replayed other trees" in capsys.readouterr().err


def test_train_scheduler_takes_six_known_signals_or_the_releases_and_refuses_others():
    from treegraft_lab.commands.train_scheduler import chosen_signals

    assert chosen_signals(None) is None and chosen_signals("") is None  # the CV's top 6
    assert chosen_signals("release") == list(RELEASE_SIGNALS)
    assert chosen_signals(",".join(SIGNALS[:6])) == list(SIGNALS[:6])
    for bad in (",".join(SIGNALS[:5]), ",".join([*SIGNALS[:5], "nope"])):
        with pytest.raises(TreeGraftError, match="--signals needs 6 of"):
            chosen_signals(bad)


def test_a_family_scheduler_is_priced_on_every_base_profile_at_every_family_ratio():
    from treegraft_lab import costs
    from treegraft_lab.commands.train_scheduler import family_profiles
    from treegraft_lab.config import GROWTHS, DecodeConfig

    args = SimpleNamespace(family="a100-paper", family_ratios="0.1:1:3")
    family = family_profiles(args, "topk")
    assert len(family) == 3 and all(p.target == costs.load("a100-paper").target for p in family)
    tt, tm = zip(*(costs.scheduler_costs(p, DecodeConfig(**GROWTHS["lookup"])) for p in family))
    assert [m / t for t, m in zip(tt, tm)] == pytest.approx([0.1, 0.316, 1.0])  # log-spaced, 3 significant digits
    assert family_profiles(SimpleNamespace(family=None), "value") is None
    with pytest.raises(TreeGraftError, match="collect them with --prune topk"):
        family_profiles(args, "value")
    with pytest.raises(TreeGraftError, match="--family-ratios '1:2'"):
        family_profiles(SimpleNamespace(family="a100-paper", family_ratios="1:2"), "topk")
