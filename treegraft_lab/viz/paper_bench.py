"""Notebook 07's logic: which recorded benchmark it reads (or the small one it runs), and the paper's
table layouts filled with ours. The notebook only calls these and shows what they return."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from treegraft_lab import paper
from treegraft_lab.paths import DATA_DIR
from treegraft_lab.viz import paper_tables as pt

MODELLED = "a100-paper"  # the paper's A100 step costs as a device profile (data/profiles/README.md)
TREE_METHODS = ["small", "mid", "10101", "adaptive", "csd", "no-eg", "no-nd"]
WRAP = [{"selector": "th.col_heading", "props": "white-space: normal; max-width: 7.5em; vertical-align: bottom"}]
MEASURED_COLUMNS = {"prompts": "prompts", "tokens_per_s": "tokens/s", "speedup": "speedup", "A": "A (tokens / target forward)",
                    "accepted_per_round": "ours: accepted draft tokens / round", "mid_calls_per_round": "mid calls",
                    "ms_per_round": "round (ms)", "match_rate": "same as ar"}


def paper_main() -> pd.DataFrame:
    """The paper's main table (speedup over autoregressive decoding), one row per pair."""
    return pd.DataFrame(paper.MAIN, columns=paper.MAIN_COLUMNS).set_index("pair")


def paper_ablation() -> pd.DataFrame:
    """The paper's ablation: label, speedup and A per method."""
    return pd.DataFrame(paper.ABLATION, columns=["method", "label", "paper speedup", "paper A"]).set_index("method")


def recorded(bench_dir: Path = DATA_DIR / "bench") -> list[Path]:
    """The recorded benchmark folders, oldest first by their recorded finish time (file times are
    arbitrary on a fresh clone)."""
    found = [p for p in Path(bench_dir).glob("*/results.json") if (p.parent / "summary.parquet").exists()]
    return [p.parent for p in sorted(found, key=lambda p: (json.loads(p.read_text()).get("meta", {}).get("finished", ""),
                                                          p.parent.name))]


def read_summary(folder: Path) -> pd.DataFrame:
    """A benchmark's summary rows; one recorded before modelled clocks holds wall-clock rows only."""
    s = pd.read_parquet(Path(folder) / "summary.parquet")
    return s if "clock" in s.columns else s.assign(clock="wall")


def overall(summary: pd.DataFrame, clock: str) -> pd.DataFrame:
    """The overall rows of a summary on `clock`, indexed by method."""
    return summary[(summary["clock"] == clock) & (summary["category"] == "overall")].set_index("method")


def newest(folders: list[Path], clock: str) -> Path | None:
    """The newest of `folders` holding all-small and adaptive rows on `clock` ("wall": measured), or None."""
    for folder in reversed(folders):
        s = read_summary(folder)
        if {"small", "adaptive"} <= set(s.loc[s["clock"] == clock, "method"]):
            return folder
    return None


def have(folder: Path) -> bool:
    """Whether a benchmark this notebook ran before is there to read (RERECORD=1 runs it again)."""
    return (Path(folder) / "summary.parquet").exists() and os.environ.get("RERECORD", "") in ("", "0")


def run_here(folder: Path, methods: list[str], prompts: list, max_new_tokens: int, sizes, model_only: bool = False) -> None:
    """A benchmark run here: wall clock with value pruning (what this CPU's scheduler is trained for),
    and every tree method again modelled on MODELLED with top-k pruning (what its scheduler is trained
    for); with `model_only` the tree methods run on MODELLED only."""
    from treegraft_lab import bench
    from treegraft_lab import workbench as wb

    result = bench.run_bench(wb.demo_pair(), prompts, methods, max_new_tokens=max_new_tokens, budget=sizes.budget,
                             warmup_tokens=1 if sizes.smoke else 16, progress=False, prune="value",
                             repeats=1 if sizes.smoke else 3, model_on=[MODELLED], prune_modelled="topk", model_only=model_only)
    bench.save(result, folder)


def measured_bench(sizes) -> Path:
    """The newest recorded benchmark of tree methods on the wall clock, or a small one run here."""
    from treegraft_lab import workbench as wb

    folder = newest(recorded(), "wall")
    if folder is None:
        folder = wb.runs_dir() / ("bench-smoke" if sizes.smoke else "bench")
        if not have(folder):
            methods = TREE_METHODS + ([] if sizes.smoke else ["hf-pld", "hf-assisted"])
            run_here(folder, methods, wb.suite_prompts(limit=1 if sizes.smoke else None),
                     6 if sizes.smoke else sizes.max_new_tokens)
    return folder


def modelled_bench(sizes, measured: Path) -> tuple[Path, bool]:
    """The newest recorded benchmark with MODELLED rows (the measured one if it has them), or the tree
    methods and the oracle run here modelled on it; and whether it was run here."""
    from treegraft_lab import workbench as wb

    folder = newest(recorded(), MODELLED) or (measured if MODELLED in set(read_summary(measured)["clock"]) else None)
    if folder is None:
        folder = wb.runs_dir() / (f"bench-{MODELLED}" + ("-smoke" if sizes.smoke else ""))
        if not have(folder):
            print(f"no recorded benchmark holds {MODELLED} rows: running the tree methods and the oracle modelled on it here")
            run_here(folder, [*TREE_METHODS, "oracle"], wb.suite_prompts(limit=1 if sizes.smoke else None),
                     6 if sizes.smoke else sizes.max_new_tokens, model_only=True)
    return folder, not Path(folder).is_relative_to(DATA_DIR)


def meta(folder: Path) -> dict:
    """A benchmark's recorded meta (hardware, settings, skipped, profiles)."""
    return json.loads((Path(folder) / "results.json").read_text())["meta"]


def acceptance(folder: Path, clock: str) -> pd.Series:
    """Per method, pooled over a benchmark's prompts: A = new tokens / target forwards (the paper's definition)."""
    from treegraft_lab.viz.stats import bench_acceptance

    a = bench_acceptance(pd.read_parquet(Path(folder) / "records.parquet"))
    return a[(a["clock"] == clock) & (a["category"] == "overall")].set_index("method")["A"]


def speedups(rows: pd.DataFrame, methods: list[str]) -> list[float]:
    """The speedup of each of `methods` in `rows` (NaN for one that did not run)."""
    return [rows.loc[m, "speedup"] if m in rows.index else float("nan") for m in methods]


def cost_note(folder: Path, rows: pd.DataFrame) -> str:
    """What adaptive's decisions read in a measured benchmark: its calls and the profile's origin."""
    m = meta(folder)
    hw, settings = m.get("hardware", {}), m.get("settings", {})
    calls = rows.loc["adaptive", "mid_calls_per_round"] if "adaptive" in rows.index else float("nan")
    head = f"adaptive made {calls:.3f} mid calls per round here (prune={settings.get('prune')}); "
    if "model_on" in settings:  # recorded since decisions read a device profile
        return head + (f"its decisions read the device profile measured on the machine that ran this benchmark "
                       f"({hw.get('cpu')}, {hw.get('device')}, {hw.get('dtype')}): T_tgt and T_mid are constants of "
                       "that profile, not live timings")
    return head + ("this benchmark was recorded before decisions read a device profile, so its scheduler read the costs "
                   f"of that time; `treegraft-lab bench --model-on {MODELLED}` records one on the current cost model")


def measured_view(folder: Path, rows: pd.DataFrame) -> pd.DataFrame:
    """The measured overall rows with A, named for reading."""
    return rows.assign(A=acceptance(folder, "wall"))[list(MEASURED_COLUMNS)].rename(columns=MEASURED_COLUMNS)


def main_layout(rows: pd.DataFrame, label: str, oracle: bool = False) -> pd.DataFrame:
    """The paper's main table with our row `label` (from overall `rows`), plain decoding as the first
    column, and our oracle beside it where asked and run (the paper reports none)."""
    main = paper_main()
    main.loc[label] = [*speedups(rows, ["small", "mid", "adaptive"]), int(rows["prompts"].max())]
    main.insert(0, "Plain decoding", 1.0)  # the baseline every speedup is read against
    if oracle and "oracle" in rows.index:
        main["Oracle"] = float("nan")
        main.loc[label, "Oracle"] = rows.loc["oracle", "speedup"]
    return main


def ablation_layout(folder: Path, rows: pd.DataFrame, clock: str, ours: str = "ours speedup") -> pd.DataFrame:
    """The paper's ablation beside ours on `clock` (speedup, A, accepted draft tokens a round), one row
    per method label ("= all-small, 0 mid calls" where so), with n on both sides."""
    rows = rows.assign(A=acceptance(folder, clock))
    abl = paper_ablation().assign(**{"paper n": paper.ABLATION_N}).join(rows[["speedup", "A", "accepted_per_round"]].rename(
        columns={"speedup": ours, "A": "ours A", "accepted_per_round": "ours: accepted draft tokens / round"}), how="left")
    abl["label"] = abl.index.map(pt.method_labels(rows, abl["label"].to_dict()))
    return abl.set_index("label").assign(**{"ours n": int(rows["prompts"].max())})


def ran(table: pd.DataFrame, columns: list[str]) -> pd.Series:
    """Per row of a layout (`ablation_layout`, `release_ablation`): whether any of `columns` holds a number."""
    return table[columns].notna().any(axis=1)


def methods_of(folder: Path) -> str:
    """The methods a benchmark ran, as its settings record them (else its summary's), in one line."""
    methods = meta(folder).get("settings", {}).get("methods") or list(dict.fromkeys(read_summary(folder)["method"]))
    return ", ".join(methods)


RELEASE_TABLE = f"the ablation on the release's trees, modelled on {MODELLED}, runs them (\"Table 2 on the release's trees\" below)"


def not_run_note(table: pd.DataFrame, column: str, folder: Path, shown: str = "left out of the table",
                 where: str | None = RELEASE_TABLE) -> str:
    """Why rows of a layout have no number in `column`: not among the methods benchmark `folder` ran, so
    their rows are `shown`; then `where` (by default: the ablation on the release's trees runs them).
    "" when every row has one."""
    missing = [label for label, v in table[column].items() if v != v]
    if not missing:
        return ""
    names = missing[0] if len(missing) == 1 else ", ".join(missing[:-1]) + " and " + missing[-1]
    one = len(missing) == 1
    note = (f"{names}: not among the methods {Path(folder).name} ran ({methods_of(folder)}), so "
            f"{'its row is' if one else 'their rows are'} {shown}")
    return note + (f"; {where.replace('runs them', 'runs it') if one else where}" if where else "")


MAIN_METHODS = {"All Small": "small", "All Mid": "mid", "TreeGraft": "adaptive"}  # the main table's columns: our methods


def main_note(rows: pd.DataFrame, folder: Path) -> str:
    """Why our row of the main layout (`main_layout`) shows "—" in a column: that method is not among
    the methods benchmark `folder` ran. "" when every column has a number."""
    missing = [col for col, m in MAIN_METHODS.items() if m not in rows.index]
    if not missing:
        return ""
    return (f"ours, {' and '.join(missing)}: — , not among the methods {Path(folder).name} ran ({methods_of(folder)})")


def ablation_long(columns: dict[str, pd.Series], keep: pd.Series | None = None) -> pd.DataFrame:
    """{source: speedup per method label} as long rows (label, source, speedup) for a bar chart; `keep`
    (one bool per row of the paper's ablation, e.g. `ran(...)`): only those rows."""
    wide = pd.DataFrame({k: v.to_numpy() for k, v in columns.items()}, index=pd.Index(paper_ablation()["label"], name="label"))
    if keep is not None:
        wide = wide[keep.to_numpy()]
    return wide.reset_index().melt(id_vars="label", var_name="source", value_name="speedup")


def release_ablation(folder: Path, default_rows: pd.DataFrame, default_folder: Path) -> pd.DataFrame | None:
    """The ablation on the release's trees beside the paper's and the default growth's, modelled on
    MODELLED; None where no such benchmark is recorded."""
    if not (Path(folder) / "summary.parquet").exists():
        return None
    rows = overall(read_summary(folder), MODELLED).assign(A=acceptance(folder, MODELLED))
    default_rows = default_rows.assign(A=acceptance(default_folder, MODELLED))
    rel = paper_ablation().join(rows[["speedup", "A", "mid_calls_per_round"]].rename(columns={
        "speedup": "release preset speedup", "A": "release preset A", "mid_calls_per_round": "release preset mid calls / round"}),
        how="left")
    rel = rel.join(default_rows[["speedup", "A"]].rename(columns={"speedup": "default growth speedup", "A": "default growth A"}),
                   how="left")
    rel["label"] = rel.index.map(pt.method_labels(rows, rel["label"].to_dict()))
    return rel.set_index("label")


def specbench_tables(folder: Path, baseline: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame, list[str], list[str]]:
    """Spec-Bench's arithmetic on a folder of answer files, with the target's tokenizer: the per-group
    rows (baseline first in each group), the table to show, the method order and what to say about it."""
    from transformers import AutoTokenizer

    from treegraft_lab import specbench
    from treegraft_lab.zoo.target import ensure_target

    answers, skipped = specbench.read_answers(folder)
    pq = specbench.per_question(answers, AutoTokenizer.from_pretrained(ensure_target()))
    base = specbench.pick_baseline(answers, baseline)
    order = [base, *(m for m in answers if m != base)]
    sb = pd.concat([g.set_index("method").reindex([m for m in order if m in set(g["method"])]).reset_index()
                    for _, g in specbench.speedup_table(pq, baseline).groupby("group", sort=False)], ignore_index=True)
    table = sb.set_index(["group", "method"])[["questions", "speedup", "speedup_per_question", "mean_accepted"]].rename(columns={
        "speedup": "Spec-Bench speedup (speed.py)", "speedup_per_question": "ours (mean of per-question ratios)",
        "mean_accepted": "mean accepted tokens"})
    return sb, table, order, specbench_notes(Path(folder), answers, skipped, pq, sb, base)


def specbench_notes(folder: Path, answers: dict, skipped: dict, pq: pd.DataFrame, sb: pd.DataFrame, base: str) -> list[str]:
    """Lines saying where a Spec-Bench folder came from, what was skipped, and how to read its table."""
    card = folder / "README.md"
    how = next((p for p in card.read_text().split("\n\n") if p.startswith("Command (")), "") if card.exists() else ""
    ones = sorted(g for g, n in sb.groupby("group")["questions"].max().items() if n == 1)
    turns = sum(len(a["choices"][0]["turns"]) for a in answers[base])
    return [*([f"card: {' '.join(how.split())}"] if how else []), *(f"skipped {k}: {v}" for k, v in skipped.items()),
            f"{folder}: {len(answers)} answer files ({', '.join(answers)}), baseline {base}, "
            f"{pq['question_id'].nunique()} questions, {turns} turns",
            f"n per group: the questions column; {len(ones)} of {sb['group'].nunique()} groups have one question "
            f"({', '.join(ones)}): a single question's speedup is an example, not an estimate",
            f"speed.py recounts {base}'s tokens from its text, each turn re-tokenised less one: a tokenizer that adds no "
            f"BOS loses a real token a turn, so {base} against itself need not read 1.000x"]
