"""Mid drafters derived from the target at load time: no training, no download, no stored weights.

A derived mid drafter is a folder holding one `config.json` (`FORMAT`, a `kind` and its settings)
beside its model card; `build_mid` makes the model from the loaded target:

- `int8`: the target with six of the seven projections of each decoder layer (all but `down_proj`)
  quantised to int8 by torch's dynamic quantisation (`torch.ao.quantization.quantize_dynamic`:
  weights int8 per output channel, activations quantised to 8 bits per forward, float32 in and
  out); `down_proj` and the head stay float32 (`quantise_int8` says why). Quantised
  self-speculation: high agreement, a lower cost.
  CPU only (torch's dynamic quantised kernels, fbgemm / oneDNN, have no CUDA backend);
- `self`: a copy of the target (agreement 1): the idealised mid that bounds the map from above on
  the modelled clock (on the wall clock it costs a full target forward);
- `layers`: the target's own layers `layers` (in order, a layer-skip cut), untrained, with the
  target's final norm and full tied head: agreement in between, cost about len(layers) / L.

Each is a genuine `transformers` causal LM with its own layers (the embedding is the target's,
shared, except for `int8` on a target that is not float32, which gets a float32 copy), so the
project's KV caches and masked tree forwards run on it as on any mid drafter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from treegraft_lab.errors import TreeGraftError

FORMAT = "treegraft-derived-mid/1"
KINDS = ("int8", "self", "layers")
CPU_ONLY = ("the int8 mid drafter runs on the CPU only (torch's dynamic int8 quantisation has no CUDA "
            "kernels): load its pair with device='cpu' (--device cpu), or pick another mid drafter")


def is_derived(folder: str | Path) -> bool:
    """Whether `folder` holds a derived mid drafter's config."""
    path = Path(folder) / "config.json"
    try:
        return path.is_file() and json.loads(path.read_text()).get("format") == FORMAT
    except (OSError, json.JSONDecodeError, AttributeError):
        return False


def read_spec(folder: str | Path) -> dict[str, Any]:
    """The derived mid's config, checked: `kind` known, `layers` a non-empty list for "layers"."""
    path = Path(folder) / "config.json"
    try:
        spec = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise TreeGraftError(f"{path} is unreadable ({e}): restore it from git") from e
    if not isinstance(spec, dict) or spec.get("format") != FORMAT or spec.get("kind") not in KINDS:
        raise TreeGraftError(f"{path} is not a {FORMAT} config with a kind among {', '.join(KINDS)}: restore it from git")
    layers = spec.get("layers")
    if spec["kind"] == "layers" and not (isinstance(layers, list) and layers and all(isinstance(i, int) for i in layers)):
        raise TreeGraftError(f"{path}: kind 'layers' needs a non-empty list of target layer indices in 'layers'")
    return spec


def check_device(spec: dict[str, Any], device: torch.device) -> None:
    """Refuse the int8 kind off the CPU, in one line, before any model loads."""
    if spec["kind"] == "int8" and device.type != "cpu":
        raise TreeGraftError(f"{CPU_ONLY} (asked for {device})")


INT8_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj")  # down_proj stays float32


def int8_qconfig():
    """Per-output-channel int8 weights (-127..127), activations quantised per forward to the full 8
    bits (0..255; torch's default dynamic config keeps 7 and one scale for all weights)."""
    from torch.ao.quantization import (
        PlaceholderObserver,
        QConfig,
        per_channel_weight_observer_range_neg_127_to_127,
    )

    act = PlaceholderObserver.with_args(dtype=torch.quint8, quant_min=0, quant_max=255, is_dynamic=True)
    return QConfig(activation=act, weight=per_channel_weight_observer_range_neg_127_to_127)


def quantise_int8(model: nn.Module) -> nn.Module:
    """`model` (float32, CPU) with the `INT8_PROJECTIONS` of every decoder layer replaced by
    dynamic int8 ones (in place). `down_proj` and the output head stay float32: the MLP's inner
    activations carry outlier channels that one 8-bit activation scale per row destroys (on SmolLM2
    with down_proj in int8 too the greedy agreement fell from 0.81 to 0.58 on 12 eval prompts)."""
    import warnings

    if model.model.embed_tokens.weight.device.type != "cpu":
        raise TreeGraftError(CPU_ONLY)
    with warnings.catch_warnings():  # torch marks the eager API deprecated in favour of torchao (not installed)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*")
        from torch.ao.quantization import quantize_dynamic

        qc = int8_qconfig()
        spec = {f"model.layers.{i}.{'mlp' if p.endswith(('gate_proj', 'up_proj')) else 'self_attn'}.{p}": qc
                for i in range(len(model.model.layers)) for p in INT8_PROJECTIONS}
        return quantize_dynamic(model, spec, dtype=torch.qint8, inplace=True)


@torch.no_grad()
def build_mid(target: nn.Module, spec: dict[str, Any]) -> nn.Module:
    """The derived mid drafter of `spec` (`read_spec`) from the loaded target (left unchanged)."""
    from treegraft_lab.zoo.drafter import build_drafter_skeleton

    n = target.config.num_hidden_layers
    layers = list(range(n)) if spec["kind"] in ("int8", "self") else [int(i) for i in spec["layers"]]
    mid = build_drafter_skeleton(target, layers)  # layer copies; TreeGraftError for layers outside 0..n-1
    if spec["kind"] == "int8":
        check_device(spec, target.device)
        if target.dtype != torch.float32:  # quantise from float32 weights, run float32 activations
            emb = nn.Embedding.from_pretrained(target.model.embed_tokens.weight.detach().float().clone(), freeze=True)
            mid.model.embed_tokens = emb
            mid.lm_head = nn.Linear(emb.weight.shape[1], emb.weight.shape[0], bias=False)
            mid.lm_head.weight = emb.weight
            mid.float()
        quantise_int8(mid)
        mid.config.dtype = torch.float32
    for p in mid.parameters():
        p.requires_grad_(False)
    return mid.eval()


def write_spec(folder: str | Path, kind: str, **settings: Any) -> Path:
    """Write a derived mid's config.json into `folder` (made if missing)."""
    if kind not in KINDS:
        raise TreeGraftError(f"unknown derived mid kind {kind!r}; use one of {', '.join(KINDS)}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"format": FORMAT, "kind": kind, **settings}, indent=1) + "\n")
    return folder
