"""Recording from the notebook: pick a prompt, a pair and a schedule, record the run with progress, and
show it in a step-through viewer (`RunPicker(viewer)`)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import ipywidgets as W

from treegraft_lab.config import DecodeConfig
from treegraft_lab.models import PAIRS
from treegraft_lab.prompts import load_prompts
from treegraft_lab.views.step_through import StepThroughViewer
from treegraft_lab.workbench import cached_pair, current, record_runs

PICK_SCHEDULES = (("10101 (mid at steps 1, 3, 5)", "10101"), ("all-small", "small"), ("all-mid", "mid"),
                  ("adaptive", "adaptive"), ("oracle (slow: every schedule each round)", "oracle"))


class RunPicker(W.VBox):
    """Pick a prompt (a suite's, or typed), a pair (a registered one, or a folder holding target/ and mid/) and a
    schedule; "record" decodes it with progress and shows the recorded run in `viewer` (a `StepThroughViewer`)."""

    def __init__(self, viewer: StepThroughViewer | None = None, max_new_tokens: int = 96, budget: int = 63) -> None:
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
        name = self.pair.value.strip()
        if name not in PAIRS and not ((Path(name).expanduser() / "target").is_dir() and (Path(name).expanduser() / "mid").is_dir()):
            return f"pair {name!r} is neither a registered pair nor a folder holding target/ and mid/: pick one from the list"
        if not self.text():
            return "the prompt is empty: pick one or type one"
        return None

    def record(self) -> Any:
        """Decode the picked prompt with the picked pair and schedule, recorded; show it in the viewer."""
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
