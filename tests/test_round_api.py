"""Replay, collection and the views drive the decoder through its public round API only: they
start it (`start(ids, prompt_len=...)`), verify without committing (`verify_tree`) and let the mid
drafter lag (`lag_mid`); none sets its prompt length or drives the target's or the mid drafter's
caches itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from treegraft_lab import kv
from treegraft_lab.config import DecodeConfig
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.replay import replay_all
from treegraft_lab.tiny import noisy_pair

PACKAGE = Path(__file__).resolve().parents[1] / "treegraft_lab"
OWNERS = {"decoder.py", "verify.py", "drafters.py"}  # the decoder and the two caches it drives
CACHE_CALLS = {"forward_tree", "rollback", "unforward"}
PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]
ANSWER = [1, 2, 3, 5, 6]


def reaches_in(source: str) -> list[str]:
    """What `source` does to a decoder's internals: `x.prompt_len = ...` (x not self) and calls of
    the caches' `forward_tree`, `rollback` and `unforward`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and t.attr == "prompt_len" and not (isinstance(t.value, ast.Name) and t.value.id == "self"):
                found.append(f"line {node.lineno}: sets {ast.unparse(t)}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CACHE_CALLS:
            found.append(f"line {node.lineno}: calls {ast.unparse(node.func)}")
    return found


def test_no_module_outside_the_decoder_reaches_into_its_round_state():
    bad = {str(p.relative_to(PACKAGE)): hits for p in sorted(PACKAGE.rglob("*.py"))
           if p.name not in OWNERS and (hits := reaches_in(p.read_text()))}
    assert bad == {}, f"use the decoder's start(prompt_len=...), verify_tree, lag_mid: {bad}"


def test_each_reach_into_the_round_state_is_caught():
    src = ("dec.start(ids)\ndec.prompt_len = 3\nself.prompt_len = 4\nlogits = dec.target.forward_tree(t, kept)\n"
           "dec.target.rollback()\nlag = dec.mid.unforward(dec.ids, 2)\n")
    assert reaches_in(src) == ["line 2: sets dec.prompt_len", "line 4: calls dec.target.forward_tree",
                               "line 5: calls dec.target.rollback", "line 6: calls dec.mid.unforward"]


@pytest.fixture(scope="module")
def pair():
    return noisy_pair()


def test_a_start_inside_an_answer_keeps_the_prompts_length(pair):
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule="mid", clock="a100-paper"))
    dec.start(PROMPT + ANSWER, prompt_len=len(PROMPT))
    assert dec.ids == PROMPT + ANSWER and dec.step_context(1, [], None, [0], []).prompt_len == len(PROMPT)
    dec.start(PROMPT + ANSWER)
    assert dec.step_context(1, [], None, [0], []).prompt_len == len(PROMPT + ANSWER)
    with pytest.raises(TreeGraftError, match="prompt_len"):
        dec.start(PROMPT, prompt_len=len(PROMPT) + 1)


def test_a_replay_commits_nothing_and_the_round_after_it_is_a_fresh_decoders(pair):
    fresh, replayed = (TreeGraftDecoder(pair, DecodeConfig(schedule="10101", clock="a100-paper")) for _ in range(2))
    for dec in (fresh, replayed):
        dec.start(PROMPT + ANSWER, prompt_len=len(PROMPT))
    _, leaves, _ = replay_all(replayed, shared_verify=True, timed=3)  # one shared forward, three alone
    assert kv.cache_len(replayed.target.cache) == len(PROMPT + ANSWER) - 1  # the committed text, the root to come
    a, b = fresh.run_round(), replayed.run_round()
    assert (a[0].accepted, a[0].schedule, a[0].kept, a[0].modelled_ms, a[1]) == \
        (b[0].accepted, b[0].schedule, b[0].kept, b[0].modelled_ms, b[1])
    assert leaves[[lf["schedule"] for lf in leaves].index("10101")]["accepted"] == a[0].accepted


def test_a_lagging_mid_drafter_is_set_through_the_decoder(pair):
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule="mid", clock="a100-paper"))
    dec.start(PROMPT + ANSWER)
    assert dec.lag_mid(4) == 4 and dec.mid.pending == (PROMPT + ANSWER)[-5:-1]
    small = TreeGraftDecoder(pair, DecodeConfig(schedule="small", clock="a100-paper"))
    small.start(PROMPT + ANSWER)
    assert small.lag_mid(4) == 0  # no mid drafter: no lag
