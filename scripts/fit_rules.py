"""Fit the rule schedules' values (rule:match's tau, rule:score's threshold) on the train split.

Every value of each rule's grid decodes the train prompts (first turn, the first N per category)
with the given profile, pruning, growth and small drafter; the best modelled tokens/s wins
(`treegraft_lab.schedule.rules.fit`). Writes the values into data/scheduler/<pair>/rules.json
under "<profile class>-<prune>-<growth>-<small>" and regenerates RULES.md beside it (the card).

    .venv/bin/python scripts/fit_rules.py --clock a100-paper --prune topk
    .venv/bin/python scripts/fit_rules.py --clock wall --prune value
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import replace


def card(pair_name: str, fitted: dict) -> str:
    """RULES.md: what the rules are, how they were fitted, and every fitted grid."""
    out = [f"# Rule schedules for `{pair_name}`", "",
           "`rule:match` calls the mid drafter at a draft step while the longest context match (the longest "
           "n-gram, at most 5 tokens, ending the committed text and the best frontier path that occurred before) "
           "is shorter than tau; `rule:score` while the small drafter's best path probability is below a "
           "threshold. Each value was fitted on the train split: every value of the grid decoded the prompts "
           "below and the highest modelled tokens/s won (ties: fewer mid calls, the smaller value). "
           "`DecodeConfig(schedule=\"rule:match\")` reads the value fitted for its profile class, pruning, growth "
           "and small drafter; `rule:match=3` sets one by hand.", ""]
    for key, entry in sorted(fitted.items()):
        out += [f"## {key}", "", f"Fitted {entry['date']} on {entry['prompts']} train prompts ({entry['tokens']} new "
                f"tokens each), modelled on {entry['profile']}:", "", "    " + entry["command"], ""]
        for rule in ("rule:match", "rule:score"):
            if rule not in entry:
                continue
            out += [f"`{rule}`: **{entry[rule]['value']:g}**", "", "| value | tokens/s (modelled) | mid calls / round | "
                    "tokens / target forward |", "|---|---|---|---|"]
            out += [f"| {r['value']:g} | {r['tokens_per_s']:.1f} | {r['mid_calls_per_round']:.2f} | "
                    f"{r['tokens_per_forward']:.2f} |" for r in entry[rule]["grid"]]
            out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", default="smollm2-pocket")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--clock", default="a100-paper")
    p.add_argument("--prune", default="topk")
    p.add_argument("--growth", default="lookup", choices=("lookup", "release", "compact"))
    p.add_argument("--small", default="ngram")
    p.add_argument("--per-category", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--rules", default="rule:match,rule:score")
    args = p.parse_args(argv)

    from treegraft_lab import load_pair
    from treegraft_lab.config import GROWTHS, DecodeConfig
    from treegraft_lab.measure import resolve
    from treegraft_lab.prompting import encode_prompt
    from treegraft_lab.prompts import load_prompts
    from treegraft_lab.schedule import rules

    base = DecodeConfig(prune=args.prune, small=args.small, clock=args.clock, **GROWTHS[args.growth])
    prompts = load_prompts("treegraft-suite", split="train", per_category=args.per_category)
    pair = load_pair(args.pair, dtype=args.dtype)
    profile = resolve(args.clock, pair)
    base = replace(base, clock=profile)
    ids = [encode_prompt(pair.tokenizer, q["turns"][0]) for q in prompts]
    key = rules.rules_key(base, profile)
    entry = {"profile": profile.name, "prompts": len(ids), "tokens": args.max_new_tokens,
             "date": time.strftime("%Y-%m-%d"), "command": "python scripts/fit_rules.py " + shlex.join(sys.argv[1:] if argv is None else argv)}
    for rule in args.rules.split(","):
        entry[rule] = rules.fit(pair, ids, base, rule, args.max_new_tokens,
                                progress=lambda r, row: print(r, json.dumps(row), flush=True))
        print(f"{key} {rule} = {entry[rule]['value']}", flush=True)
    path = rules.rules_file(pair.name)
    fitted = rules.read_fitted(pair.name)
    fitted[key] = {**fitted.get(key, {}), **entry}
    path.write_text(json.dumps(fitted, indent=1) + "\n", encoding="utf-8")
    (path.parent / "RULES.md").write_text(card(pair.name, fitted), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
