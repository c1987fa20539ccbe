"""`treegraft-lab bench`: TreeGraft against its peers, interleaved prompt by prompt in one process.

Writes records.parquet, summary.parquet, results.md, specbench.md and results.json to --out
(default data/bench/<pair>-<timestamp>/); with --json prints one JSON object
{"overall": {method: speedup}, "per_category": {category: {method: speedup}}, "specbench":
{group: {method: speedup}}} and nothing else on stdout (progress and notes go to stderr). The
tables print a ratio of means per task group (Spec-Bench's averaging) beside this project's mean
of per-prompt ratios.

Without --dtype and --prune, the adaptive method gets the dtype and pruning rule its scheduler was
trained for on this device (`schedule.choice`; e.g. float32 and value pruning on a CPU whose auto
dtype is bfloat16), and says so; where none is trained, the default methods run without it and
say why.

With --answers DIR every turn of every question is decoded with the conversation so far and one
Spec-Bench answer file per method is written to DIR/<method>.jsonl (`treegraft_lab.specbench`);
the tables then come from those files with Spec-Bench's speed.py arithmetic (the baseline's answer
text re-tokenised with the target's tokenizer), and "specbench" in --json holds that figure.

Each prompt's records are stored in --out/partial/ as it finishes (`treegraft_lab.resume`); a Ctrl-C
prints how many are stored and the command that continues the run (`--resume`, the same flags).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from treegraft_lab.commands.common import (
    add_clock_arguments,
    add_growth_arguments,
    add_pair_arguments,
    check_pair,
    check_prompts,
    check_scheduler,
    check_settings,
    clocks_from_args,
    growth_from_args,
    int_or_auto,
    load_pair_from_args,
)
from treegraft_lab.presets import DEFAULT_PAIR


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from treegraft_lab.bench import DEFAULT_METHODS, METHODS

    parser.add_argument("--prompts", default="treegraft-suite", help="suite name or a JSONL file (first turn of each)")
    parser.add_argument("--split", default="eval", help="eval, validation, train or all")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                        help=f"comma-separated, from {', '.join(METHODS)} (default: all but the oracle)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3,
                        help="generations per prompt and method, interleaved (pooled; their spread is printed)")
    parser.add_argument("--limit-per-category", type=int, default=None, help="first N prompts of each category")
    parser.add_argument("--categories", default=None, help="comma-separated categories (default: all)")
    parser.add_argument("--budget", default="63", help="verification budget of the tree methods, or auto")
    add_clock_arguments(parser)
    add_growth_arguments(parser)
    parser.add_argument("--warmup-tokens", type=int, default=16, help="tokens of the untimed warm-up per method")
    parser.add_argument("--out", default=None, help="output folder (default: data/bench/<pair>-<timestamp>)")
    parser.add_argument("--json", action="store_true", help="print one JSON object of speedups")
    parser.add_argument("--resume", action="store_true",
                        help="continue the interrupted run in --out (the same flags): prompts it stored are not run "
                             "again; Token Recycling's matrix and the like go on from where the last stored prompt left them")
    parser.add_argument("--answers", default=None, metavar="DIR",
                        help="Spec-Bench mode: decode every turn of every question (the conversation so far) and "
                             "write one Spec-Bench answer file per method, DIR/<method>.jsonl (wall clock)")
    add_pair_arguments(parser)
    parser.set_defaults(prune=None, dtype=None)  # not given: chosen for the adaptive scheduler (`_choose`)
    for action in parser._actions:
        if action.dest in ("dtype", "prune"):
            action.help = f"{action.help}; default here: what the adaptive scheduler was trained for, else auto / topk"


def _choose(args: argparse.Namespace, methods: list[str], growth: dict) -> tuple[str | None, str]:
    """Set --dtype and --prune where not given: with adaptive among the methods, ones its scheduler
    was trained for; else auto and topk. Returns (why adaptive cannot run or None, the note to say on
    stderr once every setting has been checked)."""
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.schedule.choice import choose_settings

    if "adaptive" not in methods:
        args.dtype, args.prune = args.dtype or "auto", args.prune or "topk"
        return None, ""
    modelled = [c.strip() for c in args.model_on.split(",") if c.strip()]
    trees = DecodeConfig(**growth)
    name = None if (args.target or args.mid) else args.pair or DEFAULT_PAIR
    choice = choose_settings(name, device=args.device, dtype=args.dtype, prune=args.prune,
                             clock=modelled[0] if args.model_only and modelled else "wall", growth=trees.growth,
                             small=trees.small)
    args.dtype, args.prune = choice.dtype, choice.prune
    return (None if choice.offered or name is None else choice.note), f"bench: {choice.note}"


def run(args: argparse.Namespace) -> int:
    """Check every setting and the prompts, open the journal, load the pair, run the bench, save and print."""
    from treegraft_lab import bench
    from treegraft_lab.errors import TreeGraftError
    from treegraft_lab.paths import DATA_DIR

    methods = bench_methods(args.methods)
    if args.max_new_tokens < 1 or args.repeats < 1:
        raise TreeGraftError("--max-new-tokens and --repeats must be >= 1")
    budget = args.budget if args.budget == "auto" else int_or_auto(args.budget, "--budget")
    growth = growth_from_args(args)
    named = "adaptive" in methods and args.methods != ",".join(bench.DEFAULT_METHODS)  # asked for by name
    no_adaptive, note = _choose(args, methods, growth)
    if no_adaptive and not named:  # the default methods run without it, and say why
        methods.remove("adaptive")
    clocks = clocks_from_args(args)
    check_settings([bench.TREE_METHODS[m]["schedule"] for m in methods if m in bench.TREE_METHODS], budget, growth,
                   clocks)  # a bad setting is refused here, before any model loads
    if note:
        print(note, file=sys.stderr)
    if named:
        check_scheduler(args, clocks, growth)
    if args.answers:  # every check before a model loads
        check_answers(args, methods)
    prompts = bench_prompts(args)
    check_resume(args)
    journal = _journal(args, Path(args.out), methods, prompts) if args.out else None  # refused before any model loads
    pair = load_pair_from_args(args, require_mid=needs_mid(methods))
    settings = run_settings(pair, args)
    out = Path(args.out) if args.out else DATA_DIR / "bench" / f"{pair.name.replace('/', '_')}-{time.strftime('%Y%m%d-%H%M%S')}"
    journal = journal or _journal(args, out, methods, prompts)
    journal.check(settings)  # the pair (and the pocket drafter's training step) the run began with
    cli = sys.argv[1:] if sys.argv[1:2] == ["bench"] else ["bench", "..."]  # "...": called from Python
    settings["command"] = journal.once("command", lambda: "treegraft-lab " + shlex.join(a for a in cli if a != "--resume"))
    result, table = measured(pair, prompts, methods, args, budget, settings, growth, journal)
    if no_adaptive:
        result.skipped["adaptive"] = no_adaptive
    return save_and_print(args, result, table, out, journal)


def bench_methods(text: str) -> list[str]:
    """--methods as a list, refused in one line when it names an unknown method."""
    from treegraft_lab import bench
    from treegraft_lab.errors import TreeGraftError

    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in bench.METHODS]
    if unknown:
        raise TreeGraftError(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(bench.METHODS)}")
    return methods


def check_answers(args: argparse.Namespace, methods: list[str]) -> None:
    """--answers: the wall clock only, methods with per-forward accept lengths, a folder that can be written."""
    from treegraft_lab import specbench
    from treegraft_lab.errors import TreeGraftError

    if args.model_on:
        raise TreeGraftError("--answers times the wall clock, as Spec-Bench does: leave out --model-on")
    bad = [m for m in methods if m not in specbench.answer_methods()]
    if bad:
        raise TreeGraftError(f"--answers: {', '.join(bad)} expose(s) no per-forward accept lengths for Spec-Bench's "
                             f"answer files; use methods from {', '.join(specbench.answer_methods())}")
    specbench.check_writable(args.answers)


def bench_prompts(args: argparse.Namespace) -> list[dict]:
    """The prompts of --prompts / --split / --categories / --limit-per-category, checked, and the pair's name checked."""
    from treegraft_lab.prompts import load_prompts

    cats = args.categories.split(",") if args.categories else None
    prompts = load_prompts(args.prompts, split=args.split, categories=cats, per_category=args.limit_per_category)
    check_prompts(prompts, args)
    check_pair(None if args.target else args.pair)
    return prompts


def check_resume(args: argparse.Namespace) -> None:
    """--resume needs --out, and an --out that holds an interrupted run."""
    from treegraft_lab.errors import TreeGraftError

    if args.resume and not args.out:
        raise TreeGraftError("--resume continues the run in --out: give the folder the interrupted run wrote to "
                             "(the line it printed names it)")
    if args.resume and (Path(args.out) / "records.parquet").is_file() and not (Path(args.out) / "partial").is_dir():
        raise TreeGraftError(f"--resume: {args.out} holds a complete run and nothing interrupted: leave out --resume "
                             "to run it again")


def needs_mid(methods: list[str]) -> bool:
    """Whether any of the methods drafts with the mid drafter."""
    return any(m not in ("ar", "hf-pld", "small", "recycling", "suffix") for m in methods)


def run_settings(pair, args: argparse.Namespace) -> dict:
    """What the results record of the run: the pair, its models, the pocket drafter's training step, the prompts."""
    return {"pair": pair.name, "target": getattr(pair, "target_id", ""), "mid": getattr(pair, "mid_id", ""),
            **_drafter_info(getattr(pair, "mid_id", "")), "prompt_suite": str(args.prompts), "split": args.split,
            "limit_per_category": args.limit_per_category}


def measured(pair, prompts: list[dict], methods: list[str], args: argparse.Namespace, budget, settings: dict,
             growth: dict, journal):
    """(result, Spec-Bench table): the bench run (or the answer files written); a Ctrl-C says how many prompts
    are stored."""
    from treegraft_lab import bench, specbench

    try:
        if args.answers:
            return _answers(pair, prompts, methods, args, budget, settings, growth, journal)
        result = bench.run_bench(pair, prompts, methods, args.max_new_tokens, args.repeats, budget,
                                 args.warmup_tokens, prune=args.prune, progress=True, settings=settings,
                                 model_on=[c.strip() for c in args.model_on.split(",") if c.strip()],
                                 prune_modelled=args.prune_modelled, model_only=args.model_only, growth=growth,
                                 journal=journal)
        return result, specbench.speedup_table(specbench.records_per_question(result.records))
    except KeyboardInterrupt:
        print(journal.interrupted("bench", f"{journal.count()} of {len(prompts)} prompts"), file=sys.stderr)
        raise


def save_and_print(args: argparse.Namespace, result, table, out: Path, journal) -> int:
    """Save the results and specbench.md to `out`, close the journal, print the JSON or the tables."""
    from treegraft_lab import bench, specbench

    bench.save(result, out)
    md = "## Spec-Bench speedup per task group (wall clock)\n\n" + specbench.speedup_markdown(table)
    (out / "specbench.md").write_text(md + "\n", encoding="utf-8")
    journal.close()
    if args.json:
        per = {g: {r.method: round(float(r.speedup), 4) for r in t.itertuples()} for g, t in table.groupby("group", sort=False)}
        print(json.dumps({**result.to_json(), "specbench": per}))
        return 0
    print(bench.render_markdown(result))
    print("\n" + md)
    if args.answers:
        print("\n" + specbench.overall_line(table))
        print(f"\n-- Spec-Bench answer files in {args.answers}")
    print(f"\n-- saved to {out}")
    return 0


def _journal(args: argparse.Namespace, out: Path, methods: list[str], prompts: list[dict]):
    """The run's journal in out/partial (`resume.Journal`), stored with every flag that changes what is
    run, the methods that run and the prompts' digest."""
    from treegraft_lab import resume

    settings = {**resume.flags(args, ("out", "json")), "methods run": methods, "prompts digest": resume.digest(prompts)}
    return resume.Journal.open(out / "partial", settings, resume.command(args, "bench", "--out", out), args.resume,
                               "bench", "--out")


def _answers(pair, prompts, methods, args, budget, settings, growth, journal):
    """Spec-Bench mode: answer files written, then the bench's tables and Spec-Bench's from them."""
    import os

    from treegraft_lab import bench, specbench

    meta = {"hardware": bench.hardware(pair), "load_start": journal.once("load_start", os.getloadavg),
            "started": journal.once("started", lambda: time.strftime("%Y-%m-%d %H:%M:%S"))}
    records = specbench.answer_questions(pair, prompts, methods, args.answers, args.max_new_tokens, budget, args.prune,
                                         warmup_tokens=args.warmup_tokens, progress=True, growth=growth, journal=journal)
    if journal.resumed():
        meta["resumed"] = journal.resumed()
    meta.update(load_end=os.getloadavg(), finished=time.strftime("%Y-%m-%d %H:%M:%S"), budgets={}, skipped={},
                settings={**settings, "methods": list(dict.fromkeys(["ar", *methods])), "max_new_tokens": args.max_new_tokens,
                          "budget": budget, "prune": args.prune, "answers": str(args.answers),
                          "turns": "every turn, conversation so far (Spec-Bench)"})
    answers, _ = specbench.read_answers(args.answers)
    answers = {m: answers[m] for m in meta["settings"]["methods"]}  # this run's files, read back
    return bench.BenchResult(records, bench.summarize(records), meta), specbench.speedup_table(specbench.per_question(answers, pair.tokenizer))


def _drafter_info(mid_id: str) -> dict:
    """The pocket drafter's training step and tokens seen (it changes while it trains)."""
    from pathlib import Path

    rec = Path(mid_id) / "training_record.json" if mid_id else None
    if rec is None or not rec.is_file():
        return {}
    d = json.loads(rec.read_text())
    return {"mid_step": d.get("step"), "mid_tokens_seen": d.get("tokens_seen")}
