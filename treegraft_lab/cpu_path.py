"""A faster CPU forward path for stock transformers Llama / Qwen3 models, and a KV cache that
does not copy itself.

`install(model)` leaves the model a standard `transformers` model (HF `generate`, the project's
tree forwards and every module keep working) and swaps, on each decoder layer, three forwards
for leaner ones that compute the same function:

- products: the weights are fused (q|k|v, gate|up) and reordered ONCE for oneDNN
  (`torch.ops.mkldnn._reorder_linear_weight`); every product then runs
  `torch.ops.mkldnn._linear_pointwise` on the packed copy, instead of MKL re-packing the weight
  on each call. The output head gets a packed copy of its (tied) weight too;
- attention: grouped-query attention without copying key/value heads (the queries of a KV group
  are stacked along the query axis and the mask repeated), one `scaled_dot_product_attention`;
- norms: torch's fused `F.rms_norm`.

The original parameters stay in place (state dict, tied embedding, CUDA moves), so `install`
costs one extra copy of the weights in memory. Float32 and bfloat16 (oneDNN's bf16 products: AMX
or avx512_bf16 where the CPU has them; attention then runs `scaled_dot_product_attention`): the
packed products compute the same sums in another order, so results differ from the stock path by
rounding (~1e-5 in float32), as any other GEMM kernel would; both the tree decoder and plain
decoding run on the same path. On the AVX-512 CPU measured, a packed product gave each row the same
result whatever the number of rows, but in bfloat16 a tree forward still drifts from one-token decoding elsewhere
(attention, rounding of activations), enough to change a greedy token now and then:
docs/performance.md, "The forward cost curve per dtype and path".
`GrowingCache` is a `DynamicCache` whose layers write into preallocated buffers that double when
full, instead of concatenating the whole cache on every forward.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

DTYPES = (torch.float32, torch.bfloat16)  # what oneDNN's packed linear runs here
PACK_ROWS = 16  # the batch size oneDNN's weight layout is chosen for (measured best 1..64 rows)
_INSTALLED = "_treegraft_cpu_path"


def supported(model) -> str | None:
    """None when `install` applies to `model`, else the reason it does not."""
    if model.device.type != "cpu":
        return f"on {model.device.type}, not the CPU"
    if model.dtype not in DTYPES:
        return f"dtype {model.dtype} (the packed path runs float32 and bfloat16 only)"
    if not hasattr(torch.ops.mkldnn, "_linear_pointwise") or not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN linear"
    if model.dtype == torch.bfloat16 and not onednn_bf16():
        return ("bfloat16 on a CPU without oneDNN's bf16 kernels (they need avx512bw/vl/dq or "
                "avx_ne_convert): the stock path runs it")
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not layers:
        return "no decoder layers found (model.model.layers)"
    for layer in layers:
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if attn is None or mlp is None or not all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")):
            return f"layer type {type(layer).__name__} is not a Llama/Qwen3-style layer"
        if not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj")):
            return f"MLP type {type(mlp).__name__} is not a gated MLP"
        if not all(isinstance(getattr(m, n), torch.nn.Linear) for m, n in [*((attn, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj")), *((mlp, p) for p in ("gate_proj", "up_proj", "down_proj"))]):
            return "quantised (not float) linear layers: they run their own kernels"
        if getattr(mlp.config, "hidden_act", "silu") != "silu":
            return f"activation {mlp.config.hidden_act!r} (the packed MLP assumes silu)"
        if getattr(attn, "sliding_window", None):
            return "sliding-window attention"
    return None


def onednn_bf16() -> bool:
    """True when oneDNN's packed bf16 products run on this CPU (AVX-512 bw/vl/dq or avx_ne_convert)."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(check()) if check is not None else False


def installed(model) -> bool:
    return bool(getattr(model, _INSTALLED, False))


# ---------------------------------------------------------------------------- packed products


def pack(weight: torch.Tensor) -> torch.Tensor:
    """A weight [out, in] reordered once into oneDNN's layout for `linear`."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), PACK_ROWS)


def linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, W, b)` with W packed by `pack`."""
    out = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.shape[-1]), packed, bias, "none", [], "")
    return out.view(*x.shape[:-1], out.shape[-1])


def _cat_bias(*mods) -> torch.Tensor | None:
    if all(m.bias is None for m in mods):
        return None
    return torch.cat([m.bias if m.bias is not None else torch.zeros(m.out_features) for m in mods]).detach()


# ---------------------------------------------------------------------------- lean forwards


def _rms_forward(self, x: torch.Tensor) -> torch.Tensor:
    """RMSNorm as x / sqrt(mean(x^2) + eps) * w, with the mean from `vector_norm` (one fast
    reduction; `F.rms_norm` and `pow().mean()` cost 5-15x more on a 1-token row here)."""
    ms = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().div_(x.shape[-1])
    return x * ms.add_(self.variance_epsilon).rsqrt_() * self.weight


def _mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    gate, up = linear(x, self._gate_up, self._gate_up_bias).split(self._inter, dim=-1)
    return linear(F.silu(gate) * up, self._down, self.down_proj.bias)


def _head_forward(self, x: torch.Tensor) -> torch.Tensor:
    return linear(x, self._packed, self.bias)


_MASKS: list = [None, None, None]  # (mask, repeat, repeated): built once per forward, not per layer


def _repeated(mask: torch.Tensor, rep: int, n: int, length: int) -> torch.Tensor:
    """`mask` [1, 1, n, L] as an additive float [rep * n, L], computed once for all layers."""
    if _MASKS[0] is mask and _MASKS[1] == rep:
        return _MASKS[2]
    m = mask.expand(1, 1, n, length)[0, 0]
    if m.dtype == torch.bool:
        m = torch.zeros(m.shape, dtype=torch.float32, device=m.device).masked_fill_(~m, torch.finfo(torch.float32).min)
    _MASKS[:] = [mask, rep, m.repeat(rep, 1)]
    return _MASKS[2]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """Attention of q [1, H, n, d] over k, v [1, KV, L, d]: [1, H, n, d], without repeating k/v.

    `mask` is None (causal, bottom-right aligned) or [1, 1, n, L] (bool: allowed, or additive float).
    Few query rows (a decoding step, a draft tree): the queries of each KV group are stacked and
    attention is three batched products; many (a prefill): `scaled_dot_product_attention`.
    """
    b, heads, n, d = q.shape
    groups, length = k.shape[1], k.shape[2]
    rep = heads // groups
    if mask is None and n > 1:
        mask = torch.ones(n, length, dtype=torch.bool, device=q.device).tril(length - n)[None, None]
    if b == 1 and rep * n <= 64 and (mask is None or mask.shape[:2] == (1, 1)) and q.dtype == torch.float32:
        qs = q.reshape(groups, rep * n, d)  # rows: (r, i) for query head g*rep + r, token i
        kt = k[0].transpose(1, 2)
        if mask is None:
            s = torch.bmm(qs, kt).mul_(scale)
        elif n == 1:
            s = torch.baddbmm(_repeated(mask, rep, n, length), qs, kt, alpha=scale)
        else:  # measured faster than baddbmm from a few rows on
            s = torch.bmm(qs, kt).mul_(scale).add_(_repeated(mask, rep, n, length))
        return torch.bmm(s.softmax(-1), v[0]).view(b, heads, n, d)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=rep > 1)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x [b, n, heads, d] (cos, sin [b, n, d]): HF's rotate-half form."""
    half = x.shape[-1] // 2
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _attention(self, hidden_states, position_embeddings, attention_mask, cache) -> torch.Tensor:
    """Self-attention of a Llama/Qwen3 attention module `self`, output projection included."""
    b, n, _ = hidden_states.shape
    d = self.head_dim
    nq, nk, nv = self._qkv_sizes
    qkv = linear(hidden_states, self._qkv, self._qkv_bias)
    cos, sin = position_embeddings
    if hasattr(self, "q_norm"):  # Qwen3: norms on the head dimension before the rotation
        q = _rope(self.q_norm(qkv[..., :nq].view(b, n, -1, d)), cos, sin)
        k = _rope(self.k_norm(qkv[..., nq : nq + nk].view(b, n, -1, d)), cos, sin)
    else:  # q and k rotated together (one set of ops for both)
        q, k = _rope(qkv[..., : nq + nk].view(b, n, -1, d), cos, sin).split([nq // d, nk // d], dim=2)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), qkv[..., nq + nk :].view(b, n, -1, d).transpose(1, 2)
    if cache is not None:
        k, v = cache.update(k, v, self.layer_idx)
    out = _attend(q, k, v, attention_mask, self.scaling).transpose(1, 2).reshape(b, n, -1)
    return linear(out, self.o_proj._packed, self.o_proj.bias)


def _attn_forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None,
                  past_key_values=None, **kwargs):
    cache = cache if cache is not None else past_key_values
    return _attention(self, hidden_states, position_embeddings, attention_mask, cache), None


def _layer_forward(self, hidden_states, attention_mask=None, position_ids=None, cache=None, past_key_values=None,
                   use_cache=False, position_embeddings=None, **kwargs):
    """A decoder layer in one function: no module calls between its norms, attention and MLP."""
    cache = cache if cache is not None else past_key_values
    h = _rms_forward(self.input_layernorm, hidden_states)
    hidden_states = hidden_states + _attention(self.self_attn, h, position_embeddings, attention_mask, cache)
    h = _rms_forward(self.post_attention_layernorm, hidden_states)
    return hidden_states + _mlp_forward(self.mlp, h)


# ---------------------------------------------------------------------------- install


@torch.no_grad()
def install(model) -> bool:
    """Swap in the lean forwards on a supported CPU float32 model (in place). Returns whether it
    did; `supported(model)` says why not. Idempotent."""
    if installed(model):
        return True
    if supported(model) is not None:
        return False
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        projs = (attn.q_proj, attn.k_proj, attn.v_proj)
        attn._qkv = pack(torch.cat([p.weight for p in projs]))
        attn._qkv_bias = _cat_bias(*projs)
        attn._qkv_sizes = [p.out_features for p in projs]
        attn.forward = types.MethodType(_attn_forward, attn)
        attn.o_proj._packed = pack(attn.o_proj.weight)
        attn.o_proj.forward = types.MethodType(_head_forward, attn.o_proj)
        mlp._gate_up = pack(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
        mlp._gate_up_bias = _cat_bias(mlp.gate_proj, mlp.up_proj)
        mlp._inter = mlp.gate_proj.out_features
        mlp._down = pack(mlp.down_proj.weight)
        mlp.forward = types.MethodType(_mlp_forward, mlp)
        layer.forward = types.MethodType(_layer_forward, layer)
        for norm in (layer.input_layernorm, layer.post_attention_layernorm,
                     getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)):
            if norm is not None and hasattr(norm, "variance_epsilon"):
                norm.forward = types.MethodType(_rms_forward, norm)
    norm = getattr(model.model, "norm", None)
    if norm is not None and hasattr(norm, "variance_epsilon"):
        norm.forward = types.MethodType(_rms_forward, norm)
    head = model.get_output_embeddings()
    if isinstance(head, torch.nn.Linear):
        head._packed = pack(head.weight)
        head.forward = types.MethodType(_head_forward, head)
    elif hasattr(head, "sub_logits"):  # the pocket drafter's sub-vocabulary head
        head._packed = pack(head.weight)
        head.sub_logits = types.MethodType(_head_forward, head)
    setattr(model, _INSTALLED, True)
    return True


_LEAN = (_rms_forward, _mlp_forward, _head_forward, _attn_forward, _layer_forward)


@contextmanager
def disabled(model) -> Iterator:
    """Run `model` on the stock transformers forwards (and a stock cache) inside the block: the
    reference for "HF as shipped" in benchmarks, on the same weights."""
    saved = []
    for mod in model.modules():
        for name in ("forward", "sub_logits"):
            fn = mod.__dict__.get(name)
            if isinstance(fn, types.MethodType) and fn.__func__ in _LEAN:
                saved.append((mod, name, mod.__dict__.pop(name)))
    was = installed(model)
    setattr(model, _INSTALLED, False)
    try:
        yield model
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
        setattr(model, _INSTALLED, was)


# ---------------------------------------------------------------------------- the cache


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` over preallocated buffers: `keys`/`values` are views of the used length;
    an update writes in place and the buffers double when full (no per-forward concatenation)."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._k = self._v = None
        self._len = 0

    def _grow(self, need: int, k: torch.Tensor, v: torch.Tensor) -> None:
        cap = max(256, need, 2 * (0 if self._k is None else self._k.shape[-2]))
        nk = k.new_empty(*k.shape[:-2], cap, k.shape[-1])
        nv = v.new_empty(*v.shape[:-2], cap, v.shape[-1])
        if self._len:
            nk[..., : self._len, :] = self._k[..., : self._len, :]
            nv[..., : self._len, :] = self._v[..., : self._len, :]
        self._k, self._v = nk, nv

    def _view(self) -> None:
        self.keys = self._k[..., : self._len, :]
        self.values = self._v[..., : self._len, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        if self._k is None or self._len + n > self._k.shape[-2]:
            self._grow(self._len + n, key_states, value_states)
        self._k[..., self._len : self._len + n, :] = key_states
        self._v[..., self._len : self._len + n, :] = value_states
        self._len += n
        self._view()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._len if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count: the number of positions to drop")
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        self._len = max(0, self._len + tokens_to_remove)
        self._view()

    def reset(self) -> None:
        super().reset()
        self._k = self._v = None
        self._len = 0

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("GrowingLayer serves batch size 1")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise NotImplementedError("GrowingLayer serves batch size 1")


def growing_cache(model) -> DynamicCache:
    """A `DynamicCache` for `model` whose full-attention layers are `GrowingLayer`s."""
    cache = DynamicCache(config=model.config)
    if cache.layers and all(type(layer) is DynamicLayer for layer in cache.layers):
        cache.layers = [GrowingLayer() for _ in cache.layers]
    return cache
