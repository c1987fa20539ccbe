"""The adaptive scheduler's decision boundary, drawn where a recorded run's decisions were made.

`step_inputs(run, policy)` rebuilds the 17 inputs of every recorded step from the tables and
re-scores them with the policy's own `decide` (the online code path), so the figure's decisions
are the recorded ones. `boundary_figure` holds all inputs at the recorded medians of one draft step
and sweeps two of them: three planes of signal pairs and the plane of the two measured costs
(T_tgt, T_mid), which the scheduler reads live from the decoder.

Margins are in tokens/s: g_psi predicts a throughput gain in tokens per ms, shown x 1000.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from treegraft_lab.schedule.context import StepContext
from treegraft_lab.schedule.signals import words
from treegraft_lab.viz.export import exportable
from treegraft_lab.viz.tree import COLORS, wrap_title

PER_S = 1000.0  # g_psi is in tokens per ms
BOUNDS = {"frontier_leaf_ratio": (0, 1), "past_depth_ratio": (0, 1), "reselect_overlap": (0, 1), "root_match": (0, 1),
          "ngram_match": (0, 1), "recent_hit_rate": (0, 1), "mean_frontier_depth": (0, None), "collapse_debt": (0, None),
          "score_spread": (0, None), "mean_path_score": (None, 0), "t_tgt_ms": (1, None), "t_mid_ms": (1, None)}
CAPTION_PX = 900  # the caption under the title wraps at about 110 characters (it is set smaller than the title)
SCALE = [[0.0, COLORS["small"]], [0.5, "#ffffff"], [1.0, COLORS["mid"]]]  # skip: small drafter blue; call: mid orange


def step_inputs(run, policy) -> pd.DataFrame:
    """One row per recorded step: the 17 raw inputs (named as in the artifact), the recorded
    decision and margin, and the decision and margin the policy gives those inputs now (tokens/s);
    a step the decoder did not ask the policy about (a generation's first round) keeps no margin
    and no call."""
    art = policy.artifact
    plen = run.runs.set_index("run")["prompt_ids"].map(len)
    rows = []
    for (r, _rd), steps in run.steps.sort_values(["run", "round", "step"]).groupby(["run", "round"]):
        history: list[int] = []
        for s in steps.to_dict("records"):
            ctx = StepContext.from_signals(int(s["step"]), art.depth, history, int(plen[r]), s["t_tgt_ms"],
                                           s["t_mid_ms"], {k: s[k] for k in policy.signals})
            asked = math.isfinite(s["policy_score"])  # not asked: a generation's first round, no mid drafter
            call = policy.decide(ctx) and asked
            rows.append({"run": r, "round": s["round"], "step": s["step"], **dict(zip(art.inputs, policy.features(ctx))),
                         "recorded call": bool(s["call_mid"]), "recorded g": PER_S * s["policy_score"],
                         "call": call, "g": PER_S * policy.last_score if asked else math.nan})
            history.append(int(s["call_mid"]))
    return pd.DataFrame(rows)


def axis_values(name: str, art, seen: pd.Series, n: int = 41) -> np.ndarray:
    """Values of input `name` to sweep: the recorded range and the training mean +- 2.5 std, within its bounds."""
    i = art.inputs.index(name)
    lo = min(seen.min(), art.x_mean[i] - 2.5 * art.x_std[i])
    hi = max(seen.max(), art.x_mean[i] + 2.5 * art.x_std[i])
    blo, bhi = BOUNDS.get(name, (None, None))
    lo, hi = (lo if blo is None else max(lo, blo)), (hi if bhi is None else min(hi, bhi))
    return np.linspace(lo, hi if hi > lo else lo + 1.0, n)


def centre(inputs: pd.DataFrame, art, step: int) -> dict[str, float]:
    """The recorded inputs at draft step `step`: medians, with the most common history of earlier decisions."""
    at = inputs[inputs["step"] == step]
    c = at[art.inputs].median().to_dict()
    hist_cols = [f"hist{j + 1}" for j in range(art.depth)]
    c.update(zip(hist_cols, at[hist_cols].value_counts().idxmax()))
    c["calls_over_D"] = sum(c[h] for h in hist_cols) / art.depth
    return c


def slice_scores(policy, art, base: dict[str, float], sx: str, sy: str, xs, ys) -> np.ndarray:
    """g_psi (tokens/s) over the grid xs x ys of inputs sx, sy; the cost ratio follows the costs."""
    z = np.zeros((len(ys), len(xs)))
    for a, y in enumerate(ys):
        for b, x in enumerate(xs):
            v = {**base, sx: x, sy: y}
            v["log_tgt_over_mid"] = math.log(v["t_tgt_ms"] / v["t_mid_ms"])
            z[a, b] = PER_S * policy.score([v[name] for name in art.inputs])
    return z


def planes_at(policy, inputs: pd.DataFrame, step: int, pairs: list[tuple[str, str]]):
    """The planes `boundary_figure` draws: the rows their medians and markers come from (the asked
    steps; all steps where none at `step` was asked), the slice centre (`centre`) and, per plane,
    (sx, sy, xs, ys, g over the grid in tokens/s)."""
    art = policy.artifact
    asked = inputs[inputs["recorded g"].notna()]
    inputs = asked if (asked["step"] == step).any() else inputs
    base = centre(inputs, art, step)
    grids = [(sx, sy, *(xs := axis_values(sx, art, inputs[sx]), ys := axis_values(sy, art, inputs[sy])),
              slice_scores(policy, art, base, sx, sy, xs, ys)) for sx, sy in pairs]
    return inputs, base, grids


COSTS = ("t_tgt_ms", "t_mid_ms")  # the plane of the device profile's two costs: constants of one profile


@dataclass(frozen=True)
class Field:
    """What a scheduler decided in a recorded run and where its margin changes sign: `decisions` (the
    steps it was asked about), `calls` (those its `decide` calls the mid drafter at), and per plane
    drawn (sx, sy, g's lowest and highest value over the plane, tokens/s)."""

    decisions: int
    calls: int
    planes: tuple[tuple[str, str, float, float], ...]

    @property
    def uniform(self) -> bool:
        """Every asked decision the same: it never, or always, calls the mid drafter."""
        return self.decisions > 0 and self.calls in (0, self.decisions)

    def crossing(self, signals_only: bool = False) -> list[tuple[str, str]]:
        """The planes on which g does not keep the sign of every decision (all planes when the decisions are
        mixed: those where g changes sign); `signals_only`: leaving out the plane of the two costs."""
        def keeps(lo: float, hi: float) -> bool:
            return hi <= 0 if self.calls == 0 else lo >= 0 if self.uniform else not lo < 0 < hi

        return [(sx, sy) for sx, sy, lo, hi in self.planes
                if not keeps(lo, hi) and not (signals_only and {sx, sy} <= set(COSTS))]

    @property
    def one_sided(self) -> bool:
        """The scheduler never (or always) calls at this profile: every decision the same, and g keeps that
        sign over every plane of its signals (the plane of the two costs shows other devices)."""
        return self.uniform and not self.crossing(signals_only=True)

    def text(self, who: str, where: str) -> str:
        """One sentence, computed: whether `who` (the scheduler) ever calls the mid drafter `where` (on
        the profile), and whether there is a boundary to show."""
        n, planes = self.decisions, len(self.planes)
        if not n:
            return (f"{where}, {who} was asked no decision in this run (a generation's first round drafts "
                    "without it): there is no decision to read a boundary from.")
        if not self.uniform:
            return (f"{where}, {who} calls the mid drafter at {self.calls} of its {n} decisions "
                    f"({self.calls / n:.0%}); g changes sign on {len(self.crossing())} of {planes} planes: the black "
                    "line is where the decision flips.")
        never = self.calls == 0
        sign = "g < 0" if never else "g > 0"
        head = (f"{where}, {who} {'never' if never else 'always'} calls the mid drafter: it "
                f"{'skips' if never else 'calls'} at all {n} decisions it was asked")
        crossing, signals = self.crossing(), self.crossing(signals_only=True)
        if not crossing:
            return f"{head}, and {sign} on every plane, so there is no boundary to show."
        if not signals:
            return (f"{head}, and {sign} on every plane of its signals, so there is no boundary to show at this "
                    "profile's costs; only the plane of the two costs crosses g = 0, on devices whose costs differ "
                    "from this profile's.")
        named = "; ".join(f"{words(sx)} × {words(sy)}" for sx, sy in signals)
        return (f"{head}, though g changes sign on {len(crossing)} of {planes} planes ({named}), away from the "
                "inputs this run met.")


def field(policy, inputs: pd.DataFrame, step: int, pairs: list[tuple[str, str]]) -> Field:
    """The `Field` of a recorded run (`step_inputs` rows): its asked decisions as the policy re-scores
    them, and g's range on each of the planes `boundary_figure` draws at `step`."""
    asked = inputs[inputs["g"].notna()]
    _, _, grids = planes_at(policy, inputs, step, pairs)
    return Field(len(asked), int(asked["call"].sum()),
                 tuple((sx, sy, float(z.min()), float(z.max())) for sx, sy, _, _, z in grids))


def boundary_figure(policy, inputs: pd.DataFrame, step: int, pairs: list[tuple[str, str]],
                    caption: str = "") -> tuple[go.Figure, list[str]]:
    """A 2 x 2 grid of g_psi planes at the recorded medians of `step`, the g = 0 contour, and the
    recorded decisions of that step. Returns the figure and one note per plane where g keeps one sign.
    Steps the decoder did not ask the scheduler about (a generation's first round) are left out of
    the medians and the markers; the title says how many. A run with no asked step at `step` (one
    round only) falls back to its unasked steps, and the title says so. `caption`: a line under the
    title naming the pair, settings and profile (`viz.caption.named`)."""
    asked = inputs[inputs["recorded g"].notna()]
    left = int((inputs["step"] == step).sum() - (asked["step"] == step).sum())
    was_asked = bool((asked["step"] == step).any())  # planes_at takes its medians from the asked steps then
    inputs, base, grids = planes_at(policy, inputs, step, pairs)
    at = inputs[inputs["step"] == step]
    lim = max(float(np.abs(g[4]).max()) for g in grids) or 1.0
    fig = make_subplots(2, 2, horizontal_spacing=0.1,  # no plane titles: each axis names its input in words
                        vertical_spacing=0.17)
    notes = []
    for i, (sx, sy, xs, ys, z) in enumerate(grids):
        r, c = i // 2 + 1, i % 2 + 1
        draw_plane(fig, i, sx, sy, xs, ys, z, lim)
        if not z.min() < 0 < z.max():
            notes.append(one_sign_note(sx, sy, z))
        draw_recorded(fig, i, at, sx, sy, base)
        fig.update_xaxes(title_text=words(sx), row=r, col=c)  # in words: the glossary (signals.glossary) defines them
        fig.update_yaxes(title_text=words(sy), row=r, col=c)
    add_legend_keys(fig)
    lay_out(fig, step, caption, left_out_words(left, was_asked, step))
    return exportable(fig, caption, f"scheduler-boundary-step{step}"), notes


def left_out_words(left: int, was_asked: bool, step: int) -> str:
    """The title's line on the steps the scheduler was not asked at: how many were left out, or that the medians
    and markers are of unasked steps (a run of one round); "" when none."""
    if not was_asked:
        return (f"<br><sup>no step-{step} decision was asked in this run (first round only): medians and markers are "
                "of unasked steps, whose recorded choice is the decoder's, not the scheduler's</sup>")
    return f"<br><sup>{left} first-round step(s) left out: the scheduler is not asked there</sup>" if left else ""


def one_sign_note(sx: str, sy: str, z: np.ndarray) -> str:
    """The note of a plane where g keeps one sign: which, over what range, and that the scheduler always calls or skips."""
    sign = "above" if z.min() > 0 else "below"
    return (f"{words(sx)} × {words(sy)}: g stays {sign} 0 over the whole plane ({z.min():.2f} to {z.max():.2f} tokens/s), "
            f"so the scheduler {'calls' if z.min() > 0 else 'skips'} everywhere there")


def draw_plane(fig: go.Figure, i: int, sx: str, sy: str, xs, ys, z: np.ndarray, lim: float) -> None:
    """Plane `i`'s heatmap of g (one colour scale, -lim to lim) and its g = 0 contour, or a "no boundary" label."""
    r, c = i // 2 + 1, i % 2 + 1
    fig.add_trace(go.Heatmap(x=xs, y=ys, z=z, colorscale=SCALE, zmid=0, zmin=-lim, zmax=lim, showscale=i == 0,
                             colorbar={"title": {"text": "g_psi<br>(tokens/s)"}, "len": 0.6, "thickness": 14},
                             hovertemplate=f"{words(sx)}: %{{x:.2f}}<br>{words(sy)}: %{{y:.2f}}<br>g=%{{z:.2f}} tokens/s"
                                           "<extra></extra>"),
                  r, c)
    if z.min() < 0 < z.max():
        fig.add_trace(go.Contour(x=xs, y=ys, z=z, contours={"start": 0, "end": 0, "size": 1, "coloring": "none"},
                                 line={"color": "black", "width": 2}, showscale=False, hoverinfo="skip",
                                 showlegend=False), r, c)
    else:
        fig.add_annotation(text=f"no boundary: g {'>' if z.min() > 0 else '<'} 0 everywhere", showarrow=False,
                           xref="x domain" if i == 0 else f"x{i + 1} domain", yref="y domain" if i == 0 else f"y{i + 1} domain",
                           x=0.5, y=0.5, bgcolor="rgba(255,255,255,0.8)", font={"size": 11})


def draw_recorded(fig: go.Figure, i: int, at: pd.DataFrame, sx: str, sy: str, base: dict[str, float]) -> None:
    """Plane `i`'s recorded decisions of the step (the fewer kind drawn last, on top) and the slice centre."""
    r, c = i // 2 + 1, i % 2 + 1
    kinds = ((False, "recorded: skipped"), (True, "recorded: called mid"))
    calls = int(at["recorded call"].astype(bool).sum())
    for call, name in kinds if calls <= len(at) - calls else kinds[::-1]:  # the fewer drawn last: on top
        d = at[at["recorded call"] == call]
        fig.add_trace(go.Scatter(x=d[sx], y=d[sy], mode="markers", name=name, showlegend=i == 0, legendgroup=name,
                                 marker={"color": COLORS["mid" if call else "small"], "size": 9,
                                         "symbol": "circle" if call else "square", "line": {"color": "#111", "width": 1}},
                                 hovertemplate=f"{name}<br>g=%{{customdata:.2f}} tokens/s<extra></extra>",
                                 customdata=d["recorded g"]), r, c)
    fig.add_trace(go.Scatter(x=[base[sx]], y=[base[sy]], mode="markers", name="slice centre (medians)",
                             showlegend=i == 0, marker={"symbol": "x", "color": "#111", "size": 10}, hoverinfo="skip"), r, c)


def add_legend_keys(fig: go.Figure) -> None:
    """Legend entries for the two decisions' colours and the boundary line."""
    for name, color in (("call the mid drafter (g > 0)", COLORS["mid"]), ("skip: small drafter (g < 0)", COLORS["small"])):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name, marker={"symbol": "square", "size": 12,
                                                                                          "color": color}))
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name="g = 0 (the boundary)", line={"color": "black", "width": 2}))


def lay_out(fig: go.Figure, step: int, caption: str, out: str) -> None:
    """The title (with the caption's lines and the left-out line `out` under it), its height and the legend."""
    lines = wrap_title(html.escape(caption, quote=False), CAPTION_PX).split("<br>") if caption else []
    named = "".join(f"<br><sup>{line}</sup>" for line in lines)
    # the title starts below plotly's toolbar (34 px, and plotly draws a title of several lines ~12 px higher);
    # each of its lines has its own row above the subplot titles
    top, height = 46 + 24 + 20 * (len(lines) + bool(out)) + 34, 760 + 20 * len(lines)
    fig.update_layout(height=height, margin={"l": 60, "r": 20, "t": top, "b": 110},
                      title={"text": f"g_psi before draft step {step}, other inputs at this run's medians for step {step}"
                                     f"{named}{out}", "yref": "container", "y": 1 - 46 / height,
                             "yanchor": "top",
                             "font": {"size": 14}},
                      legend={"orientation": "h", "x": 0, "y": -0.09, "yanchor": "top", "font": {"size": 11}})
