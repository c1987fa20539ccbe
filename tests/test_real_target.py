"""The real offline target, SmolLM2-135M-Instruct, loads through the registry and generates."""

from __future__ import annotations

import pytest
import torch

from treegraft_lab.models import load_pair

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pocket_target(smollm2_dir):
    return load_pair("smollm2-pocket", require_mid=False)


def test_pocket_target_loads_from_the_converted_folder(pocket_target, smollm2_dir):
    pair = pocket_target
    assert pair.name == "smollm2-pocket" and pair.target_id == str(smollm2_dir.resolve())
    assert type(pair.target).__name__ == "LlamaForCausalLM"
    assert pair.target.config.num_hidden_layers == 30 and len(pair.tokenizer) == 49152
    assert not pair.target.training and pair.target.dtype == pair.dtype
    assert pair.device.type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_pocket_target_answers_greedily_and_coherently(pocket_target):
    pair = pocket_target
    tok = pair.tokenizer
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    enc = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt",
                                  return_dict=True).to(pair.device)  # fmt: skip
    with torch.inference_mode():
        logits = pair.target(**enc).logits
        out = pair.target.generate(**enc, max_new_tokens=10, do_sample=False)
    assert torch.isfinite(logits.float()).all()
    text = tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    assert text.strip(), "empty answer"
    assert "Paris" in text, text
