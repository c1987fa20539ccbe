"""A learned per-step scheduler on the round signals: WHEN, decided at each draft step from what
the tree, the committed text and the rounds already run say, by a small network.

`step_features(ctx)` is the one place its inputs are computed, in the decoder and in a replay walk
alike (a walk builds its `StepContext` from stored replays: `training.imitation`). The network is
an MLP (one hidden layer, tanh) whose output is either the probability that the oracle calls the
mid drafter here (kind "imitation") or the modelled margin (small - mid) in target verifications
(kind "value"); it calls the mid drafter when that is above 0.5, resp. above 0. Its weights and
inputs live in one JSON file (`stepwise.json`); the online path needs no scikit-learn.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.schedule.context import StepContext

FORMAT = "treegraft-stepwise/1"
FILE = "stepwise.json"

# Every input the learners may read, in words (the signals' own words: `signals.SIGNAL_WORDS`).
STEP_FEATURES = {
    "step": "the draft step k, over D",
    "mid_so_far": "mid calls earlier in this round, over D",
    "last_mid": "1 when the previous step called the mid drafter",
    "small_size": "frontier nodes a small step would expand now, over W (0 when it would be skipped)",
    "small_skipped": "1 when the growth would skip a small step here (nothing likely enough to extend)",
    "log_cost_ratio": "log(T_mid / T_tgt): how cheap a mid call is against a verification",
    "root_match": "the context n-gram match (signals.root_match)",
    "recent_hit_rate": "the recent copy hit rate (signals.recent_hit_rate)",
    "target_top1": "the target's top-1 probability at the last committed token",
    "prev_accepted": "the previous round's accepted length, over D",
    "prev_mid_calls": "the previous round's mid calls, over D",
    "recent_accepted": "the mean accepted length of the last 3 rounds, over D",
    "mid_gain_estimate": "the mid drafter's running gain on this prompt",
}
LABELS = {"step": "step k / D", "mid_so_far": "mid calls so far / D", "last_mid": "previous step called mid",
          "small_size": "small step's frontier / W", "small_skipped": "small step skipped",
          "log_cost_ratio": "log T_mid / T_tgt"}


def label(name: str) -> str:
    """An input's name in words (the signals' own words for the signals)."""
    from treegraft_lab.schedule.signals import words

    return LABELS.get(name) or words(name)


# The signal sets the grouped cross-validation compares (each adds to the one before).
SIGNAL_SETS = {
    "tree+costs": ("step", "mid_so_far", "last_mid", "small_size", "small_skipped", "log_cost_ratio"),
    "+context": ("root_match", "recent_hit_rate"),
    "+rounds": ("target_top1", "prev_accepted", "prev_mid_calls", "recent_accepted", "mid_gain_estimate"),
}


def signal_set(name: str) -> tuple[str, ...]:
    """The features of a named set, with those of every set before it."""
    names = list(SIGNAL_SETS)
    if name not in SIGNAL_SETS:
        raise TreeGraftError(f"unknown signal set {name!r}; use one of {', '.join(names)}")
    return tuple(f for n in names[: names.index(name) + 1] for f in SIGNAL_SETS[n])


def step_features(ctx: StepContext, names=tuple(STEP_FEATURES)) -> dict[str, float]:
    """The inputs `names` (default: all of `STEP_FEATURES`) for the decision before step `ctx.k`;
    only the groups they need are computed (never the tree signals)."""
    D, out = ctx.depth, {}
    if {"small_size", "small_skipped"} & set(names):
        size = ctx.small_step_size()
        out.update(small_size=max(size, 0) / ctx.width, small_skipped=float(size < 0))
    if {"root_match", "recent_hit_rate"} & set(names):
        out.update(ctx.context_signals())
    if set(SIGNAL_SETS["+rounds"]) & set(names):
        out.update(ctx.round_signals())
    out.update(step=ctx.k / D, mid_so_far=sum(ctx.history) / D, last_mid=float(ctx.history[-1]) if ctx.history else 0.0,
               log_cost_ratio=math.log(ctx.t_mid_ms / ctx.t_tgt_ms))
    return {n: out[n] for n in names}


class StepwisePolicy:
    """`decide(ctx)`: the network's output on `step_features(ctx)` above its threshold. Keeps
    `last_score` (the output) and `last_inputs` (the features it read) for the recorder and views."""

    def __init__(self, doc: dict, name: str | None = None) -> None:
        self.doc = doc
        self.features = list(doc["features"])
        self.kind = doc["kind"]
        self.name = name or doc.get("name", f"stepwise-{self.kind}")
        self.mean = torch.tensor(doc["mean"], dtype=torch.float64)
        self.scale = torch.tensor(doc["scale"], dtype=torch.float64)
        self.w1 = torch.tensor(doc["w1"], dtype=torch.float64)
        self.b1 = torch.tensor(doc["b1"], dtype=torch.float64)
        self.w2 = torch.tensor(doc["w2"], dtype=torch.float64)
        self.b2 = float(doc["b2"])
        self.last_score = math.nan
        self.last_inputs: dict[str, float] = {}

    @property
    def parameters(self) -> int:
        return self.w1.numel() + self.b1.numel() + self.w2.numel() + 1

    def score(self, x: list[float]) -> float:
        """The network's output: a probability (imitation) or a margin in verifications (value)."""
        z = (torch.tensor(x, dtype=torch.float64) - self.mean) / self.scale
        out = float(torch.tanh(z @ self.w1 + self.b1) @ self.w2) + self.b2
        return 1 / (1 + math.exp(-out)) if self.kind == "imitation" else out

    @property
    def threshold(self) -> float:
        """It calls the mid drafter above this output: a probability of 0.5, or a margin of 0."""
        return 0.5 if self.kind == "imitation" else 0.0

    def decide(self, ctx: StepContext) -> bool:
        self.last_inputs = step_features(ctx, self.features)
        self.last_score = self.score(list(self.last_inputs.values()))
        return self.last_score > self.threshold

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / FILE).write_text(json.dumps(self.doc, indent=1) + "\n")
        return folder / FILE

    @classmethod
    def load(cls, folder: str | Path, name: str | None = None) -> StepwisePolicy:
        path = Path(folder) / FILE
        if not path.is_file():
            raise TreeGraftError(f"no learned scheduler in {folder} ({FILE} missing): train one with "
                                 f"`treegraft-lab regime --learn`")
        doc = json.loads(path.read_text())
        if doc.get("format") != FORMAT:
            raise TreeGraftError(f"{path} is not a {FORMAT} document: train the scheduler again")
        unknown = [f for f in doc["features"] if f not in STEP_FEATURES]
        if unknown:
            raise TreeGraftError(f"{path}: unknown inputs {unknown} (known: {', '.join(STEP_FEATURES)})")
        return cls(doc, name)


def is_stepwise(folder: str | Path) -> bool:
    return (Path(folder) / FILE).is_file()


def learned_folder(pair_name: str) -> Path:
    """Where `treegraft-lab regime --learn` stores a pair's learned scheduler (the map's settings: top-k, lookup growth)."""
    from treegraft_lab.paths import SCHEDULER_DIR

    return SCHEDULER_DIR / pair_name.replace("/", "_") / "stepwise-topk-lookup"


# The settings a learned scheduler learns on when its document does not name them (`regime.map_config`).
MAP_SETTINGS = {"prune": "topk", "growth": "lookup", "small": "ngram"}


def trained_for(doc: dict) -> dict:
    """What a learned scheduler's walks were priced and grown on: its base profile (every cost ratio of
    it: "a100-paper" covers "a100-paper@0.1") and its pruning, growth and small drafter."""
    return {"profile": doc.get("profile"), **{k: doc.get(k, v) for k, v in MAP_SETTINGS.items()}}


def untrained_reason(doc: dict, config, profile) -> str | None:
    """None when `config` on `profile` is what the scheduler was learned for, else what differs (one clause)."""
    from treegraft_lab.schedule.adaptive import profile_class

    want = trained_for(doc)
    have = {"profile": profile_class(profile).split("@")[0] if profile is not None else None,
            "prune": config.prune, "growth": config.growth, "small": config.small}
    diff = [k for k in want if want[k] is not None and have[k] is not None and have[k] != want[k]]
    if not diff:
        return None
    return (f"learned for {', '.join(f'{k} {want[k]}' for k in diff)}, this run has "
            f"{', '.join(f'{k} {have[k]}' for k in diff)}")


def learned_policy(pair, config, profile=None) -> StepwisePolicy | None:
    """`schedule="learned"`: the scheduler in `config.scheduler_path`, else the one learned for the pair. It
    was learned at depth D (its "depth"); another depth is refused in one line. Deciding on a profile or
    settings it was not learned for (`untrained_reason`: a measured CPU profile, value pruning, another
    small drafter), it says so once and returns None: the caller runs all-small, as its margins are in
    another currency there."""
    from treegraft_lab.notes import note

    folder = Path(config.scheduler_path) if config.scheduler_path else learned_folder(getattr(pair, "name", "") or "")
    policy = StepwisePolicy.load(folder, "learned")
    depth = policy.doc.get("depth")
    if depth is not None and depth != config.depth:
        raise TreeGraftError(f"the learned scheduler in {folder} decides over D = {depth} draft steps, the config has "
                             f"depth={config.depth}: decode with depth={depth} or learn one for it (treegraft-lab regime --learn)")
    reason = untrained_reason(policy.doc, config, profile)
    if reason is not None:
        note(f"schedule='learned' falls back to all-small (no mid call): the scheduler in {folder.name} was {reason}")
        return None
    return policy
