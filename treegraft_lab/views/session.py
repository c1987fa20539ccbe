"""The schedule playground, headless: the settings a replay runs with, the replays of one recorded
round start under each setting beside plain decoding, the table, its exports and its captions.

`PlaygroundSession(pair, run, round)` holds all of it as plain data and loads no ipywidgets: a test (or a
script) sets `update(schedule="11101", budget=8)`, calls `replay()` and reads `table_frame()`,
`export_csv(...)`. `views.playground.SchedulePlayground` is its view: the controls and the drawing.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from treegraft_lab import baselines, decoder, measure
from treegraft_lab.config import GROWTH_FIELDS, DecodeConfig
from treegraft_lab.costs import DeviceProfile, profile_name
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.presets import SHOWCASE_PROFILE
from treegraft_lab.schedule.discovery import (
    adaptive_status,
    rule_schedules,
    scheduler_choice,
    scheduler_name,
    scheduler_prune,
    trained_schedulers,
)
from treegraft_lab.views.table import (
    download_links,
    finish_frame,
    first_row,
    prune_budget,
    recorded_row,
    replayed_row,
    styled_table,
)
from treegraft_lab.views.timing import baseline_row, decision_key, plain_warning, twin_settings
from treegraft_lab.viz import called_rounds, showcase_round
from treegraft_lab.viz.caption import (
    PRUNE_WORDS,
    named,
    profile_words,
    prompt_words,
    settings_words,
)
from treegraft_lab.viz.runs import round_context

CLOCKS = (("this device (wall)", "wall"), ("paper A100 (modelled)", "a100-paper"),  # the profiles offered
          (f"A100, mid at 0.1 (modelled; {SHOWCASE_PROFILE})", SHOWCASE_PROFILE))  # where WHEN pays (presets.py)
TREE_FIELDS = ("depth", "width", "ngram_max", "ngram_min", "temperature", "children", "max_nodes", "small",
               *GROWTH_FIELDS)  # what the recorded run grew its trees with: every replay grows them so


class PlaygroundSession:
    """Replay one recorded round start with your own schedule, EG/ND switches, budget, pruning and
    device profile (`now`: the settings as they stand; `update` changes them).

    `replay` runs the round from the same committed context under the chosen settings and under
    all-small, all-mid, (when a scheduler is trained for the chosen profile and pruning) the adaptive
    scheduler and the fitted switching rules, each `repeats` times, beside plain decoding from the
    same context. Every decision that weighs time reads the chosen profile; the table (`table_frame`)
    holds A, the draft and verify time measured here (median of the repeats, eta with its range) and
    the round priced by the profile.
    """

    def __init__(self, pair: Any, run: Any, round: int | None = None, run_id: int = 0, clock: str | None = None,
                 prune: str | None = None, repeats: int = 3, warmup: bool = True) -> None:
        self.pair, self.run, self.run_id = pair, run, run_id
        self.warmup = warmup  # one untimed replay of every setting (and plain decoding) before the timed ones
        self.why, self.why_round = "", None  # why it opened on its round (`viz.showcase_round`)
        if round is None:
            round, self.why = showcase_round(run, run_id)
            self.why_round = round
        row = first_row(run.runs, run=run_id)
        self.cfg = json.loads(row["config"]) if row is not None else {}
        self.prompt_len = len(row["prompt_ids"])
        rec = first_row(run.rounds, run=run_id, round=round)
        depth = int(self.cfg.get("depth", 5))
        recorded = self.cfg.get("clock") if self.cfg.get("clock") in [v for _, v in CLOCKS] else "wall"
        clock = clock or recorded
        # set when the pruning rule was chosen for the adaptive scheduler
        prune, self.choice_note = (prune, "") if prune else scheduler_prune(pair, self.trees(), clock,
                                                                              self.cfg.get("prune", "topk"))
        budget = self.cfg.get("budget", 63)
        self.now: dict[str, Any] = {
            "round": int(round), "schedule": (str(rec["schedule"]) if rec is not None else "").ljust(depth, "0")[:depth],
            "eg": bool(self.cfg.get("expanded_graft", True)), "nd": bool(self.cfg.get("non_destructive", True)),
            "budget": budget if isinstance(budget, int) else 63, "prune": prune, "clock": clock, "repeats": int(repeats)}
        self.results: dict[str, tuple[Any, Any]] = {}  # setting -> (RoundInfo, its one-round Run)
        self.times: dict[str, list[tuple[float, float, float]]] = {}  # setting -> (draft s, verify s, round s) per repeat
        self.plain_s: list[float] = []  # plain decoding: seconds per token, per repeat
        self.twins: dict[str, str] = {}  # setting -> the setting it decided exactly as (timed together)
        self.replayed: dict[str, Any] | None = None  # the settings as they were at the last replay
        self.replayed_at: str | None = None  # when it ran (local time), for the exports
        self.modelled_on = ""  # the profile that priced the last replay, in words
        self.round_idx = -1
        self.update()

    def update(self, **settings: Any) -> None:
        """Change the settings (`now`'s keys: round, schedule, eg, nd, budget, prune, clock, repeats);
        another round start is another committed context."""
        unknown = set(settings) - set(self.now)
        if unknown:
            raise TreeGraftError(f"no playground setting {sorted(unknown)}: the settings are {sorted(self.now)}")
        self.now.update(settings)
        if int(self.now["round"]) != self.round_idx:
            self.round_idx = int(self.now["round"])
            self.context = round_context(self.run, self.round_idx, self.run_id)

    def changed(self) -> dict[str, tuple[Any, Any]]:
        """Setting -> (replayed, now) for every setting changed since the last replay ({} before one)."""
        if self.replayed is None:
            return {}
        return {k: (v, self.now[k]) for k, v in self.replayed.items() if self.now[k] != v}

    def trees(self, **over: Any) -> DecodeConfig:
        """The recorded run's trees (growth rule, small drafter) as a DecodeConfig, with `over`."""
        return DecodeConfig(**{k: self.cfg[k] for k in TREE_FIELDS if k in self.cfg}, **over)

    def base_config(self) -> DecodeConfig:
        """The replays' common DecodeConfig: the recorded run's trees, the chosen budget, pruning and profile."""
        return self.trees(budget=int(self.now["budget"]), prune=self.now["prune"], clock=self.now["clock"])

    def adaptive_reason(self, config: DecodeConfig) -> str | None:
        """None when the adaptive scheduler can run under `config` (its clock resolved to a profile);
        otherwise why not."""
        try:
            profile = measure.resolve(config.clock, self.pair) if self.pair is not None else None
        except Exception as e:  # noqa: BLE001 - no profile for this clock: adaptive is off, and why
            return f"{type(e).__name__}: {e}"
        return adaptive_status(self.pair, config, profile)

    def settings(self) -> dict[str, DecodeConfig]:
        """Name -> DecodeConfig of every setting a replay runs (adaptive only when a scheduler is
        trained for the chosen profile and pruning; the switching rules fitted for it)."""
        base, now = self.base_config(), self.now
        name = f"yours ({now['schedule']}{'' if now['eg'] else ', w/o EG'}{'' if now['nd'] else ', w/o ND'})"
        out = {name: replace(base, schedule=now["schedule"], expanded_graft=now["eg"], non_destructive=now["nd"]),
               "all-small": replace(base, schedule="small"), "all-mid": replace(base, schedule="mid")}
        if self.adaptive_reason(base) is None:
            out["adaptive"] = replace(base, schedule="adaptive")
        try:
            prof: DeviceProfile | None = measure.read_only(base.clock, self.pair)
        except TreeGraftError:  # no profile for this clock yet: no rule can be looked up
            prof = None
        for rule in rule_schedules(self.pair, base, prof):
            out[rule] = replace(base, schedule=rule)
        return out

    def profile(self) -> DeviceProfile:
        """The profile the last replay decided on (before one: the chosen one)."""
        return measure.resolve((self.replayed or self.now)["clock"], self.pair)

    def replay(self, progress: Callable[[str], None] | None = None) -> pd.DataFrame:
        """Replay the round under every setting `repeats` times, and time plain decoding from the same
        context as often, all interleaved (each repeat runs every setting and plain decoding, in an order
        rotated from repeat to repeat), after one untimed warm-up pass (`warmup`); returns the table.
        `progress(words)` hears what runs next."""
        self.results, self.times, self.plain_s = {}, {}, []
        snapshot, n = dict(self.now), int(self.now["repeats"])
        profile = measure.resolve(self.now["clock"], self.pair)  # once per replay, handed to every decoder
        settings = self.settings()
        jobs = [*settings, None]  # None: plain decoding
        for i in range(-1 if self.warmup else 0, n):
            for name in jobs[i % len(jobs):] + jobs[:i % len(jobs)]:
                if progress:
                    progress(f"replaying: {name or 'plain decoding'} ({'warm-up (untimed)' if i < 0 else f'{i + 1}/{n}'}) ...")
                if name is None:
                    t = baselines.plain_token_s(self.pair, self.context)
                    self.plain_s += [t] if i >= 0 else []
                    continue
                info, rrun = decoder.replay_round(self.pair, self.context, settings[name], prompt_len=self.prompt_len,
                                                  profile=profile)
                if i >= 0:
                    self.results.setdefault(name, (info, rrun))  # the tree: every repeat draws the same one
                    self.times.setdefault(name, []).append((info.draft_s, info.verify_s, info.round_s))
        self.replayed = snapshot
        self.replayed_at = datetime.now().isoformat(sep=" ", timespec="seconds")
        self.twins = twin_settings({k: decision_key(*v) for k, v in self.results.items()})
        return self.table_frame()

    def table_frame(self) -> pd.DataFrame:
        """One row per replayed setting, plain decoding from the same context, and the recorded
        round for reference: A, sizes, the draft and verify time measured here (medians over the
        repeats), eta's median, low and high over them, and the round priced by the chosen profile
        (`attrs["modelled_on"]` names it in words, `attrs["repeats"]` counts the replays). The
        recorded round's modelled cells are empty unless it was priced by the same profile."""
        prof = self.profile() if self.results else None
        self.modelled_on = profile_name(prof) if prof is not None else ""
        rec = first_row(self.run.rounds, run=self.run_id, round=self.round_idx)
        rows = [recorded_row(rec, prof)] if rec is not None else []
        if self.plain_s and prof is not None:
            rows.append({**baseline_row("plain decoding", self.plain_s, prof.target_ms(1)), "speedup": [1.0]})
        rows += [replayed_row(name, self.results, self.times, self.twins, self.plain_s) for name in self.results]
        now = self.replayed or self.now
        df = finish_frame(pd.DataFrame(rows), prune_budget(self.cfg.get("prune"), self.cfg.get("budget")),
                          prune_budget(now["prune"], now["budget"]))
        here = prof if self.replayed and self.replayed["clock"] == "wall" else None  # this device's prediction only
        on = profile_words(str(rec["modelled_on"])) if rec is not None and "modelled_on" in rec else "its profile"
        df.attrs.update(warning=plain_warning(self.plain_s, here), modelled_on=self.modelled_on,
                        recorded=f"{settings_words(self.cfg)}, priced on {on}", repeats=int(now["repeats"]))
        return df

    def styled_table(self, df: pd.DataFrame | None = None) -> Any:
        """`table_frame()` for display, headers in words (`views.table.styled_table`)."""
        df = self.table_frame() if df is None else df
        return styled_table(df, self.replayed or self.now, df.attrs.get("modelled_on") or self.modelled_on or "the profile")

    def export_header(self, df: pd.DataFrame) -> list[str]:
        """What an exported table was made from, one "key: value" line each: pair, prompt, the recorded run's
        settings, the replay's settings, the profile every decision and modelled column read, and the date."""
        now = self.replayed or self.now
        row = first_row(self.run.runs, run=self.run_id)
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

    def export_csv(self, df: pd.DataFrame) -> str:
        """The table as CSV under "# key: value" lines naming what made it (`export_header`); read it back
        with `pd.read_csv(path, comment="#")`."""
        return "".join(f"# {line}\n" for line in self.export_header(df)) + df.to_csv(index=False)

    def export_json(self, df: pd.DataFrame) -> str:
        """The table as JSON: its rows, and the run, round, settings, profile, repeats, date and the CSV's
        header lines (`export_header`)."""
        meta = {"run": self.run_id, "round": self.round_idx, "settings": self.replayed,
                "modelled_on": df.attrs.get("modelled_on"), "repeats": df.attrs.get("repeats"),
                "replayed_at": self.replayed_at, "about": self.export_header(df)}
        return json.dumps({**meta, "rows": json.loads(df.to_json(orient="records"))}, indent=1)

    def export_links(self, df: pd.DataFrame | None = None) -> str:
        """Download links (CSV, JSON) of the table, each naming pair, prompt, settings, profile and date."""
        df = self.table_frame() if df is None else df
        return download_links(f"playground_run{self.run_id}_round{self.round_idx}", self.export_csv(df), self.export_json(df))

    def save(self, path: str) -> str:
        """Write the table to `path` (.csv or .json) as the export links do; returns the path."""
        df, p = self.table_frame(), Path(path)
        p.write_text(self.export_json(df) if p.suffix == ".json" else self.export_csv(df))
        return str(p)

    def replay_caption(self, setting: str | None = None) -> str:
        """The line naming a replay (`viz.caption.named`): the recorded run's pair and prompt, the replayed
        round, `setting`, pruning, budget and the profile decided on."""
        now = self.replayed or self.now
        row = first_row(self.run.runs, run=self.run_id)
        prompt = prompt_words(row["prompt_text"]) if row is not None and "prompt_text" in row else None
        pair = str(row.get("pair", "") or "") if row is not None else ""
        return named(pair or getattr(self.pair, "name", ""), profile_name(self.profile()), prompt,
                     f"replay of round {self.round_idx}" + (f": {setting}" if setting else "")
                     + f", {PRUNE_WORDS[now['prune']]}, budget {now['budget']}")

    def adaptive_words(self) -> str:
        """Whether the adaptive scheduler is offered for the chosen profile and pruning, which one, and
        why not where it is not (with the schedulers trained for the pair), as HTML; "" without a pair."""
        if self.pair is None:
            return ""
        cfg = self.base_config()
        status = self.adaptive_reason(cfg)
        if status is None:
            text = f"adaptive: offered (scheduler {scheduler_name(self.pair, cfg, measure.resolve(cfg.clock, self.pair))})"
            if self.choice_note and self.now["prune"] in self.choice_note:
                text += f"<br>{html.escape(self.choice_note)}"
            return text
        try:
            choice = scheduler_choice(self.pair, self.trees(), self.now["clock"], self.now["prune"],
                                      self.cfg.get("prune", "topk"))
            why = status if choice.offered else choice.note.split(" (looked in")[0].removeprefix("adaptive off: ")
        except Exception:  # noqa: BLE001 - an unknown device or profile: adaptive_status's reason
            why = status
        return (f"adaptive: <b>not offered</b> ({html.escape(why)}; trained: "
                f"{', '.join(trained_schedulers(self.pair)) or 'none'})")


def paying_round(pair: Any, run: Any, config: Any, profile: Any, tries: int = 12) -> tuple[int, int, str]:
    """The (prompt, round) a view of WHEN opens on, and why in words. Candidates, over every prompt of the
    run: the rounds `viz.called_rounds` names (a mid call whose accepted path goes through a node only the
    mid drafter drafted, mixed schedules first), the best kind of every prompt before the next kind. Of
    the first `tries`, the one where `config` (the run's settings: its schedule, trees and pruning),
    replayed from that round's start on `profile`, emits the most tokens per modelled second over the
    better of all-small and all-mid replayed from the same start, where that is above 1; else the first
    candidate; else `viz.showcase_round`'s of the first prompt. Returns (run id, round, why)."""
    found = sorted(((kind, int(run_id), rd, why) for run_id in sorted(run.runs["run"].unique())
                    for rd, kind, why in called_rounds(run, int(run_id))), key=lambda c: c[0])  # stable
    if not found:
        return (0, *showcase_round(run, 0))

    def eta(run_id: int, rd: int, schedule: Any) -> float:
        prompt_len = len(run.runs[run.runs["run"] == run_id].iloc[0]["prompt_ids"])
        info, _ = decoder.replay_round(pair, round_context(run, rd, run_id), replace(config, schedule=schedule),
                                       prompt_len, profile)
        return (info.accepted + 1) / info.modelled_ms

    gains = [(eta(run_id, rd, config.schedule) / max(eta(run_id, rd, "small"), eta(run_id, rd, "mid")), i)
             for i, (_, run_id, rd, _) in enumerate(found[:tries])]
    gain, i = max(gains, key=lambda g: (g[0], -g[1]))  # the largest gain; the first of equals
    _, run_id, rd, why = found[i] if gain > 1 else found[0]
    beats = (f"; replayed from its start, it beats the better of all-small and all-mid by {gain:.2f}x on {profile.name}"
             if gain > 1 else "")
    return run_id, rd, f"prompt {run_id}, {why}{beats}"
