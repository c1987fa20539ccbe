"""Choose the "lookup" growth: all-small variants against HF prompt lookup, by exact greedy replay.

Greedy verification accepts the longest tree path that matches the target's greedy continuation,
so with the reference continuation of each prompt (plain decoding, computed once and cached) a
round needs no target forward: the decoder grows and prunes its real tree, a stand-in verifier
accepts along the reference, and the round is priced by a device profile. Prompt lookup is
replayed the same way (HF's matching rule, `NgramIndex.lookup_match`, up to 10 tokens a forward,
one n-gram step a forward). Every output is checked against the reference.

    .venv/bin/python scripts/lookup_growth.py --profile a100-paper --prune topk
    .venv/bin/python scripts/lookup_growth.py --profile data/trajectories/smollm2-pocket-cpu-value/profile.json --prune value
    .venv/bin/python scripts/lookup_growth.py --set small --json data/growth/small-a100-paper-topk.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from treegraft_lab import costs
from treegraft_lab import decoder as decoder_module
from treegraft_lab.config import DecodeConfig
from treegraft_lab.drafters import NgramIndex

VARIANTS = {  # name -> DecodeConfig growth overrides (schedule "small")
    "release": {},
    "lookup 10": {"lookup": 10},
    "lookup 16": {"lookup": 16},
    "lookup 24": {"lookup": 24},
    "lookup 16, tail joins the frontier": {"lookup": 16, "chain_frontier": True},
    "lookup 16, tail joins, min_step_p 0.05": {"lookup": 16, "chain_frontier": True, "min_step_p": 0.05},
    "lookup 16, tail joins, min_step_p 0.1": {"lookup": 16, "chain_frontier": True, "min_step_p": 0.1},
    "lookup 16, tail joins, min_step_p 0.2": {"lookup": 16, "chain_frontier": True, "min_step_p": 0.2},
    "lookup 32, tail joins, min_step_p 0.1": {"lookup": 32, "chain_frontier": True, "min_step_p": 0.1},
}
LOOKUP = {"lookup": 16, "chain_frontier": True, "min_step_p": 0.1}  # the lookup preset (config.GROWTHS)
SMALL_VARIANTS = {  # `--set small`: the small drafters (Token Recycling needs the target's logits: bench only)
    "release": {},
    "lookup, n-gram": LOOKUP,
    "lookup, suffix": {**LOOKUP, "small": "suffix"},
    "lookup, n-gram + suffix": {**LOOKUP, "small": "ngram+suffix"},
    "release, suffix": {"small": "suffix"},
    "release, n-gram + suffix": {"small": "ngram+suffix"},
    "suffix decoding (the peer)": {"peer": "suffix"},
}


class ReferenceVerifier:
    """Stands in for `TargetVerifier`: a node's "argmax" is the reference token after its path
    when the path follows the reference, else token 0 (the path is rejected before it anyway)."""

    ref: list[int] = []

    def __init__(self, model) -> None:
        self.n = 0

    def prefill(self, ids: list[int]) -> None:
        self.n = len(ids) + 1  # committed tokens, the root included

    def forward_tree(self, tree, kept: list[int]) -> torch.Tensor:
        rows = []
        for v in kept:
            p = tree.path_tokens(v)[1:]
            at = self.n + len(p)
            ok = at < len(self.ref) and all(self.ref[self.n + i] == t for i, t in enumerate(p))
            rows.append(self.ref[at] if ok else 0)
        out = torch.zeros(len(kept), max(rows) + 1)
        out[torch.arange(len(kept)), torch.tensor(rows)] = 1.0
        return out

    def commit(self, kept: list[int], path: list[int]) -> None:
        self.n += len(path)

    def rollback(self) -> None:
        pass


def references(path: Path, n_new: int) -> dict:
    """Greedy continuations of the eval prompts (2 per category), computed once."""
    if path.is_file():
        return json.loads(path.read_text())
    from treegraft_lab.baselines import autoregressive
    from treegraft_lab.models import load_pair
    from treegraft_lab.prompting import encode_prompt
    from treegraft_lab.prompts import tuning_prompts

    pair = load_pair("smollm2-pocket", dtype="float32", require_mid=False)
    out = {"target": pair.target_id, "prompts": []}
    for q in tuning_prompts("treegraft-suite", purpose="the lookup growth choice", split="eval", per_category=2):
        ids = encode_prompt(pair.tokenizer, q["turns"][0])
        ref = autoregressive(pair, ids, n_new + 12).token_ids
        out["prompts"].append({"qid": q["question_id"], "cat": q["category"], "ids": ids, "ref": ref})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out))
    return out


def pld_ms(ids: list[int], ref: list[int], n_new: int, prof, length: int = 10) -> float:
    idx = NgramIndex(5, 1)
    idx.extend(ids)
    out, ms = [], 0.0
    while len(out) < n_new:
        m = idx.lookup_match()
        cand = idx.tokens[m[1] : m[1] + length][: max(0, n_new - len(out) - 1)] if m else []
        acc = 0
        while acc < len(cand) and cand[acc] == ref[len(out) + acc]:
            acc += 1
        ms += prof.target_ms(1 + len(cand)) + prof.small_ms
        new = ref[len(out) : len(out) + acc + 1]
        out += new
        idx.extend(new)
    return ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="a100-paper")
    ap.add_argument("--prune", default="topk", choices=("topk", "value"))
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--refs", type=Path, default=Path("data/growth/lookup-references.json"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--set", default="growth", choices=("growth", "small"),
                    help="growth: the growth variants; small: the small drafters with the lookup and release growth")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    from treegraft_lab.baselines import PEERS

    refs = references(args.refs, args.max_new_tokens)
    prof = costs.load(args.profile)
    decoder_module.TargetVerifier = ReferenceVerifier
    tok = AutoTokenizer.from_pretrained(refs["target"])
    target = type("Target", (), {"device": torch.device("cpu"), "generation_config": None, "parameters": lambda self: iter(()),
                                 "config": type("C", (), {"max_position_embeddings": 8192})()})()
    pair = type("Pair", (), {"name": "smollm2-pocket", "mid": None, "tokenizer": tok, "target": target})()
    ar_tps = 1.0 / prof.target_ms(1)
    table: dict[str, dict[str, list[float]]] = {"HF prompt lookup": {}}
    per_forward: dict[str, list[int]] = {}  # name -> [new tokens, target forwards (each prefill one)]
    for name, growth in (VARIANTS if args.set == "growth" else SMALL_VARIANTS).items():
        growth = dict(growth)
        make = PEERS[growth.pop("peer")] if "peer" in growth else decoder_module.TreeGraftDecoder
        table[name] = {}
        for q in refs["prompts"]:
            n = min(args.max_new_tokens, len(q["ref"]))
            ReferenceVerifier.ref = q["ids"] + q["ref"]
            cfg = DecodeConfig(schedule="small", budget=63, prune=args.prune, clock=prof, **growth)
            gen = make(pair, cfg).generate(q["ids"], max_new_tokens=n)
            assert gen.token_ids == q["ref"][:n], (name, q["qid"])
            table[name].setdefault(q["cat"], []).append(n / gen.stats["modelled_ms"] / ar_tps)
            t = per_forward.setdefault(name, [0, 0])
            t[0], t[1] = t[0] + n, t[1] + gen.stats["rounds"] + 1
            if name == "release":
                table["HF prompt lookup"].setdefault(q["cat"], []).append(n / pld_ms(q["ids"], q["ref"], n, prof) / ar_tps)
    out = {}
    for name, cats in table.items():
        out[name] = {c: sum(v) / len(v) for c, v in sorted(cats.items())}
        every = [x for v in cats.values() for x in v]
        out[name]["overall"] = sum(every) / len(every)
    cats = list(out["release"])
    print(f"all-small speedup over plain decoding, modelled on {prof.name}, prune={args.prune} (mean over prompts)")
    print("| growth | " + " | ".join(cats) + " |\n|---|" + "---|" * len(cats))
    for name, row in out.items():
        print(f"| {name} | " + " | ".join(f"{row[c]:.2f}x" for c in cats) + " |")
    a = {name: t[0] / t[1] for name, t in per_forward.items()}  # the paper's A: new tokens / target forwards
    print("tokens per target forward (each prefill one forward): " + ", ".join(f"{k} {v:.2f}" for k, v in a.items()))
    if args.json:
        args.json.write_text(json.dumps({"profile": prof.name, "prune": args.prune, "speedup": out,
                                         "tokens_per_forward": a}, indent=1))


if __name__ == "__main__":
    main()
