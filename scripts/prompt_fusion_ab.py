"""A/B in one process: the target's prompt fused into the first round's forward (TargetVerifier.FUSE = 1024)
vs prefilled on its own (FUSE = 0); all-small, lookup growth, value pruning, 12 eval prompts, 64 tokens.

    .venv/bin/python scripts/prompt_fusion_ab.py [repeats, default 2]
"""
import statistics as S
import sys

import torch

from treegraft_lab.config import GROWTHS, DecodeConfig
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.models import cpu_name, load_pair
from treegraft_lab.prompting import encode_prompt
from treegraft_lab.prompts import tuning_prompts
from treegraft_lab.verify import TargetVerifier

torch.set_num_threads(2)
pair = load_pair("smollm2-pocket", dtype="float32")
qs = tuning_prompts("treegraft-suite", purpose="the prompt fusion A/B", split="eval", per_category=2)
dec = TreeGraftDecoder(pair, DecodeConfig(schedule="small", budget=63, prune="value", **GROWTHS["lookup"]))
enc = [encode_prompt(pair.tokenizer, q["turns"][0]) for q in qs]
dec.generate(enc[0], 16)
res = {0: [], 1024: []}
out = {}
for i, ids in enumerate(enc):
    for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2):
        for fuse in ((0, 1024) if (i + r) % 2 == 0 else (1024, 0)):
            TargetVerifier.FUSE = fuse
            g = dec.generate(ids, 64)
            res[fuse].append((i, g.stats["wall_s"], len(g.token_ids)))
            out.setdefault((i, fuse), g.token_ids)
same = all(out[(i, 0)] == out[(i, 1024)] for i in range(len(enc)))
def per_prompt(rows):
    d = {}
    for i, w, _n in rows:
        d.setdefault(i, []).append(w)
    return {i: S.mean(v) for i, v in d.items()}
a, b = per_prompt(res[0]), per_prompt(res[1024])
ratios = [a[i] / b[i] for i in a]
print(f"{cpu_name()}; 12 eval prompts, 64 tokens, all-small, value pruning, float32, 2 threads")
print("wall s per generation, prefilled apart:", round(S.mean(a.values()), 3), " fused:", round(S.mean(b.values()), 3))
print("speedup of fusing, mean of per-prompt ratios:", round(S.mean(ratios), 4), "min", round(min(ratios), 3), "max", round(max(ratios), 3))
print("outputs identical:", same)
