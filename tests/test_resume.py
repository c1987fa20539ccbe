"""Long runs lose nothing: bench (and --answers), regime --collect / --decode and collect, stopped halfway by
a KeyboardInterrupt injected at a fixed call (no clock), leave a journal, print the command that resumes
them, refuse to resume with other settings, and resumed write what an uninterrupted run writes.

Two runs never measure the same wall times: the comparisons read every column but the measured ones
(tokens, decisions, acceptance, the modelled clock's times, the row sets and their order). No test reads
a duration."""

from __future__ import annotations

import itertools
import json
import math
import shlex

import pandas as pd
import pytest
import torch

import treegraft_lab
from treegraft_lab import cli, costs, measure, resume
from treegraft_lab.bench import SameStart
from treegraft_lab.commands import bench as bench_cmd
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.tiny import noisy_pair, tiny_pair

WORDS = [" ".join(f"w{j % k}" for j in range(n)) for k, n in ((5, 24), (3, 20), (4, 22))]
PROMPTS = [{"question_id": f"q{i}", "category": ("code", "math")[i % 2], "turns": [w], "split": "train"}
           for i, w in enumerate(WORDS)]
MEASURED = ["measured_wall_s", "draft_s", "verify_s", "forward_s", "overhead_s", "prefill_s"]
ROUND_SHARES = ["ms_per_round", "draft_share", "verify_share", "overhead_share"]


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: tiny models gain nothing from two, and lose much on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def interrupt_at(monkeypatch, owner, name: str, call: int) -> None:
    """The `call`-th call (from 1) of `owner.name` raises KeyboardInterrupt: a Ctrl-C at a fixed point."""
    orig, seen = getattr(owner, name), itertools.count(1)

    def hit(*a, **k):
        if next(seen) == call:
            raise KeyboardInterrupt
        return orig(*a, **k)

    monkeypatch.setattr(owner, name, hit)


def last_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1] if err else ""


@pytest.fixture
def prompts_file(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(q) for q in PROMPTS) + "\n")
    return path


@pytest.fixture
def bench_pair(monkeypatch):
    """The tiny pair for every bench run, deciding on a fixed profile where this device's would be measured."""
    pair = tiny_pair(scale=4.0)
    monkeypatch.setattr(bench_cmd, "load_pair_from_args", lambda args, require_mid=True: pair)
    monkeypatch.setattr(measure, "for_pair", lambda *a, **k: costs.load("a100-paper"))
    return pair


def unmeasured(rec: pd.DataFrame) -> pd.DataFrame:
    """Bench records without what the wall clock measured (the modelled clocks' times stay)."""
    rec = rec.drop(columns=[c for c in MEASURED if c in rec])
    wall = rec["clock"] == "wall" if "clock" in rec else slice(None)
    rec.loc[wall, ["wall_s", "tokens_per_s"]] = math.nan
    return rec


def test_a_bench_interrupted_halfway_resumes_to_the_tables_of_an_uninterrupted_one(bench_pair, prompts_file, tmp_path,
                                                                                   monkeypatch, capsys):
    args = ["bench", "--prompts", str(prompts_file), "--split", "train", "--methods", "ar,small,recycling",
            "--max-new-tokens", "6", "--budget", "8", "--warmup-tokens", "2", "--repeats", "2", "--prune", "topk",
            "--growth", "lookup", "--small", "ngram+recycling", "--model-on", "a100-paper", "--json"]
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert cli.main([*args, "--out", str(full)]) == 0
    assert not (full / "partial").exists()  # a complete folder looks as it always did
    # 10 generations a prompt (3 methods on the wall clock, 2 tree methods on a100-paper, 2 repeats):
    # Ctrl-C in the third prompt, after 3 of its generations
    with monkeypatch.context() as m:
        interrupt_at(m, SameStart, "run", 2 * 10 + 4)
        assert cli.main([*args, "--out", str(cut)]) == 130
    again = shlex.join([*args, "--out", str(cut)])
    assert last_line(capsys) == f"bench: interrupted; 2 of 3 prompts stored in {cut}; resume with: treegraft-lab {again} --resume"
    journal = cut / "partial"
    lines = [json.loads(x) for x in (journal / "records.jsonl").read_text().splitlines()]
    assert [x["key"] for x in lines] == ["0/q0", "1/q1"] and all(len(x["records"]) == 2 * (3 + 3) for x in lines)
    assert not (cut / "records.parquet").exists()  # `treegraft-lab report` reads no half-run
    state = torch.load(journal / "state-1.pt", weights_only=True)  # Token Recycling's matrix, as prompt 2 left it
    assert state[("recycling", "wall")]["matrix"] is not None and state[("small", "a100-paper")]["matrix"] is not None

    assert cli.main([*args, "--out", str(cut)]) == 2  # no --resume: refused, not mixed
    assert f"holds an interrupted bench run (2 stored): continue it with `treegraft-lab {again} --resume`" in last_line(capsys)
    assert cli.main([*args, "--max-new-tokens", "5", "--out", str(cut), "--resume"]) == 2
    refusal = capsys.readouterr().err.strip().splitlines()  # one line, naming the flag and --resume
    assert len(refusal) == 1 and "--max-new-tokens 6 there, 5 here" in refusal[0] and "--resume)" in refusal[0]

    assert cli.main([*args, "--out", str(cut), "--resume"]) == 0
    assert not journal.exists()
    a, b = (pd.read_parquet(d / "records.parquet") for d in (full, cut))
    pd.testing.assert_frame_equal(unmeasured(a), unmeasured(b))
    a, b = (pd.read_parquet(d / "summary.parquet") for d in (full, cut))
    wall = a["clock"] == "wall"
    timed = ["tokens_per_s", "speedup", "speedup_min", "speedup_max", "spread_lo", "spread_hi"]
    for d in (a, b):
        d.loc[wall, timed] = math.nan
    pd.testing.assert_frame_equal(a.drop(columns=ROUND_SHARES), b.drop(columns=ROUND_SHARES))
    ja, jb = (json.loads((d / "results.json").read_text()) for d in (full, cut))
    assert ja["modelled"] == jb["modelled"] and ja["same_decisions"] == jb["same_decisions"]
    assert "resumed" not in ja["meta"] and [s["stored"] for s in jb["meta"]["resumed"]] == [2]
    assert "Interrupted and resumed at prompt 3" in (cut / "results.md").read_text()
    assert cli.main([*args, "--out", str(cut), "--resume"]) == 2  # complete: nothing to resume
    assert "holds a complete run and nothing interrupted: leave out --resume" in last_line(capsys)


def test_a_spec_bench_answer_run_interrupted_keeps_whole_questions_and_resumes(bench_pair, prompts_file, tmp_path,
                                                                              monkeypatch, capsys):
    from treegraft_lab import specbench

    args = ["bench", "--prompts", str(prompts_file), "--split", "train", "--methods", "ar,small,recycling",
            "--max-new-tokens", "6", "--budget", "8", "--warmup-tokens", "2", "--prune", "topk", "--growth", "lookup",
            "--small", "ngram+recycling", "--json"]
    runs = {}
    for name in ("full", "cut"):
        runs[name] = [*args, "--answers", str(tmp_path / f"{name}-answers"), "--out", str(tmp_path / name)]
    assert cli.main(runs["full"]) == 0
    with monkeypatch.context() as m:  # 3 methods a question: Ctrl-C in the third, after two answers
        interrupt_at(m, specbench, "_converse", 2 * 3 + 3)
        assert cli.main(runs["cut"]) == 130
    assert last_line(capsys).startswith(f"bench: interrupted; 2 of 3 prompts stored in {tmp_path / 'cut'}; resume with: ")
    for m in ("ar", "small", "recycling"):  # every answer file holds the same two whole questions
        assert [x["question_id"] for x in specbench.read_answer_file(tmp_path / "cut-answers" / f"{m}.jsonl")] == ["q0", "q1"]
    assert cli.main([*runs["cut"], "--resume"]) == 0
    for m in ("ar", "small", "recycling"):
        a, b = (specbench.read_answer_file(tmp_path / f"{n}-answers" / f"{m}.jsonl") for n in ("full", "cut"))
        keep = ("turns", "new_tokens", "decoding_steps", "accept_lengths")
        assert [(x["question_id"], {k: x["choices"][0][k] for k in keep}) for x in a] == \
               [(x["question_id"], {k: x["choices"][0][k] for k in keep}) for x in b]
    a, b = (pd.read_parquet(tmp_path / n / "records.parquet") for n in ("full", "cut"))
    pd.testing.assert_frame_equal(unmeasured(a), unmeasured(b))


REGIME_PROMPTS = [{"question_id": f"r{i}", "category": c, "turns": [p]} for i, (c, p) in enumerate([
    ("code", [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 3, 5, 6]), ("math", [1, 2, 3, 4, 1, 2, 3, 4, 9, 9, 1, 2])])]


def test_a_regime_collect_and_decode_interrupted_twice_resumes_to_the_same_replays_decodes_and_map(tmp_path, monkeypatch,
                                                                                                  capsys):
    pair = noisy_pair()
    monkeypatch.setattr(treegraft_lab, "load_pair", lambda *a, **k: pair)
    monkeypatch.setattr(treegraft_lab, "load_prompts", lambda *a, **k: REGIME_PROMPTS)
    args = ["regime", "--collect", "--decode", "--no-ray", "--max-new", "3", "--ratios", "0.1,0.6",
            "--scheduler", "small=small", "--scheduler", "fixed=10101", "--schedules", "all-small,all-mid,oracle"]
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert cli.main([*args, "--replays", str(full)]) == 0
    table = capsys.readouterr().out
    again = f"treegraft-lab {shlex.join([*args, '--replays', str(cut)])} --resume"
    with monkeypatch.context() as m:  # Ctrl-C while the second prompt's replays are committed
        interrupt_at(m, resume.Journal, "add", 2)
        assert cli.main([*args, "--replays", str(cut)]) == 130
    assert last_line(capsys) == (f"regime: interrupted; 1 of 2 prompts replayed and 0 of 8 decodes (a prompt at a ratio "
                                 f"with a scheduler) stored in {cut}; resume with: {again}")
    assert not (cut / "replays.parquet").exists()
    assert cli.main([*args, "--max-new", "4", "--replays", str(cut), "--resume"]) == 2
    assert "--max-new 3 there, 4 here" in last_line(capsys)
    with monkeypatch.context() as m:  # resumed, then Ctrl-C in the fourth decode
        interrupt_at(m, TreeGraftDecoder, "generate", 4)
        assert cli.main([*args, "--replays", str(cut), "--resume"]) == 130
    assert last_line(capsys).startswith("regime: interrupted; 2 of 2 prompts replayed and 3 of 8 decodes")
    assert cli.main([*args, "--replays", str(cut), "--resume"]) == 0
    assert capsys.readouterr().out == table.replace(str(full), str(cut))  # the printed map
    assert not (cut / "partial").exists()
    for name in ("replays.parquet", "decodes-a100-paper-small.parquet", "decodes-a100-paper-fixed.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(full / name), pd.read_parquet(cut / name))
    assert json.loads((full / "replays.json").read_text()) == json.loads((cut / "replays.json").read_text())


def test_a_collect_interrupted_mid_prompt_resumes_with_the_draws_and_recycling_state_it_had(prompts_file, tmp_path,
                                                                                           monkeypatch, capsys):
    from treegraft_lab.training import collect

    pair = tiny_pair(scale=4.0)
    monkeypatch.setattr(treegraft_lab, "load_pair", lambda *a, **k: pair)
    args = ["collect", "--prompts", str(prompts_file), "--limit", "3", "--states", "2", "--max-new", "10", "--warm",
            "--profile", "a100-paper", "--small", "ngram+recycling", "--depth", "3", "--width", "4", "--children", "4",
            "--budget", "16", "--growth", "full", "--prune", "topk", "--quiet"]
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert cli.main([*args, "--out", str(full)]) == 0
    with monkeypatch.context() as m:  # two round starts a prompt: Ctrl-C at the second prompt's second
        interrupt_at(m, collect, "replay_all", 4)
        assert cli.main([*args, "--out", str(cut)]) == 130
    assert last_line(capsys) == (f"collect: interrupted; 1 of 3 prompts of shard 0/1 stored in {cut}; resume with: "
                                 f"treegraft-lab {shlex.join([*args, '--out', str(cut)])} --resume")
    journal = cut / "shard-000-of-001.partial"
    assert (journal / "state-0.pt").is_file() and not (cut / "shard-000-of-001.parquet").exists()
    assert cli.main([*args, "--out", str(cut)]) == 2 and "--resume" in last_line(capsys)
    assert cli.main([*args, "--seed", "1", "--out", str(cut), "--resume"]) == 2 and "--seed 0 there, 1 here" in last_line(capsys)
    assert cli.main([*args, "--out", str(cut), "--resume"]) == 0
    assert not journal.exists()
    stem = "shard-000-of-001"
    a, b = (pd.read_parquet(d / f"{stem}.parquet") for d in (full, cut))
    assert list(a.columns) == list(b.columns) and a["state"].nunique() == 6  # 3 prompts, 2 round starts each
    keep = [c for c in a.columns if not c.startswith("meas_")]  # measured times differ; the rest is the computation
    pd.testing.assert_frame_equal(a[keep], b[keep])
    a, b = (pd.read_parquet(d / f"{stem}.calls.parquet") for d in (full, cut))
    pd.testing.assert_frame_equal(a.drop(columns="ms"), b.drop(columns="ms"))
    assert json.loads((full / f"{stem}.json").read_text()) == json.loads((cut / f"{stem}.json").read_text())


def test_a_journal_drops_a_torn_last_line_and_keeps_the_state_of_the_last_stored_unit(tmp_path):
    j = resume.Journal.open(tmp_path / "partial", {"--n": 1}, "treegraft-lab x", False, "x", "--out")
    j.add("a", [1], {"m": torch.arange(3)})
    j.add("b", [2], {"m": torch.arange(4)})
    with open(tmp_path / "partial" / "records.jsonl", "a") as f:
        f.write('{"key": "c", "rec')  # a write cut short
    back = resume.Journal.open(tmp_path / "partial", {"--n": 1}, "treegraft-lab x", True, "x", "--out")
    assert back.done == {"a": [1], "b": [2]} and back.state()["m"].tolist() == [0, 1, 2, 3]
    assert [p.name for p in (tmp_path / "partial").glob("state-*")] == ["state-1.pt"]
    with pytest.raises(TreeGraftError, match=r"--resume: .* holds a x run with other settings \(--n 1 there, 2 here\)"):
        resume.Journal.open(tmp_path / "partial", {"--n": 2}, "treegraft-lab x", True, "x", "--out")
    with pytest.raises(TreeGraftError, match="holds an interrupted x run .2 stored.: continue it with `treegraft-lab x --resume`"):
        resume.Journal.open(tmp_path / "partial", {"--n": 1}, "treegraft-lab x", False, "x", "--out")
