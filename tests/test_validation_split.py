"""The validation set: its mix, its distance from the suite, and that nothing that tunes reads it."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from treegraft_lab import cli
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.prompts import load_prompts, tuning_prompts

ROOT = Path(__file__).resolve().parent.parent
KINDS = {"chat", "long_doc", "code", "math", "translation", "multi_turn"}
# Everything that fits, trains or chose a default reads prompts through `tuning_prompts` only.
TUNING_CODE = ["treegraft_lab/commands/collect.py", "treegraft_lab/training/drafter_distill.py"]


def test_validation_set_holds_at_least_60_prompts_of_six_kinds():
    rows = load_prompts(split="validation")
    per = Counter(r["category"] for r in rows)
    assert len(rows) >= 60 and set(per) == KINDS and min(per.values()) >= 10, per
    assert all(r["split"] == "validation" for r in rows)
    assert all(len(r["turns"]) >= 2 for r in rows if r["category"] == "multi_turn")
    assert all(len(r["turns"][0].split()) <= 25 for r in rows if r["category"] == "chat")  # nothing to copy
    assert all(len(r["turns"][0].split()) >= 500 for r in rows if r["category"] == "long_doc")


def test_validation_shares_no_prompt_or_source_with_train_or_eval():
    suite = load_prompts(split="all")
    val = load_prompts(split="validation")
    assert not {r["split"] for r in suite} & {"validation"}  # "all" of the suite is train + eval
    assert not {r["question_id"] for r in suite} & {r["question_id"] for r in val}
    assert not {t for r in suite for t in r["turns"]} & {t for r in val for t in r["turns"]}
    shared = {r["source"] for r in suite} & {r["source"] for r in val}
    assert not shared, shared  # no documentation file, HumanEval task or template in common


def test_validation_code_fixes_differ_from_their_reference_solution():
    fixes = [r for r in load_prompts(split="validation", categories=["code"]) if "has a bug" in r["turns"][0]]
    assert fixes
    for r in fixes:
        shown = re.search(r"```python\n(.*)\n```", r["turns"][0], re.S).group(1)
        assert shown.strip() != r["reference"][0].strip(), r["question_id"]


def test_validation_split_of_the_default_suite_is_the_validation_file():
    assert load_prompts(split="validation") == load_prompts("treegraft-validation", split="validation")
    assert load_prompts("treegraft-validation") == []  # its lines are validation, not eval


def test_tuning_prompts_refuse_the_validation_split_by_name_and_by_line():
    with pytest.raises(TreeGraftError, match="may not read the validation split"):
        tuning_prompts(split="validation", purpose="scheduler training")
    with pytest.raises(TreeGraftError, match="may not read validation prompts"):
        tuning_prompts("treegraft-validation", split="all", purpose="scheduler training")
    assert tuning_prompts(split="train", limit=2)  # the train split reads as before


def test_drafter_distillation_refuses_the_validation_split():
    from treegraft_lab.training import drafter_distill

    with pytest.raises(TreeGraftError, match="drafter distillation may not read the validation split"):
        drafter_distill.suite_split("validation")


@pytest.mark.parametrize("argv", [["collect", "--split", "validation"],
                                  ["collect", "--prompts", "treegraft-validation", "--split", "all"]])
def test_collect_refuses_validation_prompts_before_any_model_loads(argv, monkeypatch, capsys):
    from treegraft_lab import models

    monkeypatch.setattr(models, "load_pair", lambda *a, **k: pytest.fail("a model loaded"))
    assert cli.main(argv) == 2
    assert re.search("may not read (the )?validation", capsys.readouterr().err)


def test_train_scheduler_refuses_trajectories_of_validation_prompts(tmp_path, capsys):
    traj = tmp_path / "trajectories.parquet"
    traj.write_bytes(b"not read: the split is checked first")
    traj.with_suffix(".json").write_text(json.dumps({"shard_meta": [{"split": "train"}, {"split": "validation"}]}))
    assert cli.main(["train-scheduler", "--trajectories", str(traj)]) == 2
    assert "holds ['train', 'validation'] prompts: train the scheduler on the train split only" in capsys.readouterr().err


@pytest.mark.parametrize("path", TUNING_CODE)
def test_tuning_code_reads_prompts_only_through_tuning_prompts(path):
    text = (ROOT / path).read_text()
    assert "tuning_prompts(" in text and "load_prompts(" not in text, path


@pytest.mark.parametrize("command", [["bench", "--methods", "small"], ["check-lossless", "--prompts", "treegraft-suite"]])
def test_report_commands_read_the_validation_split(command, capsys):
    """--split validation reaches the validation file: its categories are the ones named."""
    assert cli.main([*command, "--split", "validation", "--categories", "poetry"]) == 2
    err = capsys.readouterr().err
    assert "treegraft-validation.jsonl (validation)" in err and "long_doc" in err, err
