"""The target's side of a round: one tree-attention forward, lossless acceptance, KV compaction.

Greedy (temperature 0): walk from the root, moving to the child whose token is the target's
argmax; the first argmax with no matching child is the bonus token.

Sampling (temperature > 0): SpecInfer's multi-branch rule. The draft tree is a deterministic
function of the context, so every child is a point-mass proposal q = delta(x): child x is
accepted with probability min(1, p(x) / q(x)) = p(x); on rejection p becomes
norm(max(0, p - q)), i.e. p with x zeroed and renormalised, and the next child is tried. If none
is accepted the bonus token is sampled from what is left. Each emitted token is therefore
distributed exactly as the target's (warped) distribution: the method is lossless.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from treegraft_lab import kv
from treegraft_lab.tree import DraftTree


def warp(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Probabilities after temperature, top-k and top-p (nucleus) filtering; rows of [n, V]."""
    x = logits.float() / temperature
    if top_k and top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if top_p < 1.0:
        sp, si = torch.sort(probs, dim=-1, descending=True)
        drop = sp.cumsum(-1) - sp >= top_p  # keep the smallest prefix whose mass reaches top_p (as HF)
        sp = sp.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, si, sp)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def float32_head(model) -> bool:
    """Make `model`'s output head compute its logits in float32 (a float32 copy of the head's
    weight: vocab x hidden x 4 bytes more memory), for every caller: tree verification and HF
    `generate` alike. In bf16 a logit of magnitude 16-32 has steps of 0.125, so two near-equal
    logits tie or swap by one step between a many-row tree forward and a one-row decode; a float32
    head removes the ties of the head's own rounding (the hidden states stay bf16). No-op (False)
    on a float32 model."""
    head = model.get_output_embeddings()
    if head is None or head.weight.dtype == torch.float32:
        return False
    w32 = head.weight.detach().float()
    b32 = None if getattr(head, "bias", None) is None else head.bias.detach().float()
    head.forward = lambda x: F.linear(x.float(), w32, b32)
    model._treegraft_float32_logits = True
    return True


class TargetVerifier:
    """Holds the target's KV cache: every committed token except the last (the next root).

    The prompt's last `FUSE` tokens (all of a shorter prompt) are not prefilled on their own: they
    stay `pending` and ride in front of the first tree forward, causally masked, with logits for
    the tree rows only. A generation then costs one target forward less, as HF's prompt lookup
    (whose first forward holds the prompt and the first draft) does; the cache ends up the same.
    """

    FUSE = 1024

    def __init__(self, model) -> None:
        self.model = model
        self.cache = kv.new_cache(model)
        self.cached = 0
        self.pending: list[int] = []

    def prefill(self, ids: list[int], fuse: bool = True, topk: int = 0) -> tuple[list, list, torch.Tensor | None]:
        """Cache all of `ids` but their last `FUSE` (0: all of them); the next forward carries those.
        fuse=False: cache all of them now, in one forward. Returns `kv.prefill`'s (top rows, their
        log-probs, the last cached position's logits)."""
        head = max(0, len(ids) - self.FUSE) if fuse else len(ids)
        rows = kv.prefill(self.model, self.cache, ids[:head], topk)
        self.cached = head
        self.pending = list(ids[head:])
        return rows

    def forward_tree(self, tree: DraftTree, kept: list[int]) -> torch.Tensor:
        """One forward of the kept nodes (root first), behind any pending prompt tokens: logits
        [len(kept), vocab], model dtype."""
        n, p, c = len(kept), len(self.pending), self.cached
        allowed = kv.context_mask(c, p, c, n)
        allowed[p:, c + p :] = tree.ancestor_matrix(kept)
        positions = torch.tensor([*range(c, c + p), *(c + p + tree.depth[v] for v in kept)])
        logits = kv.masked_forward(self.model, self.cache, [*self.pending, *(tree.tokens[v] for v in kept)], positions,
                                   allowed, keep_last=n if p else None)
        self.cached, self.pending = c + p, []
        return logits

    def rollback(self) -> None:
        kv.truncate(self.cache, self.cached)

    def commit(self, kept: list[int], path: list[int]) -> None:
        """Keep exactly the accepted path's entries (root first) after the committed context."""
        slot = {v: self.cached + i for i, v in enumerate(kept)}
        kv.keep(self.cache, self.cached, [slot[v] for v in path])
        self.cached += len(path)


def kept_children(tree: DraftTree, kept: list[int]) -> dict[int, list[int]]:
    """Children of each kept node among the kept nodes, best path score first."""
    out: dict[int, list[int]] = {v: [] for v in kept}
    for v in kept[1:]:
        out[tree.parent[v]].append(v)
    for kids in out.values():
        kids.sort(key=lambda v: -tree.score[v])
    return out


def accept_greedy(tree: DraftTree, kept: list[int], logits: torch.Tensor) -> tuple[list[int], int]:
    """Longest path whose every token is the target's argmax. Returns (path ids, bonus token)."""
    best = logits.argmax(-1).tolist()
    row = {v: i for i, v in enumerate(kept)}
    kids = kept_children(tree, kept)
    path, cur = [0], 0
    while True:
        nxt = next((c for c in kids[cur] if tree.tokens[c] == best[row[cur]]), None)
        if nxt is None:
            return path, best[row[cur]]
        path.append(nxt)
        cur = nxt


def accept_sampling(
    tree: DraftTree,
    kept: list[int],
    probs: torch.Tensor,
    generator: torch.Generator,
    *,
    renormalise: bool = True,
) -> tuple[list[int], int]:
    """Multi-branch rejection sampling with point-mass proposals. Returns (path ids, bonus token).

    Per node one gather of its children's probabilities p(x_1..x_m) and one batch of uniforms,
    copied to the host together (one sync): child j is accepted iff u_j < p(x_j) / (S - sum of the
    rejected p(x_i), i < j), S the row's mass. That is the sequential rule "accept x with
    probability p(x), else zero x and renormalise" without dividing the whole vocabulary per
    rejected child. The bonus token is drawn from the row with the rejected children zeroed
    (`multinomial` normalises). Uniforms come from `generator` on its own device (a target spread
    over GPUs returns logits on its last one).

    `renormalise=False` breaks the rule on purpose (the residual keeps the rejected token's mass):
    it exists only so that a test can show the statistical check detects a broken rule.
    """
    row = {v: i for i, v in enumerate(kept)}
    kids = kept_children(tree, kept)
    gdev = generator.device
    path, cur = [0], 0
    while True:
        p = probs[row[cur]]
        cs = kids[cur]
        rejected: list[int] = []
        chosen = None
        if cs:
            toks = [tree.tokens[c] for c in cs]
            idx = torch.tensor(toks, device=p.device)
            u = torch.rand(len(cs), generator=generator, device=gdev).to(p.device)
            host = torch.cat([p.sum()[None], p[idx], u]).tolist()  # one device-to-host copy per node
            mass, pc, uc = host[0], host[1 : 1 + len(cs)], host[1 + len(cs) :]
            left = mass
            for c, x, px, ux in zip(cs, toks, pc, uc):
                if ux * (left if renormalise else mass) < px:
                    chosen = c
                    break
                rejected.append(x)
                left -= px
                if renormalise and left <= 0:  # every token with mass was a rejected child
                    break
        if chosen is None:
            res = p.to(gdev, copy=True)
            if renormalise and rejected:
                res[torch.tensor(rejected, device=gdev)] = 0.0
            return path, int(torch.multinomial(res, 1, generator=generator))
        path.append(chosen)
        cur = chosen
