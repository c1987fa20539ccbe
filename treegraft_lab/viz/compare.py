"""Two draft trees of one round start, side by side, aligned by node.

Two methods (two schedules, TreeGraft and a baseline, a drafter of one's own) drafting from the same
committed text draft trees whose nodes are token paths: a node of one tree and a node of the other
with the same path are the same candidate, and the target's verdict on it is the same. Both trees
are laid out on the union of their verified nodes, so a candidate sits at the same place in both;
the nodes only one tree verified are ringed, the accepted path is gold, and `depth_table` counts
per depth what each verified and whether the target accepted its node there.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from treegraft_lab.viz.export import Figure, label
from treegraft_lab.viz.tree import (
    EDGE_PX,
    MIN_HEIGHT,
    ROW_PX,
    captioned,
    fit_labels,
    footnote,
    margins,
    style_tree,
    tidy_layout,
    tree_traces,
)

ONLY_COLOR = "#d62728"  # the ring of a node only one of the two trees verified
WIDTH = 840  # px: the two trees fit JupyterLab's output area on a 1280 px screen


def kept_rows(run, round: int = 0, run_id: int = 0) -> pd.DataFrame:
    """The verified (kept) nodes of one recorded round, each with its token path (`path`)."""
    rows = run.tree_at(round, None, run=run_id)
    rows = rows[rows["kept"].astype(bool)].copy()
    token, parent = dict(zip(rows["node"], rows["token"])), dict(zip(rows["node"], rows["parent"]))

    def path(v: int) -> tuple[int, ...]:
        out = []
        while v >= 0:
            out.append(int(token[v]))
            v = parent[v]
        return tuple(reversed(out))

    rows["path"] = [path(int(v)) for v in rows["node"]]
    return rows


def aligned(a: pd.DataFrame, b: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Both trees' rows renumbered by token path (one id per path over both), and the union layout."""
    ids = {p: i for i, p in enumerate(sorted(set(a["path"]) | set(b["path"]), key=lambda p: (len(p), p)))}

    def renumber(rows: pd.DataFrame) -> pd.DataFrame:
        return rows.assign(node=[ids[p] for p in rows["path"]], parent=[ids.get(p[:-1], -1) for p in rows["path"]])

    pos = tidy_layout(renumber(pd.concat([a, b]).sort_values("accepted", ascending=False).drop_duplicates("path")))
    return renumber(a), renumber(b), pos


def depth_table(a: pd.DataFrame, b: pd.DataFrame, names: tuple[str, str]) -> pd.DataFrame:
    """Per depth: nodes each tree verified, how many both verified, and whether each tree's node
    at that depth was accepted (the target's greedy continuation is the same for both)."""
    rows = []
    for d in range(1, int(max(a["depth"].max(), b["depth"].max())) + 1):
        pa, pb = set(a["path"][a["depth"] == d]), set(b["path"][b["depth"] == d])
        rows.append({"depth": d, f"{names[0]}: verified": len(pa), f"{names[1]}: verified": len(pb), "in both": len(pa & pb),
                     f"{names[0]}: accepted": bool(a["accepted"][a["depth"] == d].any()),
                     f"{names[1]}: accepted": bool(b["accepted"][b["depth"] == d].any())})
    return pd.DataFrame(rows)


def side_by_side(run_a, run_b, names: tuple[str, str], round_a: int = 0, round_b: int = 0,
                 width: int = WIDTH // 2, caption: str | None = None) -> tuple[go.Figure, go.Figure]:
    """Two recorded rounds from one round start as two figures of one layout (nodes aligned by token
    path: a candidate sits at the same place in both); a ring marks a node only that tree verified.
    `names`: the two methods' names; `width`: px per figure (the two fit side by side); `caption`: the
    run's (pair, prompt, settings, profile), drawn as each figure's footnote, so an exported PNG names it."""
    a, b = kept_rows(run_a, round_a), kept_rows(run_b, round_b)
    a, b, pos = aligned(a, b)
    xs = [p[0] for p in pos.values()]
    m = margins(True)
    plot_w, span = width - m["l"] - m["r"], max(xs) - min(xs)
    pad = max(0.7, EDGE_PX * span / (plot_w - 2 * EDGE_PX)) if span > 0 else 0.7  # an accepted label fits at the edge
    xr = [min(xs) - pad, max(xs) + pad]
    depth = int(max(a["depth"].max(), b["depth"].max()))
    yr = [-depth - 0.45, 0.5]
    px_per_x = plot_w / (xr[1] - xr[0])
    height = max(int(ROW_PX * (depth + 1) + m["t"] + m["b"] + 20), MIN_HEIGHT)
    figs = []
    for name, rows, other in ((names[0], a, b), (names[1], b, a)):
        fig = Figure(tree_traces(rows, pos, fit_labels(rows, pos, px_per_x, xr), final=True))
        only = rows[~rows["path"].isin(set(other["path"]))]
        fig.add_trace(go.Scatter(x=[pos[v][0] for v in only["node"]], y=[pos[v][1] for v in only["node"]], mode="markers",
                                 name="only in this tree", showlegend=False, meta="legend key", hoverinfo="skip",
                                 marker={"symbol": "circle-open", "size": 24, "color": ONLY_COLOR, "line": {"width": 2}}))
        acc = int(rows["accepted"].astype(bool).sum()) - 1
        title = f"{name}: A = {acc} accepted · {len(rows) - 1} verified · {len(only)} only here"
        style_tree(fig, width, height, xr, yr, captioned(title, None, width), scroll=True)
        for t in fig.data:  # the legend is shown once, beside both (`legend_html`)
            t.meta, t.showlegend = ("legend key" if t.showlegend or t.meta == "legend key" else None), False
        footnote(fig, caption)
        fig.update_layout(dragmode="pan")
        figs.append(label(fig, caption, f"compare-{name}"))
    return figs[0], figs[1]
