"""docs/design.md "Extending" runs as printed: a small drafter, a mid drafter, a pruner and a policy of
one's own, each written with public names only, each decoding exactly what HF greedy decodes, recorded and
drawn; and every bench method's trees are recorded and drawn, step rows included."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DESIGN = Path(__file__).resolve().parent.parent / "docs" / "design.md"


def extending_blocks() -> list[str]:
    text = DESIGN.read_text()
    section = text[text.index("## Extending"):]
    section = section[: (section.find("\n## ", 1) if section.find("\n## ", 1) > 0 else None)]
    return re.findall(r"^```python\n(.*?)^```", section, flags=re.S | re.M)


def test_the_public_names_of_the_parts_import_from_the_package():
    import inspect

    from treegraft_lab import (  # noqa: F401
        Draft,
        DraftTree,
        Growth,
        MidDrafter,
        Policy,
        Pruner,
        SmallDrafter,
        StepContext,
        TreeGraftDecoder,
    )
    params = inspect.signature(TreeGraftDecoder).parameters
    assert all(params[name].kind is inspect.Parameter.KEYWORD_ONLY for name in ("small", "mid", "pruner", "growth"))


def test_the_worked_examples_use_public_names_only_and_each_part_is_short():
    blocks = extending_blocks()
    assert len(blocks) >= 5
    for block in blocks:
        assert not re.search(r"\._[a-z]\w*|treegraft_lab\.\w+\._|import _", block), block
    for block in blocks[1:5]:
        part = block.split("\n\n\n")[0]  # the class, before the line that decodes with it
        assert len([ln for ln in part.splitlines() if ln.strip()]) <= 24, part


@pytest.fixture(scope="module")
def examples(smollm2_dir):
    ns: dict = {}
    for block in extending_blocks():
        exec(compile(block, str(DESIGN), "exec"), ns)  # noqa: S102 - the docs' own code, as printed
    return ns


@pytest.mark.slow
def test_each_part_of_ones_own_decodes_what_hf_greedy_decodes_and_its_tree_is_recorded_and_drawn(examples):
    ns = examples
    pair = ns["pair"]
    inputs = pair.tokenizer.apply_chat_template([{"role": "user", "content": ns["prompt"]}], add_generation_prompt=True,
                                                return_tensors="pt", return_dict=True)
    hf = pair.target.generate(**inputs, do_sample=False, max_new_tokens=24)[0, inputs["input_ids"].shape[1]:].tolist()
    assert ns["reference"] == hf  # check() compared every decode with plain greedy: HF's
    for name in ("small_run", "mid_run", "pruned_run", "policy_run"):
        run = ns[name]
        assert len(run.rounds) and len(run.steps) and len(run.nodes), name
        rnd = int(run.rounds["round"].iloc[min(1, len(run.rounds) - 1)])
        fig = ns["tree_figure"](run, round=rnd, step=1)
        assert any(len(t.x or ()) for t in fig.data), name  # nodes drawn
        ns["tree_figure"](run, round=rnd)  # the verified tree
    small = ns["small_run"]
    assert (small.nodes["source"] == "bigram").any()  # its nodes carry its name
    mid = ns["mid_run"]
    assert (mid.nodes["creator"] == "mid").any() and mid.steps["call_mid"].any()
    assert (mid.rounds["schedule"] == "10101").all()
    pruned = ns["pruned_run"]
    assert (pruned.rounds["kept"] <= 16).all() and (pruned.rounds["kept"] == 16).any()
    steps = ns["policy_run"].steps
    asked = steps[steps["round"] > 0]  # a generation's first round does not ask the policy
    assert (asked["call_mid"] == ((asked["step"] == 1) & (asked["root_match"] == 0))).all()
    assert asked["call_mid"].any() and not asked["call_mid"].all()  # the rule called the mid drafter, where it says
    assert (ns["hooked_run"].rounds["kept"] <= 7).all() and (ns["where_run"].rounds["schedule"] == "10101").all()


def test_a_where_of_ones_own_replaces_only_where(examples):
    """The docs' NoReselect: a mid step's frontier holds only nodes the previous step grew."""
    seen = []
    dec = examples["dec"]
    with dec.hooks([("step.expand", lambda ev: seen.append((ev.data["call_mid"], ev.data["frontier"], ev.data["last_new"])))]):
        dec.generate(examples["prompt"], max_new_tokens=12)
    mid = [(front, last) for call, front, last in seen if call and front]
    assert mid and all(set(front) <= set(last) for front, last in mid)


def test_a_part_without_its_protocols_methods_is_refused_in_one_line():
    from treegraft_lab import DecodeConfig, TreeGraftDecoder, TreeGraftError
    from treegraft_lab.tiny import tiny_pair as make_tiny

    tiny_pair = make_tiny("llama", vocab=64, scale=4.0)

    class NoPropose:
        def start(self, ids): ...
        def extend(self, tokens): ...

    with pytest.raises(TreeGraftError, match=r"small= takes a SmallDrafter \(methods: start, extend, propose\)"):
        TreeGraftDecoder(tiny_pair, DecodeConfig(schedule="small", clock="a100-paper"), small=NoPropose())
    with pytest.raises(TreeGraftError, match="pruner= takes a Pruner"):
        TreeGraftDecoder(tiny_pair, DecodeConfig(schedule="small", clock="a100-paper"), pruner=object())


RECORDABLE = ("hf-pld", "recycling", "suffix", "small", "mid", "10101", "adaptive", "rule:match", "rule:score", "csd",
              "no-eg", "no-nd", "learned", "oracle")


PROMPT = "Repeat after me: the quick brown fox jumps over the lazy dog. The quick brown fox"


@pytest.fixture(scope="module")
def pocket(smollm2_dir):
    """The offline pair and plain greedy decoding's 12 tokens for PROMPT."""
    from treegraft_lab import load_pair
    from treegraft_lab.baselines import autoregressive

    pair = load_pair("smollm2-pocket", dtype="float32")
    return pair, autoregressive(pair, PROMPT, 12).token_ids


def test_recordable_methods_are_every_bench_method_with_a_tree():
    from treegraft_lab.bench import METHODS

    assert set(RECORDABLE) == set(METHODS) - {"ar", "hf-stock", "hf-assisted"}


@pytest.mark.slow
@pytest.mark.parametrize("method", RECORDABLE)
def test_every_bench_method_is_recorded_and_drawn_step_by_step(method, pocket):
    from treegraft_lab import record
    from treegraft_lab.bench import tree_decoder
    from treegraft_lab.viz import tree_figure

    pair, reference = pocket
    dec = tree_decoder(pair, method, clock="a100-paper")
    with record(dec) as rec:
        gen = dec.generate(PROMPT, max_new_tokens=12)
    assert gen.token_ids == reference
    run = rec.to_run()
    assert len(run.steps) >= len(run.rounds) >= 1
    assert set(run.steps["round"]) == set(run.rounds["round"])  # every round has its step rows
    for rnd in run.rounds["round"]:
        step = int(run.steps[run.steps["round"] == rnd]["step"].min())
        assert len(run.tree_at(int(rnd), step)) >= 1
        fig = tree_figure(run, round=int(rnd), step=step)
        assert any(len(t.x or ()) for t in fig.data)
    grown = run.steps.groupby("round")["new_nodes"].sum()
    assert (grown > 0).any()  # the steps say what they added
