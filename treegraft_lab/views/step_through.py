"""The step-through viewer: round and step sliders over a recorded run, the output text with the
round's tokens marked, and the draft tree drawn in place (`StepThroughViewer(run)`: no model needed)."""

from __future__ import annotations

import html
import math
from typing import Any

import ipywidgets as W
import plotly.graph_objects as go

from treegraft_lab.views.display import TreeBox, caption_html
from treegraft_lab.views.table import first_row
from treegraft_lab.viz.caption import run_caption
from treegraft_lab.viz.tree import MAX_WIDTH, showcase_round, showcase_step, tree_figure

VERIFY = 0  # the step slider's value for "after verification" (the final, pruned tree)
ROUND_PX, ROUND_SLIDER_PX = 8, 420  # the round slider: px of track per round, and its least width


def round_pieces(run, run_id: int = 0) -> list[tuple[str, str]]:
    """Per round, (accepted draft text, bonus token text), rebuilt from the recorded tables."""
    tree, rounds = run.tree[run.tree["run"] == run_id], run.rounds[run.rounds["run"] == run_id]
    out = []
    for rd, bonus in zip(rounds["round"], rounds["bonus_text"]):
        acc = tree[(tree["round"] == rd) & tree["accepted"] & (tree["parent"] >= 0)].sort_values("depth")
        out.append(("".join(acc["text"]), str(bonus)))
    return out


def output_html(run, round: int, run_id: int = 0) -> str:
    """The output with `round`'s accepted tokens marked (green) and its bonus token (blue)."""
    parts = []
    for rd, (acc, bonus) in enumerate(round_pieces(run, run_id)):
        a, b = html.escape(acc), html.escape(bonus)
        if rd < round:
            parts.append(a + b)
        elif rd == round:
            parts.append(f'<mark class="tg-accepted" style="background:#c7f0c2" title="accepted draft tokens (A)">{a}</mark>'
                         f'<mark class="tg-bonus" style="background:#cfe2ff" title="bonus token from the target">{b}</mark>')
        else:
            parts.append(f'<span style="color:#aaa">{a}{b}</span>')
    prompt = str(run.runs[run.runs["run"] == run_id].iloc[0]["prompt_text"])
    box = "white-space:pre-wrap;font-family:monospace;font-size:12px;padding:4px 8px;border:1px solid #ddd;border-radius:4px"
    return (f'<details><summary><b>prompt</b> ({len(prompt)} characters)</summary>'
            f'<div style="{box};max-height:9em;overflow:auto">{html.escape(prompt)}</div></details>'
            f'<div><b>output</b> · <mark style="background:#c7f0c2">accepted in round {round}</mark> '
            f'<mark style="background:#cfe2ff">bonus token</mark> <span style="color:#aaa">later rounds</span></div>'
            f'<div style="{box}">{"".join(parts)}</div>')


def _share(v: Any, step: int) -> str:
    """A share as %, or "—" where it does not apply (small steps; step 1, whose only candidate is the root)."""
    return "—" if step == 1 or v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.0%}"


def info_html(run, round: int, step: int, run_id: int = 0) -> str:
    """A one-line summary of the round, and of the draft step when one is shown."""
    r = first_row(run.rounds, run=run_id, round=round)
    text = (f"<b>round {round}</b>: schedule {r['schedule']} · A = {r['accepted']} (+1 bonus) · "
            f"{r['mid_calls']} mid calls · {r['nodes']} nodes, {r['kept']} kept · draft {r['draft_ms']:,.0f} ms · "
            f"verify {r['verify_ms']:,.0f} ms · eta {r['eta']:.2f} tokens/s (A + 1 over the round's time)") if r is not None else ""
    s = first_row(run.steps, run=run_id, round=round, step=step) if step != VERIFY else None
    if s is not None:
        who = "mid drafter (LM)" if s["call_mid"] else "small drafter (n-gram)"
        text += (f"<br><b>step {step}</b>: {who} · candidate pool {s['pool_size']} node{'s' if s['pool_size'] != 1 else ''} (conventional N_k: "
                 f"{s['conventional_pool']}) · frontier {s['frontier_size']} · share of the frontier reselected at an "
                 f"earlier depth: {_share(s['reselected_earlier'], step)} · {s['new_nodes']} new"
                 + (f" (+{s['chain_nodes']} in n-gram chains)" if s.get("chain_nodes", 0) else "")
                 + f" · tree {s['tree_size']} live nodes")
    return f'<div style="font-size:13px">{text}</div>'


class StepThroughViewer(W.VBox):
    """Round and step sliders over a recorded run, the output text, and the draft tree in place.

    The step slider goes through the draft steps of the round, then "verify": the final tree,
    pruned to the budget, with the accepted path. Each step's tree is laid out on its own nodes
    (in view in the box), or with "layout: whole round" where every node keeps its place.
    """

    def __init__(self, run, run_id: int = 0, round: int | None = None, step: int | None = None) -> None:
        self.run = run
        self.why, self.why_round = "", None  # why the viewer opened on its round (`viz.showcase_round`)
        if round is None:
            round, self.why = showcase_round(run, run_id)
            self.why_round = round
            step = showcase_step(run, round, run_id)
        runs = run.runs["run"].tolist()
        self.pick = W.Dropdown(options=[(self._run_label(r), r) for r in runs], value=run_id, description="run",
                               layout={"width": "32em", "display": "" if len(runs) > 1 else "none"})
        self.round = W.IntSlider(0, 0, 1, description="round", continuous_update=False)  # its number is editable too
        self.round.add_class("tg-round-slider")
        self.prev, self.next = (W.Button(description=d, tooltip=t, layout={"width": "6em"})
                                for d, t in (("◀ prev", "previous round"), ("next ▶", "next round")))
        self.prev.on_click(lambda _b: self._step_round(-1))
        self.next.on_click(lambda _b: self._step_round(1))
        self.step = W.SelectionSlider(options=[("verify", VERIFY)], description="step", continuous_update=False)
        self.step.add_class("tg-step-slider")
        self.pruned = W.Checkbox(True, description="show pruned nodes (at verify)", indent=False,
                                 layout={"width": "auto"})
        self.siblings = W.Dropdown(options=[("4 children per parent", 4), ("10 per parent", 10), ("all children", 0)],
                                   value=4, layout={"width": "13em"})  # the others fold into "+m"
        # a draft step drawn alone fits the box (what the step did is in view); the whole round's layout keeps
        # every node in its place from step to step, as wide as the final tree
        # "focus" (default): zoomed to what the step changed, its new nodes and the frontier it expanded
        self.placing = W.Dropdown(options=[("focus: this step's change", "focus"), ("layout: this step", False),
                                           ("layout: whole round", True)], value="focus", layout={"width": "15em"})
        self.placing.add_class("tg-placing")
        self.text, self.info = W.HTML(), W.HTML()
        self._busy, self._internal, self._pending = False, True, []
        self._set_run(run_id, round)
        if step is not None:
            self.step.value = step
        self.plot = TreeBox(legend_below=True)  # a wide tree scrolls sideways; the controls right above it
        self.figure = self.plot.show(self._figure())
        self._internal = False
        for w in (self.pick, self.round, self.step, self.pruned, self.siblings, self.placing):
            w.observe(self._changed, "value")
        self._changed()
        super().__init__([self.pick, W.HBox([self.prev, self.round, self.next, self.placing]),
                          W.HBox([self.step, self.pruned, self.siblings]), self.plot, self.info, self.text])
        self.add_class("tg-viewer")

    def show_run(self, run, run_id: int = 0) -> None:
        """Show another recorded run (a `RunPicker`'s), opened on its showcase round and step."""
        self._internal = True
        try:
            self.run = run
            runs = run.runs["run"].tolist()
            self.pick.options = [(self._run_label(r), r) for r in runs]
            self.pick.value = run_id
            self.pick.layout.display = "" if len(runs) > 1 else "none"
            rd, self.why = showcase_round(run, run_id)
            self.why_round = rd
            self._set_run(run_id, rd)
            step = showcase_step(run, rd, run_id)
            if step is not None:
                self.step.value = step
        finally:
            self._internal = False
        self._changed()

    def _run_label(self, r: int) -> str:
        row = first_row(self.run.runs, run=r)
        cat = row.get("category", "") if row is not None else ""
        return f"{r}: {cat} · {str(row['output_text'])[:40]!r}" if row is not None else str(r)

    def _set_run(self, run_id: int, round: int = 0) -> None:
        rounds = sorted(self.run.rounds[self.run.rounds["run"] == run_id]["round"])
        self.round.max = max(rounds[-1], 0) if rounds else 0
        self.round.value = min(round, self.round.max)
        # at least ROUND_PX px of track a round (the 100 px of label and number aside), within the output's width
        self.round.layout.width = f"{min(max(ROUND_SLIDER_PX, ROUND_PX * self.round.max + 100), 660)}px"
        self._set_steps()

    def _step_round(self, by: int) -> None:
        self.round.value = min(max(self.round.value + by, 0), self.round.max)

    def _set_steps(self) -> None:
        st = self.run.steps
        ks = sorted(st[(st["run"] == self.pick.value) & (st["round"] == self.round.value)]["step"])
        self.step.options = [(f"{k} ({'mid' if self._mid(k) else 'small'})", int(k)) for k in ks] + [("verify", VERIFY)]
        self.step.value = int(ks[0]) if ks else VERIFY

    def _mid(self, k: int) -> bool:
        s = first_row(self.run.steps, run=self.pick.value, round=self.round.value, step=k)
        return bool(s is not None and s["call_mid"])

    def _figure(self) -> go.Figure:
        step = None if self.step.value == VERIFY else int(self.step.value)
        focus = self.placing.value == "focus"
        return tree_figure(self.run, self.round.value, step, run_id=self.pick.value, show_pruned=self.pruned.value,
                           max_children=self.siblings.value or None, scroll=True, stable=bool(self.placing.value),
                           caption=run_caption(self.run, self.pick.value), caption_at="foot",  # named above the tree too
                           focus=focus)

    def _changed(self, change: dict | None = None) -> None:
        """Redraw for a user's change. The kernel may deliver a change while a redraw is running
        (drawing publishes output): it is queued and drawn next, never dropped."""
        if self._internal:  # the viewer's own updates of the step slider while it redraws
            return
        self._pending.append(change["owner"] if change else None)
        if self._busy:
            return
        self._busy = True
        try:
            while self._pending:
                owners = set(self._pending)
                self._pending.clear()
                self._internal = True
                try:
                    if self.pick in owners:
                        self._set_run(self.pick.value)
                    elif self.round in owners:
                        self._set_steps()
                finally:
                    self._internal = False
                self.pruned.disabled = self.step.value != VERIFY  # pruning happens at verification only
                self.prev.disabled, self.next.disabled = self.round.value <= 0, self.round.value >= self.round.max
                self.figure = self.plot.show(self._figure())
                self.text.value = output_html(self.run, self.round.value, self.pick.value)
                why = (f'<div class="tg-why" style="font-size:12px;color:#555">opened on {html.escape(self.why)}</div>'
                       if self.round.value == self.why_round else "")
                self.info.value = caption_html(run_caption(self.run, self.pick.value)) + why + info_html(
                    self.run, self.round.value, self.step.value, self.pick.value) + (
                    f'<div style="font-size:12px;color:#555">the tree is {self.figure.layout.width:,} px wide: scroll '
                    'it sideways (shift + wheel, or the bar under it)</div>' if self.figure.layout.width > MAX_WIDTH else "")
        finally:
            self._busy = False
