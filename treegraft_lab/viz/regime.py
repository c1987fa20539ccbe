"""The regime map's figure: where the mid drafter pays, against the cost ratio T_mid / T_tgt.

Three panels (2 x 2 grid) share a log x-axis (speedup over plain decoding, the release's acceptance length
A, mid calls per round), one line per schedule, the band where the oracle beats both endpoints by >= 5% shaded
and marked ratios (this CPU's, a100-paper's) as vertical lines; a fourth panel draws
verification curves (ms of one target forward against tokens verified) of the profiles.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.ticker import PercentFormatter

from treegraft_lab.viz.stats import MID, SMALL, PlotFigure

STYLE = {"all-small": (SMALL, "-", "o"), "all-mid": (MID, "-", "s"), "10101": ("#9467bd", ":", "^"),
         "best-fixed": ("#8c564b", "--", "v"), "oracle": ("#2ca02c", "-", "*"),
         "adaptive-family": ("#c2255c", "-", "D"), "adaptive-single": ("#7f7f7f", "--", "x"),
         "rule-match-2": ("#e6ab02", "-.", "P")}
# legend words: `adaptive-single` is TreeGraft adaptive for the map's settings (what schedule="adaptive" loads there:
# `treegraft-lab regime --decode`'s default single-profile artifact), `adaptive-family` the family scheduler
LABELS = {"adaptive-family": "family scheduler (reads T_tgt, T_mid)",
          "adaptive-single": "TreeGraft adaptive, single-profile scheduler", "rule-match-2": "rule: match = 2"}
PANELS = (("speedup", "speedup over plain decoding"),
          ("A", "acceptance length A (new tokens / target forwards)"),
          ("mid_calls_per_round", "mid calls per round"))


def regime_figure(m: pd.DataFrame, band: list[float] = (), marks: dict[str, float] | None = None,
                  curves: dict[str, object] | None = None, title: str = "") -> PlotFigure:
    """`m`: one row per (ratio, schedule) with speedup, A, mid_calls_per_round (`regime.summary`
    rows with a `ratio` column; adaptive runs as schedules of their own). `band`: ratios to shade;
    `marks`: name -> ratio; `curves`: name -> DeviceProfile whose verification curve is drawn."""
    fig = PlotFigure(figsize=(8.4, 7.6), layout="constrained")  # 840 px: the notebook's output area
    axes = list(fig.subplots(2, 2).flat)
    ratios = sorted(m["ratio"].unique())
    for ax, (col, label) in zip(axes, PANELS):
        for name, g in m.groupby("schedule", sort=False):
            color, ls, marker = STYLE.get(name, (None, "-", "."))
            g = g.sort_values("ratio")
            one = g["ratio"].nunique() == 1  # a single point: drawn large and on top, not hidden under the lines
            words = LABELS.get(name, name) + (f" (one ratio, {g['ratio'].iloc[0]:g})" if one else "")
            ax.plot(g["ratio"], g[col], ls=ls, marker=marker, color=color, ms=12 if one else 5, mew=2.5 if one else 1,
                    lw=1.6, label=words, zorder=6 if one else 2)
        if band:
            lo, hi = _band_edges(ratios, band)
            ax.axvspan(lo, hi, color="#2ca02c", alpha=0.12, lw=0, label="oracle >= 1.05x both endpoints")
        for i, (name, r) in enumerate((marks or {}).items()):
            ax.axvline(r, color="k", ls=(0, (2, 2)) if i else "-", lw=0.9, alpha=0.6)
            ax.annotate(name, (r, 1.0), xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right",
                        fontsize=8, alpha=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("T_mid / T_tgt (log)")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3, which="both", lw=0.5)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=4, fontsize=8, frameon=False)
    if not curves:
        axes[-1].set_visible(False)
    else:
        ax = axes[-1]
        n = np.arange(1, 129)
        for name, prof in curves.items():
            ax.plot(n, [prof.target_ms(x) / prof.target_ms(1) for x in n], lw=1.8, label=name)
        ax.set_xlabel("tokens verified in one forward")
        ax.set_title("verification cost / one token", fontsize=10)
        ax.grid(alpha=0.3, lw=0.5)
        ax.legend(fontsize=7, loc="upper left")
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def share_text(v: float) -> str:
    """A share as printed in a heatmap cell: whole percent, "<1%" for a share above 0 that rounds to 0."""
    return "<1%" if 0 < v < 0.005 else f"{100 * v:.0f}%"


def cpu_curve_name(profile) -> str:
    """The verification panel's name for a measured CPU profile: which CPU, dtype and threads."""
    return f"this CPU ({profile.device.split(', forward path')[0]})"


def _band_edges(ratios: list[float], band: list[float]) -> tuple[float, float]:
    """The shaded span: from halfway (in log) below the band's lowest ratio to halfway above its highest."""
    lr = np.log(ratios)
    i, j = ratios.index(min(band)), ratios.index(max(band))
    lo = np.exp((lr[i] + lr[i - 1]) / 2) if i > 0 else ratios[0]
    hi = np.exp((lr[j] + lr[j + 1]) / 2) if j + 1 < len(ratios) else ratios[-1]
    return float(lo), float(hi)


def steps_figure(shares: pd.DataFrame, schedules: list[str], marks: dict[str, float] | None = None,
                 title: str = "") -> PlotFigure:
    """WHEN within a round: one heatmap per schedule in `schedules` (rows: draft steps 1 .. D,
    columns: the ratios T_mid / T_tgt), each cell the share of rounds calling the mid drafter at
    that step (`regime.step_shares`), printed in the cell in %; the panels share their columns, and a
    ratio a schedule was not run at is left grey. A ratio within 2% of a `marks` ratio is
    labelled with its name."""
    import matplotlib as mpl

    have = [s for s in schedules if s in set(shares["schedule"])]
    ratios = sorted(shares.loc[shares["schedule"].isin(have), "ratio"].unique())
    cmap = mpl.colormaps["Purples"].with_extremes(bad="#e6e6e6")
    fig = PlotFigure(figsize=(8.4, 1.0 + 2.0 * len(have)), layout="constrained")
    axes = fig.subplots(len(have), 1, squeeze=False)[:, 0] if have else []
    for ax, name in zip(axes, have):
        w = shares[shares["schedule"] == name].pivot_table(index="step", columns="ratio", values="share").sort_index()
        w = w.reindex(columns=ratios)
        im = ax.imshow(w.to_numpy(), vmin=0, vmax=1, cmap=cmap, aspect="auto")
        for (i, j), v in np.ndenumerate(w.to_numpy()):
            if np.isfinite(v):
                ax.text(j, i, share_text(v), ha="center", va="center", fontsize=7, color="white" if v > 0.6 else "black")
        labels = []
        for r in w.columns:
            tag = next((f"\n{k}" for k, v in (marks or {}).items() if abs(np.log(v / r)) < 0.02), "")
            labels.append(f"{r:.3g}{tag}")
        ax.set_xticks(range(len(w.columns)), labels, fontsize=8)
        ax.set_yticks(range(len(w.index)), [str(k) for k in w.index], fontsize=8)
        ax.set_ylabel("draft step")
        ax.set_title(f"{name}: share of rounds calling the mid drafter at each step", fontsize=10)
        fig.colorbar(im, ax=ax, fraction=0.03, pad=0.01, format=PercentFormatter(1.0))
    if have:
        axes[-1].set_xlabel("T_mid / T_tgt")
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def cpus_text(cpus: dict[str, str]) -> str:
    """The CPUs replays were collected on, each with the mid drafters collected there: one CPU is
    named once; several as "CPU (a, b); CPU (c)"."""
    by: dict[str, list[str]] = {}
    for mid, cpu in cpus.items():
        by.setdefault(cpu, []).append(mid)
    if len(by) == 1:
        return next(iter(by))
    return "; ".join(f"{cpu} ({', '.join(mids)})" for cpu, mids in by.items())


def mid_axis_title(ax, profile: str, growth: str = "lookup") -> str:
    """The heatmap's title from a `regime.MidAxis`: what it was priced on (prompts, tokens, trees,
    profile) and the CPUs its replays were collected on."""
    return (f"regime map over mid drafters: {len(ax.prompts)} eval prompts, first {ax.max_new} tokens, {growth} growth, "
            f"top-k 63\nmodelled on {profile} with T_mid scaled; replays collected on\n{cpus_text(ax.cpus)}")


PAPER_TAG = "paper's pairs"  # the x tick tag of the ratio the paper's pairs are set at


def paper_rows(main: list[tuple]) -> list[list[str]]:
    """The paper's main-table rows (pair, all-small, all-mid, TreeGraft, n) as the heatmap's table
    prints them, with the better endpoint and TreeGraft over it (derived from those numbers)."""
    out = []
    for name, small, mid, tg, n in main:
        best = max(small, mid)
        out.append([name, f"{small:.2f}x", f"{mid:.2f}x", f"{tg:.2f}x", "M" if mid > small else "S", f"{tg / best:.3f}", str(n)])
    return out


def _paper_table(ax, main: list[tuple], how: str, at: str) -> None:
    ax.axis("off")
    cols = ["the paper's pair", "all-small", "all-mid", "TreeGraft", "better", "TreeGraft / better", "n"]
    t = ax.table(cellText=paper_rows(main), colLabels=cols, loc="center", cellLoc="center",
                 colWidths=[0.22, 0.11, 0.11, 0.11, 0.09, 0.16, 0.08])
    t.auto_set_font_size(False)
    t.set_fontsize(7.5)
    t.scale(1.0, 1.15)
    ax.set_title(f"the paper's pairs ({how}): it reports no per-pair T_mid / T_tgt and no agreement,\n"
                 f"so they sit on the ratio axis only, at {at} (the authors' release's mean T_mid / T_tgt)",
                 fontsize=8.5)


def mid_axis_figure(cells: pd.DataFrame, scheduler: str | None = None, marks: dict[str, float] | None = None,
                    title: str = "", paper: list[tuple] | None = None, paper_how: str = "") -> PlotFigure:
    """The regime map over both axes (`regime.cells` rows): heatmaps with one row per mid drafter
    (its greedy agreement with the target, lowest at the bottom) and one column per cost ratio
    T_mid / T_tgt, of the oracle over the better endpoint, of `scheduler` over the better endpoint
    (`<scheduler>_gain`; cells it was not priced at are grey), and of which endpoint is better
    (S: all-small, M: all-mid, with the better one's speedup over plain decoding). Every value is
    printed in its cell. A ratio within 2% of a `marks` ratio is labelled with its name. `paper`:
    the paper's main-table rows (`paper.MAIN`), set under the heatmaps as a table and tagged on
    the first mark's column, the ratio axis only (the paper gives no agreement)."""
    import matplotlib as mpl

    c = cells.sort_values(["agreement", "ratio"])
    rows = list(dict.fromkeys(zip(c["mid"], c["agreement"])))[::-1]  # highest agreement on top
    ratios = sorted(c["ratio"].unique())
    panels = mid_axis_panels(c, scheduler)
    h = 0.45 * len(rows) + 0.9
    extra = 1.6 if paper else 0.0
    fig = PlotFigure(figsize=(8.4, 1.2 + h * len(panels) + extra), layout="constrained")
    spec = fig.add_gridspec(len(panels) + bool(paper), 1, height_ratios=[h] * len(panels) + ([extra] if paper else []))
    axes = [fig.add_subplot(spec[i, 0]) for i in range(len(panels))]
    at = next(iter(marks or {}), None)
    gains = [cell_grid(c, rows, ratios, col) for col, _ in panels if col != "better"]
    top = max([1.15, *(float(np.nanmax(z)) for z in gains if np.isfinite(z).any())])
    norm = mpl.colors.TwoSlopeNorm(vcenter=1.0, vmin=2.0 - top, vmax=top)  # one scale for every gain panel, centred on a tie
    for ax, (col, label) in zip(axes, panels):
        z = cell_grid(c, rows, ratios, col)
        if col == "better":
            speed = np.fmax(cell_grid(c, rows, ratios, "all-small"), cell_grid(c, rows, ratios, "all-mid"))
            draw_better(ax, z, speed)
        else:
            draw_gain(fig, ax, z, norm)
        last = ax is axes[-1]
        ax.set_xticks(range(len(ratios)), [f"{r:.3g}{ratio_tag(r, marks, bool(paper) and last, at)}" for r in ratios],
                      fontsize=8)
        ax.set_yticks(range(len(rows)), [f"{m} ({a:.2f})" for m, a in rows], fontsize=8)
        ax.set_ylabel("mid drafter (agreement)", fontsize=8)
        ax.set_title(label, fontsize=10)
    axes[-1].set_xlabel("T_mid / T_tgt")
    if paper:
        _paper_table(fig.add_subplot(spec[-1, 0]), paper, paper_how, f"{at}'s column" if at else "no marked ratio")
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def mid_axis_panels(c: pd.DataFrame, scheduler: str | None) -> list[tuple[str, str]]:
    """(column, title) of each heatmap: the oracle's gain, `scheduler`'s (grey where not priced), the better endpoint."""
    panels = [("oracle_gain", "oracle / better endpoint")]
    if scheduler is not None:
        unpriced = f"{scheduler}_gain" not in c or c[f"{scheduler}_gain"].isna().any()
        panels.append((f"{scheduler}_gain", f"{scheduler} / better endpoint" + (" (grey: not priced)" if unpriced else "")))
    panels.append(("better", "better endpoint (S: all-small, M: all-mid) and its speedup"))
    return panels


def cell_grid(c: pd.DataFrame, rows: list[tuple[str, float]], ratios: list[float], col: str) -> np.ndarray:
    """Column `col` of the cells as a (mid drafter row, ratio) grid, NaN where missing; "better" as 1.0 where
    all-mid is better, else 0.0."""
    out = np.full((len(rows), len(ratios)), np.nan)
    for i, (mid, a) in enumerate(rows):
        g = c[(c["mid"] == mid) & (c["agreement"] == a)].set_index("ratio")
        for j, r in enumerate(ratios):
            if r in g.index and col in g.columns:
                v = g.loc[r, col]
                out[i, j] = (1.0 if v == "all-mid" else 0.0) if col == "better" else float(v)
    return out


def ratio_tag(r: float, marks: dict[str, float] | None, paper_row: bool, at: str | None) -> str:
    """The tick label's tag of ratio `r`: the name of a mark within 2% of it, and on the bottom panel with the
    paper's table (`paper_row`), the paper's tag at the first mark `at`."""
    name = next((k for k, v in (marks or {}).items() if abs(np.log(v / r)) < 0.02), None)
    if name is None:
        return ""
    return f"\n{name}" + (f"\n\u25b2 {PAPER_TAG}" if paper_row and name == at else "")


def draw_better(ax, z: np.ndarray, speed: np.ndarray) -> None:
    """The better-endpoint panel: S / M cells in the drafters' colours, each with the better one's speedup."""
    import matplotlib as mpl

    cmap = mpl.colors.ListedColormap([SMALL, MID]).with_extremes(bad="#e6e6e6")
    ax.imshow(np.ma.masked_invalid(z), vmin=0, vmax=1, cmap=cmap, aspect="auto", alpha=0.55)
    for (i, j), v in np.ndenumerate(z):
        if np.isfinite(v):
            ax.text(j, i, f"{'M' if v else 'S'} {speed[i, j]:.2f}x", ha="center", va="center", fontsize=7)


def draw_gain(fig: PlotFigure, ax, z: np.ndarray, norm) -> None:
    """A gain panel on the shared scale `norm` (red below a tie, green above), each value in its cell, a colour bar."""
    import matplotlib as mpl

    cmap = mpl.colormaps["RdYlGn"].with_extremes(bad="#e6e6e6")
    im = ax.imshow(np.ma.masked_invalid(z), norm=norm, cmap=cmap, aspect="auto")
    for (i, j), v in np.ndenumerate(z):
        if np.isfinite(v):
            dark = abs(norm(v) - 0.5) > 0.35
            ax.text(j, i, f"{v:.3f}", ha="center", va="center", fontsize=7, color="white" if dark else "black")
    fig.colorbar(im, ax=ax, fraction=0.03, pad=0.01)


LINE_COLORS = ("C0", "C1", "C3", "C4", "C5", "C6", "C7", "C8", "C9")  # no green: the oracle's


def capture_figure(caps: dict[str, dict], title: str = "") -> PlotFigure:
    """How much of the oracle's gain each scheduler takes. Left: over the better endpoint at each ratio
    T_mid / T_tgt, the oracle and each scheduler of `caps` that has per-ratio gains (`imitation.capture_of`
    rows; the held-out map's); the dotted line is 1.15x (the cells counted). Right: each scheduler's mean
    capture over those cells, with its bootstrap 95% interval where it has one ("ci95"); a scheduler that
    reads the replays in hindsight (`causal` False) is hatched."""
    fig = PlotFigure(figsize=(8.4, 4.4), layout="constrained")
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.0, 1.0]})
    oracle = next((c["oracle_per_ratio"] for c in caps.values() if "oracle_per_ratio" in c), None)
    if oracle:
        r = sorted(oracle)
        left.plot(r, [oracle[x] for x in r], color=STYLE["oracle"][0], marker="*", label="oracle (hindsight)")
    for i, (name, c) in enumerate((n, c) for n, c in caps.items() if "per_ratio" in c):
        r = sorted(c["per_ratio"])
        left.plot(r, [c["per_ratio"][x] for x in r], marker="o", ms=4, ls="-" if c.get("causal", True) else ":",
                  label=name, color=LINE_COLORS[i % len(LINE_COLORS)])
    left.axhline(1.0, color="black", lw=0.8)
    left.axhline(1.15, color="grey", lw=0.8, ls=":")
    left.set_xscale("log")
    left.set_xlabel("T_mid / T_tgt")
    left.set_ylabel("speedup over the better endpoint")
    left.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    names = list(caps)
    y = np.arange(len(names))[::-1]
    for yi, name in zip(y, names):
        c = caps[name]
        m = c["mean_capture"]
        right.barh(yi, m if np.isfinite(m) else 0, color="#c2255c" if c.get("causal", True) else "#cccccc",
                   hatch="" if c.get("causal", True) else "//", edgecolor="black", lw=0.5)
        if "ci95" in c:
            right.plot(c["ci95"], [yi, yi], color="black", lw=1.2)
        right.text(max(m, 0) + 0.02 if np.isfinite(m) else 0.02, yi + 0.22, f"{m:.0%}" if np.isfinite(m) else "n/a",
                   fontsize=8, va="center")
    right.set_yticks(y, [f"{n}\n({caps[n]['split'].split(':')[0]}: {caps[n].get('prompts', '?')} prompts, "
                         f"{caps[n]['priced']} cells)" for n in names], fontsize=6)
    right.axvline(0.5, color="grey", lw=0.8, ls=":")
    right.axvline(0.0, color="black", lw=0.8)
    right.set_xlabel("mean capture of the oracle's gain\n(line: 95% interval over prompts)")
    right.xaxis.set_major_formatter(PercentFormatter(1.0))
    if title:
        fig.suptitle(title, fontsize=10)
    return fig
