"""Grouped cross-validation (scikit-learn): folds by prompt, ridge R^2, signal importance."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from treegraft_lab.training import grouped_cv
from treegraft_lab.training.value import Scaler, group_folds
from treegraft_lab.viz import importance


def test_grouped_folds_keep_every_prompt_on_one_side_of_each_split():
    rng = np.random.default_rng(0)
    groups = np.array([f"p{i}" for i in rng.integers(0, 17, 400)])
    for train, test in grouped_cv.grouped_kfold(5, seed=3).split(np.zeros((len(groups), 1)), groups=groups):
        assert not set(groups[train]) & set(groups[test])
    folds = group_folds(groups, 5, seed=3)
    assert sorted(set(folds)) == [0, 1, 2, 3, 4]
    assert all(len(set(folds[groups == g])) == 1 for g in set(groups))
    assert (folds == group_folds(groups, 5, seed=3)).all()  # seeded: the same folds every time
    with pytest.raises(ValueError, match="cannot fill"):
        group_folds(["a", "b", "a"], 5)


def test_notebook_folds_shrink_to_the_number_of_prompts():
    groups = ["a"] * 4 + ["b"] * 3 + ["c"] * 2
    folds = importance.group_folds(groups, 5)
    assert len(set(folds)) == 3 and all(len(set(folds[np.array(groups) == g])) == 1 for g in "abc")
    assert (importance.group_folds(["a", "a"], 5) == 0).all()


def test_r2_is_nan_for_a_constant_target():
    assert grouped_cv.r2(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0])) == pytest.approx(1.0)
    assert np.isnan(grouped_cv.r2(np.ones(4), np.zeros(4)))


def test_scaler_uses_standard_scaler_statistics_and_leaves_constant_columns_unscaled():
    x = np.array([[1.0, 5.0], [3.0, 5.0]], np.float32)
    sc = Scaler.fit(x)
    assert sc.mean.tolist() == [2.0, 5.0] and sc.std.tolist() == [1.0, 1.0]
    assert sc(x).tolist() == [[-1.0, 0.0], [1.0, 0.0]]


def synthetic_table(n_runs: int = 12, steps: int = 40, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = n_runs * steps
    table = pd.DataFrame({"run": np.repeat(np.arange(n_runs), steps), "step": np.tile(np.arange(1, 6), n // 5 + 1)[:n],
                          "informative": rng.normal(size=n), "noise": rng.normal(size=n)})
    table["accepted"] = 2.0 * table["informative"] - 0.1 * table["step"] + 0.3 * rng.normal(size=n)
    return table


def test_signal_importance_ranks_an_informative_signal_above_noise():
    imp = importance.signal_importance(synthetic_table(), ["noise", "informative"], n_folds=4, repeats=3)
    assert imp["signal"].tolist() == ["informative", "noise"]
    row = imp.set_index("signal")
    assert row.loc["informative", "gain_over_k"] > 0.8 and abs(row.loc["noise", "gain_over_k"]) < 0.05
    assert row.loc["informative", "permutation_drop"] > 1.0 > 0.05 > abs(row.loc["noise", "permutation_drop"])
    assert imp.attrs["folds"] == 4 and imp.attrs["r2_all"] > 0.9


def test_signal_importance_with_one_prompt_is_nan_not_an_error():
    imp = importance.signal_importance(synthetic_table(n_runs=1), ["noise", "informative"])
    assert imp.attrs["folds"] == 1 and np.isnan(imp.attrs["r2_all"]) and imp["permutation_drop"].isna().all()


def test_the_online_path_does_not_import_scikit_learn():
    code = ("import sys, treegraft_lab, treegraft_lab.decoder, treegraft_lab.schedule.policies, "
            "treegraft_lab.schedule.adaptive; print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
