"""The README's Python runs as printed, on the offline pair: every ```python block, in order, in one namespace."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
GOLDEN = Path(__file__).resolve().parent / "golden" / "cpu-float32-profile.json"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_readme_has_python_blocks_and_they_name_only_public_names():
    blocks = python_blocks(README.read_text())
    assert blocks, "the README shows no Python"
    for block in blocks:
        assert not re.search(r"\b_[a-z]\w*\(|treegraft_lab\.\w+\._", block), f"a private name in the README:\n{block}"


@pytest.mark.slow
def test_every_python_block_of_the_readme_runs_as_printed_and_the_default_decoder_is_the_speed_choice_and_lossless(
        smollm2_dir, tmp_path, monkeypatch):
    """The default decoder on a CPU: the pair in float32 (its schedulers' dtype), value pruning (a CPU's steep
    curve), the adaptive scheduler trained for them, output identical to plain greedy decoding. The profile is a
    real CPU profile of this pair (tests/golden), handed over as if measured here: the README's code measures
    nothing in the test (measuring has its own tests, on injected timings)."""
    from treegraft_lab import costs, load_pair, measure
    from treegraft_lab.baselines import autoregressive

    monkeypatch.setenv("TREEGRAFT_PROFILE_CACHE", str(tmp_path / "profiles"))
    pair = load_pair("smollm2-pocket")
    golden = costs.load(GOLDEN)
    here = dataclasses.replace(golden, key=measure.profile_key(pair), n=5, spread=0.05, flagged=[],
                               target_long={n: 1.2 * v for n, v in golden.target.items()},
                               context_long=measure.CONTEXT_LONG)
    here.save(measure.cached_path(pair))
    monkeypatch.setattr(measure, "measure_checked", lambda *a, **k: pytest.fail("the README's code measured the device"))
    from treegraft_lab import decoder as decoder_module

    said = []
    monkeypatch.setattr(decoder_module, "note", said.append)  # what the user reads, even if said earlier here
    ns: dict = {}
    for block in python_blocks(README.read_text()):
        exec(compile(block, str(README), "exec"), ns)  # noqa: S102 - the README's own code, as printed
    dec, gen = ns["dec"], ns["gen"]
    assert str(dec.pair.dtype) == "torch.float32" and dec.pair.device.type == "cpu"
    assert dec.config.prune == "value" and dec.config.schedule == "adaptive" and dec.config.growth == "lookup"
    assert gen.token_ids == autoregressive(dec.pair, "Write a haiku about the sea.", 48).token_ids
    hf = dec.pair.target.generate(**ns["inputs"], do_sample=False, max_new_tokens=48)
    assert ns["out"].tolist() == hf.tolist()  # the custom_generate block: HF greedy, token for token
    assert "schedule=adaptive" in said[0] and "prune=value" in said[0]  # said in one line
