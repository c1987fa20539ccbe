"""Mid drafters derived from the target (int8, the target itself, a layer cut): loadable offline,
lossless in the decoder, refused where they cannot run."""

from __future__ import annotations

import pytest
import torch

from treegraft_lab import models
from treegraft_lab.baselines import autoregressive
from treegraft_lab.config import DecodeConfig
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.zoo import derived

PROMPT = "Write a Python function that returns the sum of a list of numbers."


def _mid_folder(tmp_path, kind: str, **settings):
    return derived.write_spec(tmp_path / f"{kind}-mid", kind, **settings)


def _greedy_same(pair, prompt, n: int = 12) -> tuple[list[int], list[int]]:
    cfg = DecodeConfig(schedule="mid", clock="a100-paper", temperature=0.0)
    got = TreeGraftDecoder(pair, cfg).generate(prompt, max_new_tokens=n).token_ids
    return got, autoregressive(pair, prompt, max_new_tokens=n).token_ids


def test_every_derived_mid_is_a_registered_offline_pair_of_the_pocket_target():
    for name in models.DERIVED_MIDS:
        pair = name.removesuffix("-mid")
        assert models.PAIRS[pair] == (models.POCKET_TARGET, name)
        spec = derived.read_spec(models.resolve_model_path(name))  # the committed folder, no hub
        assert spec["kind"] in derived.KINDS


def test_the_int8_mid_holds_int8_linear_layers_and_differs_from_the_target(tiny_llama_dir, tmp_path):
    pair = models.load_pair(target=tiny_llama_dir, mid=_mid_folder(tmp_path, "int8"), dtype="float32")
    quantised = [m for m in pair.mid.modules() if type(m).__module__.startswith("torch.ao.nn.quantized.dynamic")]
    layers = pair.target.config.num_hidden_layers
    assert len(quantised) == len(derived.INT8_PROJECTIONS) * layers
    floats = [n for n, m in pair.mid.named_modules() if isinstance(m, torch.nn.Linear)]
    assert sorted(floats) == ["lm_head", *[f"model.layers.{i}.mlp.down_proj" for i in range(layers)]]
    ids = pair.tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        a, b = pair.target(ids).logits, pair.mid(ids).logits
    assert a.shape == b.shape and not torch.equal(a, b)
    assert (a - b).abs().max() < 0.1 * a.abs().max()  # quantised weights: close, not equal


@pytest.mark.parametrize("kind,settings", [("int8", {}), ("self", {}), ("layers", {"layers": [1]})])
def test_a_derived_mid_decodes_exactly_as_plain_greedy_decoding(tiny_llama_dir, tmp_path, kind, settings):
    pair = models.load_pair(target=tiny_llama_dir, mid=_mid_folder(tmp_path, kind, **settings), dtype="float32")
    got, ref = _greedy_same(pair, PROMPT)
    assert got == ref


def test_an_int8_mid_counts_as_large_as_its_target_so_a_profile_may_find_it_as_dear(tiny_llama_dir, tmp_path):
    from treegraft_lab import measure

    pair = models.load_pair(target=tiny_llama_dir, mid=_mid_folder(tmp_path, "int8"), dtype="float32")
    assert measure.compute_params(pair.mid) == measure.compute_params(pair.target)  # packed int8 weights counted
    assert not measure.mid_is_smaller(pair)  # no "a smaller mid must be cheaper" check for quantised self-speculation


def test_the_self_mid_agrees_with_the_target_everywhere(tiny_llama_dir, tmp_path):
    pair = models.load_pair(target=tiny_llama_dir, mid=_mid_folder(tmp_path, "self"), dtype="float32")
    assert pair.mid is not pair.target
    ids = pair.tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(pair.target(ids).logits, pair.mid(ids).logits, atol=1e-4)


def test_a_layer_cut_keeps_the_named_target_layers(tiny_llama_dir, tmp_path):
    pair = models.load_pair(target=tiny_llama_dir, mid=_mid_folder(tmp_path, "layers", layers=[1]), dtype="float32",
                            cpu_path=False)
    assert pair.mid.config.num_hidden_layers == 1
    assert torch.equal(pair.mid.model.layers[0].mlp.up_proj.weight, pair.target.model.layers[1].mlp.up_proj.weight)


def test_the_int8_mid_is_refused_off_the_cpu_before_any_model_loads(tiny_llama_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(models, "resolve_device", lambda d="auto": torch.device("cuda"))
    monkeypatch.setattr(models, "_load_causal_lm", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(TreeGraftError, match="CPU only.*device='cpu'"):
        models.load_pair(target=tiny_llama_dir, mid=_mid_folder(tmp_path, "int8"))


def test_a_broken_derived_mid_config_is_refused_in_words(tiny_llama_dir, tmp_path):
    folder = _mid_folder(tmp_path, "layers", layers=[])
    with pytest.raises(TreeGraftError, match="non-empty list of target layer"):
        models.load_pair(target=tiny_llama_dir, mid=folder)
    folder = _mid_folder(tmp_path, "layers", layers=[7])
    with pytest.raises(TreeGraftError, match=r"layers \[7\] do not fit a target with 2 layers"):
        models.load_pair(target=tiny_llama_dir, mid=folder, dtype="float32")


def test_the_real_int8_pair_decodes_losslessly_and_drafts_what_the_target_says():
    pair = models.load_pair("smollm2-int8", device="cpu", dtype="float32")
    cfg = DecodeConfig(schedule="mid", clock="a100-paper", temperature=0.0)
    gen = TreeGraftDecoder(pair, cfg).generate(PROMPT, max_new_tokens=10)
    assert gen.token_ids == autoregressive(pair, PROMPT, max_new_tokens=10).token_ids
    assert gen.stats["accepted_per_round"] >= 2  # a near-copy of the target: most drafted tokens pass


@pytest.mark.parametrize("name", list(models.DERIVED_MIDS))
def test_every_derived_mid_has_a_measured_card_with_its_agreement_per_category(name):
    import json

    folder = models.MODELS_DIR / name
    card = json.loads((folder / "card.json").read_text())
    spec = derived.read_spec(folder)
    assert card["kind"] == spec["kind"] and card["dtype"] == "float32"
    assert set(card["agreement_per_category"]) == set(card["positions_per_category"]) and card["positions"] > 0
    pooled = sum(card["agreement_per_category"][c] * card["positions_per_category"][c] for c in card["positions_per_category"])
    assert pooled / card["positions"] == pytest.approx(card["agreement"])
    text = (folder / "MODEL_CARD.md").read_text()
    assert f"treegraft-lab zoo card {name.removesuffix('-mid')}" in text and f"**{card['agreement']:.3f}**" in text
    if spec["kind"] == "self":
        assert card["agreement"] == 1.0
