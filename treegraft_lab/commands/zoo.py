"""`treegraft-lab zoo`: fetch the offline target, distil the pocket drafter, print its card."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.paths import MODELS_DIR
from treegraft_lab.presets import DEFAULT_PAIR, POCKET_DRAFTER
from treegraft_lab.zoo import DERIVED_MIDS

DRAFTERS = {DEFAULT_PAIR: POCKET_DRAFTER,
            **{name.removesuffix("-mid"): name for name in DERIVED_MIDS}}  # built from the target at load time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="zoo_command", metavar="ACTION")
    sub.add_parser("fetch", help="fetch and convert the SmolLM2 target (once)")
    d = sub.add_parser("distill", help="self-distil the pocket drafter from the target (resumable)")
    d.add_argument("--out", type=Path, default=MODELS_DIR / DRAFTERS[DEFAULT_PAIR],
                   help="artifact folder (default: %(default)s)")
    d.add_argument("--layers", default=None,
                   help="comma-separated target layers kept by the drafter (default 0,1,2,24..29)")
    d.add_argument("--rank", type=int, default=64, help="rank of the low-rank deltas")
    d.add_argument("--sub-vocab", type=int, default=8192, help="size of the exported head's sub-vocabulary")
    d.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: use --minutes)")
    d.add_argument("--minutes", type=float, default=90.0, help="time budget, generation + training")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--lr", type=float, default=1e-3)
    d.add_argument("--threads", type=int, default=1, help="torch threads (default 1: leave a core free)")
    d.add_argument("--gen-frac", type=float, default=0.5, help="share of time spent generating corpus")
    d.add_argument("--max-context", type=int, default=320,
                   help="prompt tokens kept in front of each training continuation (more: copying from long prompts)")
    d.add_argument("--checkpoint-minutes", type=float, default=4.0)
    d.add_argument("--work", default="", help="corpus/checkpoint folder (default: cache/distill)")
    d.add_argument("--no-resume", action="store_true", help="ignore an existing checkpoint")
    c = sub.add_parser("card", help="measure a drafter against its target and print its card")
    c.add_argument("name", choices=sorted(DRAFTERS), help="the model pair")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.add_argument("--folder", type=Path, default=None, help="drafter folder (default: the shipped one)")
    c.add_argument("--max-new", type=int, default=128, help="continuation length per eval prompt")
    c.add_argument("--reps", type=int, default=15, help="timing repetitions per model and input")
    c.add_argument("--limit", type=int, default=0, help="use only the first N eval prompts")
    c.add_argument("--per-category", type=int, default=0, help="use only the first N eval prompts of each category")
    c.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    c.add_argument("--write-card", action="store_true",
                   help="also write MODEL_CARD.md (and card.json) into the drafter folder")


def run(args: argparse.Namespace) -> int:
    if args.zoo_command == "fetch":
        from treegraft_lab.zoo.target import ensure_target

        print(ensure_target())
        return 0
    if args.zoo_command == "distill":
        from treegraft_lab.training.drafter_distill import (
            DEFAULT_LAYERS,
            DistillConfig,
            run_distill,
        )

        layers = [int(x) for x in args.layers.split(",")] if args.layers else list(DEFAULT_LAYERS)
        cfg = DistillConfig(out=str(args.out), layers=layers, rank=args.rank, alpha=float(args.rank),
                            sub_vocab=args.sub_vocab, minutes=args.minutes, steps=args.steps,
                            seed=args.seed, lr=args.lr, threads=args.threads, gen_frac=args.gen_frac, max_context=args.max_context,
                            checkpoint_minutes=args.checkpoint_minutes, work=args.work)
        print(run_distill(cfg, resume=not args.no_resume))
        return 0
    if args.zoo_command == "card":
        from treegraft_lab.training.drafter_card import measure
        from treegraft_lab.zoo import derived

        folder = args.folder or MODELS_DIR / DRAFTERS[args.name]
        res = measure(folder, max_new=args.max_new, reps=args.reps, limit=args.limit,
                      threads=args.threads, per_cat=args.per_category)
        if args.write_card and derived.is_derived(folder):
            import shlex
            import sys

            from treegraft_lab.training.drafter_card import derived_card_markdown

            card_cmd = "treegraft-lab zoo card " + shlex.join(sys.argv[3:] if len(sys.argv) > 3 else [args.name])
            (folder / "MODEL_CARD.md").write_text(derived_card_markdown(args.name, res, derived.read_spec(folder), card_cmd))
            (folder / "card.json").write_text(json.dumps(res, indent=1) + "\n")
        elif args.write_card:
            import shlex
            import sys

            from treegraft_lab.training.drafter_card import model_card_markdown

            record = json.loads((folder / "training_record.json").read_text())
            c = record.get("config", {})
            cmd = (f"treegraft-lab zoo distill --layers {','.join(map(str, c.get('layers', [])))} "
                   f"--rank {c.get('rank')} --sub-vocab {c.get('sub_vocab')} --minutes {c.get('minutes')} "
                   f"--seed {c.get('seed')} --threads {c.get('threads')} --gen-frac {c.get('gen_frac')} "
                   f"--max-context {c.get('max_context')}")
            card_cmd = "treegraft-lab zoo card " + shlex.join(sys.argv[3:] if len(sys.argv) > 3 else [args.name])
            text = model_card_markdown(args.name, res, record, cmd)
            text += f"\nMeasured with `{card_cmd}`.\n"
            (folder / "MODEL_CARD.md").write_text(text)
            (folder / "card.json").write_text(json.dumps(res, indent=1) + "\n")
        if args.json:
            print(json.dumps(res))
        else:
            print(format_card(args.name, res))
        return 0
    raise TreeGraftError("choose an action: fetch, distill or card (see `treegraft-lab zoo -h`)")


def format_card(name: str, r: dict) -> str:
    """A human-readable card."""
    lines = [f"{name}: drafter {r['drafter']}",
             f"  layers {r['layers']}  sub-vocab {r['sub_vocab']}  lora rank {r['lora_rank']}"
             + (f"  (derived: {r['kind']})" if r.get("kind") else ""),
             f"  eval prompts: {r['eval_prompts']} ({r['n_prompts']} prompts, {r['positions']} positions)",
             f"  agreement (greedy top-1, teacher-forced): {r['agreement']:.3f}  "
             f"(target top-1 inside the head's sub-vocabulary: {r['sub_vocab_coverage']:.3f})"]
    for c, v in r["agreement_per_category"].items():
        lines.append(f"    {c:<20} {v:.3f}  ({r['positions_per_category'][c]} positions)")
    lines += [f"  chain k={r['chain_k']}: mean accepted {r['chain_mean_accepted']:.2f}, "
              f"tokens/round {r['chain_mean_tokens_per_round']:.2f}",
              f"  cost ratio, 1 token on 512 ctx: {r['cost_ratio_1']:.3f} "
              f"({r['drafter_ms_1']:.1f} / {r['target_ms_1']:.1f} ms)",
              f"  cost ratio, 64-node tree chunk: {r['cost_ratio_64']:.3f} "
              f"({r['drafter_ms_64']:.1f} / {r['target_ms_64']:.1f} ms)",
              f"  ({r['dtype']}, {r['threads']} threads, medians)"]
    return "\n".join(lines)
