"""At temperature > 0 the decoder samples exactly from the target: a chi-square test, and its twin.

The exact distribution of the first three generated tokens is computed from the target itself
(one batched forward over every 3-token continuation of a 4-token vocabulary). Samples from the
decoder must fit it (p > 0.01); with the acceptance rule deliberately broken they must not.
"""

from __future__ import annotations

import functools
import itertools

import pytest
import torch
from scipy.stats import chisquare

from treegraft_lab import decoder as decoder_module
from treegraft_lab.config import GROWTHS, DecodeConfig
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.tiny import tiny_pair
from treegraft_lab.verify import accept_sampling

VOCAB, PROMPT, RUNS = 4, [0, 1, 2, 3, 0, 1, 2, 3, 0, 1], 1500


def exact_distribution(model) -> dict[tuple[int, ...], float]:
    seqs = list(itertools.product(range(VOCAB), repeat=3))
    x = torch.tensor([PROMPT + list(s) for s in seqs])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=x).logits.float(), -1)
    n = len(PROMPT)
    out = {}
    for i, s in enumerate(seqs):
        out[s] = float(torch.exp(sum(logp[i, n - 1 + j, s[j]] for j in range(3))))
    return out


def sample_counts(pair, runs: int, **growth) -> dict[tuple[int, ...], int]:
    counts: dict[tuple[int, ...], int] = {}
    dec = TreeGraftDecoder(pair, DecodeConfig(**{"schedule": "101", "temperature": 1.0, "depth": 3, "width": 3, "budget": 6,
                                                 **growth}))
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
    # prompt lookup's chain (the prompt repeats 0 1 2 3) hangs under the root, deeper than D = 3
    assert p_value(pair, RUNS, **{**GROWTHS["lookup"], "budget": 12}) > 0.01


def test_sampled_tokens_follow_the_target_distribution_with_the_speed_default_trees(pair):
    # lookup growth and the command line's small drafter: recycled candidates where the n-gram match is short
    assert p_value(pair, RUNS, **{**GROWTHS["lookup"], "small": "ngram+recycling", "budget": 12}) > 0.01


def test_a_broken_acceptance_rule_is_detected(pair, monkeypatch):
    monkeypatch.setattr(decoder_module, "accept_sampling", functools.partial(accept_sampling, renormalise=False))
    assert p_value(pair, RUNS) < 0.01
