"""What notebook 07 prints around the paper's tables: where each number came from, what ran, what did not."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from treegraft_lab.bench import ABLATION_ROWS

NOT_RUN = "not run"


def bench_card(folder: Path) -> str:
    """One line naming a recorded benchmark: its folder, machine, dtype, date, prompts, repeats and
    what its spread is (a single repeat has none)."""
    meta = json.loads((Path(folder) / "results.json").read_text())["meta"]
    hw, st = meta.get("hardware", {}), meta.get("settings", {})
    repeats = int(st.get("repeats", 1) or 1)
    spread = ("one repeat: no spread; wall-clock runs on these machines move 15-25% between runs" if repeats < 2 else
              f"{repeats} repeats, spread = min-max of per-repeat ratios")
    clocks = ", ".join(["wall"] * (not st.get("model_only")) + list(st.get("model_on") or [])) or "wall"
    return (f"{Path(folder).name}: {hw.get('cpu', '?')} ({hw.get('cores', '?')} cores, {hw.get('torch_threads', '?')} "
            f"threads), {hw.get('device', '?')} {hw.get('dtype', '?')}, finished {meta.get('finished', '?')}, "
            f"{st.get('prompts', '?')} prompts x {st.get('max_new_tokens', '?')} tokens, clocks: {clocks}, "
            f"growth {st.get('growth', 'full')}; {spread}")


def method_labels(overall: pd.DataFrame, labels: dict[str, str]) -> dict[str, str]:
    """`labels` ({method: row label}) with what ran named: a schedule that made no mid call decoded
    the all-small trees, so its row says "= all-small, 0 mid calls"."""
    out = dict(labels)
    for method, label in labels.items():
        if method in overall.index and method not in ("small", "ar") and "mid_calls_per_round" in overall:
            calls = overall.loc[method, "mid_calls_per_round"]
            if calls == 0:
                out[method] = f"{label} (= all-small, 0 mid calls)"
    return out


def mark_not_run(ax, long: pd.DataFrame, x: str, hue: str, value: str) -> int:
    """Write "not run" where a seaborn bar chart of `long` (x, hue, value columns) has no bar (NaN),
    at that bar's slot; returns how many were marked."""
    xs = list(dict.fromkeys(long[x]))
    hues = list(dict.fromkeys(long[hue]))
    width = 0.8 / max(1, len(hues))
    marked = 0
    for _, r in long.iterrows():
        v = r[value]
        if v is None or (isinstance(v, float) and math.isnan(v)):
            pos = xs.index(r[x]) - 0.4 + width * (hues.index(r[hue]) + 0.5)
            ax.text(pos, 0.02, NOT_RUN, rotation=90, ha="center", va="bottom", fontsize=8, color="#555",
                    transform=ax.get_xaxis_transform())
            marked += 1
    return marked


def fmt_speedup(v: float) -> str:
    """"1.23x", or "not run" for a method without a number."""
    return NOT_RUN if v is None or v != v else f"{v:.2f}x"


def adaptive_verdict(overall: pd.DataFrame, clock: str) -> str:
    """One sentence from a benchmark's overall rows on `clock` (index: method; columns speedup,
    prompts, mid_calls_per_round): adaptive against all-small and all-mid, and the oracle beside it.
    A method that did not run is named as such, never printed as a number; an adaptive run that made
    no mid call says so next to its own number, where it cannot be read as another method's."""
    def speed(m: str) -> float:
        return float(overall.loc[m, "speedup"]) if m in overall.index else math.nan

    a, o = speed("adaptive"), speed("oracle")
    if a != a:
        return f"Adaptive did not run modelled on {clock} (see skipped above), so there is nothing to compare."
    ran = {name: speed(m) for name, m in (("all-small", "small"), ("all-mid", "mid")) if speed(m) == speed(m)}
    wins = {name: a > v for name, v in ran.items()}
    shown = " and ".join(f"{k} ({v:.2f}x)" for k, v in ran.items())
    if not wins:
        rel = "has nothing to be compared with"
    elif all(wins.values()):
        rel = f"beats {shown}"
    elif not any(wins.values()):
        rel = f"does not beat {shown}"
    else:
        rel = f"beats {next(k for k, w in wins.items() if w)} but not {next(k for k, w in wins.items() if not w)} ({shown})"
    if "mid_calls_per_round" in overall and overall.loc["adaptive", "mid_calls_per_round"] == 0:
        rel = f"made no mid call, so it decoded the all-small trees, and {rel}"
    rel += "".join(f"; {k} was not run (not among this benchmark's methods)" for k in ("all-small", "all-mid")
                   if k not in ran)
    tail = "; this benchmark has no oracle run"
    if o == o:
        tail = f"; the oracle ({o:.2f}x) is {abs(o / a - 1):.0%} {'above' if o >= a else 'below'} adaptive"
        if o < a:  # possible: the oracle maximises each round against the run's rate so far
            tail += " (the oracle picks each round's best schedule against the run's rate so far, not the whole run's best)"
    n = int(overall["prompts"].max())
    return f"Modelled on {clock} ({n} prompt{'s' if n != 1 else ''}), adaptive ({a:.2f}x) {rel}{tail}."


GROWTH_COLUMNS = {"reselected_calls": "reselected, all mid calls", "reselected_after_step1": "reselected, calls after step 1",
                  "A": "A (release count)", "pool_after_step1": "pool, calls after step 1",
                  "mid_calls_by_step": "mid calls at steps 1/2/3/4/5", "pool_ratio": "pool ratio", "rounds": "rounds",
                  "identical_to_greedy": "= greedy"}


def growth_cell(row: dict, key: str) -> str:
    """One cell of the growth comparison (data/growth/growth-compare.json): shares in %, the pool
    ratio as x, a 95% interval over prompts in brackets where recorded, "—" where not."""
    v, lo, hi = row.get(key), row.get(f"{key}_low"), row.get(f"{key}_high")
    if v is None or (isinstance(v, float) and v != v):
        return "—"
    if isinstance(v, str):
        return v
    f = "{:.1%}" if key.startswith("reselected") else "{:.2f}x" if key == "pool_ratio" else "{:,.0f}" if key == "rounds" else "{:.2f}"
    return f.format(v) + (f" [{f.format(lo)}–{f.format(hi)}]" if lo is not None and lo == lo else "")


def growth_frame(rows: list[dict]) -> pd.DataFrame:
    """The growth comparison's rows as a table of text cells, one row per rule."""
    return pd.DataFrame([{label: growth_cell(r, k) for k, label in GROWTH_COLUMNS.items()} for r in rows],
                        index=pd.Index([r["rule"] for r in rows], name="rule"))


def growth_markdown(rows: list[dict]) -> str:
    """`growth_frame` as a GitHub table (what README.md and docs/results.md hold, regenerated by a test)."""
    df = growth_frame(rows)
    lines = ["| rule | " + " | ".join(df.columns) + " |", "|" + "---|" * (len(df.columns) + 1)]
    lines += ["| " + " | ".join([rule, *cells]) + " |" for rule, cells in zip(df.index, df.values.tolist())]
    return "\n".join(lines)


# the paper's ablation rows, labelled as the benchmark's ablation table labels them, after the endpoints
ABLATION_LABELS = {"ar": "plain decoding", "small": "all-small", "mid": "all-mid",
                   **{m: ABLATION_ROWS[m] for m in ("csd", "no-eg", "no-nd", "10101", "adaptive")}}


def ablation_markdown(folder: Path, clock: str = "a100-paper") -> str:
    """A recorded benchmark's overall rows on `clock` as a GitHub table beside the paper's ablation:
    method, speedup over plain decoding, A (new tokens / target forwards, `bench_acceptance`), mid
    calls per round, prompts; "not run" where the benchmark lacks a method."""
    from treegraft_lab import paper
    from treegraft_lab.viz.stats import bench_acceptance

    folder = Path(folder)
    s = pd.read_parquet(folder / "summary.parquet")
    ov = s[(s["clock"] == clock) & (s["category"] == "overall")].set_index("method")
    acc = bench_acceptance(pd.read_parquet(folder / "records.parquet"))
    a = acc[(acc["clock"] == clock) & (acc["category"] == "overall")].set_index("method")["A"]
    theirs = {m: (sp, pa) for m, _, sp, pa in paper.ABLATION}
    lines = ["| method | speedup | A | mid calls / round | prompts | paper speedup | paper A |", "|---|---|---|---|---|---|---|"]
    for m, label in ABLATION_LABELS.items():
        sp, pa = theirs.get(m, (math.nan, math.nan))
        paper_cells = [fmt_speedup(sp) if sp == sp else "—", f"{pa:.2f}" if pa == pa else "—"]
        if m not in ov.index:
            lines.append(f"| {label} | {NOT_RUN} | | | | {' | '.join(paper_cells)} |")
            continue
        r = ov.loc[m]
        calls = r.get("mid_calls_per_round", math.nan)
        cells = [fmt_speedup(r["speedup"]), f"{a[m]:.2f}" if m in a.index else "—",
                 f"{calls:.2f}" if calls == calls else "—", f"{int(r['prompts'])}"]
        lines.append(f"| {label} | {' | '.join(cells)} | {' | '.join(paper_cells)} |")
    return "\n".join(lines)
