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
restored (`TreeGraftDecoder.round_start` / `restore`). `test_scheduler.py` checks that every
replayed schedule accepts exactly what `TreeGraftDecoder.run_round` accepts with that mask.

Costs. Every expansion and verification is timed (`meas_*` columns, a calls table; reported,
never trained on) and its size logged (`size<k>`: tokens the mid drafter forwarded at a mid step,
frontier nodes at an n-gram step, -1 for a skipped step: `DeviceProfile.step_ms`; `kept`: nodes verified, root included). The `t_draft_ms` /
`t_verify_ms` columns the scheduler trains on are those sizes priced by one `DeviceProfile`
(treegraft_lab.costs): the profile the collection pruned with (this device's, or `--profile`), or
another one at merge or training time, so trajectories collected on a CPU can model a GPU. With
`prune="value"` the kept trees themselves depend on the profile: collect once per profile.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from treegraft_lab.baselines import autoregressive
from treegraft_lab.config import DecodeConfig, stored_settings
from treegraft_lab.costs import DeviceProfile, scheduler_costs
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.presets import COLLECT_BASE
from treegraft_lab.prompting import encode_prompt, eos_ids
from treegraft_lab.replay import DEEPEST, replay_all
from treegraft_lab.resume import Journal
from treegraft_lab.schedule.policies import MaskPolicy
from treegraft_lab.schedule.signals import SIGNALS

KINDS = ("small", "mid", "verify")
SHARD_GLOB = "shard-*.parquet"


# ---------------------------------------------------------------------------- costs
def collect_config(decode: dict | None = None) -> DecodeConfig:
    """The DecodeConfig of collection settings `decode` (fields left out: `presets.COLLECT_BASE`, the
    full growth and the n-gram drafter, then DecodeConfig's defaults)."""
    return DecodeConfig(**{**COLLECT_BASE, **stored_settings(decode or {})})


def apply_costs(df: pd.DataFrame, prof: DeviceProfile, decode: dict | None = None) -> pd.DataFrame:
    """Price every row with `prof`: t_draft_ms (its schedule's draft steps, from their recorded
    sizes), t_verify_ms (one target forward of the kept nodes) and the scheduler's context inputs
    t_tgt_ms / t_mid_ms (`costs.scheduler_costs` of the collection's decode settings)."""
    df = df.copy()
    D = int(df["D"].iloc[0]) if len(df) else 0
    draft = np.zeros(len(df))
    for k in range(1, D + 1):  # the decoder's rule, DeviceProfile.step_ms
        draft += [prof.step_ms(m, n) for m, n in zip(df[f"s{k}"].to_numpy() == 1, df[f"size{k}"].to_numpy(int))]
    df["t_draft_ms"] = draft
    df["t_verify_ms"] = [prof.target_ms(n) for n in df["kept"].to_numpy(float)]
    t_tgt, t_mid = scheduler_costs(prof, collect_config(decode))  # the schedule does not enter
    df["t_tgt_ms"], df["t_mid_ms"] = t_tgt, t_mid
    return df


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
    decode: dict = field(default_factory=dict)  # DecodeConfig fields (depth, width, budget, ...) over COLLECT_BASE
    # The mid drafter's cache lags the committed text by a lag drawn uniformly from 0..mid_lag
    # tokens at each round start, as after rounds without a mid call (`TreeGraftDecoder.lag_mid`): the first
    # mid call of a replay then pays the backlog a decode that calls it rarely pays. 0: no lag.
    mid_lag: int = 0
    # Reach each round start by decoding the prompt with all-small rounds (one decode per prompt)
    # instead of starting fresh there: value pruning's calibration, its run rate and the mid
    # drafter's backlog are then as a decoder that rarely calls the mid drafter has them.
    warm: bool = False
    # Read acceptance from the target's greedy answer (`replay.accept_known`) instead of verifying:
    # greedy decoding accepts exactly that, so the target runs once per prompt (its answer) and a
    # round start costs only the drafting. No verification is timed (`timed` is ignored).
    known: bool = False


def shard_paths(out_dir: Path, shard: tuple[int, int]) -> tuple[Path, Path, Path]:
    stem = f"shard-{shard[0]:03d}-of-{shard[1]:03d}"
    return out_dir / f"{stem}.parquet", out_dir / f"{stem}.calls.parquet", out_dir / f"{stem}.json"


def _write(df: pd.DataFrame, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    df.to_parquet(tmp, index=False)
    tmp.rename(path)


@dataclass
class ShardRun:
    """What the prompts of one shard share: the decoder, the draws and the rows collected so far."""

    pair: Any
    cfg: CollectConfig
    dcfg: DecodeConfig
    dec: TreeGraftDecoder
    prof: DeviceProfile
    stop: set[int]
    rng: random.Random
    rows: list[dict] = field(default_factory=list)
    calls: list[dict] = field(default_factory=list)
    state_id: int = 0


def read_shard(rows_p: Path, calls_p: Path) -> tuple[list[dict], list[dict], set[str]]:
    """The rows and calls a shard file already holds, and the prompts (qids) they cover."""
    if not (rows_p.exists() and calls_p.exists()):
        return [], [], set()
    old = pd.read_parquet(rows_p)
    return old.to_dict("records"), pd.read_parquet(calls_p).to_dict("records"), set(old["qid"].astype(str))


def next_state_id(rows: list[dict]) -> int:
    """The number of the next round start: one past the highest in `rows` ("shard:number")."""
    return max((int(r["state"].split(":")[-1]) for r in rows), default=-1) + 1 if rows else 0


def write_shard(run: ShardRun, paths: tuple[Path, Path, Path], meta: dict | None) -> None:
    """Write the priced rows, the calls and the shard's meta JSON (refused when nothing was collected)."""
    rows_p, calls_p, meta_p = paths
    df = pd.DataFrame(run.rows)
    cl = pd.DataFrame(run.calls)
    if df.empty:
        raise TreeGraftError("nothing was collected: no prompt produced a round start")
    prof, (i, n) = run.prof, run.cfg.shard
    _write(apply_costs(df, prof, run.cfg.decode), rows_p)
    _write(cl, calls_p)
    info = {"format": "treegraft-trajectories/1", "pair": run.pair.name, "shard": [i, n], "collect": asdict(run.cfg),
            "decode": {**run.dcfg.to_dict(), "clock": prof.name}, "prompts_done": len({r["qid"] for r in run.rows}),
            "states": int(df["state"].nunique()), "profile": prof.to_dict(), "complete": True, **(meta or {})}
    meta_p.write_text(json.dumps(info, indent=1, default=str) + "\n")


def resume_from_journal(run: ShardRun, journal: Journal) -> None:
    """Where the journal's last stored prompt left the draws, the decoder and the round-start count."""
    last = journal.state()
    if last is not None:
        run.rng.setstate((last["rng"][0], tuple(last["rng"][1]), last["rng"][2]))
        run.dec.restore_state(last["carried"])
        run.state_id = last["state_id"]


def round_starts(pair, cfg: CollectConfig, rng: random.Random, stop: set[int],
                 ids: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(positions, continuation, answer): the prompt's round starts drawn from the first `max_new`
    tokens, sorted; the target's greedy continuation up to the last one (the start of a fresh round
    start); the greedy answer (as far as known acceptance reads). A warm unknown-answer
    collection decodes no answer: every drawn position is kept, the other two are empty."""
    spots = sorted(rng.sample(range(cfg.max_new), min(cfg.states, cfg.max_new)))
    if cfg.warm and not cfg.known:
        return spots, [], []
    # known acceptance reads past the start; warm rounds may overshoot a spot by a round's tokens
    want = spots[-1] + ((2 if cfg.warm else 1) * DEEPEST if cfg.known else 0)
    full = autoregressive(pair, ids, max_new_tokens=want).token_ids if want else []
    full = full[: next((k + 1 for k, t in enumerate(full) if t in stop), len(full))]
    cont = full[: spots[-1]]
    ended = bool(cont) and cont[-1] in stop  # no round starts after the end of the answer
    return [j for j in spots if j < len(cont) + (not ended)], cont, full


def replay_round_start(run: ShardRun, p: dict, prompt_len: int, j: int, answer: list[int]) -> None:
    """Replay every schedule from the decoder's current round start (position `j` of prompt `p`);
    append its rows and calls."""
    cfg, dec, rng = run.cfg, run.dec, run.rng
    lag = dec.lag_mid(rng.randint(0, cfg.mid_lag)) if cfg.mid_lag else 0
    if cfg.known:
        st, lv, cl = replay_all(dec, False, 0, seed=rng.randrange(2**31), answer=answer[j:])
    else:
        st, lv, cl = replay_all(dec, cfg.shared_verify, cfg.timed, seed=rng.randrange(2**31))
    base = {"qid": str(p["question_id"]), "category": p.get("category", ""), "state": f"{cfg.shard[0]}:{run.state_id}",
            "position": j, "prompt_len": prompt_len, "D": run.dcfg.depth, "mid_lag": lag}
    run.rows += state_rows(st, lv, base)
    run.calls += [{**c, "state": base["state"]} for c in cl]
    run.state_id += 1


def collect_prompt(run: ShardRun, p: dict, bar) -> None:
    """Reach each of the prompt's round starts (fresh or by warm decoding) and replay it there."""
    cfg, dec = run.cfg, run.dec
    ids = encode_prompt(run.pair.tokenizer, p["turns"][0])
    spots, cont, full = round_starts(run.pair, cfg, run.rng, run.stop, ids)
    if cfg.warm:  # one decode per prompt, from the prompt through every round start
        dec.start(ids)
    for j in spots:
        if cfg.warm:
            if not _decode_to(dec, len(ids) + j, run.stop):
                break
            j = len(dec.ids) - len(ids)  # rounds commit several tokens: the start actually reached
        else:
            dec.start(ids + cont[:j], prompt_len=len(ids))
        replay_round_start(run, p, len(ids), j, full)
        bar.update(1)
    bar.update(cfg.states - len(spots))


def collect_prompts(run: ShardRun, todo: list[dict], journal: Journal, bar) -> None:
    """Collect each prompt (or take it from the journal), storing each one as it finishes."""
    try:  # the bar closes before a Ctrl-C's line is printed
        for p in todo:
            stored = journal.get(str(p["question_id"]))
            if stored is not None:
                run.rows += stored["rows"]
                run.calls += stored["calls"]
                bar.update(run.cfg.states)
                continue
            first = (len(run.rows), len(run.calls))
            collect_prompt(run, p, bar)
            journal.add(str(p["question_id"]), {"rows": run.rows[first[0]:], "calls": run.calls[first[1]:]},
                        {"rng": run.rng.getstate(), "carried": run.dec.carried_state(), "state_id": run.state_id})
    finally:
        bar.close()


def collect_shard(pair, prompts: list[dict], cfg: CollectConfig, out_dir: Path, profile: DeviceProfile | None = None,
                  meta: dict | None = None, progress: bool = True, journal: Journal | None = None) -> Path:
    """Collect this shard's prompts into `out_dir` (prompts already in its shard file are skipped: a
    larger --limit extends it). `profile`: the resolved profile to prune and price with (None: this
    device's, read from the cache `measure.for_pair` left); the shard's meta records its name as the
    decode clock. `journal` (`resume.Journal`, `journal_folder`): each prompt's rows and calls are
    stored as it finishes, with the state the next prompt starts from (the draw of round starts and
    seeds, the decoder's carried state); prompts it holds are not run again."""
    i, n = cfg.shard
    if not 0 <= i < n:
        raise TreeGraftError(f"shard {i}/{n}: need 0 <= i < n")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = shard_paths(out_dir, cfg.shard)
    rows, calls, done = read_shard(paths[0], paths[1])
    dcfg = replace(collect_config(cfg.decode), schedule="mid", temperature=0.0, clock="wall")
    dec = TreeGraftDecoder(pair, dcfg, profile=profile)  # None: this device's, read from its cache
    run = ShardRun(pair, cfg, dcfg, dec, dec.profile, eos_ids(pair.tokenizer, pair.target),
                   random.Random(f"{cfg.seed}-{i}-{n}"), rows, calls, next_state_id(rows))
    todo = [p for p in prompts[i::n] if str(p["question_id"]) not in done]
    bar = tqdm(total=len(todo) * cfg.states, desc=f"collect {i}/{n}", unit="state", mininterval=5, disable=not progress)
    journal = journal or Journal()
    resume_from_journal(run, journal)
    collect_prompts(run, todo, journal, bar)
    write_shard(run, paths, meta)
    return paths[0]


def journal_folder(out_dir: Path, shard: tuple[int, int]) -> Path:
    """Where a shard's journal lives while it is collected (`resume.Journal`): shard-i-of-n.partial/."""
    return shard_paths(out_dir, shard)[0].with_suffix(".partial")


def _decode_to(dec, n: int, stop: set[int]) -> bool:
    """Commit all-small rounds until `n` tokens are committed; False if the answer ended first."""
    small = MaskPolicy((0,) * dec.config.depth)
    while len(dec.ids) < n:
        _, emitted = dec.run_round(small)
        if any(t in stop for t in emitted):
            return False
    return True


# ---------------------------------------------------------------------------- merge
def merge(out_dir: Path, profile: DeviceProfile | None = None) -> Path:
    """Concatenate the shards of `out_dir` into trajectories.parquet, priced by one profile.

    Without `profile` the shards' own (the one they were collected and pruned with) is used; all
    shards must agree on it. The profile is saved as profile.json beside the parquet.
    """
    shards = sorted(out_dir.glob(SHARD_GLOB))
    shards = [s for s in shards if not s.name.endswith(".calls.parquet")]
    if not shards:
        raise TreeGraftError(f"no shards (shard-*.parquet) in {out_dir}: run `treegraft-lab collect` first")
    df = pd.concat([pd.read_parquet(s) for s in shards], ignore_index=True)
    metas = [json.loads(s.with_suffix(".json").read_text()) for s in shards]
    pairs = {m["pair"] for m in metas}
    if len(pairs) > 1:
        raise TreeGraftError(f"shards in {out_dir} come from different pairs: {sorted(pairs)}")
    if "profile" not in metas[0]:
        raise TreeGraftError(f"shards in {out_dir} carry no device profile (an older format): collect them again")
    names = {m["profile"]["name"] for m in metas}
    if len(names) > 1:
        raise TreeGraftError(f"shards in {out_dir} were collected with different profiles {sorted(names)}: "
                             "collect every shard with one --profile")
    collected = DeviceProfile.from_dict(metas[0]["profile"], f"{shards[0]}'s profile")
    prof = profile or collected
    out = out_dir / "trajectories.parquet"
    _write(apply_costs(df, prof, metas[0]["collect"]["decode"]), out)
    prof.save(out_dir / "profile.json")
    info = {"format": "treegraft-trajectories/2", "pair": pairs.pop(), "shards": [m["shard"] for m in metas],
            "complete": all(m.get("complete") for m in metas), "states": int(df["state"].nunique()),
            "prompts": int(df["qid"].nunique()), "rows": len(df), "profile": prof.to_dict(),
            "collected_with": collected.name, "prune": metas[0]["decode"]["prune"], "shard_meta": metas}
    (out_dir / "trajectories.json").write_text(json.dumps(info, indent=1, default=str) + "\n")
    return out
