"""Plotly figures of one round's draft tree, drawn from a recorded Run (no model needed).

`tree_figure(run, round, step)` draws the tree after draft step `step` (or, with step=None, the
final tree: pruned to the budget and verified). `growth_animation(run, round)` plays the round
one draft step per frame, then the verified tree.

Visual encoding (every one of them is in the legend):
- colour: who drafted the node: small (n-gram), mid (LM), or both (the mid drafter proposed a
  token the small drafter had already put there);
- size: path score s(v), scaled between the round's lowest and highest finite s;
- faded: pruned by the verification budget (final tree only);
- cross: dead, i.e. overwritten by a destructive (w/o ND) graft;
- gold edges and rings: the accepted path (final tree only);
- black ring: created at this step; diamond: the frontier this step expanded;
- grey square "+m": m more children of that parent, folded (only each parent's `max_children`
  best children are drawn: accepted first, then kept by pruning, then by path score), so a step
  that adds 100 nodes stays legible; its hover text says what it holds (kept, frontier, new).
Labels are short token texts in a monospace font, shown only where they fit between their
neighbours (they are shortened with an ellipsis, or left to the hover text), so they never
overlap. The hover text has the exact token, depth, p, s, the step that created the node and
whether the mid drafter has scored it.
"""

from __future__ import annotations

import html
import math
import unicodedata

import networkx as nx
import pandas as pd
import plotly.graph_objects as go

from treegraft_lab.viz.export import Figure, label

COLORS = {"root": "#4d4d4d", "small": "#2a7fdb", "mid": "#e8590c", "both": "#7b2cbf"}
DRAFTER_LABELS = {"root": "root (last token)", "small": "small (n-gram)", "mid": "mid (LM)", "both": "both drafters"}
# small-drafted nodes are coloured by the small drafter that made them (`DraftTree.source`)
SMALL_KINDS = {"suffix": ("#2b9348", "small (suffix)"), "recycling": ("#0f9fa8", "small (recycling)")}


def _small_kind(source: str) -> str:
    """"ngram", "suffix" or "recycling": the first small drafter named in a node's source."""
    return next((s for s in str(source).split("+") if s in SMALL_KINDS), "ngram")
ACCEPT_COLOR = "#f5b700"
FONT = "DejaVu Sans Mono, Menlo, Consolas, monospace"
FONT_SIZE = 10
CHAR_W = 0.62 * FONT_SIZE  # px per character of the monospace label font (DejaVu Sans Mono: 0.602 em)
LEAF_PX, ROW_PX = 34, 78  # preferred px per leaf column and per depth row
MARGIN = {"l": 10, "r": 175, "t": 62, "b": 10, "autoexpand": False}  # r: the legend; t: toolbar, then one title line
SCROLL_MARGIN_R = 12  # px right of the plot of a figure in a scrolling box (its legend is docked outside the box)
ACCEPTED_LABEL_PX = 8.1 * CHAR_W  # an accepted node's label: up to 8 characters
EDGE_PX = ACCEPTED_LABEL_PX / 2 + 5  # px at least between an outermost node and its plot's edge: an accepted label fits
TOOLBAR_PX = 30  # plotly's toolbar (shown on hover) takes the top 25 px of the right half: the title starts below it
MULTILINE_SHIFT_PX = 12
TITLE_SIZE, TITLE_LINE_PX = 14, 19
TITLE_CHAR_W = 0.56 * TITLE_SIZE  # px per character, a safe upper bound for plotly's Open Sans
MIN_HEIGHT = 300  # px: the full legend (11 entries) at font size 11
MAX_WIDTH = 840  # px: fits JupyterLab's output area on a 1280 px screen (848 px); pass width= for a larger one
SIZE_MIN, SIZE_MAX = 7, 20
MAX_CHILDREN = 4  # children drawn per parent; the others fold into one "+m" node
FOLD = 1 << 40  # node id of the fold node under parent p: FOLD + p
FOLD_COLOR = "#8d99a6"
HALO = "0 0 2px white, 0 0 2px white"  # a white halo: a label stays readable where it crosses an edge


# ---------------------------------------------------------------------------- layout


def tidy_layout(rows: pd.DataFrame) -> dict[int, tuple[float, float]]:
    """Top-down tidy layout: leaves spaced one unit apart in depth-first order, parents centred.

    Children are ordered accepted first, then by path score (best first), and the root, its first
    child, that child's first child and so on sit above their first child: the accepted path runs
    straight down the left edge from the root, so a view opened at its left shows the root and the
    whole accepted path however wide the tree.
    Returns node -> (x, y) with y = -depth.
    """
    g = nx.DiGraph()
    score = dict(zip(rows["node"], rows["score"]))
    accepted = set(rows["node"][rows["accepted"].astype(bool)]) if "accepted" in rows else set()
    g.add_nodes_from(rows["node"])
    g.add_edges_from((p, v) for v, p in zip(rows["node"], rows["parent"]) if p >= 0)
    pos: dict[int, tuple[float, float]] = {}
    next_leaf = 0

    def best_first(children):
        return sorted(children, key=lambda c: (c not in accepted, -score[c], c))

    roots = sorted(v for v in g if g.in_degree(v) == 0)
    for r in roots:
        depth = nx.single_source_shortest_path_length(g, r)
        spine, v = {r}, r
        while g.out_degree(v):
            v = best_first(g.successors(v))[0]
            spine.add(v)
        for v in nx.dfs_postorder_nodes(g, r, sort_neighbors=best_first):
            kids = [pos[u][0] for u in g.successors(v)]
            if kids:
                x = min(kids) if v in spine else (min(kids) + max(kids)) / 2
            else:
                x, next_leaf = float(next_leaf), next_leaf + 1
            pos[v] = (x, -float(depth[v]))
    return pos


def shown_nodes(rows: pd.DataFrame, max_children: int) -> set[int]:
    """The nodes drawn: from the root down, every child kept by pruning (the accepted path among
    them), then the best pruned children by path score up to `max_children` per parent. Only
    pruned nodes are ever folded."""
    acc = rows["accepted"] if "accepted" in rows else pd.Series(False, index=rows.index)
    kept = rows["kept"] if "kept" in rows else pd.Series(True, index=rows.index)
    kids: dict[int, list] = {}
    for v, p, a, k, s in zip(rows["node"], rows["parent"], acc, kept, rows["score"]):
        kids.setdefault(int(p), []).append((not a, not k, -s, int(v)))
    nodes = set(rows["node"].astype(int))
    stack = [int(v) for v, p in zip(rows["node"], rows["parent"]) if p not in nodes]
    shown: set[int] = set()
    while stack:
        v = stack.pop()
        shown.add(v)
        ranked = sorted(kids.get(v, []))
        stack += [c for i, (na, nk, _, c) in enumerate(ranked) if not na or not nk or i < max_children]
    return shown


def fold(rows: pd.DataFrame, shown: set[int]) -> pd.DataFrame:
    """`rows` cut to `shown`, plus one "+m" row under each shown parent whose other children (and
    their subtrees) are hidden; `folded` / `folded_all` count its hidden children / nodes."""
    nodes = rows.sort_values("node")
    under: dict[int, int] = {}  # hidden node -> its nearest shown ancestor
    groups: dict[int, list] = {}
    for i, v, p in zip(nodes.index, nodes["node"], nodes["parent"]):
        if v in shown:
            continue
        under[v] = p if p in shown else under.get(p, p)
        groups.setdefault(under[v], []).append(i)
    extra = []
    for p, idx in groups.items():
        sub = rows.loc[idx]
        first = sub[sub["parent"] == p]
        top = first.loc[first["score"].idxmax()] if len(first) else sub.iloc[0]
        row = {**top.to_dict(), "node": FOLD + p, "parent": p, "token": -1, "text": f"+{len(first)}", "logp": 0.0,
               "creator": "fold", "drafted_by": "fold", "ngram_n": 0, "alive": True, "folded": len(first),
               "folded_all": len(sub)}
        for col in ("kept", "new", "in_frontier", "in_pool"):
            if col in sub:
                row[col] = bool(sub[col].astype(bool).any())
        if "accepted" in sub:
            row["accepted"] = False
        extra.append(row)
    out = rows[rows["node"].isin(shown)]
    return pd.concat([out, pd.DataFrame(extra)], ignore_index=True) if extra else out.reset_index(drop=True)


def label_width(text: str) -> float:
    """Rendered width in px of `text` in the label font (wide East Asian characters count twice)."""
    return CHAR_W * sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def short_token(text: str) -> str:
    """A visible one-line form of a token: newline as ↵, tab as →, an all-space token as ␣."""
    t = text.replace("\n", "↵").replace("\t", "→").replace("\r", "")
    return t.strip() or ("␣" * min(len(t), 3) if t else "∅")


def fit_label(text: str, room_px: float) -> str:
    """`text` shortened with an ellipsis to fit `room_px`, or "" when not even 2 characters fit."""
    if label_width(text) <= room_px:
        return text
    out = ""
    for c in text:
        if label_width(out + c + "…") > room_px:
            break
        out += c
    return out + "…" if len(out) >= 1 and label_width(out + "…") <= room_px else ""


def whole_label(text: str) -> str:
    """The label an accepted node shows: its token whole, up to 8 characters (longer: 7 and an ellipsis)."""
    return fit_label(short_token(str(text)), ACCEPTED_LABEL_PX) or short_token(str(text))[:1]


def fit_labels(rows: pd.DataFrame, pos: dict, px_per_x: float, xr: list, pad: float = 4.0) -> dict[int, str]:
    """Labels that cannot overlap: each gets at most the distance to its nearest same-row neighbour,
    and stays inside the x range `xr` (plotly clips text at the axes). Nodes on the accepted path
    are labelled first, whole up to 8 characters (never less than one), over their neighbours'
    markers if need be (the labels have a white halo); the neighbours' labels get what is left."""
    out: dict[int, str] = {}
    by_row: dict[float, list[tuple[float, int]]] = {}
    for v in rows["node"]:
        by_row.setdefault(pos[v][1], []).append((pos[v][0], v))
    text = dict(zip(rows["node"], rows["text"]))
    acc = rows["accepted"].astype(bool) if "accepted" in rows else pd.Series(False, index=rows.index)
    must = set(rows["node"][acc])
    for xs in by_row.values():
        xs.sort()
        used: dict[int, float] = {}  # px width of the labels placed so far in this row
        for i, (x, v) in sorted(enumerate(xs), key=lambda t: t[1][1] not in must):
            edge = 2 * min(x - xr[0], xr[1] - x) * px_per_x
            room = edge - pad
            if v in must:  # an accepted token shows whole (up to 8 characters); its neighbours' labels give way
                room = min(room, ACCEPTED_LABEL_PX)
            near = [xs[j] for j in (i - 1, i + 1) if 0 <= j < len(xs)] + [(xu, u) for xu, u in xs if u in must and u in used]
            for xu, u in near if v not in must else ():  # the next labels, and the accepted one however wide
                d = abs(x - xu) * px_per_x
                room = min(room, 2 * (d - used[u] / 2 - pad) if u in used else d - pad)
            if not xs[i + 1:] and not xs[:i]:
                room = min(room, 8 * LEAF_PX)
            label = fit_label(short_token(str(text[v])), room)
            if not label and v in must:
                label = short_token(str(text[v]))[:1]  # an accepted node always shows its first character
            out[v] = label
            used[v] = label_width(label)
    return out


# ---------------------------------------------------------------------------- figure pieces


def _hover(r: pd.Series, final: bool) -> str:
    if r["creator"] == "fold":
        lines = [f"<b>{r['folded']} more children folded</b> ({r['folded_all']} nodes with their subtrees)",
                 f"best of them: s = {math.exp(r['score']):.3g} (log {r['score']:.2f}) · depth {r['depth']}"]
        if r.get("in_frontier", False):
            lines.append("some are in the frontier this step expanded")
        if r.get("new", False):
            lines.append("some were created at this step")
        if final:
            lines.append("some are kept for verification" if r["kept"] else "all pruned by the budget")
        return "<br>".join(lines)
    p = math.exp(r["logp"]) if r["parent"] >= 0 else 1.0
    s = r["score"]
    lines = [
        f"<b>{html.escape(repr(str(r['text'])))}</b>  (node {r['node']}, token {r['token']})",
        f"depth {r['depth']} · p = {p:.3f} · s = {math.exp(s):.3g} (log {s:.2f})",
        f"created at step {r['created_step']} by {r['creator']} · drafted by {r['drafted_by']}"
        + (f" ({r['source']})" if r.get("source", "") not in ("", r["drafted_by"]) else ""),
        f"mid-rescored: {'yes' if r['mid_scored'] else 'no'}" + (f" · n-gram n = {r['ngram_n']}" if r["ngram_n"] else ""),
    ]
    if not r["alive"]:
        lines.append("dead: overwritten by a destructive graft")
    if final and r["parent"] >= 0:
        lines.append(("kept" if r["kept"] else "pruned by the budget") + (" · ACCEPTED" if r["accepted"] else ""))
    if final and r.get("target_text", "") != "" and r["kept"]:
        lines.append(f"target's next token here: {html.escape(repr(str(r['target_text'])))}")
    return "<br>".join(lines)


def _sizes(rows: pd.DataFrame) -> list[float]:
    s = rows["score"].where(rows["parent"] >= 0)
    finite = s[s.map(lambda v: math.isfinite(v) and v > -1e30)]
    lo, hi = (finite.min(), finite.max()) if len(finite) else (0.0, 0.0)
    span = hi - lo if hi > lo else 1.0
    return [SIZE_MAX if p < 0 else SIZE_MIN + (SIZE_MAX - SIZE_MIN) * (min(max(v, lo), hi) - lo) / span
            if math.isfinite(v) else SIZE_MIN for v, p in zip(rows["score"], rows["parent"])]


def _edges(rows: pd.DataFrame, pos: dict, mask: pd.Series, name: str, color: str, width: float,
           dash: str = "solid", legend: bool = False) -> go.Scatter:
    xs: list = []
    ys: list = []
    for v, p in zip(rows["node"][mask], rows["parent"][mask]):
        if p >= 0 and p in pos:
            xs += [pos[p][0], pos[v][0], None]
            ys += [pos[p][1], pos[v][1], None]
    return go.Scatter(x=xs, y=ys, mode="lines", name=name, hoverinfo="skip", showlegend=legend,
                      line={"color": color, "width": width, "dash": dash})


def _custom(rows: pd.DataFrame) -> list[list]:
    """Per point [node, created step, kept, accepted, folded, depth, whole label of an accepted node
    ("" for the others)]: what the browser checks read."""
    fold = rows["drafted_by"] == "fold"
    return [[-1 if f else int(v), int(c), int(bool(k)), int(bool(a)), int(f), int(d), whole_label(t) if a and p >= 0 else ""]
            for v, c, k, a, f, d, t, p in zip(rows["node"], rows["created_step"], rows["kept"], rows["accepted"], fold,
                                              rows["depth"], rows["text"], rows["parent"])]


def tree_traces(rows: pd.DataFrame, pos: dict, labels: dict[int, str], final: bool) -> list[go.Scatter]:
    """The traces of one tree, always the same number and order (so animation frames line up)."""
    rows = rows.copy()
    for col, default in (("kept", True), ("accepted", False), ("in_frontier", False), ("new", False)):
        if col not in rows:
            rows[col] = default
    rows["size"] = _sizes(rows)
    if "step" in rows and "created_step" in rows:  # a ring marks exactly the nodes created at this step
        rows["new"] = rows["created_step"] == rows["step"]
    rows["faded"] = ~rows["kept"].astype(bool) & (rows["parent"] >= 0) if final else False
    live, acc = rows["alive"].astype(bool), rows["accepted"].astype(bool) & (rows["parent"] >= 0)
    traces = [
        _edges(rows, pos, live & ~rows["faded"] & ~acc, "edges", "#9aa5b1", 1.2),
        _edges(rows, pos, live & rows["faded"], "pruned edges", "#dde2e7", 1.0),
        _edges(rows, pos, ~live, "dead edges", "#c0c6cc", 1.0, dash="dot"),
        _edges(rows, pos, acc, "accepted path", ACCEPT_COLOR, 5.0, legend=final),
    ]
    for who in ("root", "small", "mid", "both"):
        sub = rows[rows["drafted_by"] == who]
        new, front = sub["new"].astype(bool), sub["in_frontier"].astype(bool)
        accepted = sub["accepted"].astype(bool)
        traces.append(go.Scatter(
            x=[pos[v][0] for v in sub["node"]], y=[pos[v][1] for v in sub["node"]],
            mode="markers+text", name=DRAFTER_LABELS[who], showlegend=False,
            text=[labels.get(v, "") for v in sub["node"]], customdata=_custom(sub),
            textposition="top center" if who == "root" else "bottom center",  # the root's edges run below it
            textfont={"family": FONT, "size": FONT_SIZE, "color": "#222", "shadow": HALO},
            hovertext=[_hover(r, final) for _, r in sub.iterrows()], hoverinfo="text",
            marker={
                "color": ([SMALL_KINDS.get(_small_kind(s), (COLORS[who],))[0] for s in sub["source"]]
                          if who == "small" and "source" in sub else COLORS[who]), "size": list(sub["size"]),
                "opacity": [0.22 if f else 1.0 for f in sub["faded"]],
                "symbol": ["x" if not a else "diamond" if f and not final else "circle"
                           for a, f in zip(sub["alive"], front)],
                "line": {"color": [ACCEPT_COLOR if a else "#111" if n else "white" for a, n in zip(accepted, new)],
                         "width": [3 if a or n else 1 for a, n in zip(accepted, new)]},
            },
        ))
    sub = rows[rows["drafted_by"] == "fold"]
    traces.append(go.Scatter(
        x=[pos[v][0] for v in sub["node"]], y=[pos[v][1] for v in sub["node"]], mode="markers+text",
        name="folded children", showlegend=False, text=[labels.get(v, "") for v in sub["node"]], customdata=_custom(sub),
        textposition="bottom center", textfont={"family": FONT, "size": FONT_SIZE, "color": "#555", "shadow": HALO},
        hovertext=[_hover(r, final) for _, r in sub.iterrows()], hoverinfo="text",
        marker={"color": FOLD_COLOR, "symbol": "square", "size": SIZE_MIN + 2,
                "opacity": [0.22 if f else 1.0 for f in sub["faded"]]},
    ))
    present = {_small_kind(s) for s in rows.loc[rows["drafted_by"].isin(["small", "both"]), "source"]} if "source" in rows else {"ngram"}
    traces += _legend_keys(final, present)
    return traces


def _legend_keys(final: bool, present: set[str] = frozenset({"ngram"})) -> list[go.Scatter]:
    """Legend-only entries explaining the marks (invisible points at no position); the small
    drafters' keys show for the drafters `present` (always the same entries: frames line up)."""
    keys = [(DRAFTER_LABELS[w], {"color": c, "size": 11}, w != "small" or "ngram" in present) for w, c in COLORS.items()]
    keys += [(label, {"color": c, "size": 11}, k in present) for k, (c, label) in SMALL_KINDS.items()]
    keys += [("pruned (faded)", {"color": "#999", "opacity": 0.25, "size": 11}, final),
            ("dead (overwritten)", {"color": "#999", "symbol": "x", "size": 11}, True),
            ("new at this step", {"color": "white", "size": 11, "line": {"color": "#111", "width": 3}}, not final),
            ("frontier expanded", {"color": "#999", "symbol": "diamond", "size": 11}, not final),
            ("bigger: higher s(v)", {"color": "#bbb", "size": 15}, True),
            ("+m: folded children", {"color": FOLD_COLOR, "symbol": "square", "size": 11}, True)]
    return [go.Scatter(x=[None], y=[None], mode="markers", name=n, marker=m, showlegend=show, hoverinfo="skip")
            for n, m, show in keys]


# ---------------------------------------------------------------------------- public figures


def _round_rows(run, round: int, step: int | None, run_id: int) -> pd.DataFrame:
    rows = run.tree_at(round, step, run=run_id)
    if rows.empty:
        raise ValueError(f"run {run_id} has no recorded tree for round {round}" + (f", step {step}" if step else ""))
    return rows


def margins(scroll: bool) -> dict:
    """The figure's margins: a figure in a sideways-scrolling box has no legend of its own (the
    box shows it, docked outside the scrolled area: `legend_html`), so no room on the right for one."""
    return {**MARGIN, "r": SCROLL_MARGIN_R} if scroll else MARGIN


def _canvas(pos: dict, width: int | None = None, depth: int | None = None,
            scroll: bool = False) -> tuple[int, int, float, list, list]:
    """Width, height, px per x unit and axis ranges; `depth`: draw rows down to this depth only;
    `scroll`: LEAF_PX per leaf column however wide that gets (for a horizontally scrolling box).
    The x range leaves EDGE_PX between the outermost nodes and the plot's edge at any width, so
    no marker or accepted label there is cut."""
    xs, ys = [p[0] for p in pos.values()], [p[1] for p in pos.values()]
    ys = ys if depth is None else [y for y in ys if y >= -depth] or [0.0]
    m = margins(scroll)
    n_cols = max(xs) - min(xs) + 1
    natural = max(LEAF_PX * (n_cols + 1.4) + m["l"] + m["r"], 640)
    width = width or int(natural if scroll else min(natural, MAX_WIDTH))
    height = int(ROW_PX * (max(-min(ys), 1) + 1) + m["t"] + m["b"] + 20)
    height = max(height, MIN_HEIGHT)  # the legend's 11 entries fit without a scroll bar
    plot_w, span = width - m["l"] - m["r"], max(xs) - min(xs)
    pad = max(0.7, EDGE_PX * span / (plot_w - 2 * EDGE_PX)) if span > 0 else 0.7
    xr = [min(xs) - pad, max(xs) + pad]
    px_per_x = plot_w / (xr[1] - xr[0])
    yr = [min(ys) - 0.45, 0.3]
    return width, height, px_per_x, xr, yr


FOCUS_ROWS = 4  # depth rows a focused view shows at most around a step's new nodes (more: they get closer)
FOCUS_MIN_COLS = 8  # leaf columns a focused view spans at least (it zooms no closer than this)


def step_nodes(rows: pd.DataFrame, step: int) -> list[int]:
    """The nodes a draft step added (created at `step`) and the frontier it expanded: what a view of
    that step must show."""
    new = rows["created_step"] == step
    front = rows["in_frontier"].astype(bool) if "in_frontier" in rows else False
    return [int(v) for v in rows["node"][new | front]]


def focus_ranges(pos: dict, nodes: list[int], xr: list, yr: list, plot_w: float) -> tuple[list, list]:
    """Axis ranges that hold every one of `nodes` (a step's new nodes and its frontier) with a margin,
    inside the whole tree's ranges `xr`, `yr`: the columns the step changed, in view, from the root's
    row down to the deepest of them (the root stays in view: the reader keeps their bearings). No
    node is cut by an edge: one drawn across it moves the edge past it."""
    pts = [pos[v] for v in nodes if v in pos]
    if not pts:
        return xr, yr
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    lo, hi = min(xs), max(xs)
    want = max(hi - lo, FOCUS_MIN_COLS - 1)
    pad = max(0.7, EDGE_PX * want / max(plot_w - 2 * EDGE_PX, 1.0))
    mid = (lo + hi) / 2
    x0, x1 = max(min(lo, mid - want / 2) - pad, xr[0]), min(max(hi, mid + want / 2) + pad, xr[1])
    r = (SIZE_MAX / 2 + 3) * (x1 - x0) / max(plot_w, 1.0)  # a marker's half width in x units
    for x, _ in pos.values():
        if x0 - r < x < x0 + r:
            x0 = max(x - 1.5 * r, xr[0])
        if x1 - r < x < x1 + r:
            x1 = min(x + 1.5 * r, xr[1])
    return [x0, x1], [max(min(ys) - 0.45, yr[0]), max(yr[1], 0.5)]


def _title(run, round: int, step: int | None, run_id: int, depth_max: int) -> str:
    rd = run.rounds[(run.rounds["run"] == run_id) & (run.rounds["round"] == round)]
    head = f"round {round}"
    if step is not None:
        st = run.steps[(run.steps["run"] == run_id) & (run.steps["round"] == round) & (run.steps["step"] == step)]
        who = "mid" if len(st) and bool(st["call_mid"].iloc[0]) else "small"
        head += f" · after draft step {step}/{depth_max} ({who} drafter)"
    elif len(rd):
        r = rd.iloc[0]
        head += f" · verified: A = {r['accepted']} accepted (+1 bonus), kept {r['kept']} of {r['nodes']} nodes"
    if len(rd):
        head += f" · schedule {rd['schedule'].iloc[0]}"
    return head


def tree_figure(run, round: int, step: int | None = None, run_id: int = 0, stable: bool = True,
                show_pruned: bool = True, width: int | None = None, max_children: int | None = MAX_CHILDREN,
                scroll: bool = False, caption: str | None = "", caption_at: str = "title",
                focus: bool = False) -> go.Figure:
    """The draft tree of `round` after draft `step` (None: the final pruned and verified tree).

    stable: lay out every node the round ever created, so nodes keep their place from step to
    step. show_pruned: draw nodes cut by the budget (faded) in the final tree. width: figure
    width in px (default: by leaf count, at most MAX_WIDTH unless `scroll`); labels are fitted
    to it. max_children: pruned children drawn per parent, the rest folded into one "+m" node
    (None: all); kept nodes are always drawn. scroll: as wide as the tree needs (LEAF_PX per
    leaf), for a box that scrolls sideways. caption: the line under the title naming the pair,
    prompt, settings and profile ("": the run's own, `caption.run_caption`; None: none). caption_at:
    "title" (under the title) or "foot" (a footnote under the plot, for a view that names the caption
    beside the figure on screen: a PNG of the figure still carries it). The figure's PNG button names
    the file after the caption (`viz.export`). focus (a draft step): the axes zoomed to what the
    step changed, its new nodes and the frontier it expanded, in a figure that fits the screen;
    the rest of the tree lies around it (drag to pan).
    """
    from treegraft_lab.viz.caption import run_caption

    caption = run_caption(run, run_id) if caption == "" else caption
    final_rows = _round_rows(run, round, None, run_id)
    rows = final_rows if step is None else _round_rows(run, round, step, run_id)
    if step is None and not show_pruned:
        rows = rows[rows["kept"].astype(bool)]
    if max_children:
        shown = shown_nodes(final_rows, max_children)
        final_rows, rows = fold(final_rows, shown), fold(rows, shown)
    pos = tidy_layout(final_rows if stable and (show_pruned or step is not None) else rows)
    focus = focus and step is not None
    width, height, px_per_x, xr, yr = _canvas(pos, width, depth=int(rows["depth"].max()), scroll=scroll and not focus)
    if focus:
        m = margins(scroll)
        xr, yr = focus_ranges(pos, step_nodes(rows, step), xr, yr, width - m["l"] - m["r"])
        px_per_x = (width - m["l"] - m["r"]) / (xr[1] - xr[0])
        height = max(int(ROW_PX * min(yr[1] - yr[0], FOCUS_ROWS + 0.75) + m["t"] + m["b"] + 20), MIN_HEIGHT)
    labels = fit_labels(rows, pos, px_per_x, xr)
    depth_max = int(run.steps[(run.steps["run"] == run_id) & (run.steps["round"] == round)]["step"].max())
    fig = Figure(tree_traces(rows, pos, labels, final=step is None))
    head = _title(run, round, step, run_id, depth_max)
    style_tree(fig, width, height, xr, yr, captioned(head, caption if caption_at == "title" else None, min(width, MAX_WIDTH)),
               scroll=scroll)  # the title wraps to what a scrolling box shows of a wide tree
    if focus:
        fig.update_layout(dragmode="pan")
    if scroll:  # no legend entry at all (plotly was seen to draw the legend after a redraw despite showlegend=False)
        for t in fig.data:
            t.meta, t.showlegend = ("legend key" if t.showlegend else None), False
    if caption_at == "foot":
        footnote(fig, caption)
    return label(fig, caption, f"tree-round{round}-" + ("verify" if step is None else f"step{step}"))


FOOT_SIZE, FOOT_LINE_PX = 11, 15  # the footnote's font (px) and line height


def footnote(fig: go.Figure, caption: str | None) -> go.Figure:
    """`caption` in small grey lines under the plot, inside the figure (the bottom margin and the height
    grow by its lines): a PNG of the figure names its pair, prompt, settings and profile even where the
    view shows them beside it. Returns `fig`."""
    if not caption:
        return fig
    lines = wrap_title(html.escape(caption, quote=False), fig.layout.width, char_w=0.56 * FOOT_SIZE).split("<br>")
    extra, below = FOOT_LINE_PX * len(lines) + 6, fig.layout.margin.b or 0
    fig.update_layout(height=fig.layout.height + extra, margin={"b": below + extra})
    fig.add_annotation(text="<br>".join(lines), xref="paper", yref="paper", x=0, y=0, xanchor="left", yanchor="top",
                       yshift=-(below + 2), showarrow=False, align="left", font={"size": FOOT_SIZE, "color": "#444"},
                       name="caption")
    return fig


def wrap_title(title: str, width: int, char_w: float = TITLE_CHAR_W) -> str:
    """`title` broken into lines (at " · " where it can, else at spaces) that fit `width` px at `char_w` px
    a character; the word "profile" stays on the line of the profile's name."""
    room = max(int((width - 24) / char_w), 20)
    lines: list[str] = []
    for i, part in enumerate(title.split(" · ")):
        for j, word in enumerate(part.replace("profile ", "profile\0", 1).split(" ")):
            word = word.replace("\0", " ")
            sep = " · " if i and not j else " "
            if lines and len(lines[-1]) + len(sep) + len(word) <= room:
                lines[-1] += sep + word
            else:
                if lines and sep != " ":
                    lines[-1] += " ·"  # the separator stays visible at the end of the line
                lines.append(word)
    return "<br>".join(lines)


def title_lines(title: str) -> int:
    return title.count("<br>") + 1


def _title_y(title: str, height: float) -> float:
    """The title's y (container fraction, anchored at its top) that puts its first line TOOLBAR_PX
    below the figure's top; plotly draws a title of several lines about 10 px higher than one line."""
    return 1 - (TOOLBAR_PX + (MULTILINE_SHIFT_PX if title_lines(title) > 1 else 0)) / height


def retitle(fig: go.Figure, text: str) -> go.Figure:
    """Give `fig` (a tree figure) the title `text`, wrapped to its width, the top margin grown or
    shrunk to its lines."""
    new = wrap_title(text, min(fig.layout.width, MAX_WIDTH))  # a wide tree's box shows its first MAX_WIDTH px
    extra = TITLE_LINE_PX * (title_lines(new) - title_lines(fig.layout.title.text or ""))
    height = fig.layout.height + extra
    fig.update_layout(height=height, margin={"t": fig.layout.margin.t + extra},
                      title={"text": new, "y": _title_y(new, height)})
    return fig


def style_tree(fig: go.Figure, width: int, height: int, xr: list, yr: list, title: str, lines: int | None = None,
           scroll: bool = False) -> None:
    """Axes, legend and a title that starts below plotly's toolbar and wraps to the figure's width;
    the top margin (and the height) grow by `lines` title lines (default: this title's). `scroll`:
    no legend in the figure (the scrolling box docks it outside, `legend_html`)."""
    axis = {"visible": False, "showgrid": False, "zeroline": False, "fixedrange": False}
    extra = TITLE_LINE_PX * ((lines or title_lines(title)) - 1)
    m = margins(scroll)
    fig.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left", "xref": "container", "yref": "container",
               "y": _title_y(title, height + extra), "yanchor": "top", "font": {"size": TITLE_SIZE}},
        width=width, height=height + extra,
        margin={**m, "t": m["t"] + extra}, plot_bgcolor="white", paper_bgcolor="white", showlegend=not scroll,
        xaxis={**axis, "range": xr}, yaxis={**axis, "range": yr},
        legend={"x": 1 + 8 / (width - m["l"] - m["r"]), "xanchor": "left", "y": 1.0, "font": {"size": 11},
                "itemsizing": "constant"},  # 8 px right of the plot at any width
        hoverlabel={"font": {"family": FONT, "size": 11}, "align": "left"},
    )


def _key_svg(t: go.Scatter) -> str:
    """A 16 px picture of one legend entry: a line, or a marker in its symbol, colour and outline."""
    if t.mode == "lines":
        return (f'<line x1="1" y1="8" x2="15" y2="8" stroke="{t.line.color}" '
                f'stroke-width="{min(t.line.width or 2, 5)}"/>')
    m = t.marker
    r = min((m.size or 11) / 2, 7)
    fill, op = m.color, m.opacity if isinstance(m.opacity, (int, float)) else 1
    ring = f'stroke="{m.line.color}" stroke-width="{m.line.width}"' if m.line and m.line.width else 'stroke="none"'
    if m.symbol == "x":
        d = r * 0.8
        return (f'<path d="M{8 - d} {8 - d}L{8 + d} {8 + d}M{8 - d} {8 + d}L{8 + d} {8 - d}" stroke="{fill}" '
                f'stroke-width="3" opacity="{op}"/>')
    if m.symbol == "square":
        return f'<rect x="{8 - r}" y="{8 - r}" width="{2 * r}" height="{2 * r}" fill="{fill}" opacity="{op}" {ring}/>'
    if m.symbol == "diamond":
        return f'<path d="M8 {8 - r}L{8 + r} 8L8 {8 + r}L{8 - r} 8Z" fill="{fill}" opacity="{op}" {ring}/>'
    return f'<circle cx="8" cy="8" r="{r - (m.line.width or 0) / 2 if m.line else r}" fill="{fill}" opacity="{op}" {ring}/>'


def legend_html(fig: go.Figure) -> str:
    """The legend of a tree figure as one wrapping HTML line, for a box that scrolls the figure
    sideways: docked outside the scrolled area, it stays in view wherever the reader scrolls."""
    items = [f'<span style="display:inline-flex;align-items:center;gap:4px;margin-right:14px;white-space:nowrap">'
             f'<svg width="16" height="16" viewBox="0 0 16 16">{_key_svg(t)}</svg>{html.escape(t.name)}</span>'
             for t in fig.data if t.showlegend or t.meta == "legend key"]
    return f'<div class="tg-legend" style="font-size:12px;line-height:20px;color:#333">{"".join(items)}</div>'


def captioned(title: str, caption: str | None, width: int) -> str:
    """`title` (wrapped) with `caption` below it in smaller grey lines, both wrapped to `width` px."""
    lines = wrap_title(html.escape(caption, quote=False), width).split("<br>") if caption else []
    return "<br>".join([wrap_title(title, width)] + [f'<span style="font-size:12px;color:#444">{x}</span>' for x in lines])


def growth_animation(run, round: int, run_id: int = 0, duration_ms: int = 900, width: int | None = None,
                     max_children: int | None = MAX_CHILDREN, caption: str | None = "") -> go.Figure:
    """One frame per draft step of `round`, then the pruned and verified tree; play and slider above
    the tree. Each step's frame is zoomed to what the step changed (its new nodes and the frontier
    it expanded, `focus_ranges`; drag to pan), the verify frame shows the whole tree, in a figure
    that fits the screen with its controls. max_children: children drawn per parent, the rest
    folded into one "+m" node (None: all). caption: the line under the title naming the pair,
    prompt, settings and profile ("": the run's own, `caption.run_caption`; None: none)."""
    from treegraft_lab.viz.caption import run_caption

    caption = run_caption(run, run_id) if caption == "" else caption
    final_rows = _round_rows(run, round, None, run_id)
    shown = shown_nodes(final_rows, max_children) if max_children else None
    final_rows = fold(final_rows, shown) if shown else final_rows
    pos = tidy_layout(final_rows)
    width, _, px_per_x, xr, yr = _canvas(pos, width)
    plot_w = width - MARGIN["l"] - MARGIN["r"]
    height = int(ROW_PX * (FOCUS_ROWS + 0.75) + 20)  # the plot area: FOCUS_ROWS rows around each step's change
    steps = sorted(run.steps[(run.steps["run"] == run_id) & (run.steps["round"] == round)]["step"].unique())
    frames = []
    for k in [*steps, None]:
        rows = final_rows if k is None else _round_rows(run, round, int(k), run_id)
        rows = fold(rows, shown) if shown and k is not None else rows
        fx, fy = (xr, [yr[0], max(yr[1], 0.5)]) if k is None else focus_ranges(pos, step_nodes(rows, int(k)), xr, yr, plot_w)
        ppx = plot_w / (fx[1] - fx[0])
        name = "verify" if k is None else f"step {k}"
        title = captioned(_title(run, round, None if k is None else int(k), run_id, int(max(steps))), caption, width)
        frames.append(go.Frame(name=name, data=tree_traces(rows, pos, fit_labels(rows, pos, ppx, fx), final=k is None),
                               layout={"title": {"text": title}, "xaxis": {"range": fx}, "yaxis": {"range": fy}}))
    fig = label(Figure(data=frames[0].data, frames=frames), caption, f"growth-round{round}")
    lines = max(title_lines(f.layout.title.text) for f in frames)  # every frame's title fits
    controls = 86  # px between the title and the plot: the play buttons, and the slider beside them
    style_tree(fig, width, height + controls, frames[0].layout.xaxis.range, frames[0].layout.yaxis.range,
               frames[0].layout.title.text, lines=lines)
    fig.update_layout(margin={"t": fig.layout.margin.t + controls, "b": 10}, dragmode="pan")
    for f in frames:
        f.layout.title.y = _title_y(f.layout.title.text, fig.layout.height)
    anim = {"frame": {"duration": duration_ms, "redraw": True}, "transition": {"duration": 0}, "mode": "immediate"}
    plot_h = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    above = 1 + (controls - 6) / plot_h  # the controls' top, 6 px under the title's block
    fig.update_layout(
        updatemenus=[{"type": "buttons", "direction": "left", "x": 0.0, "y": above, "xanchor": "left", "yanchor": "top",
                      "pad": {"t": 0, "b": 0},
                      "buttons": [{"label": "▶ play", "method": "animate", "args": [None, {**anim, "fromcurrent": True}]},
                                  {"label": "❚❚ pause", "method": "animate", "args": [[None], {**anim, "frame": {"duration": 0}}]}]}],
        sliders=[{"active": 0, "x": 0.25, "y": above, "len": 0.75, "yanchor": "top", "pad": {"t": 0, "b": 0},
                  "currentvalue": {"prefix": "showing: ", "offset": 4},
                  "steps": [{"label": f.name, "method": "animate", "args": [[f.name], anim]} for f in frames]}],
    )
    return fig


def showcase_round(run, run_id: int = 0) -> tuple[int, str]:
    """The round a view opens on, and why in words: the first round where a mid step reselected an
    earlier node (a frontier node above the depth the previous step reached: WHERE at work) and the
    target accepted a node the mid drafter drafted; else the first with either; else the round
    that accepted most."""
    st, tr = run.steps[run.steps["run"] == run_id], run.tree[run.tree["run"] == run_id]
    reselect = set(st["round"][st["call_mid"].astype(bool) & (st["reselected_earlier"].fillna(0) > 0)])
    acc = tr[tr["accepted"].astype(bool) & (tr["parent"] >= 0)]
    mid_acc = set(acc["round"][acc["drafted_by"].isin(["mid", "both"])])
    sorted(run.rounds["round"][run.rounds["run"] == run_id])
    for want, why in ((reselect & mid_acc, "a mid step reselects an earlier node and the accepted path goes through "
                                          "a node the mid drafter drafted"),
                      (mid_acc, "the accepted path goes through a node the mid drafter drafted"),
                      (reselect, "a mid step reselects an earlier node")):
        if want:
            r = min(want)
            return int(r), f"round {r}: {why}"
    rd = run.rounds[run.rounds["run"] == run_id]
    if not len(rd):
        return 0, "round 0"
    r = int(rd.sort_values(["accepted", "round"], ascending=[False, True])["round"].iloc[0])
    return r, f"round {r}: the round that accepted most (no mid step in this run reselected an earlier node or drafted an accepted one)"


def called_rounds(run, run_id: int = 0) -> list[tuple[int, int, str]]:
    """The rounds where the run's schedule called the mid drafter and the call paid off in acceptance, as
    (round, kind, why in words), best kind first: 0, its schedule called it at some steps and skipped it at
    others and its accepted path goes through a node only the mid drafter drafted (the small drafter had
    not proposed it); 1, another round with a call and such a node; 2, a round with a call whose accepted
    path goes through a node it drafted (the small drafter too). Empty where it never called."""
    st, tr = run.steps[run.steps["run"] == run_id], run.tree[run.tree["run"] == run_id]
    calls = st.groupby("round")["call_mid"].agg(lambda c: (bool(c.astype(bool).any()), bool(c.astype(bool).all())))
    called = {int(r) for r, (some, _) in calls.items() if some}
    mixed = {int(r) for r, (some, every) in calls.items() if some and not every}
    acc = tr[tr["accepted"].astype(bool) & (tr["parent"] >= 0)]
    only_mid = {int(r) for r in acc["round"][acc["drafted_by"] == "mid"]}
    by_mid = {int(r) for r in acc["round"][acc["drafted_by"].isin(["mid", "both"])]}
    paid = "the accepted path goes through a node only the mid drafter drafted"
    tiers = ((mixed & only_mid, f"the scheduler calls the mid drafter at some steps, skips it at others, and {paid}"),
             (called & only_mid, f"the scheduler calls the mid drafter and {paid}"),
             (called & by_mid, "the scheduler calls the mid drafter and the accepted path goes through a node it drafted"))
    out: list[tuple[int, int, str]] = []
    for kind, (want, why) in enumerate(tiers):
        seen = {r for r, _, _ in out}
        out += [(r, kind, f"round {r}: {why}") for r in sorted(want - seen)]
    return out


def called_round(run, run_id: int = 0) -> tuple[int, str] | None:
    """The first of `called_rounds` (the round, and why in words); None where the run never called the mid drafter."""
    rounds = called_rounds(run, run_id)
    return (rounds[0][0], rounds[0][2]) if rounds else None


def showcase_step(run, round: int, run_id: int = 0) -> int | None:
    """The draft step of `round` a view opens on: its first mid step that reselected an earlier node,
    else its first mid step, else None (the first step)."""
    st = run.steps[(run.steps["run"] == run_id) & (run.steps["round"] == round) & run.steps["call_mid"].astype(bool)]
    if not len(st):
        return None
    re = st[st["reselected_earlier"].fillna(0) > 0]
    return int((re if len(re) else st)["step"].min())
