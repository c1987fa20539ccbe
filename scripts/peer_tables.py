"""The README's peer table for one clock, from the folders `scripts/bench_peers.sh` writes.

One row per method (the main run's, then all-small with each other small drafter from its own
run): tokens/s, speedup over plain decoding (mean of per-prompt ratios), tokens per target forward
(the paper's A: new tokens / target forwards, each prefill one forward, bonus included;
`viz.stats.bench_acceptance`), mid calls per round and the share of outputs identical to plain
greedy decoding.

    .venv/bin/python scripts/peer_tables.py --clock a100-paper
    .venv/bin/python scripts/peer_tables.py --clock wall
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

LABELS = {"ar": "plain decoding (`ar`)", "hf-pld": "HF prompt lookup (`hf-pld`)",
          "recycling": "Token Recycling (`recycling`)", "suffix": "suffix decoding (`suffix`)",
          "small": "TreeGraft all-small", "adaptive": "TreeGraft adaptive (learned scheduler)",
          "rule:match": "TreeGraft `rule:match`", "rule:score": "TreeGraft `rule:score`"}


def table(folders: list[Path], clock: str) -> str:
    import pandas as pd

    from treegraft_lab import bench
    from treegraft_lab.viz.stats import bench_acceptance

    rows, seen = [], set()
    for folder in folders:
        if not (folder / "records.parquet").is_file():
            continue
        rec = pd.read_parquet(folder / "records.parquet")
        rec = rec[rec.clock == clock]  # on a modelled clock ar and the HF peers are priced there too
        small = json.loads((folder / "results.json").read_text())["meta"]["settings"].get("small", "ngram")
        summ = bench.summarize(rec)
        summ = summ[summ.category == "overall"]
        acc = bench_acceptance(rec)
        acc = acc[acc.category == "overall"].set_index("method")
        for r in summ.itertuples():
            peer = r.method in ("ar", "hf-pld", "recycling", "suffix")
            label = LABELS.get(r.method, r.method) + ("" if small == "ngram" or peer else f", small = {small}")
            if label in seen:  # ar runs in every part
                continue
            seen.add(label)
            a = acc.loc[r.method, "A"] if r.method in acc.index else float("nan")
            rows.append([label, f"{r.tokens_per_s:.1f}", f"{r.speedup:.2f}x", "-" if a != a else f"{a:.2f}",
                         "-" if r.mid_calls_per_round != r.mid_calls_per_round else f"{r.mid_calls_per_round:.2f}",
                         f"{100 * r.match_rate:.0f}%", f"{r.prompts}"])
    head = ["method", "tokens/s", "speedup over plain", "tokens / target forward (A)", "mid calls / round",
            "identical to plain", "prompts"]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clock", default="a100-paper")
    p.add_argument("folders", nargs="*", type=Path,
                   help="bench folders (default: the ones scripts/bench_peers.sh writes for --clock)")
    args = p.parse_args(argv)
    tag = "wall" if args.clock == "wall" else args.clock
    root = Path("data/bench")
    folders = args.folders or [root / f"smollm2-pocket-{tag}-peers"] + [
        root / f"smollm2-pocket-{tag}-small-{s}" for s in ("ngram", "suffix", "ngram+suffix", "recycling")]
    print(table(folders, args.clock))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
