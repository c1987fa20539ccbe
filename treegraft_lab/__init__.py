"""TreeGraft Lab: adaptive multi-drafter grafting for tree speculative decoding, made visible.

Public names are imported lazily so that `import treegraft_lab` stays fast.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_PUBLIC = {
    "load_pair": "treegraft_lab.models",
    "ModelPair": "treegraft_lab.models",
    "load_prompts": "treegraft_lab.prompts",
    "DecodeConfig": "treegraft_lab.config",
    "TreeGraftDecoder": "treegraft_lab.decoder",
    "Generation": "treegraft_lab.decoder",
    "record": "treegraft_lab.hooks",
    "load_run": "treegraft_lab.hooks",
    "autoregressive": "treegraft_lab.baselines",
    "TreeGraftError": "treegraft_lab.errors",
    "preset": "treegraft_lab.config",
    # the parts of a round, for a researcher's own (docs/design.md, "Extending")
    "SmallDrafter": "treegraft_lab.parts",
    "MidDrafter": "treegraft_lab.parts",
    "Pruner": "treegraft_lab.parts",
    "Proposal": "treegraft_lab.parts",
    "Policy": "treegraft_lab.schedule.policies",
    "StepContext": "treegraft_lab.schedule.context",
    "TopKPruner": "treegraft_lab.parts",
    "Growth": "treegraft_lab.growth",
    "GROWTH_RULES": "treegraft_lab.growth",
    "DraftTree": "treegraft_lab.tree",
    "Drafter": "treegraft_lab.drafting",
    "GraftDrafter": "treegraft_lab.drafting",
    "Draft": "treegraft_lab.rounds",
    "StepResult": "treegraft_lab.rounds",
    "ModelDrafter": "treegraft_lab.drafters",
}
_MODULES = {"measure": "treegraft_lab.measure"}  # public modules: `treegraft_lab.measure.resolve(clock, pair)`

__all__ = sorted({*_PUBLIC, *_MODULES})


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    if name in _MODULES:
        return importlib.import_module(_MODULES[name])
    raise AttributeError(f"module 'treegraft_lab' has no attribute {name!r}")
