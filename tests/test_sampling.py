"""At temperature > 0 the decoder samples exactly from the target: a chi-square test, and its twin.

The exact distribution of the first three generated tokens is computed from the target itself
(one batched forward over every 3-token continuation of a 4-token vocabulary). Samples from the
decoder must fit it (p > 0.01); with the acceptance rule deliberately broken they must not.
Temperature, top-k and top-p are checked against Hugging Face's own warpers (`generate`'s
sampling distribution), and the decoder under them: top-k 1 is greedy decoding, token for token,
and at a warped setting the samples fit Hugging Face's warped distribution.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from treegraft_lab import decoder as decoder_module
from treegraft_lab.config import GROWTHS, DecodeConfig, preset
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.presets import SPEED_GROWTH, SPEED_SMALL
from treegraft_lab.tiny import tiny_pair
from treegraft_lab.verify import accept_sampling, warp

# 500 samples: every one of the 64 bins expects over 2 (its rarest sequence has p = 0.0044), and the broken
# acceptance rule's samples reach p ~ 1e-10 (1e-5 at 300), far below the 0.01 the decoder must stay above
VOCAB, PROMPT, RUNS = 4, [0, 1, 2, 3, 0, 1, 2, 3, 0, 1], 500


def hf_warped(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Hugging Face's sampling distribution: its temperature, top-k and top-p warpers, in the order
    `generate` applies them, then a softmax (rows of [n, V])."""
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    x = TemperatureLogitsWarper(temperature)(None, logits.float())
    if top_k:
        x = TopKLogitsWarper(top_k)(None, x)
    if top_p < 1.0:
        x = TopPLogitsWarper(top_p)(None, x)
    return torch.softmax(x, -1)


def exact_distribution(model, n_tokens: int = 3, **warping) -> dict[tuple[int, ...], float]:
    """P(first `n_tokens` sampled tokens) under the target, warped as Hugging Face warps (`warping`:
    temperature, top_k, top_p; none: the plain softmax)."""
    seqs = list(itertools.product(range(VOCAB), repeat=n_tokens))
    x = torch.tensor([PROMPT + list(s) for s in seqs])
    with torch.no_grad():
        logits = model(input_ids=x).logits.float()
    probs = hf_warped(logits.flatten(0, 1), **{"temperature": 1.0, **warping}).view_as(logits)
    n = len(PROMPT)
    return {s: float(torch.prod(torch.stack([probs[i, n - 1 + j, s[j]] for j in range(n_tokens)])))
            for i, s in enumerate(seqs)}


def sample_counts(pair, runs: int, **growth) -> dict[tuple[int, ...], int]:
    counts: dict[tuple[int, ...], int] = {}
    dec = TreeGraftDecoder(pair, preset("full", **{"schedule": "101", "temperature": 1.0, "depth": 3, "width": 3,
                                                   "budget": 6, "clock": "a100-paper", **growth}))  # full growth, n-gram drafter unless `growth` says
    for seed in range(runs):
        dec.config.seed = seed
        s = tuple(dec.generate(PROMPT, max_new_tokens=3).token_ids)
        counts[s] = counts.get(s, 0) + 1
    return counts


def p_value(pair, runs: int, **growth) -> float:
    exact = exact_distribution(pair.target)
    counts = sample_counts(pair, runs, **growth)
    keys = sorted(exact)
    total = sum(exact.values())  # 1 up to float rounding
    expected = [exact[k] / total * runs for k in keys]
    assert min(expected) > 2, "every bin needs a sizeable expectation for the chi-square approximation"
    return float(chisquare([counts.get(k, 0) for k in keys], expected).pvalue)


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(1)
    return tiny_pair("llama", vocab=VOCAB, scale=3.0)


def test_sampled_tokens_follow_the_target_distribution(pair):
    assert p_value(pair, RUNS) > 0.01


def test_sampled_tokens_follow_the_target_distribution_with_lookup_growth(pair):
    # prompt lookup's chain (the prompt repeats 0 1 2 3) hangs under the root, deeper than D = 3; the n-gram drafter
    assert p_value(pair, RUNS, **{**GROWTHS["lookup"], "budget": 12}) > 0.01


def test_sampled_tokens_follow_the_target_distribution_with_the_speed_default_trees(pair):
    # the speed preset's growth and small drafter: recycled candidates where the n-gram match is short
    assert p_value(pair, RUNS, **{**GROWTHS[SPEED_GROWTH], "small": SPEED_SMALL, "budget": 12}) > 0.01


def test_a_broken_acceptance_rule_is_detected(pair, monkeypatch):
    monkeypatch.setattr(decoder_module, "accept_sampling", functools.partial(accept_sampling, renormalise=False))
    assert p_value(pair, RUNS) < 0.01


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.7])
def test_warp_gives_hugging_faces_sampling_distribution(temperature):
    logits = 3 * torch.randn(64, 40, generator=torch.Generator().manual_seed(0))
    for top_k in (0, 1, 5, 40):
        for top_p in (1.0, 0.95, 0.6, 0.2):
            want = hf_warped(logits, temperature, top_k, top_p)
            torch.testing.assert_close(warp(logits, temperature, top_k, top_p), want, atol=1e-6, rtol=0)


def test_top_p_keeps_the_smallest_set_of_tokens_whose_mass_reaches_it():
    uniform = torch.zeros(1, 4)  # four tokens of exactly 0.25: two reach top_p 0.5, a third is not needed
    for top_p, kept in ((0.5, 2), (0.25, 1), (0.26, 2), (0.75, 3), (0.99, 4)):
        assert int((warp(uniform, 1.0, 0, top_p) > 0).sum()) == kept == int((hf_warped(uniform, 1.0, 0, top_p) > 0).sum())


@pytest.mark.parametrize("schedule", ["101", "111"])
def test_sampling_with_top_k_1_is_greedy_decoding(schedule):
    from tests.test_decoder import hf_greedy

    pair = tiny_pair("llama", vocab=64, scale=2.0)
    ids = list(range(10, 30))
    cfg = DecodeConfig(schedule=schedule, depth=3, temperature=1.3, top_k=1, top_p=0.9, seed=0, clock="a100-paper")
    assert TreeGraftDecoder(pair, cfg).generate(ids, max_new_tokens=16).token_ids == hf_greedy(pair.target, ids, 16)


WARPED = {"temperature": 0.6, "top_k": 3, "top_p": 0.85}


def warped_p_value(pair, runs: int) -> tuple[float, int]:
    """Chi-square p-value of the first two tokens the decoder samples (schedule 111: the mid
    drafter's tree at every step) against Hugging Face's warped distribution, and the samples that
    fell where that distribution is 0."""
    exact = exact_distribution(pair.target, 2, **WARPED)
    dec = TreeGraftDecoder(pair, DecodeConfig(schedule="111", depth=3, width=3, budget=6, clock="a100-paper", **WARPED))
    counts: dict[tuple[int, ...], int] = {}
    for seed in range(runs):
        dec.config.seed = seed
        s = tuple(dec.generate(PROMPT, max_new_tokens=2).token_ids)
        counts[s] = counts.get(s, 0) + 1
    keys = sorted(k for k in exact if exact[k] > 0)
    expected = [exact[k] * runs for k in keys]
    assert min(expected) > 5 and len(keys) < len(exact), "warping must cut some sequences, and leave sizeable bins"
    impossible = sum(c for k, c in counts.items() if exact.get(k, 0) == 0)
    observed = [counts.get(k, 0) for k in keys]
    scaled = np.array(expected) * (sum(observed) / sum(expected))  # the same total, to float rounding
    return float(chisquare(observed, scaled).pvalue), impossible


def test_warped_sampling_follows_hugging_faces_warped_distribution(pair):
    p, impossible = warped_p_value(pair, 800)
    assert impossible == 0 and p > 0.01
