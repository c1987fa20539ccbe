"""The two drafters that grow one shared tree.

NgramDrafter (small): context n-gram retrieval over prompt + generated text + the path to each
frontier node, with an incremental index updated only with committed tokens.
ModelDrafter (mid): a smaller causal LM that scores tree nodes with one forward per call (tree
mask, its KV cache of the committed context and of this round's already-scored nodes reused).

Score scale. The mid drafter's edge score is its probability q(token | path). The n-gram drafter
has no probabilities, so it reports a calibrated guess on the same [0, 1] scale:
    p = count(x) / total * n / (n + 1)
for a continuation x seen `count` times after the longest matching n-gram (of `total` matches).
A unique continuation after a 3-gram match scores 0.75, after a unigram 0.5. Path scores of both
drafters are then sums of log-probabilities that pruning can compare.

Expansion. Both drafters either give each frontier parent its own best `children` children (the
release's rule; the n-gram drafter backs off from the longest matching n-gram to shorter ones
until it has that many distinct first tokens) or return the global top-W children over the whole
frontier. An n-gram continuation may carry a chain: the tokens that followed its most recent
occurrence in the committed text, each scored like a first token given the path before it.

Prompt lookup. `NgramIndex.lookup_match` applies the matching rule of HF prompt lookup decoding
(transformers' PromptLookupCandidateGenerator): the last 2 committed tokens, else the last one,
at their EARLIEST occurrence that some token followed; the draft is the up to L tokens from
there. `NgramDrafter.lookup` hangs that draft under the root as one chain, scored like any other
chain, so a tree holding it offers the target every token prompt lookup would.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from treegraft_lab import kv
from treegraft_lab.parts import MidDrafter, Proposal
from treegraft_lab.tree import MID, DraftTree

LOOKUP_NGRAM = 2  # HF prompt lookup's max_matching_ngram_size default


class NgramIndex:
    """Maps every n-gram (n in [nmin, nmax]) of the committed text to counts of its next token."""

    def __init__(self, nmax: int = 5, nmin: int = 1) -> None:
        self.nmax, self.nmin = nmax, nmin
        self.tokens: list[int] = []
        self.table: dict[tuple[int, ...], dict[int, int]] = {}
        self.last: dict[tuple[int, ...], dict[int, int]] = {}  # n-gram -> {next token: its latest position}
        self.hits: list[bool] = []  # per token: was it the index's top-1 guess just before it came?
        # n-gram (n <= max(nmax, LOOKUP_NGRAM)) -> position of the token after its earliest / latest occurrence
        self.first: dict[tuple[int, ...], int] = {}
        self.latest: dict[tuple[int, ...], int] = {}
        self.follow: dict[tuple[int, ...], list[int]] = {}  # n-gram -> positions of the tokens that followed it
        self.count: dict[int, int] = {}  # token -> occurrences
        self.where: dict[int, int] = {}  # token -> its latest position

    def extend(self, tokens: list[int]) -> None:
        """Append committed tokens: O(nmax) dictionary updates per token, never a rebuild."""
        seq, table = self.tokens, self.table
        for t in tokens:
            i = len(seq)
            _, hit = self.lookup(seq[-self.nmax :])
            self.hits.append(bool(hit) and max(hit, key=hit.get) == t)
            for n in range(1, min(max(self.nmax, LOOKUP_NGRAM), i) + 1):
                g = tuple(seq[i - n : i])
                self.first.setdefault(g, i)
                self.latest[g] = i
                if n >= self.nmin and n <= self.nmax:
                    d = table.setdefault(g, {})
                    d[t] = d.get(t, 0) + 1
                    self.last.setdefault(g, {})[t] = i
                    self.follow.setdefault(g, []).append(i)
            self.count[t] = self.count.get(t, 0) + 1
            self.where[t] = i
            seq.append(t)

    def lookup(self, suffix: list[int]) -> tuple[int, dict[int, int] | None]:
        """Longest n-gram ending `suffix` that occurred before: (n, {next token: count})."""
        for n in range(min(self.nmax, len(suffix)), self.nmin - 1, -1):
            hit = self.table.get(tuple(suffix[-n:]))
            if hit:
                return n, hit
        return 0, None

    def continuations(self, suffix: list[int], k: int, backoff: bool = True) -> list[tuple[int, float, int, int]]:
        """Up to `k` distinct next tokens, from the longest matching n-gram down to the shortest
        (backoff=False: the longest only): (token, log p, n, position of its latest occurrence),
        best n first, then by count."""
        out, seen = [], set()
        for n in range(min(self.nmax, len(suffix)), self.nmin - 1, -1):
            g = tuple(suffix[-n:])
            hit = self.table.get(g)
            if not hit:
                continue
            total, conf = sum(hit.values()), n / (n + 1)
            for tok, cnt in sorted(hit.items(), key=lambda kv_: -kv_[1]):
                if tok not in seen:
                    seen.add(tok)
                    out.append((tok, math.log(cnt / total * conf), n, self.last[g][tok]))
                    if len(out) == k:
                        return out
            if not backoff:
                break
        return out

    def edge(self, suffix: list[int], token: int) -> tuple[int, float] | None:
        """(n, log p) of `token` after the longest n-gram ending `suffix` that `token` followed."""
        for n in range(min(self.nmax, len(suffix)), self.nmin - 1, -1):
            hit = self.table.get(tuple(suffix[-n:]))
            if hit and token in hit:
                return n, math.log(hit[token] / sum(hit.values()) * n / (n + 1))
        return None

    def chain(self, suffix: list[int], pos: int, length: int) -> tuple[tuple[int, float, int], ...]:
        """The up to `length - 1` tokens that followed the occurrence at `pos`, each scored by `edge`
        given the path before it (the chain stops at a token the index cannot score)."""
        out, ctx = [], list(suffix) + [self.tokens[pos]]
        for tok in self.tokens[pos + 1 : pos + length]:
            e = self.edge(ctx[-self.nmax :], tok)
            if e is None:
                break
            out.append((tok, e[1], e[0]))
            ctx.append(tok)
        return tuple(out)

    def lookup_match(self, latest: bool = False, ngram: int = LOOKUP_NGRAM) -> tuple[int, int] | None:
        """HF prompt lookup's match: (n, position of the first drafted token) for the last `ngram`
        committed tokens, else fewer, at their earliest (`latest`: latest) occurrence that a token
        followed; None when even the last token never occurred before."""
        seq = self.tokens
        where = self.latest if latest else self.first
        for n in range(min(ngram, len(seq) - 1), 0, -1):
            pos = where.get(tuple(seq[-n:]))
            if pos is not None:
                return n, pos
        return None

    def longest_match(self, longest: int = 64) -> tuple[int, int] | None:
        """Suffix decoding's match: (n, position of the token after it) for the longest suffix of the
        committed text (up to `longest` tokens) that occurred before, at its latest occurrence; None
        when the last token never occurred before. One vectorised pass back from the end, in numpy:
        the committed text is a host-side list, so the match reads no device tensor."""
        seq = np.asarray(self.tokens)
        end = len(seq) - 1
        if end < 1:
            return None
        cand = np.flatnonzero(seq[:end] == seq[end])  # positions whose token is the last one
        if not len(cand):
            return None
        n = 1
        while n < longest:
            longer = cand[cand >= n]
            longer = longer[seq[longer - n] == seq[end - n]]
            if not len(longer):
                break
            cand, n = longer, n + 1
        return n, int(cand[-1]) + 1

    def most_frequent(self) -> int:
        """The committed text's most frequent token (ties: the latest, then the smallest id)."""
        return min(self.count, key=lambda t: (-self.count[t], -self.where[t], t))

    def match_size(self) -> int:
        """n of the longest n-gram ending the committed text that occurred before (0: none)."""
        return self.lookup(self.tokens[-self.nmax :])[0]

    def recent_hit_rate(self, window: int = 16) -> float:
        """Share of the last `window` committed tokens that were the index's top-1 guess."""
        last = self.hits[-window:]
        return sum(last) / len(last) if last else 0.0


class NgramDrafter:
    """The small drafter: proposes continuations of frontier nodes from the n-gram index."""

    name = "ngram"

    def __init__(self, nmax: int = 5, nmin: int = 1) -> None:
        self.index = NgramIndex(nmax, nmin)

    def extend(self, tokens: list[int]) -> None:
        """Committed tokens: the index learns them."""
        self.index.extend(tokens)

    def propose(self, tree: DraftTree, frontier: list[int], width: int, children: int | None = None,
                chain: int = 1) -> list[Proposal]:
        """Proposals under the frontier, best path score first.

        children None: the global top-`width` continuations of the longest matching n-gram of each
        frontier path. Otherwise: for each frontier node up to `children` distinct first tokens
        (backing off to shorter n-grams). chain > 1: each continuation carries up to chain - 1
        further tokens (`NgramIndex.chain`).
        """
        idx = self.index
        tail = idx.tokens[-idx.nmax :]
        out: list[tuple[float, Proposal]] = []
        for f in frontier:
            path = tree.path_tokens(f)[1:]  # the root is the last committed token, already in tail
            suffix = (tail + path)[-idx.nmax :]
            conts = idx.continuations(suffix, width, backoff=False) if children is None else idx.continuations(suffix, children)
            for tok, lp, n, pos in conts:
                prop = (f, tok, lp, n, idx.chain(suffix, pos, chain)) if chain > 1 else (f, tok, lp, n)
                out.append((tree.score[f] + lp, prop))
        out.sort(key=lambda x: -x[0])
        return [p for _, p in (out if children is not None else out[:width])]


    def release_matches(self, tree: DraftTree, parent: int, length: int, k: int
                        ) -> tuple[list[tuple[tuple[int, ...], int, int]], dict[int, int], bool]:
        """The release's matcher for one parent: (chains, match sizes, ended).

        From the longest n-gram ending the parent's path down to the shortest, every earlier
        occurrence whose next `length` tokens lie in the committed text gives that continuation
        (one chain); backing off stops after the size at which the parent has `k` distinct next
        tokens, its live children counted. chains: (tokens, n, position of the first token) for each
        distinct continuation the tree does not already hold, most specific match first, then
        latest, then by tokens; match sizes: first token -> the longest n that proposed it;
        ended: fewer than `k` distinct next tokens (`DecodeConfig.stop_on_relax_zero`)."""
        idx, toks = self.index, self.index.tokens
        window = (toks[-idx.nmax :] + tree.path_tokens(parent)[1:])[-idx.nmax :]
        seen = {t for t, c in tree.children[parent].items() if tree.alive[c]}
        found: dict[tuple[int, ...], tuple[int, int]] = {}
        sizes: dict[int, int] = {}
        for n in range(min(idx.nmax, len(window)), idx.nmin - 1, -1):
            for p in idx.follow.get(tuple(window[-n:]), ()):
                if p + length > len(toks):
                    continue
                chain = tuple(toks[p : p + length])
                sizes.setdefault(chain[0], n)
                seen.add(chain[0])
                if chain not in found and not holds_under(tree, parent, chain):
                    found[chain] = (n, p)
            if len(seen) >= k:
                break
        order = sorted(found.items(), key=lambda c: (-c[1][0], -c[1][1], c[0]))
        return [(chain, n, p) for chain, (n, p) in order], sizes, len(seen) < k

    def lookup(self, length: int, latest: bool = False) -> list[Proposal]:
        """Prompt lookup's draft from this drafter's index (`lookup_draft`)."""
        return lookup_draft(self.index, length, latest)


def lookup_draft(idx: NgramIndex, length: int, latest: bool = False, longest: bool = False) -> list[Proposal]:
    """Prompt lookup's draft of up to `length` tokens as one chain under the root (node 0), from the
    committed text's index: the earliest occurrence (HF's rule), with `latest` also the latest one,
    with `longest` also the one after the longest earlier match (suffix decoding's; on a long document
    a short match's earliest occurrence is often another place in it). Positions drafted twice are
    drafted once. Every token is scored by `NgramIndex.edge` given the path before it, like any chain."""
    suffix = idx.tokens[-idx.nmax :]
    out: list[Proposal] = []
    matches = [idx.lookup_match(pick) for pick in ((False, True) if latest else (False,))]
    if longest:
        matches.append(idx.longest_match())
    seen = set()
    for m in matches:
        if m is None or m[1] in seen or m[1] >= len(idx.tokens):
            continue
        seen.add(m[1])
        tok = idx.tokens[m[1]]
        e = idx.edge(suffix, tok)
        if e is not None:
            out.append((0, tok, e[1], e[0], idx.chain(suffix, m[1], length)))
    return out


def holds_under(tree: DraftTree, v: int, tokens) -> bool:
    """True when the live path `tokens` hangs below node `v`."""
    for tok in tokens:
        v = tree.children[v].get(tok, -1)
        if v < 0 or not tree.alive[v]:
            return False
    return True


class ModelDrafter(MidDrafter):
    """The mid drafter: a causal LM sharing the target's tokenizer, with its own KV cache.

    Cache layout: [committed tokens cached | pending committed tokens | this round's tree nodes].
    Committed tokens that were never forwarded stay `pending` and are forwarded lazily, in front
    of the tree, at the next call: rounds without a mid call cost the mid drafter nothing.
    """

    OUTSIDE = torch.finfo(torch.float32).min / 2  # log q of a token the head cannot emit

    def __init__(self, model, sub_vocab: bool = True, top: int = 0) -> None:
        self.model = model
        # each call reads back every scored node's best `top` tokens with its edge scores (one read
        # per call): `propose` of up to `top` per node then needs no read of its own (0: it reads)
        self.top = top
        self.cache = kv.new_cache(model)
        # A head over a token subset (the pocket drafter's SubVocabHead) is used directly: rows,
        # log-softmax and top-W over its own columns instead of the full, mostly-filled vocabulary.
        head = model.get_output_embeddings()
        self.head = head.sub_logits if sub_vocab and hasattr(head, "sub_logits") else None
        if self.head is not None:
            self.sub_ids = head.token_ids.tolist()  # column -> token id
            self.col = torch.full((head.vocab_size,), -1, dtype=torch.long, device=head.token_ids.device)
            self.col[head.token_ids] = torch.arange(len(self.sub_ids), device=head.token_ids.device)
        self.cached = 0  # committed tokens in the cache
        self.pending: list[int] = []
        self.begin_round()

    def start(self, context: list[int], lazy: bool = False) -> None:
        """A generation starts after `context` (the committed text before the root): an empty cache,
        then the context prefilled, or (`lazy`) left pending until a call needs it."""
        self.cache = kv.new_cache(self.model)
        self.cached, self.pending = 0, []
        self.begin_round()
        if lazy:
            self.pending = list(context)
        else:
            self.prefill(context)

    def prefill(self, ids: list[int]) -> None:
        kv.prefill(self.model, self.cache, ids)
        self.cached = len(ids)

    def backlog(self) -> int:
        """Committed tokens the next call forwards in front of the tree (0 once this round forwarded them)."""
        return 0 if self.flushed else len(self.pending)

    def unforward(self, committed: list[int], n: int) -> int:
        """Move the last `n` cached committed tokens back to `pending`, as if the rounds that
        committed them had not called this drafter (`committed`: all committed ids, the root
        last). Only between rounds. Returns the number moved (at most all but the first)."""
        n = min(n, self.cached - 1) if not self.flushed and not self.slot else 0
        if n <= 0:
            return 0
        self.cached -= n
        kv.truncate(self.cache, self.cached)
        self.pending = list(committed[self.cached : self.cached + n]) + self.pending
        return n

    # ---- round state ---------------------------------------------------------------------------
    def begin_round(self) -> None:
        self.flushed = False  # pending forwarded in this round
        self.slot: dict[int, int] = {}  # node id -> cache position
        self.row: dict[int, tuple[int, int]] = {}  # node id -> (block, row) in self.rows
        self.rows: list[torch.Tensor] = []  # one block per call: log q(. | path to node), float32 [n, columns]
        self.best: dict[int, tuple[list[float], list[int]]] = {}  # node -> its top log q and columns, host

    def snapshot(self) -> tuple:
        """This round's state so far (scored rows and slots, cache length), for `restore`."""
        return self.flushed, dict(self.slot), dict(self.row), list(self.rows), kv.cache_len(self.cache), dict(self.best)

    def restore(self, state: tuple) -> None:
        """Go back to a `snapshot` of this round (the cache is cut back to its length then)."""
        self.flushed, slot, row, rows, length, best = state
        self.slot, self.row, self.rows, self.best = dict(slot), dict(row), list(rows), dict(best)
        kv.truncate(self.cache, length)

    def held(self) -> set[int] | None:
        """The tree nodes whose keys it holds this round (None: not called this round)."""
        return set(self.slot) if self.flushed else None

    def scored(self, node: int) -> bool:
        """Whether this round has scored `node` (its row of log q is known)."""
        return node in self.row

    def rollback(self) -> None:
        """Forget this round (replays): drop the round's cache entries, keep pending."""
        kv.truncate(self.cache, self.cached)
        self.begin_round()

    def commit(self, tree: DraftTree, path: list[int]) -> None:
        """Bring the cache in line with the accepted path (root first, bonus excluded)."""
        if not self.flushed:
            self.pending += [tree.tokens[v] for v in path]
        else:
            base = self.cached + len(self.pending)
            cached_path = [v for v in path if v in self.slot]  # a prefix: P is ancestor-closed
            kv.keep(self.cache, base, [self.slot[v] for v in cached_path])
            self.cached = base + len(cached_path)
            self.pending = [tree.tokens[v] for v in path[len(cached_path) :]]
        self.begin_round()

    # ---- scoring and proposing -----------------------------------------------------------------
    def score(self, tree: DraftTree, nodes: list[int]) -> None:
        """One forward over `nodes` (unscored, ancestor-closed with the scored ones).

        Refreshes their edge scores with q(token | parent path) (`DraftTree.take_mid_logp`),
        stores their rows, adds them to P. Two halves: `forward` queues the device work, `absorb`
        reads its result (the call's one device-to-host read) into the tree.
        """
        self.absorb(tree, *self.forward(tree, nodes))

    def forward(self, tree: DraftTree, nodes: list[int]) -> tuple[list[int], torch.Tensor]:
        """The device half of `score`: the forward, the rows stored, and one float32 tensor for
        `absorb` to read (the refreshed edges' log q, then with `top` each node's best log q and
        columns). Returns (nodes sorted, that tensor)."""
        nodes = sorted(nodes)
        pend = [] if self.flushed else self.pending
        past = kv.cache_len(self.cache)  # committed (+ flushed pending) + this round's scored nodes
        tree_before = sorted(self.slot)
        allnodes = tree_before + nodes
        anc = tree.ancestor_matrix(allnodes)
        # committed columns: the cache's first `cached` (+ the pending, once flushed), then this call's pending
        allowed = kv.context_mask(self.cached + (len(self.pending) if self.flushed else 0), len(pend), past, len(nodes))
        # tree columns: previously forwarded nodes sit at their slots, new ones after `past + pend`
        cols = torch.tensor([self.slot[v] for v in tree_before] + [past + len(pend) + i for i in range(len(nodes))], dtype=torch.long)
        allowed[len(pend) :, cols] = anc[len(tree_before) :]
        root_pos = self.cached + len(self.pending)
        positions = torch.tensor(
            [self.cached + i for i in range(len(pend))] + [root_pos + tree.depth[v] for v in nodes]
        )
        tokens = pend + [tree.tokens[v] for v in nodes]
        logits = kv.masked_forward(self.model, self.cache, tokens, positions, allowed, self.head, keep_last=len(nodes))
        rows = torch.log_softmax(logits.float(), dim=-1)
        for i, v in enumerate(nodes):
            self.slot[v] = past + len(pend) + i
        self.flushed = True
        self.rows.append(rows)  # blocks, never concatenated: a call costs O(its own nodes)
        for i, v in enumerate(nodes):
            self.row[v] = (len(self.rows) - 1, i)
        # refresh edge scores: q(token_v | path to parent), the parent's row is now known
        kids = [v for v in nodes if v != 0]
        parts = [self.token_logq([tree.parent[v] for v in kids], [tree.tokens[v] for v in kids]) if kids
                 else rows.new_empty(0)]
        if self.top > 0 and rows.shape[1] < 2**24:
            top = torch.topk(rows, min(self.top, rows.shape[1]), dim=1)
            parts += [top.values.flatten(), top.indices.flatten().float()]  # columns < 2**24: exact
        return nodes, torch.cat(parts)

    def absorb(self, tree: DraftTree, nodes: list[int], out: torch.Tensor) -> None:
        """The host half of `score`: one read of `forward`'s tensor into edge scores (and tops)."""
        host = out.tolist()  # the call's one device-to-host read
        kids = [v for v in nodes if v != 0]
        if kids:
            for v, x in zip(kids, host):
                tree.take_mid_logp(v, x)
            tree.refresh_scores()
        k = (len(host) - len(kids)) // (2 * len(nodes)) if nodes else 0
        if k:
            vals, cols = host[len(kids) : len(kids) + k * len(nodes)], host[len(kids) + k * len(nodes) :]
            for i, v in enumerate(nodes):
                self.best[v] = (vals[i * k : (i + 1) * k], [int(c) for c in cols[i * k : (i + 1) * k]])
        for v in nodes:
            tree.mid_scored[v] = True

    def logq(self, nodes: list[int]) -> torch.Tensor:
        """log q(. | path to node) of scored nodes, float32 [len(nodes), columns] (columns: the
        vocabulary, or a sub-vocabulary head's token subset, `sub_ids`)."""
        return torch.stack([self.rows[b][i] for b, i in (self.row[v] for v in nodes)])

    def top1(self, node: int) -> tuple[int, float]:
        """The mid drafter's greedy token after a scored node, with its log q."""
        row = self.logq([node])[0]
        c = int(row.argmax())
        return (self.sub_ids[c] if self.head is not None else c), float(row[c])

    def token_logq(self, nodes: list[int], tokens: list[int]) -> torch.Tensor:
        """log q(tokens[i] | path to nodes[i]), float32 [len(nodes)]."""
        rows = self.logq(nodes)
        idx = torch.tensor(tokens, dtype=torch.long).to(rows.device, non_blocking=True)  # no wait for the queue
        if self.head is None:
            return rows.gather(1, idx[:, None]).squeeze(1)
        col = self.col[idx]
        lp = rows.gather(1, col.clamp_min(0)[:, None]).squeeze(1)
        return torch.where(col >= 0, lp, torch.full_like(lp, self.OUTSIDE))

    def propose(self, tree: DraftTree, frontier: list[int], width: int, children: int | None = None) -> list[Proposal]:
        """The global top-`width` children of the frontier by path score (all frontier rows at
        once), or with `children` the top-`children` of each frontier node; best path score first."""
        if not frontier:
            return []
        if self.top >= (children or width) and all(f in self.best for f in frontier):
            return self._propose_read(tree, frontier, width, children)
        rows = self.logq(frontier)
        if children is not None:
            top = torch.topk(rows, min(children, rows.shape[1]), dim=1)
            toks = top.indices.tolist() if self.head is None else [[self.sub_ids[c] for c in r] for r in top.indices.tolist()]
            out = [(tree.score[f] + lp, (f, tok, lp, 0)) for f, ts, lps in zip(frontier, toks, top.values.tolist())
                   for tok, lp in zip(ts, lps) if lp > self.OUTSIDE]
            out.sort(key=lambda x: -x[0])
            return [p for _, p in out]
        base = torch.tensor([tree.score[f] for f in frontier], dtype=rows.dtype, device=rows.device)
        cand = (rows + base[:, None]).flatten()
        k = min(width, cand.numel())
        top = torch.topk(cand, k)
        vocab = rows.shape[1]
        idx = top.indices.tolist()
        out = []
        for i, total in zip(idx, top.values.tolist()):
            f, tok = frontier[i // vocab], i % vocab
            if self.head is not None:
                tok = self.sub_ids[tok]
            if math.isinf(total):
                continue
            out.append((f, tok, total - tree.score[f], 0))
        return out

    def _propose_read(self, tree: DraftTree, frontier: list[int], width: int, children: int | None) -> list[Proposal]:
        """`propose` from the tops `absorb` read: the same proposals, no device read."""
        tok = (lambda c: self.sub_ids[c]) if self.head is not None else (lambda c: c)
        if children is not None:
            out = [(tree.score[f] + lp, (f, tok(c), lp, 0)) for f in frontier
                   for lp, c in zip(*(x[:children] for x in self.best[f])) if lp > self.OUTSIDE]
            out.sort(key=lambda x: -x[0])
            return [p for _, p in out]
        m = min(len(self.best[f][0]) for f in frontier)  # each row's top-m holds its share of the top-W
        vals = np.array([self.best[f][0][:m] for f in frontier], dtype=np.float32)
        base = np.array([tree.score[f] for f in frontier], dtype=np.float32)
        cand = (vals + base[:, None]).ravel()  # float32 sums, as the device's
        out = []
        for i in np.argsort(-cand, kind="stable")[: min(width, cand.size)].tolist():
            f, total = frontier[i // m], float(cand[i])
            if not math.isinf(total):
                out.append((f, tok(self.best[f][1][i % m]), total - tree.score[f], 0))
        return out


__all__ = ["NgramIndex", "NgramDrafter", "ModelDrafter", "MID", "lookup_draft"]
