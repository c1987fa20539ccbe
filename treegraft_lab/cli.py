"""The `treegraft-lab` command: thin; each subcommand lives in `treegraft_lab/commands/`.

Subcommand modules define `add_arguments(parser)` and `run(args) -> int`. They are imported only
when chosen, so `treegraft-lab --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module under treegraft_lab.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo", "run the main job on the offline default pair and print what it did"),
    "generate": ("generate", "decode one prompt with TreeGraft and print text and statistics"),
    "check-lossless": ("check_lossless", "compare decoder output with plain greedy decoding"),
    "profile": ("profile", "this device's cost profile (measured once, cached); --rounds: where round time goes"),
    "zoo": ("zoo", "fetch the offline target, distil and card the mid drafter"),
    "collect": ("collect", "collect scheduler trajectories by replaying every schedule"),
    "train-scheduler": ("train_scheduler", "train the value system and distil the online MLP"),
    "fit-rules": ("fit_rules", "fit the switching rules' values (rule:match, rule:score) on collected trajectories"),
    "scheduler": ("scheduler", "inspect a trained scheduler artifact"),
    "bench": ("bench", "benchmark TreeGraft against peers, side by side in one run"),
    "report": ("report", "write docs/results.md and the README's results table from the committed data"),
    "regime": ("regime", "where WHEN matters: all-small, all-mid, masks, oracle and adaptive against T_mid / T_tgt"),
    "lab": ("lab", "the workbench: JupyterLab on notebooks/, on 127.0.0.1 only, with a token"),
}


def _build_parser(chosen: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="treegraft-lab",
        description="TreeGraft Lab: a lossless multi-drafter tree speculative decoder, and a "
        "workbench to see what it does.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if name == chosen:
            mod = importlib.import_module(f"treegraft_lab.commands.{module}")
            mod.add_arguments(p)
            p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = _build_parser(chosen if chosen in COMMANDS else None)
    args = parser.parse_args(argv)
    args._argv = argv  # the command line as given: what an interrupted run prints to resume it (`resume.command`)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0 if args.command is None else 2
    from treegraft_lab.errors import TreeGraftError

    try:
        return int(args._run(args) or 0)
    except TreeGraftError as e:
        print(f"treegraft-lab {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
