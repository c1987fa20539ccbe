"""Bad input to a command is refused in one line, exit code 2, before any model loads: loading is
made to fail here, so a command that reaches a model before checking its input fails the test."""

from __future__ import annotations

import pytest

from treegraft_lab import cli


class ModelLoaded(AssertionError):
    """Raised where a model would load: a command got that far before refusing its input."""


@pytest.fixture
def no_model_loads(monkeypatch):
    """Every way a command loads a model raises `ModelLoaded`: the pair loader (imported lazily by
    the commands, so patched at its module) and transformers' `from_pretrained`."""
    from transformers import AutoModelForCausalLM

    from treegraft_lab import models

    def fail(*a, **k):
        raise ModelLoaded("a model was loaded before the input was checked")

    monkeypatch.setattr(models, "load_pair", fail)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", fail)


MISSING = "no/such/prompts.jsonl"

REFUSED = [
    (["collect", "--shard", "3/2"], "--shard '3/2': need n >= 1 and 0 <= i < n"),
    (["collect", "--budget", "0"], "budget must be an integer >= 1"),
    (["collect", "--prompts", MISSING], f"prompt file '{MISSING}' not found"),
    (["collect", "--small", "trie"], "small must be one of ngram, recycling, suffix"),
    (["collect", "--growth", "lookup", "--small", "ngram+trie"], "small must be one of"),
    (["collect", "--profile", "a100-nope"], "no device profile 'a100-nope'"),
    (["collect", "--states", "0"], "--states 0: give a number >= 1"),
    (["collect", "--split", "eval", "--prompts", "treegraft-suite", "--per-category", "0"], "no prompts in"),
    (["scheduler", "compare", "--shard", "2/2"], "--shard '2/2': need n >= 1 and 0 <= i < n"),
    (["scheduler", "compare", "--budget", "0"], "budget must be an integer >= 1"),
    (["scheduler", "compare", "--budget", "lots"], "--budget must be an integer or 'auto', got 'lots'"),
    (["scheduler", "compare", "--schedules", "10201"], "schedule '10201' is not one of"),
    (["scheduler", "compare", "--schedules", "small,rule:bogus"], "schedule 'rule:bogus': the rules are"),
    (["scheduler", "compare", "--schedules", ","], "--schedules ',': name at least one schedule"),
    (["scheduler", "compare", "--schedules", "adaptive", "--prune", "topk", "--dtype", "float32"],
     "no scheduler for pair 'smollm2-pocket'"),
    (["regime", "--decode", "--scheduler", "x=rule:bogus"], "x=rule:bogus: neither a scheduler folder nor a schedule"),
    (["regime", "--decode", "--scheduler", "x=no/such/folder"], "x=no/such/folder: neither a scheduler folder"),
    (["regime", "--decode", "--scheduler", "family"], "--scheduler 'family': write NAME=FOLDER"),
    (["regime", "--collect", "--prompts", MISSING], f"prompt file '{MISSING}' not found"),
    (["regime", "--decode", "--scheduler", "m=small", "--profile", "a100-nope"], "no device profile 'a100-nope'"),
    (["profile", "--rounds", "--schedules", "10201"], "schedule '10201' is not one of"),
    (["profile", "--rounds", "--budget", "0"], "budget must be an integer >= 1"),
    (["profile", "--rounds", "--prompts", MISSING], f"prompt file '{MISSING}' not found"),
    (["profile", "--rounds", "--schedules", "adaptive", "--dtype", "float32"], "no scheduler for pair 'smollm2-pocket'"),
    (["check-lossless", "--prompts", "treegraft-suite", "--schedules", "adaptive", "--model-on", "a100-paper",
      "--model-only", "--growth", "compact"], "no scheduler for pair 'smollm2-pocket' with clock 'a100-paper'"),
    (["check-lossless", "--prompts", MISSING], f"prompt file '{MISSING}' not found"),
    (["generate", "hi", "--small", "trie"], "small must be one of"),
    (["bench", "--methods", "small", "--prompts", MISSING], f"prompt file '{MISSING}' not found"),
    (["demo", "--pair", "no-such-pair", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    (["demo", "--pair", "no-such-pair"], "unknown pair 'no-such-pair'; known pairs: "),
    (["collect", "--pair", "no-such-pair"], "unknown pair 'no-such-pair'"),
    (["regime", "--decode", "--pair", "no-such-pair"], "unknown pair 'no-such-pair'"),
    (["regime", "--decode", "--scheduler", "m=small", "--max-new", "0"], "--max-new 0: give a number >= 1"),
    (["scheduler", "compare", "--schedules", "small", "--pair", "no-such-pair"], "unknown pair 'no-such-pair'"),
    (["scheduler", "compare", "--schedules", "small", "--max-new", "0"], "--max-new 0: give a number >= 1"),
    (["scheduler", "compare", "--schedules", "small", "--per-category", "0"], "no prompts in 'treegraft-suite'"),
    (["generate", "hi", "--max-new-tokens", "0"], "--max-new-tokens 0: give a number >= 1"),
    (["generate", "hi", "--pair", "no-such-pair"], "unknown pair 'no-such-pair'"),
    (["check-lossless", "--prompts", "treegraft-suite", "--limit", "0"], "no prompts in 'treegraft-suite'"),
    (["check-lossless", "--prompts", "treegraft-suite", "--max-new-tokens", "0"], "--max-new-tokens 0: give a number >= 1"),
    (["bench", "--methods", "small", "--limit-per-category", "0"], "no prompts in 'treegraft-suite'"),
    (["bench", "--methods", "small", "--pair", "no-such-pair"], "unknown pair 'no-such-pair'"),
]


@pytest.mark.parametrize("argv, words", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_bad_input_is_refused_in_one_line_before_any_model_loads(argv, words, no_model_loads, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"treegraft-lab {argv[0]}: error: ") and words in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_the_fixture_catches_a_command_that_loads_first(no_model_loads):
    """Good input reaches the loader, which fails loudly here instead of loading."""
    with pytest.raises(ModelLoaded):
        cli.main(["scheduler", "compare", "--schedules", "small", "--per-category", "1"])
