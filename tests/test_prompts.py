"""The shipped prompt suite and the JSONL loader."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.prompts import load_prompts

CATEGORIES = {"multi_turn", "code", "summarization", "qa", "rewrite", "math"}


def test_suite_has_six_categories_of_30_with_both_splits():
    rows = load_prompts("treegraft-suite", split="all")
    per_cat = Counter(r["category"] for r in rows)
    assert set(per_cat) >= CATEGORIES
    assert all(n >= 30 for n in per_cat.values()), per_cat
    evals = Counter(r["category"] for r in rows if r["split"] == "eval")
    trains = Counter(r["category"] for r in rows if r["split"] == "train")
    assert all(evals[c] >= 10 and trains[c] >= evals[c] for c in CATEGORIES), (evals, trains)
    assert all(len(r["turns"]) == 2 for r in rows if r["category"] == "multi_turn")


def test_splits_are_disjoint_by_id_text_and_source():
    train = load_prompts(split="train")
    eval_ = load_prompts(split="eval")
    assert len(train) + len(eval_) == len(load_prompts(split="all"))
    assert not {r["question_id"] for r in train} & {r["question_id"] for r in eval_}
    assert not {r["turns"][0] for r in train} & {r["turns"][0] for r in eval_}
    # no eval prompt shares a source document, FAQ file section or HumanEval task with train
    doc_sources = {r["source"] for r in train if r["category"] in ("summarization", "rewrite")}
    assert not doc_sources & {
        r["source"] for r in eval_ if r["category"] in ("summarization", "rewrite")
    }
    assert all(r["split"] == "eval" for r in eval_)


def test_passages_are_short_enough_for_a_cpu_model():
    for r in load_prompts(split="all", categories=["summarization", "rewrite", "qa"]):
        words = len(r["turns"][0].split())
        assert 40 <= words <= 450, (r["question_id"], words)


MATH = [  # each math prompt's template, and its answer worked out here from the numbers in it
    (r"saves \$(\d+) every week\. How many weeks does he need to save \$(\d+)", lambda a, b: b / a),
    (r"packs of (\d+)\. A teacher needs (\d+) pencils", lambda a, b: -(-b // a)),
    (r"travels at (\d+) km per hour for (\d+) hours", lambda a, b: a * b),
    (r"area of (\d+) square metres and a width of (\d+) metres", lambda a, b: a / b),
    (r"has (\d+) cows and (\d+) chickens", lambda a, b: 4 * a + 2 * b),
    (r"uses (\d+) litres of fuel per 100 km\. How many litres does it need for a (\d+) km", lambda a, b: a * b / 100),
    (r"There are (\d+) students .* (\d+)% of them walk", lambda a, b: a * b / 100),
    (r"Tom has (\d+) marbles\. He gives (\d+) to his sister and then buys (\d+) more", lambda a, b, c: a - b + c),
    (r"costs \$(\d+)\. It is on sale for (\d+)% off", lambda a, b: a * (100 - b) / 100),
    (r"reads (\d+) pages a day\. Her book has (\d+) pages", lambda a, b: b / a),
    (r"sells (\d+) boxes of muffins\. Each box holds (\d+) muffins and each muffin costs \$(\d+)",
     lambda a, b, c: a * b * c),
    (r"is (\d+) metres long and (\d+) metres wide\. A fence", lambda a, b: 2 * (a + b)),
]


def test_math_references_are_the_answers_to_their_questions():
    rows = load_prompts(split="all", categories="math")
    assert rows
    for r in rows:
        (ref,) = r["reference"]
        assert re.fullmatch(r"\d+(\.\d+)?", ref), (r["question_id"], ref)  # a plain number, as the prompt asks
        solved = [f(*map(int, m.groups())) for pat, f in MATH if (m := re.search(pat, r["turns"][0]))]
        assert len(solved) == 1, (r["question_id"], "no template or several match")
        assert float(ref) == pytest.approx(solved[0], abs=1e-9), (r["question_id"], ref, solved[0])


def test_filters_limit_and_per_category():
    rows = load_prompts(split="eval", categories=["code", "math"], per_category=3)
    assert Counter(r["category"] for r in rows) == {"code": 3, "math": 3}
    assert len(load_prompts(split="train", limit=5)) == 5


def test_external_file_is_read_without_split_as_eval(tmp_path):
    path = tmp_path / "mtbench.jsonl"
    lines = [
        {"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Shorter."]},
        {"question_id": 82, "category": "math", "turns": ["1+1?"], "reference": "2"},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    rows = load_prompts(path)
    assert [r["question_id"] for r in rows] == [81, 82]
    assert rows[1]["reference"] == "2" and rows[0]["split"] == "eval"
    assert load_prompts(str(path), split="all") == rows
    assert load_prompts(str(path), split="train") == []


def _write_jsonl(path, lines):
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_mtbench_reference_list_of_strings_is_kept_as_is(tmp_path):
    path = _write_jsonl(
        tmp_path / "question.jsonl",
        [
            {
                "question_id": 111,
                "category": "math",
                "turns": ["The vertices of a triangle ...", "What's area of the circle ..."],
                "reference": ["Area is 3", "5pi"],
            },
            {
                "question_id": 81,
                "category": "writing",
                "turns": ["Compose a blog post.", "Rewrite it."],
            },
        ],
    )
    rows = load_prompts(path)
    assert [r["question_id"] for r in rows] == [111, 81]
    assert rows[0]["reference"] == ["Area is 3", "5pi"]
    assert "reference" not in rows[1]
    assert all(r["split"] == "eval" for r in rows)


def test_reference_list_of_lists_and_other_json_is_kept_as_is(tmp_path):
    nested = [["a = 1", "b = 2"], ["c"]]
    other = {"answer": 4, "notes": [None, 1.5]}
    path = _write_jsonl(
        tmp_path / "question.jsonl",
        [
            {
                "question_id": 1,
                "category": "coding",
                "turns": ["Write f.", "Now g."],
                "reference": nested,
            },
            {"question_id": 2, "category": "math", "turns": ["2+2?"], "reference": other},
        ],
    )
    rows = load_prompts(path)
    assert rows[0]["reference"] == nested and rows[1]["reference"] == other


def test_null_reference_is_accepted(tmp_path):
    path = _write_jsonl(
        tmp_path / "question.jsonl",
        [
            {"question_id": 1, "category": "writing", "turns": ["Hi."], "reference": None},
        ],
    )
    [row] = load_prompts(path)
    assert row["reference"] is None and row["turns"] == ["Hi."]


def test_specbench_line_with_unknown_fields_loads(tmp_path):
    path = _write_jsonl(
        tmp_path / "question.jsonl",
        [
            {
                "question_id": "translation_0",
                "category": "translation",
                "turns": ["Translate German to English: Guten Morgen."],
                "answer_id": "x1",
                "model_id": None,
                "tstamp": 1.7e9,
                "meta": {"src": "wmt14"},
            },
            {"question_id": 161, "category": "qa", "turns": ["Who wrote Hamlet?"], "extra": [1, 2]},
        ],
    )
    rows = load_prompts(path, categories=["translation"])
    assert [r["question_id"] for r in rows] == ["translation_0"]
    assert rows[0]["turns"] == ["Translate German to English: Guten Morgen."]
    assert len(load_prompts(path, split="all")) == 2


def test_cli_prompts_option_takes_a_question_jsonl_path(tmp_path, monkeypatch):
    import treegraft_lab.prompts as prompts_mod
    from treegraft_lab import cli
    from treegraft_lab.commands import check_lossless

    path = _write_jsonl(
        tmp_path / "question.jsonl",
        [
            {"question_id": 81, "category": "writing", "turns": ["A", "B"], "reference": [["x"]]},
        ],
    )
    loaded, real = [], prompts_mod.load_prompts
    monkeypatch.setattr(prompts_mod, "load_prompts", lambda *a, **k: loaded.append(real(*a, **k)) or loaded[-1])

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):  # the prompts are read before any model is loaded
        raise Stop

    monkeypatch.setattr(check_lossless, "load_pair_from_args", stop)
    with pytest.raises(Stop):
        cli.main(["check-lossless", "--prompts", str(path)])
    assert [r["question_id"] for r in loaded[0]] == [81]
    assert loaded[0][0]["reference"] == [["x"]]


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "line 2: not valid JSON"),
        ('{"question_id": 2, "category": "x"}', "line 2: 'turns'"),
        ('{"question_id": 2, "category": "x", "turns": []}', "line 2: 'turns'"),
        ('{"question_id": 2, "category": "x", "turns": "hi"}', "line 2: 'turns'"),
        ('{"question_id": 2, "category": "x", "turns": ["hi", 3]}', "line 2: 'turns'"),
        ('{"question_id": 2, "category": "x", "turns": [["hi"]]}', "line 2: 'turns'"),
        ('{"category": "x", "turns": ["hi"]}', "line 2: 'question_id'"),
        ('{"question_id": 1, "category": "x", "turns": ["hi"]}', "line 2: duplicate"),
        ('{"question_id": 2, "category": "x", "turns": ["a"], "split": "dev"}', "'split'"),
    ],
)
def test_bad_line_names_its_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question_id": 1, "category": "x", "turns": ["hi"]}\n' + line + "\n")
    with pytest.raises(TreeGraftError, match=message) as err:
        load_prompts(path)
    assert str(path) in str(err.value)  # the message names the file


def test_missing_file_and_unknown_suite_or_category():
    with pytest.raises(TreeGraftError, match="not found"):
        load_prompts("/nonexistent/prompts.jsonl")
    with pytest.raises(TreeGraftError, match="known suites: .*treegraft-suite"):
        load_prompts("no-such-suite")
    with pytest.raises(TreeGraftError, match="known: code"):
        load_prompts(categories=["poetry"])
    with pytest.raises(TreeGraftError, match="unknown split"):
        load_prompts(split="test")
