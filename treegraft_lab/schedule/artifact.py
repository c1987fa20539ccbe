"""The scheduler artifact of one pair: `data/scheduler/<pair>/` (safetensors + JSON, no pickle).

    scheduler.json          format, pair, depth, input names, chosen signals, candidates,
                            normalisation (x_mean, x_std, y_mean, y_std), parameter count, CV
                            table, R^2 and replay scores, training record
    student.safetensors     g_psi: l1.weight [64, 17] (18 with the mid drafter's agreement as an
                            input, `AGREEMENT`), l1.bias, l2.weight [32, 64], l2.bias,
                            l3.weight [1, 32], l3.bias
    value.safetensors       f_theta (the teacher; for analysis only, never loaded online)

This module only reads and writes; it imports no training code (the online policy uses it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.schedule.signals import SIGNALS

FORMAT = "treegraft-scheduler/1"
META_NAME = "scheduler.json"
STUDENT_NAME = "student.safetensors"
VALUE_NAME = "value.safetensors"
SHAPES = {"l1.weight": (64, 17), "l1.bias": (64,), "l2.weight": (32, 64), "l2.bias": (32,),
          "l3.weight": (1, 32), "l3.bias": (1,)}
PARAMS = sum(math.prod(s) for s in SHAPES.values())  # 3265
AGREEMENT = "mid_agreement"  # the optional context input after the six (training.value.AGREEMENT)


def context_inputs(inputs: list[str]) -> int:
    """How many context inputs come before the history bits: 6, or 7 with the mid drafter's agreement."""
    return 7 if AGREEMENT in inputs else 6


def shapes(n_in: int) -> dict[str, tuple[int, ...]]:
    """g_psi's tensor shapes for `n_in` inputs (`SHAPES` for 17)."""
    return {**SHAPES, "l1.weight": (SHAPES["l1.weight"][0], n_in)}


def params(n_in: int) -> int:
    """g_psi's parameter count for `n_in` inputs (`PARAMS` for 17)."""
    return sum(math.prod(s) for s in shapes(n_in).values())


@dataclass
class SchedulerArtifact:
    """g_psi's weights and everything needed to build its inputs and read its output."""

    pair: str
    depth: int
    inputs: list[str]
    signals: list[str]
    weights: dict[str, torch.Tensor]
    x_mean: list[float]
    x_std: list[float]
    y_mean: float
    y_std: float
    meta: dict = field(default_factory=dict)  # candidates, cv_table, scores, training record

    @property
    def params(self) -> int:
        return sum(int(w.numel()) for w in self.weights.values())


def _bad(folder: Path, why: str) -> TreeGraftError:
    return TreeGraftError(f"scheduler artifact in {folder} is unusable: {why}; retrain it with "
                          "`treegraft-lab collect` and `treegraft-lab train-scheduler`")


def save(art: SchedulerArtifact, folder: str | Path, value_weights: dict[str, torch.Tensor] | None = None) -> Path:
    """Write the artifact; returns the folder."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().float().contiguous() for k, v in art.weights.items()}, str(folder / STUDENT_NAME))
    if value_weights is not None:
        save_file({k: v.detach().float().contiguous() for k, v in value_weights.items()}, str(folder / VALUE_NAME))
    doc = {"format": FORMAT, "pair": art.pair, "depth": art.depth, "params": art.params, "inputs": art.inputs,
           "signals": art.signals, "x_mean": art.x_mean, "x_std": art.x_std, "y_mean": art.y_mean,
           "y_std": art.y_std, **art.meta}
    (folder / META_NAME).write_text(json.dumps(doc, indent=1, default=float) + "\n")
    return folder


def read_meta(folder: str | Path) -> dict:
    folder = Path(folder)
    path = folder / META_NAME
    if not path.is_file():
        raise TreeGraftError(f"no scheduler artifact in {folder} ({META_NAME} missing): train one with "
                             "`treegraft-lab collect` and `treegraft-lab train-scheduler`, or pass scheduler_path")
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise _bad(folder, f"{META_NAME} is not valid JSON ({e})") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _bad(folder, f"{META_NAME} is not a {FORMAT} document")
    return doc


def load(folder: str | Path) -> SchedulerArtifact:
    """Read and validate an artifact: any missing, corrupt or inconsistent part is a TreeGraftError."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(folder)
    doc = read_meta(folder)
    try:
        w = load_file(str(folder / STUDENT_NAME))
    except (SafetensorError, OSError, ValueError) as e:
        raise _bad(folder, f"{STUDENT_NAME} is missing or unreadable ({e})") from e
    got = {k: tuple(v.shape) for k, v in w.items()}
    n_in = SHAPES["l1.weight"][1] + (isinstance(doc.get("inputs"), list) and AGREEMENT in doc["inputs"])  # or 18
    if got != shapes(n_in):
        raise _bad(folder, f"{STUDENT_NAME} holds tensors {got}, expected {shapes(n_in)}")
    if not all(bool(torch.isfinite(v).all()) for v in w.values()):
        raise _bad(folder, f"{STUDENT_NAME} holds non-finite weights")
    try:
        depth, inputs, signals = int(doc["depth"]), list(doc["inputs"]), list(doc["signals"])
        x_mean, x_std = [float(v) for v in doc["x_mean"]], [float(v) for v in doc["x_std"]]
        y_mean, y_std = float(doc["y_mean"]), float(doc["y_std"])
    except (KeyError, TypeError, ValueError) as e:
        raise _bad(folder, f"{META_NAME} lacks or garbles a field ({e})") from e
    unknown = [s for s in signals if s not in SIGNALS]
    if unknown:
        raise _bad(folder, f"unknown signals {unknown} (known: {', '.join(SIGNALS)})")
    n_ctx = context_inputs(inputs)
    if len(inputs) != n_in or len(x_mean) != n_in or len(x_std) != n_in or len(signals) != n_in - n_ctx - depth:
        raise _bad(folder, f"{n_in} inputs expected ({n_ctx} context + {depth} history bits + signals), "
                           f"got {len(inputs)} names, {len(x_mean)} means, {len(x_std)} stds, {len(signals)} signals")
    if AGREEMENT in inputs and inputs.index(AGREEMENT) != 6:
        raise _bad(folder, f"{AGREEMENT} must be the 7th input, after the six context inputs")
    if inputs[-len(signals):] != signals:
        raise _bad(folder, "the last inputs must be the chosen signals, in order")
    if not all(math.isfinite(v) for v in [*x_mean, *x_std, y_mean, y_std]) or min(x_std) <= 0 or y_std <= 0:
        raise _bad(folder, "normalisation holds non-finite or non-positive scales")
    keys = ("format", "pair", "depth", "params", "inputs", "signals", "x_mean", "x_std", "y_mean", "y_std")
    return SchedulerArtifact(str(doc.get("pair", "")), depth, inputs, signals, w, x_mean, x_std, y_mean, y_std,
                             {k: v for k, v in doc.items() if k not in keys})
