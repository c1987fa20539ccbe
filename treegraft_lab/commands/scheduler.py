"""`treegraft-lab scheduler info | replay | compare`: what a trained scheduler is, and what it buys.

info: parameter count, signals, CV table, R^2, and the decision overhead measured here.
replay: modelled tokens/s of its decisions on collected trajectories (e.g. of eval prompts).
compare: a small interleaved tokens/s comparison of schedules on real decodes.

overhead_share = median decision time of g_psi (feature computation included: a fresh
StepContext computes its signals inside `decide`) / median target verification time (forward
and acceptance), both measured on this machine during one short adaptive decode.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from treegraft_lab.commands.common import add_prune_argument
from treegraft_lab.presets import DEFAULT_PAIR


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="scheduler_command", metavar="ACTION")
    p = sub.add_parser("info", help="parameter count, signals, CV table, R^2, decision overhead")
    p.add_argument("--pair", default=DEFAULT_PAIR, help="model pair (default: %(default)s)")
    p.add_argument("--path", type=Path, default=None,
                   help="artifact folder (default: data/scheduler/<pair>/<profile class>-<prune> of --clock, --prune)")
    p.add_argument("--clock", default="wall", help="the profile the artifact is for: wall (this device) or a name")
    p.add_argument("--prune", default="value", choices=("topk", "value"))
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-measure", action="store_true", help="skip the overhead measurement (no model loaded)")
    p.add_argument("--max-new", type=int, default=48, help="tokens decoded for the overhead measurement")
    r = sub.add_parser("replay", help="modelled tokens/s of the artifact's decisions on collected trajectories")
    r.add_argument("--pair", default=DEFAULT_PAIR)
    r.add_argument("--path", type=Path, default=None, help="artifact folder (default: as for info)")
    r.add_argument("--clock", default="wall", help="the profile the artifact is for: wall (this device) or a name")
    r.add_argument("--prune", default="value", choices=("topk", "value"))
    r.add_argument("--trajectories", type=Path, required=True, help="a merged trajectories.parquet (e.g. eval)")
    r.add_argument("--json", action="store_true")
    c = sub.add_parser("compare", help="small interleaved tokens/s comparison of schedules on real decodes")
    c.add_argument("--pair", default=DEFAULT_PAIR)
    c.add_argument("--split", default="eval", help="eval, validation, train or all")
    c.add_argument("--per-category", type=int, default=2, help="prompts per category")
    c.add_argument("--max-new", type=int, default=128)
    c.add_argument("--schedules", default="small,mid,10101,adaptive", help="comma-separated (oracle is slow)")
    c.add_argument("--threads", type=int, default=0)
    c.add_argument("--dtype", default="auto", help="auto (bf16 where the device supports it, else float32), bfloat16, float32")
    c.add_argument("--budget", default="63", help="B_ver for every schedule: a number or auto (default: %(default)s)")
    add_prune_argument(c)
    c.add_argument("--json", type=Path, default=None, help="also write the rows and table here")
    c.add_argument("--shard", default="0/1", help="i/n: decode prompts i, i+n, ... (one process per core)")
    c.add_argument("--merge", type=Path, nargs="+", default=None, metavar="JSON",
                   help="decode nothing: combine the --json files of finished shards into one table")


def measure_overhead(pair_name: str, folder: Path, max_new: int = 48) -> dict:
    """Decode one train prompt with the adaptive schedule; time every decision and verification."""
    from treegraft_lab import load_pair, load_prompts, measure
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.schedule.adaptive import settings_of

    pair = load_pair(pair_name)
    cfg = DecodeConfig(schedule="adaptive", scheduler_path=str(folder), **settings_of(folder))
    dec = TreeGraftDecoder(pair, cfg, profile=measure.resolve(cfg.clock, pair))
    policy, decide_ms = dec.policy, []
    inner = policy.decide

    def timed(ctx) -> bool:
        t = time.perf_counter()
        out = inner(ctx)
        decide_ms.append(1000 * (time.perf_counter() - t))
        return out

    policy.decide = timed
    prompt = load_prompts("treegraft-suite", split="train", limit=1)[0]["turns"][0]
    gen = dec.generate(prompt, max_new_tokens=max_new)
    verify_ms = [1000 * r.verify_s for r in gen.rounds]
    d, v = statistics.median(decide_ms), statistics.median(verify_ms)
    return {"overhead_share": d / v, "decide_ms_median": d, "verify_ms_median": v, "decisions": len(decide_ms),
            "rounds": len(verify_ms), "device": str(pair.device), "mid_calls_per_round": gen.stats["mid_calls_per_round"]}


def compare(args: argparse.Namespace) -> dict:
    """Decode each prompt with every schedule, rotating the order per prompt (interleaved).

    tokens/s = new tokens / (prefill + round times): the oracle's replays are not counted, so
    it is an upper bound in hindsight, not a usable schedule.
    """
    import torch

    from treegraft_lab import load_pair, load_prompts, measure
    from treegraft_lab.commands.collect import parse_shard
    from treegraft_lab.commands.common import (
        check_pair,
        check_positive,
        check_prompts,
        check_scheduler,
        check_settings,
        int_or_auto,
    )
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.errors import TreeGraftError

    k, n = parse_shard(args.shard)  # every setting is refused before any model loads
    budget = args.budget if args.budget == "auto" else int_or_auto(args.budget, "--budget")
    scheds = [s.strip() for s in args.schedules.split(",") if s.strip()]
    if not scheds:
        raise TreeGraftError(f"--schedules {args.schedules!r}: name at least one schedule, e.g. small,10101")
    check_settings(scheds, budget, {}, [("wall", args.prune)])  # a bad budget or schedule
    if "adaptive" in scheds:
        check_scheduler(args, [("wall", args.prune)], {})
    prompts = load_prompts("treegraft-suite", split=args.split, per_category=args.per_category)
    check_prompts(prompts, argparse.Namespace(prompts="treegraft-suite", split=args.split))
    check_positive(max_new=args.max_new)
    check_pair(args.pair)
    if args.threads:
        torch.set_num_threads(args.threads)
    pair = load_pair(args.pair, dtype=args.dtype)
    here = measure.resolve("wall", pair)  # resolved once, handed to every decoder
    decs = {s: TreeGraftDecoder(pair, DecodeConfig(schedule=s, budget=budget, prune=args.prune), profile=here) for s in scheds}
    rows = []
    for i, p in list(enumerate(prompts))[k::n]:
        for s in scheds[i % len(scheds):] + scheds[: i % len(scheds)]:
            g = decs[s].generate(p["turns"][0], max_new_tokens=args.max_new)
            t = g.stats["prefill_s"] + sum(r.round_s for r in g.rounds)
            rows.append({"qid": p["question_id"], "category": p["category"], "schedule": s, "tokens": len(g.token_ids),
                         "seconds": t, "tokens_per_round": g.stats["tokens_per_round"],
                         "mid_calls_per_round": g.stats["mid_calls_per_round"]})
            print(json.dumps(rows[-1]), flush=True)
    return {"rows": rows, "tokens_per_s": compare_table(rows, scheds), "threads": torch.get_num_threads(),
            "shard": args.shard, "schedules": scheds, "budgets": {s: d.budget for s, d in decs.items()}, "prune": args.prune,
            "dtype": str(pair.dtype)}


def compare_table(rows: list[dict], scheds: list[str]) -> dict:
    """tokens/s per category and overall: total tokens / total seconds of each schedule."""
    table: dict = {}
    for cat in ["overall", *sorted({r["category"] for r in rows})]:
        sub = [r for r in rows if cat == "overall" or r["category"] == cat]
        table[cat] = {s: sum(r["tokens"] for r in sub if r["schedule"] == s) / sum(r["seconds"] for r in sub if r["schedule"] == s)
                      for s in scheds}
    return table


def replay(args: argparse.Namespace, folder: Path) -> dict:
    """Follow the artifact's decisions down every round start's schedule tree (profile-timed)."""
    import numpy as np
    import pandas as pd
    import torch

    from treegraft_lab.schedule import artifact
    from treegraft_lab.training.distill import Student, compare_policies, replay_policy, student_net
    from treegraft_lab.training.value import Scaler, student_inputs

    art = artifact.load(folder)
    net = student_net(len(art.inputs))
    lin = [m for m in net if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for i, m in enumerate(lin):
            m.weight.copy_(art.weights[f"l{i + 1}.weight"])
            m.bias.copy_(art.weights[f"l{i + 1}.bias"])
    stu = Student(net.eval(), Scaler(np.array(art.x_mean, np.float32), np.array(art.x_std, np.float32)),
                  art.y_mean, art.y_std)
    df = pd.read_parquet(args.trajectories)
    chosen = replay_policy(df, lambda rows: stu.score(student_inputs(rows, art.signals, art.depth)) > 0, art.depth)
    res = compare_policies(df, chosen)
    res["schedules"] = chosen["schedule"].value_counts().head(10).to_dict()
    res["round_starts"] = int(df["state"].nunique())
    return res


def _print_table(rep: dict) -> None:
    cols = [k for k in rep if k != "by_category"]
    print(f"{'category':<16}" + "".join(f"{c:>10}" for c in cols))
    for name, row in [("overall", rep), *rep.get("by_category", {}).items()]:
        print(f"{name:<16}" + "".join(f"{row[c]:>10.2f}" for c in cols))


def run(args: argparse.Namespace) -> int:
    """`scheduler compare | replay | info`."""
    from treegraft_lab.errors import TreeGraftError

    if args.scheduler_command == "compare":
        return run_compare(args)
    if args.scheduler_command == "replay":
        return run_replay(args)
    if args.scheduler_command != "info":
        raise TreeGraftError("use `treegraft-lab scheduler info [--pair NAME] [--json]` or `scheduler compare`")
    return run_info(args)


def merged(files: list[Path], schedules: str) -> dict:
    """`compare --merge`: the rows of finished shards' --json files, and their tokens/s table."""
    parts = [json.loads(Path(f).read_text()) for f in files]
    rows = [r for part in parts for r in part["rows"]]
    scheds = parts[0].get("schedules") or schedules.split(",")
    return {"rows": rows, "tokens_per_s": compare_table(rows, scheds), "merged": [str(f) for f in files],
            "threads": [part.get("threads") for part in parts], "schedules": scheds}


def run_compare(args: argparse.Namespace) -> int:
    """`compare`: decode (or merge shards), write --json, print the tokens/s table."""
    res = merged(args.merge, args.schedules) if args.merge else compare(args)
    scheds = res["schedules"]
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    print(f"\n{'tokens/s':<16}" + "".join(f"{s:>10}" for s in scheds))
    for cat, row in res["tokens_per_s"].items():
        print(f"{cat:<16}" + "".join(f"{row[s]:>10.2f}" for s in scheds))
    return 0


def run_replay(args: argparse.Namespace) -> int:
    """`replay`: the artifact's decisions followed on --trajectories, as JSON or a table."""
    from treegraft_lab.schedule.adaptive import default_folder

    res = replay(args, args.path or default_folder(args.pair, args.clock, args.prune))
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        print(f"modelled tokens/s on {res['round_starts']} round starts of {args.trajectories}:")
        _print_table({k: v for k, v in res.items() if k not in ("schedules", "round_starts")})
        print("adaptive's schedules:", res["schedules"])
    return 0


def info_record(art, folder: Path) -> dict:
    """What `info` reports of an artifact: its shape, signals, CV and R^2 tables, margin offset and training."""
    m = art.meta
    return {"pair": art.pair, "path": str(folder), "params": art.params, "depth": art.depth, "inputs": art.inputs,
            "selected": art.signals, "candidates": m.get("candidates", []), "cv_table": m.get("cv_table", []),
            "cv": m.get("cv", {}), "r2": m.get("r2", {}), "student_cv": m.get("student_cv", {}),
            "replay_tokens_per_s": m.get("replay_tokens_per_s", {}), "margin_offset": m.get("margin_offset", {}),
            "training": m.get("training", {})}


def run_info(args: argparse.Namespace) -> int:
    """`info`: the artifact's record (and the decision overhead measured here), as JSON or in words."""
    from treegraft_lab.schedule import artifact
    from treegraft_lab.schedule.adaptive import default_folder

    folder = args.path or default_folder(args.pair, args.clock, args.prune)
    out = info_record(artifact.load(folder), folder)
    if not args.no_measure:
        out.update(measure_overhead(args.pair, folder, args.max_new))
    if args.json:
        print(json.dumps(out, indent=1, default=str))
        return 0
    print_info(out, folder)
    return 0


def print_info(out: dict, folder: Path) -> None:
    """`info` in words: the signals selected, the CV table, the R^2s, tau, replay tokens/s and the overhead."""
    print(f"scheduler for {out['pair']} ({folder}): {out['params']} parameters, depth {out['depth']}")
    print(f"selected {len(out['selected'])} of {len(out['candidates'])} signals: {', '.join(out['selected'])}")
    cv = out["cv"]
    print(f"\n{cv.get('folds', '?')}-fold CV grouped by {cv.get('grouped_by', '?')}, target {cv.get('target', '?')}: "
          f"R^2 base {cv.get('r2_base', float('nan')):.4f}, all ten {cv.get('r2_all', float('nan')):.4f}")
    print(f"{'rank':>4}  {'signal':<22}{'base+it':>9}{'gain':>9}{'all-it':>9}{'drop':>9}")
    for r in out["cv_table"]:
        mark = "*" if r["signal"] in out["selected"] else " "
        print(f"{r['rank']:>4}{mark} {r['signal']:<22}{r['r2_base_plus']:>9.4f}{r['gain']:>9.4f}"
              f"{r['r2_all_minus']:>9.4f}{r['drop']:>9.4f}")
    print("\nheld-out R^2 of f_theta: " + ", ".join(f"{k} {v:.3f}" for k, v in out["r2"].items()))
    print("student (CV): " + ", ".join(f"{k} {v:.3f}" for k, v in out["student_cv"].items()))
    if out["margin_offset"]:
        mo = out["margin_offset"]
        print(f"margin offset tau {mo['tau']:.5f} ({mo['chosen_by']}): the student calls iff the teacher margin > tau")
    if out["replay_tokens_per_s"]:
        print("\nmodelled tokens/s on held-out round starts (CV; collection cost profile):")
        _print_table(out["replay_tokens_per_s"])
    if "overhead_share" in out:
        print(f"\ndecision {out['decide_ms_median']:.3f} ms / verification {out['verify_ms_median']:.1f} ms "
              f"(medians, {out['device']}): overhead_share {out['overhead_share']:.5f}")
