"""Grouped cross-validation on scikit-learn, shared by the scheduler's training code and the workbench.

One implementation of what both need: folds that never split a group (a prompt) between train
and test (`GroupKFold`, seeded shuffle), R^2 (`r2_score`), a standardised ridge
(`StandardScaler` + `Ridge` in a `Pipeline`), its pooled out-of-fold R^2 (`cross_val_predict`
with groups) and held-out permutation importance (`permutation_importance`).

Training and analysis code only: the online decoder path (`treegraft_lab`, `decoder`,
`schedule.policies`, `schedule.adaptive`) never imports this module, so it never needs
scikit-learn.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.base import clone
from sklearn.inspection import permutation_importance
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import GroupKFold, cross_val_predict
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler


def n_groups(groups: Sequence) -> int:
    return len(np.unique(np.asarray(groups)))


def grouped_kfold(n_folds: int = 5, seed: int = 0) -> GroupKFold:
    """`GroupKFold` with the groups shuffled by `seed` (whole groups dealt to `n_folds` folds)."""
    return GroupKFold(n_splits=n_folds, shuffle=True, random_state=seed)


def group_folds(groups: Sequence, n_folds: int = 5, seed: int = 0) -> np.ndarray:
    """Fold id (0..n_folds-1) per row from `grouped_kfold`: every group sits in exactly one fold."""
    groups = np.asarray(groups)
    if n_groups(groups) < n_folds:
        raise ValueError(f"{n_groups(groups)} groups cannot fill {n_folds} folds")
    folds = np.empty(len(groups), dtype=int)
    for f, (_, test) in enumerate(grouped_kfold(n_folds, seed).split(np.zeros((len(groups), 1)), groups=groups)):
        folds[test] = f
    return folds


def r2(y: np.ndarray, pred: np.ndarray) -> float:
    """`r2_score`, NaN (not sklearn's 0 or 1) when `y` is constant and R^2 is undefined."""
    y = np.asarray(y)
    return float(r2_score(y, pred)) if len(y) > 1 and np.ptp(y) > 0 else float("nan")


def ridge(alpha: float = 1.0) -> Pipeline:
    """Ridge regression on standardised inputs (the intercept is not penalised)."""
    return make_pipeline(StandardScaler(), Ridge(alpha=alpha))


def grouped_cv_r2(X: np.ndarray, y: np.ndarray, groups: Sequence, n_folds: int = 5, seed: int = 0,
                  model: Pipeline | None = None) -> float:
    """R^2 of out-of-fold predictions pooled over grouped folds (no group in train and test)."""
    pred = cross_val_predict(model or ridge(), X, y, groups=np.asarray(groups), cv=grouped_kfold(n_folds, seed))
    return r2(y, pred)


def permutation_r2_drop(X: np.ndarray, y: np.ndarray, groups: Sequence, n_folds: int = 5, repeats: int = 5,
                        seed: int = 0, model: Pipeline | None = None) -> tuple[float, np.ndarray]:
    """(pooled out-of-fold R^2, per column: its drop when the column is shuffled in the test folds).

    Per fold the model is fitted on the training groups and `permutation_importance` (squared
    error, `repeats` shuffles) is taken on the held-out groups; the squared-error increases are
    summed over the folds and divided by the total sum of squares of `y`, i.e. the drop of the
    pooled out-of-fold R^2.
    """
    y = np.asarray(y, dtype=float)
    groups = np.asarray(groups)
    pred, sse_up = np.zeros(len(y)), np.zeros(X.shape[1])
    for train, test in grouped_kfold(n_folds, seed).split(X, y, groups):
        fitted = clone(model or ridge()).fit(X[train], y[train])
        pred[test] = fitted.predict(X[test])
        imp = permutation_importance(fitted, X[test], y[test], scoring="neg_mean_squared_error",
                                     n_repeats=repeats, random_state=seed)
        sse_up += imp.importances_mean * len(test)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return r2(y, pred), (sse_up / ss_tot if ss_tot > 0 else np.full(X.shape[1], np.nan))
