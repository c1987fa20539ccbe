"""Host syncs of a decoding round, counted on the CPU.

On CUDA every read of a device tensor on the host (`tolist`, `item`, `int(t)`, ...), every
`synchronize` and every blocking copy to the device (`torch.tensor(..., device=...)`) waits for
the queued kernels. A greedy round needs one read of the verification result and one per mid
drafter forward; the tests count everything else as a defect. The models run on the CPU, and
the pair is made to look like it sits on a CUDA device where timing is concerned (fake timing
events), so the round takes its CUDA code path for timing.
"""

from __future__ import annotations

import collections
import traceback

import pytest
import torch

from treegraft_lab import measure
from treegraft_lab.config import DecodeConfig
from treegraft_lab.costs import load
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.drafters import ModelDrafter
from treegraft_lab.tiny import tiny_pair
from treegraft_lab.tree import SMALL, DraftTree

PROMPT = [3, 17, 5, 9, 3, 17, 5, 9, 3, 17, 22, 41, 7]
READS = ("tolist", "item", "cpu", "numpy", "__int__", "__float__", "__bool__", "__index__")
LAP_MS = 2.0  # what every fake event pair reports


def _caller() -> str:
    """file:line of the innermost package frame (tree.py builds its masks on the host: CPU tensors)."""
    for f in reversed(traceback.extract_stack()[:-2]):
        if "treegraft_lab" in f.filename or "transformers" in f.filename:
            return f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}"
    return "?"


class FakeEvent:
    """A CUDA timing event stand-in: done at once, `LAP_MS` between any two."""

    waits = 0

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing

    def record(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        FakeEvent.waits += 1

    def elapsed_time(self, other) -> float:
        return LAP_MS


@pytest.fixture
def host_reads(monkeypatch):
    """A Counter of host syncs by (kind, file:line), with the pair's timing on a fake CUDA device."""
    counts: collections.Counter = collections.Counter()

    def counted(kind, fn):
        def wrapper(*args, **kwargs):
            where = _caller()
            if not where.startswith("tree.py"):
                counts[(kind, where)] += 1
            return fn(*args, **kwargs)
        return wrapper

    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, counted(name, getattr(torch.Tensor, name)))
    tensor = torch.tensor

    def new_tensor(*args, **kwargs):
        if kwargs.get("device") is not None:
            counts[("blocking copy", _caller())] += 1
        return tensor(*args, **kwargs)

    monkeypatch.setattr(torch, "tensor", new_tensor)
    monkeypatch.setattr(torch.cuda, "synchronize", counted("synchronize", lambda *a, **k: None))
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(measure, "cuda_devices", lambda *models: (torch.device("cuda:0"),))
    FakeEvent.waits = 0
    return counts


@pytest.mark.parametrize("schedule, expansion", [("10101", "per_parent"), ("mid", "per_parent"),
                                                 ("10101", "global"), ("small", "per_parent")])
def test_a_greedy_round_reads_the_host_once_plus_once_per_mid_forward(host_reads, schedule, expansion):
    pair = tiny_pair("llama", vocab=64, scale=4.0)
    dec = TreeGraftDecoder(pair, DecodeConfig(small="ngram", schedule=schedule, expansion=expansion), profile=load("a100-paper"))
    forwards = []
    with dec.hooks({"step.expand": lambda e: forwards.append(bool(e.data["forwarded"]))}):
        dec.start(PROMPT)
        dec.run_round()  # the first round (the prompt rides in it)
        for _ in range(3):
            host_reads.clear()
            forwards.clear()
            info, _ = dec.run_round()
            mid = sum(forwards)
            assert sum(host_reads.values()) == 1 + mid, dict(host_reads)
            assert FakeEvent.waits == 0
            assert info.forward_s == pytest.approx((1 + mid) * LAP_MS / 1000)  # every forward, from its events
    assert "mid" not in schedule or any(forwards)


@pytest.mark.parametrize("children", [3, None])
def test_proposals_from_the_tops_read_with_the_scores_equal_the_devices(children):
    mid = tiny_model_pair_mid()
    trees, proposals = [], []
    for top in (0, 4):  # 0: propose reads its own top-k on the device
        d = ModelDrafter(mid, top=top)
        d.pending = list(range(1, 30))
        tree = DraftTree.start(5)
        for tok in (6, 7, 8):
            tree.add_child(0, tok, -1.0 - tok / 10, SMALL, 1)
        d.score(tree, [0, 1, 2, 3])
        assert bool(d.best) == bool(top)
        trees.append(list(tree.score))
        proposals.append(d.propose(tree, [2, 1, 3], 4, children))
    assert trees[0] == trees[1] and proposals[0] == proposals[1] and proposals[0]


def tiny_model_pair_mid():
    return tiny_pair("llama", vocab=64, scale=4.0).mid
