"""The pocket drafter's distillation steps (`training.drafter_distill`) and its model card
(`training.drafter_card`), each on hand-made records: no model is loaded."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from treegraft_lab.training import drafter_card
from treegraft_lab.training import drafter_distill as dd


class ChatTokenizer:
    """`apply_chat_template` as ids: one id per character of the user message (mod 50), plus 2."""

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=True):
        return [1, *[ord(c) % 50 for c in messages[0]["content"]], 2]

    def decode(self, ids):
        return " ".join(map(str, ids))


def record(prompt: list[int], gen: list[int], top1: list[int]) -> dict:
    """A corpus record with top-2 logits whose argmax is `top1`."""
    idx = np.array([[t, t + 1] for t in top1], np.int32)
    return {"prompt": np.array(prompt, np.int32), "gen": np.array(gen, np.int32), "idx": idx,
            "val": np.ones((len(gen), 2), np.float16), "sample": False}


def corpus(vocab: int = 12, overlap=lambda text: False) -> dd.Corpus:
    return dd.Corpus([{"messages": [{"role": "user", "content": "hi"}]}], "local", overlap, np.zeros(vocab))


def test_records_whose_prompt_shares_eval_text_are_dropped_and_the_rest_counted():
    c = corpus(overlap=lambda text: text.startswith("7"))
    dd.add_records(c, ChatTokenizer(), [record([1, 2], [3, 3, 4], [3, 5, 4]), record([7, 8], [9], [9])])
    assert len(c.recs) == 1 and c.n_dropped == 1
    # generated tokens and the target's top-1 tokens both count
    assert c.counts.tolist() == [0, 0, 0, 3, 2, 1, 0, 0, 0, 0, 0, 0]


def test_the_training_record_holds_the_corpus_the_counters_and_the_last_200_history_points():
    c = corpus()
    dd.add_records(c, ChatTokenizer(), [record([1], [3, 3, 4], [3, 3, 4])])
    c.n_dropped = 2
    state = {"step": 5, "elapsed": 12.0, "history": [{"step": i} for i in range(250)]}
    rec = dd.training_record(dd.DistillConfig(out="x"), c, state, torch.tensor([3]))
    assert rec["config"]["out"] == "x" and rec["prompt_source"] == "local" and rec["n_prompts"] == 1
    assert (rec["corpus_records"], rec["corpus_gen_tokens"], rec["records_dropped_eval_overlap"]) == (1, 3, 2)
    assert rec["sub_vocab_coverage_of_target_top1"] == pytest.approx(4 / 6)  # token 3: 2 generated + 2 top-1
    assert rec["step"] == 5 and rec["history"] == state["history"][-200:]
    assert list(rec)[-1] == "history"


def test_the_learning_rate_warms_up_over_50_steps_then_decays_to_a_tenth_over_the_budget():
    cfg = dd.DistillConfig(out="x", lr=1e-3)
    assert dd.learning_rate(cfg, 0, 0.0, 100.0) == pytest.approx(1e-3 / 50)
    assert dd.learning_rate(cfg, 49, 0.0, 100.0) == pytest.approx(1e-3)
    assert dd.learning_rate(cfg, 500, 50.0, 100.0) == pytest.approx(1e-3 * 0.55)
    assert dd.learning_rate(cfg, 500, 200.0, 100.0) == pytest.approx(1e-4)


def test_the_sub_vocabulary_lookup_maps_the_most_frequent_tokens_in_id_order():
    counts = np.array([0.0, 5.0, 1.0, 5.0, 2.0])
    emb = torch.arange(10.0).reshape(5, 2)
    full2sub, emb_sub = dd.sub_vocab_lookup(counts, 3, emb)
    assert full2sub.tolist() == [-1, 0, -1, 1, 2]
    assert torch.equal(emb_sub, emb[[1, 3, 4]]) and dd.full2sub_ids(full2sub).tolist() == [1, 3, 4]


def prompts(n: int) -> list[dict]:
    return [{"messages": [{"role": "user", "content": "x" * (i + 1)}]} for i in range(n)]


def test_greedy_batches_walk_one_seeded_order_and_sampled_ones_are_seeded_by_the_batch():
    cfg = dd.DistillConfig(out="x", gen_batch=3, seed=4, local_frac=0.25)
    ps, tok = prompts(10), ChatTokenizer()
    perm = list(range(10))
    random.Random(4).shuffle(perm)
    assert dd.greedy_batch(tok, ps, cfg, 3) == sorted(([1] + [ord("x") % 50] * (i + 1) + [2] for i in perm[3:6]), key=len)
    a = dd.sampled_batch(tok, ps, prompts(4), cfg, 7, from_suite=True)
    assert a == dd.sampled_batch(tok, ps, prompts(4), cfg, 7, from_suite=True) != dd.sampled_batch(
        tok, ps, prompts(4), cfg, 9, from_suite=True)
    assert len(a) == 3 and [len(x) for x in a] == sorted(len(x) for x in a)


def test_cached_shards_continue_the_corpus_and_the_greedy_cursor(tmp_path, capsys):
    cfg = dd.DistillConfig(out=str(tmp_path / "out"), gen_batch=4, seed=1)
    for b in (0, 1, 2):
        dd.save_shard(tmp_path / f"shard-001-{b:05d}.npz", [record([1, 2], [3 + b], [3])])
    dd.save_shard(tmp_path / "shard-002-00000.npz", [record([1], [9], [9])])  # another seed's corpus
    state = dd.new_state()
    run = SimpleNamespace(cfg=cfg, state=state, corpus=corpus(), shard_dir=tmp_path, tok=ChatTokenizer())
    dd.load_cached_corpus(run)
    assert [r["gen"].tolist() for r in run.corpus.recs] == [[3], [4], [5]]
    assert state["gen_batches"] == 3  # the next batch after the last shard
    assert state["greedy_cursor"] == 1  # the prompts of the greedy batches 0 and 2 (8), capped at the 1 prompt
    assert "3 records from cache" in capsys.readouterr().out


def test_each_restart_is_recorded_with_its_knobs():
    state = dd.new_state()
    state.update(step=40, elapsed=125.4)
    dd.add_segment(state, dd.DistillConfig(out="x", minutes=3.0, max_context=256))
    dd.add_segment(state, dd.DistillConfig(out="x", lr=5e-4))
    assert [s["from_step"] for s in state["segments"]] == [40, 40]
    assert state["segments"][0] == {"from_step": 40, "from_elapsed_s": 125, "minutes": 3.0, "threads": 1,
                                    "gen_frac": 0.5, "max_context": 256, "lr": 1e-3, "ce_weight": 0.5}
    assert state["segments"][1]["lr"] == 5e-4


def test_the_model_cards_making_section_reads_the_training_record():
    rec = {"config": {"max_new_tokens": 64, "temperature": 0.8, "local_frac": 0.25, "topk": 32, "ce_weight": 0.5,
                      "train_sub_vocab": 16384, "lr": 1e-3, "threads": 1, "seed": 0},
           "prompt_source": "treegraft-suite:train", "n_prompts": 9, "records_dropped_eval_overlap": 2,
           "corpus_records": 10, "corpus_gen_tokens": 100, "step": 5, "tokens_seen": 50, "elapsed": 120,
           "gen_time": 90, "train_time": 30, "sub_vocab_coverage_of_target_top1": 0.97,
           "segments": [{"from_step": 0, "from_elapsed_s": 0, "minutes": 90, "threads": 1, "gen_frac": 0.5,
                         "max_context": 320, "lr": 1e-3, "ce_weight": 0.5}]}
    text = drafter_card.how_it_was_made(rec, "treegraft-lab zoo distill")
    assert text.startswith("## How it was made\n\n    treegraft-lab zoo distill\n\n- Data:") and text.endswith(".\n\n")
    assert "`treegraft-suite:train` prompts\n  (9 prompts;" in text and "plus 25% of the sampled" in text
    assert "wall time 2.0 min (1.5 generating,\n  0.5 training)" in text
    assert "  - from step 0 (0 min in): --minutes 90, --threads 1, --gen-frac 0.5, --max-context 320" in text
    assert text.endswith("target top-1 tokens: 0.9700.\n\n")
