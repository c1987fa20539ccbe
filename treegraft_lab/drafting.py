"""Drafting: how a round's tree grows. `GraftDrafter` is TreeGraft's own, three named places:

    when(dec, policy, ctx)                     WHEN: call the mid drafter at this step?
    where(dec, tree, k, call, last_new, ...)   WHERE: the candidate pool and the frontier it expands
    how(dec, tree, k, call, frontier, groups)  HOW: graft the proposals, label them, the next N_k

`draft` runs them D times (`step` is one draft step: where, propose, how). `ReleaseDrafter` is the
authors' release's n-gram matcher (its small steps hang every continuation of the committed text
and rank the next frontier by match size); `replay.OracleDrafter` replays every schedule and drafts
the best. `drafter_for(config, growth)` is the one the config's schedule and growth call for. Any
object with `draft(dec, policy) -> Draft` is a drafter too (`Drafter`; the baselines' are).
"""

from __future__ import annotations

from typing import NamedTuple

from treegraft_lab import graft
from treegraft_lab.config import DecodeConfig
from treegraft_lab.costs import SKIPPED
from treegraft_lab.drafters import ModelDrafter, lookup_draft
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.growth import Growth
from treegraft_lab.hooks import StepExpand
from treegraft_lab.parts import Proposal
from treegraft_lab.replay import OracleDrafter
from treegraft_lab.retrieval import SmallDrafters, label, merged
from treegraft_lab.rounds import Draft, StepResult
from treegraft_lab.schedule.context import StepContext
from treegraft_lab.schedule.policies import MaskPolicy, Policy
from treegraft_lab.tree import MID, SMALL, DraftTree


class Drafter:
    """How a round's tree is drafted: the seam a baseline or a user's own drafter plugs into.

    `draft` grows a tree from `dec.root` (`DraftTree.start(dec.root)`) with whatever it likes to
    read (`dec.ids`, `dec.small`, `dec.mid`, `dec.profile`, `dec.timed`, `dec.draft_step`) and
    returns it as a `Draft`, its drafting priced by `dec.profile`. The decoder then prunes it to the
    budget, verifies it and accepts losslessly: any tree decodes exactly what the target would.
    After each step it calls `dec.emit_step(k, tree, step)` (a `StepResult`): the recorder and the
    viewer then show its tree step by step, as TreeGraft's. Subclassing is optional.
    """

    def draft(self, dec, policy: Policy) -> Draft:
        raise NotImplementedError


class Where(NamedTuple):
    """WHERE's answer at one draft step: the pool the frontier was chosen from, the frontier, and what
    the mid drafter read to choose it (`forwarded`, `size`: the tokens it forwarded, its backlog
    included; a small step's size is its frontier's)."""

    pool: list[int]
    frontier: list[int]
    forwarded: list[int]
    size: int


class GraftDrafter(Drafter):
    """TreeGraft's drafting: D steps, each asking `policy` WHEN to call the mid drafter, then WHERE
    and HOW, until the growth ends (`Growth.ends`). Keeps only prompt lookup's draft for the
    committed length it was made at (the draft depends on nothing else)."""

    def __init__(self) -> None:
        self._lookup: tuple = (None, -1, [])  # (index, committed length, prompt lookup's proposals)

    def draft(self, dec, policy: Policy) -> Draft:
        tree = DraftTree.start(dec.root)
        last_new, expanded, history, ms = [0], [], [], 0.0
        for k in range(1, dec.config.depth + 1):
            ctx = dec.step_context(k, history, tree, last_new, expanded)
            decision = self.when(dec, policy, ctx)                                # WHEN (None: not asked)
            replaced = dec.emit("step.decide", k, tree, call_mid=decision, ctx=ctx, policy=policy)
            call = bool(decision if replaced is None or dec.mid is None else replaced)  # a hook's decision
            step = self.step(dec, tree, k, call, last_new, expanded)                # WHERE + HOW
            if dec.hooked("step.expand"):
                dec.emit("step.expand", k, tree, StepExpand.of(step, call, last_new))
            expanded, last_new, ms = step.frontier, step.new, ms + step.ms
            history.append(int(call))
            if dec.growth.ends(tree, last_new, dec.config.node_cap):
                break
        return Draft(tree, "".join(map(str, history)), sum(history), ms)

    def when(self, dec, policy: Policy, ctx: StepContext) -> bool | None:
        """WHEN: call the mid drafter at this step? None when the policy is not asked (no mid drafter,
        the call cap reached, a generation's first round): the recorder then keeps no margin."""
        cfg = dec.config
        if dec.mid is None or (cfg.call_budget is not None and ctx.mid_calls >= cfg.call_budget):
            return None
        if not cfg.mid_in_first_round and len(dec.ids) == dec.prompt_len + len(dec.first) and not isinstance(policy, MaskPolicy):
            return None  # a generation's first round: see DecodeConfig.mid_in_first_round
        return bool(policy.decide(ctx))

    def step(self, dec, tree: DraftTree, k: int, call: bool, last_new: list[int],
             expanded: list[int] = ()) -> StepResult:
        """Draft step k of the round growing `tree` (`expanded`: the previous step's frontier): WHERE,
        then the proposals grafted HOW the growth says. `new`: the nodes the first tokens landed on
        (the next N_k); `chain`: the nodes created below them (drafted ahead, deeper than the next
        frontier). A small step from so unlikely a frontier that it cannot pay is skipped (SKIPPED)."""
        w = self.where(dec, tree, k, call, last_new, expanded)                    # WHERE
        if not call and dec.growth.skips(tree, w.frontier, k):
            return StepResult(w.pool, [], [], [], w.forwarded, SKIPPED, 0.0)
        n0 = len(tree)
        new = self.grow(dec, tree, k, call, w.frontier)                           # HOW
        landed = set(new)
        return StepResult(w.pool, w.frontier, new, [v for v in range(n0, len(tree)) if v not in landed], w.forwarded,
                          w.size, dec.profile.step_ms(call, w.size))  # the one pricing rule (DeviceProfile.step_ms)

    def where(self, dec, tree: DraftTree, k: int, call: bool, last_new: list[int], expanded: list[int] = ()) -> Where:
        """WHERE. A mid step takes its frontier from the candidate pool (EG: the depth window above the
        deepest node of N_k = `last_new`, or every node it has not scored; without EG, N_k) after the
        mid drafter has read what it had not read of it; a small step expands the top-W of N_k."""
        cfg, g = dec.config, dec.growth
        if not call:
            frontier = g.small_frontier(tree, last_new, cfg.width)
            return Where(frontier, frontier, [], len(frontier))
        pool = graft.candidate_pool(tree, last_new, cfg.expanded_graft, g.lookback, expanded)
        fwd = g.mid_forward(tree, pool)
        size = dec.mid_backlog() + len(fwd) if fwd else 0
        if fwd:
            dec.laps.run(dec.mid.score, tree, fwd)  # the mid drafter reads the pool (and may rescore it)
            for v in fwd:
                tree.mid_scored[v] = True
            dec.prompt_backlog = 0
        if g.mid_scores_all:
            graft.mid_override(tree, dec.mid)
        return Where(pool, graft.top_by_score(tree, pool, cfg.width), fwd, size)

    def grow(self, dec, tree: DraftTree, k: int, call: bool, frontier: list[int]) -> list[int]:
        """The proposals for `frontier`, grafted (`how`); returns the next N_k."""
        return self.how(dec, tree, k, call, frontier, self.propose(dec, tree, k, call, frontier))

    def propose(self, dec, tree: DraftTree, k: int, call: bool,
                frontier: list[int]) -> list[tuple[str, list[Proposal]]]:
        """[(drafter name, proposals)] for `frontier`: the mid drafter's in the growth's order, or each
        small drafter's (per frontier node its top-`children`, or the global top-W; n-gram chains)."""
        cfg, g = dec.config, dec.growth
        children = g.children(cfg.children)
        if call:
            return [("mid", g.order_mid(dec.mid.propose(tree, frontier, cfg.width, children), frontier))]
        return dec.small.propose_each(tree, frontier, cfg.width, children, g.chain(k, cfg.ngram_max))

    def how(self, dec, tree: DraftTree, k: int, call: bool, frontier: list[int],
            groups: list[tuple[str, list[Proposal]]]) -> list[int]:
        """HOW. The proposals are grafted non-destructively (siblings of what is there; with ND off,
        a parent's other children are discarded), prompt lookup's draft beside a small step's (growth
        "lookup"), each node labelled with its drafter; returns the next N_k (`Growth.settle`)."""
        cfg, g = dec.config, dec.growth
        proposals = groups[0][1] if call else merged(tree, groups)
        before = g.children_before(tree, frontier, call)
        tails = self.lookup_chain(dec, tree, k) if not call and g.lookup else []
        new = graft.graft(tree, proposals, MID if call else SMALL, k, cfg.non_destructive, cfg.node_cap)
        for name, ps in groups:  # which drafter made each node (the recorder and the viewer read it)
            label(tree, ps, name)
        if tails and g.chain_frontier:
            new = list(dict.fromkeys(new + tails))
        return g.settle(tree, k, call, frontier, proposals, before, new, cfg.children, cfg.width, dec.index)

    def lookup_chain(self, dec, tree: DraftTree, k: int) -> list[int]:
        """Growth "lookup": graft prompt lookup's draft under the root unless the tree already holds
        it (so at the round's first small step), with `lookup_longest` also the chain after the longest
        earlier match (`NgramIndex.longest_match`); returns the chains' deepest nodes."""
        index, n = dec.index, len(dec.index.tokens)
        if self._lookup[0] is not index or self._lookup[1] != n:  # once per committed length
            self._lookup = (index, n, lookup_draft(index, dec.growth.lookup, longest=dec.growth.lookup_longest))
        todo = [p for p in self._lookup[2] if not tree.holds([p[1], *(t[0] for t in p[4])])]
        if not todo:
            return []
        graft.graft(tree, todo, SMALL, k, dec.config.non_destructive, None)
        label(tree, todo, "lookup")
        ends = []
        for p in todo:
            v = 0
            for tok in [p[1], *(t[0] for t in p[4])]:
                v = tree.children[v][tok]
            ends.append(v)
        return ends


class ReleaseDrafter(GraftDrafter):
    """The authors' release's drafting (growth "release"): its small steps run the release's n-gram
    matcher (`graft.release_small_step`: every continuation, scored by the target's log-probs over
    the prompt, `prompt_logp`), with its stop rule, first-step fallback and frontier order."""

    def grow(self, dec, tree: DraftTree, k: int, call: bool, frontier: list[int]) -> list[int]:
        if call:
            return super().grow(dec, tree, k, call, frontier)
        cfg, g = dec.config, dec.growth
        cands = graft.release_small_step(tree, dec.small.ngram, frontier, g.chain(k, cfg.ngram_max), cfg.children,
                                         cfg.node_cap, k, lambda pos, tok: prompt_logp(dec, pos, tok), g.stop_on_relax_zero)
        return g.release_frontier(tree, k, cands, cfg.width, dec.index)


def prompt_logp(dec, pos: int, token: int) -> float:
    """The release's n-gram score of `token` at committed position `pos + 1`: the target's log-prob
    of it after `pos` from the prompt's own forward (`dec.prompt_rows`; outside its top rows: the
    last minus 5); 0 beyond the prompt."""
    tokens, logps = dec.prompt_rows
    if pos < 0 or pos >= min(len(tokens), dec.prompt_len):
        return 0.0
    row = tokens[pos]
    return logps[pos][row.index(token)] if token in row else logps[pos][-1] - 5.0


def check_release_parts(growth: Growth, small, mid) -> None:
    """Refuse, in one line, a part of one's own that the release's rules cannot use."""
    if small is not None and growth.matcher == "release" and not isinstance(small, SmallDrafters):
        raise TreeGraftError("growth 'release' drafts with the release's n-gram matcher: it needs the built-in "
                             "small drafter (leave small= out) or another growth")
    if mid is not None and growth.mid_scores_all and not isinstance(mid, ModelDrafter):
        raise TreeGraftError("mid_scores_all (growth 'release') rescores every edge with the mid drafter's rows: it "
                             "needs a ModelDrafter (leave mid= out) or another growth")


def stepper(drafter: Drafter) -> GraftDrafter:
    """The TreeGraft drafting whose steps replays drive (`TreeGraftDecoder.draft_step`): the decoder's
    own, the oracle's inner one, or (a baseline's or one's own drafter) the default."""
    if isinstance(drafter, OracleDrafter):
        drafter = drafter.inner
    return drafter if isinstance(drafter, GraftDrafter) else GraftDrafter()


def small_step_size(growth: Growth, tree: DraftTree, k: int, last_new: list[int], width: int) -> int:
    """What a small step k would expand now (`GraftDrafter.step`'s rule): its frontier's size, or SKIPPED."""
    frontier = growth.small_frontier(tree, last_new, width)
    return SKIPPED if growth.skips(tree, frontier, k) else len(frontier)


def drafter_for(config: DecodeConfig, growth: Growth) -> Drafter:
    """The drafter `config` calls for: the release's under its matcher, else TreeGraft's; schedule
    "oracle" wraps it in `replay.OracleDrafter`."""
    inner = ReleaseDrafter() if growth.matcher == "release" else GraftDrafter()
    return OracleDrafter(inner) if config.schedule_name == "oracle" else inner
