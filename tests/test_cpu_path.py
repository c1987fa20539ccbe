"""The packed CPU forward path computes what the stock transformers path computes, its cache
behaves like transformers' DynamicCache, and dtype="auto" picks bf16 only on native-bf16 CPUs."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from treegraft_lab import cpu_path, kv, models
from treegraft_lab.tiny import tiny_model


def tree_mask(n: int, past: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    allowed = torch.ones(n, past + n, dtype=torch.bool)
    allowed[:, past:] = (torch.rand(n, n, generator=g) > 0.5).tril() | torch.eye(n, dtype=torch.bool)
    return allowed


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("n", [1, 7, 40])
def test_packed_tree_forward_matches_the_stock_forward(arch, n):
    stock = tiny_model(arch, vocab=64, layers=2, hidden=32)
    packed = copy.deepcopy(stock)
    assert cpu_path.install(packed) and cpu_path.installed(packed) and not cpu_path.installed(stock)
    ids = [(7 * i) % 64 for i in range(30 + n)]
    allowed = tree_mask(n, 30)
    positions = torch.arange(30, 30 + n)
    out = []
    for m in (stock, packed):
        cache = kv.new_cache(m)
        kv.prefill(m, cache, ids[:30])
        out.append(kv.masked_forward(m, cache, ids[30:], positions, allowed))
        assert kv.cache_len(cache) == 30 + n
    assert isinstance(kv.new_cache(packed).layers[0], cpu_path.GrowingLayer)
    torch.testing.assert_close(out[1], out[0], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("n", [1, 7, 40])
def test_packed_bf16_tree_forward_matches_the_stock_bf16_forward_to_bf16_rounding(n):
    stock = tiny_model("llama", vocab=64, layers=2, hidden=32).to(torch.bfloat16)
    packed = copy.deepcopy(stock)
    if not cpu_path.onednn_bf16():  # an AVX2-only CPU: the path says why and leaves the model stock
        assert "without oneDNN's bf16 kernels" in cpu_path.supported(packed)
        assert not cpu_path.install(packed) and not cpu_path.installed(packed)
        return  # no packed bf16 forward here to compare
    assert cpu_path.supported(packed) is None and cpu_path.install(packed)
    ids = [(7 * i) % 64 for i in range(30 + n)]
    out = []
    for m in (stock, packed):
        cache = kv.new_cache(m)
        kv.prefill(m, cache, ids[:30])
        out.append(kv.masked_forward(m, cache, ids[30:], torch.arange(30, 30 + n), tree_mask(n, 30)).float())
    torch.testing.assert_close(out[1], out[0], atol=0.05, rtol=0.02)


def test_hf_generate_and_prompt_lookup_give_the_same_tokens_on_both_paths():
    stock = tiny_model("llama", vocab=64, layers=2, hidden=32, scale=4.0)
    packed = copy.deepcopy(stock)
    cpu_path.install(packed)
    x = torch.tensor([[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6]])
    ref = stock.generate(x, max_new_tokens=20, do_sample=False, min_new_tokens=20)
    assert torch.equal(packed.generate(x, max_new_tokens=20, do_sample=False, min_new_tokens=20), ref)
    pld = packed.generate(x, max_new_tokens=20, do_sample=False, min_new_tokens=20, prompt_lookup_num_tokens=4,
                          **kv.forward_kwargs(packed, kv.new_cache(packed)))
    assert torch.equal(pld, ref)


def test_disabled_runs_the_stock_forwards_and_restores_the_packed_ones():
    model = tiny_model("llama", vocab=64, layers=2, hidden=32)
    cpu_path.install(model)
    attn = model.model.layers[0].self_attn
    packed_forward = attn.forward
    with cpu_path.disabled(model):
        assert not cpu_path.installed(model)
        assert "forward" not in attn.__dict__  # the class's (transformers') forward
        assert type(kv.new_cache(model).layers[0]) is not cpu_path.GrowingLayer
    assert cpu_path.installed(model) and attn.forward == packed_forward


def test_growing_cache_matches_dynamic_cache_through_growth_crop_and_keep():
    torch.manual_seed(0)
    grow, ref = cpu_path.GrowingLayer(), DynamicLayer()
    for n in (200, 100, 3):  # past the first 256-slot buffer: it must grow and keep its contents
        k, v = torch.randn(1, 2, n, 8), torch.randn(1, 2, n, 8)
        a, b = grow.update(k, v), ref.update(k, v)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    grow.crop(-50)
    ref.crop(-50)
    assert grow.get_seq_length() == ref.get_seq_length() == 253
    assert torch.equal(grow.keys, ref.keys)
    cache_g, cache_r = DynamicCache(), DynamicCache()
    cache_g.layers, cache_r.layers = [grow], [ref]
    kv.keep(cache_g, 240, [242, 250])
    kv.keep(cache_r, 240, [242, 250])
    assert torch.equal(grow.keys, ref.keys) and torch.equal(grow.values, ref.values)
    k, v = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8)
    assert torch.equal(grow.update(k, v)[0], ref.update(k, v)[0])


def test_the_packed_path_is_refused_where_it_does_not_apply(monkeypatch):
    model = tiny_model("llama", vocab=64, layers=2, hidden=32).to(torch.float16)
    assert "float32 and bfloat16 only" in cpu_path.supported(model)
    assert not cpu_path.install(model) and not cpu_path.installed(model)
    monkeypatch.setattr(cpu_path, "onednn_bf16", lambda: False)  # as on an AVX2-only CPU
    bf16 = tiny_model("llama", vocab=64, layers=2, hidden=32).to(torch.bfloat16)
    assert "without oneDNN's bf16 kernels" in cpu_path.supported(bf16)
    assert not cpu_path.install(bf16) and cpu_path.supported(bf16.float()) is None


def test_load_pair_runs_float32_cpu_pairs_on_the_packed_path(tiny_llama_dir, tiny_qwen3_dir):
    pair = models.load_pair(target=tiny_llama_dir, mid=tiny_qwen3_dir, dtype="float32")
    assert pair.forward_path == "treegraft-cpu"
    assert cpu_path.installed(pair.target) and cpu_path.installed(pair.mid)
    assert pair.dtype_reason == "float32: asked for"
    stock = models.load_pair(target=tiny_llama_dir, mid=tiny_qwen3_dir, dtype="float32", cpu_path=False)
    assert stock.forward_path == "stock" and not cpu_path.installed(stock.target)


@pytest.mark.parametrize("flags, want", [
    ({"avx2", "fma"}, torch.float32),                                     # AVX2-only (AMD EPYC here)
    ({"avx512f", "avx512bw", "avx512_vnni"}, torch.float32),             # AVX-512 without bf16
    ({"avx512f", "avx512_bf16"}, torch.bfloat16),
    ({"avx512f", "amx_bf16", "amx_tile"}, torch.bfloat16),
])
def test_auto_dtype_picks_bf16_only_on_cpus_with_native_bf16(monkeypatch, flags, want):
    monkeypatch.setattr(models, "cpu_flags", lambda: flags)
    models.cpu_supports_bf16.cache_clear()
    try:
        assert models.resolve_dtype("auto", torch.device("cpu")) == want
        dtype, why = models.auto_dtype_reason(torch.device("cpu"))
        assert dtype == want and ("no native bf16" in why) == (want == torch.float32)
    finally:
        models.cpu_supports_bf16.cache_clear()
