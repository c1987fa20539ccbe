"""Margin distillation: teacher labels from the value system, and the 3,265-parameter student.

Teacher margin for a canonical state (a round start, a step k and the decisions before it):
    y_k = max over tau_{k+1:D} of eta_hat(z_k, 1, tau)  -  max over tau_{k+1:D} of eta_hat(z_k, 0, tau)
The student g_psi regresses y_k (z-scored) from its 17 inputs; online it calls the mid drafter
iff g_psi(z_k) > 0. With `teacher="replay"` eta_hat is replaced by each round start's realised
tokens/ms under every replayed schedule (`replay_margins`): no value model between the replays
and the student. `replay_policy` scores any decision rule on collected trajectories: it
follows the rule down each round start's schedule tree and reads off the realised A and times.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import nn

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.rounds import tokens_per_s
from treegraft_lab.training.grouped_cv import group_folds, r2
from treegraft_lab.training.value import (
    A_HEADS,
    Scaler,
    allsmall_tokens,
    augment_costs,
    fit_mlp,
    rank_signals,
    student_inputs,
    targets,
    value_inputs,
)

HIDDEN = (64, 32)


def student_net(n_in: int = 17) -> nn.Sequential:
    """g_psi: n_in -> 64 -> 32 -> 1 with ReLUs (3,265 parameters for 17 inputs)."""
    return nn.Sequential(nn.Linear(n_in, HIDDEN[0]), nn.ReLU(), nn.Linear(HIDDEN[0], HIDDEN[1]), nn.ReLU(),
                         nn.Linear(HIDDEN[1], 1))


def n_params(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


# ---------------------------------------------------------------------------- canonical states
def canonical_states(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (round start, cost scaling, k, prefix): the decision points of the data.

    The row keeps the decision-time columns; its bits s1..sD hold the prefix (later bits zeroed).
    """
    keys = [c for c in ("state", "cost_profile", "cost_mid_scale", "cost_tgt_scale", "k", "prefix") if c in df.columns]
    st = df.drop_duplicates(keys).reset_index(drop=True).copy()
    D = int(st["D"].iloc[0])
    for j in range(1, D + 1):
        st[f"s{j}"] = np.where(j < st["k"], st[f"s{j}"], 0)
    return st


MARGIN_UNITS = ("tokens-per-ms", "ms-per-token")


def worth(eta: np.ndarray, unit: str = "tokens-per-ms") -> np.ndarray:
    """What a margin compares, from eta (tokens per ms): eta itself, or minus the ms per token
    (-1 / eta). A decode's time per token is the mean of its round starts' ms per token
    (`throughput`), so margins in ms per token add up to what a run saves; margins in tokens per
    ms weigh a copying round's many tokens far above the one-token rounds where mid calls pay."""
    if unit not in MARGIN_UNITS:
        raise TreeGraftError(f"margin unit {unit!r}: use one of {', '.join(MARGIN_UNITS)}")
    return eta if unit == "tokens-per-ms" else -1.0 / np.maximum(np.asarray(eta, dtype=float), 1e-9)


def margin_labels(eta_fn: Callable[[np.ndarray], np.ndarray], states: pd.DataFrame, signals: Sequence[str],
                  D: int, unit: str = "tokens-per-ms", scale: np.ndarray | None = None) -> np.ndarray:
    """y per canonical state: best future with a call now minus best future with a skip now.

    eta_fn maps value-model inputs (`value_inputs` layout) to eta_hat; `scale` (per state)
    multiplies it into tokens per ms (the relative A head's unit is the round start's all-small
    A); `unit`: what is compared (`worth`).
    """
    y = np.zeros(len(states))
    scale = None if scale is None else np.asarray(scale, dtype=float)
    for k, sub in states.groupby("k"):
        k = int(k)
        futs = list(itertools.product((0, 1), repeat=D - k))
        best = {}
        for a in (0, 1):
            rep = sub.loc[sub.index.repeat(len(futs))].copy()
            tiled = np.tile(np.array(futs, dtype=int).reshape(len(futs), D - k), (len(sub), 1))
            rep[f"s{k}"] = a
            for j in range(D - k):
                rep[f"s{k + 1 + j}"] = tiled[:, j]
            eta = eta_fn(value_inputs(rep, signals, D)).reshape(len(sub), len(futs))
            if scale is not None:  # states carry a RangeIndex (`canonical_states`): labels are positions
                eta = eta * scale[sub.index.to_numpy()][:, None]
            best[a] = worth(eta, unit).max(1)
        y[sub.index.to_numpy()] = best[1] - best[0]
    return y


def replay_margins(df: pd.DataFrame, states: pd.DataFrame, D: int, unit: str = "tokens-per-ms") -> np.ndarray:
    """y per canonical state read from the replays themselves instead of f_theta: the best
    realised tokens/ms (or minus ms per token, `unit`) over schedules that call now minus the
    best over those that skip, among the round start's replayed schedules (all 2^D, priced on
    the row's cost profile).

    Exact for the round start it came from, noisy as a label of the state's signals (a lucky draw
    counts in full); the student's regression averages it over similar inputs.
    """
    keys = [c for c in ("state", "cost_profile", "cost_mid_scale", "cost_tgt_scale") if c in df.columns]
    leaf = df[df["k"] == 1].drop_duplicates([*keys, "schedule"])
    eta = worth((leaf["accepted"].to_numpy(float) + 1.0) / (leaf["t_draft_ms"] + leaf["t_verify_ms"]).to_numpy(float), unit)
    sched = leaf["schedule"].astype(str)
    parts = []
    for k in range(1, D + 1):
        t = leaf[keys].copy()
        t["k"], t["prefix"], t["a"], t["eta"] = k, sched.str[: k - 1].to_numpy(), sched.str[k - 1].to_numpy(), eta
        best = t.groupby([*keys, "k", "prefix", "a"])["eta"].max().unstack("a")
        parts.append((best["1"] - best["0"]).rename("y"))
    y = pd.concat(parts)
    idx = pd.MultiIndex.from_frame(states[[*keys, "k", "prefix"]].astype({"prefix": str}))
    out = y.reindex(idx).to_numpy(float)
    if np.isnan(out).any():
        raise TreeGraftError("replay_margins: a state without both a call and a skip among its replays")
    return out


# ---------------------------------------------------------------------------- the student
class Student:
    """g_psi with its input and label normalisation."""

    def __init__(self, net: nn.Sequential, xs: Scaler, y_mean: float, y_std: float) -> None:
        self.net, self.xs, self.y_mean, self.y_std = net, xs, float(y_mean), float(y_std)

    @torch.inference_mode()
    def score(self, x: np.ndarray) -> np.ndarray:
        """De-normalised margin predictions (> 0: call the mid drafter)."""
        return self.net(torch.from_numpy(self.xs(x)))[:, 0].numpy() * self.y_std + self.y_mean


def fit_student(x: np.ndarray, y: np.ndarray, steps: int = 4000, batch: int = 512, lr: float = 3e-3,
                seed: int = 0) -> Student:
    """Adam on MSE of z-scored margins (cosine decay); inputs z-scored with the training stats."""
    torch.manual_seed(seed)
    xs = Scaler.fit(x)
    y_mean, y_std = float(y.mean()), float(y.std()) or 1.0
    X, Y = torch.from_numpy(xs(x)), torch.from_numpy(((y - y_mean) / y_std).astype(np.float32))
    net = student_net(x.shape[1])
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        for pg in opt.param_groups:
            pg["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
        idx = torch.randint(len(X), (min(batch, len(X)),), generator=g)
        loss = ((net(X[idx])[:, 0] - Y[idx]) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return Student(net.eval(), xs, y_mean, y_std)


def student_scores(student: Student, x: np.ndarray, y: np.ndarray) -> dict:
    p = student.score(x)
    return {"r2": r2(y, p), "sign_agreement": float(np.mean((p > 0) == (y > 0))), "call_rate": float(np.mean(p > 0)),
            "teacher_call_rate": float(np.mean(y > 0))}


# ---------------------------------------------------------------------------- offline replay
def replay_policy(df: pd.DataFrame, decide: Callable[[pd.DataFrame], np.ndarray], D: int) -> pd.DataFrame:
    """The schedule a decision rule picks at each round start, with its realised outcome.

    decide(states) -> bool per row, given canonical-state rows at one step k. Returns one row
    per round start: schedule, A, t_draft_ms, t_verify_ms.
    """
    keys = [c for c in ("state", "cost_profile", "cost_mid_scale", "cost_tgt_scale") if c in df.columns]
    states = canonical_states(df).set_index([*keys, "k", "prefix"]).sort_index()
    roots = df.drop_duplicates(keys)[keys]
    prefix = pd.Series([""] * len(roots), index=pd.MultiIndex.from_frame(roots))
    for k in range(1, D + 1):
        idx = [(*key, k, p) for key, p in zip(prefix.index, prefix.to_numpy())] if keys else None
        rows = states.loc[idx].reset_index()
        bits = np.asarray(decide(rows)).astype(int)
        prefix = pd.Series([p + str(b) for p, b in zip(prefix.to_numpy(), bits)], index=prefix.index)
    leaf = df[df["k"] == 1].set_index([*keys, "schedule"])
    out = leaf.loc[[(*key, s) for key, s in zip(prefix.index, prefix.to_numpy())]].reset_index()
    return out[[*keys, "schedule", "accepted", "t_draft_ms", "t_verify_ms", "qid", "category"]]


def throughput(out: pd.DataFrame) -> float:
    """Modelled decoding tokens/s of the rounds `out` (one per sampled round start, priced):
    `rounds.tokens_per_s`, the mean time per token over them."""
    return tokens_per_s(out["accepted"].to_numpy(float), (out["t_draft_ms"] + out["t_verify_ms"]).to_numpy(float))


def oracle_rounds(first: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per round start, the schedule in hindsight with the most tokens per ms.

    Under `throughput` (the mean time per token over round starts) this per-round choice is the
    exact optimum for the whole set.
    """
    eta = (first["accepted"] + 1.0) / (first["t_draft_ms"] + first["t_verify_ms"])
    return first.loc[eta.groupby([first[k] for k in keys]).idxmax().to_numpy()]


def compare_policies(df: pd.DataFrame, adaptive: pd.DataFrame,
                     masks: Sequence[str] = ("00000", "11111", "10101")) -> dict:
    """Modelled tokens/s of the adaptive rounds (from `replay_policy`), fixed masks and the
    oracle (best schedules in hindsight, an upper bound) on the same round starts `df`; overall
    and per category (`by_category`)."""
    keys = [c for c in ("state", "cost_profile", "cost_mid_scale", "cost_tgt_scale") if c in df.columns]
    first = df[df["k"] == 1]

    def table(cat: str | None) -> dict:
        def sel(d: pd.DataFrame) -> pd.DataFrame:
            return d if cat is None else d[d["category"] == cat]

        res = {"adaptive": throughput(sel(adaptive))}
        res.update({m: throughput(sel(first[first["schedule"] == m])) for m in masks})
        res["oracle"] = throughput(oracle_rounds(sel(first), keys))
        return res

    out = table(None)
    out["by_category"] = {c: table(c) for c in sorted(df["category"].unique())}
    return out


def student_decider(student: Student, signals: Sequence[str], D: int,
                    offset: float = 0.0) -> Callable[[pd.DataFrame], np.ndarray]:
    return lambda rows: student.score(student_inputs(rows, signals, D)) > offset


OFFSET_GRID = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0)  # margin offsets tried, in label standard deviations


def choose_offset(folds: list[tuple[Student, pd.DataFrame]], signals: Sequence[str], D: int,
                  scale: float) -> tuple[float, dict[str, float]]:
    """The margin offset tau (call iff g_psi > tau), chosen by the grouped CV's held-out modelled
    tokens/s with the one-standard-error rule.

    The value model's errors make small positive margins unreliable; each fold's student is
    replayed on its own held-out prompts at every offset of the grid. The offset with the best
    pooled tokens/s wins unless a larger offset (fewer mid calls) is within one standard error of
    it, the error taken over the folds' paired differences: then the largest such offset. A mid
    call must show a gain the folds agree on before the scheduler makes it.
    """
    table, per_fold = {}, {}
    for m in OFFSET_GRID:
        outs = [replay_policy(held, student_decider(stu, signals, D, m * scale), D) for stu, held in folds]
        table[f"{m:g} std"] = throughput(pd.concat(outs, ignore_index=True))
        per_fold[m] = np.array([throughput(o) for o in outs])
    best = max(OFFSET_GRID, key=lambda m: (table[f"{m:g} std"], -m))
    n = len(folds)
    for m in sorted(OFFSET_GRID, reverse=True):
        if m <= best:
            break
        diff = per_fold[best] - per_fold[m]
        se = float(np.std(diff, ddof=1) / np.sqrt(n)) if n > 1 else 0.0
        if table[f"{best:g} std"] - table[f"{m:g} std"] <= se:
            return m * scale, table
    return best * scale, table


# ---------------------------------------------------------------------------- the whole pipeline
@dataclass
class PipelineSetup:
    """What the steps of `train_pipeline` share: the priced rows and how margins are labelled."""

    dfa: pd.DataFrame  # the rows priced on every cost copy (`value.augment_costs`)
    chosen: list[str]
    D: int
    a_head: str = "linear"
    teacher: str = "value"
    margin_unit: str = "tokens-per-ms"
    seed: int = 0
    value_steps: int = 3000
    student_steps: int = 4000


@dataclass
class CrossValidation:
    """The grouped CV's held-out predictions, student scores and per-fold students."""

    X: np.ndarray
    Y: np.ndarray
    groups: np.ndarray
    pred: np.ndarray
    a_pred: np.ndarray
    eta_pred: np.ndarray
    st_scores: list[dict] = field(default_factory=list)
    fitted: list[tuple[Student, pd.DataFrame]] = field(default_factory=list)  # (student, its held-out rows)
    scales: list[float] = field(default_factory=list)  # each fold's label std


def check_pipeline_args(a_head: str, teacher: str, margin_unit: str, cost_copies: int | None) -> None:
    """Refuse an unknown value head, teacher or margin unit, or no cost copy (before any ranking)."""
    if a_head not in A_HEADS:  # before the minutes of signal ranking
        raise TreeGraftError(f"a_head {a_head!r}: use one of {', '.join(A_HEADS)}")
    if teacher not in ("value", "replay"):
        raise TreeGraftError(f"teacher {teacher!r}: use value or replay")
    if margin_unit not in MARGIN_UNITS:
        raise TreeGraftError(f"margin unit {margin_unit!r}: use one of {', '.join(MARGIN_UNITS)}")
    if cost_copies is not None and cost_copies < 1:
        raise TreeGraftError(f"cost_copies {cost_copies}: price each round start on at least 1 profile")


def choose_signals(df: pd.DataFrame, D: int, folds: int, seed: int, rank_steps: int, signals: Sequence[str] | None,
                   n_signals: int, log: Callable[[str], None]) -> tuple[pd.DataFrame, list[str]]:
    """Rank every signal by grouped CV; the given signals, else the `n_signals` best ranked."""
    from treegraft_lab.schedule.signals import SIGNALS

    log(f"ranking {len(SIGNALS)} signals by {folds}-fold grouped CV on {df['qid'].nunique()} prompts, {len(df)} rows")
    table = rank_signals(df, SIGNALS, D, folds, seed, steps=rank_steps)
    chosen = list(signals) if signals else list(table["signal"][:n_signals])
    log(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    log(f"chosen: {chosen}")
    return table, chosen


def margin_scale(s: PipelineSetup, states: pd.DataFrame) -> np.ndarray | None:
    """ms per token needs eta_hat in tokens: the relative head's is in all-small A (its
    tokens-per-ms margins stay shares of that A, as the head was introduced)."""
    return allsmall_tokens(s.dfa, states) if s.a_head == "relative" and s.margin_unit == "ms-per-token" else None


def margins(s: PipelineSetup, val, rows: pd.DataFrame, states: pd.DataFrame) -> np.ndarray:
    """The teacher's margin per canonical state of `rows`: from the value model `val`, or read
    from the rows' own replays (`teacher="replay"`)."""
    if s.teacher == "replay":
        return replay_margins(rows, states, s.D, s.margin_unit)
    return margin_labels(val.eta, states, s.chosen, s.D, s.margin_unit, margin_scale(s, states))


def cross_validate(s: PipelineSetup, df: pd.DataFrame, prof, decode: dict | None, folds: int,
                   log: Callable[[str], None]) -> CrossValidation:
    """Per grouped fold: f_theta and g_psi fitted on the other folds, scored on this one."""
    dfa, D = s.dfa, s.D
    fold = group_folds(dfa["qid"], folds, s.seed)
    X, Y = value_inputs(dfa, s.chosen, D), targets(dfa, s.a_head)
    cv = CrossValidation(X, Y, dfa["qid"].to_numpy(), np.zeros_like(Y), np.zeros(len(dfa)), np.zeros(len(dfa)))
    a_unit = allsmall_tokens(dfa) if s.a_head == "relative" else np.ones(len(dfa))  # A_hat's unit in tokens
    for f in range(folds):
        tr, te = fold != f, fold == f
        val = fit_mlp(X[tr], Y[tr], cv.groups[tr], steps=s.value_steps, seed=s.seed, a_head=s.a_head)
        cv.pred[te] = val.predict(X[te])
        cv.a_pred[te] = val.tokens(X[te], cv.pred[te]) * a_unit[te]
        cv.eta_pred[te] = val.eta(X[te], cv.pred[te]) * a_unit[te]
        st_tr, st_te = canonical_states(dfa[tr]), canonical_states(dfa[te])
        y_tr, y_te = margins(s, val, dfa[tr], st_tr), margins(s, val, dfa[te], st_te)
        stu = fit_student(student_inputs(st_tr, s.chosen, D), y_tr, steps=s.student_steps, seed=s.seed)
        cv.st_scores.append(student_scores(stu, student_inputs(st_te, s.chosen, D), y_te))
        cv.fitted.append((stu, apply_costs_like(df[df["qid"].isin(set(dfa["qid"][te]))], prof, decode)))
        cv.scales.append(float(np.std(y_tr)))
        log(f"fold {f + 1}/{folds}: student {cv.st_scores[-1]}")
    return cv


def held_out_r2(s: PipelineSetup, cv: CrossValidation) -> dict[str, float]:
    """R^2 of f_theta's held-out predictions: A, each regressed column, and eta."""
    A = s.dfa["accepted"].to_numpy(float) + 1.0
    Y, pred = cv.Y, cv.pred
    eta_true = A / (np.exp(Y[:, 1]) + np.exp(Y[:, 2]))
    # the relative head's A needs the round start's all-small A, read from the replays: name it so
    return {"A_given_allsmall" if s.a_head == "relative" else "A": r2(A, cv.a_pred),
            **({f"{s.a_head}_A": r2(Y[:, 0], pred[:, 0])} if s.a_head != "linear" else {}),
            "log_t_draft": r2(Y[:, 1], pred[:, 1]), "log_t_verify": r2(Y[:, 2], pred[:, 2]),
            "eta": r2(eta_true, cv.eta_pred)}


def margin_offset(cv: CrossValidation, s: PipelineSetup, offset: float | str,
                  log: Callable[[str], None]) -> tuple[float, float, dict]:
    """(tau, the folds' mean label std, held-out tokens/s per offset): tau given, or by CV."""
    scale = float(np.mean(cv.scales))
    if offset != "auto":
        return float(offset), scale, {}
    tau, offsets = choose_offset(cv.fitted, s.chosen, s.D, scale)
    log(f"margin offset by CV: {tau:.5f} ({tau / scale:g} label std); held-out tokens/s per offset: {offsets}")
    return tau, scale, offsets


def final_fit(s: PipelineSetup, cv: CrossValidation, tau: float):
    """f_theta on every row, then g_psi on every canonical state's margin minus tau; returns
    (value model, student, student inputs, margins)."""
    val = fit_mlp(cv.X, cv.Y, cv.groups, steps=s.value_steps, seed=s.seed, a_head=s.a_head)
    st_all = canonical_states(s.dfa)
    y_all = margins(s, val, s.dfa, st_all)
    x_all = student_inputs(st_all, s.chosen, s.D)
    stu = fit_student(x_all, y_all - tau, steps=s.student_steps, seed=s.seed)
    return val, stu, x_all, y_all


def pipeline_meta(s: PipelineSetup, table: pd.DataFrame, folds: int, cv: CrossValidation, r2s: dict,
                  offsets: tuple[float, float, dict], cmp: dict, chosen_sched: pd.DataFrame, student_train: dict,
                  y_all: np.ndarray) -> dict:
    """The artifact's account of the training: offset, signal ranking, CV scores, replays, labels."""
    from treegraft_lab.schedule.signals import SIGNALS

    tau, scale, by_offset = offsets
    return {
        "margin_offset": {"tau": tau, "label_std": scale, "chosen_by": "grouped CV" if by_offset else "given",
                          "held_out_tokens_per_s": by_offset},
        "candidates": list(SIGNALS),
        "cv_table": table.to_dict("records"),
        "cv": {"folds": folds, "grouped_by": "prompt", "r2_base": table.attrs["r2_base"], "r2_all": table.attrs["r2_all"],
               "target": "A (tokens per round)"},
        "r2": r2s,
        "a_head": s.a_head,
        "teacher": s.teacher,
        "margin_unit": s.margin_unit,
        "student_cv": {k: float(np.mean([sc[k] for sc in cv.st_scores])) for k in cv.st_scores[0]},
        "student_train": student_train,
        "replay_tokens_per_s": cmp,
        "replay_schedules": chosen_sched["schedule"].value_counts().head(8).to_dict(),
        "labels": {"states": len(y_all), "mean": float(y_all.mean()), "std": float(y_all.std()),  # one per state
                   "call_share": float((y_all > 0).mean())},
    }


def train_pipeline(df: pd.DataFrame, prof, pair: str, n_signals: int = 6, signals: Sequence[str] | None = None,
                   folds: int = 5, seed: int = 0, value_steps: int = 3000, student_steps: int = 4000,
                   rank_steps: int = 1200, offset: float | str = "auto", log: Callable[[str], None] = print,
                   decode: dict | None = None, family: Sequence | None = None, a_head: str = "linear",
                   teacher: str = "value", cost_copies: int | None = None, margin_unit: str = "tokens-per-ms") -> tuple:
    """Rank signals, fit f_theta, label margins, fit g_psi; cross-validated scores, then final fits.

    offset: the margin offset tau subtracted from the labels of the final student (so that online
    `g_psi > 0` means "teacher margin > tau"); "auto" picks it by the grouped CV (`choose_offset`).

    prof: the DeviceProfile the rows are priced with; decode: the collection's DecodeConfig
    settings (the scheduler's T_tgt / T_mid inputs depend on them). family: profiles to price the
    rows on instead of scalings of `prof` (one scheduler for all of them; `value.augment_costs`).
    a_head: "linear" (f_theta regresses A, the paper's), "log" (it regresses log A: a copying
    round's 17 tokens no longer outweigh the one-token rounds where a mid call pays) or
    "relative" (log A over the round start's all-small A: only what the schedule changes is
    regressed, and the margins become shares of that A).
    teacher: "value" (margins from f_theta, the paper's) or "replay" (`replay_margins`: each
    state's margin read from its own round start's replayed schedules; f_theta is still fitted
    and scored). cost_copies: profiles each round start is priced on (default 8 of a family, 4
    scalings of one profile; capped at the grid's size). margin_unit: what the margins compare
    (`worth`: tokens per ms, the paper's eta, or ms per token, what a run's time adds up).

    Returns (Student, FittedValue, chosen signals, meta dict for the artifact).
    """
    check_pipeline_args(a_head, teacher, margin_unit, cost_copies)
    D = int(df["D"].iloc[0])
    table, chosen = choose_signals(df, D, folds, seed, rank_steps, signals, n_signals, log)
    copies = cost_copies if cost_copies is not None else 8 if family else 4
    dfa = augment_costs(df, prof, copies=copies, seed=seed, decode=decode, family=family)
    s = PipelineSetup(dfa, chosen, D, a_head, teacher, margin_unit, seed, value_steps, student_steps)
    cv = cross_validate(s, df, prof, decode, folds, log)
    offsets = margin_offset(cv, s, offset, log)
    tau = offsets[0]
    replays = [replay_policy(held, student_decider(stu, chosen, D, tau), D) for stu, held in cv.fitted]
    r2s = held_out_r2(s, cv)
    chosen_sched = pd.concat(replays, ignore_index=True)
    cmp = compare_policies(apply_costs_like(df, prof, decode), chosen_sched)
    log(f"held-out R^2: {r2s}")
    log(f"modelled tokens/s on held-out prompts (collection costs): {cmp}")
    val, stu, x_all, y_all = final_fit(s, cv, tau)
    train_scores = student_scores(stu, x_all, y_all - tau)
    return stu, val, chosen, pipeline_meta(s, table, folds, cv, r2s, offsets, cmp, chosen_sched, train_scores, y_all)


def apply_costs_like(df: pd.DataFrame, prof, decode: dict | None = None) -> pd.DataFrame:
    """Rows priced with the training profile itself (unscaled)."""
    from treegraft_lab.training.collect import apply_costs

    return apply_costs(df, prof, decode)
