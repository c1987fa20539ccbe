"""TreeGraft inside Hugging Face `generate` (transformers 5's `custom_generate`).

    from treegraft_lab.hf import CUSTOM_GENERATE
    out = target.generate(**inputs, custom_generate=CUSTOM_GENERATE, trust_remote_code=True,
                          assistant_model=mid, max_new_tokens=128)

`CUSTOM_GENERATE` is this folder, laid out as a Hub `custom_generate` repo (README.md here,
`custom_generate/generate.py`, `custom_generate/requirements.txt`), as a `str`: `generate` treats only a
string as a folder or repo id. transformers executes a custom generate file only with
`trust_remote_code=True`, local folders included; the file it runs here only imports
`treegraft_lab.hf.generation.treegraft_generate`, whose docstring lists what is supported and what is
refused.
"""

from __future__ import annotations

from pathlib import Path

CUSTOM_GENERATE: str = str(Path(__file__).resolve().parent)

__all__ = ["CUSTOM_GENERATE", "treegraft_generate"]


def __getattr__(name: str):
    if name == "treegraft_generate":  # imported lazily: `import treegraft_lab.hf` loads neither torch nor transformers
        from treegraft_lab.hf.generation import treegraft_generate

        return treegraft_generate
    raise AttributeError(f"module 'treegraft_lab.hf' has no attribute {name!r}")
