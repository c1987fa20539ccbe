"""Tables of the views: recorded tables with headers in words (`words_table`), and the playground's table,
one row per replayed setting beside the recorded round and plain decoding, built (`recorded_row`,
`replayed_row`, `finish_frame`), shown (`styled_table`) and offered as CSV and JSON (`download_links`)."""

from __future__ import annotations

import base64
import html
import math
from typing import Any

import pandas as pd

from treegraft_lab.views.timing import median, repeat_speedups
from treegraft_lab.viz.caption import PRUNE_WORDS
from treegraft_lab.viz.style import styled

COLUMN_WORDS = {  # recorded column names -> headers in words (units in brackets)
    "round": "round", "step": "step", "schedule": "schedule (1 = mid step)", "accepted": "accepted draft tokens A",
    "A": "accepted draft tokens A", "mid_calls": "mid calls", "nodes": "nodes drafted", "kept": "nodes kept",
    "draft_ms": "draft (ms)", "verify_ms": "verify (ms)", "eta": "tokens/s (eta)", "call_mid": "mid drafter called",
    "pool_size": "candidate pool (nodes)", "conventional_pool": "newest nodes N_k", "frontier_size": "frontier (nodes)",
    "reselected_earlier": "frontier reselected shallower", "tree_size": "live nodes", "new_nodes": "new nodes",
}
GROUPED_CSS = [{"selector": "th.col_heading", "props": "white-space: normal"},  # headers wrap: the table fits 848 px
               {"selector": "th.col_heading.level0", "props": "text-align: center; border-bottom: 1px solid #bbb"},
               {"selector": "td", "props": "white-space: normal"},  # names and ranges wrap too
               {"selector": "td.col0", "props": "white-space: normal; min-width: 7em"},
               {"selector": "caption", "props": "caption-side: top; text-align: left; font-size: 12px; color: #444"},
               {"selector": "th, td", "props": "padding: 2px 4px"}]  # 13 columns: narrower gaps keep the table in 848 px
HEADERS = {"schedule": "schedule (1 = mid)", "A": "accepted draft tokens A", "nodes": "nodes drafted",
           "kept": "nodes kept", "eta (tokens/s)": "tokens/s (eta), range",
           "speedup": "speedup over plain decoding (min–max of per-repeat speedups)",
           "modelled round (ms)": "round (ms)", "modelled tokens/s": "tokens/s",
           "same decisions as": "same decisions as (timed together)"}  # the playground table's headers in words


def first_row(df: pd.DataFrame, **key: Any) -> pd.Series | None:
    """The first row of `df` whose columns equal `key` (column -> value), or None."""
    m = pd.Series(True, index=df.index)
    for k, v in key.items():
        m &= df[k] == v
    return df[m].iloc[0] if m.any() else None


def in_words(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with its recorded column names replaced by headers in words (see the glossary in 01)."""
    return df.rename(columns=COLUMN_WORDS)


def words_table(df: pd.DataFrame, **kw: Any) -> Any:
    """`df` for display (`viz.style.styled`, `kw` in recorded or worded column names), headers in words
    that wrap so the table fits the output area, no index."""
    kw = {k: [COLUMN_WORDS.get(c, c) for c in v] for k, v in kw.items()}
    return styled(in_words(df), **kw).hide(axis="index").set_table_styles(GROUPED_CSS[:1], overwrite=False)


def prune_budget(prune: str | None, budget: Any) -> str:
    """A pruning rule and its budget in a table cell: "top-k (63)", "value (63)"."""
    return f"{PRUNE_WORDS.get(prune or 'topk', str(prune)).removesuffix(' pruning')} ({budget})"


def recorded_row(rec: pd.Series, prof: Any) -> dict[str, Any]:
    """The recorded round's row; its modelled cell is empty unless it was priced by `prof`."""
    same = prof is not None and rec.get("modelled_on") == prof.name
    return {"setting": "recorded run", "schedule": rec["schedule"], "A": rec["accepted"],
            "mid calls": rec["mid_calls"], "nodes": rec["nodes"], "kept": rec["kept"],
            "draft (ms)": rec["draft_ms"], "verify (ms)": rec["verify_ms"], "eta": [rec["eta"]],
            "modelled round (ms)": rec["modelled_ms"] if same else math.nan, "speedup": [math.nan]}


def replayed_row(name: str, results: dict, times: dict, twins: dict[str, str], plain_s: list[float]) -> dict[str, Any]:
    """A replayed setting's row: the draft and verify times measured (medians over the repeats of every
    setting that decided as it did, timed together), eta and the speedup per repeat, the modelled round."""
    info, _run = results[name]
    group = [k for k in results if twins.get(k, k) == twins.get(name, name)]  # timed together
    t = [x for k in group for x in times.get(k, [(info.draft_s, info.verify_s, info.round_s)])]
    per_repeat = [[r for k in group for *_, r in times.get(k, [])[i:i + 1]] for i in range(len(plain_s))]
    return {"setting": name, "schedule": info.schedule, "A": info.accepted, "mid calls": info.mid_calls,
            "nodes": info.nodes, "kept": info.kept, "draft (ms)": 1000 * median([d for d, _, _ in t]),
            "verify (ms)": 1000 * median([v for _, v, _ in t]),
            "eta": [(info.accepted + 1) / r for *_, r in t], "modelled round (ms)": info.modelled_ms,
            "speedup": repeat_speedups(info.accepted + 1, per_repeat, plain_s) or [math.nan],
            "same decisions as": twins.get(name, "")}


def finish_frame(df: pd.DataFrame, recorded: str, replayed: str) -> pd.DataFrame:
    """The rows' eta and speedup as median, low and high columns, the modelled tokens/s, and each row's
    pruning rule and budget (`recorded` for the recorded run's, `replayed` for the replays')."""
    if not len(df):
        return df
    etas, ups = df.pop("eta"), df.pop("speedup")
    df.insert(8, "eta (tokens/s)", [median(e) for e in etas])
    df.insert(9, "eta low", [min(e) for e in etas])
    df.insert(10, "eta high", [max(e) for e in etas])
    df.insert(11, "speedup", [median(u) for u in ups])
    df.insert(12, "speedup low", [min(u) for u in ups])
    df.insert(13, "speedup high", [max(u) for u in ups])
    ms = df["modelled round (ms)"].astype(float)
    df["modelled tokens/s"] = (1000 * (df["A"] + 1) / ms).where(ms > 0)
    df["same decisions as"] = df.get("same decisions as", pd.Series([""] * len(df))).fillna("")
    df.insert(2, "pruning (budget)", [recorded if s == "recorded run" else "—" if s == "plain decoding" else replayed
                                      for s in df["setting"]])
    return df


def merge_twins(df: pd.DataFrame) -> pd.DataFrame:
    """One row for settings that decided alike: a setting that decided exactly as another is named in
    that one's row, not repeated."""
    if "same decisions as" not in df:
        return df
    attrs, twins = dict(df.attrs), df["same decisions as"].fillna("")
    alias = {t: [s for s, u in zip(df["setting"], twins) if u == t] for t in set(twins) if t}
    df = df[twins == ""].copy()
    df["setting"] = [f"{s} (= {', '.join(alias[s])}: same decisions, timed together)" if s in alias else s
                     for s in df["setting"]]
    df["same decisions as"] = ""
    df.attrs = attrs
    return df


def styled_table(df: pd.DataFrame, now: dict[str, Any], on: str) -> Any:
    """The playground's table (`PlaygroundSession.table_frame`) for display, headers in words: the measured
    columns under "measured here (median of n replays)", eta with its range, the modelled ones under
    "modelled on the profile"; `now`: the replay's settings, `on`: the profile in words."""
    df = merge_twins(df)
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
    top = {c: measured for c in ("draft (ms)", "verify (ms)", "eta (tokens/s)", "speedup")}
    top |= {c: "modelled on the profile" for c in ("modelled round (ms)", "modelled tokens/s")}
    wide.columns = pd.MultiIndex.from_tuples([(top.get(c, ""), HEADERS.get(c, c)) for c in wide.columns])
    ms = [c for c in wide.columns if c[1] in ("draft (ms)", "verify (ms)", "round (ms)")]
    caption = (f"replays: {PRUNE_WORDS[now['prune']]}, budget {now['budget']}, modelled on {on}; measured on this "
               f"machine, {n} replay{'s' if n != 1 else ''} per setting. Recorded run: {df.attrs.get('recorded', '')}")
    return (styled(wide, ms=ms, decimals=2).hide(axis="index").set_caption(caption)
            .set_table_styles(GROUPED_CSS, overwrite=False))


def warning_html(df: pd.DataFrame) -> str:
    """The table's `attrs["warning"]` as a line above it ("" without one)."""
    w = df.attrs.get("warning", "")
    style = "color: #8a4b00; background: #fff3cd; padding: 2px 8px; border-radius: 4px"
    return f'<div class="tg-plain-warning" style="{style}">⚠ {html.escape(w)}</div>' if w else ""


def download_links(name: str, csv: str, js: str) -> str:
    """Download links of a table as `name`.csv and `name`.json (the texts `csv` and `js`), as HTML."""
    links = [f'<a download="{name}.{ext}" href="data:{mime};base64,{base64.b64encode(text.encode()).decode()}" '
             f'style="margin-right:1em">⤓ {ext.upper()}</a>' for ext, mime, text in
             (("csv", "text/csv", csv), ("json", "application/json", js))]
    return f'<span style="font-size:12px">export this table: {"".join(links)}</span>'
