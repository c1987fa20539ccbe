"""What a new user meets in the first hour: a pruner's output checked, a decoder reset to a fresh state,
errors in the words of where they were made (flags on the command line), and bad input refused before
anything loads or is measured."""

from __future__ import annotations

import json

import pytest

from treegraft_lab import cli, costs, measure, models
from treegraft_lab.config import DecodeConfig, preset
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.tiny import save_tiny_pair, tiny_pair

IDS = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 3]
A100 = costs.load("a100-paper")


def test_a_pruner_that_drops_the_root_or_a_parent_is_refused_naming_the_rule():
    dec = TreeGraftDecoder(tiny_pair("llama"), preset("full", schedule="small"), profile=A100)
    dec.prune = lambda tree: tree.prune(8)[1:]  # no root
    with pytest.raises(TreeGraftError, match=r"the root \(0\) first.*: the root is missing"):
        dec.generate(IDS, max_new_tokens=8)

    def orphans(tree):  # the root and nodes of depth 2 or more, without their parents
        deep = [v for v in range(1, len(tree.tokens)) if tree.alive[v] and tree.depth[v] >= 2]
        seen.append(len(deep))
        return [0, *deep[:4]]

    seen = []
    dec.prune = orphans
    with pytest.raises(TreeGraftError, match=r"kept without its parent \d+ \(not ancestor-closed\)"):
        dec.generate(IDS, max_new_tokens=32)
    assert seen[-1] > 0
    dec.prune = lambda tree: list(reversed(tree.prune(8)))[-1:] + sorted(tree.prune(8))[1:]  # root first, any order
    assert dec.generate(IDS, max_new_tokens=8).token_ids


def _rounds(gen):
    return [(r.accepted, r.kept) for r in gen.rounds]


def test_reset_starts_the_next_generate_from_a_fresh_decoders_state():
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    cfg = DecodeConfig(schedule="small", prune="topk")  # the default small drafters: n-gram + Token Recycling
    dec = TreeGraftDecoder(pair, cfg, profile=A100)
    first = dec.generate(IDS, max_new_tokens=24)
    hot = dec.generate(IDS, max_new_tokens=24)  # Token Recycling's matrix carried over: another tree
    assert dec.carried_state()["matrix"] is not None
    dec.reset()
    assert dec.carried_state()["matrix"] is None
    again = dec.generate(IDS, max_new_tokens=24)
    fresh = TreeGraftDecoder(pair, cfg, profile=A100).generate(IDS, max_new_tokens=24)
    assert _rounds(again) == _rounds(first) == _rounds(fresh) and again.token_ids == first.token_ids == hot.token_ids
    assert _rounds(hot) != _rounds(first), "the carried matrix changed nothing: this test shows no reset"


def test_a_missing_target_folder_is_named_even_without_a_mid(tmp_path):
    with pytest.raises(TreeGraftError, match=f"model folder '{tmp_path / 'nope'}' does not exist"):
        models.load_pair(target=str(tmp_path / "nope"))


def test_command_line_errors_advise_flags_not_python_arguments(tmp_path, capsys):
    folder = save_tiny_pair(tmp_path / "pair") / "target"
    code = cli.main(["generate", "hi", "--target", str(folder), "--schedule", "10101", "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2 and "--mid FOLDER" in err and "--schedule small" in err
    assert "require_mid" not in err and "mid=..." not in err


def test_a_mid_drafter_of_another_vocabulary_is_refused_from_its_config_before_any_weights_load(tmp_path, monkeypatch):
    folders = save_tiny_pair(tmp_path / "pair")
    cfg = json.loads((folders / "mid" / "config.json").read_text())
    (folders / "mid" / "config.json").write_text(json.dumps({**cfg, "vocab_size": 16}))
    monkeypatch.setattr(models, "_load_causal_lm", lambda *a, **k: pytest.fail("weights loaded before the check"))
    with pytest.raises(TreeGraftError, match=r"has vocab_size 16 \(its config.json\) but the target's tokenizer"):
        models.load_pair(target=folders / "target", mid=folders / "mid", device="cpu")


def test_max_new_tokens_is_refused_before_the_profile_is_measured(monkeypatch):
    from treegraft_lab import workbench

    monkeypatch.setattr(measure, "resolve", lambda *a, **k: pytest.fail("measured before checking max_new_tokens"))
    with pytest.raises(TreeGraftError, match="max_new_tokens must be an integer >= 1, got 0"):
        workbench.record_runs(tiny_pair("llama"), ["a prompt"], DecodeConfig(), max_new_tokens=0)


def test_the_default_config_says_what_it_chose_and_chooses_adaptive_only_where_trained(monkeypatch):
    from treegraft_lab import decoder as decoder_module

    said = []
    monkeypatch.setattr(decoder_module, "note", said.append)  # each line, even one said earlier in the process
    pair = tiny_pair("llama")  # "tiny-llama": no scheduler trained for it
    dec = TreeGraftDecoder(pair, DecodeConfig(), profile=A100)
    assert dec.config.schedule == "small" and dec.config.prune == "topk"  # a100-paper: a flat curve
    steep = costs.DeviceProfile("steep", {1: 10.0, 64: 40.0}, {1: 2.0, 100: 8.0}, 0.5)
    assert TreeGraftDecoder(pair, DecodeConfig(), profile=steep).config.prune == "value"
    assert TreeGraftDecoder(pair, DecodeConfig(schedule="10101"), profile=steep).config.schedule == "10101"
    assert said[0].startswith("DecodeConfig on a100-paper: schedule=small, no mid call (no scheduler trained")


def test_a_registered_pair_loads_in_the_dtype_its_schedulers_were_trained_for(monkeypatch):
    import torch

    cpu = torch.device("cpu")
    monkeypatch.setattr(models, "auto_dtype_reason", lambda d: (torch.bfloat16, "bfloat16: native bf16 here"))
    dtype, why = models.scheduler_dtype("smollm2-pocket", cpu)  # trained for cpu-float32 only
    assert dtype == torch.float32 and "trained for cpu-float32 and none for bfloat16" in why
    assert models.scheduler_dtype("tiny-llama", cpu) is None  # no scheduler: auto stays auto
    monkeypatch.setattr(models, "auto_dtype_reason", lambda d: (torch.float32, "float32"))
    assert models.scheduler_dtype("smollm2-pocket", cpu) is None
