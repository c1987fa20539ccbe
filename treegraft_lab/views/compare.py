"""Two methods from one round start: each drafts ONE round from the same committed text of a recorded run
(`compare_round`), and `CompareView` shows their verified trees side by side, aligned by node."""

from __future__ import annotations

import json
from typing import Any

import ipywidgets as W
import plotly.graph_objects as go

from treegraft_lab import bench, decoder, measure
from treegraft_lab.views.display import caption_html, draw
from treegraft_lab.viz.caption import run_caption
from treegraft_lab.viz.compare import depth_table, kept_rows, side_by_side
from treegraft_lab.viz.runs import round_context
from treegraft_lab.viz.tree import legend_html, showcase_round
from treegraft_lab.workbench import current

COMPARE_METHODS = {  # bench method -> its name in the views (`bench.tree_decoder` builds each)
    "10101": "TreeGraft 10101", "small": "all-small", "mid": "all-mid", "adaptive": "TreeGraft adaptive",
    "hf-pld": "prompt lookup", "suffix": "suffix decoding", "recycling": "Token Recycling", "csd": "cascade (CSD)",
}


def compare_round(pair: Any, run: Any, round: int, methods: tuple[Any, ...] = ("10101", "hf-pld"),
                  run_id: int = 0) -> dict[Any, Any]:
    """Each of `methods` drafts ONE round from the start of `round` of a recorded run (the same
    committed text), recorded: method -> its one-round Run (`decoder.record_round`). A method is a
    name of `COMPARE_METHODS` (the budget and pruning are then the recorded run's) or a decoder of
    one's own (`TreeGraftDecoder(pair, config, small=..., ...)`, docs/design.md "Extending"). Token
    Recycling starts with an empty matrix (it learns from the target's verified logits over a run)."""
    cfg = json.loads(run.runs[run.runs["run"] == run_id].iloc[0]["config"])
    prompt_len = len(run.runs[run.runs["run"] == run_id].iloc[0]["prompt_ids"])
    context = round_context(run, round, run_id)
    clock = current().clock
    profile = measure.resolve(clock, pair)
    out = {}
    for m in methods:
        dec = m if not isinstance(m, str) else bench.tree_decoder(pair, m, budget=cfg.get("budget", 63),
                                                                   prune=cfg.get("prune", "topk"), clock=clock,
                                                                   profile=profile)
        out[m] = decoder.record_round(dec, context, prompt_len)[1]
    return out


class CompareView(W.VBox):
    """Two methods draft one round start of a recorded run; their verified trees side by side,
    aligned by node (`viz.compare.side_by_side`), and what the target accepted from each by depth."""

    def __init__(self, pair, run, round: int | None = None, run_id: int = 0,
                 methods: tuple[str, str] = ("10101", "mid")) -> None:
        self.pair, self.run, self.run_id = pair, run, run_id
        if round is None:
            round, _ = showcase_round(run, run_id)
        rounds = sorted(run.rounds[run.rounds["run"] == run_id]["round"])
        self.pick_round = W.Dropdown(options=[int(r) for r in rounds], value=int(round), description="round start",
                                     layout={"width": "14em"})
        opts = [(name, m) for m, name in COMPARE_METHODS.items()]
        self.a = W.Dropdown(options=opts, value=methods[0], description="left", layout={"width": "17em"})
        self.b = W.Dropdown(options=opts, value=methods[1], description="right", layout={"width": "17em"})
        self.button = W.Button(description="draft both", button_style="primary", icon="play", layout={"width": "12em"})
        self.button.add_class("tg-compare-go")
        self.button.on_click(lambda _b: self.compare())
        self.status, self.table, self.legend, self.caption = W.HTML(), W.HTML(), W.HTML(), W.HTML()
        self.outs = (W.Output(), W.Output())
        self.figures = (go.Figure(), go.Figure())
        super().__init__([W.HBox([self.pick_round, self.a, self.b, self.button], layout={"gap": "0.5em"}),
                          self.status, self.caption, W.HBox(list(self.outs)), self.legend, self.table])
        self.add_class("tg-compare")
        if pair is None:
            self.button.disabled = True
            self.status.value = "<b>No model pair given: drafting is off.</b>"

    def compare(self) -> tuple[go.Figure, go.Figure]:
        """Draft the round start with both methods and draw them."""
        a, b, rd = self.a.value, self.b.value, int(self.pick_round.value)
        self.button.disabled = True
        self.status.value = f"drafting round {rd} with {COMPARE_METHODS[a]} and {COMPARE_METHODS[b]} ..."
        try:
            runs = compare_round(self.pair, self.run, rd, (a, b) if a != b else (a,), self.run_id)
            ra, rb = runs[a], runs[b]
            names = (COMPARE_METHODS[a], COMPARE_METHODS[b])
            self.figures = side_by_side(ra, rb, names, caption=run_caption(self.run, self.run_id) + f" · round {rd}'s start")
            for out, fig in zip(self.outs, self.figures):
                draw(out, fig)
            self.caption.value = caption_html(run_caption(self.run, self.run_id) + f" · round {rd}'s start: nodes at the "
                                              "same place in both trees are the same token path; a red ring: only "
                                              "in that tree")
            self.legend.value = legend_html(self.figures[0])
            table = depth_table(kept_rows(ra), kept_rows(rb), names)
            self.table.value = ("<div style='font-size:12px'>acceptance by depth: nodes each method verified and "
                                "whether the target accepted its node there</div>" + table.to_html(index=False))
            self.status.value = (f"round {rd} start ({len(ra.runs.iloc[0]['prompt_ids'])} tokens committed): "
                                 f"{names[0]} accepts {int(ra.rounds.iloc[0]['accepted'])}, {names[1]} accepts "
                                 f"{int(rb.rounds.iloc[0]['accepted'])} draft tokens (+1 bonus each)")
        finally:
            self.button.disabled = self.pair is None
        return self.figures
