"""`treegraft-lab regime`: where WHEN matters, on a map of cost ratios T_mid / T_tgt.

    treegraft-lab regime --collect --per-category 2 --starts 24       # replays, once (model runs)
    treegraft-lab regime --decode --ratios 0.02:1:6,0.6               # adaptive decodes (model runs)
    treegraft-lab regime --figure map.png                             # price the replays anywhere

Replays of every schedule from the round starts of eval prompts are stored once (top-k pruning,
the lookup growth by default) and priced on `--profile` with its mid curve scaled to each ratio
(treegraft_lab.regime); `--decode` runs real decodes with scheduler artifacts at those ratios on
the modelled clock and stores them beside the replays; the map reads both. Each replayed prompt and
each decode is stored in the replay folder's partial/ as it finishes (`treegraft_lab.resume`); an
interrupted --collect / --decode continues with `--resume` (the same flags).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from treegraft_lab import engine
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.paths import DATA_DIR, SCHEDULER_DIR
from treegraft_lab.presets import DEFAULT_PAIR, REGIME_SCHEDULES

RATIOS_DEFAULT = "0.02:1:11,0.6"
CAPTURE_MIDS = ("smollm2-pocket", "smollm2-cut28", "smollm2-int8", "smollm2-self")  # every mid drafter with stored replays
CAPTURE_RATIOS = "0.02:1:6,0.6"  # the ratios the schedulers' decodes are stored at


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pair", default=DEFAULT_PAIR, help="model pair (default: %(default)s)")
    parser.add_argument("--replays", type=Path, default=None,
                        help="folder of stored replays (default: data/regime/<pair>-<growth>-topk)")
    parser.add_argument("--collect", action="store_true", help="replay the prompts' round starts and store them")
    parser.add_argument("--decode", action="store_true", help="decode the prompts with --scheduler at each ratio and store it")
    parser.add_argument("--prompts", default="treegraft-suite", help="prompt suite or .jsonl file")
    parser.add_argument("--per-category", type=int, default=2, help="eval prompts per category (default: %(default)s)")
    parser.add_argument("--split", choices=("eval", "validation"), default="eval",
                        help="the prompts' split: eval, or validation (held out from every fit, for a map that "
                             "tests schedulers on prompts training never read; suite treegraft-validation)")
    parser.add_argument("--max-new", type=int, default=64, help="new tokens per prompt (default: %(default)s)")
    parser.add_argument("--starts", type=int, default=None,
                        help="round starts replayed per prompt (default: all); the endpoints' and 10101's walks always")
    parser.add_argument("--growth", default="lookup", choices=("lookup", "full", "release", "compact"))
    parser.add_argument("--profile", default="a100-paper", help="base profile whose mid curve is scaled (default: %(default)s)")
    parser.add_argument("--ratios", default=RATIOS_DEFAULT, metavar="LO:HI:N,R",
                        help="T_mid/T_tgt: N log-spaced from LO to HI and single ratios (default: %(default)s)")
    parser.add_argument("--schedules", default=REGIME_SCHEDULES,
                        help="replay-priced schedules: all-small, all-mid, oracle, best-fixed, or masks (default: %(default)s)")
    parser.add_argument("--scheduler", action="append", default=None, metavar="NAME=FOLDER",
                        help="artifact folder, or a switching rule with its value (rule:match=2), for --decode "
                             "(repeatable; default: adaptive-family and adaptive-single)")
    parser.add_argument("--figure", type=Path, default=None, help="write the map's figure (PNG)")
    parser.add_argument("--steps-figure", type=Path, default=None,
                        help="write which draft steps the oracle and adaptive-family call the mid drafter at (PNG)")
    parser.add_argument("--markdown", action="store_true",
                        help="also print the map as a markdown table (docs/results.md's), adaptive-family as its focus")
    parser.add_argument("--mids", default=None, metavar="PAIR,PAIR",
                        help="the map over mid drafters too: pairs whose replays are stored (data/regime/<pair>-<growth>-topk), "
                             "each placed at its card's greedy agreement; prints (agreement x ratio) cells")
    parser.add_argument("--capture", action="store_true",
                        help="how much of the oracle's gain each scheduler takes on the map over mid drafters (the "
                             f"stored replays and decodes, no model runs; --mids default: {','.join(CAPTURE_MIDS)}, "
                             f"--ratios default: {CAPTURE_RATIOS})")
    parser.add_argument("--json", action="store_true", help="with --capture: print one JSON object")
    parser.add_argument("--learn", action="store_true",
                        help="learn WHEN from the oracle on the held-out replays (--replays, default: the validation "
                             f"split's), cross-fitted over their prompts at --ratios (default: {CAPTURE_RATIOS}), every "
                             "learner and signal set; store the held-out "
                             "walks and the learned scheduler (data/scheduler/<pair>/stepwise-topk-lookup; schedule=\"learned\")")
    parser.add_argument("--heatmap", type=Path, default=None,
                        help="with --mids: write the heatmap over (agreement, T_mid / T_tgt) (PNG)")
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted --collect / --decode in the replay folder (the same flags): "
                             "prompts and decodes it stored are not run again")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads (0: torch default; on Ray: per unit, default 1)")
    engine.add_arguments(parser)


def _ratios(text: str) -> list[float]:
    """"LO:HI:N" (N log-spaced) and single ratios, comma-separated, sorted."""
    from treegraft_lab.regime import log_ratios

    out = []
    try:
        for part in text.split(","):
            if ":" in part:
                lo, hi, n = part.split(":")
                out += log_ratios(float(lo), float(hi), int(n))
            else:
                out.append(float(part))
    except ValueError:
        raise TreeGraftError(f"--ratios {text!r}: write LO:HI:N and/or single ratios, e.g. 0.02:1:11,0.6") from None
    if not out or not all(0 < r < 100 for r in out):
        raise TreeGraftError(f"--ratios {text!r}: ratios must be > 0")
    return sorted(set(out))


def _schedulers(args: argparse.Namespace) -> dict:
    """--scheduler NAME=FOLDER|SCHEDULE (repeatable), or the pair's family and single-profile artifacts."""
    bad = [s for s in args.scheduler or [] if "=" not in s or not s.split("=", 1)[0]]
    if bad:
        raise TreeGraftError(f"--scheduler {bad[0]!r}: write NAME=FOLDER or NAME=SCHEDULE, e.g. family=data/scheduler/"
                             f"{args.pair}/family-topk-{args.growth} or match=rule:match=2")
    return dict(s.split("=", 1) for s in args.scheduler or []) or {
        "adaptive-family": SCHEDULER_DIR / args.pair / f"family-topk-{args.growth}",
        "adaptive-single": SCHEDULER_DIR / args.pair / f"{args.profile}-topk-{args.growth}"}


def _capture(args: argparse.Namespace, base) -> int:
    """`--capture`: per scheduler (the decoded ones and the switching rules), its capture of the oracle's gain
    over the better endpoint in the cells where the oracle is >= 1.15x it (`regime.capture`), from the stored
    map over mid drafters; `--json`: one JSON object."""
    from treegraft_lab import regime
    from treegraft_lab.commands.common import check_pair

    if args.collect or args.decode:
        raise TreeGraftError("--capture reads the stored map only: run --collect / --decode without it first")
    pairs = [p for p in (args.mids or ",".join(CAPTURE_MIDS)).split(",") if p]
    for p in pairs:
        check_pair(p)
    ratios = _ratios(CAPTURE_RATIOS if args.ratios == RATIOS_DEFAULT else args.ratios)
    ax = regime.mid_axis(pairs, base, ratios, args.growth, regime.MAP_SCHEDULERS, args.pair, tuple(args.schedules.split(",")))
    split = f"eval: {len(ax.prompts)} prompts held by every mid drafter's replays ({', '.join(ax.prompts)}), first {ax.max_new} tokens"
    out = {}
    for name in [*ax.schedulers, *ax.rules]:
        cap = regime.capture(ax.cells, name)
        out[name] = {**cap, "split": split, "prompts": len(ax.prompts)}
    from treegraft_lab.training.imitation import held_out_capture

    out.update(held_out_capture(regime.held_out_folder(args.pair, args.growth), base, regime.map_config(args.growth)))
    if args.json:
        print(json.dumps({"schedulers": out, "profile": base.name, "ratios": ratios, "mids": pairs, "notes": ax.notes},
                         default=lambda x: None))
        return 0
    print(f"capture of the oracle's gain over the better endpoint (S - better) / (oracle - better), modelled on {base.name}; "
          f"{split}")
    for name, cap in out.items():
        ci = f" (95% interval over prompts {cap['ci95'][0]:.0%} to {cap['ci95'][1]:.0%})" if "ci95" in cap else ""
        print(regime.capture_text(cap, name) + ci + f" [{cap['split'].split(':')[0]}]")
    return 0


def run(args: argparse.Namespace) -> int:
    """The map's steps: refuse what cannot run together, collect / decode where asked, then print the map."""
    from treegraft_lab import costs, regime

    ratios = _ratios(args.ratios)
    folder = args.replays or regime.replay_folder(args.pair, args.growth)
    base = costs.load(args.profile)
    cfg = regime.map_config(args.growth, args.profile)
    if args.learn:
        return _learn(args, base, cfg, _ratios(CAPTURE_RATIOS if args.ratios == RATIOS_DEFAULT else args.ratios))
    if args.capture:
        return _capture(args, base)
    if args.json:
        raise TreeGraftError("--json prints the capture: give --capture too")
    if args.mids is not None:
        return _mid_axis(args, base, cfg, ratios)
    if args.heatmap:
        raise TreeGraftError("--heatmap draws the map over mid drafters: give --mids PAIR,PAIR too")
    if args.collect or args.decode:
        collect_and_decode(args, folder, base, cfg, ratios)
    if args.decode and not (folder / "replays.parquet").is_file():
        return 0  # decoded before the replays were collected: the map waits for them
    print_map(args, folder, base, cfg, ratios)
    return 0


def checked_prompts(args: argparse.Namespace) -> list[dict]:
    """The prompts of --prompts / --split / --per-category, refused in one line when there are none."""
    from treegraft_lab import load_prompts

    prompts = load_prompts(args.prompts, split=args.split, per_category=args.per_category)
    if not prompts:
        raise TreeGraftError(f"no {args.split} prompts in {args.prompts!r}: the validation split is the suite "
                             f"treegraft-validation (--prompts treegraft-validation --split validation)")
    return prompts


def collect_and_decode(args: argparse.Namespace, folder: Path, base, cfg, ratios: list[float]) -> None:
    """`--collect` / `--decode`: every flag checked and the journal opened before the pair loads, then the
    replays and the decodes stored in `folder`; a Ctrl-C says how many are stored."""
    import torch

    from treegraft_lab import load_pair, regime
    from treegraft_lab.commands.common import check_pair, check_positive

    check_pair(args.pair)
    check_positive(max_new=args.max_new, starts=args.starts)
    schedulers = _schedulers(args)
    if args.decode:
        regime.resolve_schedulers(schedulers, cfg.depth)  # a bad one is refused before any model loads
    prompts = checked_prompts(args)
    runs_on = engine.from_args(args, threads=args.threads or 1)
    if args.threads and not runs_on.workers:
        torch.set_num_threads(args.threads)
    journal = _journal(args, folder, prompts, schedulers)  # an interrupted run is refused before any model loads
    # in this process the pair loads here; on Ray each worker loads it once (`engine.PairLoader`)
    pair = load_pair(args.pair, device=args.device, dtype=args.dtype) if not runs_on.workers else \
        pair_loader(args.pair, args.device, args.dtype)
    meta = replay_meta(args, cfg, str(pair.dtype if not runs_on.workers else pair.planned_dtype()))
    seconds, t0 = {}, time.perf_counter()
    try:
        if args.collect:
            have = regime.load(folder)[0] if (folder / "replays.parquet").is_file() else None
            df = regime.collect(pair, prompts, cfg, args.max_new, args.starts, ("00000", "11111", "10101"), have,
                                profile=base, journal=journal, engine=runs_on, seconds=seconds)
            regime.save(df, folder, {**meta, "starts_cap": args.starts})
        if args.decode:
            folder.mkdir(parents=True, exist_ok=True)
            for name, path in schedulers.items():  # one file per scheduler: runs for other ratios are kept
                runs = regime.decode(pair, prompts, cfg, regime.ratio_profiles(base, ratios), {name: path}, args.max_new,
                                     journal=journal, engine=runs_on, seconds=seconds)
                store_decodes(folder / f"decodes-{base.name}-{name}.parquet", runs, ratios)
    except KeyboardInterrupt:
        print(journal.interrupted("regime", stored_words(args, journal, len(prompts), len(ratios), len(schedulers))),
              file=sys.stderr)
        raise
    journal.close()
    print(f"regime: {engine.timing_words(seconds, time.perf_counter() - t0, runs_on)}", file=sys.stderr)


def replay_meta(args: argparse.Namespace, cfg, dtype: str) -> dict:
    """What the stored replays record of how they were made (the decode settings without the clock)."""
    return {"pair": args.pair, "prompts": args.prompts, "split": args.split, "per_category": args.per_category,
            "max_new": args.max_new, "decode": {k: v for k, v in cfg.to_dict().items() if k != "clock"}, "dtype": dtype}


def store_decodes(path: Path, runs, ratios: list[float]) -> None:
    """Write one scheduler's decodes to `path`, keeping its stored runs at ratios other than `ratios`."""
    import pandas as pd

    if path.is_file():
        prev = pd.read_parquet(path)
        runs = pd.concat([prev[~prev["ratio"].isin(ratios)], runs], ignore_index=True)
    runs.to_parquet(path, index=False)


def stored_words(args: argparse.Namespace, journal, n: int, n_ratios: int, n_schedulers: int) -> str:
    """How much an interrupted --collect / --decode stored, in words ("3 of 8 prompts replayed and ...")."""
    done = [f"{journal.count('collect/')} of {n} prompts replayed"] if args.collect else []
    done += [f"{journal.count('decode/')} of {n * n_ratios * n_schedulers} decodes (a prompt at a ratio "
             "with a scheduler)"] if args.decode else []
    return " and ".join(done)


def print_map(args: argparse.Namespace, folder: Path, base, cfg, ratios: list[float]) -> None:
    """The stored replays (and decodes) priced at the ratios: the table, the oracle's band and crossing, and
    the markdown table and figures asked for."""
    import pandas as pd

    from treegraft_lab import costs, regime

    df, _ = regime.load(folder)
    reps = regime.split(df, cfg.depth)
    rows = regime.priced(reps, base, ratios, args.schedules.split(","))
    runs = regime.load_decodes(folder, base.name, reps, ratios)  # the replayed prompts at the asked ratios
    m = regime.by_ratio(pd.concat([rows, runs]))
    table = m.pivot_table(index="ratio", columns="schedule", values="speedup", sort=False)
    print(f"speedup over plain decoding, modelled on {base.name} with T_mid/T_tgt scaled; {len(reps)} prompts")
    print(table.round(3).to_string())
    band, cross = regime.oracle_band(m), regime.crossing(m)
    print(json.dumps({"oracle_band": band, "crossing": cross,
                      "best_fixed": m[m.schedule == "best-fixed"].set_index("ratio")["mask"].to_dict() if "mask" in m else {}}))
    if args.markdown:
        tt, tm = costs.scheduler_costs(base, cfg)
        print(regime.markdown(m, marks={base.name: tm / tt}))
    if args.figure:
        write_map_figure(args, m, band, base, cfg, len(reps))
    if args.steps_figure:
        write_steps_figure(args, regime.step_shares(pd.concat([rows, runs])), base, cfg, len(reps))


def write_map_figure(args: argparse.Namespace, m, band: list[float], base, cfg, n_prompts: int) -> None:
    """--figure: the map's figure, with a100-paper's and (where measured) this CPU's ratio and curve."""
    from treegraft_lab import costs
    from treegraft_lab.viz.regime import cpu_curve_name, regime_figure

    cpu = DATA_DIR / "regime" / "cpu-epyc-float32.json"
    t = {n: costs.scheduler_costs(p, cfg) for n, p in [("a100-paper", costs.load("a100-paper"))]
         + ([("this CPU", costs.load(cpu))] if cpu.is_file() else [])}
    marks = {n: tm / tt for n, (tt, tm) in t.items()}
    curves = {"a100-paper": costs.load("a100-paper"),
              **({cpu_curve_name(costs.load(cpu)): costs.load(cpu)} if cpu.is_file() else {})}
    fig = regime_figure(m, band, marks, curves, f"{args.pair}, {n_prompts} eval prompts, {args.max_new} tokens, "
                                               f"top-k 63, {args.growth} growth; modelled on {base.name}")
    args.figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.figure, dpi=110)
    print(f"figure: {args.figure}")


def write_steps_figure(args: argparse.Namespace, shares, base, cfg, n_prompts: int) -> None:
    """--steps-figure: which draft steps the oracle and adaptive-family call the mid drafter at."""
    from treegraft_lab import costs
    from treegraft_lab.viz.regime import steps_figure

    tt, tm = costs.scheduler_costs(base, cfg)
    fig = steps_figure(shares, ["oracle", "adaptive-family"], {base.name: tm / tt},
                       f"{args.pair}, {n_prompts} eval prompts, {args.max_new} tokens; modelled on {base.name}")
    args.steps_figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.steps_figure, dpi=110)
    print(f"steps figure: {args.steps_figure}")


def pair_loader(name: str, device: str, dtype: str):
    """How each Ray worker loads the pair (`engine.PairLoader`); a test swaps in its own."""
    from treegraft_lab.engine import PairLoader

    return PairLoader(name, device, dtype)


def _journal(args: argparse.Namespace, folder: Path, prompts: list[dict], schedulers: dict):
    """The replay folder's journal of this --collect / --decode (`resume.Journal`): stored with every flag
    that changes what is collected or decoded, the prompts' and the scheduler artifacts' digests."""
    from treegraft_lab import resume

    skip = ("replays", "figure", "steps_figure", "markdown", "mids", "heatmap", "schedules", "threads", "scheduler",
            "workers", "address", "no_ray")  # where the units run changes nothing they compute
    settings = {**resume.flags(args, skip), "prompts digest": resume.digest(prompts),
                "--scheduler": {n: [str(p), resume.digest(p)] for n, p in schedulers.items()} if args.decode else None}
    return resume.Journal.open(folder / "partial", settings, resume.command(args, "regime"), args.resume, "regime",
                               "--replays")


def _mid_axis(args: argparse.Namespace, base, cfg, ratios: list[float]) -> int:
    """`--mids`: price every pair's stored replays (and the family and map schedulers' stored decodes) at
    the ratios; print the (agreement x ratio) cells, the switching rules' and each scheduler's acceptance count, and
    draw the heatmap with `--heatmap`. No model runs."""
    from treegraft_lab import costs, regime
    from treegraft_lab.commands.common import check_pair

    if args.collect or args.decode or args.replays:
        raise TreeGraftError("--mids reads stored replays only: collect each pair with --pair PAIR --collect first")
    pairs = [p for p in args.mids.split(",") if p]
    if not pairs:
        raise TreeGraftError("--mids: name the pairs, e.g. --mids smollm2-pocket,smollm2-int8,smollm2-self")
    for p in pairs:
        check_pair(p)
    ax = regime.mid_axis(pairs, base, ratios, args.growth, regime.MAP_SCHEDULERS, args.pair, tuple(args.schedules.split(",")))
    for p, (_, a) in zip(pairs, _agreements(ax.cells, pairs)):
        print(f"{p}: agreement {a:.3f} (its card), {len(ax.prompts)} common eval prompts, first {ax.max_new} tokens; "
              f"replays collected on {ax.cpus[p]}")
    for note in ax.notes:
        print(note)
    print(f"oracle / better endpoint, then {' / '.join(ax.schedulers)} / better endpoint where priced (S: all-small "
          f"better, M: all-mid better), modelled on {base.name} with T_mid/T_tgt scaled")
    print(regime.cells_markdown(ax.cells, ax.schedulers))
    if ax.rules:
        print(f"the switching rules fitted beside {args.pair}'s scheduler, over the better endpoint "
              f"(oracle first): {', '.join(ax.rules)}")
        print(regime.cells_markdown(ax.cells, ax.rules))
    for name in ax.schedulers:
        print("acceptance: " + regime.acceptance_text(regime.acceptance(ax.cells, name), name))
    if args.heatmap:
        from treegraft_lab import paper
        from treegraft_lab.viz.regime import mid_axis_figure, mid_axis_title

        tt, tm = costs.scheduler_costs(base, cfg)
        fig = mid_axis_figure(ax.cells, ax.scheduler, {base.name: tm / tt}, mid_axis_title(ax, base.name, args.growth),
                              paper=paper.MAIN, paper_how=paper.MAIN_HOW)
        args.heatmap.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.heatmap, dpi=110)
        print(f"heatmap: {args.heatmap}")
    return 0


def _agreements(c, pairs: list[str]) -> list[tuple[str, float]]:
    a = c.drop_duplicates("mid").set_index("mid")["agreement"]
    return [(p, float(a[p])) for p in pairs]


def _signals(folder: Path, df, meta: dict, pair_name: str, args):
    """The replays' context signals per start (`imitation.context_signals`), computed once (one target
    forward a prompt) and stored beside them as signals.parquet."""
    import pandas as pd

    from treegraft_lab import load_pair, load_prompts
    from treegraft_lab.training.imitation import context_signals

    path = folder / "signals.parquet"
    if path.is_file():
        have = pd.read_parquet(path)
        if set(df["qid"]) <= set(have["qid"]):
            return have
    prompts = load_prompts(meta["prompts"], split=meta.get("split", "eval"), per_category=meta.get("per_category"))
    sig = context_signals(load_pair(pair_name, device=args.device, dtype=args.dtype), prompts, df)
    sig.to_parquet(path, index=False)
    return sig


def _learn(args: argparse.Namespace, base, cfg, ratios: list[float]) -> int:
    """`--learn`: every learner x signal set cross-fitted over the held-out prompts (`imitation.learn`),
    the held-out walks and learners.json stored beside the held-out replays, the best one refitted on
    every prompt and stored as the learned scheduler."""
    from datetime import date

    import pandas as pd

    from treegraft_lab import regime
    from treegraft_lab.schedule.stepwise import learned_folder, signal_set
    from treegraft_lab.training import imitation as im

    if args.growth != "lookup":
        raise TreeGraftError("--learn learns on the lookup growth's replays (the map's settings): drop --growth")
    t0 = time.time()
    held_dir = args.replays or regime.held_out_folder(args.pair, args.growth)
    extra_dir = regime.replay_folder(args.pair, args.growth)
    held_df, held_meta = regime.load(held_dir)
    extra_df, extra_meta = regime.load(extra_dir)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    held = im.prompts_of(regime.split(held_df, cfg.depth), _signals(held_dir, held_df, held_meta, args.pair, args))
    extra = im.prompts_of(regime.split(extra_df, cfg.depth), _signals(extra_dir, extra_df, extra_meta, args.pair, args))
    whole = [p for p in held if im.complete(p)]
    if len(whole) < len(held):
        print(f"{len(held) - len(whole)} held-out prompts lack replayed starts: left out ({len(whole)} kept)")
    profiles = regime.ratio_profiles(base, ratios)
    runs_on = engine.from_args(args)  # each (learner, signal set, fold) a unit of one torch thread
    walks, rows = im.learn(whole, extra, profiles, cfg, engine=runs_on)
    walks.to_parquet(held_dir / im.WALKS.format(profile=base.name), index=False)
    best = max((r for r in rows if r["causal"]), key=lambda r: r["mean_capture"])
    final = im.train(whole + extra, profiles, cfg, list(signal_set(best["signal_set"])), best["learner"],
                     name=f"stepwise-{best['learner']}")
    final.doc.update({"name": final.name, "profile": base.name, "depth": cfg.depth, "width": cfg.width, "ratios": ratios,
                      "signal_set": best["signal_set"],
                      "trained_on": {"held_out": [p.qid for p in whole], "extra": [p.qid for p in extra]},
                      "held_out_capture": {k: best[k] for k in ("mean_capture", "ci95", "cells", "below_098")}})
    out = learned_folder(args.pair)
    final.save(out)
    (held_dir / im.SUMMARY).write_text(json.dumps({"profile": base.name, "ratios": ratios, "prompts": len(whole),
                                                    "commands": ["treegraft-lab regime --learn"], "machine": _machine(runs_on),
                                                    "date": date.today().isoformat(), "minutes": round((time.time() - t0) / 60, 1),
                                                    "learners": rows, "chosen": f"{best['learner']}:{best['signal_set']}",
                                                    "scheduler": str(out)}, indent=1, default=float) + "\n")
    (out / "CARD.md").write_text(_card(rows, best, final, whole, extra, base, ratios, time.time() - t0, runs_on))
    print(pd.DataFrame(rows)[["learner", "signal_set", "causal", "mean_capture", "ci95", "cells", "below_098"]].to_string(index=False))
    print(f"chosen: {best['learner']} on {best['signal_set']} ({final.parameters} parameters): {out}")
    return 0


def _card(rows: list[dict], best: dict, final, held, extra, base, ratios: list[float], seconds: float, runs_on) -> str:
    """The learned scheduler's card: how it was made and what it takes of the oracle's gain on held-out prompts."""
    from datetime import date

    lines = [f"| {r['learner']} | {r['signal_set']} | {'yes' if r['causal'] else 'no (hindsight: a diagnostic)'} | "
             f"{r['mean_capture']:.0%} | {r['ci95'][0]:.0%} to {r['ci95'][1]:.0%} | {r['cells']} | {r['below_098']} |"
             for r in rows]
    return f"""# The learned scheduler (stepwise-topk-lookup)

`schedule="learned"` loads it. A per-step scheduler (`treegraft_lab.schedule.stepwise`): one hidden layer of
{final.doc['hidden']} tanh units, {final.parameters} parameters, kind `{final.kind}`, inputs ({len(final.features)}):
{', '.join(final.features)}. Decided before each draft step of a round (not in a generation's first round);
its online cost is one {len(final.features)}x{final.doc['hidden']} matrix product a step.

How it was made: `treegraft-lab regime --learn` on {date.today().isoformat()}, {_machine(runs_on)}, {seconds / 60:.0f} min.
It learns from the oracle of the stored replays (the cheapest walk over every round start, a100-paper with the mid
curve scaled to T_mid / T_tgt = {', '.join(f'{r:g}' for r in ratios)}): at each step, Q0 and Q1 are the costs of the best
masks that continue small and mid from there. Imitation learns which is lower (weighted by their gap); the value
route regresses the margin Q0 - Q1 in verifications and calls the mid drafter where it is positive. This one is kind
`{final.kind}`. {final.doc.get('dagger', 0)} DAgger rounds add the states the learner reaches itself. Trained on
every prompt of the pocket drafter's held-out replays ({len(held)} validation prompts) and its eval replays
({len(extra)} prompts), the map's settings: top-k at 63, the lookup growth, D 5, W 10, the n-gram small drafter. Decoding off
those settings or off {base.name}'s costs (a measured CPU profile, value pruning, another small drafter), `schedule="learned"`
falls back to all-small and says so in one line (`stepwise.untrained_reason`).

Which learner and signal set: the grouped cross-fit below, on the held-out prompts (6 folds; each prompt walked
by a learner that never read it; the eval replays always in training); the best that reads only the past was
refitted on every prompt. Capture = (scheduler - better endpoint) / (oracle - better endpoint), the mean over the
cells (ratios) where the oracle is >= 1.15x the better endpoint; the interval is a bootstrap over prompts.

| learner | signal set | reads only the past | mean capture | 95% interval | cells | below 0.98x |
|---|---|---|---|---|---|---|
{chr(10).join(lines)}

Chosen: {best['learner']} on {best['signal_set']}. The same numbers: `treegraft-lab regime --capture`.
"""


def _machine(runs_on=None) -> str:
    """This CPU, its vector extensions and cores (`bench.hardware`), and where the units ran, as the learned
    scheduler's provenance names them."""
    from treegraft_lab.bench import hardware

    h = hardware()
    where = f", {runs_on.words()}" if runs_on is not None else ""
    return f"{h['cpu']}, CPU flags {h['cpu_isa']}, {h['cores']} cores{where}"
