"""The pocket drafter of the offline pair: loads on the real target, full-vocab logits, clear
errors for missing or mismatched files, and tree-mask forwards equal to sequential ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.paths import MODELS_DIR

FOLDER = MODELS_DIR / "smollm2-pocket-drafter"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def target_path() -> Path:
    from treegraft_lab.zoo.target import ensure_target

    return ensure_target()


@pytest.fixture(scope="module")
def target(target_path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(target_path, dtype=torch.bfloat16).eval()


@pytest.fixture(scope="module")
def drafter(target):
    from treegraft_lab.zoo.drafter import load_drafter

    return load_drafter(target, FOLDER)


def test_drafter_is_llama_sharing_embedding(target, drafter) -> None:
    from transformers import LlamaForCausalLM

    assert isinstance(drafter, LlamaForCausalLM)
    assert drafter.model.embed_tokens.weight is target.model.embed_tokens.weight
    assert drafter.config.vocab_size == target.config.vocab_size
    assert len(drafter.model.layers) < target.config.num_hidden_layers


@torch.no_grad()
def test_outputs_finite_full_vocab_and_agreeing(target, target_path: Path, drafter) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(target_path)
    msgs = [{"role": "user", "content": "Explain what a Python list comprehension is, with an example."}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    ids = ids["input_ids"]
    seq = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=32,
                          do_sample=False)
    logits = drafter(input_ids=seq).logits
    assert logits.shape == (1, seq.shape[1], target.config.vocab_size)
    assert torch.isfinite(logits).all()
    n = seq.shape[1] - ids.shape[1]
    d_arg = logits[0, -n - 1:-1].argmax(-1)
    t_arg = target(input_ids=seq).logits[0, -n - 1:-1].argmax(-1)
    # a trained drafter agrees often (~0.5); a wrongly rebuilt one (deltas or layers lost) rarely
    assert (d_arg == t_arg).float().mean() >= 0.2


def test_missing_folder_is_clear(target, tmp_path: Path) -> None:
    from treegraft_lab.zoo.drafter import load_drafter

    with pytest.raises(TreeGraftError, match="zoo distill"):
        load_drafter(target, tmp_path / "nothing-here")


def test_corrupt_or_mismatched_files_are_clear(target, tmp_path: Path) -> None:
    from treegraft_lab.zoo.drafter import load_drafter

    bad = tmp_path / "corrupt"
    shutil.copytree(FOLDER, bad)
    (bad / "adapters.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(TreeGraftError, match="unreadable"):
        load_drafter(target, bad)

    other = tmp_path / "other-target"
    shutil.copytree(FOLDER, other)
    cfg = json.loads((other / "config.json").read_text())
    cfg["target"]["fingerprint"] = "0123456789abcdef"
    (other / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TreeGraftError, match="another target"):
        load_drafter(target, other)

    wide = tmp_path / "other-vocab"
    shutil.copytree(FOLDER, wide)
    cfg = json.loads((wide / "config.json").read_text())
    cfg["target"]["vocab_size"] = 32000
    (wide / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TreeGraftError, match="vocab_size"):
        load_drafter(target, wide)


@torch.no_grad()
def test_tree_mask_forward_matches_sequential(target_path: Path) -> None:
    """float32 copy: the 4D-mask tree forward on a cache equals each path's sequential forward."""
    from transformers import AutoModelForCausalLM, DynamicCache

    from treegraft_lab.zoo.drafter import load_drafter

    t32 = AutoModelForCausalLM.from_pretrained(target_path, dtype=torch.float32).eval()
    d = load_drafter(t32, FOLDER)
    ctx = torch.tensor([[1, 504, 3458, 282, 260, 1345, 30]])
    # tree: 0 -> (1, 2); 1 -> 3; 2 -> 4
    tokens = torch.tensor([[198, 2683, 314, 3050, 5130]])
    parent = [-1, 0, 0, 1, 2]
    depth = [0, 1, 1, 2, 2]
    c, n = ctx.shape[1], len(parent)
    allowed = torch.zeros(n, c + n, dtype=torch.bool)
    allowed[:, :c] = True
    for i in range(n):
        j = i
        while j >= 0:
            allowed[i, c + j] = True
            j = parent[j]
    mask = torch.zeros(1, 1, n, c + n).masked_fill(~allowed, torch.finfo(torch.float32).min)
    cache = DynamicCache(config=d.config)
    d(input_ids=ctx, past_key_values=cache, use_cache=True)
    tree = d(input_ids=tokens, past_key_values=cache, attention_mask=mask,
             position_ids=torch.tensor([[c + x for x in depth]]), use_cache=True).logits[0]
    sub = d.lm_head.token_ids
    for i in range(n):
        path, j = [], i
        while j >= 0:
            path.insert(0, int(tokens[0, j]))
            j = parent[j]
        seq = d(input_ids=torch.cat([ctx, torch.tensor([path])], dim=1)).logits[0, -1]
        assert torch.allclose(tree[i, sub], seq[sub], atol=2e-3, rtol=1e-3), i
        assert int(tree[i].argmax()) == int(seq.argmax())


@torch.no_grad()
def test_sub_vocab_rows_score_and_propose_like_the_full_vocabulary(drafter) -> None:
    from treegraft_lab.drafters import ModelDrafter
    from treegraft_lab.tree import SMALL, DraftTree

    ctx = torch.randint(0, drafter.config.vocab_size, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    head = drafter.get_output_embeddings()
    inside, outside = int(head.token_ids[5]), next(t for t in range(100) if t not in set(head.token_ids.tolist()))
    results = []
    for sub in (True, False):
        m = ModelDrafter(drafter, sub_vocab=sub)
        assert (m.head is not None) == sub
        m.prefill(ctx[:-1])
        t = DraftTree.start(ctx[-1])
        a, _ = t.add_child(0, inside, -0.5, SMALL, 1, 1)
        b, _ = t.add_child(0, outside, -0.7, SMALL, 1, 1)  # a token the sub-vocabulary head cannot emit
        t.add_child(a, int(head.token_ids[9]), -0.3, SMALL, 2, 1)
        m.score(t, list(range(len(t))))
        results.append((list(t.logp), m.propose(t, [0, a], 10), m.top1(a)))
    (lp_sub, prop_sub, top_sub), (lp_full, prop_full, top_full) = results
    assert lp_sub[b] < -1e30 and lp_full[b] < -1e30  # "cannot emit" on both paths
    assert [lp for i, lp in enumerate(lp_sub) if i != b] == pytest.approx([lp for i, lp in enumerate(lp_full) if i != b], abs=1e-4)
    # bf16 logits tie often: the same top-W scores, and the same proposals above the last score
    assert [lp for *_, lp, _ in prop_sub] == pytest.approx([lp for *_, lp, _ in prop_full], abs=1e-4)
    last = prop_full[-1][2]
    assert {(f, tok) for f, tok, lp, _ in prop_sub if lp > last + 1e-4} == {(f, tok) for f, tok, lp, _ in prop_full if lp > last + 1e-4}
    assert top_sub[0] == top_full[0] and top_sub[1] == pytest.approx(top_full[1], abs=1e-4)
