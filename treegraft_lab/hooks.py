"""Named hook points, scoped hooks, and recording of every round (TransformerLens-style).

Hook points (a hook receives one HookEvent):
  run.start      before the first round        data: prompt_ids
  round.start    a round begins                data: root, committed
  step.decide    the policy has decided        data: call_mid (None when the policy was not asked:
                 no mid drafter, the call cap reached, a generation's first round), ctx, policy
  step.expand    a draft step grew the tree    data: call_mid, pool, frontier, new, chain, last_new, forwarded
  round.prune    budget pruning is done        data: kept, chances (prune="value": P(v) per node, else None)
  round.verify   the target has verified       data: kept, logits, path, bonus
  round.accept   tokens are committed          data: kept, path, bonus, info (RoundInfo), committed
  run.end        generation finished           data: prompt_ids, generation

`with decoder.hooks([("step.expand", fn)]):` attaches hooks for a scope only. A hook may return a
replacement, as TransformerLens's hooks may: at step.decide a decision (True: call the mid
drafter at this step), at round.prune the nodes to verify (checked: any ancestor-closed set decodes
losslessly); None (what a hook returns by default) keeps the decoder's own.
`with treegraft_lab.record(decoder) as rec:` records every round; `rec.to_frame()` gives pandas
tables, `rec.save(dir)` writes parquet, `treegraft_lab.load_run(dir)` reads it back.
Without hooks the decoder pays one dictionary lookup per hook point.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treegraft_lab.errors import TreeGraftError


def profile_words(profile: Any) -> str:
    """The profile a run is priced on, in words (device, dtype, date), kept with the run: its
    views name it even where that profile is no longer cached."""
    from treegraft_lab.costs import profile_name

    try:
        return profile_name(profile)
    except Exception:  # noqa: BLE001 - a profile without the usual fields is named by its name
        return str(getattr(profile, "name", ""))

HOOK_POINTS = (
    "run.start",
    "round.start",
    "step.decide",
    "step.expand",
    "round.prune",
    "round.verify",
    "round.accept",
    "run.end",
)


class Payload(Mapping):
    """A hook point's data, typed: read it as attributes (`ev.data.kept`) or as a mapping (`ev.data["kept"]`)."""

    def __getitem__(self, key: str) -> Any:
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        return iter(self.__dataclass_fields__)

    def __len__(self) -> int:
        return len(self.__dataclass_fields__)


@dataclass(frozen=True, eq=False)
class RunStart(Payload):
    prompt_ids: list[int]


@dataclass(frozen=True, eq=False)
class RoundBegins(Payload):
    root: int
    committed: int


@dataclass(frozen=True, eq=False)
class StepDecide(Payload):
    call_mid: bool | None  # None: the policy was not asked
    ctx: Any  # schedule.context.StepContext
    policy: Any


@dataclass(frozen=True, eq=False)
class StepExpand(Payload):
    call_mid: bool
    pool: list[int]
    frontier: list[int]
    new: list[int]
    chain: list[int]
    last_new: list[int]
    forwarded: list[int]

    @classmethod
    def of(cls, step: Any, call_mid: bool, last_new: list[int]) -> StepExpand:
        """The payload of a drafter's step k (`rounds.StepResult`) that started from N_k = `last_new`."""
        return cls(bool(call_mid), step.pool, step.frontier, step.new, step.chain, list(last_new), step.forwarded)


@dataclass(frozen=True, eq=False)
class RoundPrune(Payload):
    kept: list[int]
    chances: list[float] | None


@dataclass(frozen=True, eq=False)
class RoundVerify(Payload):
    kept: list[int]
    logits: Any
    path: list[int]
    bonus: int


@dataclass(frozen=True, eq=False)
class RoundAccept(Payload):
    kept: list[int]
    path: list[int]
    bonus: int
    info: Any  # rounds.RoundInfo
    committed: bool


@dataclass(frozen=True, eq=False)
class RunEnd(Payload):
    prompt_ids: list[int]
    generation: Any  # decoder.Generation


PAYLOADS = {"run.start": RunStart, "round.start": RoundBegins, "step.decide": StepDecide, "step.expand": StepExpand,
            "round.prune": RoundPrune, "round.verify": RoundVerify, "round.accept": RoundAccept, "run.end": RunEnd}


@dataclass
class HookEvent:
    name: str
    round: int
    step: int
    tree: Any
    decoder: Any
    data: Payload  # the point's payload (`PAYLOADS`)


def check_hooks(hooks) -> list[tuple[str, Any]]:
    """Normalise hooks given as {point: fn} or [(point, fn)] and check the point names."""
    pairs = list(hooks.items()) if isinstance(hooks, dict) else list(hooks)
    for name, fn in pairs:
        if name not in HOOK_POINTS:
            raise TreeGraftError(f"unknown hook point {name!r}; the hook points are: {', '.join(HOOK_POINTS)}")
        if not callable(fn):
            raise TreeGraftError(f"the hook for {name!r} is not callable")
    return pairs


class HookHost:
    """Hook points on an object (the decoder): scoped hooks, firing, a draft step's pair of events."""

    def __init__(self) -> None:
        self._hooks: dict[str, list] = {}
        self.round_idx = 0

    @contextmanager
    def hooks(self, hooks):
        """Attach hooks for the duration of a `with` block: [(point, fn), ...] or {point: fn}."""
        pairs = check_hooks(hooks)
        for name, fn in pairs:
            self._hooks.setdefault(name, []).append(fn)
        try:
            yield self
        finally:
            for name, fn in pairs:
                self._hooks[name].remove(fn)
                if not self._hooks[name]:
                    del self._hooks[name]

    @contextmanager
    def paused(self):
        """No hook fires inside the block (the oracle's trial rounds, which commit nothing)."""
        held, self._hooks = self._hooks, {}
        try:
            yield self
        finally:
            self._hooks = held

    def hooked(self, name: str) -> bool:
        """Whether a hook is attached at point `name` (what is only worth computing for one)."""
        return name in self._hooks

    def emit(self, name: str, step: int = 0, tree: Any = None, payload: Payload | None = None, **data) -> Any:
        """Fire hook point `name` (`HOOK_POINTS`) with its payload (`PAYLOADS[name]`, given or built
        from `data`): one dictionary lookup when no hook is attached, nothing built. Returns the last
        replacement a hook returned (None: none)."""
        fns, out = self._hooks.get(name), None
        if fns:
            ev = HookEvent(name, self.round_idx, step, tree, self, payload if payload is not None else PAYLOADS[name](**data))
            for fn in fns:
                got = fn(ev)
                out = got if got is not None else out
        return out

    def emit_step(self, k: int, tree: Any, step: Any, call_mid: bool | None = False,
                  last_new: list[int] = (0,), ctx: Any = None, policy: Any = None) -> None:
        """Fire a draft step's two hook points (step.decide, step.expand) for a drafter's step k:
        what makes any drafter's tree recordable and drawable step by step (`call_mid`: whether the
        step called the mid drafter; `last_new`: the nodes the step started from, N_k)."""
        if self.hooked("step.decide") or self.hooked("step.expand"):
            ctx = ctx or self.step_context(k, [], tree, list(last_new), [])
            self.emit("step.decide", k, tree, call_mid=call_mid, ctx=ctx, policy=policy)
            if self.hooked("step.expand"):
                self.emit("step.expand", k, tree, StepExpand.of(step, call_mid, last_new))


TABLES = ("runs", "rounds", "steps", "nodes", "tree")


class Recorder:
    """Collects rows for five tables while attached to a decoder.

    runs:   one row per generate call (prompt, output text, config, stats)
    rounds: one row per round (schedule, accepted, sizes, timings)
    steps:  one row per draft step (decision, policy score, pool/frontier sizes, the 10 signals;
            new_nodes: where the step's first tokens landed, the next N_k; chain_nodes: nodes its
            n-gram chains added below them)
    nodes:  the tree after every draft step, one row per live-or-dead node per step
    tree:   the final tree of each round (kept by pruning, accepted, target's argmax)
    """

    def __init__(self, decoder, snapshots: bool = True) -> None:
        self.decoder = decoder
        self.snapshots = snapshots
        self.rows: dict[str, list[dict]] = {t: [] for t in TABLES}
        self.run = -1
        self.round_base = 0
        self._prev_front: list[int] = []
        self._chances: list[float] | None = None

    def hooks(self) -> list[tuple[str, Any]]:
        """Its handler at every hook point (replays fire none: they draft steps without the round loop)."""
        return [(n, getattr(self, "_on_" + n.replace(".", "_"))) for n in HOOK_POINTS]

    # ---- handlers -----------------------------------------------------------------------------
    def _on_run_start(self, ev: HookEvent) -> None:
        self.run += 1
        self.round_base = ev.round

    def _key(self, ev: HookEvent) -> dict:
        return {"run": self.run, "round": ev.round - self.round_base}

    def _on_round_start(self, ev: HookEvent) -> None:
        self._decision = {}

    def _on_step_decide(self, ev: HookEvent) -> None:
        ctx, policy = ev.data["ctx"], ev.data["policy"]
        self._decision = {
            "call_mid": bool(ev.data["call_mid"]),
            "policy_score": float(getattr(policy, "last_score", math.nan)) if ev.data["call_mid"] is not None else math.nan,
            "t_tgt_ms": ctx.t_tgt_ms,
            "t_mid_ms": ctx.t_mid_ms,
            **ctx.signals(),
            **ctx.round_signals(),
        }
        if ev.data["call_mid"] is not None:  # a learned scheduler's own inputs (`StepwisePolicy.last_inputs`)
            self._decision.update({f"input: {k}": v for k, v in getattr(policy, "last_inputs", {}).items()})

    def _on_step_expand(self, ev: HookEvent) -> None:
        t, d = ev.tree, ev.data
        front_depth = [t.depth[v] for v in d["last_new"]]
        mean_prev = sum(front_depth) / len(front_depth) if front_depth else 0.0
        fr = d["frontier"]
        self.rows["steps"].append({
            **self._key(ev),
            "step": ev.step,
            **self._decision,
            "pool_size": len(d["pool"]),
            "conventional_pool": len(d["last_new"]),
            "frontier_size": len(fr),
            "forwarded": len(d["forwarded"]),
            "new_nodes": len(set(d["new"])),
            "chain_nodes": len(d.get("chain", ())),
            "reselected_earlier": (sum(t.depth[v] < mean_prev for v in fr) / len(fr)) if fr and d["call_mid"] else math.nan,
            "tree_size": sum(t.alive),
        })
        if self.snapshots:
            chain = set(d.get("chain", ()))
            pool, front, new = set(d["pool"]), set(fr), set(d["new"]) | chain
            for v in range(len(t)):
                self.rows["nodes"].append({
                    **self._key(ev), "step": ev.step, **self._node(t, v),
                    "in_pool": v in pool, "in_frontier": v in front, "new": v in new, "chain": v in chain,
                })

    @staticmethod
    def _node(t, v: int) -> dict:
        from treegraft_lab.tree import CREATOR_NAMES

        return {
            "node": v, "parent": t.parent[v], "token": t.tokens[v], "depth": t.depth[v],
            "logp": t.logp[v], "score": t.score[v], "creator": CREATOR_NAMES[t.creator[v]],
            "drafted_by": CREATOR_NAMES[t.drafted_by[v]], "created_step": t.step[v],
            "ngram_n": t.ngram_n[v], "mid_scored": t.mid_scored[v], "alive": t.alive[v],
            "source": t.source[v] or CREATOR_NAMES[t.creator[v]],  # by name: "ngram", "suffix", "mid", "ngram+suffix"
        }

    def _on_round_prune(self, ev: HookEvent) -> None:
        self._chances = ev.data.get("chances")  # prune="value": each node's calibrated acceptance chance

    def _on_round_verify(self, ev: HookEvent) -> None:
        self._argmax = dict(zip(ev.data["kept"], ev.data["logits"].argmax(-1).tolist()))

    def _on_round_accept(self, ev: HookEvent) -> None:
        t, d, info = ev.tree, ev.data, ev.data["info"]
        if not d["committed"]:
            return  # replays (oracle, collection) are not part of the run
        kept, path = set(d["kept"]), set(d["path"])
        for v in range(len(t)):
            self.rows["tree"].append({
                **self._key(ev), **self._node(t, v), "kept": v in kept, "accepted": v in path,
                "target_token": self._argmax.get(v, -1),
                "accept_chance": self._chances[v] if self._chances is not None else math.nan,
            })
        self.rows["rounds"].append({
            **self._key(ev), "root_token": t.tokens[0], "bonus_token": d["bonus"],
            "accepted": info.accepted, "schedule": info.schedule, "mid_calls": info.mid_calls,
            "nodes": info.nodes, "kept": info.kept, "draft_ms": 1000 * info.draft_s,
            "verify_ms": 1000 * info.verify_s, "forward_ms": 1000 * info.forward_s,
            "round_ms": 1000 * info.round_s, "eta": (info.accepted + 1) / info.round_s,
            "modelled_ms": info.modelled_ms, "modelled_on": self.decoder.profile.name,
        })

    def _on_run_end(self, ev: HookEvent) -> None:
        gen, dec = ev.data["generation"], self.decoder
        self.rows["runs"].append({
            "run": self.run, "pair": getattr(dec.pair, "name", ""), "prompt_ids": list(ev.data["prompt_ids"]),
            "output_ids": list(gen.token_ids), "prompt_text": dec.tokenizer.decode(ev.data["prompt_ids"]),
            "output_text": gen.text, "config": json.dumps(self._config(), default=str),
            "profile": profile_words(dec.profile),
            **{f"stat_{k}": v for k, v in gen.stats.items()},
        })

    def _config(self) -> dict:
        """The decoder's config as recorded: its clock the name of the profile the decoder priced
        with (a measured one's cache name, a scaled one's), not only the name the config gave."""
        return {**self.decoder.config.to_dict(), "clock": self.decoder.profile.name}

    # ---- tables -----------------------------------------------------------------------------------
    def to_frame(self) -> dict:
        """The recorded tables as pandas DataFrames, with decoded token text on node rows."""
        import pandas as pd

        frames = {name: pd.DataFrame(rows) for name, rows in self.rows.items()}
        tok, cache = self.decoder.tokenizer, {}

        def text(i: int) -> str:
            if i not in cache:
                cache[i] = tok.decode([i]) if i >= 0 else ""
            return cache[i]

        for name, col in (("nodes", "token"), ("tree", "token"), ("tree", "target_token")):
            f = frames[name]
            if len(f):
                f[col.replace("token", "text")] = [text(int(i)) for i in f[col]]
        for name in ("rounds",):
            f = frames[name]
            if len(f):
                f["root_text"] = [text(int(i)) for i in f["root_token"]]
                f["bonus_text"] = [text(int(i)) for i in f["bonus_token"]]
        return frames

    def to_run(self) -> Run:
        return Run(**self.to_frame())

    def save(self, path) -> Path:
        return self.to_run().save(path)


@dataclass
class Run:
    """A recorded run: the five tables (see Recorder). Redraw any figure from it without a model."""

    runs: Any = None
    rounds: Any = None
    steps: Any = None
    nodes: Any = None
    tree: Any = None
    meta: dict = field(default_factory=dict)

    def save(self, path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for name in TABLES:
            getattr(self, name).to_parquet(path / f"{name}.parquet", index=False)
        (path / "meta.json").write_text(json.dumps({"format": "treegraft-run/1", **self.meta}, indent=1))
        return path

    def tree_at(self, round: int, step: int | None = None, run: int = 0):
        """Node rows of one round: after draft step `step`, or the final pruned tree if None."""
        if step is None:
            f = self.tree
            return f[(f["run"] == run) & (f["round"] == round)].reset_index(drop=True)
        f = self.nodes
        return f[(f["run"] == run) & (f["round"] == round) & (f["step"] == step)].reset_index(drop=True)


@contextmanager
def record(decoder, snapshots: bool = True):
    """Record every round of every `generate` call made inside the block."""
    rec = Recorder(decoder, snapshots=snapshots)
    with decoder.hooks(rec.hooks()):
        yield rec


def load_run(path) -> Run:
    """Read a run saved with `rec.save(path)`."""
    import pandas as pd

    path = Path(path)
    if not (path / "meta.json").exists():
        raise TreeGraftError(f"{path} is not a saved run (no meta.json): save one with rec.save(path)")
    meta = json.loads((path / "meta.json").read_text())
    return Run(**{n: pd.read_parquet(path / f"{n}.parquet") for n in TABLES}, meta=meta)
