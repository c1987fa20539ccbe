"""DraftTree: the shared draft tree of one round, as struct-of-arrays over nodes.

Node 0 is the root (the last committed token). Nodes are appended in topological order (a parent
always has a smaller id than its children), so one forward pass over ids recomputes path scores.
`logp[v]` is the edge score log p(v) from the drafter that scored v last; `score[v]` is the path
score s(v) = sum of logp over the non-root nodes from the root to v. Nodes are never removed:
overwriting (ND off) marks them dead (`alive[v] = False`) so that records can still show them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from treegraft_lab.errors import TreeGraftError

SMALL, MID = 1, 2  # bits of `drafted_by`
CREATOR_NAMES = {0: "root", SMALL: "small", MID: "mid", SMALL | MID: "both"}
SOURCE_ORDER = {"root": 0, "lookup": 1, "ngram": 2, "recycling": 3, "suffix": 4, "mid": 5}  # how `source` lists them


@dataclass
class DraftTree:
    """A draft tree rooted at the last committed token."""

    tokens: list[int] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    score: list[float] = field(default_factory=list)
    creator: list[int] = field(default_factory=list)  # SMALL or MID: who created the node
    drafted_by: list[int] = field(default_factory=list)  # bits: every drafter that proposed it
    step: list[int] = field(default_factory=list)  # draft step that created it (root: 0)
    ngram_n: list[int] = field(default_factory=list)  # n-gram match size that proposed it (0: none)
    mid_scored: list[bool] = field(default_factory=list)  # membership in P
    alive: list[bool] = field(default_factory=list)
    children: list[dict[int, int]] = field(default_factory=list)  # token -> child id
    source: list[str] = field(default_factory=list)  # the drafters that proposed it by name, "+"-joined ("" unlabelled)

    @classmethod
    def start(cls, root_token: int) -> DraftTree:
        t = cls()
        t.append(root_token, -1, 0.0, 0, 0, 0)
        return t

    def __len__(self) -> int:
        return len(self.tokens)

    def holds(self, tokens: list[int]) -> bool:
        """True when the live path root -> `tokens` exists in the tree."""
        v = 0
        for tok in tokens:
            v = self.children[v].get(tok, -1)
            if v < 0 or not self.alive[v]:
                return False
        return True

    def copy(self) -> DraftTree:
        """An independent copy (lists and children dicts copied): cheaper than deepcopy."""
        kw = {f.name: list(getattr(self, f.name)) for f in fields(self)}
        kw["children"] = [dict(c) for c in self.children]
        return DraftTree(**kw)

    def append(self, token: int, parent: int, logp: float, creator: int, step: int, ngram_n: int) -> int:
        """A new node `token` under `parent` with edge log-prob `logp`, its path score taken as is
        (no sibling check, no refresh: `add_child` is the checked way); returns its id."""
        nid = len(self.tokens)
        self.tokens.append(token)
        self.parent.append(parent)
        self.depth.append(0 if parent < 0 else self.depth[parent] + 1)
        self.logp.append(logp)
        self.score.append(logp if parent < 0 else self.score[parent] + logp)
        self.creator.append(creator)
        self.drafted_by.append(creator)
        self.step.append(step)
        self.ngram_n.append(ngram_n)
        self.mid_scored.append(False)
        self.alive.append(True)
        self.children.append({})
        self.source.append("" if parent >= 0 else "root")
        if parent >= 0:
            self.children[parent][token] = nid
        return nid

    def add_child(self, parent: int, token: int, logp: float, creator: int, step: int, ngram_n: int = 0,
                  refresh: bool = True) -> tuple[int, bool]:
        """Add `token` under `parent`, or reuse the live child with that token. Returns (id, is_new).

        A reused child keeps its subtree; a proposal from the mid drafter refreshes its edge score
        (`take_mid_logp`), never the other way round. With refresh=False the path scores below it
        are left for one `refresh_scores()` later.
        """
        old = self.children[parent].get(token)
        if old is not None and self.alive[old]:
            self.drafted_by[old] |= creator
            if creator == MID and self.take_mid_logp(old, logp) and refresh:
                self.refresh_scores()
            return old, False
        return self.append(token, parent, logp, creator, step, ngram_n), True

    def take_mid_logp(self, v: int, logq: float) -> bool:
        """The mid drafter's log q for edge `v` replaces the n-gram heuristic, except on prompt
        lookup's chain (source "lookup"), which keeps the higher of the two: replacing a copied
        token's evidence by the smaller model's lower q let one mid call push the chain out of a
        top-k budget. Returns whether the edge score changed (path scores are not refreshed)."""
        lp = max(logq, self.logp[v]) if "lookup" in self.source[v] else logq
        changed = lp != self.logp[v]
        self.logp[v] = lp
        return changed

    def add_source(self, v: int, name: str) -> None:
        """Record that drafter `name` ("ngram", "suffix", "mid", ...) proposed node `v`."""
        names = [x for x in self.source[v].split("+") if x]
        if name not in names:
            self.source[v] = "+".join(sorted([*names, name], key=lambda x: (SOURCE_ORDER.get(x, 9), x)))

    def refresh_scores(self) -> None:
        """Recompute every path score from the edge scores (ids are topological)."""
        for v in range(1, len(self.tokens)):
            self.score[v] = self.score[self.parent[v]] + self.logp[v]

    def kill_subtree(self, v: int) -> list[int]:
        """Mark `v` and its descendants dead (ND off: overwriting). Returns the ids killed."""
        killed, stack = [], [v]
        while stack:
            u = stack.pop()
            if self.alive[u]:
                self.alive[u] = False
                killed.append(u)
                stack.extend(self.children[u].values())
        p = self.parent[v]
        if p >= 0 and self.children[p].get(self.tokens[v]) == v:
            del self.children[p][self.tokens[v]]
        return killed

    def live_nodes(self) -> list[int]:
        return [v for v in range(len(self.tokens)) if self.alive[v]]

    def path(self, v: int) -> list[int]:
        """Node ids from the root to `v`, both included."""
        out = []
        while v >= 0:
            out.append(v)
            v = self.parent[v]
        return out[::-1]

    def path_tokens(self, v: int) -> list[int]:
        return [self.tokens[u] for u in self.path(v)]

    def is_leaf(self, v: int) -> bool:
        return not any(self.alive[c] for c in self.children[v].values())

    # ---- global budget pruning ----------------------------------------------------------------
    def prune(self, budget: int) -> list[int]:
        """Keep the `budget` best non-root nodes by path score, each with its ancestor chain.

        Returns the kept node ids (root first, then increasing id: a topological order).
        Nodes are taken in order of s(v) descending (ties: shallower first); a node whose chain
        would overflow the budget is skipped.
        """
        kept = {0}
        order = sorted((v for v in range(1, len(self)) if self.alive[v]), key=lambda v: (-self.score[v], self.depth[v], v))
        n = 0
        for v in order:
            if n >= budget:
                break
            chain = []
            u = v
            while u not in kept:
                chain.append(u)
                u = self.parent[u]
            if n + len(chain) <= budget:
                kept.update(chain)
                n += len(chain)
        return sorted(kept)

    def checked_kept(self, kept: list[int]) -> list[int]:
        """A pruner's output, checked: live, distinct node ids, the root first and every other node's
        parent kept too (ancestor-closed). Returned sorted by id (parents before children); a
        TreeGraftError naming the broken rule otherwise."""
        nodes = [int(v) for v in kept]
        rule = "a pruner must return live, distinct nodes, the root (0) first, with every kept node's parent kept"
        if not nodes or nodes[0] != 0:
            raise TreeGraftError(f"{rule}: the root is {'missing' if 0 not in nodes else 'not first'} ({nodes[:5]}...)")
        if len(set(nodes)) != len(nodes):
            raise TreeGraftError(f"{rule}: a node is kept twice")
        have = set(nodes)
        for v in nodes[1:]:
            if not 0 < v < len(self.tokens) or not self.alive[v]:
                raise TreeGraftError(f"{rule}: node {v} is not a live node of the tree")
            if self.parent[v] not in have:
                raise TreeGraftError(f"{rule}: node {v} is kept without its parent {self.parent[v]} (not ancestor-closed)")
        return sorted(nodes)

    # ---- tensors for attention ----------------------------------------------------------------
    def ancestor_matrix(self, nodes: list[int], device: torch.device | str = "cpu") -> torch.Tensor:
        """Bool [n, n]: entry (i, j) is True when nodes[j] is nodes[i] or one of its ancestors.

        `nodes` must be closed under taking ancestors, up to a common cut (nodes whose parents
        are outside the list are treated as roots of the sub-forest).
        """
        pos = {v: i for i, v in enumerate(nodes)}
        par = torch.tensor([pos.get(self.parent[v], -1) for v in nodes], dtype=torch.long)
        n = len(nodes)
        anc = torch.eye(n, dtype=torch.bool)
        rows = torch.arange(n)
        cur = par.clone()
        while bool((cur >= 0).any()):
            ok = cur >= 0
            anc[rows[ok], cur[ok]] = True
            cur = torch.where(ok, par[cur.clamp(min=0)], cur)
        return anc.to(device)
