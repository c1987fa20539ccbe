"""Training-free small drafters beside the n-gram one, and the choice between them.

RecyclingDrafter (Token Recycling, Luo et al. 2024): an adjacency matrix holds, for every token,
the top-k (k = 8) next tokens the target produced after it. After every verification the row of
every token the target just processed (each verified tree node) is overwritten with the target's
top-k at that position, so the candidates the target "threw away" are recycled. The standalone
method (bench `recycling`) fills a fixed tree template (`TEMPLATE`: 80 nodes below the root,
depth 6, wide near the root) breadth-first from the matrix, starting at the last committed
token. The matrix is kept across generations of one decoder (the paper's hot start).

SuffixDrafter (SAM-Decoding's suffix automaton; ArcticInference's suffix decoding): a suffix
automaton over the committed text (prompt + generated) finds the longest suffix of a context that
occurred before, in amortised O(1) per token; the continuations are the automaton's transitions
out of the matched state, ranked by how often each occurred (the endpos counts), and the number
of tokens proposed grows with the match length (`factor` x match length, as suffix decoding's
max_spec_factor). The standalone method (bench `suffix`) grows its draft tree best-first by path
probability, dropping nodes below `min_prob` (suffix decoding's min_token_prob).

Scores use the n-gram drafter's scale (`drafters` module docstring): a continuation seen `c` times
of `total` after a match of length n scores p = c / total * n / (n + 1); a recycled candidate of
rank r scores the prior `RANK_P[r]` (how often a rank-r candidate is the target's next token).

`SmallDrafters` is what the decoder holds as its small drafter: one or more of "ngram",
"recycling", "suffix" (`DecodeConfig.small`, e.g. "ngram+suffix"), their proposals concatenated
best first, each node labelled with the drafter that made it (`DraftTree.source`). It always
keeps the n-gram index: prompt lookup's chain and the scheduler's context signals read it. With
"ngram" and "recycling" together, the matrix drafts only under frontier nodes whose longest
n-gram match is shorter than `recycle_below` tokens (`DecodeConfig.recycle_below`, default 2).
"""

from __future__ import annotations

import heapq
import math

import torch

from treegraft_lab.drafters import NgramDrafter
from treegraft_lab.parts import Proposal, SmallDrafter
from treegraft_lab.tree import SMALL, DraftTree

TOPK = 8  # candidates per matrix row (the paper's setting)
RANK_P = (0.55, 0.15, 0.07, 0.05, 0.035, 0.025, 0.02, 0.015)  # prior: P(the rank-r candidate is the target's token)


def build_template(nodes: int = 80, depth: int = 6, p: tuple[float, ...] = RANK_P) -> tuple[tuple[int, int], ...]:
    """A static tree of `nodes` non-root nodes, at most `depth` deep: the nodes with the highest
    prior path probability (the product of `p[rank]` along the path), so wide near the root.
    Returns (parent index, rank) per node in breadth-first order; index 0 is the root."""
    best: list[tuple[float, int, tuple[int, ...]]] = [(-p[r], 1, (r,)) for r in range(len(p))]
    heapq.heapify(best)
    chosen: list[tuple[int, ...]] = []
    while best and len(chosen) < nodes:
        negp, d, ranks = heapq.heappop(best)
        chosen.append(ranks)
        if d < depth:
            for r in range(len(p)):
                heapq.heappush(best, (negp * p[r], d + 1, ranks + (r,)))
    chosen.sort(key=lambda rs: (len(rs), rs))  # breadth-first: parents before children
    index = {(): 0} | {rs: i + 1 for i, rs in enumerate(chosen)}
    return tuple((index[rs[:-1]], rs[-1]) for rs in chosen)


TEMPLATE = build_template()


class RecyclingDrafter:
    """Token Recycling's adjacency matrix [vocab, k] of candidate next tokens (-1: none yet)."""

    name = "recycling"

    def __init__(self, k: int = TOPK) -> None:
        self.k = k
        self.matrix: torch.Tensor | None = None  # int64 [vocab, k], allocated at the first update

    def observe(self, tokens: list[int], logits: torch.Tensor) -> None:
        """The target processed `tokens` (one per row of `logits`): overwrite their rows with the
        target's top-k next tokens at those positions (a token seen twice keeps its last row)."""
        if self.matrix is None:
            self.matrix = torch.full((logits.shape[-1], self.k), -1, dtype=torch.long)
        top = torch.topk(logits.float(), min(self.k, logits.shape[-1]), dim=-1).indices.cpu()  # a vocabulary below k
        self.matrix[torch.tensor(tokens, dtype=torch.long), : top.shape[-1]] = top

    def row(self, token: int) -> list[int]:
        """The candidates after `token`, best first (empty before the target processed it)."""
        if self.matrix is None or token >= self.matrix.shape[0]:
            return []
        return [t for t in self.matrix[token].tolist() if t >= 0]

    def propose(self, tree: DraftTree, frontier: list[int], width: int, children: int | None = None,
                chain: int = 1) -> list[Proposal]:
        """Each frontier node's matrix row (up to `children`, or the global top-`width`), each
        candidate carrying a chain of up to chain - 1 rank-0 successors."""
        out: list[tuple[float, Proposal]] = []
        for f in frontier:
            for r, tok in enumerate(self.row(tree.tokens[f])[: children or width]):
                tail, prev = [], tok
                for _ in range(chain - 1):
                    nxt = self.row(prev)
                    if not nxt:
                        break
                    tail.append((nxt[0], math.log(RANK_P[0]), 0))
                    prev = nxt[0]
                lp = math.log(RANK_P[r])
                out.append((tree.score[f] + lp, (f, tok, lp, 0, tuple(tail)) if chain > 1 else (f, tok, lp, 0)))
        out.sort(key=lambda x: -x[0])
        return [p for _, p in (out if children is not None else out[:width])]

    def fill_template(self, tree: DraftTree, step: int = 1, template=TEMPLATE) -> list[int]:
        """The static template filled breadth-first from the root's token: a node for every
        template node whose parent was filled and whose parent's row has that rank. Returns them."""
        node = {0: 0}  # template index -> tree node
        out = []
        for i, (par, rank) in enumerate(template, start=1):
            v = node.get(par)
            if v is None:
                continue
            cands = self.row(tree.tokens[v])
            if rank >= len(cands):
                continue
            w, _ = tree.add_child(v, cands[rank], math.log(RANK_P[rank]), SMALL, step, 0, refresh=False)
            tree.add_source(w, self.name)
            node[i] = w
            out.append(w)
        tree.refresh_scores()
        return out


class SuffixAutomaton:
    """The suffix automaton of a growing token sequence, with endpos counts kept online."""

    def __init__(self) -> None:
        self.next: list[dict[int, int]] = [{}]
        self.link, self.length, self.count = [-1], [0], [0]
        self.last = 0
        self.tokens: list[int] = []

    def _new(self, length: int, link: int, nxt: dict[int, int], count: int) -> int:
        self.next.append(nxt)
        self.link.append(link)
        self.length.append(length)
        self.count.append(count)
        return len(self.length) - 1

    def extend(self, tokens: list[int]) -> None:
        """Append tokens (the classic online construction; amortised O(1) per token)."""
        for t in tokens:
            self.tokens.append(t)
            cur = self._new(self.length[self.last] + 1, 0, {}, 0)
            p = self.last
            while p >= 0 and t not in self.next[p]:
                self.next[p][t] = cur
                p = self.link[p]
            if p >= 0:
                q = self.next[p][t]
                if self.length[p] + 1 == self.length[q]:
                    self.link[cur] = q
                else:
                    clone = self._new(self.length[p] + 1, self.link[q], dict(self.next[q]), self.count[q])
                    while p >= 0 and self.next[p].get(t) == q:
                        self.next[p][t] = clone
                        p = self.link[p]
                    self.link[q] = self.link[cur] = clone
            self.last = cur
            v = cur  # the new end position belongs to every state on the suffix-link path
            while v > 0:
                self.count[v] += 1
                v = self.link[v]

    def walk(self, state: int, length: int, tokens: list[int]) -> tuple[int, int]:
        """(state, match length) of the longest suffix of (the text matched by `state` at
        `length`) + `tokens` that occurs in the text."""
        for t in tokens:
            while state > 0 and t not in self.next[state]:
                state = self.link[state]
                length = self.length[state]
            if t in self.next[state]:
                state, length = self.next[state][t], length + 1
            else:
                state, length = 0, 0
        return state, length

    def continuations(self, state: int, length: int) -> tuple[int, int, list[tuple[int, int, int]]]:
        """The longest suffix of the match that some token followed: (state, its match length,
        [(token, occurrences, next state)] most frequent first); no continuation: (0, 0, [])."""
        while state > 0 and not self.next[state]:
            state = self.link[state]
            length = self.length[state]
        if state == 0:
            return 0, 0, []
        conts = sorted(((t, self.count[s], s) for t, s in self.next[state].items()), key=lambda x: -x[1])
        return state, length, conts


class SuffixDrafter:
    """Drafts the continuations of the longest earlier match of each path (`SuffixAutomaton`)."""

    name = "suffix"

    def __init__(self, factor: float = 1.0, max_len: int = 16, min_prob: float = 0.1) -> None:
        self.sam = SuffixAutomaton()
        self.factor, self.max_len, self.min_prob = factor, max_len, min_prob

    def extend(self, tokens: list[int]) -> None:
        self.sam.extend(tokens)

    def match(self, path: list[int]) -> tuple[int, int]:
        """(state, length) of the longest earlier match of committed text + `path` (the root's
        token, the last committed one, excluded)."""
        sam = self.sam
        return sam.walk(sam.last, sam.length[sam.last], path)

    def _edges(self, state: int, length: int) -> tuple[int, list[tuple[int, float, int, int]]]:
        """(the match length that has continuations, [(token, log p, next state, match length
        after it)]) of a matched state."""
        state, length, conts = self.sam.continuations(state, length)
        total = sum(c for _, c, _ in conts)
        return length, [(t, math.log(c / total * length / (length + 1)), s, length + 1) for t, c, s in conts]

    def propose(self, tree: DraftTree, frontier: list[int], width: int, children: int | None = None,
                chain: int = 1) -> list[Proposal]:
        """Each frontier node's continuations (up to `children`, or the global top-`width`), each
        carrying the most frequent continuation after it for a length that grows with the match
        (factor x match length, at most `max_len`; `chain` is not used)."""
        out: list[tuple[float, Proposal]] = []
        for f in frontier:
            length, edges = self._edges(*self.match(tree.path_tokens(f)[1:]))
            n = min(self.max_len, max(1, math.ceil(self.factor * length)))
            for tok, lp, s, m in edges[: children or width]:
                tail, st, ln = [], s, m
                while len(tail) < n - 1:
                    _, nxt = self._edges(st, ln)
                    if not nxt or math.exp(nxt[0][1]) < self.min_prob:
                        break
                    t2, lp2, st, ln = nxt[0]
                    tail.append((t2, lp2, min(ln, 255)))
                out.append((tree.score[f] + lp, (f, tok, lp, min(length, 255), tuple(tail))))
        out.sort(key=lambda x: -x[0])
        return [p for _, p in (out if children is not None else out[:width])]

    def grow(self, tree: DraftTree, budget: int, step: int = 1) -> list[int]:
        """Suffix decoding's draft tree under the root: best-first by path probability, up to
        min(budget, factor x the root's match length) nodes, none below `min_prob`."""
        length, _ = self._edges(*self.match([]))
        size = min(budget, max(1, math.ceil(self.factor * length)))
        heap: list = []

        def push(v: int, p: float, st: int, ln: int) -> None:
            for tok, lp, s, m in self._edges(st, ln)[1]:
                if p * math.exp(lp) < self.min_prob:
                    break  # most frequent first: the rest are less likely
                heapq.heappush(heap, (-p * math.exp(lp), len(heap), v, tok, lp, s, m))

        push(0, 1.0, *self.match([]))
        added: list[int] = []
        while heap and len(added) < size:
            negp, _, v, tok, lp, s, m = heapq.heappop(heap)
            w, _ = tree.add_child(v, tok, lp, SMALL, step, min(m, 255), refresh=False)
            tree.add_source(w, self.name)
            added.append(w)
            push(w, -negp, s, m)
        tree.refresh_scores()
        return added


class SmallDrafters(SmallDrafter):
    """The decoder's small drafter: one or more of `SMALL_DRAFTERS`, proposals concatenated."""

    def __init__(self, names: tuple[str, ...], nmax: int = 5, nmin: int = 1,
                 recycling: RecyclingDrafter | None = None, recycle_below: int = 0) -> None:
        self.names = names
        self.recycle_below = recycle_below  # recycled candidates only where the n-gram match is shorter (0: everywhere)
        self.nmax, self.nmin = nmax, nmin
        self.recycling = (recycling or RecyclingDrafter()) if "recycling" in names else None  # kept across runs
        self.start([])

    def start(self, ids: list[int]) -> None:
        """A generation starts with `ids` committed: fresh n-gram and suffix indexes (Token
        Recycling's matrix carries over, as its paper keeps it across prompts)."""
        self.ngram = NgramDrafter(self.nmax, self.nmin)
        self.index = self.ngram.index  # always kept: prompt lookup and the context signals read it
        self.suffix = SuffixDrafter() if "suffix" in self.names else None
        by_name = {"ngram": self.ngram, "recycling": self.recycling, "suffix": self.suffix}
        self.parts = [by_name[n] for n in sorted(self.names, key=lambda n: n != "ngram")]  # n-gram first: the gate reads it
        self.extend(ids)

    def extend(self, tokens: list[int]) -> None:
        """Committed tokens (the prompt, then each round's accepted tokens and bonus)."""
        self.ngram.extend(tokens)
        if self.suffix is not None:
            self.suffix.extend(tokens)

    def observe(self, tree: DraftTree, kept: list[int], logits: torch.Tensor) -> None:
        """The target verified `kept` (root first) with these logits: recycle them."""
        if self.recycling is not None:
            self.recycling.observe([tree.tokens[v] for v in kept], logits)

    def propose(self, tree: DraftTree, frontier: list[int], width: int, children: int | None = None,
                chain: int = 1) -> list[Proposal]:
        """Every part's proposals, best path score first (labels: `propose_each`)."""
        return merged(tree, self.propose_each(tree, frontier, width, children, chain))

    def propose_each(self, tree: DraftTree, frontier: list[int], width: int, children: int | None = None,
                     chain: int = 1) -> list[tuple[str, list[Proposal]]]:
        """[(drafter name, its proposals)] in the order of `names`. With `recycle_below` and an
        n-gram part, the recycling part drafts only under the frontier nodes where the n-gram
        drafter's longest match is shorter than `recycle_below` tokens (none: length 0)."""
        out: dict[str, list[Proposal]] = {}
        for d in self.parts:
            fr = frontier
            if d is self.recycling and self.recycle_below and "ngram" in out:
                longest: dict[int, int] = {}
                for p in out["ngram"]:
                    longest[p[0]] = max(longest.get(p[0], 0), p[3])
                fr = [f for f in frontier if longest.get(f, 0) < self.recycle_below]
            out[d.name] = d.propose(tree, fr, width, children, chain)
        return [(n, out[n]) for n in self.names]

    def lookup(self, length: int, latest: bool = False) -> list[Proposal]:
        return self.ngram.lookup(length, latest)

    def carried_state(self) -> torch.Tensor | None:
        """A copy of Token Recycling's adjacency matrix (None: none yet, or no recycling part)."""
        matrix = self.recycling.matrix if self.recycling is not None else None
        return None if matrix is None else matrix.clone()

    def restore_state(self, state: torch.Tensor | None) -> None:
        """Put back a `carried_state` copy (None: an empty matrix), in place: the parts share it."""
        if self.recycling is not None:
            self.recycling.matrix = None if state is None else state.clone()


def merged(tree: DraftTree, groups: list[tuple[str, list[Proposal]]]) -> list[Proposal]:
    """The proposals of every (drafter, proposals) group in one list, best path score first."""
    return sorted((p for _, ps in groups for p in ps), key=lambda p: -(tree.score[p[0]] + p[2]))


def label(tree: DraftTree, proposals: list[Proposal], name: str) -> None:
    """Record `name` as a drafter of every node the proposals' tokens (chains included) landed on."""
    for p in proposals:
        v = tree.children[p[0]].get(p[1])
        for tok in (t[0] for t in (p[4] if len(p) > 4 else ())):
            if v is None:
                break
            tree.add_source(v, name)
            v = tree.children[v].get(tok)
        if v is not None:
            tree.add_source(v, name)
