"""The schedule playground's view (ipywidgets): the controls over a `PlaygroundSession` (schedule toggles,
EG/ND, budget, pruning, profile, repeats), the replay button, the stale cue, and below them the table, its
export links and the tree of a replayed setting. `SchedulePlayground(pair, run, round)` needs the model pair
to replay; without one it only shows the recorded round.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as W
import pandas as pd
import plotly.graph_objects as go

from treegraft_lab import measure
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.views.display import TreeBox, caption_html
from treegraft_lab.views.profile import clock_html
from treegraft_lab.views.session import CLOCKS, PlaygroundSession
from treegraft_lab.views.table import warning_html
from treegraft_lab.viz.caption import PRUNE_WORDS, run_caption
from treegraft_lab.viz.tree import retitle, tree_figure

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
SESSION_NAMES = frozenset({  # what the view reads from its session as its own: `pg.results` is `pg.session.results`
    "pair", "run", "run_id", "cfg", "now", "warmup", "why", "prompt_len", "round_idx", "context", "results", "times",
    "plain_s", "twins", "replayed", "replayed_at", "modelled_on", "settings", "base_config", "profile", "table_frame",
    "styled_table", "export_header", "export_csv", "export_json", "export_links", "save", "replay_caption"})


class SchedulePlayground(W.VBox):
    """Replay one recorded round start with your own schedule, EG/ND switches, budget, pruning and
    device profile: the controls and drawing of a `PlaygroundSession` (`session`), which replays.

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
        self.session = PlaygroundSession(pair, run, round=round, run_id=run_id, clock=clock, prune=prune,
                                         repeats=repeats, warmup=warmup)
        now, rounds = self.session.now, run.rounds[run.rounds["run"] == run_id]
        self.pick_round = W.Dropdown(options=[(f"{r.round} · recorded A = {r.accepted} · {r.schedule}", int(r.round))
                                              for r in rounds.itertuples()], value=now["round"], description="round",
                                     layout={"width": "24em"})
        self.pick_round.add_class("tg-round-pick")
        self.toggles = [W.ToggleButton(value=b == "1", layout={"width": "7.5em"}) for b in now["schedule"]]
        for i, t in enumerate(self.toggles):
            t.observe(lambda _c, i=i: self._label(i), "value")
            self._label(i)
        self.eg = W.Checkbox(now["eg"], description="EG (expanded graft positions)", indent=False, layout={"width": "auto"})
        self.nd = W.Checkbox(now["nd"], description="ND (non-destructive grafting)", indent=False, layout={"width": "auto"})
        self.repeats = W.BoundedIntText(now["repeats"], min=1, max=20, description="repeats",
                                        tooltip="replays per setting: measured times are their median, eta with its range",
                                        layout={"width": "10em"})
        self._cost_controls()
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
        self.session.update(**self.controls())  # as the controls hold them (the budget slider: 4 to 128)
        self._set_round()
        self._adaptive_note()
        for w in (self.pick_round, *self.toggles, self.eg, self.nd, self.budget, self.prune, self.clock, self.repeats):
            w.observe(self._changed, "value")
        super().__init__([self.status, self.pick_round, W.HBox([W.Label("schedule:"), *self.toggles]),
                          W.HBox([self.eg, self.nd], layout={"gap": "1.5em"}),
                          W.HBox([W.VBox([self.budget, self.prune]), self.prune_note], layout={"align_items": "center"}),
                          W.HBox([self.clock, self.adaptive, self.remeasure], layout={"align_items": "center"}),
                          W.HBox([self.button, self.repeats, self.progress], layout={"gap": "1em", "align_items": "center"}),
                          self.stale, self.table, self.export, self.show, self.plot])
        self.add_class("tg-playground")

    def __getattr__(self, name: str) -> Any:
        """What the view does not hold, its session does (SESSION_NAMES): `pg.results`, `pg.settings()`."""
        if name in SESSION_NAMES and "session" in self.__dict__:
            return getattr(self.__dict__["session"], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _cost_controls(self) -> None:
        """The budget slider, the pruning and profile selectors, the pruning rule in words, the
        adaptive scheduler's note and the re-measure button."""
        now = self.session.now
        self.budget = W.IntSlider(now["budget"], 4, 128, description="budget",
                                  tooltip="verification budget: non-root nodes kept at most", layout={"width": "22em"})
        self.prune = W.Dropdown(options=[("top-k by score (paper)", "topk"), ("value (cost-aware)", "value")],
                                value=now["prune"], description="pruning", layout={"width": "22em"})
        self.prune_note = W.HTML(layout={"width": "auto", "margin": "0 0 0 1em", "flex": "1"})
        self.prune_note.add_class("tg-prune-note")
        self.clock = W.Dropdown(options=list(CLOCKS), value=now["clock"], description="profile",
                                tooltip="the device costs every decision reads and each round is priced with",
                                layout={"width": "22em"})
        self.adaptive = W.HTML(layout={"width": "auto", "margin": "0 0 0 1em", "flex": "1"})
        self.adaptive.add_class("tg-adaptive-note")
        self.remeasure = W.Button(description="re-measure", icon="refresh", layout={"width": "9em", "flex": "0 0 auto"},
                                  tooltip="measure this device's profile again (checked)", disabled=self.session.pair is None)
        self.remeasure.add_class("tg-remeasure")
        self.remeasure.on_click(lambda _b: self._remeasure())

    def _set_round(self) -> None:
        """Say which round start the playground replays."""
        s = self.session
        self.status.value = (caption_html(f"recorded: {run_caption(s.run, s.run_id)}") +
                             f"round {s.round_idx} of run {s.run_id}: starts after {len(s.context)} committed "
                             f"tokens ({s.prompt_len} prompt). Pick a schedule (one button per draft step), then replay. "
                             "A replay starts its small drafters from the committed text alone (Token Recycling's "
                             "matrix empty, where the recorded run had learnt it over the earlier rounds), so its tree "
                             "may hold other nodes than the recorded round's.")
        if s.round_idx == s.why_round:
            self.status.value += f' <span class="tg-why" style="color:#555">(opened on {html.escape(s.why)})</span>'
        if s.pair is None:
            self.button.disabled = True
            self.status.value += " <b>No model pair given: replay is off.</b>"

    def _label(self, i: int) -> None:
        t = self.toggles[i]
        t.description = f"{i + 1}: {'mid' if t.value else 'small'}"
        t.button_style = "warning" if t.value else "info"

    def _adaptive_note(self) -> None:
        """Say which profile (in words) decisions read, whether the adaptive scheduler is offered for
        it and the pruning, and what the chosen pruning rule keeps."""
        self.prune_note.value = f'<span style="font-size:12px">{PRUNING_NOTES[self.prune.value]}</span>'
        if self.session.pair is None:
            self.adaptive.value = ""
            return
        self.remeasure.disabled = self.clock.value != "wall"
        self.adaptive.value = (f'<span style="font-size:12px">{clock_html(self.clock.value, self.session.pair)}'
                               f'{self.session.adaptive_words()}</span>')

    def _remeasure(self) -> None:
        """Measure this device's profile again (checked), and say so beside the selector."""
        self.remeasure.disabled = True
        try:
            measure.for_pair(self.session.pair, refresh=True, progress=False)
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
        self.session.update(**self.controls())
        return self.session.changed()

    def _changed(self, change: dict) -> None:
        """A control moved: the session follows it, another round start or profile is said, and the
        results are marked stale (or no longer)."""
        self.session.update(**self.controls())
        if change["owner"] is self.pick_round:
            self._set_round()
        if change["owner"] in (self.prune, self.clock):
            self._adaptive_note()
        self._check_stale()

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

    def replay(self) -> pd.DataFrame:
        """Replay the round under every setting (`PlaygroundSession.replay`), saying what runs; show the
        table, its export links and the tree of the setting picked; return the table."""
        s = self.session
        self.button.disabled = True
        try:
            s.update(**self.controls())
            df = s.replay(lambda words: setattr(self.progress, "value", html.escape(words)))
        finally:
            self.button.disabled = s.pair is None
        n, why = s.replayed["repeats"], s.adaptive_reason(s.base_config())
        self.progress.value = (f"replayed {len(s.results)} settings, {n} time{'s' if n != 1 else ''} each, "
                               f"interleaved with plain decoding{' after an untimed warm-up' if s.warmup else ''}.") + (
            f' <span title="{html.escape(why)}">Adaptive not shown: see the note beside the profile.</span>'
            if why else "")
        keep = self.show.value  # the reader's "tree of" choice survives a replay
        self.show.options = list(s.results)
        self.show.value = keep if keep in s.results else next(iter(s.results))
        self._draw()  # the tree first: when the table changes, the tree below it is already the new one
        self.table.value = warning_html(df) + s.styled_table(df).to_html()
        self.export.value = s.export_links(df)
        self._check_stale()
        return df

    def _draw(self) -> None:
        s = self.session
        if self.show.value in s.results:
            fig = tree_figure(s.results[self.show.value][1], 0, scroll=True, caption=s.replay_caption(self.show.value),
                              caption_at="foot")  # named above the table too; the footnote goes with a PNG
            plain = fig.layout.title.text.replace("<br>", " ").replace(" ·  ", " · ")
            now = s.replayed or s.now
            retitle(fig, f"{self.show.value}, {PRUNE_WORDS[now['prune']]}, budget {now['budget']}: "
                    + plain.replace("round 0", f"replay of round {s.round_idx}", 1))
            self.figure = self.plot.show(fig)
