"""Small-drafter variants side by side in one process on the wall clock, with plain decoding and HF
prompt lookup: all-small, lookup growth, value pruning (at most 63 nodes), 12 eval prompts (2 per
category), 64 tokens, float32, 2 threads. Every method generates once untimed, then each prompt
`--repeats` times per method, the methods' order rotated from one generation to the next.

    .venv/bin/python scripts/small_drafter_ab.py --json data/growth/small-ab-wall.json

Variants: the n-gram drafter alone; n-gram + Token Recycling's matrix with recycled candidates
under every frontier node (recycle_below 0) or only where the n-gram match is shorter than 1, 2,
3 tokens. Speedup: tokens/s over plain decoding on the same prompt, the mean over prompts.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics as st
import sys
from pathlib import Path

import torch

from treegraft_lab.bench import decoder_runner, interleaved, make_runner
from treegraft_lab.config import GROWTHS, DecodeConfig
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.models import cpu_name, load_pair
from treegraft_lab.prompting import encode_prompt
from treegraft_lab.prompts import tuning_prompts

VARIANTS = {
    "ngram": {},
    "ngram+recycling, everywhere": {"small": "ngram+recycling", "recycle_below": 0},
    "ngram+recycling, match < 1": {"small": "ngram+recycling", "recycle_below": 1},
    "ngram+recycling, match < 2 (default)": {"small": "ngram+recycling", "recycle_below": 2},
    "ngram+recycling, match < 3": {"small": "ngram+recycling", "recycle_below": 3},
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(2)
    start = datetime.datetime.now()
    pair = load_pair("smollm2-pocket", dtype="float32")
    qs = tuning_prompts("treegraft-suite", purpose="the small drafter choice", split="eval", per_category=2)
    runners = {"plain decoding": make_runner(pair, "ar")[0], "HF prompt lookup": make_runner(pair, "hf-pld")[0]}
    for name, over in VARIANTS.items():
        cfg = DecodeConfig(schedule="small", budget=63, prune="value", **GROWTHS["lookup"], **over)
        runners[name] = decoder_runner(TreeGraftDecoder(pair, cfg))
    enc = [encode_prompt(pair.tokenizer, q["turns"][0]) for q in qs]
    names, recs = list(runners), interleaved(runners, enc, args.repeats, 64)
    rate = {n: [[len(o["token_ids"]) / o["wall_s"] for o in rs] for rs in recs[n]] for n in names}
    outs = {n: [rs[-1]["token_ids"] for rs in recs[n]] for n in names}
    cats = [q["category"] for q in qs]
    speed = {n: [st.mean(rate[n][i]) / st.mean(rate["plain decoding"][i]) for i in range(len(enc))] for n in names}
    pld = speed["HF prompt lookup"]
    rows = []
    for n in names:
        per = {c: st.mean(s for s, cc in zip(speed[n], cats) if cc == c) for c in dict.fromkeys(cats)}
        ref = {c: st.mean(s for s, cc in zip(pld, cats) if cc == c) for c in per}
        rows.append({"method": n, "speedup": st.mean(speed[n]), "over_prompt_lookup": st.mean(speed[n]) / st.mean(pld),
                     "worst_category_over_prompt_lookup": min(per[c] / ref[c] for c in per), "per_category": per,
                     "identical_to_plain": sum(outs[n][i] == outs["plain decoding"][i] for i in range(len(enc)))})
    print(f"{cpu_name()}; 12 eval prompts, 64 tokens, all-small, lookup growth, value pruning, float32, 2 threads")
    print("| method | speedup | / prompt lookup | worst category / prompt lookup | " + " | ".join(per) + " | = plain |")
    print("|---|---|---|---|" + "---|" * len(per) + "---|")
    for r in rows:
        print(f"| {r['method']} | {r['speedup']:.2f}x | {r['over_prompt_lookup']:.3f} | {r['worst_category_over_prompt_lookup']:.3f} | "
              + " | ".join(f"{v:.2f}x" for v in r["per_category"].values()) + f" | {r['identical_to_plain']}/12 |")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_name(), "torch": torch.__version__, "start": start.isoformat(timespec="seconds"),
                                         "end": datetime.datetime.now().isoformat(timespec="seconds"),
                                         "command": " ".join(["python", *sys.argv]), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
