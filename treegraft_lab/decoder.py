"""TreeGraftDecoder: the round loop. Read `_round` first: it is the whole method.

Each round grows one shared draft tree for D steps. At every step the policy decides WHEN the
mid drafter is called; a mid step chooses WHERE to graft (the candidate pool and its top-W
frontier, in graft.py) and the proposals are grafted HOW the config says (non-destructively or
not, graft.py). Then the tree is pruned to the verification budget, the target verifies it in
one forward (verify.py), and the accepted tokens plus one bonus token are committed.
"""

from __future__ import annotations

import itertools
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from treegraft_lab import graft
from treegraft_lab.config import DecodeConfig, parse_mask
from treegraft_lab.drafters import ModelDrafter, NgramDrafter
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.hooks import HookEvent, check_hooks
from treegraft_lab.prompting import encode_prompt, eos_ids
from treegraft_lab.schedule.policies import StepContext, make_policy
from treegraft_lab.tree import MID, SMALL, DraftTree
from treegraft_lab.verify import TargetVerifier, accept_greedy, accept_sampling, warp


@dataclass
class RoundInfo:
    """What one round did. `accepted` counts draft tokens; the bonus token is not included."""

    accepted: int
    schedule: str
    mid_calls: int
    nodes: int
    kept: int
    draft_s: float
    verify_s: float
    forward_s: float
    round_s: float


@dataclass
class Generation:
    """The result of `generate`: new tokens, text, per-round info and summary statistics.

    stats: tokens_per_s (new tokens / wall time, prefill included), rounds, accepted_per_round
    (accepted draft tokens per round, bonus excluded), tokens_per_round (the same plus the bonus
    token), draft_s, verify_s, overhead_s (round time outside model forwards), prefill_s, wall_s,
    mid_calls_per_round.
    """

    token_ids: list[int]
    text: str
    rounds: list[RoundInfo] = field(default_factory=list)
    stats: dict = field(default_factory=dict)


class TreeGraftDecoder:
    """A lossless tree speculative decoder with a small (n-gram) and a mid (LM) drafter."""

    def __init__(self, pair, config: DecodeConfig | None = None, **overrides) -> None:
        config = config or DecodeConfig()
        if overrides:
            config = DecodeConfig(**{**config.to_dict(), "schedule": config.schedule, **overrides})
        self.pair, self.config = pair, config
        self.tokenizer = pair.tokenizer
        self.device = pair.target.device
        if self._needs_mid(config) and pair.mid is None:
            raise TreeGraftError(f"schedule {config.schedule_name!r} calls the mid drafter but the pair has none; load it with a mid model")
        self.policy = make_policy(config, pair)
        self.budget = config.budget if config.budget != "auto" else self._auto_budget()
        self.pruner = None  # budget.ValuePruner with prune="value", made per run in start()
        if config.prune == "value":  # the cost curve is measured here, once, not inside a timed run
            from treegraft_lab.budget import cost_curve

            self._curve = cost_curve(pair.target)
        self._hooks: dict[str, list] = {}
        self.costs = {"t_tgt_ms": float("nan"), "t_mid_ms": float("nan")}
        self.round_idx = 0
        self.replaying = False  # True while a round is replayed and not committed (oracle, collect)

    @staticmethod
    def _needs_mid(config: DecodeConfig) -> bool:
        return config.schedule_name not in ("small", "0" * config.depth)

    def _may_skip_mid(self) -> bool:
        """A learned or custom policy may never call the mid drafter: prefill it lazily. Fixed
        masks call it in the first round anyway; the oracle and collection replay from it."""
        return parse_mask(self.config.schedule, self.config.depth) is None and self.config.schedule_name not in ("mid", "oracle")

    # ---- hooks ----------------------------------------------------------------------------------
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

    def _emit(self, name: str, step: int = 0, tree: DraftTree | None = None, **data) -> None:
        fns = self._hooks.get(name)
        if fns:
            ev = HookEvent(name, self.round_idx, step, tree, self, data)
            for fn in fns:
                fn(ev)

    # ---- set-up ---------------------------------------------------------------------------------
    def start(self, ids: list[int]) -> None:
        """Prefill both models with the prompt (all but its last token, the first root)."""
        cfg = self.config
        self.ids = list(ids)
        self.prompt_len = len(ids)
        self.root = ids[-1]
        self.small = NgramDrafter(cfg.ngram_max, cfg.ngram_min)
        self.small.index.extend(ids)
        self.target = TargetVerifier(self.pair.target)
        self.target.prefill(ids[:-1])
        self.mid = None
        if self.pair.mid is not None and self._needs_mid(self.config):
            self.mid = ModelDrafter(self.pair.mid)
            if self._may_skip_mid():  # the prompt waits in `pending` until a call needs it
                self.mid.pending = list(ids[:-1])
            else:
                self.mid.prefill(ids[:-1])
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(cfg.seed if cfg.seed is not None else torch.seed() % (2**63))
        self._oracle = {"verify": [], "tokens": 0, "ms": 0.0}  # the oracle schedule's running totals
        if cfg.prune == "value":
            from treegraft_lab.budget import ValuePruner

            self.pruner = ValuePruner(self._curve)
        if self.costs["t_tgt_ms"] != self.costs["t_tgt_ms"]:  # NaN: not calibrated yet
            self._calibrate()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _timed(self, fn, *args):
        self._sync()
        t = time.perf_counter()
        out = fn(*args)
        self._sync()
        return out, time.perf_counter() - t

    def _calibrate(self) -> None:
        """Measure one target verification and one mid call on dummy trees (the scheduler's costs)."""
        chain = DraftTree.start(self.root)
        for i in range(min(self.budget, 16)):
            chain.add_child(i, self.root, 0.0, SMALL, 1)
        kept = list(range(len(chain)))
        _, t = self._timed(self.target.forward_tree, chain, kept)
        self.target.rollback()
        self.costs["t_tgt_ms"] = 1000 * t
        if self.mid is not None:
            pending, self.mid.pending = self.mid.pending, []  # time a call alone, not a deferred prompt
            _, t = self._timed(self.mid.score, chain, kept[: min(len(kept), self.config.width)])
            self.mid.rollback()
            self.mid.pending = pending
            self.costs["t_mid_ms"] = 1000 * t

    def _auto_budget(self) -> int:
        from treegraft_lab.budget import auto_budget

        return auto_budget(self.pair, self.config)

    # ---- one round --------------------------------------------------------------------------------
    def _round(self, policy, commit: bool = True) -> tuple[RoundInfo, list[int]]:
        """Draft D steps, prune, verify, accept. Returns (info, emitted tokens)."""
        t0 = time.perf_counter()
        self._emit("round.start", root=self.root, committed=len(self.ids))
        tree, schedule, calls, mid_s = self._draft(policy)
        kept = self.prune(tree)                                                 # global budget pruning
        self._emit("round.prune", self.config.depth, tree, kept=kept,
                   chances=self.pruner.chances(tree) if self.pruner and "round.prune" in self._hooks else None)
        return self._verify(tree, kept, schedule, calls, mid_s, t0, commit)

    def prune(self, tree: DraftTree) -> list[int]:
        """The nodes the target verifies: the budget's best by path score, or (prune="value")
        the best ones worth their verification time this round."""
        return tree.prune(self.budget) if self.pruner is None else self.pruner.prune(tree, self.budget)

    def _draft(self, policy) -> tuple[DraftTree, str, int, float]:
        """Grow the shared tree for D steps. Returns (tree, schedule bits, mid calls, mid seconds)."""
        cfg = self.config
        tree = DraftTree.start(self.root)
        last_new, expanded, history, mid_s = [0], [], [], 0.0
        for k in range(1, cfg.depth + 1):
            ctx = StepContext(k, cfg.depth, list(history), tree, last_new, expanded, self.prompt_len,
                              self.costs["t_tgt_ms"], self.costs["t_mid_ms"], cfg.width, cfg.ngram_max,
                              self.small.index, cfg.lookback)
            call = self._when(policy, ctx)                                      # WHEN
            self._emit("step.decide", k, tree, call_mid=call, ctx=ctx, policy=policy)
            pool, frontier, new, chain, fwd, t = self.draft_step(tree, k, call, last_new, expanded)  # WHERE + HOW
            mid_s += t
            self._emit("step.expand", k, tree, call_mid=call, pool=pool, frontier=frontier, new=new, chain=chain,
                       last_new=last_new, forwarded=fwd)
            expanded, last_new = frontier, new
            history.append(int(call))
        return tree, "".join(map(str, history)), sum(history), mid_s

    def draft_step(self, tree: DraftTree, k: int, call: bool, last_new: list[int], expanded: list[int] = ()):
        """Draft step k. Returns (pool, frontier, new, chain, nodes the mid forwarded, mid seconds).

        WHERE: a mid step takes its frontier from the candidate pool (EG: the depth window above the
        deepest node of N_k = `last_new`, or every node it has not scored) after scoring what it has
        not scored of it; a small step expands the top-W of N_k. `expanded`: the previous step's
        frontier. HOW: the proposals are grafted non-destructively (or overwrite, with ND off), each
        frontier node getting its own top-`children` (expansion "per_parent") or the frontier the
        global top-W. `new`: the nodes the first tokens landed on (the next N_k); `chain`: the nodes
        created below them by n-gram chains (drafted ahead, deeper than the next frontier).
        """
        cfg, fwd, t = self.config, [], 0.0
        children = cfg.children if cfg.expansion == "per_parent" else None
        if call:
            pool = graft.candidate_pool(tree, last_new, cfg.expanded_graft, cfg.lookback, expanded)  # WHERE
            fwd = graft.to_forward(tree, pool)
            if fwd:
                _, t = self._timed(self.mid.score, tree, fwd)
            frontier = graft.top_by_score(tree, pool, cfg.width)
            proposals = self.mid.propose(tree, frontier, cfg.width, children)
        else:
            pool = frontier = graft.top_by_score(tree, last_new, cfg.width)
            chain = max(1, cfg.ngram_max - (k - 1)) if cfg.ngram_chain else 1
            proposals = self.small.propose(tree, frontier, cfg.width, children, chain)
        n0 = len(tree)
        new = graft.graft(tree, proposals, MID if call else SMALL, k, cfg.non_destructive, cfg.node_cap)  # HOW
        landed = set(new)
        return pool, frontier, new, [v for v in range(n0, len(tree)) if v not in landed], fwd, t

    def _verify(self, tree: DraftTree, kept: list[int], schedule: str, calls: int, mid_s: float, t0: float,
                commit: bool) -> tuple[RoundInfo, list[int]]:
        """One target forward over the kept tree, lossless acceptance, then commit (or roll back)."""
        cfg, t1 = self.config, time.perf_counter()
        logits, t_fwd = self._timed(self.target.forward_tree, tree, kept)
        if cfg.greedy:
            path, bonus = accept_greedy(tree, kept, logits)
        else:
            probs = warp(logits, cfg.temperature, cfg.top_k, cfg.top_p)
            path, bonus = accept_sampling(tree, kept, probs, self.generator)
        t2 = time.perf_counter()
        self._emit("round.verify", cfg.depth, tree, kept=kept, logits=logits, path=path, bonus=bonus)
        emitted = [tree.tokens[v] for v in path[1:]] + [bonus]
        if commit:
            self.target.commit(kept, path)
            if self.mid is not None:
                self.mid.commit(tree, path)
            self.small.index.extend(emitted)
            self.ids += emitted
            self.root = bonus
            self._update_costs(t_fwd, mid_s, calls)
            if self.pruner is not None:
                self.pruner.observe(tree, kept, path, 1000 * (time.perf_counter() - t0))
        else:
            self.target.rollback()
            if self.mid is not None:
                self.mid.rollback()
        info = RoundInfo(len(path) - 1, schedule, calls, sum(tree.alive), len(kept) - 1,
                         t1 - t0, t2 - t1, t_fwd + mid_s, time.perf_counter() - t0)
        self._emit("round.accept", cfg.depth, tree, kept=kept, path=path, bonus=bonus, info=info, committed=commit)
        return info, emitted

    def _when(self, policy, ctx: StepContext) -> bool:
        if self.mid is None:
            return False
        cap = self.config.call_budget
        if cap is not None and ctx.mid_calls >= cap:
            return False
        return bool(policy.decide(ctx))

    def _update_costs(self, t_verify: float, t_mid: float, calls: int) -> None:
        a = 0.2  # exponential moving average of the measured per-call costs
        self.costs["t_tgt_ms"] += a * (1000 * t_verify - self.costs["t_tgt_ms"])
        if calls:
            self.costs["t_mid_ms"] += a * (1000 * t_mid / calls - self.costs["t_mid_ms"])

    def _oracle_round(self) -> tuple[RoundInfo, list[int]]:
        """Replay every binary schedule from this state; commit the best for tokens per second.

        Greedy with a mid drafter: one depth-first replay sharing schedule prefixes (62 draft steps,
        each timed) and one target forward over the union of the 32 trees (`collect.replay_all`).
        A schedule's time is its measured draft time plus a verification cost linear in its kept
        nodes, fitted on this run's committed verifications. Maximising each round's own
        tokens/time would not maximise the run's tokens/s, so the winner maximises
        `tokens - lambda * time` with lambda the run's tokens/s so far (Dinkelbach); the first
        round takes the best ratio. The winner is then drafted and verified for real.
        Otherwise (sampling, or no mid drafter) every schedule is run as a full round.
        """
        from treegraft_lab.schedule.collect import replay_all, robust_line
        from treegraft_lab.schedule.policies import MaskPolicy

        if not (self.config.greedy and self.mid is not None):
            return self._oracle_full_rounds()
        _, leaves, _ = replay_all(self, shared_verify=True, timed=0)
        seen = self._oracle["verify"]
        a, b = robust_line(*map(np.array, zip(*seen))) if len(seen) >= 8 else (self.costs["t_tgt_ms"], 0.0)
        lam = self._oracle["tokens"] / self._oracle["ms"] if self._oracle["ms"] > 0 else None

        def value(lf: dict) -> tuple[float, int]:
            t = lf["meas_draft_ms"] + a + b * lf["kept"]
            return ((lf["accepted"] + 1) / t if lam is None else lf["accepted"] + 1 - lam * t), -lf["n_mid"]

        best = max(leaves, key=value)
        info, emitted = self._round(MaskPolicy(tuple(int(c) for c in best["schedule"])))
        seen.append((info.kept + 1, 1000 * info.verify_s))
        self._oracle["tokens"] += info.accepted + 1
        self._oracle["ms"] += 1000 * info.round_s
        return info, emitted

    def _oracle_full_rounds(self) -> tuple[RoundInfo, list[int]]:
        """The oracle by brute force: 2^D full rounds (draft, verify, roll back), then the best."""
        from treegraft_lab.schedule.policies import MaskPolicy

        best = None
        self.replaying = True
        try:
            for bits in itertools.product((0, 1), repeat=self.config.depth):
                info, _ = self._round(MaskPolicy(bits), commit=False)
                eta = (info.accepted + 1) / info.round_s
                if best is None or eta > best[0]:
                    best = (eta, bits)
        finally:
            self.replaying = False
        return self._round(MaskPolicy(best[1]))

    # ---- generation -------------------------------------------------------------------------------
    def generate(self, prompt, max_new_tokens: int = 256) -> Generation:
        """Decode `prompt` (a string, chat messages, or token ids) losslessly with TreeGraft."""
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise TreeGraftError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
        ids = encode_prompt(self.tokenizer, prompt)
        window = getattr(self.pair.target.config, "max_position_embeddings", None)
        need = len(ids) + max_new_tokens + self.config.depth + 1
        if window and need > window:
            raise TreeGraftError(
                f"the prompt has {len(ids)} tokens; with max_new_tokens={max_new_tokens} and depth="
                f"{self.config.depth} decoding needs {need} positions but the target's context window is "
                f"{window}: shorten the prompt or lower max_new_tokens"
            )
        stop = eos_ids(self.tokenizer, self.pair.target)
        t0 = time.perf_counter()
        self.start(ids)
        t_prefill = time.perf_counter() - t0
        self._emit("run.start", prompt_ids=ids)
        out: list[int] = []
        rounds: list[RoundInfo] = []
        oracle = self.config.schedule == "oracle"
        while len(out) < max_new_tokens:
            info, emitted = self._oracle_round() if oracle else self._round(self.policy)
            rounds.append(info)
            self.round_idx += 1
            hit = next((i for i, t in enumerate(emitted) if t in stop), None)
            out += emitted[: (hit + 1) if hit is not None else None]
            if hit is not None:
                break
        out = out[:max_new_tokens]
        wall = time.perf_counter() - t0
        gen = Generation(out, self.tokenizer.decode(out, skip_special_tokens=True), rounds, self._stats(out, rounds, wall, t_prefill))
        self._emit("run.end", prompt_ids=ids, generation=gen)
        return gen

    @staticmethod
    def _stats(out: list[int], rounds: list[RoundInfo], wall: float, prefill: float) -> dict:
        n = max(len(rounds), 1)
        acc = sum(r.accepted for r in rounds)
        round_s = sum(r.round_s for r in rounds)
        fwd = sum(r.forward_s for r in rounds)
        return {
            "new_tokens": len(out),
            "tokens_per_s": len(out) / wall if wall > 0 else 0.0,
            "rounds": len(rounds),
            "accepted_per_round": acc / n,
            "tokens_per_round": (acc + len(rounds)) / n,
            "mid_calls_per_round": sum(r.mid_calls for r in rounds) / n,
            "draft_s": sum(r.draft_s for r in rounds),
            "verify_s": sum(r.verify_s for r in rounds),
            "forward_s": fwd,
            "overhead_s": round_s - fwd,
            "overhead_share": (round_s - fwd) / round_s if round_s > 0 else 0.0,
            "prefill_s": prefill,
            "wall_s": wall,
        }


def replay_round(pair, context_ids: list[int], config: DecodeConfig, prompt_len: int | None = None):
    """Run ONE round from the state "`context_ids` committed" with `config`; nothing else changes.

    Returns (RoundInfo, Run) where the Run holds the recorded round (tables as in hooks.Recorder).
    The schedule playground and the scheduler's analysis use it to compare settings on one state.
    """
    from treegraft_lab.hooks import record

    dec = TreeGraftDecoder(pair, config)
    with record(dec) as rec:
        dec.start(list(context_ids))
        if prompt_len is not None:
            dec.prompt_len = prompt_len
        dec._emit("run.start", prompt_ids=list(context_ids))
        info, emitted = dec._oracle_round() if config.schedule == "oracle" else dec._round(dec.policy)
        gen = Generation(emitted, dec.tokenizer.decode(emitted), [info], TreeGraftDecoder._stats(emitted, [info], info.round_s, 0.0))
        dec._emit("run.end", prompt_ids=list(context_ids), generation=gen)
    return info, rec.to_run()
