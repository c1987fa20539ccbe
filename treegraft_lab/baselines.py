"""Baselines through the same API: plain autoregressive decoding and a CSD-style cascade.

`autoregressive` decodes with the target alone, one token per forward, with the same sampling
rules (temperature, top-k, top-p) as the decoder, so a sampled TreeGraft run and an
autoregressive one draw from the same distribution.

`RecyclingDecoder` and `SuffixDecoder` are the field's training-free tree peers through the same
round loop (target verification, acceptance and pricing unchanged; `retrieval` has the drafters):
Token Recycling fills its fixed 80-node template from the adjacency matrix, refreshed from the
target's top-8 at every verified node; suffix decoding grows its tree best-first from a suffix
automaton of the prompt and generated text, as many nodes as the match is long (at most the
budget). Neither calls the mid drafter.

`cascade` is the "w/o ND" family's sequence baseline (cascade speculative drafting): the small
drafter drafts a chain of D tokens, the mid drafter checks it in one forward and OVERWRITES it
from its first disagreement with its own greedy tokens, and the target verifies the chain.
"""

from __future__ import annotations

import time

import torch

from treegraft_lab import kv, measure
from treegraft_lab.config import DecodeConfig
from treegraft_lab.decoder import Generation, TreeGraftDecoder
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.prompting import encode_prompt, eos_ids
from treegraft_lab.retrieval import TEMPLATE
from treegraft_lab.tree import MID, SMALL, DraftTree
from treegraft_lab.verify import warp


@torch.inference_mode()
def autoregressive(pair, prompt, max_new_tokens: int = 256, temperature: float = 0.0, top_p: float = 1.0,
                   top_k: int = 0, seed: int | None = None) -> Generation:
    """Plain decoding with the target: one forward per token, KV cache kept."""
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise TreeGraftError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    model, tok = pair.target, pair.tokenizer
    ids = encode_prompt(tok, prompt)
    window = getattr(model.config, "max_position_embeddings", None)
    if window and len(ids) + max_new_tokens > window:
        raise TreeGraftError(f"the prompt has {len(ids)} tokens; with max_new_tokens={max_new_tokens} that exceeds the "
                             f"target's context window of {window}: shorten the prompt or lower max_new_tokens")
    stop = eos_ids(tok, model)
    gen = torch.Generator(device=model.device)
    gen.manual_seed(seed if seed is not None else torch.seed() % (2**63))
    t0 = time.perf_counter()
    cache = kv.new_cache(model)
    x = torch.tensor([ids], device=model.device)
    out: list[int] = []
    while len(out) < max_new_tokens:
        logits = model(input_ids=x, use_cache=True, logits_to_keep=1, **kv.forward_kwargs(model, cache)).logits[0, -1].float()
        if temperature == 0:
            nxt = int(logits.argmax())
        else:
            nxt = int(torch.multinomial(warp(logits[None], temperature, top_k, top_p)[0], 1, generator=gen))
        out.append(nxt)
        if nxt in stop:
            break
        x = torch.tensor([[nxt]], device=model.device)
    wall = time.perf_counter() - t0
    stats = {"new_tokens": len(out), "tokens_per_s": len(out) / wall, "rounds": len(out), "accepted_per_round": 0.0,
             "tokens_per_round": 1.0, "wall_s": wall}
    return Generation(out, tok.decode(out, skip_special_tokens=True), [], stats)


class CascadeDecoder(TreeGraftDecoder):
    """CSD-style chain cascade: n-gram chain, overwritten by the mid drafter, verified by the target."""

    def __init__(self, pair, config: DecodeConfig | None = None, **overrides) -> None:
        config = config or DecodeConfig(schedule="mid")
        if pair.mid is None:
            raise TreeGraftError("the cascade baseline needs a mid drafter: load the pair with a mid model")
        super().__init__(pair, config, schedule="mid", **{k: v for k, v in overrides.items() if k != "schedule"})

    def _draft(self, policy) -> tuple[DraftTree, str, int, float]:
        """The small drafter's chain, checked and overwritten by the mid drafter (no tree)."""
        cfg = self.config
        tree, v = DraftTree.start(self.root), 0
        for k in range(1, cfg.depth + 1):  # the small drafter's chain: its best continuation each step
            self._draft_ms += self.profile.small_ms
            prop = self.small.propose(tree, [v], 1)
            if not prop:
                break
            v, _ = tree.add_child(v, prop[0][1], prop[0][2], SMALL, k, prop[0][3])
        chain = tree.path(v)
        self._draft_ms += self.profile.mid_ms(self.mid_backlog() + len(chain))
        (_, mid_s), calls = self.timed(self.mid.score, tree, chain), 1
        cut = 0  # the mid drafter keeps the chain up to its first disagreement ...
        for u in chain[1:]:
            if tree.tokens[u] != self.mid.top1(tree.parent[u])[0]:
                break
            cut = u
        rest = chain[chain.index(cut) + 1:]
        if rest:
            tree.kill_subtree(rest[0])
        v = cut
        while tree.depth[v] < cfg.depth:  # ... and overwrites the rest with its own greedy tokens
            if not self.mid.scored(v):
                self._draft_ms += self.profile.mid_ms(1)
                (_, t), calls = self.timed(self.mid.score, tree, [v]), calls + 1
                mid_s += t
            tok, lq = self.mid.top1(v)
            v, _ = tree.add_child(v, tok, lq, MID, tree.depth[v] + 1)
        return tree, "csd", calls, mid_s


class RecyclingDecoder(TreeGraftDecoder):
    """Token Recycling: the static template filled from the adjacency matrix, verified whole."""

    def __init__(self, pair, config: DecodeConfig | None = None, **overrides) -> None:
        over = {**overrides, "small": "recycling", "schedule": "small", "budget": len(TEMPLATE), "prune": "topk"}
        super().__init__(pair, config or DecodeConfig(), **over)

    def _draft(self, policy) -> tuple[DraftTree, str, int, float]:
        tree = DraftTree.start(self.root)
        self._draft_ms += self.profile.small_ms  # one matrix lookup per template node: a retrieval step
        self.small.recycling.fill_template(tree)
        return tree, "recycling", 0, 0.0


class SuffixDecoder(TreeGraftDecoder):
    """Suffix decoding: a best-first tree from the suffix automaton's longest match, verified whole."""

    def __init__(self, pair, config: DecodeConfig | None = None, **overrides) -> None:
        over = {**overrides, "small": "suffix", "schedule": "small", "prune": "topk"}
        super().__init__(pair, config or DecodeConfig(), **over)

    def _draft(self, policy) -> tuple[DraftTree, str, int, float]:
        tree = DraftTree.start(self.root)
        self._draft_ms += self.profile.small_ms
        self.small.suffix.grow(tree, self.budget)
        return tree, "suffix", 0, 0.0


PEERS = {"recycling": RecyclingDecoder, "suffix": SuffixDecoder}  # bench methods decoded by these classes


@torch.inference_mode()
def plain_token_s(pair, context_ids: list[int], tokens: int = 4) -> float:
    """Seconds per token of plain decoding right after `context_ids` (prefilled untimed): the
    baseline a replayed round's tokens per second is read against."""
    model = pair.target
    cache = kv.new_cache(model)
    x = torch.tensor([list(context_ids)], device=model.device)
    logits = model(input_ids=x, use_cache=True, logits_to_keep=1, **kv.forward_kwargs(model, cache)).logits

    def steps(logits):
        for _ in range(tokens):
            x = logits[:, -1:].argmax(-1)
            logits = model(input_ids=x, use_cache=True, logits_to_keep=1, **kv.forward_kwargs(model, cache)).logits
        return logits

    _, seconds = measure.timed(steps, logits, devices=measure.cuda_devices(model))
    return seconds / tokens
