"""What every view says about the device profile it decides on: its line (`profile_line`, as HTML
`profile_html`), and that line with a "re-measure" button (`ProfileLine`)."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as W

from treegraft_lab import measure
from treegraft_lab.costs import profile_name
from treegraft_lab.errors import TreeGraftError


def profile_line(profile) -> str:
    """What every view says about the profile it decides on: which (`profile_name`: device, date, n timings
    per size, their spread, the load beside the measurement, why it is flagged), and a mid forward against
    a target forward of as many tokens, with a warning when a sanity check fails (`measure.problems`)."""
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
    n = min(64, max(profile.target))
    order = measure.ORDER_CHECK in profile.checked or not profile.n
    mid = f"{profile.mid_ms(n):.3f}" if profile.mid else ""
    return (f'<div class="tg-profile" style="font-size:12px" data-mid-ms="{mid}" data-target-ms="{profile.target_ms(n):.3f}" '
            f'data-order="{"checked" if order else "unchecked"}">{html.escape(profile_line(profile))}</div>')


def clock_html(clock: str, pair: Any) -> str:
    """The line of the profile `clock` names for `pair` as HTML (`profile_html`), or why it has none."""
    try:
        return profile_html(measure.resolve(clock, pair))
    except Exception as e:  # noqa: BLE001 - the note says why instead of breaking the view
        return html.escape(f"{clock}: {e}") + "<br>"


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
