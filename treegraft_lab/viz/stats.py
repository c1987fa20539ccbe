"""Summary plots of recorded runs (seaborn). Each function returns a PlotFigure, shown as a PNG in notebooks.

Give one Run, or a dict {label: Run} to compare settings side by side (the label becomes the hue).
Acceptance length A counts accepted draft tokens; the bonus token is not included.
"""

from __future__ import annotations

import io
import math

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from treegraft_lab import paper
from treegraft_lab.presets import DEFAULT_PAIR
from treegraft_lab.rounds import release_acceptance
from treegraft_lab.schedule.signals import SIGNALS, words
from treegraft_lab.viz.tree import COLORS

SMALL, MID = COLORS["small"], COLORS["mid"]  # one colour language: small drafter blue, mid drafter orange
PAPER = "#495057"  # the paper's reference values
PALETTE = ["#2f9e44", "#7b2cbf", "#c2255c", "#495057", "#0c8599", "#a61e4d"]  # settings compared (never blue/orange)


class PlotFigure(Figure):
    """A matplotlib Figure that a notebook displays as a PNG image (no pyplot or backend needed)."""

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=100)
        return buf.getvalue()


def _runs(runs) -> dict:
    return runs if isinstance(runs, dict) else {"run": runs}


def _legend_outside(ax) -> None:
    if ax.get_legend() is not None:
        sns.move_legend(ax, "upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def figure(ncols: int = 1, width: float = 6.4, height: float = 3.6, **kw) -> tuple[PlotFigure, list]:
    """A PlotFigure of `ncols` axes side by side, each `width` x `height` inches (100 px an inch on screen)."""
    fig = PlotFigure(figsize=(width * ncols, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False, **kw)[0]
    return fig, list(axes)


def acceptance_by_depth(runs) -> PlotFigure:
    """Share of rounds whose accepted path reaches each depth d (A >= d), per setting."""
    rows = []
    for label, run in _runs(runs).items():
        acc = run.rounds["accepted"]
        depth = int(run.steps["step"].max()) if len(run.steps) else int(acc.max())
        for d in range(1, max(depth, int(acc.max()) if len(acc) else 1) + 1):
            rows.append({"setting": label, "depth": d, "share": float((acc >= d).mean()) if len(acc) else 0.0})
    df = pd.DataFrame(rows)
    fig, (ax,) = figure()
    sns.barplot(df, x="depth", y="share", hue="setting", palette=PALETTE[: df["setting"].nunique()], ax=ax)
    ax.set(xlabel="depth d in the draft tree", ylabel="share of rounds with A >= d", ylim=(0, 1),
           title="How deep does acceptance reach?")
    _legend_outside(ax)
    return fig


def graft_depths(run) -> pd.DataFrame:
    """Every frontier node a mid step expanded: its depth and its offset from the conventional frontier.

    offset = depth - mean depth of N_k (the nodes the previous step's first tokens landed on; n-gram
    chain tails below them are not N_k); negative values are reselections of earlier-depth nodes,
    which only expanded graft-position selection (EG) allows. The recorder's per-step
    `reselected_earlier` uses the same reference, so `reselected_share(steps)` equals the share of
    negative offsets here.
    """
    nodes, steps = run.nodes, run.steps
    if "chain" not in nodes:
        nodes = nodes.assign(chain=False)
    mid = steps[steps["call_mid"]][["run", "round", "step"]]
    out = []
    for (r, rd, k) in mid.itertuples(index=False):
        at = nodes[(nodes["run"] == r) & (nodes["round"] == rd)]
        prev = at[(at["step"] == k - 1) & at["new"] & ~at["chain"]] if k > 1 else at[(at["step"] == k) & (at["node"] == 0)]
        mean_prev = prev["depth"].mean() if len(prev) else 0.0
        front = at[(at["step"] == k) & at["in_frontier"]]
        for d in front["depth"]:
            out.append({"run": r, "round": rd, "step": k, "depth": int(d), "offset": d - mean_prev})
    return pd.DataFrame(out, columns=["run", "round", "step", "depth", "offset"])


def reselected_share(steps: pd.DataFrame) -> float:
    """The reselected share from a steps table alone: frontier nodes of mid steps k >= 2 below the
    mean depth of N_k, pooled over nodes (the same number as `graft_summary`'s)."""
    mid = steps[steps["call_mid"] & (steps["step"] > 1)]
    return float((mid["reselected_earlier"] * mid["frontier_size"]).sum() / mid["frontier_size"].sum())


def _categories(run) -> pd.Series:
    runs = run.runs.set_index("run")
    return runs["category"] if "category" in runs else pd.Series("", index=runs.index)


def graft_summary(run, by_category: bool = False) -> pd.DataFrame:
    """The paper's EG statistics, over mid-drafter steps k >= 2 (at k = 1 the only candidate is the root).

    One definition for every table, figure and text:
    - reselected share: of all frontier nodes those mid steps expanded, the share at a depth below
      the mean depth of the conventional frontier N_k (pooled over nodes, as the paper's `paper.RESELECTED_SHARE`);
    - pool ratio: mean |C_k| / mean |N_k| (a ratio of means, as the paper's `paper.POOL_RATIO`);
    - mean pool: mean |C_k| in nodes.
    With n beside them: prompts, mid steps, frontier nodes. One row "all" (plus one per category).
    """
    depths = graft_depths(run)
    depths = depths[depths["step"] > 1]
    steps = run.steps[run.steps["call_mid"] & (run.steps["step"] > 1)]
    cat = _categories(run)
    groups = [("all", steps, depths)]
    if by_category:
        groups += [(c, steps[steps["run"].map(cat) == c], depths[depths["run"].map(cat) == c]) for c in sorted(set(cat))]
    rows = []
    for name, s, d in groups:
        conv = s["conventional_pool"].mean()
        rows.append({"group": name, "prompts": s["run"].nunique(), "mid steps": len(s), "frontier nodes": len(d),
                     "reselected share": float((d["offset"] < 0).mean()) if len(d) else math.nan,
                     "mean pool": s["pool_size"].mean(), "mean conventional pool": conv,
                     "pool ratio": s["pool_size"].mean() / conv if conv > 0 else math.nan})
    return pd.DataFrame(rows).set_index("group")


def _say(axes, text: str) -> None:
    """A placeholder line in each of `axes` (nothing to draw)."""
    for ax in axes:
        ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def _depths_by_step(df, ax) -> None:
    """Histogram of graft depths on `ax`, stacked by draft step (shades of the mid drafter's colour)."""
    df["draft step"] = df["step"].astype(str)
    shades = sns.light_palette(MID, n_colors=df["step"].nunique() + 1)[1:]
    sns.histplot(df, x="depth", hue="draft step", multiple="stack", discrete=True, palette=shades, ax=ax)


def graft_depth_hist(run) -> PlotFigure:
    """Where mid steps k >= 2 graft: depths of the expanded frontier, and offsets from the conventional frontier."""
    df = graft_depths(run)
    df = df[df["step"] > 1]
    fig, (a1, a2) = figure(2, width=4.8, height=3.4)
    if df.empty:
        _say((a1, a2), "no mid-drafter steps after step 1 recorded")
    else:
        _depths_by_step(df, a1)
        edges = (math.floor(df["offset"].min() * 2) / 2, math.ceil(df["offset"].max() * 2) / 2 + 0.5)
        sns.histplot(df, x="offset", binwidth=0.5, binrange=edges, color=MID, ax=a2)  # 0 is a bin edge
        a2.axvline(0, color="#333", lw=1, ls="--")
        share = graft_summary(run).loc["all", "reselected share"]
        a2.set_title(f"{share:.1%} of {len(df):,} graft positions lie left of 0 (earlier than N_k)", fontsize=10)
    a1.set(xlabel="depth of the graft position", ylabel="frontier nodes expanded",
           title="Graft depths in mid steps k >= 2")
    a2.set(xlabel="depth - mean depth of the conventional frontier N_k", ylabel="frontier nodes expanded")
    return fig


def decisions_by_step(runs) -> PlotFigure:
    """Share of rounds in which each draft step called the mid drafter, per setting."""
    rows = []
    for label, run in _runs(runs).items():
        g = run.steps.groupby("step")["call_mid"].mean()
        rows += [{"setting": label, "draft step": int(k), "mid share": float(v)} for k, v in g.items()]
    df = pd.DataFrame(rows)
    fig, (ax,) = figure()
    sns.barplot(df, x="draft step", y="mid share", hue="setting", palette=PALETTE[: df["setting"].nunique()], ax=ax)
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


OUTCOME_WORDS = {"accepted": "A (accepted draft tokens)", "eta": "eta (tokens/s)"}  # a round's outcomes in words
CORRELATES = 0.3  # |Spearman rho| from which a signal is said to correlate with a round's outcome


def in_words(df: pd.DataFrame, columns: dict[str, str], signal: str = "signal") -> pd.DataFrame:
    """A table of signals for reading: the `signal` column in words (`signals.words`), the recorded name
    beside it ("recorded as"), then `columns` ({column: header}) renamed, in their order, and a fresh index."""
    out = pd.DataFrame({"signal": df[signal].map(words), "recorded as": df[signal]})
    for col, header in columns.items():
        out[header] = df[col].to_numpy()
    return out.reset_index(drop=True)


def correlated(corr: pd.DataFrame, threshold: float = CORRELATES) -> pd.DataFrame:
    """The signals of a `signal_correlations` table whose |rho| with some outcome reaches `threshold`:
    one row each (strongest first) with that outcome and its rho."""
    rows = []
    for sig, r in corr.iterrows():
        r = r.dropna()
        if len(r) and r.abs().max() >= threshold:
            outcome = r.abs().idxmax()
            rows.append({"signal": sig, "outcome": outcome, "rho": float(r[outcome])})
    out = pd.DataFrame(rows, columns=["signal", "outcome", "rho"])
    return out.reindex(out["rho"].abs().sort_values(ascending=False).index).reset_index(drop=True)


def _names(names, words_of=words) -> str:
    """Names joined in words: "a", "a and b", "a, b and c" (signals as "<words> (<recorded name>)")."""
    names = [f"{words_of(s)} ({s})" if words_of else str(s) for s in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def correlation_sentence(corr: pd.DataFrame, schedulers: dict[str, list[str]], release: list[str],
                         threshold: float = CORRELATES) -> str:
    """Which signals correlate with the round's outcome (|rho| >= `threshold` with A or eta, `correlated`)
    and whether the inputs of each scheduler of `schedulers` ({name: the signals it reads}; empty when
    none is trained) and the release's six hold them, in plain words, from the numbers of `corr`."""
    hits = correlated(corr, threshold)
    if hits.empty:
        best = corr.abs().max(axis=1).dropna()
        strongest = f": the strongest is {_names([best.idxmax()])}, |rho| {best.max():.2f}" if len(best) else ""
        return f"No signal correlates with the round's outcome here (|Spearman rho| >= {threshold} with A or eta){strongest}."
    found = "; ".join(f"{words(r.signal)} ({r.signal}), rho {r.rho:+.2f} with {OUTCOME_WORDS.get(r.outcome, r.outcome)}"
                      for r in hits.itertuples())
    n = len(hits)
    head = (f"{'Only ' if n < len(corr) else ''}{n} of the {len(corr)} signals correlate{'s' if n == 1 else ''} with the "
            f"round's outcome here (|Spearman rho| >= {threshold}): {found}.")

    def held(inside: list[str], where: str) -> str:
        if not inside:
            return f"{ {1: 'it is not', 2: 'neither is'}.get(n, 'none of them is')} among {where}"
        if len(inside) == n:
            return f"{ {1: 'it is', 2: 'both are'}.get(n, 'all of them are')} among {where}"
        return f"of them, only {_names(inside)} {'is' if len(inside) == 1 else 'are'} among {where}"

    groups: dict[tuple, list[str]] = {}  # schedulers that hold the same of them, named together
    for name, sigs in schedulers.items():
        groups.setdefault(tuple(s for s in hits["signal"] if s in set(sigs)), []).append(name)
    clauses = [held(list(inside), f"the inputs of the scheduler{'s' if len(names) > 1 else ''} {_names(names, None)}")
               for inside, names in groups.items()]
    if not clauses:
        clauses = ["no scheduler is trained for this pair, so there are no scheduler inputs to compare"]
    count = {6: "six", 10: "ten"}.get(len(release), str(len(release)))
    clauses.append(held([s for s in hits["signal"] if s in set(release)], f"the {count} signals of the authors' release"))
    later = "".join(f"; {c.removeprefix('of them, ')}" for c in clauses[1:])
    return f"{head} {clauses[0][0].upper()}{clauses[0][1:]}{later}."


def signal_heatmap(corr: pd.DataFrame, title: str = "Spearman correlation with the round's outcome") -> PlotFigure:
    """A heatmap of a signals x outcomes correlation table, signals and outcomes in words."""
    corr = corr.rename(index=words, columns=lambda c: OUTCOME_WORDS.get(c, c).replace(" (", "\n(").replace(" draft", "\ndraft"))
    fig, (ax,) = figure(width=6.0, height=4.6)
    sns.heatmap(corr, annot=True, fmt=".2f", cmap="vlag", vmin=-1, vmax=1, ax=ax, cbar_kws={"label": "rho"})
    ax.set(xlabel="outcome of the round", ylabel="signal before the draft step")
    fig.suptitle(title, fontsize=12)  # over the whole figure: the two columns are narrower than the title
    return fig


def importance_plot(imp: pd.DataFrame, release: list[str], clip: float = 1.0) -> PlotFigure:
    """Grouped-CV gain over step k alone and held-out permutation drop per signal (`viz.importance.signal_importance`).

    Bars beyond +-`clip` (R^2 units) are cut at the axis and labelled with their value, so one
    extreme signal cannot flatten the rest; dark bars are the release's six signals.
    """
    df = imp.assign(release=imp["signal"].isin(release).map({True: "in the release's six", False: "ours"}),
                    signal=imp["signal"].map(words))
    fig, (a1, a2) = figure(2, width=4.8, height=3.6, sharey=True)
    for ax, col, label in ((a1, "gain_over_k", "grouped-CV R^2 gain over step k alone"),
                           (a2, "permutation_drop", "held-out R^2 drop when shuffled")):
        sns.barplot(df, y="signal", x=col, hue="release", dodge=False, ax=ax, legend=ax is a1,
                    palette={"in the release's six": PAPER, "ours": "#adb5bd"})
        lo, hi = max(df[col].min(), -clip), min(df[col].max(), clip)
        pad = 0.08 * ((hi - lo) or 1.0)
        ax.set_xlim(min(lo, 0) - pad, max(hi, 0) + pad)
        for i, v in enumerate(df[col]):
            if abs(v) > clip:
                ax.annotate(f"{v:.2f} (bar cut)", (lo - pad if v < 0 else hi + pad, i), ha="left" if v < 0 else "right",
                            va="center", fontsize=8, color="#111", xytext=(3 if v < 0 else -3, 0), textcoords="offset points")
        ax.axvline(0, color="#333", lw=0.8)
        ax.set(xlabel=label, ylabel="")
    handles, labels = a1.get_legend_handles_labels()
    a1.get_legend().remove()
    fig.legend(handles, labels, loc="outside upper center", ncol=2, frameon=False, fontsize=9)
    return fig


# ---------------------------------------------------------------------------- the paper's definitions

PAPER_A = paper.A  # the paper's acceptance length: fixed [1,0,1,0,1], adaptive
PAPER_STATS = {"reselected share": paper.RESELECTED_SHARE, "mean candidate pool": paper.MEAN_POOL,
               "pool ratio": paper.POOL_RATIO, "conventional pool": paper.CONVENTIONAL_POOL}


def _config(run) -> dict:
    """The decode config of the run's first generate call (all calls of a recorded Run share it)."""
    import json

    return json.loads(run.runs["config"].iloc[0]) if len(run.runs) and "config" in run.runs else {}


def prefills(run) -> int:
    """Target forwards the run's generate calls spent on their prompts alone: one a call with
    `fuse_prompt=False` (the release's own prefill), none where the prompt rode in the first
    round's forward (`verify.TargetVerifier`; runs recorded before the option fused)."""
    return 0 if _config(run).get("fuse_prompt", True) else len(run.runs)


def acceptance_counts(run) -> pd.DataFrame:
    """Per recorded prompt (index: `run` id), what A counts: `tokens`, every token the target's
    verifications committed (each round's accepted draft tokens plus its bonus token, the last round
    counted whole where max_new_tokens or the end of text cut the returned output, as the release's
    `new_token` does), `forwards`, its target forwards (one verification a round plus a prompt forward
    of its own, `prefills`), and `returned`, the tokens the call returned."""
    rounds = run.rounds
    index = pd.Index(run.runs["run"].unique(), name="run")
    own = 1 if prefills(run) else 0
    out = pd.DataFrame(index=index)
    out["tokens"] = (rounds["accepted"] + 1).groupby(rounds["run"]).sum().reindex(index).fillna(0).astype(int)
    out["forwards"] = rounds["run"].value_counts().reindex(index).fillna(0).astype(int) + own
    out["returned"] = run.runs.groupby("run")["output_ids"].first().map(len).reindex(index).fillna(0).astype(int)
    return out


def acceptance_length(run) -> tuple[float, int, int]:
    """The release's `avg_accept_len`, the paper's A: (tokens / target forwards, tokens, forwards)
    summed over the run's prompts (`acceptance_counts`: tokens the verifications committed, the
    bonus token counted and the last round whole; one forward a round plus each prompt forward of
    its own). Every A of notebook 03 reads it."""
    counts = acceptance_counts(run)
    tokens, forwards = int(counts["tokens"].sum()), int(counts["forwards"].sum())
    rounds = forwards - (len(counts) if prefills(run) else 0)
    a = release_acceptance(tokens, rounds, forwards - rounds) if forwards else math.nan
    return a, tokens, forwards


def acceptance_n(run) -> str:
    """What `acceptance_length` counted, in words: tokens, forwards, and the tokens returned where
    max_new_tokens or the end of text cut them."""
    counts = acceptance_counts(run)
    tokens, forwards, returned = (int(counts[c].sum()) for c in ("tokens", "forwards", "returned"))
    pre = len(counts) if prefills(run) else 0
    cut = f"; {returned:,} returned, the rest cut by max_new_tokens or the end of text" if returned < tokens else ""
    return (f"{tokens:,} tokens committed / {forwards:,} target forwards ({forwards - pre:,} rounds + {pre} prompt "
            f"forwards){cut}")


def bench_acceptance(records: pd.DataFrame) -> pd.DataFrame:
    """A per (clock, category, method) from `bench` records (category "overall": all pooled), methods with rounds only:
    `A` = new tokens / target forwards (each generation's rounds + its prefill, the paper's definition) and
    `accepted per round` (accepted draft tokens per round, this project's)."""
    r = records[records["rounds"].notna()] if "rounds" in records else records.iloc[:0]
    if "clock" not in r:
        r = r.assign(clock="wall")
    rows = []
    for (clock, method), g in r.groupby(["clock", "method"], sort=False):
        for cat, h in [*g.groupby("category"), ("overall", g)]:
            rows.append({"clock": clock, "category": cat, "method": method, "generations": len(h),
                         "A": release_acceptance(h["new_tokens"].sum(), h["rounds"].sum(), len(h)),
                         "accepted per round": h["accepted"].sum() / h["rounds"].sum()})
    return pd.DataFrame(rows, columns=["clock", "category", "method", "generations", "A", "accepted per round"])


def paper_steps(run) -> pd.DataFrame:
    """Every draft step of every round measured as the release records it (from the nodes snapshots).

    One row per (run, round, step) with the tree BEFORE the step (k = 1: the root alone):
    - ref_depths: the depths of the frontier before reselection, the top-W of N_k by path score
      (N_k = the nodes the previous step's first tokens landed on; k = 1: the root);
    - pool: the release's candidate pool, every live node whose depth lies within `lookback` depths
      above one of ref_depths, root included (lookback None: every live node the mid drafter has not
      scored; EG off: the top-W of N_k);
    - conventional: live nodes AT one of ref_depths (the pool with lookback 0; inferred, see
      `paper_statistics`);
    - mid steps: frontier (|F_k| after reselection) and reselected (F_k nodes whose depth is not in
      ref_depths; 0 at k = 1, where the root is both). NaN at small steps.
    """
    cfg = _config(run)
    width, lookback, eg = cfg.get("width", 10), cfg.get("lookback", 5), cfg.get("expanded_graft", True)
    nodes = run.nodes
    if "chain" not in nodes:
        nodes = nodes.assign(chain=False)
    snaps = {key: g for key, g in nodes.groupby(["run", "round", "step"], sort=False)}
    rows = []
    for r, rd, k, call in run.steps[["run", "round", "step", "call_mid"]].itertuples(index=False):
        if k == 1:
            ref_depths, pool, conventional = {0}, 1, 1
        else:
            before = snaps[(r, rd, k - 1)]
            live = before[before["alive"]]
            nk = live[live["new"] & ~live["chain"]]
            if nk.empty:  # the previous step grew nothing: the frontier it tried to expand
                nk = live[live["in_frontier"]] if live["in_frontier"].any() else live
            ref = nk.assign(neg=-nk["score"]).sort_values(["neg", "depth", "node"]).head(width)
            ref_depths = set(ref["depth"].astype(int))
            depth = live["depth"].astype(int)
            at_ref = depth.isin(ref_depths)
            if not eg:
                in_pool = live["node"].isin(ref["node"])
            elif lookback is None:
                in_pool = ~live["mid_scored"].astype(bool)
            else:
                window = {d - j for d in ref_depths for j in range(lookback + 1)}
                in_pool = depth.isin(window)
            pool, conventional = int(in_pool.sum()), int(at_ref.sum())
        row = {"run": r, "round": rd, "step": k, "call_mid": bool(call), "pool": pool,
               "conventional": conventional, "ref_depths": sorted(ref_depths),
               "frontier": math.nan, "reselected": math.nan}
        if call:
            after = snaps[(r, rd, k)]
            front = after.loc[after["in_frontier"], "depth"].astype(int)
            row["frontier"] = len(front)
            row["reselected"] = int((~front.isin(ref_depths)).sum())
        rows.append(row)
    return pd.DataFrame(rows, columns=["run", "round", "step", "call_mid", "pool", "conventional", "ref_depths",
                                       "frontier", "reselected"])


def paper_statistics(run) -> pd.DataFrame:
    """Every statistic the paper reports, on this run, under the paper's (the release's) definition.

    One row per statistic; columns: `paper definition` (its value on this run), `ours` (the value
    under this project's `graft_summary` / `accepted` definition, where it differs), `n` (what it
    was averaged over), `paper` (the paper's number), `definition` (one line). The release computes
    no conventional pool: the definition used (nodes at the depths of the frontier before
    reselection, i.e. the release's candidate pool with lookback 0) is inferred from the paper's
    mean pool over its pool ratio (`paper.CONVENTIONAL_POOL`), which it fits.
    """
    a = acceptance_length(run)[0]
    steps = paper_steps(run)
    mid = steps[steps["call_mid"]]
    calls = mid[mid["frontier"] > 0]
    per_call = (mid["reselected"] / mid["frontier"].where(mid["frontier"] > 0)).fillna(0.0)
    pooled = calls["reselected"].sum() / calls["frontier"].sum() if len(calls) else math.nan
    ours = graft_summary(run).loc["all"] if len(run.steps) else None
    n_rounds, n_mid, n_k1 = len(run.rounds), len(mid), int((mid["step"] == 1).sum())
    schedule = _config(run).get("schedule", "")
    a_paper = PAPER_A.get(schedule, math.nan)

    def our(col):
        return float(ours[col]) if ours is not None else math.nan

    rows = [
        ("acceptance length A", a, float(run.rounds["accepted"].mean()) if n_rounds else math.nan,
         acceptance_n(run), a_paper,
         "tokens the target's verifications committed / target forwards, bonus token counted, the last round whole, "
         f"each prompt forward of its own one (release avg_accept_len; paper: "
         f"{'schedule ' + schedule if schedule in PAPER_A else 'no value for schedule ' + schedule}); "
         "ours: accepted draft tokens per round"),
        ("reselected share (mean of per-call shares)", float(per_call.mean()) if n_mid else math.nan,
         our("reselected share"), f"{n_mid:,} mid calls ({n_k1:,} at k = 1, each 0)", PAPER_STATS["reselected share"],
         "per mid call: share of the reselected top-W whose depth is not a depth of the frontier before "
         "reselection (root counts), averaged over calls; ours: pooled nodes of k >= 2 below the mean depth of N_k"),
        ("reselected share (pooled)", pooled, our("reselected share"),
         f"{int(calls['frontier'].sum()):,} frontier nodes of {n_mid:,} mid calls", PAPER_STATS["reselected share"],
         "the same over all frontier nodes of all mid calls (the paper does not say which average it used)"),
        ("mean candidate pool", float(steps["pool"].mean()) if len(steps) else math.nan, our("mean pool"),
         f"{len(steps):,} draft steps (all k)", PAPER_STATS["mean candidate pool"],
         "nodes a reselection may choose from before each step, root included; ours: |C_k| at mid steps k >= 2"),
        ("conventional pool", float(steps["conventional"].mean()) if len(steps) else math.nan,
         our("mean conventional pool"), f"{len(steps):,} draft steps (all k)", PAPER_STATS["conventional pool"],
         "INFERRED (not in the release): nodes at the depths of the frontier before reselection, fits "
         f"{paper.MEAN_POOL:g} / {paper.POOL_RATIO:g} = {paper.CONVENTIONAL_POOL:.1f}; ours: |N_k| at mid steps k >= 2"),
        ("pool ratio", float(steps["pool"].mean() / steps["conventional"].mean()) if len(steps) else math.nan,
         our("pool ratio"), f"{len(steps):,} draft steps (ratio of means)", PAPER_STATS["pool ratio"],
         "mean candidate pool / mean conventional pool; ours: mean |C_k| / mean |N_k| at mid steps k >= 2"),
    ]
    return pd.DataFrame(rows, columns=["statistic", "paper definition", "ours", "n", "paper", "definition"]).set_index("statistic")


RELEASE_STATS = ("reselected share, all mid calls", "reselected share, mid calls after step 1", "A, release count",
                 "candidate pool, all mid calls", "candidate pool, mid calls after step 1")


def release_sums(run) -> pd.DataFrame:
    """Per recorded prompt (`run` id): the sums behind each `RELEASE_STATS` entry, as
    (numerator, denominator) columns `<stat> num` / `<stat> den` (0 where a prompt has none)."""
    steps = paper_steps(run)
    mid = steps[steps["call_mid"]]
    share = (mid["reselected"] / mid["frontier"].where(mid["frontier"] > 0)).fillna(0.0)
    later = mid["step"] > 1
    counts = acceptance_counts(run)  # A: the one count of acceptance_length
    by = mid["run"]
    cols = {
        RELEASE_STATS[0]: (share.groupby(by).sum(), by.value_counts()),
        RELEASE_STATS[1]: (share[later].groupby(by[later]).sum(), by[later].value_counts()),
        RELEASE_STATS[2]: (counts["tokens"], counts["forwards"]),
        RELEASE_STATS[3]: (mid["pool"].groupby(by).sum(), by.value_counts()),
        RELEASE_STATS[4]: (mid.loc[later, "pool"].groupby(by[later]).sum(), by[later].value_counts()),
    }
    index = pd.Index(run.runs["run"].unique(), name="run")
    out = pd.DataFrame(index=index)
    for name, (num, den) in cols.items():
        out[f"{name} num"] = num.reindex(index).fillna(0.0).astype(float)
        out[f"{name} den"] = den.reindex(index).fillna(0.0).astype(float)
    return out


def bootstrap_ratio(num: pd.Series, den: pd.Series, draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of sum(num) / sum(den) with the prompts (rows) resampled."""
    import numpy as np

    n, d = num.to_numpy(float), den.to_numpy(float)
    if len(n) < 2 or d.sum() == 0:
        return math.nan, math.nan
    pick = np.random.default_rng(seed).integers(0, len(n), size=(draws, len(n)))
    tot = d[pick].sum(1)
    ratio = n[pick].sum(1)[tot > 0] / tot[tot > 0]
    return float(np.percentile(ratio, 2.5)), float(np.percentile(ratio, 97.5))


def release_statistics(run) -> pd.DataFrame:
    """The statistics the authors' release records, on a run (meant for growth "release" runs):
    one row each with `value`, `n` (what it was averaged over), `low` / `high` (a 95% bootstrap
    interval with the prompts resampled, `bootstrap_ratio`) and `prompts`.

    - reselected share, all mid calls: per mid call, the share of its reselected frontier whose
      depth is not a depth of the frontier before (`paper_steps`; a step-1 call reselects the root
      from the root: 0), averaged over calls (the release's `reselect_from_past_layer_ratio`);
    - the same over the mid calls after step 1;
    - A, the release's count (`acceptance_length`, as in `paper_statistics`): tokens the
      verifications committed (each round's accepted draft tokens and bonus token, the last round
      whole: the release's `new_token`) over the rounds plus the prompt forwards;
    - the mean candidate pool before the step, over all mid calls and over those after step 1 (the
      release's `pre_reselect_candidate_size`), and the mid calls at each step (no interval).
    """
    steps = paper_steps(run)
    mid = steps[steps["call_mid"]]
    later = mid["step"] > 1
    rounds = len(run.rounds)
    ns = [f"{len(mid):,} mid calls ({int((~later).sum()):,} at step 1, each 0)", f"{int(later.sum()):,} mid calls",
          acceptance_n(run), f"{len(mid):,} mid calls", f"{int(later.sum()):,} mid calls"]
    sums = release_sums(run)
    rows = []
    for name, n in zip(RELEASE_STATS, ns):
        num, den = sums[f"{name} num"], sums[f"{name} den"]
        value = num.sum() / den.sum() if den.sum() else math.nan
        rows.append((name, value, n, *bootstrap_ratio(num, den), len(sums)))
    rows += [(f"mid calls at step {k}", float((mid["step"] == k).sum()), f"{rounds:,} rounds", math.nan, math.nan,
              len(sums)) for k in sorted(steps["step"].unique())]
    return pd.DataFrame(rows, columns=["statistic", "value", "n", "low", "high", "prompts"]).set_index("statistic")


RELEASE_REFERENCE = f"release-f53e3a8-{DEFAULT_PAIR}-eval12.json"
PAPER_RELEASE = {RELEASE_STATS[0]: PAPER_STATS["reselected share"], RELEASE_STATS[1]: PAPER_STATS["reselected share"],
                 RELEASE_STATS[2]: PAPER_A["10101"], RELEASE_STATS[4]: PAPER_STATS["mean candidate pool"]}


def release_reference(schedule: str = "10101") -> dict:
    """The authors' release's own counts on this project's pair (data/reference: its evaluator at
    commit f53e3a8, 12 eval prompts, 64 new tokens, float32): {statistic: value} where recorded."""
    import json

    from treegraft_lab.paths import DATA_DIR

    ref = json.loads((DATA_DIR / "reference" / RELEASE_REFERENCE).read_text())["summary"][schedule]
    return {RELEASE_STATS[0]: ref["reselect_from_past_layer_ratio_pooled_over_calls"],
            RELEASE_STATS[1]: ref["reselect_from_past_layer_ratio_calls_after_step1"], RELEASE_STATS[2]: ref["A_release_pooled"],
            **{f"mid calls at step {k}": float(v["calls"]) for k, v in ref["reselect_by_layer"].items()}}


def release_comparison(runs: dict, schedule: str = "10101") -> pd.DataFrame:
    """The release's statistics side by side, as text cells: the paper's number, then per run of
    `runs` ({label: Run}) the value with its 95% interval over prompts and its n, then the authors'
    release on this pair (`release_reference`: other prompts than a notebook's run may use). The
    paper reports its share without saying over which calls: it stands beside both shares."""
    ref = release_reference(schedule)
    names = [*RELEASE_STATS, *(f"mid calls at step {k}" for k in range(1, 6))]

    def fmt(stat: str, v: float) -> str:
        if v != v:
            return "—"
        return f"{v:.1%}" if "share" in stat else f"{v:,.0f}" if stat.startswith("mid calls") else f"{v:.2f}"

    out = pd.DataFrame(index=pd.Index(names, name="statistic"))
    out["paper"] = [fmt(s, PAPER_RELEASE.get(s, math.nan)) for s in names]
    for label, run in runs.items():
        rs = release_statistics(run)
        cells, ns = [], []
        for s in names:
            if s not in rs.index:
                cells.append("—")
                ns.append("")
                continue
            r = rs.loc[s]
            cells.append(fmt(s, r["value"]) + (f" [{fmt(s, r['low'])}–{fmt(s, r['high'])}]" if r["low"] == r["low"] else ""))
            ns.append(f"{r['n']} · {r['prompts']} prompts")
        out[label], out[f"{label}: n"] = cells, ns
    out["authors' release, this pair (12 eval prompts)"] = [fmt(s, ref.get(s, math.nan)) for s in names]
    return out


def _paper_group(steps: pd.DataFrame) -> dict:
    """The paper-definition statistics of a subset of `paper_steps` rows."""
    mid = steps[steps["call_mid"]]
    fr = mid["frontier"]
    per_call = (mid["reselected"] / fr.where(fr > 0)).fillna(0.0)
    conv = steps["conventional"].mean()
    return {"prompts": steps["run"].nunique(), "steps": len(steps), "mid calls": len(mid),
            "mid calls at k = 1": int((mid["step"] == 1).sum()), "frontier nodes": int(fr.sum()),
            "reselected (mean of calls)": float(per_call.mean()) if len(mid) else math.nan,
            "reselected (pooled)": float(mid["reselected"].sum() / fr.sum()) if fr.sum() else math.nan,
            "mean pool": steps["pool"].mean(), "conventional pool": conv,
            "pool ratio": steps["pool"].mean() / conv if conv > 0 else math.nan}


def paper_summary(run, by_category: bool = False) -> pd.DataFrame:
    """`paper_statistics`' WHERE statistics (the paper's definitions) as one row "all", plus one per
    category; with this project's reselected share and pool ratio (`graft_summary`) as "ours: ..." columns."""
    steps = paper_steps(run)
    cat = _categories(run)
    groups = [("all", steps)]
    if by_category:
        groups += [(c, steps[steps["run"].map(cat) == c]) for c in sorted(set(cat))]
    ours = graft_summary(run, by_category=by_category)
    rows = [{"group": g, **_paper_group(s), "ours: reselected share": ours.loc[g, "reselected share"],
             "ours: pool ratio": ours.loc[g, "pool ratio"]} for g, s in groups]
    return pd.DataFrame(rows).set_index("group")


def paper_by_category(summary: pd.DataFrame) -> PlotFigure:
    """Reselected share (mean of per-call shares and pooled) and pool ratio per category, the paper's
    definitions (rows of `paper_summary(..., by_category=True)`); the paper's value dashed, n beside each group."""
    df = summary.reset_index()
    df["label"] = [f"{g} (n={n:,} mid calls)" for g, n in zip(df["group"], df["mid calls"])]
    long = df.melt(id_vars="label", value_vars=["reselected (mean of calls)", "reselected (pooled)"],
                   var_name="average", value_name="share")
    fig, (a1, a2) = figure(2, width=4.8, height=1.5 + 0.45 * len(df), sharey=True)
    sns.barplot(long, y="label", x="share", hue="average", palette=[MID, "#f8c291"], ax=a1)
    sns.barplot(df, y="label", x="pool ratio", ax=a2, color=MID)
    for ax, fmt in ((a1, "{:.0%}"), (a2, "{:.2f}x")):
        for c in ax.containers:
            ax.bar_label(c, labels=[fmt.format(v) if math.isfinite(v) else "" for v in c.datavalues], fontsize=8, padding=2,
                         zorder=3, bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})  # over the paper's line
    a1.axvline(PAPER_STATS["reselected share"], ls="--", color=PAPER, zorder=1)
    a2.axvline(PAPER_STATS["pool ratio"], ls="--", color=PAPER, zorder=1)
    a1.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    a1.set(xlim=(0, 1.15), ylabel="", xlabel="share of the frontier at a depth\nthe previous frontier did not hold",
           title=f"reselected share (dashed: paper, {paper.RESELECTED_SHARE:.2%})")
    a2.set(xlim=(0, 1.25 * max(df["pool ratio"].max(), PAPER_STATS["pool ratio"])), ylabel="",
           xlabel="mean candidate pool /\nmean conventional pool", title=f"pool ratio (dashed: paper, {paper.POOL_RATIO:g}x)")
    sns.move_legend(a1, "lower center", bbox_to_anchor=(0.5, 1.12), ncol=2, frameon=False, title=None, fontsize=8)
    return fig


def reselection_by_step(run) -> PlotFigure:
    """Left: depths of the frontier each mid call expanded, stacked by draft step. Right: per draft
    step, the share of those nodes at a depth not among the depths of the frontier before
    reselection (the paper's definition; k = 1 reselects nothing), pooled over calls, with n."""
    st = paper_steps(run)
    mid = st[st["call_mid"]]
    depths = graft_depths(run)
    fig, (a1, a2) = figure(2, width=4.8, height=3.4)
    if mid.empty:
        _say((a1, a2), "no mid-drafter steps recorded")
    else:
        _depths_by_step(depths, a1)
        per = mid.groupby("step").agg(reselected=("reselected", "sum"), frontier=("frontier", "sum"),
                                      calls=("step", "size")).reset_index()
        per["share"] = per["reselected"] / per["frontier"].where(per["frontier"] > 0)
        per["k"] = per["step"].astype(str)
        sns.barplot(per, x="k", y="share", color=MID, ax=a2)
        a2.axhline(PAPER_STATS["reselected share"], ls="--", color=PAPER, zorder=1)
        a2.bar_label(a2.containers[0], labels=[f"{s:.0%}\nn={c:,}" for s, c in zip(per["share"].fillna(0), per["calls"])],
                     fontsize=8, padding=2, zorder=3, bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
        pooled = mid["reselected"].sum() / mid["frontier"].sum()
        a2.set_title(f"{pooled:.1%} of {int(mid['frontier'].sum()):,} graft positions reselected (pooled)", fontsize=10)
    a1.set(xlabel="depth of the graft position", ylabel="frontier nodes expanded", title="Graft depths in mid calls")
    a2.set(xlabel="draft step k (n = mid calls)", ylabel="share reselected (dashed: paper)", ylim=(0, 1.18),
           yticks=[0, 0.2, 0.4, 0.6, 0.8, 1.0])
    a2.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    return fig
