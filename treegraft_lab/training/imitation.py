"""Learning WHEN from the oracle, on stored replays: imitation (with DAgger rounds) and the value-and-
margin route, both on `schedule.stepwise`'s inputs, judged by their capture of the oracle's gain.

A replay folder holds, for every round start of each prompt's answer, all 2^D schedules'
outcomes (`regime`). With every start replayed, any per-step policy can be run through them:
`walk` takes the policy's decision at each step of each round from a `StepContext` built from the
replays (the small step's frontier size from the stored sizes, the context signals and the target's
confidence from `context_signals`, the round signals from the walk's own rounds), exactly what the
decoder hands the same policy. The oracle's cost-to-go V(j) (a shortest path over the starts) gives
each step's two choices a value: Q(j, prefix + b) = min over masks with that prefix of
(round ms + V(next start)). Imitation learns P(b* = 1) weighted by |Q1 - Q0|; the value route
regresses the margin (Q0 - Q1) / T_tgt. DAgger: after fitting on the oracle's own walks, the
learner walks the training prompts itself and the states it visits are labelled and added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from treegraft_lab.costs import DeviceProfile, scheduler_costs
from treegraft_lab.engine import LOCAL, Engine, Unit
from treegraft_lab.engine import run as run_units
from treegraft_lab.regime import Replays, masks
from treegraft_lab.replay import leaf_ms
from treegraft_lab.schedule.context import RoundHistory, StepContext
from treegraft_lab.schedule.stepwise import FORMAT, StepwisePolicy, step_features

HINDSIGHT = "hindsight_mid_gain"  # not causal: the diagnostic's extra input (`walk(hindsight=True)`)
HINDSIGHT_SET = "+hindsight"  # the diagnostic's signal set ends so: its walks are never a scheduler's


def causal(signal_set: str) -> bool:
    return not signal_set.endswith(HINDSIGHT_SET)


class HindsightPolicy(StepwisePolicy):
    """A diagnostic, never a scheduler: the network also reads `HINDSIGHT` (what a mid call here would
    add to the round's accepted length, known only from the replays). How close it comes to the
    oracle says whether the learners lack capacity or information."""

    def decide(self, ctx: StepContext) -> bool:
        feats = {**step_features(ctx, [f for f in self.features if f != HINDSIGHT]), HINDSIGHT: ctx.hindsight}
        self.last_score = self.score([feats[f] for f in self.features])
        return self.last_score > self.threshold


# ---------------------------------------------------------------------------- the context signals
def context_signals(pair, prompts: list[dict], df: pd.DataFrame, ngram_max: int = 5, ngram_min: int = 1) -> pd.DataFrame:
    """One row per (prompt, start) of the replays `df`: the two context signals of the committed text
    `prompt + answer[:pos]` (the decoder's own `NgramIndex`) and the target's top-1 probability at
    its last token (`target_top1` of the round that ended there: one target forward over the answer).
    The answer is the target's greedy one, as the replays read it; its length is checked."""
    from treegraft_lab.baselines import autoregressive
    from treegraft_lab.drafters import NgramIndex
    from treegraft_lab.errors import TreeGraftError
    from treegraft_lab.prompting import encode_prompt

    lengths = df.groupby("qid")["length"].first()
    rows = []
    for p in prompts:
        qid = str(p["question_id"])
        if qid not in lengths.index:
            continue
        L = int(lengths[qid])
        ids = encode_prompt(pair.tokenizer, p["turns"][0])
        ans = autoregressive(pair, ids, max_new_tokens=L).token_ids[:L]
        if len(ans) != L:
            raise TreeGraftError(f"{qid}: the greedy answer has {len(ans)} tokens, the replays {L}: collect them again")
        with torch.no_grad():
            logits = pair.target(torch.tensor([ids + ans], device=pair.target.device)).logits[0].float()
        top1 = torch.softmax(logits, -1).max(-1).values[len(ids) - 1:].tolist()  # top1[i]: at answer token i
        idx = NgramIndex(ngram_max, ngram_min)
        idx.extend(ids)
        for j in range(L):
            rows.append({"qid": qid, "pos": j, "root_match": idx.match_size() / ngram_max,
                         "recent_hit_rate": idx.recent_hit_rate(), "target_top1": top1[j - 1] if j else 0.0})
            idx.extend([ans[j]])
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- walks
@dataclass
class Prompt:
    """One prompt's replays with its context signals per start."""

    rep: Replays
    ctx: dict[int, tuple[float, float, float]]

    @property
    def qid(self) -> str:
        return self.rep.qid


def prompts_of(reps: list[Replays], signals: pd.DataFrame) -> list[Prompt]:
    by = {q: {int(r.pos): (r.root_match, r.recent_hit_rate, r.target_top1) for r in g.itertuples()}
          for q, g in signals.groupby("qid")}
    return [Prompt(r, by[r.qid]) for r in reps if r.qid in by]


def complete(p: Prompt) -> bool:
    """Whether every start of the answer was replayed (any policy's walk can then be priced)."""
    return all((j, "0" * p.rep.depth) in p.rep.rows for j in range(p.rep.length))


_VALUES: dict = {}  # (prompt, profile) -> Q: the same replays priced once per process


def values(p: Prompt, profile: DeviceProfile) -> dict[int, dict[str, float]]:
    """Q[j][mask]: the round's modelled ms (backlog 0) plus the oracle's cost-to-go from where it
    lands (inf where that start was not replayed)."""
    key = (id(p.rep), profile.name, tuple(sorted(profile.mid.items())))
    if key not in _VALUES or _VALUES[key][0] is not p.rep:  # the replays are kept: their id is not reused
        _VALUES[key] = (p.rep, _values(p, profile))
    return _VALUES[key][1]


def _values(p: Prompt, profile: DeviceProfile) -> dict[int, dict[str, float]]:
    r, L = p.rep, p.rep.length
    V = {j: 0.0 for j in range(L, L + r.depth + 2)}
    Q = {}
    for j in range(L - 1, -1, -1):
        if (j, "0" * r.depth) not in r.rows:
            V[j] = math.inf
            continue
        q = {}
        for m in masks(r.depth):
            lf = r.rows[(j, m)]
            q[m] = sum(leaf_ms(profile, lf, r.depth, 0)) + V.get(min(L, j + int(lf["accepted"]) + 1), math.inf)
        Q[j], V[j] = q, min(q.values())
    return Q


def step_q(q: dict[str, float], prefix: str) -> tuple[float, float]:
    """(Q of a small step, Q of a mid step) after `prefix`: the best mask that continues each way."""
    return (min(v for m, v in q.items() if m.startswith(prefix + "0")),
            min(v for m, v in q.items() if m.startswith(prefix + "1")))


def walk(p: Prompt, profile: DeviceProfile, config, decide, states: list | None = None,
         hindsight: bool = False) -> dict | None:
    """A decode of `p` whose draft step k of each round calls the mid drafter where `decide(ctx)`
    says (the first round is all-small: the decoder does not ask a policy there), priced by
    `profile` as `Replays.walk` prices it. `states`: each step's (features, start, prefix, backlog)
    is appended. None where the walk reaches a start that was not replayed. `hindsight` (a
    diagnostic, not a scheduler's input): each context also carries `HINDSIGHT`, what calling the
    mid drafter at this step would add to the round's accepted length, read from the replays."""
    r, D = p.rep, p.rep.depth
    t_tgt, t_mid = scheduler_costs(profile, config)
    hist = RoundHistory(D)
    j, backlog, ms, acc, run = 0, 0, 0.0, 0, []
    while j < r.length:
        if (j, "0" * D) not in r.rows:
            return None
        root_match, hit_rate, _ = p.ctx[j]
        bits: list[int] = []
        for k in range(1, D + 1):
            prefix = "".join(map(str, bits))
            size = int(r.rows[(j, prefix + "0" * (D - len(prefix)))][f"size{k}"])
            ctx = StepContext(k=k, depth=D, history=list(bits), tree=None, frontier=[], expanded_last=[], prompt_len=0,
                              t_tgt_ms=t_tgt, t_mid_ms=t_mid, width=config.width, ngram_max=config.ngram_max,
                              rounds=hist, small_size=size,
                              _signals={"root_match": root_match, "recent_hit_rate": hit_rate})
            feats = step_features(ctx)
            if hindsight:
                mid = int(r.rows[(j, prefix + "1" + "0" * (D - len(prefix) - 1))]["accepted"])
                feats[HINDSIGHT] = ctx.hindsight = (mid - int(r.rows[(j, prefix + "0" * (D - len(prefix)))]["accepted"])) / D
            if states is not None and j:
                states.append((feats, j, prefix, backlog))
            bits.append(int(bool(decide(ctx))) if j else 0)
        mask = "".join(map(str, bits))
        lf = r.rows[(j, mask)]
        ms += sum(leaf_ms(profile, lf, D, backlog))
        a, tail = int(lf["accepted"]), int(lf["tail"])
        backlog = tail if tail >= 0 else backlog + a + 1
        j += a + 1
        hist.add(a, mask.count("1"), None, p.ctx[j][2] if j < r.length else 0.0)  # top1 at its bonus
        acc += a
        run.append(mask)
    return {"qid": r.qid, "category": r.category, "tokens": r.length, "ms": ms, "rounds": len(run), "accepted": acc,
            "mid_calls": sum(m.count("1") for m in run), "schedules": " ".join(run),
            "speedup": r.length * profile.target_ms(1) / ms}


# ---------------------------------------------------------------------------- learners
def labelled(states: list, Q: dict, t_tgt: float, features: list[str]) -> list[tuple[list[float], float, float]]:
    """(inputs, Q0, Q1 in verifications) of the states whose both choices have a finite value."""
    out = []
    for feats, j, prefix, _ in states:
        if j not in Q:
            continue
        q0, q1 = step_q(Q[j], prefix)
        if math.isfinite(q0) and math.isfinite(q1):
            out.append(([feats[f] for f in features], q0 / t_tgt, q1 / t_tgt))
    return out


def fit(data: list, features: list[str], kind: str, hidden: int = 16, steps: int = 400, seed: int = 0,
        name: str | None = None) -> StepwisePolicy:
    """The network on `labelled` rows: imitation (weighted logistic loss on b* = [Q1 < Q0], weight
    |Q1 - Q0| capped at 4 verifications) or value (Huber loss on the margin Q0 - Q1, capped at 4)."""
    X = torch.tensor([x for x, _, _ in data], dtype=torch.float32)
    q = torch.tensor([(a, b) for _, a, b in data], dtype=torch.float32)
    margin = (q[:, 0] - q[:, 1]).clamp(-4, 4)
    mean, scale = X.mean(0), X.std(0).clamp_min(1e-6)
    Z = (X - mean) / scale
    g = torch.Generator().manual_seed(seed)
    w1 = (torch.randn(len(features), hidden, generator=g) * 0.3).requires_grad_()
    b1 = torch.zeros(hidden, requires_grad=True)
    w2 = (torch.randn(hidden, generator=g) * 0.3).requires_grad_()
    b2 = torch.zeros((), requires_grad=True)
    opt = torch.optim.Adam([w1, b1, w2, b2], lr=0.03, weight_decay=1e-4)
    weight = margin.abs() / margin.abs().mean().clamp_min(1e-9)
    for _ in range(steps):
        out = torch.tanh(Z @ w1 + b1) @ w2 + b2
        if kind == "imitation":
            loss = (torch.nn.functional.binary_cross_entropy_with_logits(out, (margin > 0).float(), reduction="none")
                    * weight).mean()
        else:
            loss = torch.nn.functional.huber_loss(out, margin)
        opt.zero_grad()
        loss.backward()
        opt.step()
    doc = {"format": FORMAT, "kind": kind, "features": list(features), "hidden": hidden,
           "mean": mean.tolist(), "scale": scale.tolist(), "w1": w1.detach().tolist(), "b1": b1.detach().tolist(),
           "w2": w2.detach().tolist(), "b2": float(b2.detach()), "rows": len(data)}
    return (HindsightPolicy if HINDSIGHT in features else StepwisePolicy)(doc, name)


def expert_walk(p: Prompt, profile: DeviceProfile, config, Q: dict, hindsight: bool = False) -> tuple[dict | None, list]:
    """The oracle's own walk, taking at each step the choice that continues the best mask from
    there (from Q), and the states it visits."""
    states: list = []

    def decide(ctx: StepContext) -> bool:  # the walk appended this step's (features, start, prefix, backlog)
        _, j, prefix, _ = states[-1]
        q0, q1 = step_q(Q[j], prefix) if j in Q else (0.0, 1.0)
        return q1 < q0

    return walk(p, profile, config, decide, states, hindsight), states


def train(prompts: list[Prompt], profiles: list[tuple[float, DeviceProfile]], config, features: list[str],
          kind: str, dagger: int = 2, hidden: int = 16, seed: int = 0, name: str | None = None) -> StepwisePolicy:
    """Fit on the oracle's walks over `prompts` at every profile, then `dagger` rounds of walking
    with the learner and adding the states it visits (labelled by the oracle's Q)."""
    hindsight = HINDSIGHT in features
    Qs = {(p.qid, r): values(p, prof) for p in prompts for r, prof in profiles}
    data = []
    for p in prompts:
        for r, prof in profiles:
            t_tgt = scheduler_costs(prof, config)[0]
            data += labelled(expert_walk(p, prof, config, Qs[(p.qid, r)], hindsight)[1], Qs[(p.qid, r)], t_tgt, features)
    policy = fit(data, features, kind, hidden, seed=seed, name=name)
    for _ in range(dagger):
        for p in prompts:
            for r, prof in profiles:
                states: list = []
                walk(p, prof, config, policy.decide, states, hindsight)
                data += labelled(states, Qs[(p.qid, r)], scheduler_costs(prof, config)[0], features)
        policy = fit(data, features, kind, hidden, seed=seed, name=name)
    policy.doc["dagger"] = dagger
    return policy


# ---------------------------------------------------------------------------- held-out capture
def fold_units(held: list[Prompt], extra: list[Prompt], profiles: list[tuple[float, DeviceProfile]], config,
               features: list[str], kind: str, folds: int = 6, seed: int = 0, key: str = "fold", **kw) -> list[Unit]:
    """`cross_fit`'s folds as units (`treegraft_lab.engine`): `folds` grouped folds over `held`, drawn from `seed`,
    one unit each ("<key>/<fold>"), whose learner is trained on the other folds plus `extra`."""
    order = np.random.default_rng(seed).permutation(len(held))
    fold_of = {held[i].qid: f % folds for f, i in enumerate(order)}
    return [Unit(f"{key}/{f}", fold_walks, (held, extra, fold_of, f, profiles, config, features, kind, seed, kw))
            for f in range(folds)]


def fold_walks(held: list[Prompt], extra: list[Prompt], fold_of: dict[str, int], f: int,
               profiles: list[tuple[float, DeviceProfile]], config, features: list[str], kind: str, seed: int,
               kw: dict) -> list[dict]:
    """One fold: a learner trained on every `held` prompt outside fold `f` plus `extra`, walking fold `f`'s."""
    train_on = [p for p in held if fold_of[p.qid] != f] + extra
    policy = train(train_on, profiles, config, features, kind, seed=seed, **kw)
    return [{**w, "ratio": r, "fold": f} for p in held if fold_of[p.qid] == f for r, prof in profiles
            if (w := walk(p, prof, config, policy.decide, hindsight=HINDSIGHT in features)) is not None]


def cross_fit(held: list[Prompt], extra: list[Prompt], profiles: list[tuple[float, DeviceProfile]], config,
              features: list[str], kind: str, folds: int = 6, seed: int = 0, engine: Engine = LOCAL, **kw) -> pd.DataFrame:
    """Every `held` prompt walked by a learner that never read it (`fold_units`, run on `engine`). One row
    per (prompt, ratio) as `walk`'s, with "ratio" and "fold"."""
    parts = run_units(fold_units(held, extra, profiles, config, features, kind, folds, seed, **kw), engine, progress=False)
    return pd.DataFrame([row for part in parts for row in part])


def speedup_table(priced: pd.DataFrame, runs: pd.DataFrame, name: str) -> pd.DataFrame:
    """Per (prompt, ratio): the endpoints', the oracle's and `runs`' speedups, on the prompts and
    ratios `runs` holds."""
    w = priced.pivot_table(index=["qid", "ratio"], columns="schedule", values="speedup")
    w[name] = runs.set_index(["qid", "ratio"])["speedup"]
    return w.dropna(subset=[name])[["all-small", "all-mid", "oracle", name]]


def capture_of(table: pd.DataFrame, name: str, oracle_min: float = 1.15, floor: float = 0.98) -> dict:
    """`regime.capture` of the cells (ratios) of a `speedup_table`: means over its prompts."""
    from treegraft_lab.regime import capture

    w = table.groupby(level="ratio").mean()
    best = w[["all-small", "all-mid"]].max(axis=1)
    cells = pd.DataFrame({"ratio": w.index, "oracle_gain": w["oracle"] / best, f"{name}_gain": w[name] / best,
                          "better": np.where(w["all-mid"] > w["all-small"], "all-mid", "all-small")})
    return {**capture(cells, name, oracle_min, floor),
            "per_ratio": {float(r): round(float(g), 4) for r, g in zip(cells["ratio"], cells[f"{name}_gain"])},
            "oracle_per_ratio": {float(r): round(float(g), 4) for r, g in zip(cells["ratio"], cells["oracle_gain"])}}


def bootstrap_capture(table: pd.DataFrame, name: str, oracle_min: float = 1.15, n: int = 1000,
                      seed: int = 0) -> tuple[float, float]:
    """The 95% interval of the mean capture (`capture_of`) with the prompts resampled with
    replacement (the cells where the oracle is >= `oracle_min` x the better endpoint re-chosen in
    each resample)."""
    cols = ["all-small", "all-mid", "oracle", name]
    ratios = sorted(table.index.get_level_values("ratio").unique())
    qids = sorted(table.index.get_level_values("qid").unique())
    cube = np.stack([table.xs(q, level="qid").reindex(ratios)[cols].to_numpy() for q in qids])  # prompt x ratio x col
    rng = np.random.default_rng(seed)
    caps = []
    for _ in range(n):
        m = np.nanmean(cube[rng.integers(0, len(qids), len(qids))], axis=0)
        best = np.maximum(m[:, 0], m[:, 1])
        og, sg = m[:, 2] / best, m[:, 3] / best
        hot = og >= oracle_min
        if hot.any():
            caps.append(float(np.mean((sg[hot] - 1) / (og[hot] - 1))))
    lo, hi = np.percentile(caps, [2.5, 97.5])
    return float(lo), float(hi)


# ---------------------------------------------------------------------------- the whole fit
LEARNERS = ("imitation", "value")
WALKS = "held-out-walks-{profile}.parquet"  # in the held-out replay folder
SUMMARY = "learners.json"


def priced_endpoints(prompts: list[Prompt], profiles: list[tuple[float, DeviceProfile]]) -> pd.DataFrame:
    from treegraft_lab.regime import price

    reps = [p.rep for p in prompts]
    return pd.concat([price(reps, prof, ["all-small", "all-mid", "oracle"]).assign(ratio=r) for r, prof in profiles],
                     ignore_index=True)


def learn(held: list[Prompt], extra: list[Prompt], profiles: list[tuple[float, DeviceProfile]], config,
          folds: int = 6, dagger: int = 2, seed: int = 0, signal_sets: tuple[str, ...] | None = None,
          learners: tuple[str, ...] = LEARNERS, hindsight: bool = True, engine: Engine = LOCAL,
          log=print) -> tuple[pd.DataFrame, list[dict]]:
    """Every (learner, signal set) cross-fitted over the `held` prompts (`cross_fit`, `extra` always in
    training): their held-out walks (one frame, columns "learner" and "signal_set" added) and one
    summary row each (capture over the cells where the oracle is >= 1.15x the better endpoint,
    its bootstrap 95% interval over prompts, cells, below_098, per-ratio gains; "causal"). With
    `hindsight`, one more row, not a scheduler: imitation on the last set plus `HINDSIGHT`. Every
    (learner, signal set, fold) is one unit on `engine` (`fold_units`; the same folds and seeds wherever it runs)."""
    from treegraft_lab.schedule.stepwise import SIGNAL_SETS, signal_set

    priced = priced_endpoints(held, profiles)
    sets = list(signal_sets or SIGNAL_SETS)
    todo = [(kind, sset, list(signal_set(sset))) for kind in learners for sset in sets]
    if hindsight:
        todo.append(("imitation", sets[-1] + HINDSIGHT_SET, [*signal_set(sets[-1]), HINDSIGHT]))
    for p in held + extra:  # priced once here (what runs in this process reads it)
        for _, prof in profiles:
            values(p, prof)
    units = [fold_units(held, extra, profiles, config, feats, kind, folds, seed, f"learn/{kind}:{sset}", dagger=dagger)
             for kind, sset, feats in todo]
    parts = run_units([u for us in units for u in us], engine, desc="learn (learner, signal set, fold)")
    runs, rows = [], []
    for i, (kind, sset, feats) in enumerate(todo):
        r = pd.DataFrame([row for part in parts[i * folds:(i + 1) * folds] for row in part])
        name = f"{kind}:{sset}"
        table = speedup_table(priced, r, name)
        cap = capture_of(table, name)
        lo, hi = bootstrap_capture(table, name, seed=seed)
        rows.append({"learner": kind, "signal_set": sset, "inputs": len(feats), "causal": causal(sset),
                     **cap, "ci95": [lo, hi],
                     "prompts": int(r["qid"].nunique()), "walks": len(r)})
        runs.append(r.assign(learner=kind, signal_set=sset))
        log(f"{name}: mean capture {cap['mean_capture']:.2f} [{lo:.2f}, {hi:.2f}] over {cap['cells']} cells, "
            f"below 0.98x in {cap['below_098']}")
    return pd.concat(runs, ignore_index=True), rows


def held_out_capture(folder, base: DeviceProfile, config, n_boot: int = 1000) -> dict[str, dict]:
    """From a held-out replay folder's stored walks (`learn`'s, no model runs): per learner and signal
    set, `capture_of` with its bootstrap 95% interval ("ci95") and "split" (which prompts), keyed
    "learned-<learner>:<signal set>"; {} when none are stored."""
    import json
    from pathlib import Path

    from treegraft_lab.regime import load, ratio_profiles, split

    folder = Path(folder)
    path = folder / WALKS.format(profile=base.name)
    if not path.is_file():
        return {}
    walks = pd.read_parquet(path)
    df, meta = load(folder)
    summary = json.loads((folder / SUMMARY).read_text()) if (folder / SUMMARY).is_file() else {}
    qids = set(walks["qid"])
    reps = split(df[df["qid"].isin(qids)], config.depth)
    ratios = sorted(walks["ratio"].unique())
    priced = priced_endpoints([Prompt(r, {}) for r in reps], ratio_profiles(base, ratios))
    what = (f"{meta.get('split', 'validation')}: {len(qids)} held-out prompts of {meta.get('prompts')}, first "
            f"{meta.get('max_new')} tokens, every start replayed; cross-fitted (each prompt walked by a learner that "
            f"never read it)")
    out = {}
    for (kind, sset), r in walks.groupby(["learner", "signal_set"], sort=False):
        name = f"learned-{kind}:{sset}"
        table = speedup_table(priced, r, name)
        cap = capture_of(table, name)
        cap["ci95"] = list(bootstrap_capture(table, name, n=n_boot))
        out[name] = {**cap, "split": what, "prompts": int(r["qid"].nunique()),
                     "chosen": summary.get("chosen") == f"{kind}:{sset}", "causal": causal(sset)}
    return out


def capture_sentence(caps: dict[str, dict], goal: float = 0.5) -> str:
    """The held-out capture in words: the best scheduler that reads only the past, its interval, the
    hindsight diagnostic and the eval map's schedulers, against `goal`."""
    held = {n: c for n, c in caps.items() if "ci95" in c and c["priced"]}
    causal = {n: c for n, c in held.items() if c.get("causal", True)}
    if not causal:
        return "No learned scheduler's held-out walks are stored (`treegraft-lab regime --learn`)."
    name, best = max(causal.items(), key=lambda kv: kv[1]["mean_capture"])
    lo, hi = best["ci95"]
    out = (f"**On {best['prompts']} held-out prompts the best learned scheduler ({name}) takes {best['mean_capture']:.0%} of the oracle's "
           f"gain** (95% interval over prompts {lo:.0%} to {hi:.0%}) over the {best['priced']} cells where the oracle is "
           f">= 1.15x the better endpoint, and is below 0.98x the better endpoint in {best['below_098']} of them; "
           f"{'that reaches' if best['mean_capture'] >= goal else 'short of'} the {goal:.0%} aimed at.")
    ceiling = [c for c in held.values() if not c.get("causal", True)]
    if ceiling:
        out += (f" An imitation learner that also reads, in hindsight, what a mid call at each step would add to the round "
                f"takes {ceiling[0]['mean_capture']:.0%}: what the oracle knows and no signal of the past recovers is "
                f"whether the mid drafter's proposals will be accepted.")
    others = {n: c for n, c in caps.items() if "ci95" not in c and c.get("priced")}
    if others:
        n = sorted({c.get("prompts", "?") for c in others.values()}, key=str)
        out += (f" On the eval map over mid drafters ({' or '.join(map(str, n))} prompts, no interval): "
                + ", ".join(f"{k} {c['mean_capture']:.0%}" for k, c in others.items()) + ".")
    return out
