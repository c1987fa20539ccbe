"""Spec-Bench's speedup as its `evaluation/speed.py` computes it: `bench --answers` with tiny random models on the
SmolLM2 tokenizer writes the answer files, and a plain re-implementation of speed.py's steps reads them."""

from __future__ import annotations

import contextlib
import functools
import io
import json

import numpy as np
import pytest
from transformers import AutoTokenizer

from treegraft_lab import cli, specbench
from treegraft_lab.commands import bench as cmd
from treegraft_lab.models import load_pair
from treegraft_lab.paths import DATA_DIR

QUESTIONS = DATA_DIR / "specbench" / "question-sample.jsonl"  # all six task groups, three two-turn questions
METHODS = ["ar", "small", "10101"]
TASKS = ["mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag", "overall"]
MT_BENCH_CATEGORIES = ["writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"]


@functools.lru_cache
def _fresh_tokenizer(folder: str):
    return AutoTokenizer.from_pretrained(folder)


def speed_py(method_file, base_file, tokenizer_folder, task: str) -> dict:
    """speed.py's `speed()`, step by step: lines of a task (overall: all; mt_bench: its eight categories; else the
    category named `task`); the method's tokens/s per line = sum(new_tokens) / sum(wall_time); the baseline's per
    line = sum over turns of (len(tokenizer(turn).input_ids) - 1) / sum(wall_time), the tokenizer loaded fresh
    from its folder; speedup = mean of the method's / mean of the baseline's; accept lengths pooled."""
    tokenizer = _fresh_tokenizer(str(tokenizer_folder))

    def lines_of_task(path):
        kept = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                obj = json.loads(line)
                if task == "overall":
                    kept.append(obj)
                elif task == "mt_bench":
                    if obj["category"] in MT_BENCH_CATEGORIES:
                        kept.append(obj)
                elif obj["category"] == task:
                    kept.append(obj)
        return kept

    speeds, accept_lengths = [], []
    for obj in lines_of_task(method_file):
        choice = obj["choices"][0]
        speeds.append(sum(choice["new_tokens"]) / sum(choice["wall_time"]))
        accept_lengths.extend(choice["accept_lengths"])
    speeds0 = []
    for obj in lines_of_task(base_file):
        tokens = 0
        for turn in obj["choices"][0]["turns"]:
            tokens += len(tokenizer(turn).input_ids) - 1
        speeds0.append(tokens / sum(obj["choices"][0]["wall_time"]))
    return {"tokens_per_s": np.array(speeds).mean(), "baseline_tokens_per_s": np.array(speeds0).mean(),
            "speedup": np.array(speeds).mean() / np.array(speeds0).mean(), "mean_accepted": np.mean(accept_lengths)}


@pytest.fixture(scope="module")
def written(tiny_llama_dir, tiny_qwen3_dir, tmp_path_factory):
    """`treegraft-lab bench --answers DIR` with a tiny Llama target and Qwen3 mid on the SmolLM2 tokenizer:
    the answer folder, the printed text, the output folder."""
    pair = load_pair(target=tiny_llama_dir, mid=tiny_qwen3_dir, dtype="float32")
    tmp = tmp_path_factory.mktemp("speed")
    buf = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(buf):
        mp.setattr(cmd, "load_pair_from_args", lambda args, require_mid=True: pair)
        rc = cli.main(["bench", "--prompts", str(QUESTIONS), "--methods", ",".join(METHODS[1:]), "--max-new-tokens",
                       "12", "--budget", "8", "--warmup-tokens", "2", "--answers", str(tmp / "answers"),
                       "--out", str(tmp / "run")])
    assert rc == 0
    return tmp / "answers", buf.getvalue(), tmp / "run"


@pytest.fixture(scope="module")
def expected(written, tiny_llama_dir):
    answers, _, _ = written
    return {(task, m): speed_py(answers / f"{m}.jsonl", answers / "ar.jsonl", tiny_llama_dir, task)
            for task in TASKS for m in METHODS}


@pytest.fixture(scope="module")
def table(written, tiny_llama_dir):
    answers, _ = specbench.read_answers(written[0])
    pq = specbench.per_question(answers, AutoTokenizer.from_pretrained(tiny_llama_dir))
    return specbench.speedup_table(pq, "ar").set_index(["group", "method"])


def test_the_answer_files_tell_speed_py_and_generated_token_counts_apart(written, tiny_llama_dir, table):
    """The files this test reads can tell the two counts and the two averages apart, so agreement means something."""
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    base = [json.loads(x)["choices"][0] for x in (written[0] / "ar.jsonl").read_text().splitlines()]
    recounted = [sum(len(tok(t).input_ids) - 1 for t in c["turns"]) for c in base]
    assert recounted != [sum(c["new_tokens"]) for c in base]
    overall = table.loc["overall"]
    assert (overall["speedup"] - overall["speedup_generated"]).abs().max() > 1e-3
    assert (overall["speedup"] - overall["speedup_per_question"]).abs().max() > 1e-3


def test_speedup_table_equals_speed_py_in_every_task_group(table, expected):
    assert sorted(set(table.index.get_level_values(0))) == sorted(TASKS)
    for (task, m), want in expected.items():
        row = table.loc[(task, m)]
        assert row["baseline_counted"] == "re-tokenised"
        for col, value in want.items():
            assert abs(row[col] - value) <= 1e-9, (task, m, col, row[col], value)


def test_bench_answers_prints_speed_py_as_the_spec_bench_speedup_with_ours_beside_it(written, expected, table):
    _, printed, run = written
    header = next(line for line in printed.splitlines() if line.startswith("| group | method |")).split(" | ")
    assert header[4] == "Spec-Bench speedup (speed.py)" and header[5].startswith("our speedup")
    for (task, m), want in expected.items():
        cells = next(line for line in printed.splitlines() if line.startswith(f"| {task} | {m} |")).split(" | ")
        assert cells[4] == f"{want['speedup']:.3f}x"
        assert cells[5] == f"{table.loc[(task, m), 'speedup_per_question']:.3f}x"
    line = next(line for line in printed.splitlines() if line.startswith("Spec-Bench speedup, overall:"))
    for m in METHODS:
        spec, ours = f"{expected[('overall', m)]['speedup']:.3f}x", f"{table.loc[('overall', m), 'speedup_per_question']:.3f}x"
        assert f"{m} {spec}" + ("" if spec == ours else f" (ours {ours})") in line
    assert "(ours" in line  # on these files the two differ for some method
    assert (run / "specbench.md").read_text().strip() in printed


def test_the_overall_line_sets_ours_beside_spec_benchs_only_where_they_differ():
    """By hand: the baseline's two answers are five words each, four tokens by speed.py's count (less one a turn),
    as generated; x is 2x on both questions, y 1x then 4x (a ratio of means 2x, a mean of ratios 2.5x)."""
    def line(q, n, t, words=5):
        return {"question_id": q, "category": "qa", "choices": [{"turns": [" ".join(["w"] * words)], "new_tokens": [n],
                                                                 "wall_time": [t], "accept_lengths": [1] * n}]}

    answers = {"ar": [line(1, 4, 1.0), line(2, 4, 2.0)], "x": [line(1, 8, 1.0), line(2, 4, 1.0)],
               "y": [line(1, 4, 1.0), line(2, 8, 1.0)]}
    t = specbench.speedup_table(specbench.per_question(answers, lambda text: {"input_ids": text.split()}))
    assert specbench.overall_line(t) == "Spec-Bench speedup, overall: ar 1.000x, x 2.000x, y 2.000x (ours 2.500x)"
