"""docs/results.md and the README's results table, written from the committed data, never by hand.

    treegraft-lab report            # rewrite docs/results.md and the README's generated block
    treegraft-lab report --check    # exit 1 where either differs from what the data give

Every table reads its numbers from `data/` (bench folders, growth and perf JSON, regime replays,
scheduler and model cards) and carries the command, machine and date its data record.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from treegraft_lab.paths import DATA_DIR, REPO_DIR

BENCH = DATA_DIR / "bench"
GROWTH = DATA_DIR / "growth"
REGIME = DATA_DIR / "regime" / "smollm2-pocket-lookup-topk"
BENCH_A100 = BENCH / "smollm2-pocket-a100-lookup"  # the default trees modelled on a100-paper: the README's modelled column
CATEGORIES = ("code", "math", "multi_turn", "qa", "rewrite", "summarization")
README_BEGIN = "<!-- results: written by `treegraft-lab report` from data/bench; do not edit by hand -->"
README_END = "<!-- end of results -->"
README_WHEN_BEGIN = "<!-- when results: written by `treegraft-lab report` from data/showcase; do not edit by hand -->"
README_WHEN_END = "<!-- end of when results -->"
SHOWCASE = DATA_DIR / "showcase" / "smollm2-pocket-a100-paper@0.1"  # `treegraft-lab demo --when --out ...`
LABELS = {"ar": "plain decoding (`ar`)", "hf-pld": "HF prompt lookup (`hf-pld`)",
          "recycling": "Token Recycling (`recycling`)", "suffix": "suffix decoding (`suffix`)",
          "small": "TreeGraft all-small", "mid": "TreeGraft all-mid", "10101": "TreeGraft fixed 10101",
          "adaptive": "TreeGraft adaptive (the paper's scheduler, g_psi)", "learned": "TreeGraft learned (per-step scheduler)",
          "oracle": "oracle (best schedule a round, in hindsight)",
          "rule:match": "TreeGraft `rule:match`", "rule:score": "TreeGraft `rule:score`"}


def x(v: float) -> str:
    """A speedup as "1.23x", "-" where there is none."""
    return "-" if v is None or v != v else f"{v:.2f}x"


def num(v: float | None, fmt: str = ".2f") -> str:
    """`v` formatted, "-" where missing."""
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def table(head: list[str], rows: list[list[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


SCRIPTS_REMOVED_IN = "9416a6d"  # the commit that removed the one-off experiment scripts some data were made by


def removed_note(commands: list[str]) -> str:
    """Where the scripts the commands name went, for those no longer in scripts/ ("" when all are there)."""
    gone = sorted({w for c in commands for w in c.split() if w.startswith("scripts/") and not (REPO_DIR / w).exists()})
    return "".join(f" `{w}` was removed in commit {SCRIPTS_REMOVED_IN}; see git history." for w in gone)


def provenance(commands: list[str], machine: str, date: str, data: str) -> str:
    """The command block and one line naming machine, date and data folder, under a table's heading;
    a command whose script is no longer in scripts/ says where it went."""
    block = "\n".join("    " + c for c in commands)
    return f"{block}\n\nMachine: {machine}. Date: {date}. Data: `{data}`.{removed_note(commands)}"


# --- benchmarks ---------------------------------------------------------------------------------


def bench_meta(folder: str) -> dict:
    """A bench folder's results.json meta."""
    return json.loads((BENCH / folder / "results.json").read_text())["meta"]


def bench_machine(meta: dict) -> str:
    """The machine a bench ran on, as its meta records it."""
    h = meta["hardware"]
    isa = f", CPU flags {h['cpu_isa']}" if h.get("cpu_isa") else ""
    path = f", forward path {h['forward_path']}" if h.get("forward_path") else ""
    return f"{h['cpu']}{isa}, {h['cores']} cores, torch threads: {h['torch_threads']}, {h['device']} {h['dtype']}{path}"


def bench_provenance(*folders: str) -> str:
    """Commands, machine and dates of one or more bench folders."""
    metas = [bench_meta(f) for f in folders]
    machines = list(dict.fromkeys(bench_machine(m) for m in metas))
    dates = ", ".join(f"{m['started']} to {m['finished']}" for m in metas)
    data = "`, `".join(f"data/bench/{f}" for f in folders)
    return provenance([m["settings"]["command"] for m in metas], "; ".join(machines), dates, data)



def bench_summary(folder: str, clock: str) -> pd.DataFrame:
    """A benchmark's summary rows on `clock`, indexed by (category, method)."""
    d = pd.read_parquet(BENCH / folder / "summary.parquet")
    return d[d["clock"] == clock].set_index(["category", "method"])


def bench_a(folder: str, clock: str) -> pd.Series:
    """A (new tokens / target forwards, the paper's count) per method, all prompts pooled."""
    from treegraft_lab.viz.stats import bench_acceptance

    acc = bench_acceptance(pd.read_parquet(BENCH / folder / "records.parquet"))
    return acc[(acc["clock"] == clock) & (acc["category"] == "overall")].set_index("method")["A"]


WALL_SPLITS = {"validation": "smollm2-pocket-wall-validation", "eval": "smollm2-pocket-wall-eval"}
SPLIT_WORDS = {"validation": "the validation prompts (no tuning, training or default choice reads them)",
               "eval": "the eval prompts"}


def spread_cell(r) -> str:
    """A speedup with the min–max of its per-repeat ratios, or "= <label>" where the method decoded
    exactly as another (one computation: one number, under the other's row)."""
    from treegraft_lab.bench import speedup_cell

    same = getattr(r, "same_as", "")
    if isinstance(same, str) and same:
        return f"= {LABELS.get(same, same)} (same decisions)"
    return speedup_cell(r)


def speed_default_wall(split: str) -> str:
    """Every method on the wall clock with the speed default on one split, overall and per category."""
    from treegraft_lab import specbench

    folder = WALL_SPLITS[split]
    s = bench_summary(folder, "wall").loc["overall"]
    rec = pd.read_parquet(BENCH / folder / "records.parquet")
    a = {**bench_a(folder, "wall").to_dict(), "ar": 1.0}  # plain decoding: one token a forward
    means = specbench.speedup_table(specbench.records_per_question(rec)).set_index(["group", "method"])["speedup"]
    peers = ("ar", "hf-pld", "recycling", "suffix")  # no mid drafter
    rows = [[LABELS[m], num(s.loc[m, "tokens_per_s"], ".1f"), spread_cell(s.loc[m].rename(m)), x(means["overall", m]),
             num(a[m]) if m in a else "not counted", "-" if m in peers else num(s.loc[m, "mid_calls_per_round"]),
             f"{100 * s.loc[m, 'match_rate']:.0f}%"] for m in dict.fromkeys(s.index)]
    overall = table(["method", "tokens/s", "speedup over plain (mean of per-prompt ratios; min–max over repeats)",
                     "Spec-Bench speedup (ratio of means)", "tokens / target forward (A, bonus included)",
                     "mid calls / round", "identical to plain"], rows)
    return (f"### Every method, wall clock, {SPLIT_WORDS[split]}\n\n{bench_provenance(folder)}\n\n{overall}\n\n"
            f"Per category (speedup over plain decoding, mean of per-prompt ratios):\n\n{per_category(folder, 'wall')}")


def per_category(folder: str, clock: str) -> str:
    """Speedup per category for every method of a bench (one column for methods that decoded
    identically), and all-small over the better of HF prompt lookup and suffix decoding."""
    summ = bench_summary(folder, clock)
    sp = summ["speedup"]
    same = summ["same_as"] if "same_as" in summ.columns else pd.Series("", index=summ.index)
    methods = [m for m in dict.fromkeys(sp.index.get_level_values("method"))
               if m != "ar" and not (isinstance(same.get(("overall", m)), str) and same.get(("overall", m)))]
    peers = [m for m in ("hf-pld", "suffix") if m in methods]
    ratio = "small" in methods and peers
    cats = [c for c in dict.fromkeys(sp.index.get_level_values("category")) if c != "overall"]
    rows = [[c, *(x(sp[c, m]) for m in methods),
             *([f"{sp[c, 'small'] / max(sp[c, p] for p in peers):.2f}"] if ratio else [])]
            for c in (*sorted(cats), "overall")]
    return table(["category", *methods, *([f"small / best of {', '.join(peers)}"] if ratio else [])], rows)


def speed_default_modelled() -> str:
    """The speed default modelled on a100-paper, per category."""
    folder = "smollm2-pocket-a100-lookup"
    return (f"### Modelled on `a100-paper`\n\n{bench_provenance(folder)}\n\n{per_category(folder, 'a100-paper')}")


def peers_modelled() -> str:
    """Peers, switching rules and the learned scheduler, modelled on a100-paper, from three bench runs."""
    folders = ("smollm2-pocket-a100-paper-peers-recycling", "smollm2-pocket-a100-paper-schedules-a",
               "smollm2-pocket-a100-paper-schedules-b")
    return (f"### Peers and switching rules, modelled on `a100-paper`\n\nThree runs over the same prompts, each with "
            f"its own plain decoding.\n\n{bench_provenance(*folders)}\n\n{peer_table([BENCH / f for f in folders], 'a100-paper')}")


def peer_table(folders: list[Path], clock: str) -> str:
    """One row per method of the bench `folders` on `clock` (the first folder's plain decoding; a
    TreeGraft row from a run with another small drafter names it): tokens/s, speedup over plain,
    A, mid calls per round, share identical to plain, prompts."""
    from treegraft_lab import bench
    from treegraft_lab.viz.stats import bench_acceptance

    rows, seen = [], set()
    for folder in folders:
        if not (folder / "records.parquet").is_file():
            continue
        rec = pd.read_parquet(folder / "records.parquet")
        rec = rec[rec.clock == clock]
        small = json.loads((folder / "results.json").read_text())["meta"]["settings"].get("small", "ngram")
        summ = bench.summarize(rec)
        acc = bench_acceptance(rec)
        acc = acc[acc.category == "overall"].set_index("method")
        for r in summ[summ.category == "overall"].itertuples():
            peer = r.method in ("ar", "hf-pld", "recycling", "suffix")
            label = LABELS.get(r.method, r.method) + ("" if small == "ngram" or peer else f", small = {small}")
            if label in seen:
                continue
            seen.add(label)
            a = acc.loc[r.method, "A"] if r.method in acc.index else math.nan
            rows.append([label, num(r.tokens_per_s, ".1f"), x(r.speedup), num(a), num(r.mid_calls_per_round),
                         f"{100 * r.match_rate:.0f}%", f"{r.prompts}"])
    return table(["method", "tokens/s", "speedup over plain", "tokens / target forward (A)", "mid calls / round",
                  "identical to plain", "prompts"], rows)


def bench_peers_folders(clock: str) -> list[Path]:
    """The bench folders scripts/bench_peers.sh writes for `clock`: every method, then all-small with each small drafter."""
    return [BENCH / f"smollm2-pocket-{clock}-peers"] + [BENCH / f"smollm2-pocket-{clock}-small-{s}"
                                                         for s in ("ngram", "suffix", "ngram+suffix", "recycling")]


def full_growth_wall() -> str:
    """The full growth on the wall clock with value pruning."""
    folder = "smollm2-pocket-wall-value"
    s = bench_summary(folder, "wall").loc["overall"]
    a = bench_a(folder, "wall")
    rows = [[LABELS[m], num(s.loc[m, "tokens_per_s"], ".1f"), x(s.loc[m, "speedup"]), num(a.get(m)),
             num(s.loc[m, "accepted_per_round"]), num(s.loc[m, "mid_calls_per_round"]), f"{100 * s.loc[m, 'match_rate']:.0f}%"]
            for m in dict.fromkeys(s.index)]
    head = ["method", "tokens/s", "speedup over plain decoding", "A (new tokens / target forward)",
            "accepted draft tokens / round", "mid calls / round", "identical to plain"]
    return f"### Full growth, wall clock\n\n{bench_provenance(folder)}\n\n{table(head, rows)}"


def paper_tables() -> str:
    """The paper's main table and ablation beside ours, modelled on a100-paper (full growth), then
    the ablation on the release's trees."""
    from treegraft_lab import paper
    from treegraft_lab.viz.paper_tables import ablation_markdown

    folder = "smollm2-pocket-a100-modelled"
    s = bench_summary(folder, "a100-paper").loc["overall"]
    a = bench_a(folder, "a100-paper")
    main_methods = ("small", "mid", "adaptive", "oracle", "hf-pld")
    pair, *theirs, _n = paper.MAIN[-1]
    main = table(["main table (speedup over plain decoding)", "All Small", "All Mid", "TreeGraft (adaptive)", "oracle",
                  "HF prompt lookup"],
                 [["ours, SmolLM2-135M / pocket drafter, modelled on a100-paper", *(x(s.loc[m, "speedup"]) for m in main_methods)],
                  [f"paper, {pair} ({paper.MAIN_HOW})", *(x(v) for v in theirs), "-", "-"]])
    abl_methods = ("csd", "no-eg", "no-nd", "10101", "adaptive")
    paper_abl = {m: (sp, pa) for m, _, sp, pa in paper.ABLATION}
    abl = table(["ablation (speedup / A)", "CSD", "w/o EG", "w/o ND", "fixed 10101", "adaptive"],
                [["ours, modelled on a100-paper", *(f"{x(s.loc[m, 'speedup'])} / {a[m]:.2f}" for m in abl_methods)],
                 ["paper (GSM8K and CNN/DM, measured)", *(f"{x(paper_abl[m][0])} / {paper_abl[m][1]:.2f}" for m in abl_methods)],
                 ["ours: accepted draft tokens / round", *(num(s.loc[m, "accepted_per_round"]) for m in abl_methods)]])
    release = "smollm2-pocket-a100-release-ablation"
    return (f"### Main table and ablation, full growth\n\n{bench_provenance(folder)}\n\n{main}\n\n{abl}\n\n"
            f"### Ablation on the release's trees\n\n{bench_provenance(release)}\n\n{ablation_markdown(BENCH / release)}")


def specbench_section() -> str:
    """Spec-Bench's arithmetic (its speed.py) on the committed answer files, beside ours."""
    from transformers import AutoTokenizer

    from treegraft_lab import specbench
    from treegraft_lab.zoo.target import ensure_target

    folder = DATA_DIR / "specbench" / "example-answers"
    answers, _ = specbench.read_answers(folder)
    t = specbench.speedup_table(specbench.per_question(answers, AutoTokenizer.from_pretrained(ensure_target())))
    t = t.set_index(["group", "method"])
    rows = []
    for g in dict.fromkeys(t.index.get_level_values("group")):
        cells = [f"{t.loc[(g, m), c]:.3f}x" if c != "mean_accepted" else f"{t.loc[(g, m), c]:.2f}"
                 for m in ("small", "10101") for c in ("speedup", "speedup_per_question", "mean_accepted")]
        rows.append([f"{g} ({t.loc[(g, 'small'), 'questions']})", *cells])
    head = ["task group (questions)", "small: Spec-Bench speedup (speed.py)", "small: ours (mean of per-question ratios)",
            "small: mean accepted tokens", "10101: Spec-Bench speedup (speed.py)", "10101: ours",
            "10101: mean accepted tokens"]
    prov = json.loads((folder / "provenance.json").read_text())
    return ("## Spec-Bench format\n\nEvery turn decoded with the conversation so far, one answer file per method "
            "(`data/specbench/example-answers/README.md` says what each field holds). Spec-Bench speedup is its "
            "`evaluation/speed.py` arithmetic (`specbench.speedup_table`), plain decoding's tokens recounted from its "
            "re-tokenised text; ours averages per-question ratios on generated tokens; mean accepted tokens: tokens per "
            "target forward, bonus included.\n\n"
            f"{provenance(prov['commands'], prov['machine'], prov['date'], 'data/specbench/example-answers')}\n\n"
            f"{table(head, rows)}")


def losslessness() -> str:
    """Outputs identical to plain greedy decoding, per committed benchmark and method."""
    rows = []
    for folder in sorted(p for p in BENCH.iterdir() if (p / "records.parquet").is_file()):
        rec = pd.read_parquet(folder / "records.parquet")
        rec = rec[rec["method"] != "ar"].drop_duplicates(["question_id", "method", "repeat"])
        same = rec.groupby("method", sort=False)["match"].agg(["sum", "size"])
        cells = ", ".join(f"{m} {int(r['sum'])}/{int(r['size'])}" for m, r in same.iterrows())
        meta = bench_meta(folder.name)
        rows.append([f"`{folder.name}`", meta["finished"][:10], meta["hardware"]["dtype"], cells])
    return table(["benchmark", "date", "dtype", "identical to plain decoding, per method (generations)"], rows)


# --- growth, small drafters, forward cost -------------------------------------------------------


def growth_meta_line(meta: dict) -> str:
    """Commands, machine and date of a data/growth or data/perf JSON file's meta."""
    commands = meta.get("commands") or [meta["command"]]
    machine = meta.get("machine") or f"{meta['cpu']}, torch threads: {meta.get('threads', '?')}, torch {meta['torch']}"
    return provenance(commands, machine, meta["date"], meta["data"])


def growth_section() -> str:
    """Growth rules under the release's statistics, beside the release's own counts and the paper's."""
    from treegraft_lab.viz.paper_tables import growth_markdown

    doc = json.loads((GROWTH / "growth-compare.json").read_text())
    meta = {**doc["meta"], "data": "data/growth/growth-compare.json"}
    return f"### Growth rules and the paper's statistics\n\n{growth_meta_line(meta)}\n\n{growth_markdown(doc['rows'])}"


def speedup_json_table(name: str, head: str) -> str:
    """A data/growth JSON of per-category speedups ({label: {category: x}}) as a table."""
    doc = json.loads((GROWTH / name).read_text())
    rows = [[label, *(x(v[c]) for c in (*CATEGORIES, "overall"))] for label, v in doc["speedup"].items()]
    meta = {**doc["meta"], "data": f"data/growth/{name}"}
    return f"{growth_meta_line(meta)}\n\n{table([head, *CATEGORIES, 'overall'], rows)}"


def lookup_growth_section() -> str:
    """All-small under each growth variant against prompt lookup, modelled (exact greedy replay)."""
    return ("### Tree growth against prompt lookup\n\nAll-small, exact greedy replay: the real trees grown and pruned, "
            "a stand-in verifier accepting the longest path that follows the plain greedy continuation, rounds priced "
            "by the profile.\n\nModelled on `a100-paper`, top-k pruning:\n\n"
            f"{speedup_json_table('lookup-a100-paper-topk.json', 'growth')}\n\n"
            "Modelled on this CPU's measured profile, value pruning:\n\n"
            f"{speedup_json_table('lookup-cpu-value.json', 'growth')}")


def small_drafters_section() -> str:
    """The small drafters on the wall clock (one process, rotated) and modelled on a100-paper."""
    doc = json.loads((GROWTH / "small-ab-wall.json").read_text())
    rows = [[r["method"], x(r["speedup"]), f"{r['over_prompt_lookup']:.3f}", f"{r['worst_category_over_prompt_lookup']:.3f}",
             *(x(r["per_category"][c]) for c in CATEGORIES)] for r in doc["rows"] if r["method"] != "plain decoding"]
    wall = table(["small drafter", "speedup over plain", "/ prompt lookup", "worst category / prompt lookup", *CATEGORIES], rows)
    meta = {"commands": [doc["command"]], "machine": f"{doc['cpu']}, torch {doc['torch']}",
            "date": f"{doc['start']} to {doc['end']}", "data": "data/growth/small-ab-wall.json"}
    return (f"## Small drafters\n\n### Wall clock\n\n{growth_meta_line(meta)}\n\n{wall}\n\n"
            f"### Modelled on `a100-paper` (exact greedy replay, top-k pruning)\n\n"
            f"{speedup_json_table('small-a100-paper-topk.json', 'small drafter, growth')}")


def forward_cost_section() -> str:
    """The target's forward cost by new tokens, both forward paths, and this CPU's profile."""
    from treegraft_lab import costs

    doc = json.loads((DATA_DIR / "perf" / "forward-curve.json").read_text())
    ns = list(doc["curve_ms"]["packed"])
    names = {"stock": "stock transformers", "packed": "packed CPU path"}
    rows = [[names[p], *(num(doc["curve_ms"][p][n], ".1f") for n in ns), num(doc["mid_call_ms"][p], ".1f")] for p in names]
    meta = {**doc, "data": "data/perf/forward-curve.json"}
    curve = table(["forward path (ms)", *(f"n={n}" for n in ns), f"mid call (W={doc['mid_call_ms']['width']})"], rows)
    prof = costs.load(DATA_DIR / "regime" / "cpu-epyc-float32.json")
    curves = "\n\n".join(table([f"{who}: n tokens", *(str(n) for n in sorted(c))], [["ms", *(f"{c[n]:.1f}" for n in sorted(c))]])
                          for who, c in (("target", prof.target), ("mid drafter", prof.mid)))
    return (f"## The target's forward cost\n\nMilliseconds per forward of n new tokens after {doc['context']} cached "
            f"ones, medians of {doc['reps']}.\n\n{growth_meta_line(meta)}\n\n{curve}\n\n"
            f"This CPU's cost profile `{prof.name}` ({prof.device}; {prof.source}; `data/regime/cpu-epyc-float32.json`), "
            f"an n-gram step {prof.small_ms:.2f} ms:\n\n{curves}")


# --- regime map ---------------------------------------------------------------------------------


def regime_rows():
    """The regime map's rows (replay-priced schedules and stored decodes) at the decoded ratios
    and the map's default ratios, on a100-paper."""
    from treegraft_lab import costs, regime
    from treegraft_lab.presets import REGIME_SCHEDULES

    df, meta = regime.load(REGIME)
    reps = regime.split(df, 5)
    base = costs.load("a100-paper")
    ratios = sorted({*regime.log_ratios(0.02, 1.0, 11), 0.6})  # the command's default --ratios 0.02:1:11,0.6
    rows = regime.priced(reps, base, ratios, REGIME_SCHEDULES.split(","))
    return regime, reps, base, meta, regime.by_ratio(pd.concat([rows, regime.load_decodes(REGIME, base.name, reps, ratios)]))


def regime_section() -> str:
    """Where WHEN matters: the map over T_mid / T_tgt, and the paper's pairs beside ours at 0.6."""
    from treegraft_lab import costs, paper

    regime, reps, base, meta, m = regime_rows()
    tt, tm = costs.scheduler_costs(base, regime.map_config("lookup", "a100-paper"))
    mapped = regime.markdown(m, marks={base.name: tm / tt})
    prov = json.loads((REGIME / "provenance.json").read_text())
    at = m[m["ratio"] == 0.6].set_index("schedule")
    runs = regime.load_decodes(REGIME, base.name)
    dec = regime.summary(runs[runs["ratio"] == 0.6]).set_index("schedule")
    (qwen, qs, qm, qa, qn), (llama, ls, lm, la, ln) = paper.MAIN[:2]
    stored = regime.stored_schedulers(REGIME)  # decode name -> the artifact it ran
    mine = regime.adaptive_name(REGIME, meta["pair"], base, regime.map_config("lookup"))  # what schedule="adaptive" loads
    beside = table(["speedup over plain decoding", f"{qwen} (paper, n = {qn})", f"{llama} (paper, n = {ln})",
                    f"ours: SmolLM2-135M / pocket, modelled (n = {len(reps)})"],
                   [["all-small", x(qs), x(ls), x(at.loc["all-small", "speedup"])],
                    ["all-mid", x(qm), x(lm), x(at.loc["all-mid", "speedup"])],
                    ["TreeGraft (adaptive)", x(qa), x(la), f"{x(dec.loc[mine, 'speedup'])} (`{mine}`: TreeGraft adaptive, "
                     f"the single-profile scheduler `{stored[mine].name}`)"],
                    ["family scheduler", "-", "-", f"{x(dec.loc['adaptive-family', 'speedup'])} (`adaptive-family`: "
                     f"`{stored['adaptive-family'].name}`, ours only)"],
                    ["oracle", "-", "-", x(at.loc["oracle", "speedup"])]])
    return ("## Where WHEN matters: the regime map\n\nEvery schedule replayed from round starts of each prompt's greedy "
            "answer and priced on `a100-paper` with the mid drafter's curve scaled so that T_mid / T_tgt takes each "
            "value; the decoded rows are real decodes with a scheduler artifact or a switching rule. Speedups are means "
            "over prompts; \"better endpoint\" is the better of all-small and all-mid at that ratio; \"pooled\" is total "
            "plain-decoding time over total time.\n\n"
            f"{provenance(prov['commands'], prov['machine'], prov['date'], 'data/regime/smollm2-pocket-lookup-topk')}\n\n"
            f"![regime map](img/regime.png)\n\n{mapped}\n\n![draft steps that call the mid drafter](img/regime-steps.png)\n\n"
            f"{regime.which_adaptive(REGIME, meta['pair'], base, regime.map_config('lookup'), runs, 0.6, BENCH_A100)}"
            f"\n\nBeside the paper's own pairs at a100-paper's ratio (the paper's columns: {paper.MAIN_HOW}; ours: modelled, "
            f"prefill excluded, {meta['max_new']} new tokens; only the pattern carries over):\n\n{beside}")


INT8_WALL = "smollm2-int8-wall-eval"


def int8_wall_table() -> str:
    """The int8-mid wall-clock bench, overall: every method with its per-repeat spread, mid calls and
    whether its outputs were identical to plain decoding, then its command, machine and date."""
    folder = INT8_WALL
    s = bench_summary(folder, "wall").loc["overall"]
    rows = [[LABELS[m], num(s.loc[m, "tokens_per_s"], ".1f"), spread_cell(s.loc[m].rename(m)),
             "-" if m in ("ar", "hf-pld", "suffix") else num(s.loc[m, "mid_calls_per_round"]),
             f"{100 * s.loc[m, 'match_rate']:.0f}%"] for m in dict.fromkeys(s.index)]
    head = ["method", "tokens/s", "speedup over plain (min–max over repeats)", "mid calls / round", "identical to plain"]
    return f"{table(head, rows)}\n\n{bench_provenance(folder)}"


def int8_wall_section() -> str:
    """WHEN on this CPU's wall clock with the int8 copy of the target as the mid drafter: every method
    with its per-repeat spread, beside plain decoding and the peers."""
    card = json.loads((DATA_DIR / "models" / "smollm2-int8-mid" / "card.json").read_text())
    methods = bench_summary(INT8_WALL, "wall").loc["overall"].index
    missing = "" if "adaptive" in methods else (" No scheduler or fitted rule was run for this pair, so adaptive and "
                                                 "the rules are not in it.")
    return (f"### The int8 mid drafter on the wall clock\n\nThe target's int8 copy (`smollm2-int8`, greedy agreement "
            f"{card['agreement']:.3f} on its card) as the mid drafter, on this CPU's wall clock.{missing}\n\n"
            f"{int8_wall_table()}\n\nPer category:\n\n{per_category(INT8_WALL, 'wall')}")


def regime_mids_section() -> str:
    """The regime map's second axis: the mid drafters' cells (oracle, the family and map schedulers,
    the fitted rules over the better endpoint) and each scheduler's acceptance count, from the stored
    replays and decodes."""
    from treegraft_lab import costs, regime

    prov = json.loads((DATA_DIR / "regime" / "mids-provenance.json").read_text())
    ax = regime.mid_axis(list(regime.STORED_MIDS), costs.load("a100-paper"), sorted({*regime.log_ratios(0.02, 1.0, 6), 0.6}))
    rules = (f"The switching rules fitted beside the scheduler ({', '.join(ax.rules)}), over the better endpoint "
             f"(the oracle's first):\n\n{regime.cells_markdown(ax.cells, ax.rules)}\n\n") if ax.rules else ""
    notes = "".join(f"- {n}\n" for n in ax.notes)
    return ("### The second axis: the mid drafter\n\nThe map over the mid drafter's greedy agreement with the target "
            "(its card) and T_mid / T_tgt, on the eval prompts all their replays hold, cut to the shortest answers "
            f"stored: {len(ax.prompts)} prompts ({', '.join(ax.prompts)}), their first {ax.max_new} tokens. Each cell: "
            f"the oracle over the better endpoint, then {' and '.join(ax.schedulers)} over it where their decisions are "
            "stored (their real decodes; those of more tokens walked round by round through the cut replays). "
            f"{MAP_WORDS}S: all-small is the better "
            "endpoint, M: all-mid. The paper gives no per-pair T_mid / T_tgt nor agreement: its pairs are in the table "
            "under the heatmaps, at a100-paper's ratio.\n\n"
            f"{provenance(prov['commands'], prov['machine'], prov['date'], 'data/regime/<pair>-lookup-topk')}\n\n"
            f"![regime map over mid drafters](img/regime-mids.png)\n\n{regime.cells_markdown(ax.cells, ax.schedulers)}"
            f"\n\n{rules}{notes + chr(10) if notes else ''}"
            + " ".join(regime.acceptance_text(regime.acceptance(ax.cells, s), s) for s in ax.schedulers)
            + "\n\n" + capture_table(ax))


def capture_table(ax) -> str:
    """How much of the oracle's gain each scheduler and rule takes on the map over mid drafters, as a table."""
    from treegraft_lab import regime

    caps = {s: regime.capture(ax.cells, s) for s in [*ax.schedulers, *ax.rules]}
    n = max((c["cells"] for c in caps.values()), default=0)
    rows = [f"| {s} | {c['mean_capture']:.0%} | {c['pooled_capture']:.0%} | {c['median_capture']:.0%} | {c['below_098']} of {c['priced']} |"
            for s, c in caps.items() if c["priced"]]
    return (f"Capture of the oracle's gain, (S - better endpoint) / (oracle - better endpoint) per cell (1: all of it, 0: "
            f"the better endpoint's speed, below 0: slower), over the {n} cells where the oracle is at least 1.15x the "
            "better endpoint (`treegraft-lab regime --capture`):\n\n"
            "| scheduler | mean capture | pooled | median | cells below 0.98x the better endpoint |\n|---|---|---|---|---|\n"
            + "\n".join(rows))


def held_out_section() -> str:
    """WHEN learned from the oracle, judged on held-out prompts: each learner and signal set's capture with its
    interval (`imitation.held_out_capture`, from the stored walks), and the sentence."""
    from treegraft_lab import costs, regime
    from treegraft_lab.training import imitation as im

    folder = regime.held_out_folder("smollm2-pocket")
    if not (folder / im.SUMMARY).is_file():
        return ""
    summary = json.loads((folder / im.SUMMARY).read_text())
    caps = im.held_out_capture(folder, costs.load(summary["profile"]), regime.map_config("lookup"))
    rows = [f"| {n.removeprefix('learned-')} | {'the past' if c['causal'] else 'hindsight (a diagnostic)'} | "
            f"{c['mean_capture']:.0%} | {c['ci95'][0]:.0%} to {c['ci95'][1]:.0%} | {c['cells']} | {c['below_098']} | "
            + " | ".join(f"{g:.3f}" for g in c["per_ratio"].values()) + " |" for n, c in caps.items()]
    first = next(iter(caps.values()))
    ratios = list(first["per_ratio"])
    oracle = "| oracle (hindsight) | | | | | | " + " | ".join(f"{g:.3f}" for g in first["oracle_per_ratio"].values()) + " |"
    head = ("| learner:signal set | reads | mean capture | 95% interval | cells | below 0.98x | "
            + " | ".join(f"{r:g}" for r in ratios) + " |\n|" + "---|" * (6 + len(ratios)))
    return ("### WHEN learned from the oracle, on held-out prompts\n\n"
            f"The pocket drafter's replays of {first['split'].split(': ', 1)[1].split(',')[0]} (every round start "
            "replayed, so any per-step scheduler can be walked through them), priced on a100-paper with the mid curve "
            "scaled to each T_mid / T_tgt. Each prompt is walked by a learner cross-fitted without it (6 folds; the eval "
            "replays always in training): imitation of the oracle's per-step choices with DAgger rounds, and the "
            "value-and-margin route, on three signal sets (`schedule.stepwise.SIGNAL_SETS`); the last row also reads, in "
            "hindsight, what a mid call at the step would add to the round (a diagnostic, not a scheduler). Capture as "
            "above, over the cells where the oracle is >= 1.15x the better endpoint; the interval is a bootstrap over "
            "prompts; the columns after it: speedup over the better endpoint at each ratio.\n\n"
            + provenance(summary["commands"], summary["machine"], summary["date"], str(folder.relative_to(DATA_DIR.parent)))
            + f"\n\n{head}\n" + "\n".join(rows) + f"\n{oracle}\n\n" + im.capture_sentence(caps).replace("**", ""))


MAP_WORDS = ("adaptive-family was trained on the pocket drafter's trajectories alone and is run as it is with the "
             "other mid drafters; adaptive-map (`data/scheduler/smollm2-pocket/map-topk-lookup`, its card says on "
             "what) was trained on the trajectories of several mid drafters with the drafter's card agreement as an "
             "input. ")


# --- schedulers and the mid drafter -------------------------------------------------------------


def schedulers_section() -> str:
    """The committed scheduler artifacts, each with its card."""
    from treegraft_lab.paths import SCHEDULER_DIR

    rows = []
    for sj in sorted(SCHEDULER_DIR.glob("*/*/scheduler.json")):
        s = json.loads(sj.read_text())
        rel = sj.parent.relative_to(REPO_DIR)
        rows.append([f"[`{rel.parent.name}/{rel.name}`](../{rel}/CARD.md)", s.get("profile_class", "-"),
                     s.get("profile_name", "-"), s.get("prune", "-"), s.get("growth", "full"), s.get("small", "ngram"),
                     str(s.get("params", "-"))])
    return ("## Schedulers\n\nOne artifact per (profile class, pruning, growth, small drafter), each trained by "
            "`treegraft-lab collect` and `treegraft-lab train-scheduler`; its card says how and what it does.\n\n"
            + table(["artifact", "profile class", "profile", "pruning", "growth", "small drafter", "parameters"], rows))


def mid_drafter_section() -> str:
    """The pocket drafter's greedy agreement with the target, from its card."""
    card = json.loads((DATA_DIR / "models" / "smollm2-pocket-drafter" / "card.json").read_text())
    rows = [[c, f"{card['agreement_per_category'][c]:.3f}", str(card["positions_per_category"][c])] for c in CATEGORIES]
    rows.append(["overall", f"{card['agreement']:.3f}", str(card["positions"])])
    return ("## Mid drafter\n\nGreedy agreement of the pocket drafter with the target on the eval prompts "
            f"({card['n_prompts']} prompts, {card['max_new_tokens']} new tokens; `treegraft-lab zoo card smollm2-pocket`; "
            "`data/models/smollm2-pocket-drafter/MODEL_CARD.md`):\n\n"
            + table(["category", "agreement", "positions"], rows))


# --- the page -----------------------------------------------------------------------------------

HEADER = """# Results

Written by `treegraft-lab report` (`make results`) from the committed data; never edit it by hand:
`tests/test_results_page.py` writes it again and compares. Speedups are over plain greedy decoding of
the same target on the same clock. "Modelled" numbers price every decision on a device profile
(`a100-paper`: the paper's A100 step costs) and do not depend on the machine's load; wall-clock
numbers on a shared CPU move between runs, so compare the rows of one table, not numbers across
tables. A is the paper's acceptance length as the authors' release counts it: new tokens over
target forwards, bonus included. Why each setting is what it is: [performance.md](performance.md)."""


def sections() -> list[Callable[[], str]]:
    """The page's sections, in order."""
    return [lambda: "## The speed default: lookup growth, n-gram + recycling small drafter",
            lambda: speed_default_wall("validation"), lambda: speed_default_wall("eval"), speed_default_modelled,
            peers_modelled, small_drafters_section, regime_section, regime_mids_section, held_out_section,
            int8_wall_section,
            lambda: "## Tree growth", growth_section, lookup_growth_section,
            lambda: "## The paper's tables", paper_tables, full_growth_wall, specbench_section,
            forward_cost_section, schedulers_section, mid_drafter_section,
            lambda: "## Losslessness\n\nEvery committed benchmark compares each output with plain greedy decoding, "
                    "token for token (`check-lossless` does the same for any schedule):\n\n" + losslessness()]


def render() -> str:
    """docs/results.md, as the committed data give it."""
    return "\n\n".join([HEADER, *(s() for s in sections())]) + "\n"


# --- the README's table -------------------------------------------------------------------------


def readme_table() -> str:
    """The README's one results table: the speed default on this CPU's wall clock, on the validation
    and the eval prompts (each speedup with the min–max of its per-repeat ratios), and modelled on a100-paper."""
    val, ev, modelled = WALL_SPLITS["validation"], WALL_SPLITS["eval"], "smollm2-pocket-a100-lookup"
    v, e = bench_summary(val, "wall").loc["overall"], bench_summary(ev, "wall").loc["overall"]
    mo = bench_summary(modelled, "a100-paper").loc["overall"]

    def cell(s: pd.DataFrame, m: str) -> str:
        return spread_cell(s.loc[m].rename(m)) if m in s.index else "not run"

    rows = [[LABELS[m], num(v.loc[m, "tokens_per_s"], ".1f"), cell(v, m), cell(e, m),
             x(mo.loc[m, "speedup"]) if m in mo.index else "not run"] for m in dict.fromkeys(v.index)]
    mv, me, mm = bench_meta(val), bench_meta(ev), bench_meta(modelled)
    return "\n".join([
        table(["method", "tokens/s, wall, validation", "speedup, wall, validation", "speedup, wall, eval",
               "speedup, modelled on `a100-paper`, eval"], rows), "",
        f"Validation: `{mv['settings']['command']}` on {bench_machine(mv)}, {mv['finished'][:10]}.",
        f"Eval: `{me['settings']['command']}` on {bench_machine(me)}, {me['finished'][:10]}.",
        f"Modelled: `{mm['settings']['command']}` on {bench_machine(mm)}, {mm['finished'][:10]}."])


SHOWCASE_LABELS = {"small": "all-small", "mid": "all-mid", "adaptive": "adaptive", "learned": "learned",
                   "oracle": "oracle"}


def showcase_table(folder: Path = SHOWCASE) -> str:
    """The WHEN table (`treegraft-lab demo --when --out`): per prompt, each schedule's modelled speedup over
    plain decoding (mid calls a round beside each scheduler), whether all were lossless; then the
    sentence computed from the rows, the scheduler adaptive loaded, and the command, machine and date."""
    d = json.loads((folder / "showcase.json").read_text())
    schedules = [r["schedule"] for r in next(iter(d["rows"].values()))]
    head = ["prompt", *(SHOWCASE_LABELS[s] + ("" if s in ("small", "mid") else " (mid calls / round)")
                        for s in schedules), "identical to plain"]
    rows = [[f"{kind}", *(x(r["speedup"]) + ("" if r["schedule"] in ("small", "mid")
                                               else f" ({r['mid_calls_per_round']:.2f})") for r in rs),
             "yes" if all(r["lossless"] for r in rs) else "no"] for kind, rs in d["rows"].items()]
    h = d["hardware"]
    return "\n".join([table(head, rows), "", d["sentence"] + f" Adaptive loaded `{d['adaptive_scheduler']}`.", "",
                      f"`{d['command']}`: modelled on `{d['profile']}`, {d['max_new_tokens']} new tokens a prompt, decoded "
                      f"on {h['cpu']}, CPU flags {h['cpu_isa']}, {h['cores']} cores, {d['finished'][:10]}. Data: "
                      f"`{folder.relative_to(REPO_DIR).as_posix()}/showcase.json`."])


def with_readme_table(readme: str) -> str:
    """`readme` with the blocks between its markers written again (the speed table, the WHEN table)."""
    for begin, end, body in ((README_BEGIN, README_END, readme_table),
                             (README_WHEN_BEGIN, README_WHEN_END, showcase_table)):
        head, sep, rest = readme.partition(begin)
        _, sep2, tail = rest.partition(end)
        if not (sep and sep2):
            raise ValueError(f"README.md lacks the markers {begin!r} ... {end!r}")
        readme = f"{head}{begin}\n{body()}\n{end}{tail}"
    return readme


def pages() -> dict[Path, str]:
    """{file: its generated text} for docs/results.md and README.md."""
    readme = REPO_DIR / "README.md"
    return {REPO_DIR / "docs" / "results.md": render(), readme: with_readme_table(readme.read_text())}
