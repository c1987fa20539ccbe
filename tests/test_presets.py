"""One set of defaults: `DecodeConfig()` is the command line with no flags (the speed preset), and
the named presets serve library and command line alike."""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

import pytest

from treegraft_lab import costs
from treegraft_lab.commands import generate
from treegraft_lab.commands.common import config_from_args
from treegraft_lab.config import DecodeConfig, preset
from treegraft_lab.presets import DEFAULT_PAIR, GROWTHS, LOOKUP_TOKENS

pytestmark = pytest.mark.usefixtures("busy_machine")  # every test here runs beside two busy loops


def cli_config(*flags: str) -> DecodeConfig:
    """The DecodeConfig `treegraft-lab generate PROMPT *flags` decodes with."""
    parser = argparse.ArgumentParser()
    generate.add_arguments(parser)
    return config_from_args(parser.parse_args(["a prompt", *flags]))


def test_decode_config_defaults_are_the_command_lines_defaults():
    assert DecodeConfig() == cli_config() == preset("speed")
    assert DecodeConfig().growth == "lookup" and DecodeConfig().small == "ngram+recycling"


def test_the_release_preset_is_the_release_growth_with_the_ngram_drafter():
    cfg = preset("release")
    assert cfg.growth == "release" and cfg.small == "ngram"
    assert cfg.schedule == "10101" and cfg.prune == "topk"  # the release's evaluator: a fixed schedule, top-k
    assert cli_config("--growth", "release", "--small", "ngram", "--schedule", "10101", "--prune", "topk") == cfg


def test_every_named_growth_names_itself_on_top_of_the_defaults():
    small = {"release": "ngram"}  # the release's matcher runs the n-gram drafter alone
    assert all(DecodeConfig(**rule, small=small.get(name, "ngram+recycling")).growth == name
               for name, rule in GROWTHS.items())


def test_the_growth_help_gives_the_lookup_draft_the_preset_grafts():
    parser = argparse.ArgumentParser()
    generate.add_arguments(parser)
    growth = next(a for a in parser._actions if a.dest == "growth")
    assert f"up to {LOOKUP_TOKENS} tokens" in growth.help and DecodeConfig().lookup == LOOKUP_TOKENS


def test_an_unknown_preset_is_refused_with_the_known_ones():
    from treegraft_lab.errors import TreeGraftError

    with pytest.raises(TreeGraftError, match="the presets are speed, full, release"):
        preset("fast")


def test_a_fitted_rule_schedule_works_with_the_default_settings_where_the_command_line_does():
    """`DecodeConfig(schedule="rule:match")` finds the rule fitted for the default growth and small
    drafter, as `generate --schedule rule:match` does."""
    from treegraft_lab.schedule.rules import RulePolicy

    pair, prof = SimpleNamespace(name=DEFAULT_PAIR), costs.load("a100-paper")
    lib = RulePolicy.for_config(DecodeConfig(schedule="rule:match", clock="a100-paper"), pair, prof)
    cli = RulePolicy.for_config(cli_config("--schedule", "rule:match"), pair, prof)
    assert lib.name == cli.name and lib.value >= 0


def test_the_library_and_the_command_line_decode_a_prompt_alike(tmp_path, monkeypatch, capsys):
    """The same prompt through `generate` with no decoding flags and through `DecodeConfig()`: the
    same tokens, and round for round the same schedule, accepted tokens, kept and live nodes."""
    from treegraft_lab import cli, load_pair, measure, record
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.hooks import load_run
    from treegraft_lab.tiny import save_tiny_pair

    monkeypatch.setenv("TREEGRAFT_PROFILE_CACHE", str(tmp_path / "profiles"))
    folder = save_tiny_pair(tmp_path / "pair", scale=16.0) / "target"  # the target as its own mid: long accepts
    prompt, n = "the cat sat on the mat; the cat sat on the hat; the cat", 24
    pair = load_pair(target=folder, mid=folder, device="cpu", dtype="float32")
    costs.DeviceProfile("stub", {1: 10.0, 64: 25.0}, {1: 9.0, 400: 30.0}, 0.5, key=measure.profile_key(pair), n=5,
                        target_long={1: 12.0, 64: 30.0}, context_long=measure.CONTEXT_LONG).save(measure.cached_path(pair))  # this device's profile, as if measured: nothing timed
    where = ["--target", str(folder), "--mid", str(folder), "--device", "cpu", "--dtype", "float32"]
    assert cli.main(["generate", prompt, *where, "--max-new-tokens", str(n), "--record", str(tmp_path / "cli"),
                     "--json"]) == 0
    tokens = json.loads(capsys.readouterr().out)["token_ids"]
    dec = TreeGraftDecoder(pair, DecodeConfig(), profile=measure.resolve("wall", pair))
    assert dec.profile.name == "stub" and dec.config.prune == "value"  # a 64-token forward costs 2.5x one token
    with record(dec) as rec:
        gen = dec.generate(prompt, max_new_tokens=n)
    cols = ["round", "schedule", "accepted", "kept", "nodes"]
    assert gen.token_ids == tokens
    assert rec.to_run().rounds[cols].equals(load_run(tmp_path / "cli").rounds[cols])


def test_settings_stored_with_the_removed_extra_field_still_load_and_a_non_empty_one_is_refused():
    from treegraft_lab.config import stored_settings
    from treegraft_lab.errors import TreeGraftError

    old = {**DecodeConfig().to_dict(), "extra": {}}
    assert DecodeConfig(**stored_settings(old)) == DecodeConfig()
    with pytest.raises(TreeGraftError, match="collect them again"):
        stored_settings({"extra": {"acceptance": (1, 2, 3)}})
