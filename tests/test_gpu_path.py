"""The GPU path, checked on the CPU: device mix-ups the `meta` device exposes, the loading policy
computed from sizes, the folded grouped-query attention against stock SDPA, the head only over the
rows that need logits, float32 logits, and the attention kernels a tree mask needs.

What only a GPU can show (a CPU tensor indexed with a CUDA index in `replay`, CUDA timings, the
placement on real GPUs) is in `scripts/device_check.sh`.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from treegraft_lab import kv
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.tiny import pocket_folder, tiny_model, tiny_pair
from treegraft_lab.zoo import drafter as zd


def meta_target():
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=64, tie_word_embeddings=True)
    with torch.device("meta"):
        return LlamaForCausalLM(cfg).eval()


# ---------------------------------------------------------------------------- device mix-ups


def test_a_target_off_the_cpu_through_the_fingerprint_path_gives_one_clear_line(tmp_path):
    target = meta_target()  # weights off the CPU: `.numpy()` on them raised a TypeError no caller caught
    folder = pocket_folder(target, tmp_path / "pocket")
    with pytest.raises(TreeGraftError, match="meta device"):
        zd.load_drafter(target, folder)


def test_the_pocket_drafter_is_built_on_the_targets_device_adapters_and_head_included(tmp_path):
    from safetensors.torch import load_file

    target = meta_target()
    folder = pocket_folder(target, tmp_path / "pocket")
    w = load_file(str(folder / zd.WEIGHTS_NAME))  # read on the CPU, as load_drafter does
    drafter = zd.build_drafter_skeleton(target, [0])
    zd.apply_adapters(drafter, w, 1.0)
    zd.set_sub_vocab_head(drafter, w["head.token_ids"], w["head.bias"])
    where = {n: t.device.type for n, t in [*drafter.named_parameters(), *drafter.named_buffers()]}
    where["lm_head.token_ids"] = drafter.lm_head.token_ids.device.type
    assert set(where.values()) == {"meta"}, {n: d for n, d in where.items() if d != "meta"}


def test_a_pocket_drafter_from_synthetic_adapters_decodes_losslessly(tmp_path):
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder

    pair = tiny_pair("llama", vocab=64, scale=4.0)
    pair.mid = zd.load_drafter(pair.target, pocket_folder(pair.target, tmp_path / "pocket", sub=32))
    ids = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 3]
    ref = pair.target.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids):].tolist()
    assert TreeGraftDecoder(pair, DecodeConfig(schedule="10101", clock="a100-paper")).generate(ids, max_new_tokens=12).token_ids == ref


# ---------------------------------------------------------------------------- the loading policy

GiB = 1024**3
G80 = 80 * GiB


def test_a_target_that_fits_one_gpu_stays_on_it_with_the_mid_beside_it():
    from treegraft_lab.models import Placement, plan_placement

    p = plan_placement(int(65.5 * GiB), int(1.2 * GiB), [G80, G80], target_reserve=2 * GiB, mid_reserve=GiB)
    assert p == Placement({"": 0}, None, 0, p.note) and "alone" in p.note


def test_a_target_is_spread_only_when_it_must_be_and_the_mid_keeps_one_gpu():
    from treegraft_lab.models import plan_placement

    # 32B target + 8B mid: 82 GB do not fit one 80 GB GPU; the mid keeps GPU 0, the target spills onto GPU 1
    p = plan_placement(int(65.5 * GiB), int(16.4 * GiB), [G80, G80], target_reserve=2 * GiB, mid_reserve=GiB)
    assert p.target_map == "sequential" and p.mid_gpu == 0 and "cpu" not in p.max_memory
    assert p.max_memory[0] == G80 - 2 * GiB - int(16.4 * GiB) - GiB - 2 * GiB  # headroom, mid + its cache, target reserve
    assert sum(p.max_memory.values()) >= 65.5 * GiB


def test_a_pair_that_does_not_fit_is_refused_in_one_line_naming_the_sizes():
    from treegraft_lab.models import plan_placement

    with pytest.raises(TreeGraftError) as e:
        plan_placement(int(65.5 * GiB), int(16.4 * GiB), [G80], target_reserve=2 * GiB, mid_reserve=GiB)
    msg = str(e.value)
    assert "\n" not in msg and "65.5 GiB" in msg and "16.4 GiB" in msg and "--allow-offload" in msg


def test_offload_only_when_asked_and_the_mid_gpu_override():
    from treegraft_lab.models import plan_placement

    p = plan_placement(int(65.5 * GiB), int(16.4 * GiB), [G80], allow_offload=True, cpu_bytes=100 * GiB)
    assert p.max_memory["cpu"] == 100 * GiB
    p = plan_placement(int(30 * GiB), int(16 * GiB), [G80, G80], mid_gpu=1)
    assert p.target_map == {"": 0} and p.mid_gpu == 1
    with pytest.raises(TreeGraftError, match="does not fit on GPU 0"):
        plan_placement(GiB, int(90 * GiB), [G80])


def test_cuda_loads_are_pinned_to_one_gpu_unless_the_plan_spreads_them():
    from treegraft_lab.models import load_kwargs

    assert load_kwargs(torch.device("cuda"), torch.bfloat16)["device_map"] == {"": 0}  # never a balanced "auto"
    kw = load_kwargs(torch.device("cuda"), torch.bfloat16, "sequential", {0: 10, 1: 20})
    assert kw["device_map"] == "sequential" and kw["max_memory"] == {0: 10, 1: 20}


# ---------------------------------------------------------------------------- the hot path


def tree_logits(model, ids: list[int], tokens: list[int], parent: list[int]) -> torch.Tensor:
    cache = kv.new_cache(model)
    kv.prefill(model, cache, ids)
    n, c = len(tokens), len(ids)
    allowed = torch.zeros(n, c + n, dtype=torch.bool)
    allowed[:, :c] = True
    depth = []
    for i, p in enumerate(parent):
        allowed[i, c + i] = True
        j = p
        while j >= 0:
            allowed[i, c + j] = True
            j = parent[j]
        depth.append(0 if p < 0 else depth[p] + 1)
    return kv.masked_forward(model, cache, tokens, torch.tensor([c + d for d in depth]), allowed).float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_folded_grouped_query_attention_matches_stock_sdpa(dtype):
    from transformers import AutoModelForCausalLM

    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8,
                      num_key_value_heads=2, vocab_size=64, tie_word_embeddings=False)
    torch.manual_seed(0)
    stock = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa").eval()
    folded = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa").eval()
    folded.load_state_dict(stock.state_dict())
    kv.use_folded_attention(folded)
    assert folded.config._attn_implementation == kv.FOLDED
    ids = torch.randint(0, 64, (40,), generator=torch.Generator().manual_seed(1)).tolist()
    parent = [-1, 0, 0, 1, 1, 2, 3, 3, 6]
    tokens = [3, 4, 5, 6, 7, 8, 9, 10, 11]
    a, b = tree_logits(stock, ids, tokens, parent), tree_logits(folded, ids, tokens, parent)
    tol = 1e-5 if dtype == torch.float32 else 0.05
    assert (a - b).abs().max() <= tol and torch.equal(a.argmax(-1), b.argmax(-1))


def test_the_mid_drafter_runs_its_head_only_over_the_tree_rows():
    from treegraft_lab.drafters import ModelDrafter
    from treegraft_lab.tree import SMALL, DraftTree

    mid = tiny_model("llama", vocab=64, layers=1)
    rows = []
    mid.get_output_embeddings().register_forward_hook(lambda m, i, o: rows.append(i[0].shape[-2]))
    d = ModelDrafter(mid)
    d.pending = list(range(1, 40))  # a prompt not forwarded yet: it goes in front of the tree
    tree = DraftTree.start(5)
    tree.add_child(0, 6, -0.1, SMALL, 1)
    d.score(tree, [0, 1])
    assert rows == [2]


def test_attention_kernels_that_ignore_a_tree_mask_are_refused():
    model = tiny_model("llama")
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(TreeGraftError, match="sdpa"):
        kv.new_cache(model)


def test_float32_logits_serve_verification_and_generate_alike():
    from treegraft_lab.verify import float32_head

    model = tiny_model("llama", scale=3.0).to(torch.bfloat16)
    assert float32_head(model)
    out = model(input_ids=torch.tensor([[1, 2, 3]]))
    assert out.logits.dtype == torch.float32
    g = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=4, do_sample=False, output_logits=True,
                       return_dict_in_generate=True)
    assert g.logits[0].dtype == torch.float32


def test_a_bf16_logit_gap_is_read_in_rounding_steps():
    from treegraft_lab.commands.check_lossless import rounding_step

    assert rounding_step(20.0, torch.bfloat16) == 0.125 and rounding_step(20.0, torch.float32) == 2.0**-19


def efficient_layout(out: torch.Tensor) -> torch.Tensor:
    """`out` [b, heads, m, d] in the memory layout CUDA's memory-efficient SDPA kernel returns:
    [b, m, heads, d] in memory, transposed back (torch's `_meta_registrations`:
    `meta__scaled_dot_product_efficient_attention`)."""
    b, h, m, d = out.shape
    return torch.empty(b, m, h, d, dtype=out.dtype).transpose(1, 2).copy_(out)


def test_folded_attention_takes_the_memory_efficient_kernels_transposed_output(monkeypatch):
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8,
                      num_key_value_heads=2, vocab_size=64, tie_word_embeddings=False)
    torch.manual_seed(0)
    stock = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    folded = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    folded.load_state_dict(stock.state_dict())
    kv.use_folded_attention(folded)
    ids = torch.randint(0, 64, (30,), generator=torch.Generator().manual_seed(2)).tolist()
    parent, tokens = [-1, 0, 0, 1, 2, 2], [3, 4, 5, 6, 7, 8]
    want = tree_logits(stock, ids, tokens, parent)
    sdpa, layouts = F.scaled_dot_product_attention, []

    def efficient_sdpa(*args, **kwargs):
        out = efficient_layout(sdpa(*args, **kwargs))
        layouts.append(out.is_contiguous())
        return out

    monkeypatch.setattr(F, "scaled_dot_product_attention", efficient_sdpa)
    got = tree_logits(folded, ids, tokens, parent)
    assert layouts and not any(layouts)  # every folded call saw the transposed layout
    assert (want - got).abs().max() <= 1e-5


class FixedLogits:
    """A target stand-in whose next-token logits are always `row` (in `row`'s dtype)."""

    def __init__(self, row: torch.Tensor) -> None:
        self.row = row

    def __call__(self, input_ids, logits_to_keep=1):
        from types import SimpleNamespace

        return SimpleNamespace(logits=self.row[None, None])


@pytest.mark.parametrize("pair_dtype, logit_dtype, gap, numerics", [
    (torch.bfloat16, torch.float32, 0.25, True),    # --float32-logits on a bf16 pair: 2 bf16 steps at 20
    (torch.bfloat16, torch.float32, 1.0, False),    # 8 bf16 steps: beyond rounding
    (torch.bfloat16, torch.bfloat16, 0.25, True),
    (torch.float32, torch.float32, 0.25, False),    # a float32 pair: any mismatch is a bug
])
def test_a_divergence_is_judged_by_the_pairs_dtype_not_the_logits(pair_dtype, logit_dtype, gap, numerics):
    from types import SimpleNamespace

    from treegraft_lab.commands.check_lossless import divergence

    row = torch.zeros(8, dtype=logit_dtype)
    row[3], row[5] = 20.0, 20.0 - gap  # the reference's token 3 leads ours, 5, by `gap`
    pair = SimpleNamespace(target=FixedLogits(row), device=torch.device("cpu"), dtype=pair_dtype)
    d = divergence(pair, [1, 2], [7, 5], [7, 3])
    assert (d["position"], d["ours"], d["reference"]) == (1, 5, 3)
    assert d["logit_gap"] == pytest.approx(gap) and d["numerics"] is numerics
    assert d["step"] == pytest.approx(0.125 if pair_dtype == torch.bfloat16 else 2.0**-19)
