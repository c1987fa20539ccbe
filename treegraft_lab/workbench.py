"""Shared helpers of the workbench notebooks: the demo pair, SMOKE sizing, sample runs, run maths.

Every notebook starts with `from treegraft_lab import workbench as wb` and `S = wb.sizes()`:
with the environment variable `SMOKE=1` the sizes shrink so that a notebook runs in a minute or
two on a 2-core CPU (one or two prompts, a few dozen tokens, small budgets).
"""

from __future__ import annotations

import os
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from treegraft_lab.paths import RUNS_DIR


def smoke() -> bool:
    """True when the environment variable `SMOKE` is set to something other than 0/empty."""
    return os.environ.get("SMOKE", "").strip().lower() not in ("", "0", "false", "no")


@dataclass(frozen=True)
class Sizes:
    """How much work a notebook does. `smoke` is True for the shrunken SMOKE=1 sizes."""

    smoke: bool
    prompts: int  # prompts in total (spread over categories where a notebook groups by category)
    per_category: int
    max_new_tokens: int
    budget: int


def sizes(smoke_mode: bool | None = None) -> Sizes:
    """The notebook sizes: tiny under SMOKE=1, the full ones otherwise."""
    s = smoke() if smoke_mode is None else smoke_mode
    if s:
        return Sizes(True, prompts=2, per_category=1, max_new_tokens=20, budget=20)
    return Sizes(False, prompts=12, per_category=2, max_new_tokens=96, budget=63)


def demo_pair(device: str = "auto") -> Any:
    """The offline pair `smollm2-pocket`; before its drafter exists, a stand-in with the target as mid.

    The stand-in is only for development of views: its "mid drafter" IS the target, so every mid
    proposal is accepted and mid calls cost a full target forward. A note is printed when used.
    """
    from treegraft_lab.errors import TreeGraftError
    from treegraft_lab.models import load_pair

    try:
        return load_pair("smollm2-pocket", device=device)
    except TreeGraftError as e:
        pair = load_pair("smollm2-pocket", device=device, require_mid=False)
        print(f"note: using a stand-in pair (the target as its own mid drafter): {e}")
        return types.SimpleNamespace(
            name="smollm2-standin", tokenizer=pair.tokenizer, target=pair.target,
            mid=pair.target, device=pair.device, dtype=pair.dtype,
        )


def record_runs(pair: Any, prompts: list, config: Any, max_new_tokens: int) -> Any:
    """Decode each prompt (a string or a suite row) under `config`; return one recorded Run.

    Suite rows keep their `category` and `question_id` in the runs table.
    """
    from treegraft_lab import TreeGraftDecoder, record

    dec = TreeGraftDecoder(pair, config)
    with record(dec) as rec:
        for p in prompts:
            dec.generate(p["turns"][0] if isinstance(p, dict) else p, max_new_tokens=max_new_tokens)
    run = rec.to_run()
    run.runs["category"] = [p.get("category", "") if isinstance(p, dict) else "" for p in prompts]
    run.runs["question_id"] = [str(p.get("question_id", i)) if isinstance(p, dict) else str(i) for i, p in enumerate(prompts)]
    return run


def sample_run_dir() -> Path:
    """Where notebooks share a recorded sample run (`SAMPLE_RUN` overrides it)."""
    env = os.environ.get("SAMPLE_RUN")
    return Path(env) if env else RUNS_DIR / ("sample-smoke" if smoke() else "sample")


def sample_run(pair_factory=demo_pair, prompt: str = "Explain what a hash map is, with a short example.",
               config: Any = None, max_new_tokens: int | None = None) -> Any:
    """Load the shared sample run from `sample_run_dir()`, or record it once (needs the model)."""
    from treegraft_lab import DecodeConfig, load_run

    path = sample_run_dir()
    if (path / "meta.json").exists():
        return load_run(path)
    S = sizes()
    config = config or DecodeConfig(schedule="10101", budget=S.budget)
    run = record_runs(pair_factory(), [prompt], config, max_new_tokens or S.max_new_tokens)
    run.save(path)
    return run


# ---------------------------------------------------------------------------- run maths


def round_context(run: Any, round: int, run_id: int = 0) -> list[int]:
    """Token ids committed when `round` starts: the prompt plus every token emitted before it.

    Each earlier round emitted its accepted draft tokens plus one bonus token. The ids are
    rebuilt from the runs table's output ids, so no model is needed.
    """
    r = run.runs[run.runs["run"] == run_id].iloc[0]
    rounds = run.rounds[(run.rounds["run"] == run_id) & (run.rounds["round"] < round)]
    n = int((rounds["accepted"] + 1).sum())
    return list(r["prompt_ids"]) + list(r["output_ids"])[:n]


def accepted_spans(run: Any, run_id: int = 0) -> list[tuple[int, int, int]]:
    """(round, start, end) token offsets into the output for each round's emitted tokens."""
    rounds = run.rounds[run.rounds["run"] == run_id].sort_values("round")
    out_len = len(run.runs[run.runs["run"] == run_id].iloc[0]["output_ids"])
    spans, pos = [], 0
    for rd, acc in zip(rounds["round"], rounds["accepted"]):
        end = min(pos + int(acc) + 1, out_len)
        spans.append((int(rd), pos, end))
        pos = end
    return spans


def categories_of(run: Any) -> pd.Series:
    """A run-id -> category map (empty category when the run has none)."""
    if "category" in run.runs:
        return run.runs.set_index("run")["category"]
    return pd.Series("", index=run.runs["run"])


def graft_stats(run: Any) -> pd.DataFrame:
    """Per mid step: share of the frontier reselected at an earlier depth, pool vs conventional pool."""
    st = run.steps[run.steps["call_mid"]].copy()
    st["category"] = st["run"].map(categories_of(run))
    st["pool_ratio"] = st["pool_size"] / st["conventional_pool"].clip(lower=1)
    return st[["run", "category", "round", "step", "reselected_earlier", "pool_size", "conventional_pool", "pool_ratio"]]


# ---------------------------------------------------------------------------- synthetic runs

_WORDS = (" the a hash map key value table bucket list store fast look up index array slot collision chain "
          "probe resize load factor string number function return data structure each into by with is are "
          "that which for of to and in on when you can , . : ( ) \n").split(" ")


def synthetic_run(rounds: int = 3, depth: int = 5, width: int = 10, budget: int = 63,
                  schedule: str = "10101", non_destructive: bool = True, seed: int = 0) -> Any:
    """A Run with the recorder's tables, grown by random drafters on the real DraftTree (no model).

    For tests and for trying the views: small steps add 1-2 children to up to `width` frontier
    nodes, mid steps rescore the whole tree (EG) and add up to 3 children to the global top-W.
    """
    import json
    import math
    import random

    from treegraft_lab.hooks import Recorder, Run
    from treegraft_lab.schedule.signals import compute_signals
    from treegraft_lab.tree import MID, SMALL, DraftTree

    rng = random.Random(seed)
    words = [w or " " for w in _WORDS]
    tables: dict[str, list] = {"rounds": [], "steps": [], "nodes": [], "tree": []}
    out: list[int] = []
    root = 0
    for rd in range(rounds):
        t, last_new, expanded = DraftTree.start(root), [0], []
        for k in range(1, depth + 1):
            call = schedule[k - 1] == "1"
            sig = compute_signals(t, last_new, expanded, width, 5)
            pool = [v for v in range(len(t)) if t.alive[v] and not t.mid_scored[v]] if call else list(last_new)
            if call:
                for v in pool:
                    if v and rng.random() < 0.5:
                        t.logp[v] = math.log(rng.uniform(0.05, 0.95))
                    t.mid_scored[v] = True
                t.refresh_scores()
            front = sorted((v for v in pool if t.alive[v]), key=lambda v: (-t.score[v], t.depth[v], v))[:width]
            mean_prev = sum(t.depth[v] for v in last_new) / max(len(last_new), 1)
            new = []
            for v in front:
                if not t.alive[v]:
                    continue
                kids = rng.sample(range(len(words)), rng.randint(2 if call else 1, 4 if call else 3))
                if call and not non_destructive:
                    for tok, c in list(t.children[v].items()):
                        if tok not in kids:
                            t.kill_subtree(c)
                for tok in kids:
                    lp = math.log(rng.uniform(0.05, 0.95))
                    nid, _ = t.add_child(v, tok, lp, MID if call else SMALL, k, 0 if call else rng.randint(1, 5))
                    new.append(nid)
            tables["steps"].append({
                "run": 0, "round": rd, "step": k, "call_mid": call, "policy_score": math.nan, **sig,
                "pool_size": len(pool), "conventional_pool": len(last_new), "frontier_size": len(front),
                "new_nodes": len(set(new)), "tree_size": sum(t.alive),
                "reselected_earlier": sum(t.depth[v] < mean_prev for v in front) / len(front) if call and front else math.nan,
            })
            for v in range(len(t)):
                tables["nodes"].append({"run": 0, "round": rd, "step": k, **Recorder._node(t, v),
                                        "in_pool": v in pool, "in_frontier": v in front, "new": v in new})
            expanded, last_new = front, new
        kept = t.prune(budget)
        path, v = [0], 0
        while True:
            kids = [c for c in t.children[v].values() if c in kept and t.alive[c]]
            if not kids or rng.random() < 0.25:
                break
            v = max(kids, key=lambda c: t.score[c])
            path.append(v)
        bonus = rng.randrange(len(words))
        for u in range(len(t)):
            tables["tree"].append({"run": 0, "round": rd, **Recorder._node(t, u), "kept": u in kept,
                                   "accepted": u in path, "target_token": rng.randrange(len(words)) if u in kept else -1})
        draft_ms, verify_ms = 20 + 40 * schedule.count("1") * rng.uniform(0.8, 1.2), 60 * rng.uniform(0.9, 1.1)
        tables["rounds"].append({
            "run": 0, "round": rd, "root_token": root, "bonus_token": bonus, "accepted": len(path) - 1,
            "schedule": schedule, "mid_calls": schedule.count("1"), "nodes": sum(t.alive), "kept": len(kept) - 1,
            "draft_ms": draft_ms, "verify_ms": verify_ms, "forward_ms": draft_ms + verify_ms - 5,
            "round_ms": draft_ms + verify_ms, "eta": 1000 * len(path) / (draft_ms + verify_ms),
        })
        out += [t.tokens[u] for u in path[1:]] + [bonus]
        root = bonus
    frames = {k: pd.DataFrame(v) for k, v in tables.items()}
    for name, col in (("nodes", "token"), ("tree", "token"), ("tree", "target_token")):
        frames[name][col.replace("token", "text")] = [words[i] if i >= 0 else "" for i in frames[name][col]]
    frames["rounds"]["root_text"] = [words[i] for i in frames["rounds"]["root_token"]]
    frames["rounds"]["bonus_text"] = [words[i] for i in frames["rounds"]["bonus_token"]]
    prompt = [1, 2, 3, 0]
    frames["runs"] = pd.DataFrame([{
        "run": 0, "pair": "synthetic", "prompt_ids": prompt, "output_ids": out,
        "prompt_text": "".join(words[i] for i in prompt), "output_text": "".join(words[i] for i in out),
        "config": json.dumps({"depth": depth, "width": width, "budget": budget, "schedule": schedule,
                              "expanded_graft": True, "non_destructive": non_destructive}),
        "category": "synthetic", "question_id": "0",
    }])
    return Run(**frames, meta={"synthetic": True})
