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
from typing import Any

import ipywidgets as W
import pandas as pd
import plotly.graph_objects as go

from treegraft_lab.viz.tree import tree_figure
from treegraft_lab.workbench import styled

VERIFY = 0  # the step slider's value for "after verification" (the final, pruned tree)


def draw(out: W.Output, fig: go.Figure) -> go.Figure:
    """Show `fig` in `out`, replacing what it showed; returns `fig` (the figure on screen).

    A plain figure in an Output widget is drawn whole by JupyterLab's plotly renderer. Edits of
    a FigureWidget (in place, or a fresh one swapped into the box) were seen to leave the browser
    showing the previous figure when two changes came within one drawing on a loaded machine.
    """
    from IPython.display import clear_output, display

    with out:
        clear_output(wait=True)
        display(fig)
    return fig


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
            f"verify {r['verify_ms']:,.0f} ms · eta {r['eta']:.2f} tokens/s") if r is not None else ""
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
    pruned to the budget, with the accepted path.
    """

    def __init__(self, run, run_id: int = 0, round: int = 0) -> None:
        self.run = run
        runs = run.runs["run"].tolist()
        self.pick = W.Dropdown(options=[(self._run_label(r), r) for r in runs], value=run_id, description="run",
                               layout={"width": "32em", "display": "" if len(runs) > 1 else "none"})
        self.round = W.IntSlider(0, 0, 1, description="round", continuous_update=False)
        self.round.add_class("tg-round-slider")
        self.step = W.SelectionSlider(options=[("verify", VERIFY)], description="step", continuous_update=False)
        self.step.add_class("tg-step-slider")
        self.pruned = W.Checkbox(True, description="show pruned nodes (at verify)", indent=False,
                                 layout={"width": "auto"})
        self.siblings = W.Dropdown(options=[("4 children per parent", 4), ("10 per parent", 10), ("all children", 0)],
                                   value=4, layout={"width": "13em"})  # the others fold into "+m"
        self.text, self.info = W.HTML(), W.HTML()
        self._busy, self._internal, self._pending = False, True, []
        self._set_run(run_id, round)
        self.plot = W.Output()
        self.figure = draw(self.plot, self._figure())
        self._internal = False
        for w in (self.pick, self.round, self.step, self.pruned, self.siblings):
            w.observe(self._changed, "value")
        self._changed()
        super().__init__([self.pick, W.HBox([self.round, self.step, self.pruned, self.siblings]), self.info, self.plot,
                          self.text])
        self.add_class("tg-viewer")

    def _run_label(self, r: int) -> str:
        row = _row(self.run.runs, run=r)
        cat = row.get("category", "") if row is not None else ""
        return f"{r}: {cat} · {str(row['output_text'])[:40]!r}" if row is not None else str(r)

    def _set_run(self, run_id: int, round: int = 0) -> None:
        rounds = sorted(self.run.rounds[self.run.rounds["run"] == run_id]["round"])
        self.round.max = max(rounds[-1], 0) if rounds else 0
        self.round.value = min(round, self.round.max)
        self._set_steps()

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
        return tree_figure(self.run, self.round.value, step, run_id=self.pick.value, show_pruned=self.pruned.value,
                           max_children=self.siblings.value or None)

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
                self.figure = draw(self.plot, self._figure())
                self.text.value = output_html(self.run, self.round.value, self.pick.value)
                self.info.value = info_html(self.run, self.round.value, self.step.value, self.pick.value)
        finally:
            self._busy = False


# ---------------------------------------------------------------------------- schedule playground


CLOCKS = (("this device (wall)", "wall"), ("paper A100 (modelled)", "a100-paper"))  # the profile selector


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


MEASURED = ("draft (ms)", "verify (ms)", "eta (tokens/s)")  # timed on this machine
GROUPED_CSS = [{"selector": "th.col_heading", "props": "white-space: normal"},  # headers wrap: the table fits 848 px
               {"selector": "th.col_heading.level0", "props": "text-align: center; border-bottom: 1px solid #bbb"}]
MODELLED = {"modelled round (ms)": "round (ms)", "modelled tokens/s": "tokens/s"}  # priced by the profile


class SchedulePlayground(W.VBox):
    """Replay one recorded round start with your own schedule, EG/ND switches, budget, pruning and
    device profile.

    "replay" runs the round from the same committed context under the chosen settings and under
    all-small, all-mid and (when a scheduler is trained for the chosen profile and pruning) the
    adaptive scheduler. Every decision that weighs time reads the chosen profile ("this device"
    or the paper's A100 costs); the table shows A, the draft and verify time measured here, and
    the round priced by the profile ("modelled on <profile>"), with the tree of the setting picked
    below it.
    """

    def __init__(self, pair, run, round: int = 0, run_id: int = 0, clock: str | None = None,
                 prune: str | None = None) -> None:
        from treegraft_lab.workbench import round_context

        self.pair, self.run, self.round_idx, self.run_id = pair, run, round, run_id
        row = _row(run.runs, run=run_id)
        self.cfg = json.loads(row["config"]) if row is not None else {}
        self.prompt_len = len(row["prompt_ids"])
        self.context = round_context(run, round, run_id)
        rec = _row(run.rounds, run=run_id, round=round)
        depth = int(self.cfg.get("depth", 5))
        bits = str(rec["schedule"]) if rec is not None else "0" * depth
        self.toggles = [W.ToggleButton(value=b == "1", layout={"width": "7.5em"}) for b in bits.ljust(depth, "0")[:depth]]
        for i, t in enumerate(self.toggles):
            t.observe(lambda _c, i=i: self._label(i), "value")
            self._label(i)
        self.eg = W.Checkbox(bool(self.cfg.get("expanded_graft", True)), description="EG (expanded graft positions)", indent=False)
        self.nd = W.Checkbox(bool(self.cfg.get("non_destructive", True)), description="ND (non-destructive grafting)", indent=False)
        self._build_costs(prune, clock)
        self.button = W.Button(description="replay", button_style="primary", icon="play")
        self.button.on_click(lambda _b: self.replay())
        self.table, self.status, self.progress = W.HTML(), W.HTML(), W.HTML()
        self.show = W.Dropdown(options=[], description="tree of")
        self.show.observe(lambda _c: self._draw(), "value")
        self.plot, self.figure = W.Output(), go.Figure()
        self.results: dict[str, tuple[Any, Any]] = {}
        self.modelled_on = ""  # the profile that priced the last replay
        self.status.value = (f"round {round} of run {run_id}: starts after {len(self.context)} committed tokens "
                             f"({self.prompt_len} prompt). Pick a schedule (one button per draft step), then replay.")
        if pair is None:
            self.button.disabled = True
            self.status.value += " <b>No model pair given: replay is off.</b>"
        self.eg.layout.width = self.nd.layout.width = "auto"
        self._adaptive_note()
        super().__init__([self.status, W.HBox([W.Label("schedule:"), *self.toggles]),
                          W.HBox([self.eg, self.nd], layout={"gap": "1.5em"}), W.HBox([self.budget, self.prune]),
                          W.HBox([self.clock, self.adaptive], layout={"align_items": "center"}),
                          W.HBox([self.button, self.progress], layout={"gap": "1em", "align_items": "center"}),
                          self.table, self.show, self.plot])
        self.add_class("tg-playground")

    def _build_costs(self, prune: str | None, clock: str | None) -> None:
        """The budget slider, the pruning and profile selectors, and the adaptive scheduler's note."""
        budget = self.cfg.get("budget", 63)
        self.budget = W.IntSlider(budget if isinstance(budget, int) else 63, 4, 128, description="budget",
                                  tooltip="verification budget: non-root nodes kept", layout={"width": "22em"})
        self.prune = W.Dropdown(options=[("top-k by score (paper)", "topk"), ("value (cost-aware)", "value")],
                                value=prune or self.cfg.get("prune", "topk"), description="pruning", layout={"width": "22em"})
        clocks = [v for _, v in CLOCKS]
        recorded = self.cfg.get("clock") if self.cfg.get("clock") in clocks else "wall"
        self.clock = W.Dropdown(options=list(CLOCKS), value=clock or recorded, description="profile",
                                tooltip="the device costs every decision reads and each round is priced with",
                                layout={"width": "22em"})
        self.adaptive = W.HTML(layout={"width": "auto", "margin": "0 0 0 1em"})
        self.adaptive.add_class("tg-adaptive-note")
        for w in (self.prune, self.clock):
            w.observe(lambda _c: self._adaptive_note(), "value")

    def _label(self, i: int) -> None:
        t = self.toggles[i]
        t.description = f"{i + 1}: {'mid' if t.value else 'small'}"
        t.button_style = "warning" if t.value else "info"

    def _adaptive_note(self) -> None:
        """Say whether the adaptive scheduler is offered for the chosen profile and pruning."""
        if self.pair is None:
            self.adaptive.value = ""
            return
        cfg = self.base_config()
        if adaptive_status(self.pair, cfg) is None:
            text = f"adaptive: offered (scheduler {scheduler_name(self.pair, cfg)})"
        else:
            text = f"adaptive: <b>not offered</b> (trained: {', '.join(trained_schedulers(self.pair)) or 'none'})"
        self.adaptive.value = f'<span style="font-size:12px">{text}</span>'

    @property
    def mask(self) -> str:
        return "".join("1" if t.value else "0" for t in self.toggles)

    def base_config(self) -> Any:
        """The replays' common DecodeConfig: the recorded run's growth rule, budget, pruning, profile."""
        from treegraft_lab.config import DecodeConfig

        keys = ("depth", "width", "ngram_max", "ngram_min", "temperature", "expansion", "children", "ngram_chain",
                "chain_len", "max_nodes", "lookback")  # the recorded run's growth rule too
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
        return out

    def replay(self) -> pd.DataFrame:
        """Replay the round under every setting; return (and show) the comparison table."""
        from treegraft_lab import measure
        from treegraft_lab.decoder import replay_round

        self.button.disabled = True
        self.results = {}
        try:
            profile = measure.resolve(self.clock.value, self.pair)  # once per replay: the decoders only read it
            for name, cfg in self.settings().items():
                self.progress.value = f"replaying: {html.escape(name)} ..."
                self.results[name] = replay_round(self.pair, self.context, replace(cfg, clock=profile),
                                                  prompt_len=self.prompt_len)
        finally:
            self.button.disabled = self.pair is None
        why = adaptive_status(self.pair, self.base_config())
        self.progress.value = f"replayed {len(self.results)} settings." + (
            f' <span title="{html.escape(why)}">Adaptive not shown: see the note beside the profile.</span>'
            if why else "")
        df = self.table_frame()
        self.table.value = self.styled_table(df).to_html()
        self.show.options = list(self.results)
        self.show.value = next(iter(self.results))
        self._draw()
        return df

    def _priced_on(self) -> str:
        """The profile that priced the replays (recorded in their rounds tables)."""
        for _info, rrun in self.results.values():
            if "modelled_on" in rrun.rounds and len(rrun.rounds):
                return str(rrun.rounds["modelled_on"].iloc[0])
        return ""

    def table_frame(self) -> pd.DataFrame:
        """One row per replayed setting (and the recorded round for reference): the draft and
        verify time and eta measured here, and the round priced by the chosen profile
        (`attrs["modelled_on"]` names it). The recorded round's modelled cells are empty unless
        it was priced by the same profile."""
        self.modelled_on = self._priced_on()
        rows = []
        rec = _row(self.run.rounds, run=self.run_id, round=self.round_idx)
        if rec is not None:
            same = rec.get("modelled_on") == self.modelled_on and bool(self.modelled_on)
            rows.append(self._row_of("recorded (original run)", rec["schedule"], rec["accepted"], rec["mid_calls"],
                                     rec["nodes"], rec["kept"], rec["draft_ms"], rec["verify_ms"],
                                     rec["eta"], rec["modelled_ms"] if same else math.nan))
        for name, (info, _run) in self.results.items():
            rows.append(self._row_of(name, info.schedule, info.accepted, info.mid_calls, info.nodes, info.kept,
                                     1000 * info.draft_s, 1000 * info.verify_s, (info.accepted + 1) / info.round_s,
                                     info.modelled_ms))
        df = pd.DataFrame(rows)
        df.attrs["modelled_on"] = self.modelled_on
        return df

    @staticmethod
    def _row_of(name: str, schedule: str, a: int, calls: int, nodes: int, kept: int, draft_ms: float, verify_ms: float,
                eta: float, modelled_ms: float) -> dict[str, Any]:
        ms = float(modelled_ms) if modelled_ms is not None else math.nan
        return {"setting": name, "schedule": schedule, "A (tokens)": a, "mid calls": calls, "nodes": nodes, "kept": kept,
                "draft (ms)": draft_ms, "verify (ms)": verify_ms, "eta (tokens/s)": eta, "modelled round (ms)": ms,
                "modelled tokens/s": 1000 * (a + 1) / ms if ms > 0 else math.nan}

    def styled_table(self, df: pd.DataFrame | None = None) -> Any:
        """`table_frame()` for display: the measured columns under "measured here", the modelled
        ones under "modelled on <profile>"."""
        df = self.table_frame() if df is None else df
        on = df.attrs.get("modelled_on") or self.modelled_on or "the profile"
        top = {c: "measured here" for c in MEASURED} | {c: f"modelled on {on}" for c in MODELLED}
        wide = df.copy()
        wide.columns = pd.MultiIndex.from_tuples([(top.get(c, ""), MODELLED.get(c, c)) for c in df.columns])
        ms = [c for c in wide.columns if c[1] in ("draft (ms)", "verify (ms)", "round (ms)")]
        return styled(wide, ms=ms, decimals=2).hide(axis="index").set_table_styles(GROUPED_CSS, overwrite=False)

    def _draw(self) -> None:
        if self.show.value in self.results:
            fig = tree_figure(self.results[self.show.value][1], 0)
            fig.layout.title.text = f"{self.show.value}: " + fig.layout.title.text.replace("round 0", f"replay of round {self.round_idx}", 1)
            self.figure = draw(self.plot, fig)
