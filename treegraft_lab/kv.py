"""Model forwards over a draft tree, and the KV-cache surgery that keeps caches right.

One forward helper serves the target and the mid drafter: tokens at explicit positions, a 4D
float mask (0 where attention is allowed, the dtype's minimum elsewhere) of shape
[1, 1, new, cached + new], on the stock transformers model classes with a DynamicCache.

Off the packed CPU path (CUDA, bf16) models attend through `folded_sdpa` ("treegraft_sdpa"):
grouped-query attention with a custom mask without copying keys and values per query head.
"""

from __future__ import annotations

import functools
import inspect

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from treegraft_lab.errors import TreeGraftError

FOLDED = "treegraft_sdpa"  # the attention implementation name `use_folded_attention` registers
TREE_ATTENTION = ("sdpa", "eager", FOLDED)  # implementations that honour a 4D float mask


@functools.cache
def _cache_kw(cls: type) -> str:
    """Newer transformers call the cache argument `cache`, older 5.x `past_key_values`."""
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def check_attention(model) -> None:
    """Tree forwards pass a 4D float mask: refuse attention kernels that would mishandle it
    (flash-attention-2/3 read only a 2D padding mask; flex attention needs a block mask)."""
    impl = getattr(model.config, "_attn_implementation", None) or "sdpa"
    if impl not in TREE_ATTENTION:
        raise TreeGraftError(f"the model uses attention {impl!r}, which ignores a tree's 4D mask; load it with "
                             f"attn_implementation='sdpa' (or {FOLDED!r}, as load_pair does on CUDA)")


def new_cache(model) -> DynamicCache:
    """A cache for `model`: preallocated (`cpu_path.growing_cache`: no re-concatenation of the
    whole cache per forward) on the packed CPU path and on any accelerator; stock on a plain CPU."""
    from treegraft_lab import cpu_path

    check_attention(model)
    if cpu_path.installed(model) or model.device.type != "cpu":  # CUDA: written for it, never yet run there
        return cpu_path.growing_cache(model)
    return DynamicCache(config=model.config)


_FOLD: list = [None, 0, None]  # (mask, repeat, repeated mask): built once per forward, not per layer


def folded_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, is_causal=None,
                **kwargs):
    """transformers' SDPA attention, except that under a 4D mask grouped-query attention folds the
    query heads of each KV group onto the query axis (q [b, H, n, d] -> [b, KV, rep * n, d], the
    mask repeated rep times along its rows) instead of repeating keys and values per query head
    (`repeat_kv`: rep copies of the whole cache per layer per forward). Same sums, one SDPA call
    whose efficient kernels accept the mask. Without a mask (a first prefill chunk) or without
    groups it is transformers' own `sdpa_attention_forward`. Registered as "treegraft_sdpa";
    load_pair uses it on CUDA, where it has not yet been run; the CPU tests check it against stock
    SDPA in float32 and bfloat16."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    b, heads, n, d = query.shape
    groups = key.shape[1]
    rep = heads // groups
    if rep == 1 or attention_mask is None or attention_mask.dim() != 4 or attention_mask.shape[1] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    if _FOLD[0] is not attention_mask or _FOLD[1] != rep:
        m = attention_mask[..., -n:, : key.shape[2]]
        _FOLD[:] = [attention_mask, rep, m.expand(m.shape[0], 1, n, m.shape[-1]).repeat(1, 1, rep, 1)]
    q = query.reshape(b, groups, rep * n, d)  # rows (r, i): query head g * rep + r, token i
    out = F.scaled_dot_product_attention(q, key, value, attn_mask=_FOLD[2], dropout_p=0.0, scale=scaling)
    # [b, KV, rep * n, d] -> [b, n, heads, d]; never `.view` the whole: CUDA's memory-efficient
    # kernel returns its output transposed in memory ([b, rep * n, KV, d] strides)
    return out.unflatten(2, (rep, n)).permute(0, 3, 1, 2, 4).reshape(b, n, heads, d).contiguous(), None


@functools.cache
def _register_folded() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(FOLDED, folded_sdpa)
    AttentionMaskInterface.register(FOLDED, sdpa_mask)


def use_folded_attention(model) -> None:
    """Switch `model` (any device) to `folded_sdpa`; HF `generate` then uses it too."""
    _register_folded()
    model.set_attn_implementation(FOLDED)


def forward_kwargs(model, cache: DynamicCache) -> dict:
    """The keyword that passes `cache` to this model's forward."""
    return {_cache_kw(type(model)): cache}


def cache_len(cache: DynamicCache) -> int:
    return cache.get_seq_length()


@torch.inference_mode()
def prefill(model, cache: DynamicCache, ids: list[int], topk: int = 0) -> tuple[list, list, torch.Tensor | None]:
    """Run a causal forward of `ids` into the cache. Returns the last position's logits [vocab]
    (None without ids) and, with `topk`, the model's top-`topk` next tokens and their float32
    log-probs at every position of `ids` (two lists of rows; chunks of 256 bound the logits' memory)."""
    tokens: list = []
    logps: list = []
    last = None
    if not ids:
        return tokens, logps, last
    device = model.device
    chunk = 256 if topk else 1024
    for i in range(0, len(ids), chunk):
        x = torch.tensor([ids[i : i + chunk]], device=device)
        out = model(input_ids=x, use_cache=True, logits_to_keep=0 if topk else 1, **{_cache_kw(type(model)): cache})
        last = out.logits[0, -1]
        if topk:
            top = torch.topk(torch.log_softmax(out.logits[0].float(), dim=-1), topk, dim=-1)
            tokens += top.indices.tolist()
            logps += top.values.tolist()
    return tokens, logps, last


def context_mask(seen: int, pending: int, past: int, rows: int) -> torch.Tensor:
    """The committed-context part of a tree forward's mask: [pending + rows, past + pending + rows]
    bool, where `pending` committed tokens that were never forwarded ride in front of `rows` tree
    nodes. Every row sees the first `seen` cached columns; the pending rows see each other
    causally (at columns past..past + pending); the tree rows see all of them. Columns of tree
    nodes (cached ones between `seen` and `past`, new ones after the pending) are left False for
    the caller to fill with the tree's ancestry."""
    allowed = torch.zeros(pending + rows, past + pending + rows, dtype=torch.bool)
    allowed[:, :seen] = True
    allowed[:pending, past : past + pending] = torch.ones(pending, pending, dtype=torch.bool).tril()
    allowed[pending:, past : past + pending] = True
    return allowed


@torch.inference_mode()
def masked_forward(model, cache: DynamicCache, tokens: list[int], positions: torch.Tensor, allowed: torch.Tensor,
                   head=None, keep_last: int | None = None) -> torch.Tensor:
    """Forward `tokens` at `positions` attending where `allowed` [new, cached + new] is True.

    Returns logits [new, vocab] in the model's dtype (callers that need float32 convert: a greedy
    argmax does not); the new keys/values are appended to `cache`. With `head` (a callable on the
    final hidden states [new, hidden]) the model's own output head is skipped and `head`'s output
    returned instead, e.g. a sub-vocabulary head's logits over its own columns only. With
    `keep_last` only the last `keep_last` rows get logits (the head never sees the others, e.g.
    a prompt forwarded in front of the tree). Two host-to-device copies per forward: the token ids
    with their positions, and the mask.
    """
    device, dtype = model.device, model.dtype
    ids_pos = torch.stack([torch.as_tensor(tokens, dtype=torch.long), positions.long()]).to(device, non_blocking=True)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    mask.masked_fill_(~allowed.to(device, non_blocking=True), torch.finfo(dtype).min)
    keep = len(tokens) if keep_last is None else keep_last
    if head is None:
        out = model(input_ids=ids_pos[:1], attention_mask=mask[None, None], position_ids=ids_pos[1:], use_cache=True,
                    logits_to_keep=keep, **{_cache_kw(type(model)): cache})
        return out.logits[0]
    body = model.get_decoder()
    out = body(input_ids=ids_pos[:1], attention_mask=mask[None, None], position_ids=ids_pos[1:], use_cache=True,
               **{_cache_kw(type(body)): cache})
    return head(out.last_hidden_state[0, len(tokens) - keep :])


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
        idx: dict[torch.device, torch.Tensor] = {}  # one index copy per device, not per layer
        for layer in cache.layers:
            if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
                continue
            dev = layer.keys.device
            if dev not in idx:
                idx[dev] = torch.tensor(slots).to(dev, non_blocking=True)  # a blocking copy would wait for the queue
            layer.keys[..., start : start + len(slots), :] = layer.keys.index_select(-2, idx[dev])
            layer.values[..., start : start + len(slots), :] = layer.values.index_select(-2, idx[dev])
    truncate(cache, start + len(slots))
