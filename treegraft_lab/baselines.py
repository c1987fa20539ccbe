"""Baselines through the same API: plain autoregressive decoding and a CSD-style cascade.

`autoregressive` decodes with the target alone, one token per forward, with the same sampling
rules (temperature, top-k, top-p) as the decoder, so a sampled TreeGraft run and an
autoregressive one draw from the same distribution.

`RecyclingDecoder` and `SuffixDecoder` are the field's training-free tree peers through the same
round loop, each a `drafting.Drafter` (`TemplateDrafter`, `SuffixTreeDrafter`; target
verification, acceptance and pricing unchanged; `retrieval` has the drafters): Token Recycling fills its fixed 80-node template from the adjacency matrix, refreshed from the
target's top-8 at every verified node; suffix decoding grows its tree best-first from a suffix
automaton of the prompt and generated text, as many nodes as the match is long (at most the
budget). Neither calls the mid drafter.

`PromptLookupDecoder` is HF prompt lookup decoding's draft in the same loop: the up to
`PLD_TOKENS` tokens that followed the earliest earlier occurrence of the last 2 (else 1) committed
tokens, one chain under the root (`LookupDrafter`), so its trees can be recorded and drawn beside
the others (the bench times HF's own, `hf-pld`).

Every drafter here reports its steps (`TreeGraftDecoder.emit_step`): `treegraft_lab.record` and
the viewer show each method's trees step by step, as TreeGraft's.

`cascade` is the "w/o ND" family's sequence baseline (cascade speculative drafting): the small
drafter drafts a chain of D tokens, the mid drafter checks it in one forward and OVERWRITES it
from its first disagreement with its own greedy tokens, and the target verifies the chain
(`CascadeDrafter`).
"""

from __future__ import annotations

import time

import torch

from treegraft_lab import graft, kv, measure
from treegraft_lab.config import DecodeConfig
from treegraft_lab.costs import DeviceProfile
from treegraft_lab.decoder import Generation, TreeGraftDecoder
from treegraft_lab.drafters import lookup_draft
from treegraft_lab.drafting import Drafter
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.prompting import context_window, encode_prompt, eos_ids
from treegraft_lab.retrieval import TEMPLATE, label
from treegraft_lab.rounds import Draft, StepResult
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
    window = context_window(model)
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


class CascadeDrafter(Drafter):
    """CSD-style drafting: the small drafter's chain, checked and overwritten by the mid drafter (no tree)."""

    def draft(self, dec: TreeGraftDecoder, policy) -> Draft:
        depth, prof = dec.config.depth, dec.profile
        tree, v, ms, k = DraftTree.start(dec.root), 0, 0.0, 0
        for k in range(1, depth + 1):  # the small drafter's chain: its best continuation each step
            ms += prof.small_ms
            prop = dec.small.propose(tree, [v], 1)
            if not prop:
                break
            u, _ = tree.add_child(v, prop[0][1], prop[0][2], SMALL, k, prop[0][3])
            dec.emit_step(k, tree, StepResult([v], [v], [u], [], [], 1, prof.small_ms), last_new=[v])
            v = u
        chain = tree.path(v)
        n0, size = len(tree), dec.mid_backlog() + len(chain)
        ms += prof.mid_ms(size)
        (_, mid_s), calls = dec.timed(dec.mid.score, tree, chain), 1
        cut = 0  # the mid drafter keeps the chain up to its first disagreement ...
        for u in chain[1:]:
            if tree.tokens[u] != dec.mid.top1(tree.parent[u])[0]:
                break
            cut = u
        rest = chain[chain.index(cut) + 1:]
        if rest:
            tree.kill_subtree(rest[0])
        v = cut
        while tree.depth[v] < depth:  # ... and overwrites the rest with its own greedy tokens
            if not dec.mid.scored(v):
                ms += prof.mid_ms(1)
                (_, t), calls = dec.timed(dec.mid.score, tree, [v]), calls + 1
                mid_s += t
            tok, lq = dec.mid.top1(v)
            v, _ = tree.add_child(v, tok, lq, MID, tree.depth[v] + 1)
        new = list(range(n0, len(tree)))  # the mid drafter's check and overwrite: one step after the chain's
        dec.emit_step(k + 1, tree, StepResult(chain, [cut], new, [], chain, size, prof.mid_ms(size)), call_mid=True,
                      last_new=chain[-1:])
        return Draft(tree, "csd", calls, ms, mid_s)


class TemplateDrafter(Drafter):
    """Token Recycling's drafting: its static template filled from the adjacency matrix."""

    def draft(self, dec: TreeGraftDecoder, policy) -> Draft:
        tree = DraftTree.start(dec.root)
        new = dec.small.recycling.fill_template(tree)
        dec.emit_step(1, tree, StepResult([0], [0], new, [], [], 1, dec.profile.small_ms))
        return Draft(tree, "recycling", ms=dec.profile.small_ms)  # one matrix lookup per template node: a retrieval step


class SuffixTreeDrafter(Drafter):
    """Suffix decoding's drafting: a best-first tree from the suffix automaton's longest match."""

    def draft(self, dec: TreeGraftDecoder, policy) -> Draft:
        tree = DraftTree.start(dec.root)
        new = dec.small.suffix.grow(tree, dec.budget)
        dec.emit_step(1, tree, StepResult([0], [0], new, [], [], 1, dec.profile.small_ms))
        return Draft(tree, "suffix", ms=dec.profile.small_ms)


PLD_TOKENS = 10  # HF prompt lookup's draft length (`prompt_lookup_num_tokens`) in the bench


class LookupDrafter(Drafter):
    """Prompt lookup's drafting: one chain of up to `tokens` tokens under the root (HF's matching rule)."""

    def __init__(self, tokens: int = PLD_TOKENS) -> None:
        self.tokens = tokens

    def draft(self, dec: TreeGraftDecoder, policy) -> Draft:
        tree = DraftTree.start(dec.root)
        props = lookup_draft(dec.index, self.tokens)
        landed = graft.graft(tree, props, SMALL, 1, True, None)
        label(tree, props, "lookup")
        chain = [v for v in range(1, len(tree)) if v not in landed]
        dec.emit_step(1, tree, StepResult([0], [0], landed, chain, [], 1, dec.profile.small_ms))
        return Draft(tree, "lookup", ms=dec.profile.small_ms)


class CascadeDecoder(TreeGraftDecoder):
    """CSD-style chain cascade: n-gram chain, overwritten by the mid drafter, verified by the target."""

    drafter = CascadeDrafter()

    def __init__(self, pair, config: DecodeConfig | None = None, profile: DeviceProfile | None = None,
                 **overrides) -> None:
        config = config or DecodeConfig(schedule="mid")
        if pair.mid is None:
            raise TreeGraftError("the cascade baseline needs a mid drafter: load the pair with a mid model")
        super().__init__(pair, config, profile, schedule="mid", **{k: v for k, v in overrides.items() if k != "schedule"})


class RecyclingDecoder(TreeGraftDecoder):
    """Token Recycling: the static template filled from the adjacency matrix, verified whole."""

    drafter = TemplateDrafter()

    def __init__(self, pair, config: DecodeConfig | None = None, profile: DeviceProfile | None = None,
                 **overrides) -> None:
        over = {**overrides, "small": "recycling", "schedule": "small", "budget": len(TEMPLATE), "prune": "topk"}
        super().__init__(pair, config or DecodeConfig(), profile, **over)


class SuffixDecoder(TreeGraftDecoder):
    """Suffix decoding: a best-first tree from the suffix automaton's longest match, verified whole."""

    drafter = SuffixTreeDrafter()

    def __init__(self, pair, config: DecodeConfig | None = None, profile: DeviceProfile | None = None,
                 **overrides) -> None:
        over = {**overrides, "small": "suffix", "schedule": "small", "prune": "topk"}
        super().__init__(pair, config or DecodeConfig(), profile, **over)


class PromptLookupDecoder(TreeGraftDecoder):
    """Prompt lookup decoding: the chain prompt lookup drafts, verified whole (at most `PLD_TOKENS`)."""

    drafter = LookupDrafter()

    def __init__(self, pair, config: DecodeConfig | None = None, profile: DeviceProfile | None = None,
                 **overrides) -> None:
        over = {**overrides, "small": "ngram", "schedule": "small", "budget": PLD_TOKENS, "prune": "topk"}
        super().__init__(pair, config or DecodeConfig(), profile, **over)


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
