"""Spec-Bench answer files from `bench --answers`, its speedup per task group, and bad input: tiny models."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from treegraft_lab import DecodeConfig, TreeGraftDecoder, cli, specbench
from treegraft_lab.commands import bench as cmd
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.paths import DATA_DIR
from treegraft_lab.tiny import tiny_pair

QUESTIONS = DATA_DIR / "specbench" / "question-sample.jsonl"  # Spec-Bench's format: multi-turn, rag, translation
METHODS = ["ar", "small", "10101"]
FIELDS = {"question_id", "category", "answer_id", "model_id", "tstamp", "choices"}
CHOICE = {"index", "turns", "decoding_steps", "new_tokens", "wall_time", "accept_lengths"}


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(scale=4.0)


@pytest.fixture(scope="module")
def answered(pair, tmp_path_factory):
    """`treegraft-lab bench --answers DIR --json` on the sample question file, with the tiny pair."""
    tmp = tmp_path_factory.mktemp("answers")
    mp = pytest.MonkeyPatch()
    mp.setattr(cmd, "load_pair_from_args", lambda args, require_mid=True: pair)
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["bench", "--prompts", str(QUESTIONS), "--methods", ",".join(METHODS[1:]), "--max-new-tokens", "8",
                       "--budget", "8", "--warmup-tokens", "2", "--answers", str(tmp / "answers"), "--out",
                       str(tmp / "run"), "--json"])
    mp.undo()
    assert rc == 0
    files = {m: [json.loads(x) for x in (tmp / "answers" / f"{m}.jsonl").read_text().splitlines()] for m in METHODS}
    return json.loads(buf.getvalue()), files, tmp


def test_one_answer_file_per_method_with_every_field(answered):
    _, files, tmp = answered
    assert sorted(p.stem for p in (tmp / "answers").glob("*.jsonl")) == sorted(METHODS)
    questions = [json.loads(x) for x in QUESTIONS.read_text().splitlines()]
    for m, lines in files.items():
        assert [a["question_id"] for a in lines] == [q["question_id"] for q in questions]
        for a, q in zip(lines, questions):
            assert set(a) == FIELDS and a["category"] == q["category"] and a["model_id"].endswith(m)
            (c,) = a["choices"]
            assert set(c) == CHOICE and c["index"] == 0
            n = len(q["turns"])
            assert all(len(c[k]) == n for k in ("turns", "decoding_steps", "new_tokens", "wall_time"))
            assert all(t > 0 for t in c["wall_time"])
            # new_tokens are the tokens generated: the stub tokenizer writes one word per token
            assert c["new_tokens"] == [len(t.split()) for t in c["turns"]]
            assert len(c["accept_lengths"]) == sum(c["decoding_steps"])
            if m == "ar":  # one token per forward (the tree methods: test_answer_fields_are_those_of_a_direct_decode)
                assert c["accept_lengths"] == [1] * sum(c["new_tokens"]) and c["decoding_steps"] == c["new_tokens"]


@pytest.mark.parametrize("method", METHODS[1:])
def test_answer_fields_are_those_of_a_direct_decode(pair, answered, method):
    """Decoding the same turns with a decoder of the command's settings (its default growth and small
    drafter, budget 8; the command's warm-up leaves Token Recycling's matrix as it was, so a fresh
    decoder starts from the same state): per turn `decoding_steps` is its rounds and `new_tokens` its tokens, and
    `accept_lengths` lists accepted + 1 for every round of every turn, in order."""
    import argparse

    from treegraft_lab import bench
    from treegraft_lab.commands.common import DEFAULT_GROWTH, DEFAULT_SMALL, growth_from_args

    _, files, _ = answered
    growth = growth_from_args(argparse.Namespace(growth=DEFAULT_GROWTH, children=10, small=DEFAULT_SMALL))
    dec = TreeGraftDecoder(pair, DecodeConfig(budget=8, clock="a100-paper", **growth, **bench.TREE_METHODS[method]))
    questions = [json.loads(x) for x in QUESTIONS.read_text().splitlines()]
    assert max(n for a in files[method] for n in a["choices"][0]["accept_lengths"]) > 1  # drafts were accepted
    for q, a in zip(questions, files[method]):
        c, msgs, steps, new, lengths = a["choices"][0], [], [], [], []
        for turn, text in zip(q["turns"], c["turns"]):
            msgs.append({"role": "user", "content": turn})
            gen = dec.generate(msgs, max_new_tokens=8)
            assert gen.text.strip() == text
            steps.append(len(gen.rounds))
            new.append(len(gen.token_ids))
            lengths += [r.accepted + 1 for r in gen.rounds]
            msgs.append({"role": "assistant", "content": text})
        assert (c["decoding_steps"], c["new_tokens"], c["accept_lengths"]) == (steps, new, lengths), q["question_id"]


def test_outputs_are_identical_to_the_baseline_turn_by_turn(answered):
    _, files, _ = answered
    for m in METHODS[1:]:
        assert [a["choices"][0]["turns"] for a in files[m]] == [a["choices"][0]["turns"] for a in files["ar"]]
    assert any(len(a["choices"][0]["turns"]) == 2 for a in files["ar"])  # multi-turn questions were decoded


def test_a_later_turn_is_decoded_with_the_methods_own_earlier_answer(pair, answered):
    _, files, _ = answered
    q = next(json.loads(x) for x in QUESTIONS.read_text().splitlines() if len(json.loads(x)["turns"]) == 2)
    first, second = next(a for a in files["small"] if a["question_id"] == q["question_id"])["choices"][0]["turns"]
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule="small", budget=8, clock="a100-paper"))
    msgs = [{"role": "user", "content": q["turns"][0]}, {"role": "assistant", "content": first},
            {"role": "user", "content": q["turns"][1]}]
    assert dec.generate(msgs, max_new_tokens=8).text.strip() == second


def test_printed_specbench_speedup_is_speed_pys_ratio_of_means_from_the_files(answered):
    js, files, tmp = answered

    def speeds(lines, cats=None, recount=False):  # recount: the stub tokenizer's words, less one a turn (speed.py)
        return [(sum(len(t.split()) - 1 for t in a["choices"][0]["turns"]) if recount else sum(a["choices"][0]["new_tokens"]))
                / sum(a["choices"][0]["wall_time"]) for a in lines if cats is None or a["category"] in cats]

    groups = {"overall": None, "mt_bench": specbench.MT_BENCH, "translation": ["translation"], "rag": ["rag"]}
    for g, cats in groups.items():
        base = speeds(files["ar"], cats, recount=True)
        for m in METHODS:
            s = speeds(files[m], cats)
            expected = (sum(s) / len(s)) / (sum(base) / len(base))
            assert js["specbench"][g][m] == pytest.approx(expected, abs=1e-4)
            md = (tmp / "run" / "specbench.md").read_text()
            row = next(line for line in md.splitlines() if line.startswith(f"| {g} | {m} |"))
            assert row.split(" | ")[4] == f"{expected:.3f}x"
    assert set(js["specbench"]) == {"mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag", "overall"}


def test_speedup_table_ratio_of_means_and_mean_of_ratios_by_hand():
    answers = {m: [{"question_id": q, "category": c, "choices": [{"turns": ["x"], "new_tokens": [n], "wall_time": [t],
                                                                  "accept_lengths": acc}]}
                   for q, c, n, t, acc in rows]
               for m, rows in {"ar": [(1, "writing", 10, 1.0, [1] * 10), (2, "qa", 10, 0.5, [1] * 10)],
                               "x": [(1, "writing", 10, 0.5, [3, 3, 4]), (2, "qa", 10, 0.5, [5, 5])]}.items()}
    t = specbench.speedup_table(specbench.per_question(answers)).set_index(["group", "method"])
    assert t.loc[("overall", "x"), "speedup"] == pytest.approx(((20 + 20) / 2) / ((10 + 20) / 2))  # 4/3
    assert t.loc[("overall", "x"), "speedup_per_question"] == pytest.approx((2 + 1) / 2)
    assert t.loc[("mt_bench", "x"), "speedup"] == pytest.approx(2.0)
    assert t.loc[("overall", "x"), "mean_accepted"] == pytest.approx(20 / 5)
    assert list(dict.fromkeys(t.index.get_level_values(0))) == ["mt_bench", "qa", "overall"]


def _fail_to_load(*a, **k):
    raise AssertionError("a model was loaded before the input was checked")


def test_a_question_file_without_turns_is_one_clear_line(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "q.jsonl"
    bad.write_text(json.dumps({"question_id": 1, "category": "writing", "prompt": "hi"}) + "\n")
    monkeypatch.setattr(cmd, "load_pair_from_args", _fail_to_load)
    assert cli.main(["bench", "--prompts", str(bad), "--answers", str(tmp_path / "a"), "--methods", "small"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "line 1" in err and "'turns'" in err


def test_an_answers_folder_that_cannot_be_written_is_one_clear_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(cmd, "load_pair_from_args", _fail_to_load)
    rc = cli.main(["bench", "--prompts", str(QUESTIONS), "--answers", str(tmp_path / "file" / "answers"),
                   "--methods", "small"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "cannot write answer files" in err


def test_hf_peers_without_accept_lengths_are_refused_before_loading(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cmd, "load_pair_from_args", _fail_to_load)
    assert cli.main(["bench", "--prompts", str(QUESTIONS), "--answers", str(tmp_path), "--methods", "hf-pld"]) == 2
    assert "hf-pld" in capsys.readouterr().err


def test_a_file_in_the_folder_that_is_not_an_answer_file_is_named_in_one_line(answered, tmp_path):
    _, files, tmp = answered
    for m in METHODS:
        (tmp_path / f"{m}.jsonl").write_text((tmp / "answers" / f"{m}.jsonl").read_text())
    (tmp_path / "question.jsonl").write_text(QUESTIONS.read_text())  # questions, not answers
    (tmp_path / "notes.jsonl").write_text("not json\n")
    (tmp_path / "README.md").write_text("# a data card, ignored\n")
    answers, skipped = specbench.read_answers(tmp_path)
    assert sorted(answers) == sorted(METHODS)
    assert set(skipped) == {"question.jsonl", "notes.jsonl"}
    assert all(len(v.splitlines()) == 1 for v in skipped.values())
    assert re.search(r"question\.jsonl, line 1: not a Spec-Bench answer line", skipped["question.jsonl"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(TreeGraftError, match="holds no Spec-Bench answer file"):
        specbench.read_answers(tmp_path / "empty")


def test_methods_answer_in_a_rotated_order_and_ar_comes_first_once():
    assert specbench.answering_methods(["small", "ar", "small", "10101"]) == ["ar", "small", "10101"]
    with pytest.raises(TreeGraftError, match="method.s. hf-pld cannot write Spec-Bench answers"):
        specbench.answering_methods(["small", "hf-pld"])
    methods = ["ar", "small", "10101"]
    assert [specbench.rotated(methods, i) for i in (0, 1, 2, 3)] == [
        methods, ["small", "10101", "ar"], ["10101", "ar", "small"], methods]
    q = {"question_id": 81, "category": "writing", "turns": ["a", "b"]}
    line = specbench.answer_line(q, {"index": 0, "turns": ["x", "y"]}, "tiny-small")
    assert set(line) == FIELDS and list(line) == ["question_id", "category", "answer_id", "model_id", "tstamp", "choices"]
    assert (line["question_id"], line["category"], line["model_id"]) == (81, "writing", "tiny-small")
    assert line["choices"] == [{"index": 0, "turns": ["x", "y"]}] and len(line["answer_id"]) == 22


def test_peer_files_pick_spec_benchs_vanilla_run_as_the_baseline():
    pq = pd.DataFrame({"method": ["vicuna-7b-vanilla-float16", "vicuna-7b-eagle"], "question_id": ["1", "1"],
                       "category": ["qa", "qa"], "group": ["qa", "qa"], "new_tokens": [10, 10], "wall_s": [1.0, 0.5],
                       "accept_sum": [10.0, 6.0], "accept_n": [10, 2], "tokens_per_s": [10.0, 20.0]})
    t = specbench.speedup_table(pq).set_index(["group", "method"])
    assert t.loc[("qa", "vicuna-7b-eagle"), "speedup"] == pytest.approx(2.0)
    assert t.loc[("qa", "vicuna-7b-eagle"), "mean_accepted"] == pytest.approx(3.0)


def test_the_answer_writers_warm_up_leaves_token_recyclings_matrix_as_it_was(pair, tmp_path, monkeypatch):
    from treegraft_lab import bench, costs

    run = specbench.conversation_runner(pair, "recycling", 8, "topk", "wall", None, costs.load("a100-paper"))
    before = run.carried_state()
    bench.warm_up(run, [{"role": "user", "content": "Count from one to ten, please."}], 6)
    after = run.carried_state()
    assert (before["matrix"] is None and after["matrix"] is None) or bool((before["matrix"] == after["matrix"]).all())
    run([{"role": "user", "content": "Count from one to ten, please."}], 6)  # a timed run does change it
    assert run.carried_state()["matrix"] is not None
    warmed = []
    monkeypatch.setattr(bench, "warm_up", lambda runner, messages, n: warmed.append(n) or runner(messages, n))
    questions = [json.loads(x) for x in QUESTIONS.read_text().splitlines()][:1]
    specbench.answer_questions(pair, questions, ["recycling"], tmp_path / "a", max_new_tokens=4, budget=8,
                               warmup_tokens=2, progress=False)
    assert warmed == [2, 2]  # ar and recycling, each warmed through `bench.warm_up`
