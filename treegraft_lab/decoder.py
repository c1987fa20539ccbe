"""TreeGraftDecoder: the round loop. Read `run_round` first: it is the whole method.

Each round grows one shared draft tree for D steps. At every step the policy decides WHEN the
mid drafter is called; a mid step chooses WHERE to graft (the candidate pool and its top-W
frontier, in graft.py) and the proposals are grafted HOW the config says (non-destructively or
not, graft.py). Then the tree is pruned to the verification budget, the target verifies it in
one forward (verify.py), and the accepted tokens plus one bonus token are committed.

Costs come from one `DeviceProfile` (costs.py), handed to the decoder: `TreeGraftDecoder(pair,
config, profile=measure.resolve(config.clock, pair))`, resolved once by the caller (`config.clock`
only names it: "wall" for this device's profile, a profile name or a JSON file). Handed none, the
decoder reads the profile its clock names (`measure.read_only`: a named file, or "wall" from the
cache `measure.for_pair` left); it never measures. Every decision that weighs time (WHEN, value
pruning, budget="auto", the oracle) reads the profile, never a live timing; each round is also
priced from its exact sizes (`RoundInfo.modelled_ms`), reported beside the wall clock.

Drafting is a strategy (`Drafter`): `run_round` asks `dec.drafter.draft(dec, policy)` for the
round's tree (a `Draft`) and verifies it. TreeGraft's own is `GraftDrafter`; the baselines and a
user's drafter plug in by assigning `drafter` (on the class or on one decoder).

The round API other modules drive (replay, trajectory collection, the views): `start(ids,
prompt_len=...)`, `round_start` / `restore` (a round start's snapshot), `run_round(policy,
commit)`, `step_context` and `draft_step` (a `StepResult`), `prune`, `verify_tree` (a replay's
verification, nothing committed), `lag_mid` and `timed`.
"""

from __future__ import annotations

import itertools
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Protocol

import torch

from treegraft_lab import graft, measure
from treegraft_lab.budget import ValuePruner, auto_budget
from treegraft_lab.config import DecodeConfig, parse_mask, parse_small
from treegraft_lab.costs import SKIPPED, DeviceProfile, scheduler_costs
from treegraft_lab.drafters import ModelDrafter, NgramIndex, lookup_draft
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.growth import GROWTH_RULES, Growth
from treegraft_lab.hooks import HookEvent, check_hooks, record
from treegraft_lab.notes import note
from treegraft_lab.parts import MidDrafter, Pruner, SmallDrafter, TopKPruner
from treegraft_lab.prompting import encode_prompt, eos_ids
from treegraft_lab.replay import leaf_ms, replay_all
from treegraft_lab.retrieval import SmallDrafters, label, merged
from treegraft_lab.rounds import Draft, RoundInfo, RoundStart, StepResult
from treegraft_lab.schedule.choice import resolve_auto
from treegraft_lab.schedule.context import RoundHistory, StepContext
from treegraft_lab.schedule.policies import MaskPolicy, Policy, make_policy
from treegraft_lab.tree import MID, SMALL, DraftTree
from treegraft_lab.verify import TargetVerifier, accept_greedy, accept_sampling, warp


@dataclass
class Generation:
    """The result of `generate`: new tokens, text, per-round info and summary statistics.

    stats: tokens_per_s (new tokens / wall time, prefill included), rounds, accepted_per_round
    (accepted draft tokens per round, bonus excluded), tokens_per_round (the same plus the bonus
    token), draft_s, verify_s, overhead_s (round time outside model forwards), prefill_s (set-up
    before the first round; the target's prompt forward rides in the first round's verification,
    `verify.TargetVerifier`, so its time is in verify_s), wall_s,
    mid_calls_per_round; modelled_ms, modelled_tokens_per_s and modelled_on (the profile's name):
    the rounds priced by the decoder's profile, prefill excluded (the target's, and the mid
    drafter's deferred prompt) ("modelled on <profile>").
    """

    token_ids: list[int]
    text: str
    rounds: list[RoundInfo] = field(default_factory=list)
    stats: dict = field(default_factory=dict)


class Drafter(Protocol):
    """How a round's tree is drafted: the seam a baseline or a user's own drafter plugs into.

    `draft` grows a tree from `dec.root` (`DraftTree.start(dec.root)`) with whatever it likes to
    read (`dec.ids`, `dec.small`, `dec.mid`, `dec.profile`, `dec.timed`, `dec.draft_step`) and
    returns it as a `Draft`, its drafting priced by `dec.profile`. The decoder then prunes it to the
    budget, verifies it and accepts losslessly: any tree decodes exactly what the target would.
    After each step it calls `dec.emit_step(k, tree, step)` (a `StepResult`): the recorder and the
    viewer then show its tree step by step, as TreeGraft's.
    """

    def draft(self, dec: TreeGraftDecoder, policy: Policy) -> Draft: ...


class GraftDrafter:
    """TreeGraft's drafting: D steps, each asking `policy` WHEN to call the mid drafter, then
    WHERE + HOW (`TreeGraftDecoder.draft_step`), until the growth ends."""

    def draft(self, dec: TreeGraftDecoder, policy: Policy) -> Draft:
        tree = DraftTree.start(dec.root)
        last_new, expanded, history, ms = [0], [], [], 0.0
        for k in range(1, dec.config.depth + 1):
            ctx = dec.step_context(k, history, tree, last_new, expanded)
            decision = dec.when(policy, ctx)                                    # WHEN (None: not asked)
            call = bool(decision)
            dec.emit("step.decide", k, tree, call_mid=decision, ctx=ctx, policy=policy)
            step = dec.draft_step(tree, k, call, last_new, expanded)            # WHERE + HOW
            dec.emit("step.expand", k, tree, call_mid=call, pool=step.pool, frontier=step.frontier, new=step.new,
                     chain=step.chain, last_new=last_new, forwarded=step.forwarded)
            expanded, last_new, ms = step.frontier, step.new, ms + step.ms
            history.append(int(call))
            if dec.growth.ends(tree, last_new, dec.config.node_cap):
                break
        return Draft(tree, "".join(map(str, history)), sum(history), ms)


def check_parts(config: DecodeConfig, small, mid, pruner) -> None:
    """Refuse, in one line, a part that lacks its protocol's methods or that the config's growth cannot use."""
    for arg, part, proto in (("small", small, SmallDrafter), ("mid", mid, MidDrafter), ("pruner", pruner, Pruner)):
        if part is not None and not isinstance(part, proto):
            need = ", ".join(n for n in vars(proto) if not n.startswith("_"))
            raise TreeGraftError(f"{arg}= takes a {proto.__name__} (methods: {need}); {type(part).__name__} lacks "
                                 f"some: see treegraft_lab.parts")
    if small is not None and config.matcher == "release" and not hasattr(small, "ngram"):
        raise TreeGraftError("growth 'release' drafts with the release's n-gram matcher: it needs the built-in small "
                             "drafter (leave small= out) or another growth")
    if mid is not None and config.mid_scores_all and not hasattr(mid, "token_logq"):
        raise TreeGraftError("mid_scores_all (growth 'release') rescores every edge with the mid drafter's rows: it needs "
                             "a ModelDrafter (leave mid= out) or another growth")


def build_parts(pair, config: DecodeConfig, profile: DeviceProfile) -> dict:
    """The parts the config's names mean (the one factory): the small drafter(s) of `config.small`,
    the pair's mid model as a `ModelDrafter` (None where the schedule never calls it), the pruner of
    `config.prune`. Each is built once; the decoder starts them at every generation."""
    mid = None
    if pair.mid is not None and TreeGraftDecoder.needs_mid(config):
        mid = ModelDrafter(pair.mid, top=config.children if config.expansion == "per_parent" else config.width)
    names = parse_small(config.small)
    return {
        "small": SmallDrafters(names, config.ngram_max, config.ngram_min, recycle_below=config.recycle_below),
        "mid": mid,
        "pruner": ValuePruner(profile) if config.prune == "value" else TopKPruner(),
    }


class TreeGraftDecoder:
    """A lossless tree speculative decoder with a small drafter (n-gram, Token Recycling, suffix or a
    combination: `DecodeConfig.small`) and a mid (LM) drafter. `drafter`: how each round's tree is
    drafted (`Drafter`; TreeGraft's own by default), assignable per decoder.

    Parts (`treegraft_lab.parts`): `small=` a `SmallDrafter` (or a name, as `DecodeConfig.small`),
    `mid=` a `MidDrafter`, `pruner=` a `Pruner`, `growth=` a `growth.Growth` or its name in
    `GROWTH_RULES` (its fields replace the config's growth fields); each not given is built from
    the config's names (`build_parts`). WHEN is the config's schedule: a name,
    a mask, or any object with `decide(ctx) -> bool` (`Policy`).

    `profile`: the costs the decoder decides on and prices with, as given (resolve it once with
    `measure.resolve(config.clock, pair)`; a scaled or hand-made profile is fine: it is not checked
    against `config.clock`, which only names the setting). None: what `config.clock` names
    (`measure.resolve`: "wall" is this device's profile, measured once, then cached).
    schedule="auto" / prune="auto" (the defaults) are chosen for the pair and profile here
    (`schedule.choice.resolve_auto`, said in one line); `self.config` holds what was chosen."""

    drafter: Drafter = GraftDrafter()  # holds no state: one serves every decoder

    def __init__(self, pair, config: DecodeConfig | None = None, profile: DeviceProfile | None = None, *,
                 small: SmallDrafter | None = None, mid: MidDrafter | None = None, pruner: Pruner | None = None,
                 growth: Growth | None = None, **overrides) -> None:
        if isinstance(small, str):  # a name: the config's field ("ngram+suffix"), not a part
            small, overrides = None, {**overrides, "small": small}
        if isinstance(growth, str):  # a name of `GROWTH_RULES`
            if growth not in GROWTH_RULES:
                raise TreeGraftError(f"unknown growth {growth!r}; the growth rules are {', '.join(GROWTH_RULES)}")
            growth = GROWTH_RULES[growth]
        config = replace(config or DecodeConfig(), **overrides, **(growth.settings() if growth is not None else {}))
        check_parts(config, small, mid, pruner)
        if self.needs_mid(config) and config.schedule != "auto" and pair.mid is None and mid is None:
            raise TreeGraftError(f"schedule {config.schedule_name!r} calls the mid drafter but the pair has none; load it "
                                 f"with a mid model or pass mid=")
        # every cost the decoder decides on: the profile handed in, else the one config.clock names
        # ("wall": this device's, measured once and cached)
        self.profile = profile if profile is not None else measure.resolve(config.clock, pair)
        config, said = resolve_auto(config, pair, self.profile)  # schedule / prune "auto": chosen here, said once
        note(said)
        self.pair, self.config = pair, config
        self.tokenizer = pair.tokenizer
        self.device = pair.target.device
        self.cuda = measure.cuda_devices(pair.target, pair.mid)  # synchronised around `timed`
        self.laps = measure.Laps(self.cuda)  # a round's forwards, timed without waiting (CUDA events)
        self.policy = make_policy(config, pair, self.profile)  # adaptive: its artifact, loaded once
        self.budget = config.budget if config.budget != "auto" else auto_budget(pair, config, self.profile, self.policy)
        t_tgt, t_mid = scheduler_costs(self.profile, config, self.budget)
        self.costs = {"t_tgt_ms": t_tgt, "t_mid_ms": t_mid}  # the scheduler's T_tgt / T_mid inputs
        self.growth = growth if growth is not None else Growth.of(config)  # how the trees grow (WHERE's window too)
        built = build_parts(pair, config, self.profile) if None in (small, mid, pruner) else {}
        self.small = small if small is not None else built["small"]
        self.mid = mid if mid is not None else (built["mid"] if self.needs_mid(config) else None)
        self.pruner = pruner if pruner is not None else built["pruner"]
        self.index = None  # the committed text's n-gram index (context signals, prompt lookup), set by start()
        self._hooks: dict[str, list] = {}
        self.round_idx = 0
        self.replaying = False  # True while a round is replayed and not committed (oracle, collect)

    def carried_state(self) -> dict:
        """A copy of what this decoder keeps across runs (Token Recycling's matrix, value pruning's
        counts of recycled candidates): `restore_state` puts it back, so that a run can be repeated
        from the same start (the bench's repeats of one prompt are then one computation)."""
        recycled, carried = getattr(self.small, "recycling", None), getattr(self.pruner, "carried", {})
        matrix = recycled.matrix if recycled is not None else None
        return {"matrix": None if matrix is None else matrix.clone(), "chances": {k: list(v) for k, v in carried.items()}}

    def reset(self) -> None:
        """Start the next `generate` from a fresh decoder's state. What otherwise carries over between
        `generate` calls (on purpose: Token Recycling's hot start, which the method's paper keeps
        across prompts) is Token Recycling's adjacency matrix and value pruning's counts of its
        candidates; everything else (caches, n-gram and suffix indexes, the tree) starts anew each call."""
        self.restore_state({"matrix": None, "chances": {}})

    def restore_state(self, state: dict) -> None:
        """Put back what `carried_state` copied (in place: the small drafters share these objects)."""
        recycled, carried = getattr(self.small, "recycling", None), getattr(self.pruner, "carried", None)
        if recycled is not None:
            recycled.matrix = None if state["matrix"] is None else state["matrix"].clone()
        if carried is not None:
            carried.clear()
            carried.update({k: list(v) for k, v in state["chances"].items()})

    @staticmethod
    def needs_mid(config: DecodeConfig) -> bool:
        """Whether `config`'s schedule may call the mid drafter (all but "small" and the all-zero mask)."""
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

    def emit(self, name: str, step: int = 0, tree: DraftTree | None = None, **data) -> None:
        """Fire hook point `name` (`hooks.HOOK_POINTS`) with `data`: one dictionary lookup when none is attached."""
        fns = self._hooks.get(name)
        if fns:
            ev = HookEvent(name, self.round_idx, step, tree, self, data)
            for fn in fns:
                fn(ev)

    def emit_step(self, k: int, tree: DraftTree, step: StepResult, call_mid: bool | None = False,
                  last_new: list[int] = (0,), ctx: StepContext | None = None, policy=None) -> None:
        """Fire a draft step's two hook points (step.decide, step.expand) for a drafter's step k:
        what makes any drafter's tree recordable and drawable step by step (`call_mid`: whether the
        step called the mid drafter; `last_new`: the nodes the step started from, N_k)."""
        if "step.decide" in self._hooks or "step.expand" in self._hooks:
            ctx = ctx or self.step_context(k, [], tree, list(last_new), [])
            self.emit("step.decide", k, tree, call_mid=call_mid, ctx=ctx, policy=policy)
            self.emit("step.expand", k, tree, call_mid=bool(call_mid), pool=step.pool, frontier=step.frontier,
                      new=step.new, chain=step.chain, last_new=list(last_new), forwarded=step.forwarded)

    # ---- set-up ---------------------------------------------------------------------------------
    def start(self, ids: list[int], prefill_token: bool = False, prompt_len: int | None = None) -> None:
        """Prefill both models with the prompt (all but its last token, the first root); the
        target's prompt, up to `TargetVerifier.FUSE` tokens of it, waits for the first round's forward
        (`DecodeConfig.fuse_prompt`; else it is cached now). `prefill_token` (generate, with
        fuse_prompt=False): the target forwards the whole prompt at once, as the release's prefill,
        and its next token is committed: it is the first root (`self.first`). `prompt_len`: where
        the prompt ends in `ids` (default: all of them), for a start inside an answer (replay,
        collection): the policies' prompt-length signal and the release's n-gram scores read it."""
        if prompt_len is not None and not 1 <= prompt_len <= len(ids):
            raise TreeGraftError(f"prompt_len={prompt_len} must lie in 1..{len(ids)} (the ids given)")
        cfg = self.config
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(cfg.seed if cfg.seed is not None else torch.seed() % (2**63))
        self.ids = list(ids)
        self.prompt_len = len(ids) if prompt_len is None else prompt_len
        self.first: list[int] = []
        self.target = self.make_verifier()
        topk = cfg.children if cfg.matcher == "release" else 0  # the release's matcher scores by these rows
        if prefill_token:
            *self._prompt_rows, last = self.target.prefill(ids, fuse=False, topk=topk)
            self.first = [self._pick(last)]
            self.ids += self.first
        else:
            *self._prompt_rows, _ = self.target.prefill(ids[:-1], fuse=cfg.fuse_prompt, topk=topk)
        self.root = self.ids[-1]
        self.small.start(self.ids)
        self.index = self.small.index if isinstance(getattr(self.small, "index", None), NgramIndex) else None
        if self.index is None:  # a small drafter of its own: the decoder keeps the committed text's index
            self.index = NgramIndex(cfg.ngram_max, cfg.ngram_min)
            self.index.extend(self.ids)
        self._lookup_at: tuple[int, list] = (-1, [])  # prompt lookup's draft for a committed length
        if self.mid is not None:  # lazily: a policy that may never call it leaves the prompt pending
            self.mid.start(self.ids[:-1], lazy=self._may_skip_mid())
        self._prompt_backlog = self._mid_pending()  # prefill: not priced
        self._oracle = {"tokens": 0, "ms": 0.0}  # the oracle schedule's running totals (modelled)
        self.round_history = RoundHistory(cfg.depth)  # the rounds run so far: the policies' round signals
        if hasattr(self.pruner, "start"):
            self.pruner.start()

    def make_verifier(self) -> TargetVerifier:
        """The target's side of the run about to start (`start` calls it once per generation). A
        subclass may return a `TargetVerifier` of its own, e.g. one that answers from a known
        continuation."""
        return TargetVerifier(self.pair.target)

    def verify_tree(self, tree: DraftTree, kept: list[int]) -> torch.Tensor:
        """The target's logits over the `kept` nodes of `tree` (root first) from this round start,
        then forgotten: nothing is committed (a replay's verification)."""
        logits = self.target.forward_tree(tree, kept)
        self.target.rollback()
        return logits

    def lag_mid(self, n: int) -> int:
        """Let the mid drafter lag the committed text by up to `n` tokens, as after rounds that did
        not call it (between rounds; `ModelDrafter.unforward`). Returns the lag (0: no mid drafter)."""
        return self.mid.unforward(self.ids, n) if self.mid is not None else 0

    def timed(self, fn, *args):
        """`fn(*args)` and its wall seconds, with every CUDA device of the pair synchronised (replays
        that measure; a round's own forwards are timed by `self.laps`, without waiting)."""
        return measure.timed(fn, *args, devices=self.cuda)

    # ---- the round start ----------------------------------------------------------------------------
    def round_start(self) -> RoundStart:
        """A snapshot of this round start (between rounds, or between draft steps of a replay)."""
        return RoundStart(self.mid.snapshot() if self.mid is not None else None, self._prompt_backlog)

    def restore(self, start: RoundStart) -> None:
        """Go back to `start` (`round_start`): the mid drafter's round state and its backlog."""
        if self.mid is not None:
            self.mid.restore(start.mid)
        self._prompt_backlog = start.prompt_backlog

    def step_context(self, k: int, history: list[int], tree: DraftTree, last_new: list[int],
                     expanded: list[int]) -> StepContext:
        """What a policy sees before draft step k of the round drafting `tree`."""
        cfg = self.config
        return StepContext(k=k, depth=cfg.depth, history=list(history), tree=tree, frontier=last_new,
                           expanded_last=expanded, prompt_len=self.prompt_len, t_tgt_ms=self.costs["t_tgt_ms"],
                           t_mid_ms=self.costs["t_mid_ms"], width=cfg.width, ngram_max=cfg.ngram_max,
                           index=self.index, lookback=cfg.lookback, rounds=self.round_history,
                           small_size=lambda: self.small_step_size(tree, k, last_new))

    def small_step_size(self, tree: DraftTree, k: int, last_new: list[int]) -> int:
        """What a small step k would expand now (`draft_step`'s rule): its frontier's size, or SKIPPED."""
        frontier = self.growth.small_frontier(tree, last_new, self.config.width)
        return SKIPPED if self.growth.skips(tree, frontier, k) else len(frontier)

    # ---- one round --------------------------------------------------------------------------------
    def run_round(self, policy: Policy | None = None, commit: bool = True) -> tuple[RoundInfo, list[int]]:
        """One round under `policy` (default: the config's): draft D steps, prune, verify, accept.
        Returns (info, emitted tokens); with `commit=False` nothing is committed (a replay)."""
        policy = policy or self.policy
        t0 = time.perf_counter()
        self.laps.clear()
        self.emit("round.start", root=self.root, committed=len(self.ids))
        draft = self.drafter.draft(self, policy)                                # the tree (GraftDrafter: WHEN/WHERE/HOW)
        tree = draft.tree
        kept = tree.checked_kept(self.prune(tree))                              # global budget pruning
        chances = getattr(self.pruner, "chances", None) if "round.prune" in self._hooks else None
        self.emit("round.prune", self.config.depth, tree, kept=kept, chances=chances(tree) if chances else None)
        return self._verify(draft, kept, t0, commit)

    def prune(self, tree: DraftTree) -> list[int]:
        """The nodes the target verifies (`self.pruner`: the budget's best by path score, or
        (prune="value") the best ones worth their verification time this round)."""
        return self.pruner.prune(tree, self.budget, len(self.ids))

    def draft_step(self, tree: DraftTree, k: int, call: bool, last_new: list[int],
                   expanded: list[int] = ()) -> StepResult:
        """Draft step k of the round growing `tree`: its `StepResult`.

        WHERE: a mid step takes its frontier from the candidate pool (EG: the depth window above the
        deepest node of N_k = `last_new`, or every node it has not scored) after scoring what it has
        not scored of it; a small step expands the top-W of N_k. `expanded`: the previous step's
        frontier. HOW: the proposals are grafted non-destructively (or overwrite, with ND off), each
        frontier node getting its own top-`children` (expansion "per_parent") or the frontier the
        global top-W. `new`: the nodes the first tokens landed on (the next N_k); `chain`: the nodes
        created below them by n-gram chains (drafted ahead, deeper than the next frontier).
        """
        cfg, g, fwd = self.config, self.growth, []
        children = g.children(cfg.children)
        if call:
            pool = graft.candidate_pool(tree, last_new, cfg.expanded_graft, g.lookback, expanded)  # WHERE
            fwd = g.mid_forward(tree, pool)
            size = self.mid_backlog() + len(fwd) if fwd else 0
            if fwd:
                self.laps.run(self.mid.score, tree, fwd)  # the mid drafter reads the pool (and may rescore it)
                for v in fwd:
                    tree.mid_scored[v] = True
                self._prompt_backlog = 0
            if g.mid_scores_all:
                graft.mid_override(tree, self.mid)
            frontier = graft.top_by_score(tree, pool, cfg.width)
            proposals = g.order_mid(self.mid.propose(tree, frontier, cfg.width, children), frontier)
            groups = [("mid", proposals)]
        else:
            pool = frontier = g.small_frontier(tree, last_new, cfg.width)
            if g.skips(tree, frontier, k):
                return StepResult(pool, [], [], [], fwd, SKIPPED, 0.0)  # a step from so unlikely a node cannot pay for itself
            size, chain = len(frontier), g.chain(k, cfg.ngram_max)
            if g.matcher == "release":
                return self._release_small_step(tree, k, frontier, chain, size)
            groups = self._small_groups(tree, frontier, children, chain)
            proposals = merged(tree, groups)
        n0 = len(tree)
        before = g.children_before(tree, frontier, call)
        tails = self._lookup_chain(tree, k) if not call and g.lookup else []
        new = graft.graft(tree, proposals, MID if call else SMALL, k, cfg.non_destructive, cfg.node_cap)  # HOW
        for name, ps in groups:  # which drafter made each node (the recorder and the viewer read it)
            label(tree, ps, name)
        if tails and g.chain_frontier:
            new = list(dict.fromkeys(new + tails))
        new = g.settle(tree, k, call, frontier, proposals, before, new, cfg.children, cfg.width, self.index)
        landed = set(new)
        return StepResult(pool, frontier, new, [v for v in range(n0, len(tree)) if v not in landed], fwd, size,
                          self.profile.step_ms(call, size))  # the one pricing rule (costs.DeviceProfile.step_ms)

    def _small_groups(self, tree: DraftTree, frontier: list[int], children: int | None,
                      chain: int) -> list[tuple[str, list]]:
        """[(drafter name, proposals)] of the small drafter(s) (`SmallDrafters.propose_each`; a
        drafter of one's own is one group, named by its `name` or its class)."""
        each = getattr(self.small, "propose_each", None)
        if each is not None:
            return each(tree, frontier, self.config.width, children, chain)
        name = getattr(self.small, "name", type(self.small).__name__)
        return [(name, self.small.propose(tree, frontier, self.config.width, children, chain))]

    def _release_small_step(self, tree: DraftTree, k: int, frontier: list[int], chain: int, size: int) -> StepResult:
        """An n-gram step of the release's matcher (`graft.release_small_step`), with its stop rule,
        first-step fallback and frontier order as the growth says."""
        cfg, g, n0 = self.config, self.growth, len(tree)
        cands = graft.release_small_step(tree, self.small.ngram, frontier, chain, cfg.children, cfg.node_cap, k,
                                         self._prompt_logp, g.stop_on_relax_zero)
        new = g.release_frontier(tree, k, cands, cfg.width, self.index)
        landed = set(new)
        return StepResult(frontier, frontier, new, [v for v in range(n0, len(tree)) if v not in landed], [], size,
                          self.profile.step_ms(False, size))

    def _prompt_logp(self, pos: int, token: int) -> float:
        """The release's n-gram score of `token` at committed position `pos + 1`: the target's log-prob
        of it after `pos` from the prompt's own forward (outside its top rows: the last minus 5); 0
        beyond the prompt."""
        tokens, logps = self._prompt_rows
        if pos < 0 or pos >= min(len(tokens), self.prompt_len):
            return 0.0
        row = tokens[pos]
        return logps[pos][row.index(token)] if token in row else logps[pos][-1] - 5.0

    def _pick(self, logits: torch.Tensor) -> int:
        """The token after a prompt forward's last logits: the argmax, or a sample (warped)."""
        cfg = self.config
        if cfg.greedy:
            return int(logits.argmax())
        probs = warp(logits[None], cfg.temperature, cfg.top_k, cfg.top_p)[0].to(self.generator.device)
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def _lookup_chain(self, tree: DraftTree, k: int) -> list[int]:
        """Growth "lookup": graft prompt lookup's draft under the root unless the tree already holds
        it (so at the round's first small step), with `lookup_longest` also the chain after the longest
        earlier match (`NgramIndex.longest_match`); returns the chains' deepest nodes."""
        n = len(self.index.tokens)  # the draft depends only on the committed text: once a round
        if self._lookup_at[0] != n:
            self._lookup_at = (n, lookup_draft(self.index, self.config.lookup, longest=self.config.lookup_longest))
        props = self._lookup_at[1]
        todo = [p for p in props if not _holds(tree, [p[1], *(t[0] for t in p[4])])]
        if not todo:
            return []
        graft.graft(tree, todo, SMALL, k, self.config.non_destructive, None)
        label(tree, todo, "lookup")
        ends = []
        for p in todo:
            v = 0
            for tok in [p[1], *(t[0] for t in p[4])]:
                v = tree.children[v][tok]
            ends.append(v)
        return ends

    def mid_backlog(self) -> int:
        """Committed tokens the mid drafter has not forwarded yet and its next call forwards too
        (a deferred prompt excluded: prefill is not priced, as for the target)."""
        pending = self._mid_pending()
        return pending - self._prompt_backlog if pending else 0

    def _mid_pending(self) -> int:
        """The mid drafter's `backlog()` (0 without one, or for a drafter that keeps no cache)."""
        backlog = getattr(self.mid, "backlog", None)
        return backlog() if backlog is not None else 0

    def _verify(self, draft: Draft, kept: list[int], t0: float, commit: bool) -> tuple[RoundInfo, list[int]]:
        """One target forward over the kept tree, lossless acceptance, then commit (or roll back)."""
        cfg, t1, tree = self.config, time.perf_counter(), draft.tree
        modelled_ms = draft.ms + self.profile.target_ms(len(kept), len(self.ids))  # this round, priced by the profile
        logits = self.laps.run(self.target.forward_tree, tree, kept)
        if cfg.greedy:
            path, bonus = accept_greedy(tree, kept, logits)  # the round's read of the verification result
        else:
            probs = warp(logits, cfg.temperature, cfg.top_k, cfg.top_p)
            path, bonus = accept_sampling(tree, kept, probs, self.generator)
        t2 = time.perf_counter()
        t_fwd = self.laps.take()  # every forward of the round (mid calls included), read after that read
        self.emit("round.verify", cfg.depth, tree, kept=kept, logits=logits, path=path, bonus=bonus)
        emitted = [tree.tokens[v] for v in path[1:]] + [bonus]
        if commit:
            self.target.commit(kept, path)
            if self.mid is not None:
                self.mid.commit(tree, path)
            if hasattr(self.small, "observe"):
                self.small.observe(tree, kept, logits)  # Token Recycling: the target's top-k at every verified node
            self.small.extend(emitted)
            if self.index is not getattr(self.small, "index", None):
                self.index.extend(emitted)
            self.ids += emitted
            self.root = bonus
            row = logits[kept.index(path[-1])]  # the target's top-1 there: computed only if a policy reads it
            self.round_history.add(len(path) - 1, draft.mid_calls, sum(tree.creator[v] == MID for v in path[1:]),
                                   lambda row=row: torch.softmax(row.float(), -1).max())
            if hasattr(self.pruner, "observe"):  # the run's rate is modelled too: decisions never read the wall clock
                self.pruner.observe(tree, kept, path, modelled_ms)
        else:
            self.target.rollback()
            if self.mid is not None:
                self.mid.rollback()
        info = RoundInfo(len(path) - 1, draft.schedule, draft.mid_calls, sum(tree.alive), len(kept) - 1,
                         t1 - t0, t2 - t1, t_fwd + draft.mid_s, time.perf_counter() - t0, modelled_ms)
        self.emit("round.accept", cfg.depth, tree, kept=kept, path=path, bonus=bonus, info=info, committed=commit)
        return info, emitted

    def when(self, policy, ctx: StepContext) -> bool | None:
        """Call the mid drafter at this step? None when the policy is not asked (no mid drafter, the
        call cap reached, a generation's first round): the recorder then keeps no margin."""
        if self.mid is None:
            return None
        cap = self.config.call_budget
        if cap is not None and ctx.mid_calls >= cap:
            return None
        if not self.config.mid_in_first_round and len(self.ids) == self.prompt_len + len(self.first) and not isinstance(policy, MaskPolicy):
            return None  # a generation's first round: see DecodeConfig.mid_in_first_round
        return bool(policy.decide(ctx))

    def _oracle_round(self) -> tuple[RoundInfo, list[int]]:
        """Replay every binary schedule from this state; commit the best for tokens per second.

        Greedy with a mid drafter: one depth-first replay sharing schedule prefixes (62 draft
        steps) and one target forward over the union of the 32 trees (`replay.replay_all`). Each
        schedule is priced by the profile from its exact sizes. Maximising each round's own
        tokens/time would not maximise the run's tokens/s, so the winner maximises
        `tokens - lambda * time` with lambda the run's modelled tokens/s so far (Dinkelbach); the
        first round takes the best ratio. The winner is then drafted and verified for real.
        Otherwise (sampling, or no mid drafter) every schedule is run as a full round.
        """
        if not (self.config.greedy and self.mid is not None):
            return self._oracle_full_rounds()
        _, leaves, _ = replay_all(self, shared_verify=True, timed=0)
        lam = self._oracle["tokens"] / self._oracle["ms"] if self._oracle["ms"] > 0 else None

        def value(lf: dict) -> tuple[float, int]:
            t = sum(leaf_ms(self.profile, lf, self.config.depth))
            return ((lf["accepted"] + 1) / t if lam is None else lf["accepted"] + 1 - lam * t), -lf["n_mid"]

        best = max(leaves, key=value)
        info, emitted = self.run_round(MaskPolicy(tuple(int(c) for c in best["schedule"])))
        self._oracle["tokens"] += info.accepted + 1
        self._oracle["ms"] += info.modelled_ms
        return info, emitted

    def _oracle_full_rounds(self) -> tuple[RoundInfo, list[int]]:
        """The oracle by brute force: 2^D full rounds (draft, verify, roll back), then the best."""
        best = None
        self.replaying = True
        try:
            for bits in itertools.product((0, 1), repeat=self.config.depth):
                info, _ = self.run_round(MaskPolicy(bits), commit=False)
                eta = (info.accepted + 1) / info.modelled_ms
                if best is None or eta > best[0]:
                    best = (eta, bits)
        finally:
            self.replaying = False
        return self.run_round(MaskPolicy(best[1]))

    # ---- generation -------------------------------------------------------------------------------
    def check_room(self, prompt_len: int, max_new_tokens: int) -> None:
        """Refuse, in one line, a prompt and `max_new_tokens` that do not fit the target's context window."""
        window = getattr(self.pair.target.config, "max_position_embeddings", None)
        need = prompt_len + max_new_tokens + self.config.depth + 1
        if window and need > window:
            raise TreeGraftError(
                f"the prompt has {prompt_len} tokens; with max_new_tokens={max_new_tokens} and depth="
                f"{self.config.depth} decoding needs {need} positions but the target's context window is "
                f"{window}: shorten the prompt or lower max_new_tokens"
            )

    def generate(self, prompt, max_new_tokens: int = 256) -> Generation:
        """Decode `prompt` (a string, chat messages, or token ids) losslessly with TreeGraft."""
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise TreeGraftError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
        ids = encode_prompt(self.tokenizer, prompt)
        self.check_room(len(ids), max_new_tokens)
        stop = eos_ids(self.tokenizer, self.pair.target)
        t0 = time.perf_counter()
        self.start(ids, prefill_token=not self.config.fuse_prompt)
        out: list[int] = list(self.first)
        t_prefill = time.perf_counter() - t0
        self.emit("run.start", prompt_ids=ids)
        rounds: list[RoundInfo] = []
        oracle = self.config.schedule == "oracle"
        while len(out) < max_new_tokens and not (out and out[-1] in stop):
            info, emitted = self._oracle_round() if oracle else self.run_round()
            rounds.append(info)
            self.round_idx += 1
            hit = next((i for i, t in enumerate(emitted) if t in stop), None)
            out += emitted[: (hit + 1) if hit is not None else None]
            if hit is not None:
                break
        out = out[:max_new_tokens]
        wall = time.perf_counter() - t0
        stats = {**self._stats(out, rounds, wall, t_prefill), **self._modelled(out, rounds)}
        gen = Generation(out, self.tokenizer.decode(out, skip_special_tokens=True), rounds, stats)
        self.emit("run.end", prompt_ids=ids, generation=gen)
        return gen

    def _modelled(self, out: list[int], rounds: list[RoundInfo]) -> dict:
        """The run priced by the profile (prefill excluded), labelled with the profile's name."""
        ms = sum(r.modelled_ms for r in rounds)
        return {"modelled_ms": ms, "modelled_tokens_per_s": 1000 * len(out) / ms if ms > 0 else 0.0,
                "modelled_on": self.profile.name}

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


def _holds(tree: DraftTree, tokens: list[int]) -> bool:
    """True when the live path root -> tokens exists in the tree."""
    v = 0
    for tok in tokens:
        v = tree.children[v].get(tok, -1)
        if v < 0 or not tree.alive[v]:
            return False
    return True


def replay_round(pair, context_ids: list[int], config: DecodeConfig, prompt_len: int | None = None,
                 profile: DeviceProfile | None = None):
    """Run ONE round from the state "`context_ids` committed" with `config`; nothing else changes.

    Returns (RoundInfo, Run) where the Run holds the recorded round (tables as in hooks.Recorder).
    The schedule playground and the scheduler's analysis use it to compare settings on one state;
    pass the `profile` resolved (as to `TreeGraftDecoder`): nothing is measured here.
    """
    return record_round(TreeGraftDecoder(pair, config, profile=profile), context_ids, prompt_len)


def record_round(dec: TreeGraftDecoder, context_ids: list[int], prompt_len: int | None = None):
    """ONE round of decoder `dec` (any drafter: a baseline's, a user's) from the state "`context_ids`
    committed", recorded: (RoundInfo, Run). Two decoders from the same state draw comparable trees."""
    with record(dec) as rec:
        dec.start(list(context_ids), prompt_len=prompt_len)
        dec.emit("run.start", prompt_ids=list(context_ids))
        info, emitted = dec._oracle_round() if dec.config.schedule == "oracle" else dec.run_round()
        gen = Generation(emitted, dec.tokenizer.decode(emitted), [info], TreeGraftDecoder._stats(emitted, [info], info.round_s, 0.0))
        dec.emit("run.end", prompt_ids=list(context_ids), generation=gen)
    return info, rec.to_run()
