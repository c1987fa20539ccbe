"""Model forwards over a draft tree, and the KV-cache surgery that keeps caches right.

One forward helper serves the target and the mid drafter: tokens at explicit positions, a 4D
float mask (0 where attention is allowed, the dtype's minimum elsewhere) of shape
[1, 1, new, cached + new], on the stock transformers model classes with a DynamicCache.
"""

from __future__ import annotations

import functools
import inspect

import torch
from transformers import DynamicCache


@functools.cache
def _cache_kw(cls: type) -> str:
    """Newer transformers call the cache argument `cache`, older 5.x `past_key_values`."""
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def new_cache(model) -> DynamicCache:
    """A cache for `model`: preallocated (`cpu_path.growing_cache`) on the packed CPU path."""
    from treegraft_lab import cpu_path

    return cpu_path.growing_cache(model) if cpu_path.installed(model) else DynamicCache(config=model.config)


def forward_kwargs(model, cache: DynamicCache) -> dict:
    """The keyword that passes `cache` to this model's forward."""
    return {_cache_kw(type(model)): cache}


def cache_len(cache: DynamicCache) -> int:
    return cache.get_seq_length()


@torch.inference_mode()
def prefill(model, cache: DynamicCache, ids: list[int]) -> None:
    """Run a causal forward of `ids` into the cache (logits of the last position only)."""
    if not ids:
        return
    device = model.device
    chunk = 1024
    for i in range(0, len(ids), chunk):
        x = torch.tensor([ids[i : i + chunk]], device=device)
        model(input_ids=x, use_cache=True, logits_to_keep=1, **{_cache_kw(type(model)): cache})


@torch.inference_mode()
def masked_forward(model, cache: DynamicCache, tokens: list[int], positions: torch.Tensor, allowed: torch.Tensor,
                   head=None) -> torch.Tensor:
    """Forward `tokens` at `positions` attending where `allowed` [new, cached + new] is True.

    Returns logits [new, vocab] in the model's dtype (callers that need float32 convert: a greedy
    argmax does not); the new keys/values are appended to `cache`. With `head` (a callable on the
    final hidden states [new, hidden]) the model's own output head is skipped and `head`'s output
    returned instead, e.g. a sub-vocabulary head's logits over its own columns only.
    """
    device, dtype = model.device, model.dtype
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    mask.masked_fill_(~allowed.to(device), torch.finfo(dtype).min)
    body = model if head is None else model.get_decoder()
    out = body(
        input_ids=torch.tensor([tokens], device=device),
        attention_mask=mask[None, None],
        position_ids=positions.to(device)[None],
        use_cache=True,
        **{_cache_kw(type(body)): cache},
    )
    return out.logits[0] if head is None else head(out.last_hidden_state[0])


@torch.inference_mode()
def truncate(cache: DynamicCache, length: int) -> None:
    """Drop every cached position at or after `length`."""
    extra = cache_len(cache) - length
    if extra > 0:
        cache.crop(-extra)


@torch.inference_mode()
def keep(cache: DynamicCache, start: int, slots: list[int]) -> None:
    """Move cache positions `slots` (all >= start, increasing) to start, start+1, ...; drop the rest."""
    if slots != list(range(start, start + len(slots))):
        for layer in cache.layers:
            if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
                continue
            idx = torch.tensor(slots, device=layer.keys.device)
            layer.keys[..., start : start + len(slots), :] = layer.keys.index_select(-2, idx)
            layer.values[..., start : start + len(slots), :] = layer.values.index_select(-2, idx)
    truncate(cache, start + len(slots))
