"""`treegraft-lab fit-rules`: fit the rule schedules' values (rule:match's tau, rule:score's threshold) on the train split.

Reads a trajectories folder (the round starts of the train prompts with every schedule replayed
and priced, as the learned scheduler was trained on), follows each rule at every value of its
grid through the recorded schedule trees and keeps the value with the best modelled tokens/s
(`treegraft_lab.schedule.rules.fit`, on `rounds.tokens_per_s`: the scheduler's own objective). Writes the values into
data/scheduler/<pair>/rules.json under "<profile class>-<prune>-<growth>-<small>" and regenerates
RULES.md beside it (the card).

    treegraft-lab fit-rules data/trajectories/smollm2-pocket-a100-topk-lookup
    treegraft-lab fit-rules data/trajectories/smollm2-pocket-cpu-value-lookup
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path

from treegraft_lab.errors import TreeGraftError


def card(pair_name: str, fitted: dict) -> str:
    """RULES.md: what the rules are, how they were fitted, and every fitted grid."""
    out = [f"# Rule schedules for `{pair_name}`", "",
           "`rule:match` calls the mid drafter in a round while the longest context match (the longest n-gram, at "
           "most 5 tokens, ending the committed text that occurred before) is shorter than tau tokens; `rule:score` "
           "calls it at a draft step while the small drafter's path probability (exp of the mean path score over "
           "the top-W nodes a mid call would expand) is below a threshold. Each value was fitted on the "
           "trajectories the learned scheduler of the same setting was trained on (train split, every schedule "
           "replayed at each round start and priced by the profile): every value of the grid followed its decisions "
           "through the recorded schedule trees and the highest modelled tokens/s won, the objective the learned "
           "scheduler is evaluated on (the mean modelled time per token over the round starts; ties: fewer mid "
           "calls, the smaller value). `DecodeConfig(schedule=\"rule:match\")` reads the value fitted for its "
           "profile class, pruning, growth and small drafter; `rule:match=3` sets one by hand.", ""]
    for key, entry in sorted(fitted.items()):
        out += [f"## {key}", "", f"Fitted {entry['date']} on {entry['states']} round starts of {entry['prompts']} train "
                f"prompts (`{entry['trajectories']}`), priced on {entry['profile']}:", "", "    " + entry["command"], ""]
        for rule in ("rule:match", "rule:score"):
            out += [f"`{rule}`: **{entry[rule]['value']:g}**", "", "| value | tokens/s (modelled) | mid calls / round | "
                    "tokens / target forward |", "|---|---|---|---|"]
            out += [f"| {r['value']:g} | {r['tokens_per_s']:.2f} | {r['mid_calls_per_round']:.2f} | "
                    f"{r['tokens_per_forward']:.2f} |" for r in entry[rule]["grid"]]
            out.append("")
    return "\n".join(out)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trajectories", help="a folder of data/trajectories/")
    p.add_argument("--small", default=None, help="the small drafter the trajectories were collected with "
                   "(default: the one they record)")


def run(args: argparse.Namespace) -> int:

    import pandas as pd

    from treegraft_lab import costs
    from treegraft_lab.schedule import rules
    from treegraft_lab.schedule.adaptive import profile_class
    from treegraft_lab.training.collect import collect_config

    folder = Path(args.trajectories)
    if not (folder / "trajectories.json").is_file():
        raise TreeGraftError(f"{folder}: no trajectories.json; give a folder written by `treegraft-lab collect`")
    meta = json.loads((folder / "trajectories.json").read_text())
    df = pd.read_parquet(folder / "trajectories.parquet")
    profile = costs.load(str(folder / "profile.json"))
    decode = meta["shard_meta"][0]["decode"]
    settings = {k: v for k, v in decode.items() if k not in ("schedule", "clock")}
    cfg = collect_config({**settings, **({"small": args.small} if args.small else {})})  # as collection read them
    key = f"{profile_class(profile)}-{cfg.prune}-{cfg.growth}-{cfg.small}"
    entry = {"profile": profile.name, "states": int(df.state.nunique()), "prompts": int(df.qid.nunique()),
             "trajectories": str(folder), "date": time.strftime("%Y-%m-%d"),
             "command": "treegraft-lab fit-rules " + shlex.join([str(folder), *(["--small", args.small] if args.small else [])])}
    for rule in rules.GRIDS:
        entry[rule] = rules.fit(df, rule, ngram_max=cfg.ngram_max)
        print(f"{key} {rule} = {entry[rule]['value']:g}")
    path = rules.rules_file(meta["pair"])
    fitted = rules.read_fitted(meta["pair"])
    fitted[key] = entry
    path.write_text(json.dumps(fitted, indent=1) + "\n", encoding="utf-8")
    (path.parent / "RULES.md").write_text(card(meta["pair"], fitted), encoding="utf-8")
    print(f"wrote {path}")
    return 0
