"""Summary plots of recorded runs (seaborn). Each function returns a matplotlib Figure.

Give one Run, or a dict {label: Run} to compare settings side by side (the label becomes the hue).
Acceptance length A counts accepted draft tokens; the bonus token is not included.
"""

from __future__ import annotations

import math

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from treegraft_lab.schedule.signals import SIGNALS

PALETTE = "colorblind"


def _runs(runs) -> dict:
    return runs if isinstance(runs, dict) else {"run": runs}


def _legend_outside(ax) -> None:
    if ax.get_legend() is not None:
        sns.move_legend(ax, "upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def _figure(ncols: int = 1, width: float = 6.4, height: float = 3.6) -> tuple[Figure, list]:
    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def acceptance_by_depth(runs) -> Figure:
    """Share of rounds whose accepted path reaches each depth d (A >= d), per setting."""
    rows = []
    for label, run in _runs(runs).items():
        acc = run.rounds["accepted"]
        depth = int(run.steps["step"].max()) if len(run.steps) else int(acc.max())
        for d in range(1, max(depth, int(acc.max()) if len(acc) else 1) + 1):
            rows.append({"setting": label, "depth": d, "share": float((acc >= d).mean()) if len(acc) else 0.0})
    df = pd.DataFrame(rows)
    fig, (ax,) = _figure()
    sns.barplot(df, x="depth", y="share", hue="setting", palette=PALETTE, ax=ax)
    ax.set(xlabel="depth d in the draft tree", ylabel="share of rounds with A >= d", ylim=(0, 1),
           title="How deep does acceptance reach?")
    _legend_outside(ax)
    return fig


def graft_depths(run) -> pd.DataFrame:
    """Every frontier node a mid step expanded: its depth and its offset from the conventional frontier.

    offset = depth - mean depth of N_k (the nodes the previous step created); negative values are
    reselections of earlier-depth nodes, which only expanded graft-position selection (EG) allows.
    """
    nodes, steps = run.nodes, run.steps
    mid = steps[steps["call_mid"]][["run", "round", "step"]]
    out = []
    for (r, rd, k) in mid.itertuples(index=False):
        at = nodes[(nodes["run"] == r) & (nodes["round"] == rd)]
        prev = at[(at["step"] == k - 1) & at["new"]] if k > 1 else at[(at["step"] == k) & (at["node"] == 0)]
        mean_prev = prev["depth"].mean() if len(prev) else 0.0
        front = at[(at["step"] == k) & at["in_frontier"]]
        for d in front["depth"]:
            out.append({"run": r, "round": rd, "step": k, "depth": int(d), "offset": d - mean_prev})
    return pd.DataFrame(out, columns=["run", "round", "step", "depth", "offset"])


def graft_depth_hist(run) -> Figure:
    """Where mid steps graft: depths of the expanded frontier, and offsets from the conventional frontier."""
    df = graft_depths(run)
    fig, (a1, a2) = _figure(2, width=5.2)
    if df.empty:
        for ax in (a1, a2):
            ax.text(0.5, 0.5, "no mid-drafter steps recorded", ha="center", va="center", transform=ax.transAxes)
    else:
        df["draft step"] = df["step"].astype(str)
        sns.histplot(df, x="depth", hue="draft step", multiple="stack", discrete=True, palette=PALETTE, ax=a1)
        sns.histplot(df, x="offset", binwidth=0.5, color="#e8590c", ax=a2)
        a2.axvline(0, color="#333", lw=1, ls="--")
        share = float((df["offset"] < 0).mean())
        a2.set_title(f"{share:.0%} of mid-step graft positions are earlier than N_k", fontsize=10)
    _legend_outside(a1)
    a1.set(xlabel="depth of the graft position (node the mid drafter expanded)", ylabel="frontier nodes",
           title="Graft depths in mid-drafter steps")
    a2.set(xlabel="depth - mean depth of the conventional frontier N_k", ylabel="frontier nodes")
    return fig


def decisions_by_step(runs) -> Figure:
    """Share of rounds in which each draft step called the mid drafter, per setting."""
    rows = []
    for label, run in _runs(runs).items():
        g = run.steps.groupby("step")["call_mid"].mean()
        rows += [{"setting": label, "draft step": int(k), "mid share": float(v)} for k, v in g.items()]
    df = pd.DataFrame(rows)
    fig, (ax,) = _figure()
    sns.barplot(df, x="draft step", y="mid share", hue="setting", palette=PALETTE, ax=ax)
    ax.set(xlabel="draft step k", ylabel="share of rounds calling the mid drafter", ylim=(0, 1.05),
           title="WHEN: scheduler decisions by draft step")
    _legend_outside(ax)
    return fig


def signal_table(run) -> pd.DataFrame:
    """One row per draft step: the 10 signals, the decision, and the round's outcome (A, eta)."""
    cols = ["run", "round", "accepted", "eta", "round_ms", "mid_calls"]
    df = run.steps.merge(run.rounds[cols], on=["run", "round"], how="left")
    if "category" in run.runs:
        df["category"] = df["run"].map(run.runs.set_index("run")["category"])
    return df


def signal_correlations(run, targets: tuple[str, ...] = ("accepted", "eta")) -> pd.DataFrame:
    """Spearman correlation of each signal with the round's outcomes, per draft step pooled."""
    df = signal_table(run)
    out = {}
    for t in targets:
        out[t] = {s: df[s].corr(df[t], method="spearman") if df[s].nunique() > 1 else math.nan for s in SIGNALS}
    return pd.DataFrame(out)


def signal_heatmap(corr: pd.DataFrame, title: str = "Spearman correlation with the round's outcome") -> Figure:
    """A heatmap of a signals x outcomes correlation table."""
    fig, (ax,) = _figure(width=5.2, height=4.4)
    sns.heatmap(corr, annot=True, fmt=".2f", cmap="vlag", vmin=-1, vmax=1, ax=ax, cbar_kws={"label": "rho"})
    ax.set(xlabel="outcome of the round", ylabel="signal before the draft step", title=title)
    return fig
