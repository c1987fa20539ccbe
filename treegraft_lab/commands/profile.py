"""`treegraft-lab profile`: this device's cost profile for a pair, measured once and cached.

    treegraft-lab profile                  # measure (first call) or read the cache; print the curves
    treegraft-lab profile --json           # the profile as JSON
    treegraft-lab profile --plot FILE.png  # the curves as a figure
    treegraft-lab profile --save FILE      # a copy to use elsewhere (DecodeConfig(clock=FILE), --clock FILE)
    treegraft-lab profile --show a100-paper  # a named profile or a JSON file, no models loaded
    treegraft-lab profile --rounds         # where a decoding round's time goes (schedules, n-gram step)

The profile is what every time-weighing decision reads (treegraft_lab.costs). `--refresh`
measures again (do it on a quiet machine: every cached decision follows it); a re-measure flagged
for the machine's load (or a failed check) keeps the cached profile and says so, unless `--force`.
"""

from __future__ import annotations

import argparse
import json
import sys

from treegraft_lab.commands.common import (
    add_pair_arguments,
    check_scheduler,
    check_settings,
    load_pair_from_args,
)
from treegraft_lab.errors import TreeGraftError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompts", default="treegraft-suite", help="suite name or JSONL file")
    parser.add_argument("--split", default="eval", help="eval, validation, train or all")
    parser.add_argument("--per-category", type=int, default=1, help="prompts per category")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--schedules", default="small,mid,10101")
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--context", type=int, default=2000, help="context length for the n-gram timing")
    parser.add_argument("--json", action="store_true", help="print the profile (or --rounds' numbers) as JSON")
    parser.add_argument("--plot", default=None, metavar="FILE", help="draw the curves into FILE (png/svg/html)")
    parser.add_argument("--save", default=None, metavar="FILE", help="write the profile to FILE")
    parser.add_argument("--refresh", action="store_true", help="measure again instead of reading the cache")
    parser.add_argument("--force", action="store_true",
                        help="with --refresh: keep the new profile even when it is flagged (a busy machine)")
    parser.add_argument("--show", default=None, metavar="NAME|FILE", help="show a named or saved profile instead")
    parser.add_argument("--rounds", action="store_true", help="time the parts of decoding rounds instead")
    add_pair_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.rounds:
        return run_rounds(args)
    from treegraft_lab import costs, profile_cache

    if args.force and not args.refresh:
        raise TreeGraftError("--force keeps a re-measured profile: give it with --refresh")
    cached, kept = None, False
    prof = costs.load(args.show) if args.show else None
    spec = profile_cache.spec_key(args.pair, args.target, args.mid, args.device, args.dtype)
    if prof is None and not args.refresh:  # read the cache without importing torch or loading a model
        prof = profile_cache.lookup(spec)
    if prof is None:
        import warnings

        from treegraft_lab import measure

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pair = load_pair_from_args(args, require_mid=False)
        cached = measure.cached_path(pair)
        try:
            prof = measure.for_pair(pair, refresh=args.refresh, progress=not args.json, force=args.force)
        except measure.ProfileKept as e:  # the trusted cached profile stays: say so, show it
            print(f"treegraft-lab: {e}", file=sys.stderr)
            prof, kept = e.kept, True
        profile_cache.remember(spec, measure.profile_key(pair))
    if args.save:
        prof.save(args.save)
    if args.plot:
        plot(prof, args.plot)
    if args.json:
        print(json.dumps(prof.to_dict()))
        return 0
    print(describe(prof))
    if cached is not None:
        how = "kept: the re-measure was flagged" if kept else "measured now" if args.refresh else "measured once per machine"
        print(f"cached in {cached} ({how})")
    elif not args.show:
        print("read from this machine's cache (`--refresh` measures again)")
    return 0


def describe(prof) -> str:
    """The profile as a few lines of text, with what its curve implies."""
    spread = "not judged" if prof.spread is None else f"{prof.spread:.0%}"
    checks = f"; checked: {', '.join(prof.checked)}" if prof.checked else ""
    lines = [f"profile {prof.name}: {prof.device}", f"  {prof.source}" + (f" (n={prof.n} timings per size, spread "
             f"{spread}{checks})" if prof.n else "")]
    if prof.load:
        ld = prof.load
        lines.append(f"  load average {ld['before']:.2f} -> {ld['after']:.2f} over {ld['seconds']:.0f} s, {ld['threads']} "
                     f"measuring thread(s) on {ld['cpus']} CPUs: other load about {ld['others']:.1f}")
    if prof.compared:
        cmp = prof.compared
        lines.append(f"  against the cached profile of {cmp['measured'] or 'before'}: target forward "
                     + ", ".join(f"{r:.2f}x at {n} token{'s' if n != 1 else ''}" for n, r in zip(cmp["tokens"], cmp["ratio"])))
    if prof.flagged:
        lines.append(f"  flagged: {'; '.join(prof.flagged)}")
    lines.append(f"  target forward (ms by tokens, {prof.context} cached): "
                 + "  ".join(f"{n}:{v:.1f}" for n, v in sorted(prof.target.items())))
    if prof.target_long:  # value pruning prices a tree token by the round's context, between the two curves
        lines.append(f"  target forward ({prof.context_long} cached): "
                     + "  ".join(f"{n}:{v:.1f}" for n, v in sorted(prof.target_long.items())))
    if prof.mid:
        lines.append("  mid-drafter call (ms by tokens forwarded): " + "  ".join(f"{n}:{v:.1f}" for n, v in sorted(prof.mid.items())))
    lines.append(f"  n-gram step: {prof.small_ms:.2f} ms")
    lines.append("  " + implication(prof))
    return "\n".join(lines)


def implication(prof) -> str:
    """One line: what the curve implies for tree size and mid calls."""
    t1, t64 = prof.target_ms(1), prof.target_ms(64)
    text = f"a 64-token verification costs {t64 / t1:.2f}x a 1-token forward"
    text += (": verified nodes are nearly free, grow wide trees" if t64 / t1 < 1.3 else
             ": every verified node costs, keep trees small (prune=value or a small budget)")
    if prof.mid:
        r = prof.mid_ms(100) / t64
        text += f"; a mid call on 100 tokens costs {r:.2f}x that verification"
    return text


def plot(prof, path: str) -> None:
    """The target and mid curves (ms against tokens) into `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(*zip(*sorted(prof.target.items())), "o-", color="#555555", label="target forward")
    if prof.mid:
        ax.plot(*zip(*sorted(prof.mid.items())), "o-", color="#ff7f0e", label="mid-drafter call")
    ax.axhline(prof.small_ms, color="#1f77b4", ls=":", label=f"n-gram step {prof.small_ms:.2f} ms")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens in the forward")
    ax.set_ylabel("ms")
    ax.set_title(f"{prof.name}\n{prof.device}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_rounds(args: argparse.Namespace) -> int:
    from treegraft_lab import measure
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.prompts import load_prompts

    prompts = load_prompts(args.prompts, split=args.split, per_category=args.per_category)
    schedules = [s.strip() for s in args.schedules.split(",") if s.strip()]
    if not prompts or not schedules:
        raise TreeGraftError(f"--rounds needs prompts and schedules: {len(prompts)} prompts in {args.prompts!r} "
                             f"(--split {args.split}), schedules {args.schedules!r}")
    if args.max_new_tokens < 1:
        raise TreeGraftError(f"--max-new-tokens {args.max_new_tokens}: give a number >= 1")
    check_settings(schedules, args.budget, {}, [("wall", "topk")])  # before any model loads
    if "adaptive" in schedules:
        check_scheduler(args, [("wall", "topk")], {})
    pair = load_pair_from_args(args, require_mid=any(s != "small" for s in schedules))
    out: dict = {"pair": pair.name, "device": str(pair.device), "dtype": str(pair.dtype).removeprefix("torch.")}
    out["ngram_step_ms"] = measure.small_step_ms(pair.tokenizer, args.context, repeats=200)
    out["schedules"] = {}
    here = measure.resolve("wall", pair)  # resolved once, handed to every decoder
    for s in schedules:
        dec = TreeGraftDecoder(pair, DecodeConfig(schedule=s, budget=args.budget, prune="topk"), profile=here)
        dec.generate(prompts[0]["turns"][0], max_new_tokens=8)  # warm-up
        rows = [dec.generate(q["turns"][0], max_new_tokens=args.max_new_tokens).stats for q in prompts]
        tot = {k: sum(r[k] for r in rows) for k in ("new_tokens", "rounds", "forward_s", "overhead_s", "draft_s", "verify_s")}
        round_s = tot["forward_s"] + tot["overhead_s"]
        out["schedules"][s] = {
            "tokens_per_round": tot["new_tokens"] / tot["rounds"],
            "overhead_share": tot["overhead_s"] / round_s,
            "draft_share": tot["draft_s"] / round_s,
            "verify_share": tot["verify_s"] / round_s,
            "ms_per_round": 1000 * round_s / tot["rounds"],
        }
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"pair {out['pair']} on {out['device']} ({out['dtype']}), {len(prompts)} prompts, "
          f"{args.max_new_tokens} new tokens, budget {args.budget}")
    print(f"n-gram step (W=10 frontier nodes, {args.context}-token context): median {out['ngram_step_ms']:.3f} ms (goal <= 1 ms)")
    print(f"{'schedule':>10} {'tokens/round':>13} {'ms/round':>9} {'draft':>7} {'verify':>7} {'outside forwards':>17}")
    for s, r in out["schedules"].items():
        print(f"{s:>10} {r['tokens_per_round']:>13.2f} {r['ms_per_round']:>9.1f} {r['draft_share']:>7.1%} "
              f"{r['verify_share']:>7.1%} {r['overhead_share']:>17.1%}")
    print("(outside forwards = round time not spent in a model forward; goal <= 15%)")
    return 0
