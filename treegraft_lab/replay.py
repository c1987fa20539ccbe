"""Replay every binary schedule of one round from the decoder's current round start.

Used online by the oracle schedule and offline by trajectory collection. Nothing is committed:
the draft tree after steps 1..j depends only on bits 1..j, so a depth-first search over the
schedule tree expands each prefix once (2 + 4 + ... + 2^D = 62 draft steps for D = 5); between
siblings the tree is copied and the mid drafter's round state restored. Each full schedule is
pruned as the decoder prunes, and all of them are verified by one target forward over the union
of their token paths (`path_trie`), or one by one when that union is too large.

A leaf records, per schedule: accepted draft tokens, kept nodes (root included), the size of
each draft step (`size<k>`: tokens the mid drafter forwarded, or frontier nodes of an n-gram
step) from which a `DeviceProfile` prices it, and the measured times (reported only).
"""

from __future__ import annotations

import math
import random

import torch

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.rounds import StepResult
from treegraft_lab.tree import SMALL, DraftTree
from treegraft_lab.verify import accept_greedy


def expand_step(dec, tree: DraftTree, k: int, call: bool, last_new: list[int],
                expanded: list[int] = ()) -> tuple[StepResult, int]:
    """Draft step k through `TreeGraftDecoder.draft_step`. Returns (its StepResult, size).

    size: tokens the mid drafter forwarded, its backlog of committed text included (mid step),
    or frontier nodes (n-gram step): the x-axis of the profile's curves.
    """
    backlog = dec.mid_backlog()
    step = dec.draft_step(tree, k, call, last_new, expanded)
    return step, (backlog + len(step.forwarded) if step.forwarded else 0) if call else len(step.frontier)


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


def replay_all(dec, shared_verify: bool = True, timed: int = 3, seed: int = 0,
               max_trie: int = 1536) -> tuple[list[dict], list[dict], list[dict]]:
    """Every schedule from the decoder's current round start, by DFS over shared prefixes.

    Returns (states, leaves, calls): states are the decision points (k, prefix, signals), leaves
    the full schedules (accepted, kept, step sizes, measured times), calls the timed (kind, n, ms).
    With `shared_verify` all 2^D trees are verified by one target forward over their path trie
    (skipped when it exceeds `max_trie` nodes) and only `timed` randomly chosen schedules are also
    verified alone, timed (their acceptance is checked against the shared one: `leaf["check"]`).
    Otherwise every verification is timed.
    """
    cfg, D = dec.config, dec.config.depth
    if not cfg.greedy:
        raise TreeGraftError("replaying every schedule needs greedy decoding (temperature 0): acceptance must be deterministic")
    if dec.mid is None:
        raise TreeGraftError("replaying every schedule needs a pair with a mid drafter")
    states: list[dict] = []
    leaves: list[dict] = []
    calls: list[dict] = []
    finals: list[tuple[DraftTree, list[int]]] = []

    def verify_alone(tree: DraftTree, kept: list[int]) -> tuple[int, float]:
        (path, _), t = dec.timed(lambda: accept_greedy(tree, kept, dec.target.forward_tree(tree, kept)))
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
        ctx = dec.step_context(k, list(bits), tree, last_new, expanded)
        states.append({"k": k, "prefix": "".join(map(str, bits)), **ctx.signals()})
        start = dec.round_start()
        for a in (0, 1):
            child = tree.copy() if a == 0 else tree  # the parent no longer needs its tree after the last child
            (step, size), t = dec.timed(expand_step, dec, child, k, bool(a), last_new, expanded)
            kind = "mid" if a else "small"
            calls.append({"kind": kind, "n": size, "ms": 1000 * t})
            unit = "tokens" if a else "nodes"
            nxt = {**acc, f"n_{kind}": acc[f"n_{kind}"] + 1, f"{kind}_{unit}": acc[f"{kind}_{unit}"] + size,
                   f"size{k}": size, "meas_draft_ms": acc["meas_draft_ms"] + 1000 * t}
            visit(k + 1, child, bits + (a,), step.new, step.frontier, nxt)
            dec.restore(start)

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


def leaf_ms(profile, leaf: dict, depth: int) -> tuple[float, float]:
    """(draft ms, verify ms) of a replayed schedule, priced by `profile` from its recorded sizes."""
    bits = leaf["schedule"]
    draft = sum(profile.step_ms(bits[k - 1] == "1", int(leaf[f"size{k}"])) for k in range(1, depth + 1))
    return draft, profile.target_ms(leaf["kept"])
