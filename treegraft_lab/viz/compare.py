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
from plotly.subplots import make_subplots

from treegraft_lab.viz.tree import (
    FONT,
    HALO,
    MIN_HEIGHT,
    ROW_PX,
    fit_labels,
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
    union = pd.concat([a, b]).sort_values("accepted", ascending=False).drop_duplicates("path")
    union = union.assign(node=[ids[p] for p in union["path"]], parent=[ids.get(p[:-1], -1) for p in union["path"]])
    pos = tidy_layout(union)

    def renumber(rows: pd.DataFrame) -> pd.DataFrame:
        return rows.assign(node=[ids[p] for p in rows["path"]], parent=[ids.get(p[:-1], -1) for p in rows["path"]])

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
                 caption: str = "") -> go.Figure:
    """Two recorded rounds from one round start, side by side on one layout (nodes aligned by token
    path); a ring marks a node only that tree verified. `names`: the two methods' names."""
    a, b = kept_rows(run_a, round_a), kept_rows(run_b, round_b)
    a, b, pos = aligned(a, b)
    xs = [p[0] for p in pos.values()]
    xr = [min(xs) - 1.5, max(xs) + 1.5]  # room for the outermost labels
    depth = int(max(a["depth"].max(), b["depth"].max()))
    yr = [-depth - 0.45, 0.35]
    px_per_x = (WIDTH / 2 - 20) / (xr[1] - xr[0])
    titles = []
    for name, rows, other in ((names[0], a, b), (names[1], b, a)):
        acc = int(rows["accepted"].astype(bool).sum()) - 1
        only = len(set(rows["path"]) - set(other["path"]))
        titles.append(f"<b>{name}</b><br>A = {acc} accepted · {len(rows) - 1} verified · {only} only here")
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, horizontal_spacing=0.04)
    for col, (rows, other) in enumerate(((a, b), (b, a)), start=1):
        for t in tree_traces(rows, pos, fit_labels(rows, pos, px_per_x, xr), final=True):
            t.showlegend = t.showlegend and col == 1
            t.legendgroup = t.name
            fig.add_trace(t, row=1, col=col)
        only = rows[~rows["path"].isin(set(other["path"]))]
        fig.add_trace(go.Scatter(x=[pos[v][0] for v in only["node"]], y=[pos[v][1] for v in only["node"]], mode="markers",
                                 name="only in this tree", showlegend=col == 1, legendgroup="only", hoverinfo="skip",
                                 marker={"symbol": "circle-open", "size": 24, "color": ONLY_COLOR, "line": {"width": 2}}),
                      row=1, col=col)
    axis = {"visible": False, "showgrid": False, "zeroline": False}
    height = max(int(ROW_PX * (depth + 1) + 190), MIN_HEIGHT + 100)
    fig.update_xaxes(**axis, range=xr)
    fig.update_yaxes(**axis, range=yr)
    title = "one round start, two methods: nodes at the same place are the same token path"
    fig.update_layout(width=WIDTH, height=height, plot_bgcolor="white", paper_bgcolor="white",
                      margin={"l": 10, "r": 10, "t": 100, "b": 90}, dragmode="pan",
                      title={"text": title + (f"<br><span style='font-size:12px;color:#444'>{caption}</span>" if caption else ""),
                             "x": 0.01, "xanchor": "left", "y": 0.98, "yanchor": "top", "font": {"size": 14}},
                      legend={"orientation": "h", "x": 0.0, "xanchor": "left", "y": -0.02, "yanchor": "top",
                              "font": {"size": 11}},
                      hoverlabel={"font": {"family": FONT, "size": 11}})
    for ann in fig.layout.annotations:  # the subplot titles
        ann.font = {"size": 12, "family": FONT, "shadow": HALO}
    return fig
