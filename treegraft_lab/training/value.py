"""The offline value system f_theta and the grouped cross-validation that picks the signals.

Inputs. The student's 17 values (see `student_inputs`) followed by the decision a_k and the future
bits tau_{k+1:D} (D slots, zero at steps <= k): the value model sees everything the student sees
plus the rest of the schedule. Targets: A (tokens the round emits: accepted + bonus), log t_D and
log t_V (ms; logs because a draft without mid calls costs ~1 ms and one with five ~100x more).
eta_hat = A_hat / (t_D_hat + t_V_hat), in tokens per ms.

Cost augmentation. Every round start is re-timed under a few cost profiles drawn from a grid of
scalings of the collection's profile (mid-step and verification costs scaled independently), so
the value model, and the student after it, learn how the decision depends on T_tgt and T_mid
instead of seeing one constant cost pair.

Signal ranking: 5-fold GroupKFold by prompt (scikit-learn's, prompts shuffled with a seed; the
folds and R^2 come from `treegraft_lab.training.grouped_cv`, shared with the workbench). For each
candidate signal, the held-out R^2 of A with the base inputs plus that one signal, minus the
base R^2 ("gain"), and the R^2 lost when it is dropped from all ten ("drop"). Signals are
ranked by gain (ties: drop).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from sklearn.model_selection import PredefinedSplit
from sklearn.preprocessing import StandardScaler
from torch import nn

from treegraft_lab.costs import DeviceProfile
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.training.collect import apply_costs
from treegraft_lab.training.grouped_cv import group_folds, r2

CONTEXT = ("log1p_prompt_len", "t_tgt_ms", "t_mid_ms", "log_tgt_over_mid", "k_over_D", "calls_over_D")
AGREEMENT = "mid_agreement"  # the optional 7th context input: the mid drafter's greedy agreement with the target
MID_SCALES = (0.5, 0.7, 1.0, 1.4, 2.0)
TGT_SCALES = (0.7, 1.0, 1.4, 2.0)  # a loaded machine slows verification too


# ---------------------------------------------------------------------------- inputs
def input_names(signals: Sequence[str], D: int, agreement: bool = False) -> list[str]:
    """Names of the student's inputs: context (with `agreement`, the mid drafter's agreement after it),
    history bits, signals (17 for D = 5 and 6 signals, 18 with the agreement)."""
    return [*CONTEXT, *([AGREEMENT] if agreement else []), *(f"hist{j + 1}" for j in range(D)), *signals]


def _bits(df: pd.DataFrame, D: int) -> np.ndarray:
    return df[[f"s{j + 1}" for j in range(D)]].to_numpy(np.float32)


def student_inputs(df: pd.DataFrame, signals: Sequence[str], D: int) -> np.ndarray:
    """[n, 6 + D + len(signals)] float32, in `input_names` order, from trajectory/state rows; rows with a
    `mid_agreement` column (trajectories of several mid drafters) get it as a 7th context input."""
    k = df["k"].to_numpy()
    bits = _bits(df, D)
    hist = bits * (np.arange(1, D + 1)[None, :] < k[:, None])
    t_tgt, t_mid = df["t_tgt_ms"].to_numpy(float), df["t_mid_ms"].to_numpy(float)
    ctx = np.stack([np.log1p(df["prompt_len"].to_numpy(float)), t_tgt, t_mid, np.log(t_tgt / t_mid),
                    k / D, hist.sum(1) / D], axis=1)
    if AGREEMENT in df.columns:
        ctx = np.concatenate([ctx, df[[AGREEMENT]].to_numpy(float)], axis=1)
    sig = df[[f"sig_{s}" for s in signals]].to_numpy(float)
    return np.concatenate([ctx, hist, sig], axis=1).astype(np.float32)


def value_inputs(df: pd.DataFrame, signals: Sequence[str], D: int) -> np.ndarray:
    """The student's inputs, then a_k, then the future bits (D slots; zero at steps <= k)."""
    k = df["k"].to_numpy()
    bits = _bits(df, D)
    fut = bits * (np.arange(1, D + 1)[None, :] > k[:, None])
    a = bits[np.arange(len(df)), k - 1][:, None]
    return np.concatenate([student_inputs(df, signals, D), a, fut], axis=1).astype(np.float32)


A_HEADS = ("linear", "log", "relative")


def allsmall_tokens(df: pd.DataFrame, rows: pd.DataFrame | None = None) -> np.ndarray:
    """Per row of `rows` (default: `df`'s own): A of its round start's all-small schedule (the
    replay of 0...0 in `df`), the reference of the relative A head."""
    rows = df if rows is None else rows
    D = int(df["D"].iloc[0])
    a0 = df.loc[df["schedule"] == "0" * D].groupby("state")["accepted"].first() + 1.0
    missing = set(rows["state"]) - set(a0.index)
    if missing:
        raise TreeGraftError(f"{len(missing)} round starts lack the all-small replay the relative A head needs")
    return rows["state"].map(a0).to_numpy(float)


def targets(df: pd.DataFrame, a_head: str = "linear") -> np.ndarray:
    """[n, 3]: A (accepted + bonus) as the A head regresses it, log t_D, log t_V. `a_head`: "linear"
    A itself; "log" log A; "relative" log(A / A of the round start's all-small schedule): the
    round start's own level cancels, so the head spends itself on what a schedule changes."""
    a = df["accepted"].to_numpy(float) + 1.0
    head = {"linear": lambda: a, "log": lambda: np.log(a), "relative": lambda: np.log(a / allsmall_tokens(df))}
    return np.stack([head[a_head](), np.log(df["t_draft_ms"].to_numpy(float)),
                     np.log(df["t_verify_ms"].to_numpy(float))], axis=1).astype(np.float32)


def augment_costs(df: pd.DataFrame, prof: DeviceProfile, copies: int = 4, seed: int = 0,
                  decode: dict | None = None, family: Sequence[DeviceProfile] | None = None) -> pd.DataFrame:
    """Each round start re-timed under `copies` distinct scalings of `prof` drawn from the grid,
    or, with `family`, under `copies` distinct profiles of the family (`cost_profile`: its index).

    Several copies per round start keep the cost inputs from identifying a round start.
    """
    rng = np.random.default_rng(seed)
    grid = list(family) if family else [prof.scaled(mid=m, target=t) for m in MID_SCALES for t in TGT_SCALES]
    scales = [(1.0, 1.0)] * len(grid) if family else [(m, t) for m in MID_SCALES for t in TGT_SCALES]
    parts = []
    for _, sub in df.groupby("state", sort=False):
        for g in rng.choice(len(grid), size=min(copies, len(grid)), replace=False):
            (m, t), g = scales[int(g)], int(g)
            parts.append(apply_costs(sub, grid[g], decode).assign(cost_profile=g, cost_mid_scale=m, cost_tgt_scale=t))
    return pd.concat(parts, ignore_index=True)


# ---------------------------------------------------------------------------- the MLP
class ValueNet(nn.Module):
    """Shared trunk, one linear head per target (A, log t_D, log t_V), on z-scored in/outputs."""

    def __init__(self, n_in: int, hidden: int = 128, heads: int = 3) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.heads = nn.Linear(hidden, heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.heads(self.trunk(x))


@dataclass
class Scaler:
    """z-scoring with fixed statistics: (x - mean) / std."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, x: np.ndarray) -> Scaler:
        """scikit-learn's `StandardScaler` statistics (constant columns get std 1); applying them
        stays plain numpy, as in the artifact the online policy reads."""
        sc = StandardScaler().fit(x)
        return cls(sc.mean_.astype(np.float32), sc.scale_.astype(np.float32))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) / self.std).astype(np.float32)


@dataclass
class FittedValue:
    net: ValueNet
    xs: Scaler
    ys: Scaler
    a_head: str = "linear"  # what the A head predicts (`targets`)

    @torch.inference_mode()
    def predict(self, x: np.ndarray, batch: int = 65536) -> np.ndarray:
        """[n, heads] in target units."""
        out = [self.net(torch.from_numpy(self.xs(x[i:i + batch]))).numpy() for i in range(0, len(x), batch)]
        return np.concatenate(out) * self.ys.std + self.ys.mean

    def tokens(self, x: np.ndarray, p: np.ndarray | None = None) -> np.ndarray:
        """A_hat in tokens (the log head's prediction exponentiated); with the relative head, in
        units of the round start's all-small A."""
        p = self.predict(x) if p is None else p
        return np.maximum(p[:, 0], 0.0) if self.a_head == "linear" else np.exp(p[:, 0])

    def eta(self, x: np.ndarray, p: np.ndarray | None = None) -> np.ndarray:
        """eta_hat = A_hat / (t_D_hat + t_V_hat), tokens per ms (`p`: `predict(x)` if already made;
        relative head: per all-small token, so margins are shares of the round start's all-small A)."""
        p = self.predict(x) if p is None else p
        return self.tokens(x, p) / (np.exp(p[:, 1]) + np.exp(p[:, 2]))


def fit_mlp(x: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None, hidden: int = 64, steps: int = 3000,
            batch: int = 1024, lr: float = 2e-3, weight_decay: float = 1e-4, seed: int = 0,
            val_share: float = 0.15, eval_every: int = 100, a_head: str = "linear") -> FittedValue:
    """AdamW on MSE of z-scored targets, cosine decay. With `groups`, early stopping: a share of
    the groups (prompts) is held out and the weights with the best held-out loss are kept, so
    the model cannot profit from recognising prompts (prompt length is an input)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    val = np.zeros(len(x), dtype=bool)
    if groups is not None and len(np.unique(groups)) >= 5:
        names = np.unique(groups)
        val = np.isin(groups, rng.choice(names, max(1, round(val_share * len(names))), replace=False))
    xs, ys = Scaler.fit(x[~val]), Scaler.fit(y[~val])
    X, Y = torch.from_numpy(xs(x[~val])), torch.from_numpy(ys(y[~val]))
    Xv, Yv = torch.from_numpy(xs(x[val])), torch.from_numpy(ys(y[val]))
    net = ValueNet(x.shape[1], hidden, y.shape[1])
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)
    g = torch.Generator().manual_seed(seed)
    best, best_state = math.inf, None
    for step in range(steps):
        for pg in opt.param_groups:
            pg["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
        idx = torch.randint(len(X), (min(batch, len(X)),), generator=g)
        loss = ((net(X[idx]) - Y[idx]) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if len(Xv) and ((step + 1) % eval_every == 0 or step == steps - 1):
            with torch.no_grad():
                v = float(((net(Xv) - Yv) ** 2).mean())
            if v < best:
                best, best_state = v, {k: t.clone() for k, t in net.state_dict().items()}
    if best_state is not None:
        net.load_state_dict(best_state)
    return FittedValue(net.eval(), xs, ys, a_head)


def cv_r2(x: np.ndarray, y: np.ndarray, folds: np.ndarray, groups: np.ndarray | None = None,
          **fit_kw) -> np.ndarray:
    """Held-out R^2 per target column, predictions pooled over the folds."""
    pred = np.zeros_like(y)
    for tr, te in PredefinedSplit(folds).split():
        pred[te] = fit_mlp(x[tr], y[tr], None if groups is None else groups[tr], **fit_kw).predict(x[te])
    return np.array([r2(y[:, j], pred[:, j]) for j in range(y.shape[1])])


def rank_signals(df: pd.DataFrame, candidates: Sequence[str], D: int, n_folds: int = 5, seed: int = 0,
                 progress=None, **fit_kw) -> pd.DataFrame:
    """The CV table: per candidate signal, R^2 of A with base + it (gain) and all ten minus it (drop)."""
    folds = group_folds(df["qid"], n_folds, seed)
    groups = df["qid"].to_numpy()
    y = targets(df)[:, :1]
    fit_kw = {"hidden": 64, "steps": 1200, **fit_kw}

    def score(sigs: Sequence[str]) -> float:
        out = float(cv_r2(value_inputs(df, sigs, D), y, folds, groups, seed=seed, **fit_kw)[0])
        if progress:
            progress()
        return out

    base, full = score([]), score(candidates)
    rows = []
    for s in candidates:
        with_s = score([s])
        without = score([c for c in candidates if c != s])
        rows.append({"signal": s, "r2_base_plus": with_s, "gain": with_s - base, "r2_all_minus": without,
                     "drop": full - without})
    table = pd.DataFrame(rows).sort_values(["gain", "drop"], ascending=False, ignore_index=True)
    table["rank"] = np.arange(1, len(table) + 1)
    table.attrs.update(r2_base=base, r2_all=full, folds=n_folds)
    return table
