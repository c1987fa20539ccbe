"""The pocket mid drafter of the offline pair: a few of the target's own layers, adapted.

The drafter is a genuine `transformers.LlamaForCausalLM` (HF `generate(assistant_model=...)`,
tree forwards with a 4D float mask, `position_ids` and a `DynamicCache` all work). It is rebuilt
at load time from the target's weights plus a small stored folder:

- `config.json`: which target layers it keeps (in order), the low-rank delta rank and scale, the
  sub-vocabulary size, and a fingerprint of the target it was trained on;
- `adapters.safetensors`: for every kept layer and every linear projection a low-rank delta
  `W' = W_target + scale * B @ A` (LoRA), the RMSNorm weights, the final norm, a per-token bias of
  the head, and the frequency-ranked sub-vocabulary token ids.

The embedding is the target's tied embedding (the same tensor, never stored). The output head
(`SubVocabHead`) computes logits only for the `N_sub` most frequent tokens of the target's own
generations and scatters them into a full-vocabulary tensor filled with a very negative value, so
the forward still returns `[..., vocab_size]` logits while costing a fraction of a full head.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from treegraft_lab.errors import TreeGraftError

FORMAT = "treegraft-pocket-drafter/1"
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "adapters.safetensors"
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_MISSING_HINT = "run `treegraft-lab zoo distill` to make it (or restore it from git)"


class SubVocabHead(nn.Module):
    """Output head over a token subset, scattered into full-vocabulary logits.

    `weight` holds the target embedding rows of `token_ids` (gathered once); tokens outside the
    subset get `finfo(dtype).min / 2`, so they never win an argmax and have ~zero probability.
    """

    def __init__(self, weight: torch.Tensor, token_ids: torch.Tensor, vocab_size: int,
                 bias: torch.Tensor | None = None) -> None:
        super().__init__()
        self.vocab_size = int(vocab_size)
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)
        self.register_buffer("token_ids", token_ids.long(), persistent=False)

    @property
    def out_features(self) -> int:
        return self.vocab_size

    def sub_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the subset only: [..., N_sub]."""
        return nn.functional.linear(hidden, self.weight, self.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        sub = self.sub_logits(hidden)
        fill = torch.finfo(sub.dtype).min / 2
        out = sub.new_full((*sub.shape[:-1], self.vocab_size), fill)
        out.index_copy_(-1, self.token_ids, sub)
        return out


def target_fingerprint(target_model: nn.Module) -> str:
    """A cheap, stable fingerprint of the target's weights (shape + sampled values).

    The sampled values are gathered on the weights' own device and copied to the host once, so a
    target on any device (CUDA, several GPUs) fingerprints alike; weights with no data (the `meta`
    device) get a `TreeGraftError`.
    """
    sd = dict(target_model.named_parameters())
    h = hashlib.sha256()
    for name in ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                 "model.norm.weight"):
        t = sd.get(name)
        if t is None:
            continue
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        if t.device.type == "meta":
            raise TreeGraftError(f"the target's weight {name} is on the meta device (not loaded): load the "
                                 "target fully (no offload to disk) before its pocket drafter")
        flat = t.detach().reshape(-1)
        h.update(flat[:: max(1, flat.numel() // 4096)].float().cpu().numpy().round(4).tobytes())
    h.update(str(len(getattr(target_model.model, "layers", []))).encode())
    return h.hexdigest()[:16]


def build_drafter_skeleton(target_model: nn.Module, layers: list[int]) -> Any:
    """A `LlamaForCausalLM` with copies of the given target layers, sharing its embedding.

    The head is the target's full tied head until `set_sub_vocab_head` replaces it. Layer copies
    are renumbered 0..L-1 so the drafter's own KV cache works.
    """
    import copy

    from transformers import LlamaConfig, LlamaForCausalLM

    tcfg = target_model.config
    n = tcfg.num_hidden_layers
    if not layers or any(not 0 <= i < n for i in layers):
        raise TreeGraftError(f"drafter layers {layers} do not fit a target with {n} layers")
    cfg_dict = tcfg.to_dict()
    cfg_dict.update(num_hidden_layers=len(layers), tie_word_embeddings=False)
    cfg_dict.pop("architectures", None)
    cfg_dict.pop("_name_or_path", None)
    cfg_dict.pop("_model_name_or_path", None)
    cfg = LlamaConfig(**cfg_dict)
    dtype = target_model.model.embed_tokens.weight.dtype
    with torch.device("meta"):
        drafter = LlamaForCausalLM(cfg)
    tm = target_model.model
    new_layers = []
    for j, i in enumerate(layers):
        layer = copy.deepcopy(tm.layers[i])
        layer.self_attn.layer_idx = j
        new_layers.append(layer)
    drafter.model.layers = nn.ModuleList(new_layers)
    drafter.model.embed_tokens = tm.embed_tokens  # shared module: the same tensor, not a copy
    drafter.model.norm = copy.deepcopy(tm.norm)
    drafter.model.rotary_emb = copy.deepcopy(tm.rotary_emb)
    with torch.device("meta"):  # no init of a throw-away 49k x H matrix
        drafter.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False, dtype=dtype)
    drafter.lm_head.weight = tm.embed_tokens.weight
    drafter.config.dtype = dtype
    drafter.generation_config = copy.deepcopy(target_model.generation_config)
    drafter.eval()
    return drafter


def set_sub_vocab_head(drafter: Any, token_ids: torch.Tensor, bias: torch.Tensor | None) -> None:
    """Replace the drafter's head by a `SubVocabHead` over `token_ids` (rows of the embedding)."""
    emb = drafter.model.embed_tokens.weight
    ids = token_ids.long().to(emb.device)
    b = None if bias is None else bias.to(emb.device, emb.dtype)
    drafter.lm_head = SubVocabHead(emb.detach()[ids].clone(), ids, emb.shape[0], b)


def _read_config(folder: Path) -> dict[str, Any]:
    cfg_path = folder / CONFIG_NAME
    if not folder.is_dir() or not cfg_path.exists() or not (folder / WEIGHTS_NAME).exists():
        raise TreeGraftError(f"drafter files missing in {folder}: {_MISSING_HINT}")
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise TreeGraftError(f"drafter config {cfg_path} is unreadable ({e}): {_MISSING_HINT}") from e
    if not isinstance(cfg, dict) or cfg.get("format") != FORMAT:
        raise TreeGraftError(f"{cfg_path} is not a {FORMAT} config: {_MISSING_HINT}")
    return cfg


def load_drafter(target_model: nn.Module, folder: Path) -> Any:
    """Rebuild the pocket drafter from the loaded target and the stored folder.

    Raises `TreeGraftError` when the files are missing or corrupt, or were made for another target
    (hidden size, vocabulary, layer count or weight fingerprint differ).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(folder)
    cfg = _read_config(folder)
    tcfg = target_model.config
    want = cfg.get("target", {})
    for key in ("hidden_size", "vocab_size", "num_hidden_layers"):
        if want.get(key) != getattr(tcfg, key, None):
            raise TreeGraftError(
                f"drafter in {folder} was made for a target with {key}={want.get(key)}, but the "
                f"loaded target has {getattr(tcfg, key, None)}: {_MISSING_HINT} for this target"
            )
    fp = target_fingerprint(target_model)
    if want.get("fingerprint") != fp:
        raise TreeGraftError(
            f"drafter in {folder} was made for another target (fingerprint "
            f"{want.get('fingerprint')} != {fp}): {_MISSING_HINT} for this target"
        )
    try:
        w = load_file(str(folder / WEIGHTS_NAME))
    except (SafetensorError, OSError, ValueError) as e:
        raise TreeGraftError(f"drafter weights in {folder} are unreadable ({e}): {_MISSING_HINT}") from e
    missing = [k for k in ("layers", "lora_scale") if k not in cfg] + [k for k in ("head.token_ids",) if k not in w]
    if missing:
        raise TreeGraftError(f"drafter files in {folder} do not match: {', '.join(missing)} missing: {_MISSING_HINT}")
    drafter = build_drafter_skeleton(target_model, [int(i) for i in cfg["layers"]])
    apply_adapters(drafter, w, float(cfg["lora_scale"]))  # shape mismatches: TreeGraftError naming the folder's role
    try:
        set_sub_vocab_head(drafter, w["head.token_ids"], w.get("head.bias"))
    except (IndexError, RuntimeError) as e:
        raise TreeGraftError(f"drafter head in {folder} does not fit the target ({e}): {_MISSING_HINT}") from e
    for p in drafter.parameters():
        p.requires_grad_(False)
    drafter.eval()
    return drafter


@torch.no_grad()
def apply_adapters(drafter: Any, w: dict[str, torch.Tensor], scale: float) -> None:
    """Merge stored low-rank deltas and norm weights into the drafter's layer copies (in place).

    The stored tensors (read on the CPU) move to each layer's own device first.
    """
    for j, layer in enumerate(drafter.model.layers):
        for name in PROJECTIONS:
            mod = layer.self_attn if name.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else layer.mlp
            lin = getattr(mod, name)
            a = w.get(f"layers.{j}.{name}.lora_A")
            b = w.get(f"layers.{j}.{name}.lora_B")
            if a is None or b is None:
                continue
            if (b.shape[0], a.shape[-1]) != tuple(lin.weight.shape):
                raise TreeGraftError(f"drafter adapter layer {j} {name}: delta {(b.shape[0], a.shape[-1])} vs the "
                                     f"target's {tuple(lin.weight.shape)}: {_MISSING_HINT} for this target")
            dev = lin.weight.device
            delta = (b.to(dev).float() @ a.to(dev).float()) * scale
            lin.weight.copy_((lin.weight.float() + delta).to(lin.weight.dtype))
        for norm in ("input_layernorm", "post_attention_layernorm"):
            t = w.get(f"layers.{j}.{norm}.weight")
            if t is not None:
                wt = getattr(layer, norm).weight
                wt.copy_(t.to(wt.device, wt.dtype))
    if "norm.weight" in w:
        wt = drafter.model.norm.weight
        wt.copy_(w["norm.weight"].to(wt.device, wt.dtype))
