"""Replay every binary schedule of one round from the decoder's current round start.

Used online by the oracle schedule and offline by trajectory collection. Each step is the
decoder's own (`TreeGraftDecoder.draft_step`) and a round ends where the decoder's growth ends it
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

import math
import random

import torch

from treegraft_lab.costs import SKIPPED
from treegraft_lab.errors import TreeGraftError
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
    cfg, D = dec.config, dec.config.depth
    if not cfg.greedy:
        raise TreeGraftError("replaying every schedule needs greedy decoding (temperature 0): acceptance must be deterministic")
    if dec.mid is None:
        raise TreeGraftError("replaying every schedule needs a pair with a mid drafter")
    if not hasattr(dec.mid, "snapshot"):
        raise TreeGraftError("replaying every schedule (the oracle, collection) restores the mid drafter between "
                             "schedules: its mid drafter needs snapshot() and restore() (drafters.ModelDrafter has them)")
    states: list[dict] = []
    leaves: list[dict] = []
    calls: list[dict] = []
    finals: list[tuple[DraftTree, list[int]]] = []
    scored: list[set | None] = []  # per leaf: the nodes the mid drafter holds (None: not called)
    backlog = dec.mid_backlog()

    def verify_alone(tree: DraftTree, kept: list[int]) -> tuple[int, float]:
        (path, _), t = dec.timed(lambda: accept_greedy(tree, kept, dec.verify_tree(tree, kept)))
        calls.append({"kind": "verify", "n": len(kept), "ms": 1000 * t})
        return path, 1000 * t

    def tail(path: list[int], held: set | None) -> int:
        """The mid drafter's pending tokens after committing `path` (ModelDrafter.commit); -1: not called."""
        return -1 if held is None else len(path) - sum(1 for v in path if v in held)

    def leaf(tree: DraftTree, bits: tuple[int, ...], acc: dict) -> None:
        kept = tree.checked_kept(dec.prune(tree))
        finals.append((tree, kept))
        scored.append(set(dec.mid.slot) if dec.mid.flushed else None)
        leaves.append({"schedule": "".join(map(str, bits)), "accepted": -1, "kept": len(kept), "backlog": backlog, "tail": -1,
                       "nodes": sum(tree.alive), **acc, "meas_verify_ms": math.nan, "check": True})

    def visit(k: int, tree: DraftTree, bits: tuple[int, ...], last_new: list[int], expanded: list[int], acc: dict,
              ended: bool = False) -> None:
        if k > D:
            leaf(tree, bits, acc)
            return
        if ended:  # the growth ended the round (`Growth.ends`): the decoder drafts no further step
            for a in (0, 1):
                visit(k + 1, tree, bits + (a,), last_new, expanded, {**acc, f"size{k}": SKIPPED}, True)
            return
        ctx = dec.step_context(k, list(bits), tree, last_new, expanded)
        states.append({"k": k, "prefix": "".join(map(str, bits)), **ctx.signals()})
        start = dec.round_start()
        for a in (0, 1):
            child = tree.copy() if a == 0 else tree  # the parent no longer needs its tree after the last child
            step, t = dec.timed(dec.draft_step, child, k, bool(a), last_new, expanded)
            size = step.size  # what `DeviceProfile.step_ms` prices the step by
            kind = "mid" if a else "small"
            calls.append({"kind": kind, "n": size, "ms": 1000 * t})
            unit = "tokens" if a else "nodes"
            nxt = {**acc, f"n_{kind}": acc[f"n_{kind}"] + 1, f"{kind}_{unit}": acc[f"{kind}_{unit}"] + max(size, 0),
                   f"size{k}": size, "meas_draft_ms": acc["meas_draft_ms"] + 1000 * t}
            visit(k + 1, child, bits + (a,), step.new, step.frontier, nxt, dec.growth.ends(child, step.new, cfg.node_cap))
            dec.restore(start)

    dec.replaying = True
    try:
        visit(1, DraftTree.start(dec.root), (), [0], [],
              {"n_small": 0, "small_nodes": 0, "n_mid": 0, "mid_tokens": 0, "meas_draft_ms": 0.0})
        if answer is not None:
            for lf, (tree, kept), held in zip(leaves, finals, scored):
                path = accept_known(tree, kept, answer)
                lf["accepted"], lf["tail"] = len(path) - 1, tail(path, held)
            return states, leaves, calls
        pick = set(random.Random(seed).sample(range(len(leaves)), min(timed, len(leaves))))
        trie, maps = path_trie(dec.root, finals) if shared_verify else (None, [])
        if trie is not None and len(trie) <= max_trie:
            best = dec.verify_tree(trie, list(range(len(trie)))).argmax(-1)
            for lf, (tree, kept), m, held in zip(leaves, finals, maps, scored):
                path, _ = accept_greedy(tree, kept, _onehot_rows(best, [m[v] for v in kept]))
                lf["accepted"], lf["tail"] = len(path) - 1, tail(path, held)
        for i, (lf, (tree, kept), held) in enumerate(zip(leaves, finals, scored)):
            if lf["accepted"] < 0 or i in pick:
                path, lf["meas_verify_ms"] = verify_alone(tree, kept)
                lf["check"] = lf["accepted"] < 0 or len(path) - 1 == lf["accepted"]
                lf["accepted"], lf["tail"] = len(path) - 1, tail(path, held)
    finally:
        dec.replaying = False
    return states, leaves, calls


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
