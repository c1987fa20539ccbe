"""Tiny randomly initialised models (the paper's architectures): stand-ins for the decoder's tests and
the workbench's tiny runs (`workbench.tiny_run`), decoded in a second on any CPU."""

from __future__ import annotations

import types
import zlib

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
        # a stable hash (not Python's, which differs from process to process): Ray workers tokenize alike
        return {"input_ids": [zlib.crc32(w.encode()) % self.vocab for w in text.split()]}


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


CHARS = [chr(c) for c in range(32, 127)] + ["\n"]


def noisy_pair(seed: int = 3, noise: float = 0.01):
    """A tiny target with a slightly perturbed copy as the mid drafter: acceptance varies by schedule."""
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    pair.mid = tiny_model("llama", 64, layers=2, seed=0, scale=4.0)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in pair.mid.parameters():
            p.add_(noise * torch.randn_like(p))
    return pair


def char_tokenizer():
    """A character-level fast tokenizer (printable ASCII, newline, [UNK]), built offline."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{c: i + 1 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def save_tiny_pair(folder, arch: str = "llama", dtype: torch.dtype = torch.float32, heads: int = 4, kv_heads: int = 2,
                   head_dim: int = 8, layers: tuple[int, int] = (2, 1), vocab: int = 128, window: int = 4096,
                   scale: float = 3.0):
    """Save a tiny random pair as `folder/target` and `folder/mid` (config, weights, one character
    tokenizer): a pair folder `load_pair(target=..., mid=...)` and TREEGRAFT_PAIR accept.
    `heads`/`kv_heads`/`head_dim` give the attention's shape (the hidden size is heads x head_dim)."""
    from pathlib import Path

    folder = Path(folder)
    tok = char_tokenizer()
    for name, n, seed in (("target", layers[0], 0), ("mid", layers[1], 1)):
        hidden = heads * head_dim
        common = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=n, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, head_dim=head_dim, vocab_size=max(vocab, len(tok)),
                      max_position_embeddings=window, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                      pad_token_id=None)
        cfg = (Qwen3Config if arch == "qwen3" else LlamaConfig)(**common)
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        with torch.no_grad():
            model.lm_head.weight.mul_(scale)
        model.generation_config.eos_token_id = None
        model.to(dtype).save_pretrained(folder / name)
        tok.save_pretrained(folder / name)
    return folder


def pocket_folder(target, folder, layers: tuple[int, ...] = (0,), rank: int = 2, sub: int = 16, seed: int = 0):
    """Write synthetic pocket-drafter files (random low-rank adapters, norms, a sub-vocabulary head)
    for `target` into `folder`, in the format `treegraft_lab.zoo.drafter.load_drafter` reads."""
    import json
    from pathlib import Path

    from safetensors.torch import save_file

    from treegraft_lab.zoo import drafter as zd

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = target.config
    g = torch.Generator().manual_seed(seed)
    w: dict[str, torch.Tensor] = {}
    for j, i in enumerate(layers):
        layer = target.model.layers[i]
        for name in zd.PROJECTIONS:
            mod = layer.self_attn if name in ("q_proj", "k_proj", "v_proj", "o_proj") else layer.mlp
            out_f, in_f = getattr(mod, name).weight.shape
            w[f"layers.{j}.{name}.lora_A"] = torch.randn(rank, in_f, generator=g) * 0.02
            w[f"layers.{j}.{name}.lora_B"] = torch.randn(out_f, rank, generator=g) * 0.02
        for norm in ("input_layernorm", "post_attention_layernorm"):
            w[f"layers.{j}.{norm}.weight"] = 1 + 0.01 * torch.randn(cfg.hidden_size, generator=g)
    w["norm.weight"] = torch.ones(cfg.hidden_size)
    w["head.token_ids"] = torch.randperm(cfg.vocab_size, generator=g)[: min(sub, cfg.vocab_size)].sort().values
    w["head.bias"] = 0.1 * torch.randn(len(w["head.token_ids"]), generator=g)
    save_file({k: v.contiguous() for k, v in w.items()}, str(folder / zd.WEIGHTS_NAME))
    fp = "meta" if target.model.embed_tokens.weight.device.type == "meta" else zd.target_fingerprint(target)
    (folder / zd.CONFIG_NAME).write_text(json.dumps({
        "format": zd.FORMAT, "layers": list(layers), "lora_scale": 1.0, "lora_rank": rank,
        "target": {"hidden_size": cfg.hidden_size, "vocab_size": cfg.vocab_size,
                   "num_hidden_layers": cfg.num_hidden_layers, "fingerprint": fp}}))
    return folder
