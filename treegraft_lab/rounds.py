"""The data of one decoding round, shared by the decoder, replay, training and the views.

`StepResult` is what a draft step did; `Draft` is a round's drafted tree (what a `Drafter`
returns); `RoundInfo` is what a round did; `RoundStart` is a round start's snapshot (what a replay
restores between schedules). What a policy sees before a step, `StepContext`, lives with the
policies (`schedule/context.py`). Nothing here runs a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from treegraft_lab.tree import DraftTree


def release_acceptance(new_tokens, rounds, prefills):
    """The release's acceptance length A (`avg_accept_len`): all new tokens / all target forwards,
    one verification a round plus each prompt forward of its own (`prefills`: one a generation
    that prefilled its prompt alone, `DecodeConfig.fuse_prompt=False`, as the release does; 0 for
    one whose prompt rode in its first round's forward), the bonus token counted. Numbers or
    pandas Series alike."""
    return new_tokens / (rounds + prefills)


def tokens_per_s(accepted, ms) -> float:
    """Modelled decoding tokens/s from rounds started at uniformly sampled token positions: the one
    objective schedules are ranked on (the learned scheduler's evaluation, the rules' fit).

    `accepted`: each round's accepted draft tokens (A - 1); `ms`: its modelled time t. A decode
    covers every position with one round, and a position's share of its round's time is t / A
    (A tokens emitted, bonus included); with round starts drawn uniformly over positions (as
    `collect` draws them), a decode's time per token is the mean of t / A over them
    (renewal-reward). Summing A and t over the sampled rounds instead would weigh every round
    start alike and undercount the slow, low-acceptance stretches a decode spends most rounds in.
    """
    a = np.asarray(accepted, dtype=float) + 1.0
    return 1000.0 / float(np.mean(np.asarray(ms, dtype=float) / a))


@dataclass
class StepResult:
    """What draft step k did. pool: the nodes WHERE considered; frontier: the nodes expanded; new:
    the nodes the first proposed tokens landed on (the next N_k); chain: nodes created below them
    by n-gram chains; forwarded: the nodes the mid drafter scored (its time is in the round's
    `RoundInfo.forward_s`); size: what the step is priced by (`costs.DeviceProfile.step_ms`): tokens the mid drafter
    forwarded, its backlog included (0: none), frontier nodes of an n-gram step, or -1 (skipped);
    ms: the step so priced by the decoder's profile."""

    pool: list[int]
    frontier: list[int]
    new: list[int]
    chain: list[int]
    forwarded: list[int]
    size: int = 0
    ms: float = 0.0


@dataclass
class Draft:
    """A round's drafted tree, as a `Drafter` hands it to the decoder to prune and verify.

    schedule: the round's label in `RoundInfo.schedule` (TreeGraft: one bit per draft step, 1 = a
    mid call); mid_calls: the mid drafter's calls; ms: the drafting priced by the decoder's profile
    (`DeviceProfile.small_ms`, `mid_ms`, `step_ms`): the round's modelled time less verification;
    mid_s: wall seconds of forwards the drafter timed itself (`TreeGraftDecoder.timed`), beside
    those the decoder's laps timed (`RoundInfo.forward_s`)."""

    tree: DraftTree
    schedule: str
    mid_calls: int = 0
    ms: float = 0.0
    mid_s: float = 0.0


@dataclass
class RoundInfo:
    """What one round did. `accepted` counts draft tokens; the bonus token is not included."""

    accepted: int
    schedule: str
    mid_calls: int
    nodes: int
    kept: int
    draft_s: float
    verify_s: float
    forward_s: float
    round_s: float
    modelled_ms: float = math.nan  # the round priced by the decoder's profile (draft steps + verification)


@dataclass(frozen=True)
class RoundStart:
    """A round start's restorable state: the mid drafter's round state (scored rows and slots,
    cache length) and its unpriced prompt backlog. Target and n-gram index hold only committed
    tokens at a round start and are rolled back by the round itself."""

    mid: tuple | None
    prompt_backlog: int
