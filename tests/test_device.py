"""The decoder on the device named by TREEGRAFT_TEST_DEVICE (default cpu): lossless, profiled, modelled.

Float32 tiny Llama models moved with `.to()`; `TREEGRAFT_TEST_DEVICE=cuda` runs the same on a
GPU. The bf16, realistic-shape, `load_pair`, long-prompt, sampling, oracle, pocket-drafter and HF
peer checks are `scripts/device_check.sh`'s steps. Asking for CUDA where there is none fails: it
is not skipped.
"""

from __future__ import annotations

import os

import pytest
import torch

from treegraft_lab import measure
from treegraft_lab.config import DecodeConfig
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.tiny import tiny_pair

DEVICE = torch.device(os.environ.get("TREEGRAFT_TEST_DEVICE", "cpu"))
IDS = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 3]


@pytest.fixture(scope="module")
def pair():
    if DEVICE.type == "cuda":
        assert torch.cuda.is_available(), "TREEGRAFT_TEST_DEVICE=cuda but torch sees no GPU"
    p = tiny_pair("llama", scale=4.0)
    p.target, p.mid = p.target.to(DEVICE), p.mid.to(DEVICE)
    p.device = DEVICE
    return p


def greedy(model, ids: list[int], n: int) -> list[int]:
    out = model.generate(torch.tensor([ids], device=DEVICE), max_new_tokens=n, do_sample=False)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("schedule", ["small", "mid", "10101"])
def test_tree_decoding_on_the_device_equals_greedy_decoding(pair, schedule):
    ref = greedy(pair.target, IDS, 16)
    gen = TreeGraftDecoder(pair, DecodeConfig(schedule=schedule, clock="a100-paper")).generate(IDS, max_new_tokens=16)
    assert gen.token_ids == ref


def test_the_device_profile_is_measured_on_the_device(pair, tmp_path, monkeypatch):
    monkeypatch.setenv("TREEGRAFT_PROFILE_CACHE", str(tmp_path))
    prof = measure.measure(pair, progress=False, repeats=1)
    assert prof.key["device"].startswith(DEVICE.type) and prof.target_ms(64) > 0 and prof.mid_ms(100) > 0
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule="10101", prune="value"), profile=prof)
    gen = dec.generate(IDS, max_new_tokens=12)
    assert gen.token_ids == greedy(pair.target, IDS, 12)
    assert gen.stats["modelled_on"] == prof.name and gen.stats["modelled_ms"] > 0
