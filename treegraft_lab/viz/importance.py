"""Which tree signals say something about a round's outcome: grouped cross-validation by prompt
(`training.grouped_cv`, scikit-learn) cut to the prompts a notebook has, and each signal's importance."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from treegraft_lab.training import grouped_cv


def group_folds(groups, n_folds: int = 5, seed: int = 0) -> Any:
    """Fold index per row so that every group (prompt) sits in exactly one fold.

    `treegraft_lab.training.grouped_cv.group_folds` (scikit-learn's seeded `GroupKFold`) with the number of
    folds cut to the number of groups; a single group gets the single fold 0.
    """
    n = min(n_folds, grouped_cv.n_groups(groups))
    return grouped_cv.group_folds(groups, n, seed) if n >= 2 else np.zeros(len(groups), dtype=int)


def grouped_cv_r2(X: Any, y: Any, groups, n_folds: int = 5, seed: int = 0) -> float:
    """Out-of-fold R^2 of a ridge regression, folds grouped by prompt (no prompt in train and test).

    NaN with fewer than two groups (nothing to hold out).
    """
    n = min(n_folds, grouped_cv.n_groups(groups))
    return grouped_cv.grouped_cv_r2(X, y, groups, n, seed) if n >= 2 else float("nan")


def signal_importance(table: pd.DataFrame, signals, target: str = "accepted", n_folds: int = 5,
                      repeats: int = 5, seed: int = 0) -> pd.DataFrame:
    """Per signal: grouped-CV R^2 alone (with the step k), and held-out permutation importance.

    `table` has one row per draft step (e.g. `viz.stats.signal_table(run)`), a `run` column to
    group by, the signals and `target`. The model is scikit-learn's ridge on standardised inputs;
    folds are `GroupKFold` by run (prompt). Permutation importance = drop of the out-of-fold R^2 of
    the all-signal model when one signal is shuffled within the test folds
    (`sklearn.inspection.permutation_importance`, `repeats` shuffles). With fewer than two runs
    every R^2 is NaN.
    """
    signals = list(signals)
    y = table[target].to_numpy(float)
    groups = table["run"].to_numpy()
    k = table[["step"]].to_numpy(float)
    X = table[signals].to_numpy(float)
    n = min(n_folds, grouped_cv.n_groups(groups))
    if n >= 2:
        full, drops = grouped_cv.permutation_r2_drop(np.hstack([k, X]), y, groups, n, repeats, seed)
        drops = drops[1:]
    else:
        full, drops = float("nan"), np.full(len(signals), np.nan)
    k_only = grouped_cv_r2(k, y, groups, n_folds, seed)
    rows = []
    for i, s in enumerate(signals):
        alone = grouped_cv_r2(np.hstack([k, X[:, [i]]]), y, groups, n_folds, seed)
        rows.append({"signal": s, "cv_r2_with_k": alone, "gain_over_k": alone - k_only,
                     "permutation_drop": float(drops[i])})
    out = pd.DataFrame(rows).sort_values("gain_over_k", ascending=False, ignore_index=True)
    out.attrs.update(r2_all=full, r2_k_only=k_only, folds=max(1, n))
    return out
