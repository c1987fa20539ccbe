"""TreeGraft as a transformers `custom_generate` method: lossless tree speculative decoding with a small
(retrieval) drafter and the `assistant_model` as mid drafter. transformers copies this file into its
module cache and runs it, so it holds no code of its own: the method is
`treegraft_lab.hf.generation.treegraft_generate` (see its docstring and ../README.md)."""

from treegraft_lab.hf.generation import treegraft_generate


def generate(model, *args, **kwargs):
    """`model.generate(..., custom_generate=<this folder>, trust_remote_code=True)` lands here."""
    return treegraft_generate(model, *args, **kwargs)
