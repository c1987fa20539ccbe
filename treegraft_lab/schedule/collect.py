"""Offline trajectories for the scheduler: replay every binary schedule from sampled round starts.

A round start is fully determined by the committed context (the tree is rebuilt every round, the
n-gram index and the caches hold only committed tokens), and greedy decoding is lossless, so the
contexts any decoder meets are prefixes of the target's own greedy continuation. Collection
therefore decodes each prompt once autoregressively, samples positions j of the continuation,
starts the decoder on `prompt + continuation[:j]` and replays all 2^D schedules from there with
`commit=False` semantics (nothing is committed; caches are rolled back).

The replay is a depth-first search over the schedule tree: the draft tree after steps 1..j
depends only on bits 1..j, so each prefix is expanded once (2 + 4 + ... + 2^D = 62 expansions for
D = 5) and each full schedule is verified once (32 verifications). Between siblings the draft
tree is copied and the mid drafter's round state (its scored rows, slots and cache length) is
restored. `test_scheduler.py` checks that every replayed schedule accepts exactly what
`TreeGraftDecoder._round` accepts with that mask.

Timing. Every expansion and verification is timed (`meas_*` columns) and its size logged (frontier
nodes for a small step, tokens forwarded for a mid step, kept nodes for a verification) in a calls
table. The `t_draft_ms` / `t_verify_ms` columns the scheduler trains on come from a `CostProfile`
(linear in those sizes): by default one fitted robustly to this collection's own measurements
(noise from a shared machine averages out and the numbers are reproducible), or one given with
`--costs FILE` (e.g. measured on the deployment GPU with `collect --measure-costs`), so that
trajectories collected on a CPU can model another device's cost ratio.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from treegraft_lab import kv
from treegraft_lab.config import DecodeConfig
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.schedule.policies import StepContext
from treegraft_lab.schedule.signals import SIGNALS
from treegraft_lab.tree import SMALL, DraftTree
from treegraft_lab.verify import accept_greedy

KINDS = ("small", "mid", "verify")
SHARD_GLOB = "shard-*.parquet"


# ---------------------------------------------------------------------------- cost profile
@dataclass
class CostProfile:
    """Per-call costs in ms, each `a + b * n`: small step (n = frontier nodes), mid step (n = tokens
    forwarded), verification (n = kept nodes, root included). `mid_ref` / `verify_ref` are the
    sizes at which the context features T_mid / T_tgt are read off the profile."""

    small: tuple[float, float] = (0.5, 0.0)
    mid: tuple[float, float] = (10.0, 0.0)
    verify: tuple[float, float] = (20.0, 0.0)
    mid_ref: float = 30.0
    verify_ref: float = 64.0
    device: str = ""
    source: str = ""

    def ms(self, kind: str, n: float) -> float:
        a, b = getattr(self, kind)
        return a + b * n

    @property
    def t_tgt_ms(self) -> float:
        return self.ms("verify", self.verify_ref)

    @property
    def t_mid_ms(self) -> float:
        return self.ms("mid", self.mid_ref)

    def scaled(self, mid: float = 1.0, target: float = 1.0) -> CostProfile:
        """The profile with mid-step and verification costs multiplied (cost augmentation)."""
        s = {k: getattr(self, k) for k in ("small", "mid_ref", "verify_ref", "device", "source")}
        return CostProfile(mid=(self.mid[0] * mid, self.mid[1] * mid),
                           verify=(self.verify[0] * target, self.verify[1] * target), **s)

    def to_dict(self) -> dict:
        return {**asdict(self), "format": "treegraft-costs/1"}

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> CostProfile:
        try:
            d = json.loads(Path(path).read_text())
            kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
            for k in KINDS:
                kw[k] = tuple(float(x) for x in kw[k])
                if len(kw[k]) != 2:
                    raise ValueError(f"{k} needs [a, b]")
            return cls(**kw)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise TreeGraftError(f"cost profile {path} is unreadable ({e}); it needs JSON with "
                                 "'small', 'mid', 'verify' as [a_ms, b_ms_per_node]") from e

    @classmethod
    def fit(cls, calls: pd.DataFrame, device: str = "", source: str = "fitted") -> CostProfile:
        """Robust linear fits per kind from a calls table (columns kind, n, ms)."""
        kw: dict = {}
        for k in KINDS:
            sub = calls[calls["kind"] == k]
            if sub.empty:
                raise TreeGraftError(f"no '{k}' calls were measured: cannot fit a cost profile")
            kw[k] = robust_line(sub["n"].to_numpy(float), sub["ms"].to_numpy(float))
        mid = calls[calls["kind"] == "mid"]["n"]
        ver = calls[calls["kind"] == "verify"]["n"]
        return cls(**kw, mid_ref=float(mid.mean()), verify_ref=float(ver.median()), device=device, source=source)


def robust_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(a, b) of y ~ a + b x, least squares refitted twice without outliers (|r| > 3 MAD), b >= 0.

    With too little spread in x the slope is 0 and a is the median (a constant cost).
    """
    keep = np.ones(len(x), dtype=bool)
    if len(np.unique(x)) < 3 or np.ptp(x) < 4:
        return float(np.median(y)), 0.0
    a, b = float(np.median(y)), 0.0
    for _ in range(3):
        b, a = np.polyfit(x[keep], y[keep], 1)
        if b < 0:
            a, b = float(np.median(y[keep])), 0.0
        r = y - (a + b * x)
        mad = np.median(np.abs(r[keep] - np.median(r[keep]))) + 1e-9
        keep = np.abs(r - np.median(r[keep])) < 3 * 1.4826 * mad
        if keep.sum() < 3:
            break
    return float(a), float(b)


def apply_costs(df: pd.DataFrame, prof: CostProfile) -> pd.DataFrame:
    """Set t_draft_ms, t_verify_ms (per row) and the context features t_tgt_ms, t_mid_ms."""
    df = df.copy()
    df["t_draft_ms"] = (df["n_small"] * prof.small[0] + df["small_nodes"] * prof.small[1]
                        + df["n_mid"] * prof.mid[0] + df["mid_tokens"] * prof.mid[1])
    df["t_verify_ms"] = prof.verify[0] + prof.verify[1] * df["kept"]
    df["t_tgt_ms"] = prof.t_tgt_ms
    df["t_mid_ms"] = prof.t_mid_ms
    return df


# ---------------------------------------------------------------------------- the replay
def copy_tree(t: DraftTree) -> DraftTree:
    """A copy of the tree (lists copied, children dicts copied): cheaper than deepcopy."""
    kw = {f.name: list(getattr(t, f.name)) for f in fields(DraftTree)}
    kw["children"] = [dict(c) for c in t.children]
    return DraftTree(**kw)


def _mid_state(m) -> tuple:
    return m.flushed, dict(m.slot), dict(m.row), list(m.rows), kv.cache_len(m.cache)


def _mid_restore(m, s: tuple) -> None:
    m.flushed, m.slot, m.row, m.rows = s[0], dict(s[1]), dict(s[2]), list(s[3])
    kv.truncate(m.cache, s[4])


def expand_step(dec, tree: DraftTree, k: int, call: bool, last_new: list[int],
                expanded: list[int] = ()) -> tuple[list[int], list[int], int]:
    """Draft step k through `TreeGraftDecoder.draft_step`. Returns (frontier, new, size).

    size: tokens the mid drafter forwarded, pending context included (mid step), or frontier
    nodes (small step): the cost profile's x-axis.
    """
    before = kv.cache_len(dec.mid.cache)
    _, frontier, new, _, _, _ = dec.draft_step(tree, k, call, last_new, expanded)
    return frontier, new, (kv.cache_len(dec.mid.cache) - before) if call else len(frontier)


def path_trie(root: int, trees: list[tuple[DraftTree, list[int]]]) -> tuple[DraftTree, list[dict[int, int]]]:
    """The union of the kept parts of `trees`, merged by token path; and each tree's node -> trie id.

    A node's target logits depend only on its token path, so one forward over the trie verifies
    every tree at once.
    """
    trie, maps = DraftTree.start(root), []
    for tree, kept in trees:
        m = {0: 0}
        for v in kept[1:]:  # increasing ids: a parent comes before its children
            m[v], _ = trie.add_child(m[tree.parent[v]], tree.tokens[v], 0.0, SMALL, tree.depth[v])
        maps.append(m)
    return trie, maps


def replay_all(dec, shared_verify: bool = True, timed: int = 3, seed: int = 0,
               max_trie: int = 1536) -> tuple[list[dict], list[dict], list[dict]]:
    """Every schedule from the decoder's current round start, by DFS over shared prefixes.

    Returns (states, leaves, calls): states are the decision points (k, prefix, signals), leaves
    the full schedules (accepted, counts, measured times), calls the timed (kind, n, ms).
    With `shared_verify` all 2^D trees are verified by one target forward over their path trie
    (`path_trie`; skipped when it exceeds `max_trie` nodes) and only `timed` randomly chosen
    schedules are also verified alone, timed, to feed the cost profile (their acceptance is
    checked against the shared one: `leaf["check"]`). Otherwise every verification is timed.
    """
    cfg, D = dec.config, dec.config.depth
    if not cfg.greedy:
        raise TreeGraftError("collection needs greedy decoding (temperature 0): acceptance must be deterministic")
    if dec.mid is None:
        raise TreeGraftError("collection needs a pair with a mid drafter")
    states: list[dict] = []
    leaves: list[dict] = []
    calls: list[dict] = []

    finals: list[tuple[DraftTree, list[int]]] = []

    def verify_alone(tree: DraftTree, kept: list[int]) -> tuple[int, float]:
        (path, _), t = dec._timed(lambda: accept_greedy(tree, kept, dec.target.forward_tree(tree, kept)))
        dec.target.rollback()
        calls.append({"kind": "verify", "n": len(kept), "ms": 1000 * t})
        return len(path) - 1, 1000 * t

    def leaf(tree: DraftTree, bits: tuple[int, ...], acc: dict) -> None:
        kept = dec.prune(tree)
        finals.append((tree, kept))
        leaves.append({"schedule": "".join(map(str, bits)), "accepted": -1, "kept": len(kept),
                       "nodes": sum(tree.alive), **acc, "meas_verify_ms": math.nan, "check": True})

    def visit(k: int, tree: DraftTree, bits: tuple[int, ...], last_new: list[int], expanded: list[int], acc: dict) -> None:
        if k > D:
            leaf(tree, bits, acc)
            return
        ctx = StepContext(k, D, list(bits), tree, last_new, expanded, dec.prompt_len,
                          dec.costs["t_tgt_ms"], dec.costs["t_mid_ms"], cfg.width, cfg.ngram_max, dec.small.index,
                          cfg.lookback)
        states.append({"k": k, "prefix": "".join(map(str, bits)), **ctx.signals()})
        mid0 = _mid_state(dec.mid)
        for a in (0, 1):
            child = copy_tree(tree) if a == 0 else tree  # the parent no longer needs its tree after the last child
            (frontier, new, size), t = dec._timed(expand_step, dec, child, k, bool(a), last_new, expanded)
            kind = "mid" if a else "small"
            calls.append({"kind": kind, "n": size, "ms": 1000 * t})
            nxt = {**acc, f"n_{kind}": acc[f"n_{kind}"] + 1, f"{kind}_{'tokens' if a else 'nodes'}":
                   acc[f"{kind}_{'tokens' if a else 'nodes'}"] + size, "meas_draft_ms": acc["meas_draft_ms"] + 1000 * t}
            visit(k + 1, child, bits + (a,), new, frontier, nxt)
            _mid_restore(dec.mid, mid0)

    dec.replaying = True
    try:
        visit(1, DraftTree.start(dec.root), (), [0], [],
              {"n_small": 0, "small_nodes": 0, "n_mid": 0, "mid_tokens": 0, "meas_draft_ms": 0.0})
        pick = set(random.Random(seed).sample(range(len(leaves)), min(timed, len(leaves))))
        trie, maps = path_trie(dec.root, finals) if shared_verify else (None, [])
        if trie is not None and len(trie) <= max_trie:
            best = dec.target.forward_tree(trie, list(range(len(trie)))).argmax(-1)
            dec.target.rollback()
            for lf, (tree, kept), m in zip(leaves, finals, maps):
                path, _ = accept_greedy(tree, kept, _onehot_rows(best, [m[v] for v in kept]))
                lf["accepted"] = len(path) - 1
        for i, (lf, (tree, kept)) in enumerate(zip(leaves, finals)):
            if lf["accepted"] < 0 or i in pick:
                acc, lf["meas_verify_ms"] = verify_alone(tree, kept)
                lf["check"] = lf["accepted"] < 0 or acc == lf["accepted"]
                lf["accepted"] = acc
    finally:
        dec.replaying = False
    return states, leaves, calls


def _onehot_rows(best: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """Rows whose argmax is `best[rows]` (all `accept_greedy` reads from the logits)."""
    sel = best[rows]
    out = torch.zeros(len(rows), int(sel.max()) + 1)
    out[torch.arange(len(rows)), sel] = 1.0
    return out


def state_rows(states: list[dict], leaves: list[dict], base: dict) -> list[dict]:
    """One row per (full schedule, step k): the state's signals joined with the schedule's outcome."""
    by_prefix = {(s["k"], s["prefix"]): s for s in states}
    rows = []
    for lf in leaves:
        sched = lf["schedule"]
        for k in range(1, len(sched) + 1):
            s = by_prefix[(k, sched[: k - 1])]
            rows.append({**base, **{f"sig_{n}": s[n] for n in SIGNALS}, "k": k, "prefix": sched[: k - 1],
                         "a": int(sched[k - 1]), **{f"s{i + 1}": int(c) for i, c in enumerate(sched)}, **lf})
    return rows


# ---------------------------------------------------------------------------- one shard
@dataclass
class CollectConfig:
    """What to collect: `states` round starts per prompt, at positions drawn uniformly from the first
    `max_new` tokens of the target's greedy answer (which is decoded only as far as needed)."""

    states: int = 2
    max_new: int = 128
    seed: int = 0
    shard: tuple[int, int] = (0, 1)
    shared_verify: bool = True  # one target forward over the path trie of all 2^D trees
    timed: int = 3  # schedules per round start also verified alone, timed (the cost profile's data)
    decode: dict = field(default_factory=dict)  # DecodeConfig overrides (depth, width, budget, ...)
    # The mid drafter's cache lags the committed text by a lag drawn uniformly from 0..mid_lag
    # tokens at each round start, as after rounds without a mid call (`ModelDrafter.unforward`): the first
    # mid call of a replay then pays the backlog a decode that calls it rarely pays. 0: no lag.
    mid_lag: int = 0


def shard_paths(out_dir: Path, shard: tuple[int, int]) -> tuple[Path, Path, Path]:
    stem = f"shard-{shard[0]:03d}-of-{shard[1]:03d}"
    return out_dir / f"{stem}.parquet", out_dir / f"{stem}.calls.parquet", out_dir / f"{stem}.json"


def _write(df: pd.DataFrame, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    df.to_parquet(tmp, index=False)
    tmp.rename(path)


def collect_shard(pair, prompts: list[dict], cfg: CollectConfig, out_dir: Path, costs: CostProfile | None = None,
                  meta: dict | None = None, progress: bool = True, save_every_s: float = 120.0) -> Path:
    """Collect this shard's prompts into `out_dir` (resumable: prompts already written are skipped)."""
    from tqdm.auto import tqdm

    from treegraft_lab.baselines import autoregressive
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.prompting import encode_prompt, eos_ids

    i, n = cfg.shard
    if not 0 <= i < n:
        raise TreeGraftError(f"shard {i}/{n}: need 0 <= i < n")
    out_dir.mkdir(parents=True, exist_ok=True)
    rows_p, calls_p, meta_p = shard_paths(out_dir, cfg.shard)
    mine = prompts[i::n]
    rows: list[dict] = []
    calls: list[dict] = []
    done: set[str] = set()
    if rows_p.exists() and calls_p.exists():
        old = pd.read_parquet(rows_p)
        rows, calls = old.to_dict("records"), pd.read_parquet(calls_p).to_dict("records")
        done = set(old["qid"].astype(str))
    dcfg = DecodeConfig(**{**cfg.decode, "schedule": "mid", "temperature": 0.0})
    dec = TreeGraftDecoder(pair, dcfg)
    stop = eos_ids(pair.tokenizer, pair.target)
    rng = random.Random(f"{cfg.seed}-{i}-{n}")
    todo = [p for p in mine if str(p["question_id"]) not in done]
    bar = tqdm(total=len(todo) * cfg.states, desc=f"collect {i}/{n}", unit="state", mininterval=5, disable=not progress)
    last = time.time()

    def save(final: bool = False) -> None:
        df = pd.DataFrame(rows)
        cl = pd.DataFrame(calls)
        if df.empty:
            raise TreeGraftError("nothing was collected: no prompt produced a round start")
        prof = costs or CostProfile.fit(cl, device=str(pair.device), source=f"fitted on {calls_p.name}")
        _write(apply_costs(df, prof), rows_p)
        _write(cl, calls_p)
        info = {"format": "treegraft-trajectories/1", "pair": pair.name, "shard": [i, n], "collect": asdict(cfg),
                "decode": dcfg.to_dict(), "prompts_done": len({r["qid"] for r in rows}), "states": int(df["state"].nunique()),
                "costs": prof.to_dict(), "costs_given": costs is not None, "complete": final, **(meta or {})}
        meta_p.write_text(json.dumps(info, indent=1, default=str) + "\n")

    state_id = max((int(r["state"].split(":")[-1]) for r in rows), default=-1) + 1 if rows else 0
    for p in todo:
        ids = encode_prompt(pair.tokenizer, p["turns"][0])
        spots = sorted(rng.sample(range(cfg.max_new), min(cfg.states, cfg.max_new)))
        cont = autoregressive(pair, ids, max_new_tokens=spots[-1]).token_ids if spots[-1] else []
        ended = bool(cont) and cont[-1] in stop  # no round starts after the end of the answer
        spots = [j for j in spots if j < len(cont) + (not ended)]
        for j in spots:
            dec.start(ids + cont[:j])
            dec.prompt_len = len(ids)
            lag = dec.mid.unforward(dec.ids, rng.randint(0, cfg.mid_lag)) if cfg.mid_lag else 0
            st, lv, cl = replay_all(dec, cfg.shared_verify, cfg.timed, seed=rng.randrange(2**31))
            base = {"qid": str(p["question_id"]), "category": p.get("category", ""), "state": f"{i}:{state_id}",
                    "position": j, "prompt_len": len(ids), "D": dcfg.depth, "mid_lag": lag}
            rows += state_rows(st, lv, base)
            calls += [{**c, "state": base["state"]} for c in cl]
            state_id += 1
            bar.update(1)
        bar.update(cfg.states - len(spots))
        if time.time() - last > save_every_s:
            save()
            last = time.time()
    bar.close()
    save(final=True)
    return rows_p


# ---------------------------------------------------------------------------- merge and costs
def merge(out_dir: Path, costs: CostProfile | None = None) -> Path:
    """Concatenate the shards of `out_dir` into trajectories.parquet, timed by one profile.

    Without `costs` the profile is refitted on every shard's measured calls (saved as costs.json).
    """
    shards = sorted(out_dir.glob(SHARD_GLOB))
    shards = [s for s in shards if not s.name.endswith(".calls.parquet")]
    if not shards:
        raise TreeGraftError(f"no shards (shard-*.parquet) in {out_dir}: run `treegraft-lab collect` first")
    df = pd.concat([pd.read_parquet(s) for s in shards], ignore_index=True)
    calls = pd.concat([pd.read_parquet(s.with_suffix(".calls.parquet")) for s in shards], ignore_index=True)
    metas = [json.loads(s.with_suffix(".json").read_text()) for s in shards]
    pairs = {m["pair"] for m in metas}
    if len(pairs) > 1:
        raise TreeGraftError(f"shards in {out_dir} come from different pairs: {sorted(pairs)}")
    prof = costs or CostProfile.fit(calls, device=metas[0]["costs"].get("device", ""), source=f"fitted on {len(shards)} shard(s)")
    out = out_dir / "trajectories.parquet"
    _write(apply_costs(df, prof), out)
    prof.save(out_dir / "costs.json")
    info = {"format": "treegraft-trajectories/1", "pair": pairs.pop(), "shards": [m["shard"] for m in metas],
            "complete": all(m.get("complete") for m in metas), "states": int(df["state"].nunique()),
            "prompts": int(df["qid"].nunique()), "rows": len(df), "costs": prof.to_dict(),
            "shard_meta": metas}
    (out_dir / "trajectories.json").write_text(json.dumps(info, indent=1, default=str) + "\n")
    return out


def measure_costs(pair, ids: list[int], decode: dict | None = None, reps: int = 3) -> CostProfile:
    """Measure a cost profile on this device: verifications and mid calls over synthetic trees.

    The context is `ids` (prefilled once); trees are binary-heap shaped with n nodes.
    """
    from treegraft_lab.decoder import TreeGraftDecoder

    dec = TreeGraftDecoder(pair, DecodeConfig(**{**(decode or {}), "schedule": "mid"}))
    dec.start(ids)
    rows = []
    for n in (8, 16, 24, 32, 48, 64):
        tree = DraftTree.start(dec.root)
        for t in range(1, n):
            tree.add_child((t - 1) // 2, 100 + t, math.log(0.5), SMALL, 1)  # a binary-heap shape
        nodes = list(range(len(tree)))
        for _ in range(reps):
            _, t = dec._timed(dec.target.forward_tree, tree, nodes)
            dec.target.rollback()
            rows.append({"kind": "verify", "n": len(nodes), "ms": 1000 * t})
            _, t = dec._timed(dec.mid.score, tree, nodes)
            dec.mid.rollback()
            rows.append({"kind": "mid", "n": len(nodes), "ms": 1000 * t})
            front = nodes[-dec.config.width:]
            _, t = dec._timed(dec.small.propose, tree, front, dec.config.width)
            rows.append({"kind": "small", "n": len(front), "ms": 1000 * t})
    if dec.device.type == "cuda":
        torch.cuda.synchronize(dec.device)
    prof = CostProfile.fit(pd.DataFrame(rows), device=str(dec.device), source="measure_costs")
    prof.verify_ref = float(dec.budget + 1)
    return prof
