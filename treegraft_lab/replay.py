"""Replay every binary schedule of one round from the decoder's current round start.

Used online by the oracle schedule (`OracleDrafter`) and offline by trajectory collection. Each
step is the decoder's own (`TreeGraftDecoder.draft_step`), with any `parts.MidDrafter` (its
`snapshot` / `restore` between siblings, `held` for the backlog a round leaves), and a round ends where the decoder's growth ends it
(`Growth.ends`: the later steps are skipped, size -1). Nothing is committed:
the draft tree after steps 1..j depends only on bits 1..j, so a depth-first search over the
schedule tree expands each prefix once (2 + 4 + ... + 2^D = 62 draft steps for D = 5); between
siblings the tree is copied and the mid drafter's round state restored. Each full schedule is
pruned as the decoder prunes, and all of them are verified by one target forward over the union
of their token paths (`path_trie`), or one by one when that union is too large.

A leaf records, per schedule: accepted draft tokens, kept nodes (root included), the size of
each draft step (`size<k>`, `StepResult.size`: tokens the mid drafter forwarded, its backlog
included, 0 when it forwarded nothing; frontier nodes of an n-gram step; -1 for a step the growth
skipped) from which `DeviceProfile.step_ms` prices it, the mid drafter's backlog at the round
start (`backlog`) and after the round (`tail`: its pending committed tokens if the round called
it, -1 if not: the backlog then grows by the tokens committed), and the measured times (reported
only). With the backlog a replay from a fresh start is priced as a running decode prices it
(`leaf_ms(..., backlog=...)`).
"""

from __future__ import annotations

import itertools
import math
import random

import torch

from treegraft_lab.costs import SKIPPED
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.rounds import Draft
from treegraft_lab.schedule.policies import MaskPolicy
from treegraft_lab.tree import SMALL, DraftTree
from treegraft_lab.verify import accept_greedy

DEEPEST = 40  # answer tokens read past a start for known acceptance: deeper than any tree (D plus lookup's chain)


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


def _onehot_rows(best: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """Rows whose argmax is `best[rows]` (all `accept_greedy` reads from the logits)."""
    sel = best[rows]
    out = torch.zeros(len(rows), int(sel.max()) + 1, device=sel.device)  # on the logits' device (CUDA too)
    out[torch.arange(len(rows), device=sel.device), sel] = 1.0
    return out


def accept_known(tree: DraftTree, kept: list[int], answer: list[int]) -> list[int]:
    """The path greedy verification accepts when the target's greedy continuation is known: the
    longest kept path from the root spelling a prefix of `answer` (root first)."""
    keep, path = set(kept), [0]
    for tok in answer:
        v = tree.children[path[-1]].get(tok, -1)
        if v not in keep:
            break
        path.append(v)
    return path


def replay_all(dec, shared_verify: bool = True, timed: int = 3, seed: int = 0,
               max_trie: int = 1536, answer: list[int] | None = None) -> tuple[list[dict], list[dict], list[dict]]:
    """Every schedule from the decoder's current round start, by DFS over shared prefixes.

    Returns (states, leaves, calls): states are the decision points (k, prefix, signals), leaves
    the full schedules (accepted, kept, step sizes, measured times), calls the timed (kind, n, ms).
    With `shared_verify` all 2^D trees are verified by one target forward over their path trie
    (skipped when it exceeds `max_trie` nodes) and only `timed` randomly chosen schedules are also
    verified alone, timed (their acceptance is checked against the shared one: `leaf["check"]`).
    Otherwise every verification is timed. With `answer` (the target's greedy continuation from
    this start, long enough for the deepest tree) acceptance is read from it (`accept_known`) and
    the target is not run: greedy decoding accepts exactly that.
    """
    if not dec.config.greedy:
        raise TreeGraftError("replaying every schedule needs greedy decoding (temperature 0): acceptance must be deterministic")
    if dec.mid is None:
        raise TreeGraftError("replaying every schedule needs a pair with a mid drafter")
    search = ScheduleSearch(dec)
    search.visit(1, DraftTree.start(dec.root), (), [0], [],
                 {"n_small": 0, "small_nodes": 0, "n_mid": 0, "mid_tokens": 0, "meas_draft_ms": 0.0})
    if answer is not None:
        search.accept_known(answer)
    else:
        search.verify(shared_verify, timed, seed, max_trie)
    return search.states, search.leaves, search.calls


class ScheduleSearch:
    """One DFS over the schedules of a round start (`replay_all`): what it has found so far."""

    def __init__(self, dec) -> None:
        self.dec = dec
        self.states: list[dict] = []
        self.leaves: list[dict] = []
        self.calls: list[dict] = []
        self.finals: list[tuple[DraftTree, list[int]]] = []  # per leaf: its tree and kept nodes
        self.held: list[set | None] = []  # per leaf: the nodes the mid drafter holds (None: not called)
        self.backlog = dec.mid_backlog()

    def visit(self, k: int, tree: DraftTree, bits: tuple[int, ...], last_new: list[int], expanded: list[int],
              acc: dict, ended: bool = False) -> None:
        """Draft step k both ways from `tree` (prefix `bits`), then each subtree; a leaf past step D."""
        dec = self.dec
        if k > dec.config.depth:
            self.leaf(tree, bits, acc)
            return
        if ended:  # the growth ended the round (`Growth.ends`): the decoder drafts no further step
            for a in (0, 1):
                self.visit(k + 1, tree, bits + (a,), last_new, expanded, {**acc, f"size{k}": SKIPPED}, True)
            return
        ctx = dec.step_context(k, list(bits), tree, last_new, expanded)
        self.states.append({"k": k, "prefix": "".join(map(str, bits)), **ctx.signals()})
        start = dec.round_start()
        for a in (0, 1):
            child = tree.copy() if a == 0 else tree  # the parent no longer needs its tree after the last child
            step, t = dec.timed(dec.draft_step, child, k, bool(a), last_new, expanded)
            size = step.size  # what `DeviceProfile.step_ms` prices the step by
            kind, unit = ("mid", "tokens") if a else ("small", "nodes")
            self.calls.append({"kind": kind, "n": size, "ms": 1000 * t})
            nxt = {**acc, f"n_{kind}": acc[f"n_{kind}"] + 1, f"{kind}_{unit}": acc[f"{kind}_{unit}"] + max(size, 0),
                   f"size{k}": size, "meas_draft_ms": acc["meas_draft_ms"] + 1000 * t}
            self.visit(k + 1, child, bits + (a,), step.new, step.frontier, nxt,
                       dec.growth.ends(child, step.new, dec.config.node_cap))
            dec.restore(start)

    def leaf(self, tree: DraftTree, bits: tuple[int, ...], acc: dict) -> None:
        """A full schedule: pruned as the decoder prunes; acceptance is read later."""
        kept = tree.checked_kept(self.dec.prune(tree))
        self.finals.append((tree, kept))
        self.held.append(self.dec.mid.held())
        self.leaves.append({"schedule": "".join(map(str, bits)), "accepted": -1, "kept": len(kept),
                            "backlog": self.backlog, "tail": -1, "nodes": sum(tree.alive), **acc,
                            "meas_verify_ms": math.nan, "check": True})

    def accepted(self, lf: dict, path: list[int], held: set | None) -> None:
        """Record a leaf's accepted path and the mid drafter's pending tokens after committing it
        (`ModelDrafter.commit`; -1: not called)."""
        lf["accepted"], lf["tail"] = len(path) - 1, -1 if held is None else len(path) - sum(1 for v in path if v in held)

    def accept_known(self, answer: list[int]) -> None:
        """Acceptance read from the target's known greedy continuation."""
        for lf, (tree, kept), held in zip(self.leaves, self.finals, self.held):
            self.accepted(lf, accept_known(tree, kept, answer), held)

    def verify(self, shared: bool, timed: int, seed: int, max_trie: int) -> None:
        """Acceptance from one target forward over the leaves' path trie (`shared`, where it fits
        `max_trie`), and from timed forwards of `timed` random leaves (and of every leaf not read yet)."""
        dec = self.dec
        pick = set(random.Random(seed).sample(range(len(self.leaves)), min(timed, len(self.leaves))))
        trie, maps = path_trie(dec.root, self.finals) if shared else (None, [])
        if trie is not None and len(trie) <= max_trie:
            best = dec.verify_tree(trie, list(range(len(trie)))).argmax(-1)
            for lf, (tree, kept), m, held in zip(self.leaves, self.finals, maps, self.held):
                self.accepted(lf, accept_greedy(tree, kept, _onehot_rows(best, [m[v] for v in kept]))[0], held)
        for i, (lf, (tree, kept), held) in enumerate(zip(self.leaves, self.finals, self.held)):
            if lf["accepted"] < 0 or i in pick:
                (path, _), t = dec.timed(lambda tree=tree, kept=kept: accept_greedy(tree, kept, dec.verify_tree(tree, kept)))
                self.calls.append({"kind": "verify", "n": len(kept), "ms": 1000 * t})
                lf["meas_verify_ms"] = 1000 * t
                lf["check"] = lf["accepted"] < 0 or len(path) - 1 == lf["accepted"]
                self.accepted(lf, path, held)


class OracleDrafter:
    """schedule "oracle": replay every binary schedule from this round start, then draft the best
    with `inner` (TreeGraft's drafting) for the decoder to verify and commit.

    Greedy with a mid drafter: one depth-first replay sharing schedule prefixes (62 draft steps)
    and one target forward over the union of the 32 trees (`replay_all`). Each schedule is priced
    by the profile from its exact sizes. Maximising each round's own tokens/time would not maximise
    the run's tokens/s, so the winner maximises `tokens - lambda * time` with lambda the run's
    modelled tokens/s so far (Dinkelbach, from `dec.round_history`); the first round takes the best
    ratio. Otherwise (sampling, or no mid drafter) every schedule is run as a full round that
    commits nothing, its hooks paused, and the best is drafted again. The search is the oracle's:
    its time is in the round's drafting time (its modelled time prices the winner only).
    """

    name = "oracle"

    def __init__(self, inner) -> None:
        self.inner = inner

    def draft(self, dec, policy) -> Draft:
        bits = self.best_by_replay(dec) if dec.config.greedy and dec.mid is not None else self.best_by_rounds(dec)
        dec.laps.clear()  # the round's forwards are the winner's
        return self.inner.draft(dec, MaskPolicy(bits))

    def best_by_replay(self, dec) -> tuple[int, ...]:
        """The best schedule from one shared replay (greedy)."""
        _, leaves, _ = replay_all(dec, shared_verify=True, timed=0)
        hist = dec.round_history
        ms = sum(hist.modelled_ms)
        lam = (sum(hist.accepted) + len(hist)) / ms if ms > 0 else None

        def value(lf: dict) -> tuple[float, int]:
            t = sum(leaf_ms(dec.profile, lf, dec.config.depth))
            return ((lf["accepted"] + 1) / t if lam is None else lf["accepted"] + 1 - lam * t), -lf["n_mid"]

        return tuple(int(c) for c in max(leaves, key=value)["schedule"])

    def best_by_rounds(self, dec) -> tuple[int, ...]:
        """The best schedule by brute force: 2^D full rounds (draft, verify, roll back)."""
        best = None
        with dec.paused():
            for bits in itertools.product((0, 1), repeat=dec.config.depth):
                info, _ = dec.run_round(MaskPolicy(bits), commit=False, drafter=self.inner)
                eta = (info.accepted + 1) / info.modelled_ms
                if best is None or eta > best[0]:
                    best = (eta, bits)
        return best[1]


def sizes(leaf: dict, depth: int, backlog: int | None = None) -> list[int]:
    """The schedule's step sizes; with `backlog`, the first forwarding mid step pays that backlog
    instead of the replay's own (`leaf["backlog"]`): the round as a decode with that history has it."""
    bits, out, first = leaf["schedule"], [], True
    for k in range(1, depth + 1):
        n = int(leaf[f"size{k}"])
        if bits[k - 1] == "1" and n > 0 and first:
            first = False
            if backlog is not None:
                n += backlog - int(leaf.get("backlog", 0))
        out.append(n)
    return out


def leaf_ms(profile, leaf: dict, depth: int, backlog: int | None = None) -> tuple[float, float]:
    """(draft ms, verify ms) of a replayed schedule, priced by `profile` from its recorded sizes
    (`DeviceProfile.step_ms`, the decoder's own rule)."""
    bits = leaf["schedule"]
    draft = sum(profile.step_ms(b == "1", n) for b, n in zip(bits, sizes(leaf, depth, backlog)))
    return draft, profile.target_ms(leaf["kept"])
