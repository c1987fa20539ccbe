"""`treegraft-lab generate`: decode one prompt with TreeGraft and print the text and statistics."""

from __future__ import annotations

import argparse
import json

from treegraft_lab.commands.common import (
    add_config_arguments,
    add_pair_arguments,
    check_pair,
    check_positive,
    check_scheduler,
    config_from_args,
    growth_from_args,
    load_pair_from_args,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", help="one user message (the chat template is applied)")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--record", default=None, metavar="DIR", help="save the recorded run (parquet) to DIR")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_pair_arguments(parser)
    add_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from treegraft_lab import measure
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.hooks import record

    config = config_from_args(args)  # a bad setting is refused here, before any model loads
    check_positive(max_new_tokens=args.max_new_tokens)
    check_pair(None if args.target else args.pair)
    if config.schedule_name == "adaptive":
        check_scheduler(args, [("wall", config.prune)], growth_from_args(args))
    pair = load_pair_from_args(args, require_mid=config.schedule_name not in ("small", "auto"))
    dec = TreeGraftDecoder(pair, config, profile=measure.resolve(config.clock, pair))  # resolved once, here
    if args.record:
        with record(dec) as rec:
            gen = dec.generate(args.prompt, max_new_tokens=args.max_new_tokens)
        rec.save(args.record)
    else:
        gen = dec.generate(args.prompt, max_new_tokens=args.max_new_tokens)
    if args.json:
        print(json.dumps({"text": gen.text, "token_ids": gen.token_ids, "stats": gen.stats}))
        return 0
    print(gen.text)
    s = gen.stats
    print(f"\n-- {s['new_tokens']} tokens in {s['wall_s']:.2f} s ({s['tokens_per_s']:.1f} tokens/s), "
          f"{s['rounds']} rounds, {s['tokens_per_round']:.2f} tokens/round "
          f"({s['accepted_per_round']:.2f} accepted draft tokens + 1 bonus), "
          f"{s['mid_calls_per_round']:.2f} mid calls/round; schedule {dec.config.schedule_name}, prune {dec.config.prune}")
    if args.record:
        print(f"-- recorded run saved to {args.record}")
    return 0
