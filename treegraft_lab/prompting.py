"""Turning a prompt into token ids (chat template applied), and the stop tokens of a model."""

from __future__ import annotations

from treegraft_lab.errors import TreeGraftError


def encode_prompt(tokenizer, prompt) -> list[int]:
    """A string (one user turn), a list of chat messages, or token ids -> token ids."""
    if prompt is None or (hasattr(prompt, "__len__") and len(prompt) == 0):
        raise TreeGraftError("the prompt is empty: give a string, a list of chat messages, or token ids")
    if hasattr(prompt, "tolist"):  # a tensor or an array of ids
        prompt = prompt.reshape(-1).tolist()
    if isinstance(prompt, str):
        if not prompt.strip():
            raise TreeGraftError("the prompt is empty: give a string, a list of chat messages, or token ids")
        prompt = [{"role": "user", "content": prompt}]
    if isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt):
        ids = list(prompt)
    elif isinstance(prompt, (list, tuple)) and all(isinstance(m, dict) and "content" in m for m in prompt):
        if getattr(tokenizer, "chat_template", None):
            ids = tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=True)
            if hasattr(ids, "keys"):
                ids = ids["input_ids"]
            ids = list(ids)
        else:  # tokenizers without a chat template (tiny test models): plain concatenation
            ids = tokenizer("\n".join(m["content"] for m in prompt))["input_ids"]
    else:
        raise TreeGraftError("a prompt must be a string, a list of {'role', 'content'} messages, or a list of token ids")
    vocab = len(tokenizer)
    if not ids:
        raise TreeGraftError("the prompt encodes to no tokens")
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise TreeGraftError(f"token ids {bad[:5]} are outside the vocabulary (size {vocab})")
    return ids


def context_window(model) -> int | None:
    """The model's context window in tokens (`max_position_embeddings`; None where its config has none)."""
    return getattr(model.config, "max_position_embeddings", None)


def eos_ids(tokenizer, model) -> set[int]:
    """Every token id that ends a generation for this tokenizer/model."""
    out = set()
    for src in (getattr(tokenizer, "eos_token_id", None), getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if isinstance(src, int):
            out.add(src)
        elif isinstance(src, (list, tuple)):
            out.update(int(x) for x in src)
    return out
