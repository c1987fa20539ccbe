"""Interactive views (ipywidgets) of recorded runs: a step-through viewer and a schedule playground.

`StepThroughViewer(run)` needs only a recorded Run. `SchedulePlayground(pair, run, round)`
replays one recorded round start under other settings, which needs the model pair.
Both are ipywidgets boxes: put one last in a notebook cell (or `display(...)` it).
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import replace
from datetime import datetime
from typing import Any

import ipywidgets as W
import pandas as pd
import plotly.graph_objects as go

from treegraft_lab.costs import profile_name  # also imported from here by the notebooks and tests
from treegraft_lab.presets import SHOWCASE_PROFILE
from treegraft_lab.viz.caption import PRUNE_WORDS, named, prompt_words, run_caption, settings_words
from treegraft_lab.viz.export import exportable
from treegraft_lab.viz.tree import (
    MAX_WIDTH,
    legend_html,
    retitle,
    showcase_round,
    showcase_step,
    tree_figure,
)
from treegraft_lab.workbench import styled

VERIFY = 0  # the step slider's value for "after verification" (the final, pruned tree)
ROUND_PX, ROUND_SLIDER_PX = 8, 420  # the round slider: px of track per round, and its least width


def draw(out: W.Output, fig: go.Figure) -> go.Figure:
    """Show `fig` in `out`, replacing what it showed; returns `fig` (the figure on screen).

    A plain figure in an Output widget is drawn whole by JupyterLab's plotly renderer. Edits of
    a FigureWidget (in place, or a fresh one swapped into the box) were seen to leave the browser
    showing the previous figure when two changes came within one drawing on a loaded machine.
    """
    from IPython.display import clear_output, display

    fig = exportable(fig)  # shown with the package's plotly config (viz.export): no cloud button, the PNG named
    with out:
        clear_output(wait=True)
        display(fig)
    return fig


class TreeBox(W.VBox):
    """A tree figure in a box that scrolls it sideways, with its legend docked above the box (in
    view wherever the reader scrolls). The reader's scroll survives a redraw: the box's content
    keeps the figure's size while the new figure replaces the old one, so the browser never
    shrinks the scrolled content and resets the scroll. A tree opens scrolled to its left edge,
    where `tidy_layout` puts the root and the accepted path."""

    def __init__(self, legend_below: bool = False) -> None:
        self.legend, self.output = W.HTML(), W.Output(layout={"flex": "0 0 auto"})
        self.box = W.Box([self.output], layout={"overflow": "auto", "max_width": "100%"})
        self.box.add_class("tg-scroll")
        self.figure = go.Figure()
        super().__init__([self.box, self.legend] if legend_below else [self.legend, self.box])

    def pin(self, fig: go.Figure) -> None:
        """Hold the box's content at `fig`'s size through the redraw."""
        self.output.layout.width = self.output.layout.min_width = f"{fig.layout.width}px"
        self.output.layout.min_height = f"{fig.layout.height}px"

    def show(self, fig: go.Figure) -> go.Figure:
        """Draw `fig` (a tree figure drawn with scroll=True) and its docked legend; returns `fig`."""
        self.legend.value = legend_html(fig)
        self.pin(fig)
        self.figure = draw(self.output, fig)
        return self.figure


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


def caption_html(text: str) -> str:
    """The line naming a view's pair, prompt, settings and profile (`viz.caption`), as HTML."""
    return f'<div class="tg-caption" style="font-size:12px;color:#444">{html.escape(text)}</div>'


def _row(df: pd.DataFrame, **key) -> pd.Series | None:
    m = pd.Series(True, index=df.index)
    for k, v in key.items():
        m &= df[k] == v
    return df[m].iloc[0] if m.any() else None


def _share(v: Any, step: int) -> str:
    """A share as %, or "—" where it does not apply (small steps; step 1, whose only candidate is the root)."""
    return "—" if step == 1 or v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.0%}"


def info_html(run, round: int, step: int, run_id: int = 0) -> str:
    """A one-line summary of the round, and of the draft step when one is shown."""
    r = _row(run.rounds, run=run_id, round=round)
    text = (f"<b>round {round}</b>: schedule {r['schedule']} · A = {r['accepted']} (+1 bonus) · "
            f"{r['mid_calls']} mid calls · {r['nodes']} nodes, {r['kept']} kept · draft {r['draft_ms']:,.0f} ms · "
            f"verify {r['verify_ms']:,.0f} ms · eta {r['eta']:.2f} tokens/s (A + 1 over the round's time)") if r is not None else ""
    s = _row(run.steps, run=run_id, round=round, step=step) if step != VERIFY else None
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
        row = _row(self.run.runs, run=r)
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
        s = _row(self.run.steps, run=self.pick.value, round=self.round.value, step=k)
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


# ---------------------------------------------------------------------------- schedule playground


CLOCKS = (("this device (wall)", "wall"), ("paper A100 (modelled)", "a100-paper"),  # the profile selector
          (f"A100, mid at 0.1 (modelled; {SHOWCASE_PROFILE})", SHOWCASE_PROFILE))  # where WHEN pays (presets.py)


def adaptive_policy(pair, config) -> Any:
    """The adaptive policy a decoder with `config` would run (its clock resolved to a profile);
    raises TreeGraftError when no scheduler is trained for that profile and pruning."""
    from treegraft_lab import measure
    from treegraft_lab.errors import TreeGraftError
    from treegraft_lab.schedule.policies import make_policy

    if pair is None:
        raise TreeGraftError("no model pair")
    cfg = replace(config, schedule="adaptive")
    return make_policy(cfg, pair, measure.resolve(cfg.clock, pair))


def adaptive_status(pair, config=None) -> str | None:
    """None when the adaptive scheduler can run for `pair` under `config` (its clock, pruning and
    depth; default DecodeConfig()); otherwise why it cannot."""
    from treegraft_lab.config import DecodeConfig

    try:
        adaptive_policy(pair, config or DecodeConfig())
        return None
    except Exception as e:  # noqa: BLE001 - any failure means "not available", with its reason
        return f"{type(e).__name__}: {e}"


def rule_schedules(pair, config) -> list[str]:
    """The rule schedules fitted for `pair` under `config` (its clock's profile class, pruning,
    growth and small drafter), with their values: ["rule:match=0", "rule:score=0.05"] or fewer."""
    from treegraft_lab import measure
    from treegraft_lab.config import RULES
    from treegraft_lab.errors import TreeGraftError
    from treegraft_lab.schedule.rules import RulePolicy

    try:
        prof = measure.read_only(config.clock, pair)
    except TreeGraftError:  # no profile for this clock yet: no rule can be looked up
        return []
    out = []
    for rule in RULES:
        try:
            out.append(RulePolicy.for_config(replace(config, schedule=rule), pair, prof).name)
        except TreeGraftError:  # a rule not fitted for this setting is simply not offered
            continue
    return out


def scheduler_name(pair, config) -> str:
    """The artifact folder name ("<profile class>-<pruning>") a decoder with `config` loads."""
    from treegraft_lab import measure
    from treegraft_lab.schedule.adaptive import artifact_folder

    return artifact_folder(pair, config, measure.resolve(config.clock, pair)).name


def trained_schedulers(pair) -> list[str]:
    """The (profile class)-(pruning) folders holding a scheduler artifact for `pair`."""
    from treegraft_lab.schedule.adaptive import artifact_dir
    from treegraft_lab.schedule.artifact import META_NAME

    name = getattr(pair, "name", None)
    folder = artifact_dir(name) if name else None
    if folder is None or not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if (p / META_NAME).is_file())


PRUNING_NOTES = {
    "topk": "<b>top-k</b> (the paper's rule) keeps the <i>budget</i> nodes with the highest path score s(v), with their "
            "ancestors: the budget is the size of the verified tree.",
    "value": "<b>value</b> keeps a node only while its chance of being accepted pays for the verification time it adds "
             "on the chosen profile (a node is worth verifying when its expected tokens beat what plain decoding "
             "would earn in that time), so it often keeps far fewer nodes: the budget is then only a cap.",
}
SETTING_WORDS = {"round": "round", "schedule": "schedule", "eg": "EG", "nd": "ND", "budget": "budget",
                 "prune": "pruning", "clock": "profile", "repeats": "repeats"}
STALE_CSS = ("<style>.tg-stale { opacity: 0.35; filter: grayscale(0.6); transition: opacity 0.2s }"
             " .tg-stale-note { color: #8a4b00; background: #fff3cd; padding: 2px 8px; border-radius: 4px }</style>")


def prune_budget(prune: str | None, budget: Any) -> str:
    """A pruning rule and its budget in a table cell: "top-k (63)", "value (63)"."""
    return f"{PRUNE_WORDS.get(prune or 'topk', str(prune)).removesuffix(' pruning')} ({budget})"


def profile_line(profile) -> str:
    """What every view says about the profile it decides on: which (`profile_name`: device, date, n timings
    per size, their spread, the load beside the measurement, why it is flagged), and a mid forward against
    a target forward of as many tokens, with a warning when a sanity check fails (`measure.problems`)."""
    from treegraft_lab import measure

    line = f"profile {profile_name(profile)}"
    if not profile.n and not (profile.key or {}).get("hardware"):
        line += ", n=0 (not measured here)"
    if profile.mid:
        n = min(64, max(profile.target))
        line += f"; a mid forward of {n} tokens {profile.mid_ms(n):.1f} ms vs {profile.target_ms(n):.1f} ms for the target"
    order = measure.ORDER_CHECK in profile.checked or not profile.n  # checked when measured, or judged here
    bad = measure.problems(profile) if order else [p for p in measure.problems(profile) if "timings" in p]
    if profile.n and not order and profile.mid:
        line += " (the mid drafter is not the smaller model: their order is not checked)"
    return line + "".join(f" ⚠ {b}" for b in bad if b not in profile.flagged)


def profile_html(profile) -> str:
    """`profile_line` as HTML, its numbers in data attributes for checks on the page."""
    from treegraft_lab import measure

    n = min(64, max(profile.target))
    order = measure.ORDER_CHECK in profile.checked or not profile.n
    mid = f"{profile.mid_ms(n):.3f}" if profile.mid else ""
    return (f'<div class="tg-profile" style="font-size:12px" data-mid-ms="{mid}" data-target-ms="{profile.target_ms(n):.3f}" '
            f'data-order="{"checked" if order else "unchecked"}">{html.escape(profile_line(profile))}</div>')


class ProfileLine(W.HBox):
    """A profile's line (`profile_html`) with a "re-measure" button: measures this device's profile
    of `pair` again (checked, `measure.for_pair(refresh=True)`), shows it, and calls `on_change`
    with it. The button is off for a profile not measured on this device (a named one)."""

    def __init__(self, profile, pair=None, on_change=None) -> None:
        self.profile, self.pair, self.on_change = profile, pair, on_change
        self.text = W.HTML(profile_html(profile), layout={"flex": "1"})
        self.button = W.Button(description="re-measure", icon="refresh", layout={"width": "9em", "flex": "0 0 auto"},
                               tooltip="measure this device's profile again (checked; about a minute on a CPU)")
        self.button.add_class("tg-remeasure")
        self.button.on_click(lambda _b: self.remeasure())
        self.button.disabled = pair is None or not (profile.key or {}).get("hardware")
        super().__init__([self.text, self.button], layout={"align_items": "center", "gap": "1em"})
        self.add_class("tg-profile-line")

    def remeasure(self) -> Any:
        """Measure again; on a refused profile the line says why and keeps the old one."""
        from treegraft_lab import measure
        from treegraft_lab.errors import TreeGraftError

        self.button.disabled, self.button.description = True, "measuring ..."
        try:
            self.profile = measure.for_pair(self.pair, refresh=True, progress=False)
            self.text.value = profile_html(self.profile)
            if self.on_change:
                self.on_change(self.profile)
        except TreeGraftError as e:  # refused (`measure.ProfileKept`: the cached profile stays) or failed
            self.profile = getattr(e, "kept", self.profile)
            self.text.value = profile_html(self.profile) + f'<div style="color:#a00;font-size:12px">{html.escape(str(e))}</div>'
        finally:
            self.button.disabled, self.button.description = False, "re-measure"
        return self.profile


def baseline_row(name: str, s_per_token: list[float], modelled_ms: float) -> dict[str, Any]:
    """The plain-decoding row: one token per target forward, timed here and priced by the profile."""
    return {"setting": name, "schedule": "—", "A": 0, "mid calls": 0, "nodes": 0, "kept": 0,
            "draft (ms)": 0.0, "verify (ms)": 1000 * _median(s_per_token), "eta": [1 / t for t in s_per_token],
            "modelled round (ms)": modelled_ms}


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return math.nan if not n else xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def repeat_speedups(tokens: int, round_s: list[list[float]], plain_s: list[float]) -> list[float]:
    """A replayed round's speedup over plain decoding in each repeat: (tokens / round time) over
    (1 / plain seconds per token), both from the same repeat. `round_s[i]`: repeat i's round
    times, one per setting timed together (their mean is the repeat's round time)."""
    return [tokens * p / (sum(r) / len(r)) for r, p in zip(round_s, plain_s)]


def twin_settings(keys: dict[str, Any], prefer: tuple[str, ...] = ("all-small", "all-mid")) -> dict[str, str]:
    """Setting -> the setting it decided exactly as (equal keys: schedule, mid calls, accepted, kept
    tree), the `prefer`red names first, then the earliest."""
    order = sorted(keys, key=lambda k: (k not in prefer, prefer.index(k) if k in prefer else 0))
    first: dict[Any, str] = {}
    return {k: first[keys[k]] for k in order if first.setdefault(keys[k], k) != k}


def decision_key(info, rrun) -> tuple:
    """A replayed round's decisions: schedule, mid calls, accepted count and its kept tree
    (token and parent of every kept node)."""
    t = rrun.tree_at(0)
    kept = t[t["kept"]].sort_values("node") if "kept" in t.columns else t.iloc[:0]
    return (info.schedule, info.mid_calls, info.accepted, tuple(zip(kept["token"].tolist(), kept["parent"].tolist())))


PLAIN_OFF = 2.0  # warn when plain decoding measures this many times off what this device's profile predicts
PLAIN_MOVED = 2.0  # ... or when its repeats' fastest over slowest exceeds this: the machine was probably busy


def moved_words(samples: list[float]) -> str:
    """Words when repeated timings of plain decoding moved more than PLAIN_MOVED x (max over min), else ""."""
    pos = [x for x in samples if x > 0]
    if len(pos) < 2 or max(pos) <= PLAIN_MOVED * min(pos):
        return ""
    return (f"moved {max(pos) / min(pos):.1f}x between its {len(pos)} repeats, more than {PLAIN_MOVED:g}x: "
            "the machine was probably busy")


def baseline_words(tokens_per_s: list[float]) -> str:
    """A plain-decoding baseline timed several times, in words: "plain decoding (median of 3: 8.1–9.6)", and
    "⚠ moved 3.4x between its 3 repeats, more than 2x: the machine was probably busy" where it did."""
    xs = sorted(tokens_per_s)
    if not xs:
        raise ValueError("baseline_words needs at least one timing of plain decoding: time it first")
    moved = moved_words(xs)
    return (f"plain decoding (median of {len(xs)}: {xs[0]:.1f}–{xs[-1]:.1f}" + (f"; ⚠ {moved})" if moved else ")"))


COLUMN_WORDS = {  # recorded column names -> headers in words (units in brackets)
    "round": "round", "step": "step", "schedule": "schedule (1 = mid step)", "accepted": "accepted draft tokens A",
    "A": "accepted draft tokens A", "mid_calls": "mid calls", "nodes": "nodes drafted", "kept": "nodes kept",
    "draft_ms": "draft (ms)", "verify_ms": "verify (ms)", "eta": "tokens/s (eta)", "call_mid": "mid drafter called",
    "pool_size": "candidate pool (nodes)", "conventional_pool": "newest nodes N_k", "frontier_size": "frontier (nodes)",
    "reselected_earlier": "frontier reselected shallower", "tree_size": "live nodes", "new_nodes": "new nodes",
}


def in_words(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with its recorded column names replaced by headers in words (see the glossary in 01)."""
    return df.rename(columns=COLUMN_WORDS)


def words_table(df: pd.DataFrame, **kw: Any) -> Any:
    """`df` for display (workbench.styled, `kw` in recorded or worded column names), headers in words
    that wrap so the table fits the output area, no index."""
    kw = {k: [COLUMN_WORDS.get(c, c) for c in v] for k, v in kw.items()}
    return styled(in_words(df), **kw).hide(axis="index").set_table_styles(GROUPED_CSS[:1], overwrite=False)


def paying_round(pair: Any, run: Any, config: Any, profile: Any, tries: int = 12) -> tuple[int, int, str]:
    """The (prompt, round) a view of WHEN opens on, and why in words. Candidates, over every prompt of the
    run: the rounds `viz.called_rounds` names (a mid call whose accepted path goes through a node only the
    mid drafter drafted, mixed schedules first), the best kind of every prompt before the next kind. Of
    the first `tries`, the one where `config` (the run's settings: its schedule, trees and pruning),
    replayed from that round's start on `profile`, emits the most tokens per modelled second over the
    better of all-small and all-mid replayed from the same start, where that is above 1; else the first
    candidate; else `viz.showcase_round`'s of the first prompt. Returns (run id, round, why)."""
    from treegraft_lab.decoder import replay_round
    from treegraft_lab.viz import called_rounds, showcase_round
    from treegraft_lab.workbench import round_context

    found = sorted(((kind, int(run_id), rd, why) for run_id in sorted(run.runs["run"].unique())
                    for rd, kind, why in called_rounds(run, int(run_id))), key=lambda c: c[0])  # stable
    if not found:
        return (0, *showcase_round(run, 0))

    def eta(run_id: int, rd: int, schedule: Any) -> float:
        prompt_len = len(run.runs[run.runs["run"] == run_id].iloc[0]["prompt_ids"])
        info, _ = replay_round(pair, round_context(run, rd, run_id), replace(config, schedule=schedule), prompt_len,
                               profile)
        return (info.accepted + 1) / info.modelled_ms

    gains = [(eta(run_id, rd, config.schedule) / max(eta(run_id, rd, "small"), eta(run_id, rd, "mid")), i)
             for i, (_, run_id, rd, _) in enumerate(found[:tries])]
    gain, i = max(gains, key=lambda g: (g[0], -g[1]))  # the largest gain; the first of equals
    _, run_id, rd, why = found[i] if gain > 1 else found[0]
    beats = (f"; replayed from its start, it beats the better of all-small and all-mid by {gain:.2f}x on {profile.name}"
             if gain > 1 else "")
    return run_id, rd, f"prompt {run_id}, {why}{beats}"


class SchedulePlayground(W.VBox):
    """Replay one recorded round start with your own schedule, EG/ND switches, budget, pruning and
    device profile.

    "replay" runs the round from the same committed context under the chosen settings and under
    all-small, all-mid and (when a scheduler is trained for the chosen profile and pruning) the
    adaptive scheduler, each `repeats` times, beside plain decoding from the same context. Every
    decision that weighs time reads the chosen profile ("this device" or the paper's A100 costs);
    the table shows A, the draft and verify time measured here (median of the repeats, eta with
    its range) and the round priced by the profile, with the tree of the setting picked below it.
    The moment a control differs from what was replayed, the results are marked stale (dimmed, a
    line says what changed, the replay button asks to be pressed).
    """

    def __init__(self, pair, run, round: int | None = None, run_id: int = 0, clock: str | None = None,
                 prune: str | None = None, repeats: int = 3, warmup: bool = True) -> None:
        self.pair, self.run, self.run_id = pair, run, run_id
        self.why, self.why_round = "", None  # why it opened on its round (`viz.showcase_round`)
        if round is None:
            round, self.why = showcase_round(run, run_id)
            self.why_round = round
        self.warmup = warmup  # one untimed replay of every setting (and plain decoding) before the timed ones
        row = _row(run.runs, run=run_id)
        self.cfg = json.loads(row["config"]) if row is not None else {}
        self.prompt_len = len(row["prompt_ids"])
        rounds = run.rounds[run.rounds["run"] == run_id]
        self.pick_round = W.Dropdown(options=[(f"{r.round} · recorded A = {r.accepted} · {r.schedule}", int(r.round))
                                              for r in rounds.itertuples()], value=round, description="round",
                                     layout={"width": "24em"})
        self.pick_round.add_class("tg-round-pick")
        rec = _row(run.rounds, run=run_id, round=round)
        depth = int(self.cfg.get("depth", 5))
        bits = str(rec["schedule"]) if rec is not None else "0" * depth
        self.toggles = [W.ToggleButton(value=b == "1", layout={"width": "7.5em"}) for b in bits.ljust(depth, "0")[:depth]]
        for i, t in enumerate(self.toggles):
            t.observe(lambda _c, i=i: self._label(i), "value")
            self._label(i)
        self.eg = W.Checkbox(bool(self.cfg.get("expanded_graft", True)), description="EG (expanded graft positions)", indent=False)
        self.nd = W.Checkbox(bool(self.cfg.get("non_destructive", True)), description="ND (non-destructive grafting)", indent=False)
        self.repeats = W.BoundedIntText(repeats, min=1, max=20, description="repeats",
                                        tooltip="replays per setting: measured times are their median, eta with its range",
                                        layout={"width": "10em"})
        self._build_costs(prune, clock)
        self.button = W.Button(description="replay", button_style="primary", icon="play", layout={"width": "19em"})
        self.button.add_class("tg-replay")
        self.button.on_click(lambda _b: self.replay())
        self.table, self.status, self.progress = W.HTML(), W.HTML(), W.HTML()
        self.stale, self.export = W.HTML(STALE_CSS), W.HTML()
        self.stale.add_class("tg-stale-line")
        self.export.add_class("tg-export")
        self.show = W.Dropdown(options=[], description="tree of")
        self.show.observe(lambda _c: self._draw(), "value")
        self.plot, self.figure = TreeBox(), go.Figure()  # a wide tree scrolls sideways, the legend docked above it
        self.results: dict[str, tuple[Any, Any]] = {}
        self.times: dict[str, list[tuple[float, float, float]]] = {}  # setting -> (draft s, verify s, round s) per repeat
        self.plain_s: list[float] = []  # plain decoding: seconds per token, per repeat
        self.twins: dict[str, str] = {}  # setting -> the setting it decided exactly as (timed together)
        self.replayed: dict[str, Any] | None = None  # the controls as they were at the last replay
        self.replayed_at: str | None = None  # when it ran (local time), for the exports
        self.modelled_on = ""  # the profile that priced the last replay, in words
        self.eg.layout.width = self.nd.layout.width = "auto"
        self._set_round()
        self._adaptive_note()
        for w in (self.pick_round, *self.toggles, self.eg, self.nd, self.budget, self.prune, self.clock, self.repeats):
            w.observe(lambda _c: self._check_stale(), "value")
        self.pick_round.observe(lambda _c: self._set_round(), "value")
        super().__init__([self.status, self.pick_round, W.HBox([W.Label("schedule:"), *self.toggles]),
                          W.HBox([self.eg, self.nd], layout={"gap": "1.5em"}),
                          W.HBox([W.VBox([self.budget, self.prune]), self.prune_note], layout={"align_items": "center"}),
                          W.HBox([self.clock, self.adaptive, self.remeasure], layout={"align_items": "center"}),
                          W.HBox([self.button, self.repeats, self.progress], layout={"gap": "1em", "align_items": "center"}),
                          self.stale, self.table, self.export, self.show, self.plot])
        self.add_class("tg-playground")

    def _set_round(self) -> None:
        from treegraft_lab.workbench import round_context

        self.round_idx = int(self.pick_round.value)
        self.context = round_context(self.run, self.round_idx, self.run_id)
        self.status.value = (caption_html(f"recorded: {run_caption(self.run, self.run_id)}") +
                             f"round {self.round_idx} of run {self.run_id}: starts after {len(self.context)} committed "
                             f"tokens ({self.prompt_len} prompt). Pick a schedule (one button per draft step), then replay. "
                             "A replay starts its small drafters from the committed text alone (Token Recycling's "
                             "matrix empty, where the recorded run had learnt it over the earlier rounds), so its tree "
                             "may hold other nodes than the recorded round's.")
        if self.round_idx == self.why_round:
            self.status.value += f' <span class="tg-why" style="color:#555">(opened on {html.escape(self.why)})</span>'
        if self.pair is None:
            self.button.disabled = True
            self.status.value += " <b>No model pair given: replay is off.</b>"

    def _build_costs(self, prune: str | None, clock: str | None) -> None:
        """The budget slider, the pruning and profile selectors, the pruning rule in words, and the
        adaptive scheduler's note."""
        budget = self.cfg.get("budget", 63)
        self.budget = W.IntSlider(budget if isinstance(budget, int) else 63, 4, 128, description="budget",
                                  tooltip="verification budget: non-root nodes kept at most", layout={"width": "22em"})
        clocks = [v for _, v in CLOCKS]
        recorded = self.cfg.get("clock") if self.cfg.get("clock") in clocks else "wall"
        self.choice_note = ""  # set when the pruning rule was chosen for the adaptive scheduler
        self.prune = W.Dropdown(options=[("top-k by score (paper)", "topk"), ("value (cost-aware)", "value")],
                                value=prune or self._scheduler_prune(clock or recorded), description="pruning",
                                layout={"width": "22em"})
        self.prune_note = W.HTML(layout={"width": "auto", "margin": "0 0 0 1em", "flex": "1"})
        self.prune_note.add_class("tg-prune-note")
        self.clock = W.Dropdown(options=list(CLOCKS), value=clock or recorded, description="profile",
                                tooltip="the device costs every decision reads and each round is priced with",
                                layout={"width": "22em"})
        self.adaptive = W.HTML(layout={"width": "auto", "margin": "0 0 0 1em", "flex": "1"})
        self.adaptive.add_class("tg-adaptive-note")
        self.remeasure = W.Button(description="re-measure", icon="refresh", layout={"width": "9em", "flex": "0 0 auto"},
                                  tooltip="measure this device's profile again (checked)", disabled=self.pair is None)
        self.remeasure.add_class("tg-remeasure")
        self.remeasure.on_click(lambda _b: self._remeasure())
        for w in (self.prune, self.clock):
            w.observe(lambda _c: self._adaptive_note(), "value")

    def _trees(self, **over: Any) -> Any:
        """The recorded run's trees (growth rule, small drafter) as a DecodeConfig, with `over`."""
        from treegraft_lab.config import GROWTH_FIELDS, DecodeConfig

        keys = ("depth", "width", "ngram_max", "ngram_min", "temperature", "children", "max_nodes", "small",
                *GROWTH_FIELDS)
        return DecodeConfig(**{k: self.cfg[k] for k in keys if k in self.cfg}, **over)

    def _scheduler_choice(self, clock: str, prune: str | None) -> Any:
        """`schedule.choice.choose_settings` for this pair (its dtype and device), `clock` and the
        recorded trees; `prune` None: the recorded rule first, then the other."""
        from treegraft_lab.schedule.choice import choose_settings

        trees = self._trees()
        dtype = str(getattr(self.pair, "dtype", "auto")).removeprefix("torch.")
        return choose_settings(getattr(self.pair, "name", None), device=str(getattr(self.pair, "device", "auto")),
                               dtype=dtype, prune=prune, clock=clock, growth=trees.growth, small=trees.small,
                               prefer_prune=self.cfg.get("prune", "topk"))

    def _scheduler_prune(self, clock: str) -> str:
        """The recorded run's pruning rule, or the other one where only that has an adaptive
        scheduler for this pair and profile (said in the adaptive note)."""
        recorded = self.cfg.get("prune", "topk")
        if self.pair is None:
            return recorded
        try:
            choice = self._scheduler_choice(clock, None)
        except Exception:  # noqa: BLE001 - an unknown device or profile: keep the recorded rule
            return recorded
        if choice.prune != recorded:
            self.choice_note = f"pruning set to {choice.prune}: {choice.note}"
        return choice.prune

    def _label(self, i: int) -> None:
        t = self.toggles[i]
        t.description = f"{i + 1}: {'mid' if t.value else 'small'}"
        t.button_style = "warning" if t.value else "info"

    def _adaptive_note(self) -> None:
        """Say which profile (in words) decisions read, whether the adaptive scheduler is offered for
        it and the pruning, and what the chosen pruning rule keeps."""
        self.prune_note.value = f'<span style="font-size:12px">{PRUNING_NOTES[self.prune.value]}</span>'
        if self.pair is None:
            self.adaptive.value = ""
            return
        cfg = self.base_config()
        status = adaptive_status(self.pair, cfg)
        if status is None:
            text = f"adaptive: offered (scheduler {scheduler_name(self.pair, cfg)})"
            if self.choice_note and self.prune.value in self.choice_note:
                text += f"<br>{html.escape(self.choice_note)}"
        else:
            try:
                choice = self._scheduler_choice(self.clock.value, self.prune.value)
                why = status if choice.offered else choice.note.split(" (looked in")[0].removeprefix("adaptive off: ")
            except Exception:  # noqa: BLE001 - an unknown device or profile: adaptive_status's reason
                why = status
            text = (f"adaptive: <b>not offered</b> ({html.escape(why)}; trained: "
                    f"{', '.join(trained_schedulers(self.pair)) or 'none'})")
        self.remeasure.disabled = self.clock.value != "wall"
        self.adaptive.value = f'<span style="font-size:12px">{self.profile_words()}{text}</span>'

    def profile_words(self) -> str:
        """The chosen profile's line as HTML (`profile_html`: device, dtype, date, n, spread, costs)."""
        from treegraft_lab import measure

        try:
            return profile_html(measure.resolve(self.clock.value, self.pair))
        except Exception as e:  # noqa: BLE001 - the note says why instead of breaking the widget
            return html.escape(f"{self.clock.value}: {e}") + "<br>"

    def _remeasure(self) -> None:
        """Measure this device's profile again (checked), and say so beside the selector."""
        from treegraft_lab import measure
        from treegraft_lab.errors import TreeGraftError

        self.remeasure.disabled = True
        try:
            measure.for_pair(self.pair, refresh=True, progress=False)
            self._adaptive_note()
        except TreeGraftError as e:
            self.adaptive.value += f'<div style="color:#a00;font-size:12px">{html.escape(str(e))}</div>'
        finally:
            self.remeasure.disabled = self.clock.value != "wall"

    @property
    def mask(self) -> str:
        return "".join("1" if t.value else "0" for t in self.toggles)

    def controls(self) -> dict[str, Any]:
        """Every setting a replay depends on, as the controls show it now."""
        return {"round": int(self.pick_round.value), "schedule": self.mask, "eg": bool(self.eg.value),
                "nd": bool(self.nd.value), "budget": int(self.budget.value), "prune": self.prune.value,
                "clock": self.clock.value, "repeats": int(self.repeats.value)}

    def changed(self) -> dict[str, tuple[Any, Any]]:
        """Setting -> (replayed, now) for every control moved since the last replay ({} before one)."""
        if self.replayed is None:
            return {}
        now = self.controls()
        return {k: (v, now[k]) for k, v in self.replayed.items() if now[k] != v}

    def _check_stale(self) -> None:
        """Dim the results, say what changed and ask for a replay, or clear all that when the
        controls are back to what was replayed."""
        diff = self.changed()

        def word(k: str, v: Any) -> str:
            return ("on" if v else "off") if k in ("eg", "nd") else str(v)

        for w in (self.table, self.plot, self.export, self.show):
            (w.add_class if diff else w.remove_class)("tg-stale")
        if diff:
            what = "; ".join(f"{SETTING_WORDS[k]} {word(k, a)} → {word(k, b)}" for k, (a, b) in diff.items())
            self.stale.value = (STALE_CSS + f'<div class="tg-stale-note">⚠ <b>stale</b>: the results below are from the '
                                f'last replay; since then {html.escape(what)}. Press <b>replay</b> to update them.</div>')
            self.button.button_style, self.button.description = "danger", "replay (settings changed)"
        else:
            self.stale.value = STALE_CSS
            self.button.button_style, self.button.description = "primary", "replay"

    def base_config(self) -> Any:
        """The replays' common DecodeConfig: the recorded run's growth rule, budget, pruning, profile."""
        from treegraft_lab.config import GROWTH_FIELDS, DecodeConfig

        keys = ("depth", "width", "ngram_max", "ngram_min", "temperature", "children", "max_nodes", "small",
                *GROWTH_FIELDS)  # the recorded run's growth rule and small drafter too
        base = {k: self.cfg[k] for k in keys if k in self.cfg}
        return DecodeConfig(**base, budget=int(self.budget.value), prune=self.prune.value, clock=self.clock.value)

    def settings(self) -> dict[str, Any]:
        """Name -> DecodeConfig of every setting a replay runs (adaptive only when a scheduler is
        trained for the chosen profile and pruning)."""
        base = self.base_config()

        def cfg(**kw: Any) -> Any:
            return replace(base, **kw)

        out = {f"yours ({self.mask}{'' if self.eg.value else ', w/o EG'}{'' if self.nd.value else ', w/o ND'})":
               cfg(schedule=self.mask, expanded_graft=self.eg.value, non_destructive=self.nd.value),
               "all-small": cfg(schedule="small"), "all-mid": cfg(schedule="mid")}
        if adaptive_status(self.pair, base) is None:
            out["adaptive"] = cfg(schedule="adaptive")
        for name in rule_schedules(self.pair, base):  # the switching rules fitted for this setting
            out[name] = cfg(schedule=name)
        return out

    def replay(self) -> pd.DataFrame:
        """Replay the round under every setting `repeats` times, and time plain decoding from the
        same context as often, all interleaved (each repeat runs every setting and plain decoding,
        in an order rotated from repeat to repeat), after one untimed warm-up pass (`warmup`);
        return (and show) the comparison table."""
        from treegraft_lab import measure
        from treegraft_lab.baselines import plain_token_s
        from treegraft_lab.decoder import replay_round

        self.button.disabled = True
        self.results, self.times, self.plain_s = {}, {}, []
        snapshot, n = self.controls(), int(self.repeats.value)
        try:
            profile = measure.resolve(self.clock.value, self.pair)  # once per replay, handed to every decoder
            settings = self.settings()
            jobs = [*settings, None]  # None: plain decoding
            for i in range(-1 if self.warmup else 0, n):
                for name in jobs[i % len(jobs):] + jobs[:i % len(jobs)]:
                    what = "warm-up (untimed)" if i < 0 else f"{i + 1}/{n}"
                    self.progress.value = f"replaying: {html.escape(name or 'plain decoding')} ({what}) ..."
                    if name is None:
                        t = plain_token_s(self.pair, self.context)
                        if i >= 0:
                            self.plain_s.append(t)
                        continue
                    info, rrun = replay_round(self.pair, self.context, settings[name], prompt_len=self.prompt_len,
                                              profile=profile)
                    if i >= 0:
                        self.results.setdefault(name, (info, rrun))  # the tree: every repeat draws the same one
                        self.times.setdefault(name, []).append((info.draft_s, info.verify_s, info.round_s))
        finally:
            self.button.disabled = self.pair is None
        self.replayed = snapshot
        self.replayed_at = datetime.now().isoformat(sep=" ", timespec="seconds")
        self.twins = twin_settings({k: decision_key(*v) for k, v in self.results.items()})
        why = adaptive_status(self.pair, self.base_config())
        self.progress.value = (f"replayed {len(self.results)} settings, {n} time{'s' if n != 1 else ''} each, "
                               f"interleaved with plain decoding{' after an untimed warm-up' if self.warmup else ''}.") + (
            f' <span title="{html.escape(why)}">Adaptive not shown: see the note beside the profile.</span>'
            if why else "")
        keep = self.show.value  # the reader's "tree of" choice survives a replay
        self.show.options = list(self.results)
        self.show.value = keep if keep in self.results else next(iter(self.results))
        self._draw()  # the tree first: when the table changes, the tree below it is already the new one
        df = self.table_frame()
        self.table.value = self.warning_html(df) + self.styled_table(df).to_html()
        self.export.value = self.export_links(df)
        self._check_stale()
        return df

    def plain_warning(self) -> str:
        """Words when plain decoding's repeats moved more than PLAIN_MOVED x (`moved_words`), or it measured
        more than PLAIN_OFF times off what this device's profile predicts (only when the replay decided on
        this device's profile), else ""."""
        moved = moved_words(self.plain_s)
        if moved:
            return (f"plain decoding {moved}, so the measured columns are not this device's usual speed. Replay "
                    "again when it is quiet.")
        if not self.plain_s or not self.replayed or self.replayed["clock"] != "wall":
            return ""
        measured, predicted = 1 / _median(self.plain_s), 1000 / self.profile().target_ms(1)
        if max(measured / predicted, predicted / measured) <= PLAIN_OFF:
            return ""
        return (f"plain decoding measured {measured:.1f} tokens/s here, but this device's profile predicts "
                f"{predicted:.1f}: the machine is busier (or otherwise set up) than when it was profiled, so the "
                "measured columns are not this device's usual speed. Replay again, or re-measure the profile "
                "(treegraft-lab profile --refresh).")

    @staticmethod
    def warning_html(df: pd.DataFrame) -> str:
        """The table's `attrs["warning"]` as a line above it ("" without one)."""
        w = df.attrs.get("warning", "")
        style = "color: #8a4b00; background: #fff3cd; padding: 2px 8px; border-radius: 4px"
        return f'<div class="tg-plain-warning" style="{style}">⚠ {html.escape(w)}</div>' if w else ""

    def profile(self) -> Any:
        from treegraft_lab import measure

        return measure.resolve(self.replayed["clock"] if self.replayed else self.clock.value, self.pair)

    def table_frame(self) -> pd.DataFrame:
        """One row per replayed setting, plain decoding from the same context, and the recorded
        round for reference: A, sizes, the draft and verify time measured here (medians over the
        repeats), eta's median, low and high over them, and the round priced by the chosen profile
        (`attrs["modelled_on"]` names it in words, `attrs["repeats"]` counts the replays). The
        recorded round's modelled cells are empty unless it was priced by the same profile."""
        prof = self.profile() if self.results else None
        self.modelled_on = profile_name(prof) if prof is not None else ""
        rows = []
        rec = _row(self.run.rounds, run=self.run_id, round=self.round_idx)
        if rec is not None:
            same = prof is not None and rec.get("modelled_on") == prof.name
            rows.append({"setting": "recorded run", "schedule": rec["schedule"], "A": rec["accepted"],
                         "mid calls": rec["mid_calls"], "nodes": rec["nodes"], "kept": rec["kept"],
                         "draft (ms)": rec["draft_ms"], "verify (ms)": rec["verify_ms"], "eta": [rec["eta"]],
                         "modelled round (ms)": rec["modelled_ms"] if same else math.nan})
        if rows:
            rows[0]["speedup"] = [math.nan]
        if self.plain_s and prof is not None:
            rows.append({**baseline_row("plain decoding", self.plain_s, prof.target_ms(1)), "speedup": [1.0]})
        for name, (info, _run) in self.results.items():
            group = [k for k in self.results if self.twins.get(k, k) == self.twins.get(name, name)]  # timed together
            t = [x for k in group for x in self.times.get(k, [(info.draft_s, info.verify_s, info.round_s)])]
            per_repeat = [[r for k in group for *_, r in self.times.get(k, [])[i:i + 1]] for i in range(len(self.plain_s))]
            rows.append({"setting": name, "schedule": info.schedule, "A": info.accepted, "mid calls": info.mid_calls,
                         "nodes": info.nodes, "kept": info.kept, "draft (ms)": 1000 * _median([d for d, _, _ in t]),
                         "verify (ms)": 1000 * _median([v for _, v, _ in t]),
                         "eta": [(info.accepted + 1) / r for *_, r in t], "modelled round (ms)": info.modelled_ms,
                         "speedup": repeat_speedups(info.accepted + 1, per_repeat, self.plain_s) or [math.nan],
                         "same decisions as": self.twins.get(name, "")})
        df = pd.DataFrame(rows)
        if len(df):
            etas, ups = df.pop("eta"), df.pop("speedup")
            df.insert(8, "eta (tokens/s)", [_median(e) for e in etas])
            df.insert(9, "eta low", [min(e) for e in etas])
            df.insert(10, "eta high", [max(e) for e in etas])
            df.insert(11, "speedup", [_median(u) for u in ups])
            df.insert(12, "speedup low", [min(u) for u in ups])
            df.insert(13, "speedup high", [max(u) for u in ups])
            ms = df["modelled round (ms)"].astype(float)
            df["modelled tokens/s"] = (1000 * (df["A"] + 1) / ms).where(ms > 0)
            df["same decisions as"] = df.get("same decisions as", pd.Series([""] * len(df))).fillna("")
            now = self.replayed or self.controls()
            ours = prune_budget(now["prune"], now["budget"])
            df.insert(2, "pruning (budget)", [prune_budget(self.cfg.get("prune"), self.cfg.get("budget")) if s == "recorded run"
                                              else "—" if s == "plain decoding" else ours for s in df["setting"]])
        df.attrs["warning"] = self.plain_warning()
        df.attrs["modelled_on"] = self.modelled_on
        df.attrs["recorded"] = self.recorded_words(rec)
        df.attrs["repeats"] = int(self.replayed["repeats"]) if self.replayed else int(self.repeats.value)
        return df

    def recorded_words(self, rec: pd.Series | None) -> str:
        """The recorded run's settings and the profile its rounds were priced on, in words."""
        from treegraft_lab.viz.caption import profile_words

        on = profile_words(str(rec["modelled_on"])) if rec is not None and "modelled_on" in rec else "its profile"
        return f"{settings_words(self.cfg)}, priced on {on}"

    def styled_table(self, df: pd.DataFrame | None = None) -> Any:
        """`table_frame()` for display, headers in words: the measured columns under "measured here
        (median of n replays)", eta with its range, the modelled ones under "modelled on <profile>"."""
        df = self.table_frame() if df is None else df
        if "same decisions as" in df:  # a setting that decided exactly as another is named in that one's row, not repeated
            attrs, twins = dict(df.attrs), df["same decisions as"].fillna("")
            alias = {t: [s for s, u in zip(df["setting"], twins) if u == t] for t in set(twins) if t}
            df = df[twins == ""].copy()
            df["setting"] = [f"{s} (= {', '.join(alias[s])}: same decisions, timed together)" if s in alias else s
                             for s in df["setting"]]
            df["same decisions as"] = ""
            df.attrs = attrs
        on = df.attrs.get("modelled_on") or self.modelled_on or "the profile"
        n = df.attrs.get("repeats", 1)
        wide = df.drop(columns=["eta low", "eta high", "speedup low", "speedup high", "pruning (budget)"], errors="ignore").copy()
        if "pruning (budget)" in df:  # each row's pruning rule and budget, in its setting cell (the table fits 848 px)
            wide["setting"] = [s if p == "—" else f"{s} · {p}" for s, p in zip(df["setting"], df["pruning (budget)"])]
        if "same decisions as" in wide:  # named in the setting's own cell (the table fits 848 px)
            wide["setting"] = [f"{s}<br>(same decisions as {t}, timed together)" if t else s
                               for s, t in zip(wide["setting"], wide.pop("same decisions as"))]
        # each median with the min–max of its repeats in the same cell (the table fits 848 px)
        wide["eta (tokens/s)"] = [f"{m:.1f}" + (f"<br>({lo:.1f}–{hi:.1f})" if hi > lo else "")
                                  for m, lo, hi in zip(df["eta (tokens/s)"], df["eta low"], df["eta high"])]
        if "speedup" in df.columns:
            wide["speedup"] = [f"{m:.2f}x" + (f"<br>({lo:.2f}–{hi:.2f})" if hi > lo else "") if m == m else "—"
                               for m, lo, hi in zip(df["speedup"], df["speedup low"], df["speedup high"])]
        measured = f"measured here: median of {n} replay{'s' if n != 1 else ''}, interleaved (min–max of per-repeat values)"
        names = {"schedule": "schedule (1 = mid)", "A": "accepted draft tokens A", "nodes": "nodes drafted",
                 "kept": "nodes kept", "eta (tokens/s)": "tokens/s (eta), range",
                 "speedup": "speedup over plain decoding (min–max of per-repeat speedups)",
                 "modelled round (ms)": "round (ms)", "modelled tokens/s": "tokens/s",
                 "same decisions as": "same decisions as (timed together)"}
        top = {c: measured for c in ("draft (ms)", "verify (ms)", "eta (tokens/s)", "speedup")}
        top |= {c: "modelled on the profile" for c in ("modelled round (ms)", "modelled tokens/s")}
        wide.columns = pd.MultiIndex.from_tuples([(top.get(c, ""), names.get(c, c)) for c in wide.columns])
        ms = [c for c in wide.columns if c[1] in ("draft (ms)", "verify (ms)", "round (ms)")]
        now = self.replayed or self.controls()
        caption = (f"replays: {PRUNE_WORDS[now['prune']]}, budget {now['budget']}, modelled on {on}; measured on this machine, {n} replay{'s' if n != 1 else ''} per setting. Recorded run: "
                   f"{df.attrs.get('recorded', '')}")
        return (styled(wide, ms=ms, decimals=2).hide(axis="index").set_caption(caption)
                .set_table_styles(GROUPED_CSS, overwrite=False))

    def export_meta(self, df: pd.DataFrame) -> dict[str, Any]:
        """The JSON export's fields besides the rows: run, round, settings, profile, repeats, and the
        header lines of the CSV (`export_header`: pair, prompt, settings, profile, date)."""
        return {"run": self.run_id, "round": self.round_idx, "settings": self.replayed,
                "modelled_on": df.attrs.get("modelled_on"), "repeats": df.attrs.get("repeats"),
                "replayed_at": self.replayed_at, "about": self.export_header(df)}

    def export_csv(self, df: pd.DataFrame) -> str:
        """The table as CSV under "# key: value" lines naming what made it (`export_header`); read it back
        with `pd.read_csv(path, comment="#")`."""
        return "".join(f"# {line}\n" for line in self.export_header(df)) + df.to_csv(index=False)

    def export_links(self, df: pd.DataFrame | None = None) -> str:
        """Download links (CSV, JSON) of the table, each naming pair, prompt, settings, profile and date."""
        import base64

        df = self.table_frame() if df is None else df
        csv = self.export_csv(df)
        js = json.dumps({**self.export_meta(df), "rows": json.loads(df.to_json(orient="records"))}, indent=1)
        name = f"playground_run{self.run_id}_round{self.round_idx}"
        links = [f'<a download="{name}.{ext}" href="data:{mime};base64,{base64.b64encode(text.encode()).decode()}" '
                 f'style="margin-right:1em">⤓ {ext.upper()}</a>' for ext, mime, text in
                 (("csv", "text/csv", csv), ("json", "application/json", js))]
        return f'<span style="font-size:12px">export this table: {"".join(links)}</span>'

    def save(self, path: str) -> str:
        """Write the table to `path` (.csv or .json) as the export links do: the CSV under its "# " lines,
        the JSON with the same fields; returns the path."""
        from pathlib import Path

        df, p = self.table_frame(), Path(path)
        if p.suffix == ".json":
            p.write_text(json.dumps({**self.export_meta(df), "rows": json.loads(df.to_json(orient="records"))}, indent=1))
        else:
            p.write_text(self.export_csv(df))
        return str(p)

    def replay_caption(self, setting: str | None = None) -> str:
        """The line naming a replay (`viz.caption.named`): the recorded run's pair and prompt, the replayed
        round, `setting` (default: the one whose tree is shown), pruning, budget and the profile decided on."""
        now = self.replayed or self.controls()
        row = _row(self.run.runs, run=self.run_id)
        prompt = prompt_words(row["prompt_text"]) if row is not None and "prompt_text" in row else None
        pair = str(row.get("pair", "") or "") if row is not None else ""
        what = setting or self.show.value
        return named(pair or getattr(self.pair, "name", ""), profile_name(self.profile()), prompt,
                     f"replay of round {self.round_idx}" + (f": {what}" if what else "")
                     + f", {PRUNE_WORDS[now['prune']]}, budget {now['budget']}")

    def export_header(self, df: pd.DataFrame) -> list[str]:
        """What an exported table was made from, one "key: value" line each: pair, prompt, the recorded run's
        settings, the replay's settings, the profile every decision and modelled column read, and the date."""
        now = self.replayed or self.controls()
        row = _row(self.run.runs, run=self.run_id)
        off = [k for k, f in (("EG", "eg"), ("ND", "nd")) if not now[f]]
        return [f"TreeGraft Lab schedule playground: round {self.round_idx} of recorded run {self.run_id}, replayed",
                f"pair: {(str(row.get('pair', '') or '') if row is not None else '') or getattr(self.pair, 'name', '')}",
                f"prompt: {prompt_words(row['prompt_text']) if row is not None and 'prompt_text' in row else 'unknown'}",
                f"recorded run: {df.attrs.get('recorded', '')}",
                f"replayed: your schedule {now['schedule']}" + "".join(f", w/o {k}" for k in off)
                + f", {PRUNE_WORDS[now['prune']]}, budget {now['budget']}, {df.attrs.get('repeats', now['repeats'])} "
                "timed replays per setting, interleaved with plain decoding",
                f"profile: {df.attrs.get('modelled_on') or self.modelled_on} (every decision that weighs time and the "
                "modelled columns); measured columns: this machine",
                f"date: {self.replayed_at or 'not replayed yet'}"]

    def _draw(self) -> None:
        if self.show.value in self.results:
            fig = tree_figure(self.results[self.show.value][1], 0, scroll=True, caption=self.replay_caption(),
                              caption_at="foot")  # named above the table too; the footnote goes with a PNG
            plain = fig.layout.title.text.replace("<br>", " ").replace(" ·  ", " · ")
            now = self.replayed or self.controls()
            retitle(fig, f"{self.show.value}, {PRUNE_WORDS[now['prune']]}, budget {now['budget']}: "
                    + plain.replace("round 0", f"replay of round {self.round_idx}", 1))
            self.figure = self.plot.show(fig)


GROUPED_CSS = [{"selector": "th.col_heading", "props": "white-space: normal"},  # headers wrap: the table fits 848 px
               {"selector": "th.col_heading.level0", "props": "text-align: center; border-bottom: 1px solid #bbb"},
               {"selector": "td", "props": "white-space: normal"},  # names and ranges wrap too
               {"selector": "td.col0", "props": "white-space: normal; min-width: 7em"},
               {"selector": "caption", "props": "caption-side: top; text-align: left; font-size: 12px; color: #444"},
               {"selector": "th, td", "props": "padding: 2px 4px"}]  # 13 columns: narrower gaps keep the table in 848 px


# ---------------------------------------------------------------------------- two trees side by side


class CompareView(W.VBox):
    """Two methods draft one round start of a recorded run; their verified trees side by side,
    aligned by node (`viz.compare.side_by_side`), and what the target accepted from each by depth."""

    def __init__(self, pair, run, round: int | None = None, run_id: int = 0,
                 methods: tuple[str, str] = ("10101", "mid")) -> None:
        from treegraft_lab.workbench import COMPARE_METHODS

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
        from treegraft_lab.viz.compare import depth_table, kept_rows, side_by_side
        from treegraft_lab.workbench import COMPARE_METHODS, compare_round

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


# ---------------------------------------------------------------------------- recording from the notebook


PICK_SCHEDULES = (("10101 (mid at steps 1, 3, 5)", "10101"), ("all-small", "small"), ("all-mid", "mid"),
                  ("adaptive", "adaptive"), ("oracle (slow: every schedule each round)", "oracle"))


class RunPicker(W.VBox):
    """Pick a prompt (a suite's, or typed), a pair (a registered one, or a folder holding target/ and mid/) and a
    schedule; "record" decodes it with progress and shows the recorded run in `viewer` (a `StepThroughViewer`)."""

    def __init__(self, viewer: StepThroughViewer | None = None, max_new_tokens: int = 96, budget: int = 63) -> None:
        from treegraft_lab import load_prompts
        from treegraft_lab.models import PAIRS
        from treegraft_lab.workbench import current

        self.viewer, self.max_new, self.budget, self.run = viewer, max_new_tokens, budget, None
        rows = load_prompts("treegraft-suite", split="eval")
        self.prompt = W.Dropdown(options=[(f"{r['question_id']} · {r['turns'][0][:60]}", r["turns"][0]) for r in rows],
                                 description="prompt", layout={"width": "40em"})
        self.typed = W.Textarea(placeholder="or type a prompt here (used when not empty)", layout={"width": "40em", "height": "3.2em"})
        self.pair = W.Combobox(options=list(PAIRS), value=current().pair, description="pair", ensure_option=False,
                               placeholder="a registered pair, or a folder holding target/ and mid/", layout={"width": "28em"})
        self.schedule = W.Dropdown(options=PICK_SCHEDULES, value="10101", description="schedule", layout={"width": "24em"})
        self.button = W.Button(description="record", button_style="primary", icon="circle", layout={"width": "10em"})
        self.button.add_class("tg-record")
        self.button.on_click(lambda _b: self.record())
        self.bar = W.IntProgress(value=0, min=0, max=max_new_tokens, description="tokens", layout={"width": "24em"})
        self.status = W.HTML()
        super().__init__([self.prompt, self.typed, W.HBox([self.pair, self.schedule]), W.HBox([self.button, self.bar]),
                          self.status])
        self.add_class("tg-picker")

    def text(self) -> str:
        return self.typed.value.strip() or self.prompt.value

    def check(self) -> str | None:
        """What is wrong with the picks, in one line, before any model loads (None: nothing)."""
        from pathlib import Path

        from treegraft_lab.models import PAIRS

        name = self.pair.value.strip()
        if name not in PAIRS and not ((Path(name).expanduser() / "target").is_dir() and (Path(name).expanduser() / "mid").is_dir()):
            return f"pair {name!r} is neither a registered pair nor a folder holding target/ and mid/: pick one from the list"
        if not self.text():
            return "the prompt is empty: pick one or type one"
        return None

    def record(self) -> Any:
        """Decode the picked prompt with the picked pair and schedule, recorded; show it in the viewer."""
        from treegraft_lab import DecodeConfig
        from treegraft_lab.workbench import cached_pair, current, record_runs

        bad = self.check()
        if bad:
            self.status.value = f'<span class="tg-picker-error" style="color:#b00020">{html.escape(bad)}</span>'
            return None
        self.button.disabled, self.bar.value = True, 0
        try:
            self.status.value = f"loading {html.escape(self.pair.value)} ..."
            pair = cached_pair(self.pair.value.strip(), current().device)
            self.status.value = f"recording {self.max_new} tokens under {self.schedule.value} ..."
            cfg = DecodeConfig(schedule=self.schedule.value, prune="topk", budget=self.budget, clock=current().clock)

            def tick(n: int) -> None:
                self.bar.value = n

            self.run = record_runs(pair, [self.text()], cfg, self.max_new, progress=tick)
            self.status.value = (f"recorded {len(self.run.rounds)} rounds, {len(self.run.runs.iloc[0]['output_ids'])} tokens"
                                 + (": shown in the viewer" if self.viewer is not None else ""))
            if self.viewer is not None:
                self.viewer.show_run(self.run)
        except Exception as e:  # noqa: BLE001 - a failed load or decode is said in the widget, in one line
            self.status.value = f'<span class="tg-picker-error" style="color:#b00020">{html.escape(str(e).splitlines()[0])}</span>'
        finally:
            self.button.disabled = False
        return self.run
