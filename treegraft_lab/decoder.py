"""TreeGraftDecoder: the round loop. Read `run_round` first: it is the whole method.

Each round grows one shared draft tree for D steps (`drafter.draft`: TreeGraft's own is
`drafting.GraftDrafter`, whose `when`, `where` and `how` are WHEN, WHERE and HOW). Then the tree is
pruned to the verification budget (`prune`), the target verifies it in one forward (`verify`), and
the accepted tokens plus one bonus token are committed (`commit`).

Costs come from one `DeviceProfile` (costs.py), handed to the decoder: `TreeGraftDecoder(pair,
config, profile=measure.resolve(config.clock, pair))`, resolved once by the caller (`config.clock`
only names it: "wall" for this device's profile, a profile name or a JSON file). Handed none, the
decoder reads the profile its clock names (`measure.read_only`: a named file, or "wall" from the
cache `measure.for_pair` left); it never measures. Every decision that weighs time (WHEN, value
pruning, budget="auto", the oracle) reads the profile, never a live timing; each round is also
priced from its exact sizes (`RoundInfo.modelled_ms`), reported beside the wall clock.

The round API other modules drive (replay, trajectory collection, the views): `start(ids,
prompt_len=...)`, `round_start` / `restore` (a round start's snapshot), `run_round(policy,
commit)`, `step_context` and `draft_step` (a `StepResult`), `prune`, `verify_tree` (a replay's
verification, nothing committed), `lag_mid` and `timed`; the hook points (`hooks.HookHost`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch

from treegraft_lab import measure
from treegraft_lab.budget import ValuePruner
from treegraft_lab.config import DecodeConfig, parse_mask, parse_small
from treegraft_lab.costs import DeviceProfile
from treegraft_lab.drafters import ModelDrafter, NgramIndex
from treegraft_lab.drafting import (
    Drafter,
    GraftDrafter,
    check_release_parts,
    drafter_for,
    small_step_size,
    stepper,
)
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.growth import GROWTH_RULES, Growth
from treegraft_lab.hooks import HookHost, record
from treegraft_lab.notes import note
from treegraft_lab.parts import MidDrafter, Pruner, SmallDrafter, TopKPruner, adopt
from treegraft_lab.prompting import context_window, encode_prompt, eos_ids
from treegraft_lab.resolve import resolve
from treegraft_lab.retrieval import SmallDrafters
from treegraft_lab.rounds import Draft, RoundInfo, RoundStart, StepResult
from treegraft_lab.schedule.context import RoundHistory, StepContext
from treegraft_lab.schedule.policies import Policy
from treegraft_lab.tree import MID, DraftTree
from treegraft_lab.verify import TargetVerifier, accept_greedy, accept_sampling, warp

__all__ = ["Drafter", "GraftDrafter", "Generation", "TreeGraftDecoder", "build_parts", "needs_mid", "record_round",
           "replay_round"]


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


def needs_mid(config: DecodeConfig) -> bool:
    """Whether `config`'s schedule may call the mid drafter (all but "small" and the all-zero mask)."""
    return config.schedule_name not in ("small", "0" * config.depth)


def may_skip_mid(config: DecodeConfig) -> bool:
    """A learned or custom policy may never call the mid drafter: prefill it lazily. Fixed masks
    call it in the first round anyway; the oracle and collection replay from it."""
    return parse_mask(config.schedule, config.depth) is None and config.schedule_name not in ("mid", "oracle")


def build_parts(pair, config: DecodeConfig, profile: DeviceProfile) -> dict:
    """The parts the config's names mean (the one factory): the small drafter(s) of `config.small`,
    the pair's mid model as a `ModelDrafter` (None where the schedule never calls it), the pruner of
    `config.prune`. Each is built once; the decoder starts them at every generation."""
    mid = None
    if pair.mid is not None and needs_mid(config):
        mid = ModelDrafter(pair.mid, top=config.children if config.expansion == "per_parent" else config.width)
    names = parse_small(config.small)
    return {
        "small": SmallDrafters(names, config.ngram_max, config.ngram_min, recycle_below=config.recycle_below),
        "mid": mid,
        "pruner": ValuePruner(profile) if config.prune == "value" else TopKPruner(),
    }


def given_parts(config: DecodeConfig, small, mid, pruner) -> tuple:
    """The parts a caller handed in, each as its `parts` base (refused in one line where it lacks a
    required method or the config's growth cannot use it)."""
    small, mid, pruner = (None if p is None else adopt(p, base, arg) for p, base, arg in
                          ((small, SmallDrafter, "small"), (mid, MidDrafter, "mid"), (pruner, Pruner, "pruner")))
    check_release_parts(Growth.of(config), small, mid)
    return small, mid, pruner


def first_token(logits: torch.Tensor, config: DecodeConfig, generator: torch.Generator) -> int:
    """The token after a prompt forward's last logits: the argmax, or a sample (warped)."""
    if config.greedy:
        return int(logits.argmax())
    probs = warp(logits[None], config.temperature, config.top_k, config.top_p)[0].to(generator.device)
    return int(torch.multinomial(probs, 1, generator=generator))


class TreeGraftDecoder(HookHost):
    """A lossless tree speculative decoder with a small drafter (n-gram, Token Recycling, suffix or a
    combination: `DecodeConfig.small`) and a mid (LM) drafter. `drafter`: how each round's tree is
    drafted (`drafting.Drafter`; None: the one the config calls for, `drafting.drafter_for`),
    assignable per decoder or on a subclass.

    Parts (`treegraft_lab.parts`): `small=` a `SmallDrafter` (or a name, as `DecodeConfig.small`),
    `mid=` a `MidDrafter`, `pruner=` a `Pruner`, `growth=` a `growth.Growth` or its name in
    `GROWTH_RULES` (its fields replace the config's growth fields); each not given is built from
    the config's names (`build_parts`). WHEN is the config's schedule: a name,
    a mask, or any object with `decide(ctx) -> bool` (`Policy`).

    `profile`: the costs the decoder decides on and prices with, as given (resolve it once with
    `measure.resolve(config.clock, pair)`; a scaled or hand-made profile is fine: it is not checked
    against `config.clock`, which only names the setting). None: what `config.clock` names
    (`measure.resolve`: "wall" is this device's profile, measured once, then cached).
    schedule="auto" / prune="auto" (the defaults) and budget="auto" are chosen for the pair and
    profile once, here (`resolve.resolve`, said in one line): `self.config` holds the schedule and
    pruning chosen, `self.budget` the budget, `self.policy` the policy."""

    drafter: Drafter | None = None

    def __init__(self, pair, config: DecodeConfig | None = None, profile: DeviceProfile | None = None, *,
                 small: SmallDrafter | None = None, mid: MidDrafter | None = None, pruner: Pruner | None = None,
                 growth: Growth | None = None, **overrides) -> None:
        super().__init__()
        if isinstance(small, str):  # a name: the config's field ("ngram+suffix"), not a part
            small, overrides = None, {**overrides, "small": small}
        if isinstance(growth, str):  # a name of `GROWTH_RULES`
            if growth not in GROWTH_RULES:
                raise TreeGraftError(f"unknown growth {growth!r}; the growth rules are {', '.join(GROWTH_RULES)}")
            growth = GROWTH_RULES[growth]
        config = replace(config or DecodeConfig(), **overrides, **(growth.settings() if growth is not None else {}))
        small, mid, pruner = given_parts(config, small, mid, pruner)
        if needs_mid(config) and config.schedule != "auto" and pair.mid is None and mid is None:
            raise TreeGraftError(f"schedule {config.schedule_name!r} calls the mid drafter but the pair has none; load it "
                                 f"with a mid model or pass mid=")
        # every cost the decoder decides on: the profile handed in, else the one config.clock names
        # ("wall": this device's, measured once and cached)
        self.profile = profile if profile is not None else measure.resolve(config.clock, pair)
        resolved = resolve(config, pair, self.profile)  # every "auto": chosen here, once, said in one line
        note(resolved.said)
        config, self.policy, self.budget, self.costs = resolved.config, resolved.policy, resolved.budget, resolved.costs
        self.pair, self.config, self.tokenizer, self.device = pair, config, pair.tokenizer, pair.target.device
        self.cuda = measure.cuda_devices(pair.target, pair.mid)  # synchronised around `timed`
        self.laps = measure.Laps(self.cuda)  # a round's forwards, timed without waiting (CUDA events)
        self.growth = growth if growth is not None else Growth.of(config)  # how the trees grow (WHERE's window too)
        built = build_parts(pair, config, self.profile) if None in (small, mid, pruner) else {}
        self.small = small if small is not None else built["small"]
        self.mid = mid if mid is not None else built["mid"]  # None where the schedule never calls it
        self.pruner = pruner if pruner is not None else built["pruner"]
        self.drafter = self.drafter or drafter_for(config, self.growth)
        self.index = None  # the committed text's n-gram index (context signals, prompt lookup), set by start()

    def carried_state(self) -> dict:
        """A copy of what this decoder keeps across runs (Token Recycling's matrix, value pruning's
        counts of recycled candidates): `restore_state` puts it back, so that a run can be repeated
        from the same start (the bench's repeats of one prompt are then one computation)."""
        return {"matrix": self.small.carried_state(), "chances": self.pruner.carried_state() or {}}

    def reset(self) -> None:
        """Start the next `generate` from a fresh decoder's state. What otherwise carries over between
        `generate` calls (on purpose: Token Recycling's hot start, which the method's paper keeps
        across prompts) is Token Recycling's adjacency matrix and value pruning's counts of its
        candidates; everything else (caches, n-gram and suffix indexes, the tree) starts anew each call."""
        self.restore_state({"matrix": None, "chances": {}})

    def restore_state(self, state: dict) -> None:
        """Put back what `carried_state` copied (in place: the small drafters share these objects)."""
        self.small.restore_state(state["matrix"])
        self.pruner.restore_state(state["chances"])

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
        self.ids, self.first = list(ids), []
        self.prompt_len = len(ids) if prompt_len is None else prompt_len
        self.target = self.make_verifier()
        topk = cfg.children if cfg.matcher == "release" else 0  # the release's matcher scores by these rows
        if prefill_token:
            *self.prompt_rows, last = self.target.prefill(ids, fuse=False, topk=topk)
            self.first = [first_token(last, cfg, self.generator)]
            self.ids += self.first
        else:
            *self.prompt_rows, _ = self.target.prefill(ids[:-1], fuse=cfg.fuse_prompt, topk=topk)
        self.root = self.ids[-1]
        self.small.start(self.ids)
        self.index = self.small.index
        if self.index is None:  # a small drafter of its own: the decoder keeps the committed text's index
            self.index = NgramIndex(cfg.ngram_max, cfg.ngram_min)
            self.index.extend(self.ids)
        if self.mid is not None:  # lazily: a policy that may never call it leaves the prompt pending
            self.mid.start(self.ids[:-1], lazy=may_skip_mid(cfg))
        self.prompt_backlog = self.mid.backlog() if self.mid is not None else 0  # prefill: not priced
        self.round_history = RoundHistory(cfg.depth)  # the rounds run so far: the policies' round signals
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
        return RoundStart(self.mid.snapshot() if self.mid is not None else None, self.prompt_backlog)

    def restore(self, start: RoundStart) -> None:
        """Go back to `start` (`round_start`): the mid drafter's round state and its backlog."""
        if self.mid is not None:
            self.mid.restore(start.mid)
        self.prompt_backlog = start.prompt_backlog

    def step_context(self, k: int, history: list[int], tree: DraftTree, last_new: list[int],
                     expanded: list[int]) -> StepContext:
        """What a policy sees before draft step k of the round drafting `tree`."""
        cfg = self.config
        return StepContext(k=k, depth=cfg.depth, history=list(history), tree=tree, frontier=last_new,
                           expanded_last=expanded, prompt_len=self.prompt_len, t_tgt_ms=self.costs["t_tgt_ms"],
                           t_mid_ms=self.costs["t_mid_ms"], width=cfg.width, ngram_max=cfg.ngram_max,
                           index=self.index, lookback=cfg.lookback, rounds=self.round_history,
                           small_size=lambda: small_step_size(self.growth, tree, k, last_new, cfg.width))

    def mid_backlog(self) -> int:
        """Committed tokens the mid drafter has not forwarded yet and its next call forwards too
        (a deferred prompt excluded: prefill is not priced, as for the target)."""
        pending = self.mid.backlog() if self.mid is not None else 0
        return pending - self.prompt_backlog if pending else 0

    # ---- one round --------------------------------------------------------------------------------
    def run_round(self, policy: Policy | None = None, commit: bool = True,
                  drafter: Drafter | None = None) -> tuple[RoundInfo, list[int]]:
        """One round under `policy` (default: the config's): draft D steps, prune, verify, accept.
        Returns (info, emitted tokens); with `commit=False` nothing is committed (a replay).
        `drafter`: this round's (default: `self.drafter`)."""
        policy = policy or self.policy
        t0 = time.perf_counter()
        self.laps.clear()
        self.emit("round.start", root=self.root, committed=len(self.ids))
        draft = (drafter or self.drafter).draft(self, policy)                   # the tree: WHEN, WHERE, HOW
        tree = draft.tree
        kept = tree.checked_kept(self.prune(tree))                              # global budget pruning
        chances = self.pruner.chances(tree) if self.hooked("round.prune") else None
        replaced = self.emit("round.prune", self.config.depth, tree, kept=kept, chances=chances)
        if replaced is not None:  # a hook's own kept set: checked as a pruner's
            kept = tree.checked_kept(list(replaced))
        t1 = time.perf_counter()
        modelled_ms = draft.ms + self.profile.target_ms(len(kept), len(self.ids))  # this round, priced by the profile
        path, bonus, logits = self.verify(tree, kept)                            # one target forward, lossless acceptance
        t2 = time.perf_counter()
        t_fwd = self.laps.take()  # every forward of the round (mid calls included), read after acceptance's read
        emitted = [tree.tokens[v] for v in path[1:]] + [bonus]
        if commit:
            self.commit(draft, kept, path, emitted, logits, modelled_ms)
        else:
            self.target.rollback()
            if self.mid is not None:
                self.mid.rollback()
        info = RoundInfo(len(path) - 1, draft.schedule, draft.mid_calls, sum(tree.alive), len(kept) - 1,
                         t1 - t0, t2 - t1, t_fwd + draft.mid_s, time.perf_counter() - t0, modelled_ms)
        self.emit("round.accept", self.config.depth, tree, kept=kept, path=path, bonus=bonus, info=info, committed=commit)
        return info, emitted

    def draft_step(self, tree: DraftTree, k: int, call: bool, last_new: list[int],
                   expanded: list[int] = ()) -> StepResult:
        """Draft step k of the round growing `tree` (`GraftDrafter.step`: WHERE, then HOW), as the
        decoder's drafter grows it; replays and collection drive it step by step."""
        return stepper(self.drafter).step(self, tree, k, call, last_new, expanded)

    def prune(self, tree: DraftTree) -> list[int]:
        """The nodes the target verifies (`self.pruner`: the budget's best by path score, or
        (prune="value") the best ones worth their verification time this round)."""
        return self.pruner.prune(tree, self.budget, len(self.ids))

    def verify(self, tree: DraftTree, kept: list[int]) -> tuple[list[int], int, torch.Tensor]:
        """One target forward over the kept tree and lossless acceptance: (accepted path, root first;
        the bonus token; the target's logits over `kept`)."""
        cfg = self.config
        logits = self.laps.run(self.target.forward_tree, tree, kept)
        if cfg.greedy:
            path, bonus = accept_greedy(tree, kept, logits)  # the round's read of the verification result
        else:
            path, bonus = accept_sampling(tree, kept, warp(logits, cfg.temperature, cfg.top_k, cfg.top_p), self.generator)
        self.emit("round.verify", cfg.depth, tree, kept=kept, logits=logits, path=path, bonus=bonus)
        return path, bonus, logits

    def commit(self, draft: Draft, kept: list[int], path: list[int], emitted: list[int], logits: torch.Tensor,
               modelled_ms: float) -> None:
        """Commit the accepted path and bonus: the target's and mid drafter's caches, the small
        drafters and the index, the round history; the parts learn from the round."""
        tree = draft.tree
        self.target.commit(kept, path)
        if self.mid is not None:
            self.mid.commit(tree, path)
        self.small.observe(tree, kept, logits)  # Token Recycling: the target's top-k at every verified node
        self.small.extend(emitted)
        if self.index is not self.small.index:
            self.index.extend(emitted)
        self.ids += emitted
        self.root = emitted[-1]
        row = logits[kept.index(path[-1])]  # the target's top-1 there: computed only if a policy reads it
        self.round_history.add(len(path) - 1, draft.mid_calls, sum(tree.creator[v] == MID for v in path[1:]),
                               lambda row=row: torch.softmax(row.float(), -1).max(), modelled_ms)
        self.pruner.observe(tree, kept, path, modelled_ms)  # the run's rate is modelled too: decisions never read the wall clock

    # ---- generation -------------------------------------------------------------------------------
    def check_room(self, prompt_len: int, max_new_tokens: int) -> None:
        """Refuse, in one line, a prompt and `max_new_tokens` that do not fit the target's context window."""
        window = context_window(self.pair.target)
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
        while len(out) < max_new_tokens and not (out and out[-1] in stop):
            info, emitted = self.run_round()
            rounds.append(info)
            self.round_idx += 1
            hit = next((i for i, t in enumerate(emitted) if t in stop), None)
            out += emitted[: (hit + 1) if hit is not None else None]
            if hit is not None:
                break
        out = out[:max_new_tokens]
        wall = time.perf_counter() - t0
        stats = {**run_stats(out, rounds, wall, t_prefill), **modelled_stats(out, rounds, self.profile)}
        gen = Generation(out, self.tokenizer.decode(out, skip_special_tokens=True), rounds, stats)
        self.emit("run.end", prompt_ids=ids, generation=gen)
        return gen


def modelled_stats(out: list[int], rounds: list[RoundInfo], profile: DeviceProfile) -> dict:
    """The run priced by the profile (prefill excluded), labelled with the profile's name."""
    ms = sum(r.modelled_ms for r in rounds)
    return {"modelled_ms": ms, "modelled_tokens_per_s": 1000 * len(out) / ms if ms > 0 else 0.0,
            "modelled_on": profile.name}


def run_stats(out: list[int], rounds: list[RoundInfo], wall: float, prefill: float) -> dict:
    """A run's summary statistics (`Generation.stats`) from its rounds and wall times."""
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
        info, emitted = dec.run_round()
        gen = Generation(emitted, dec.tokenizer.decode(emitted), [info], run_stats(emitted, [info], info.round_s, 0.0))
        dec.emit("run.end", prompt_ids=list(context_ids), generation=gen)
    return info, rec.to_run()
