"""`treegraft-lab scheduler info`: what a trained scheduler is, and what it costs online.

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="scheduler_command", metavar="ACTION")
    p = sub.add_parser("info", help="parameter count, signals, CV table, R^2, decision overhead")
    p.add_argument("--pair", default="smollm2-pocket", help="model pair (default: %(default)s)")
    p.add_argument("--path", type=Path, default=None, help="artifact folder (default: data/scheduler/<pair>)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-measure", action="store_true", help="skip the overhead measurement (no model loaded)")
    p.add_argument("--max-new", type=int, default=48, help="tokens decoded for the overhead measurement")


def measure_overhead(pair_name: str, folder: Path, max_new: int = 48) -> dict:
    """Decode one train prompt with the adaptive schedule; time every decision and verification."""
    from treegraft_lab import load_pair, load_prompts
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder

    pair = load_pair(pair_name)
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule="adaptive", scheduler_path=str(folder)))
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


def run(args: argparse.Namespace) -> int:
    from treegraft_lab.errors import TreeGraftError
    from treegraft_lab.schedule import artifact
    from treegraft_lab.schedule.adaptive import artifact_dir

    if args.scheduler_command != "info":
        raise TreeGraftError("use `treegraft-lab scheduler info [--pair NAME] [--json]`")
    folder = args.path or artifact_dir(args.pair)
    art = artifact.load(folder)
    m = art.meta
    out = {"pair": art.pair, "path": str(folder), "params": art.params, "depth": art.depth, "inputs": art.inputs,
           "selected": art.signals, "candidates": m.get("candidates", []), "cv_table": m.get("cv_table", []),
           "cv": m.get("cv", {}), "r2": m.get("r2", {}), "student_cv": m.get("student_cv", {}),
           "replay_tokens_per_s": m.get("replay_tokens_per_s", {}), "training": m.get("training", {})}
    if not args.no_measure:
        out.update(measure_overhead(args.pair, folder, args.max_new))
    if args.json:
        print(json.dumps(out, indent=1, default=str))
        return 0
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
    print("modelled tokens/s on held-out round starts: "
          + ", ".join(f"{k} {v:.2f}" for k, v in out["replay_tokens_per_s"].items()))
    if "overhead_share" in out:
        print(f"\ndecision {out['decide_ms_median']:.3f} ms / verification {out['verify_ms_median']:.1f} ms "
              f"(medians, {out['device']}): overhead_share {out['overhead_share']:.5f}")
    return 0
