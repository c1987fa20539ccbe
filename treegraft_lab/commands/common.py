"""Arguments and helpers shared by the decoding subcommands.

Imports of the package's heavy modules stay inside the functions: `treegraft-lab --help` and a
bad argument answer before torch loads.
"""

from __future__ import annotations

import argparse

from treegraft_lab.presets import (  # light: no torch
    DEFAULT_PAIR,
    GROWTHS,
    SPEED,
    SPEED_GROWTH,
    SPEED_SMALL,
)


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pair", default=None, help=f"registered pair name (default: {DEFAULT_PAIR})")
    parser.add_argument("--target", default=None, help="target model: local folder, registered name or hub id")
    parser.add_argument("--mid", default=None, help="mid drafter: local folder, registered name or hub id")
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda, cuda:N")
    parser.add_argument("--dtype", default="auto", help="auto (bf16 where supported), bfloat16, float32, float16")
    parser.add_argument("--mid-device", default=None, help="CUDA: the mid drafter's GPU (default: the target's first)")
    parser.add_argument("--headroom-gib", type=float, default=None,
                        help="CUDA: GiB kept free per GPU beside weights, KV caches and logits (default 2)")
    parser.add_argument("--allow-offload", action="store_true",
                        help="CUDA: let a target that does not fit the GPUs spill to the CPU (slow) instead of refusing")


def add_prune_argument(parser: argparse.ArgumentParser, auto: bool = False) -> None:
    """--prune; with `auto` (the decoding commands) it may be "auto", the default: chosen for the device."""
    parser.add_argument("--prune", default=SPEED["prune"] if auto else "topk",
                        choices=("auto", "topk", "value") if auto else ("topk", "value"),
                        help=("auto: value where a verified node costs on this device, else topk (default); " if auto else "")
                        + "topk: the budget's best nodes by path score (the paper); value: per round, only "
                          "nodes worth their verification time on this device")


def add_clock_arguments(parser: argparse.ArgumentParser, prune: str = "topk") -> None:
    """--prune, --model-on, --prune-modelled, --model-only (bench and check-lossless)."""
    add_prune_argument(parser)
    parser.set_defaults(prune=prune)
    parser.add_argument("--model-on", default="", metavar="PROFILES",
                        help="comma-separated device profiles (names such as a100-paper, or JSON files) to also run the "
                             "tree methods on, every decision on that profile's costs (tables labelled 'modelled on <profile>')")
    parser.add_argument("--prune-modelled", default=None, choices=("topk", "value"),
                        help="pruning rule on the modelled profiles (default: --prune)")
    parser.add_argument("--model-only", action="store_true",
                        help="with --model-on: run the tree methods on the modelled profiles only (not on the wall clock)")


def clocks_from_args(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(clock, prune) pairs of --prune / --model-on / --prune-modelled / --model-only; each
    profile is checked to load (a name or a JSON file), before any model loads."""
    from treegraft_lab import costs

    profiles = [c.strip() for c in args.model_on.split(",") if c.strip()]
    for p in profiles:
        costs.load(p)  # refuses an unknown profile in one line
    wall = [] if args.model_only and profiles else [("wall", args.prune)]
    return wall + [(p, args.prune_modelled or args.prune) for p in profiles]


DEFAULT_GROWTH, DEFAULT_SMALL = SPEED_GROWTH, SPEED_SMALL  # the speed preset's (presets.SPEED)


def add_growth_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--growth", default=DEFAULT_GROWTH, choices=tuple(GROWTHS),
                        help=f"lookup: the full rule plus prompt lookup's draft (up to {GROWTHS['lookup']['lookup']} tokens) grafted under the root; "
                             f"full: per-parent top-k children, n-gram chains, reselection depth window at every "
                             f"step; release: the authors' release as its evaluator runs it (its parent-ending rule, "
                             f"first-step fallback, matcher, frontier order and own prompt forward); compact: the global top-W children per step, no chains, every "
                             f"unscored node reselectable (default: {DEFAULT_GROWTH})")
    parser.add_argument("--children", type=int, default=SPEED["children"], help="children per frontier parent (k)")
    parser.add_argument("--small", default=DEFAULT_SMALL,
                        help="the small drafter of the tree methods: ngram, recycling (Token Recycling's adjacency "
                             "matrix), suffix (a suffix automaton) or a '+'-joined combination; in ngram+recycling "
                             "recycled candidates are drafted only where the n-gram match is shorter than 2 tokens "
                             f"(DecodeConfig.recycle_below) (default: {DEFAULT_SMALL})")


def growth_from_args(args: argparse.Namespace) -> dict:
    """DecodeConfig options of --growth / --children."""
    small = getattr(args, "small", "ngram")
    if args.growth == "release" and small != "ngram":
        from treegraft_lab.errors import TreeGraftError

        raise TreeGraftError(f"--growth release runs the release's n-gram drafter: add --small ngram (got {small})")
    base = dict(GROWTHS[args.growth]) if args.growth == "compact" else {**GROWTHS[args.growth], "children": args.children}
    return {**base, "small": small}


def check_settings(schedules, budget, growth: dict, clocks: list[tuple[str, str]], **kw) -> None:
    """Build the DecodeConfig of every (schedule, clock) so that a bad budget, schedule, growth or
    pruning rule is refused in one line before any model loads."""
    from treegraft_lab.config import DecodeConfig

    for s in schedules:
        for clock, prune in clocks:
            DecodeConfig(schedule=s, budget=budget, prune=prune, clock=clock, **growth, **kw)


def check_scheduler(args: argparse.Namespace, clocks: list[tuple[str, str]], growth: dict) -> None:
    """Refuse schedule "adaptive" in one line, before any model loads, when the named pair has no
    scheduler for a (clock, prune, growth) asked for (a pair given by --target/--mid is checked
    when it loads)."""
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.errors import TreeGraftError
    from treegraft_lab.schedule.adaptive import default_folder

    if getattr(args, "target", None) or getattr(args, "mid", None):
        return
    trees = DecodeConfig(**growth)
    name, kind = args.pair or DEFAULT_PAIR, trees.growth
    for clock, prune in clocks:
        folders = [default_folder(name, clock, p, kind, getattr(args, "device", "auto"), args.dtype, trees.small)
                   for p in (("value", "topk") if prune == "auto" else (prune,))]
        if not any((f / "scheduler.json").is_file() for f in folders):
            folder = folders[0]
            raise TreeGraftError(f"no scheduler for pair {name!r} with clock {clock!r}, prune={prune!r}, {kind} growth, "
                                 f"small drafter {trees.small} "
                                 f"(looked in {folder}): pick another clock, prune, growth or small drafter, or train one with "
                                 f"`treegraft-lab collect` and `treegraft-lab train-scheduler`")


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schedule", default=SPEED["schedule"],
                        help="auto (adaptive where a scheduler is trained for this pair and device, else small), "
                             "small, mid, adaptive, oracle, rule:match, rule:score or a 0/1 mask such as 10101 "
                             "(default: %(default)s)")
    parser.add_argument("--depth", type=int, default=SPEED["depth"], help="draft steps per round (D)")
    parser.add_argument("--width", type=int, default=SPEED["width"], help="frontier width (W)")
    parser.add_argument("--budget", default=str(SPEED["budget"]), help="non-root nodes verified (B_ver), or auto")
    add_prune_argument(parser, auto=True)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--no-eg", action="store_true", help="turn off expanded graft-position selection")
    parser.add_argument("--no-nd", action="store_true", help="turn off non-destructive grafting (overwrite)")
    add_growth_arguments(parser)
    parser.add_argument("--seed", type=int, default=None)


def check_pair(name: str | None) -> None:
    """Refuse an unregistered pair name in one line, before any model loads (None: the default)."""
    from treegraft_lab.errors import TreeGraftError
    from treegraft_lab.models import PAIRS

    if name is not None and name not in PAIRS:
        raise TreeGraftError(f"unknown pair {name!r}; known pairs: {', '.join(PAIRS)}")


def check_positive(**flags: int) -> None:
    """Refuse, in one line, a count flag below 1 (keyword: the flag's name with _ for -)."""
    from treegraft_lab.errors import TreeGraftError

    for name, value in flags.items():
        if value is not None and value < 1:
            raise TreeGraftError(f"--{name.replace('_', '-')} {value}: give a number >= 1")


def check_prompts(prompts: list, args: argparse.Namespace) -> None:
    """Refuse a prompt selection that holds no prompt, before any model loads."""
    from treegraft_lab.errors import TreeGraftError

    if not prompts:
        raise TreeGraftError(f"no prompts in {args.prompts!r} for --split {getattr(args, 'split', 'eval')} with these "
                             "limits: a file without a split field counts as eval; pass --split eval or all, or a larger limit")


# The library's advice in its errors, as the command line's flags
FLAG_WORDS = (("pass mid=... or a pair name, or require_mid=False to load the target alone",
               "pass --mid FOLDER or --pair NAME, or --schedule small to decode with the target alone"),
              ("(or load the target alone: require_mid=False)", "(or decode with the target alone: --schedule small)"),
              ("pass dtype='", "pass --dtype '"))


def in_flags(message: str) -> str:
    """An error's advice in command-line words (`FLAG_WORDS`)."""
    for python, flags in FLAG_WORDS:
        message = message.replace(python, flags)
    return message


def load_pair_from_args(args: argparse.Namespace, require_mid: bool = True):
    from treegraft_lab.errors import TreeGraftError
    from treegraft_lab.models import load_pair

    try:
        return _load_pair(args, require_mid, load_pair)
    except TreeGraftError as e:
        raise TreeGraftError(in_flags(str(e))) from e


def _load_pair(args: argparse.Namespace, require_mid: bool, load_pair):
    return load_pair(args.pair, target=args.target, mid=args.mid, device=args.device, dtype=args.dtype,
                     require_mid=require_mid, mid_device=getattr(args, "mid_device", None),
                     headroom_gib=getattr(args, "headroom_gib", None), allow_offload=getattr(args, "allow_offload", False),
                     float32_logits=getattr(args, "float32_logits", False))


def config_from_args(args: argparse.Namespace, **overrides):
    from treegraft_lab.config import DecodeConfig

    budget = args.budget if args.budget == "auto" else int_or_auto(args.budget, "--budget")
    kw = dict(schedule=args.schedule, depth=args.depth, width=args.width, budget=budget, prune=args.prune,
              temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
              expanded_graft=not args.no_eg, non_destructive=not args.no_nd, seed=args.seed, **growth_from_args(args))
    kw.update(overrides)
    return DecodeConfig(**kw)


def int_or_auto(text: str, flag: str) -> int:
    from treegraft_lab.errors import TreeGraftError

    try:
        return int(text)
    except ValueError:
        raise TreeGraftError(f"{flag} must be an integer or 'auto', got {text!r}") from None
