"""Tiny randomly initialised models (the paper's architectures): stand-ins for the decoder's tests and
the workbench's tiny runs (`workbench.tiny_run`), decoded in a second on any CPU."""

from __future__ import annotations

import types

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config


class StubTokenizer:
    """Just enough of a tokenizer for token-id prompts on a small vocabulary."""

    chat_template = None
    eos_token_id = None

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab

    def __len__(self) -> int:
        return self.vocab

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return " ".join(f"t{int(i)}" for i in ids)

    def __call__(self, text: str):
        return {"input_ids": [hash(w) % self.vocab for w in text.split()]}


def tiny_model(arch: str = "llama", vocab: int = 64, layers: int = 2, hidden: int = 32, seed: int = 0,
               window: int = 256, scale: float = 1.0):
    """A random `arch` model in float32; `scale` sharpens its output distribution."""
    common = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=vocab,
                  max_position_embeddings=window, tie_word_embeddings=False,
                  bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if arch == "qwen3":
        common["head_dim"] = hidden // 4
    cfg = (Qwen3Config if arch == "qwen3" else LlamaConfig)(**common)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="sdpa").eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    model.generation_config.eos_token_id = None
    return model


def tiny_pair(arch: str = "llama", vocab: int = 64, mid_seed: int = 1, scale: float = 1.0, window: int = 256):
    target = tiny_model(arch, vocab, layers=2, seed=0, scale=scale, window=window)
    mid = tiny_model(arch, vocab, layers=1, seed=mid_seed, scale=scale, window=window)
    return types.SimpleNamespace(name=f"tiny-{arch}", tokenizer=StubTokenizer(vocab), target=target, mid=mid,
                                 device=target.device, dtype=torch.float32)
