"""schedule="adaptive": call the mid drafter iff the distilled margin g_psi(z_k) > 0.

The 17 inputs, in the artifact's order: log1p(prompt length), T_tgt ms, T_mid ms,
log(T_tgt / T_mid), k / D, (mid calls so far) / D, D bits for the earlier steps' decisions, and
the artifact's chosen signals. An artifact trained across mid drafters (`map`) has an 18th input
after the six context ones: the mid drafter's greedy agreement with its target, read from the
drafter's measured card (data/models/<mid>/card.json) when the policy is built. z-scored with the artifact's statistics; the output is
de-normalised with the label mean/std, so its sign is the decision. CPU float32, no training code.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from treegraft_lab import costs
from treegraft_lab.config import GROWTHS
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.models import resolve_device, resolve_dtype
from treegraft_lab.paths import SCHEDULER_DIR
from treegraft_lab.schedule import artifact as art_io


def artifact_dir(pair_name: str) -> Path:
    """The folder holding a pair's scheduler artifacts, one subfolder per (profile, pruning)."""
    return SCHEDULER_DIR / pair_name.replace("/", "_")


def profile_class(profile) -> str:
    """What an artifact is trained for: a named profile's name ("a100-paper"), or for a profile
    measured on the running device its device type and dtype ("cpu-float32"): measured profiles
    of one kind of device share artifacts (training spans 0.5-2x their costs)."""
    if profile is None:
        return ""
    key = getattr(profile, "key", None) or {}
    if key.get("device"):
        return f"{key['device'].split(':')[0]}-{key.get('dtype', '')}"
    return profile.name


def growth_suffix(growth: str, small: str = "ngram") -> str:
    """Artifacts are keyed by the trees they learn on too: "" for the full growth (the defaults) and small
    drafter, "-<growth>" for another growth, then "-<small>" for another small drafter."""
    return ("" if growth == "full" else f"-{growth}") + ("" if small == "ngram" else f"-{small}")


def with_family(pair_dir: Path, cls: str, tail: str) -> Path:
    """`<pair_dir>/<cls>-<tail>/` when it holds a scheduler, else the pair's family scheduler for the same
    pruning, growth and small drafter (`family-<tail>/`: trained on many profiles, it takes T_tgt and T_mid
    as inputs, so it serves any profile) when that one exists; else the first (it may hold none)."""
    own, family = pair_dir / f"{cls}-{tail}", pair_dir / f"family-{tail}"
    if not (own / art_io.META_NAME).is_file() and (family / art_io.META_NAME).is_file():
        return family
    return own


def artifact_folder(pair, config, profile=None) -> Path | None:
    """`config.scheduler_path`, else `data/scheduler/<pair>/<profile class>-<prune>[-<growth>][-<small>]/`,
    or where that holds none, the pair's family scheduler for those settings (`with_family`); None when
    the pair has no name."""
    if config.scheduler_path:
        return Path(config.scheduler_path)
    name = getattr(pair, "name", None) if pair is not None else None
    if not name:
        return None
    if profile is None:
        return artifact_dir(name)
    prune = costs.concrete_prune(config, profile)
    return with_family(artifact_dir(name), profile_class(profile), f"{prune}{growth_suffix(config.growth, config.small)}")


def settings_of(folder: Path) -> dict:
    """The DecodeConfig settings an artifact was trained for: {"clock": ..., "prune": ...} ("wall"
    for a class of measured profiles, else the named profile)."""
    meta = art_io.read_meta(folder)
    cls = meta.get("profile_class", "")
    named = cls and not cls.startswith(("cpu-", "cuda-", "mps-"))
    out = {"clock": cls if named else "wall", "prune": meta.get("prune", "topk")}
    return {**out, **GROWTHS.get(meta.get("growth", "full"), {}), "small": meta.get("small", "ngram"),
            **({"recycle_below": meta["recycle_below"]} if "recycle_below" in meta else {})}


def default_folder(pair_name: str, clock: str = "wall", prune: str = "value", growth: str = "full",
                   device: str = "auto", dtype: str = "auto", small: str = "ngram") -> Path:
    """The artifact folder for a pair under `clock`, `prune` and `growth`, without loading a model
    (for "wall": the device type and dtype that `device` and `dtype` resolve to on this machine); the
    family scheduler where no single-profile one exists (`with_family`)."""
    if clock == "wall":
        dev = resolve_device(device)
        cls = f"{dev.type}-{str(resolve_dtype(dtype, dev)).removeprefix('torch.')}"
    else:
        cls = profile_class(costs.load(clock))
    return with_family(artifact_dir(pair_name), cls, f"{prune}{growth_suffix(growth, small)}")


def check_match(meta: dict, pair_name: str | None, profile, prune: str, folder: Path, growth: str = "full",
                small: str = "ngram", recycle_below: int | None = None) -> None:
    """Refuse, in one line, an artifact trained for another pair, profile class, pruning rule, tree
    growth or small drafter (one that records none was trained on the full growth and n-gram
    drafter), or, n-gram and recycling together, another gate (`recycle_below`; None: not checked)."""
    family = meta.get("profile_class") == "family"  # trained on many profiles: it takes T_tgt / T_mid as inputs
    gated = recycle_below is not None and "recycle_below" in meta
    want = {"pair": pair_name, "profile": None if family else profile_class(profile), "prune": prune, "growth": growth,
            "small": small, "recycle_below": recycle_below if gated else None}
    got = {"pair": meta.get("pair"), "profile": meta.get("profile_class"), "prune": meta.get("prune"),
           "growth": meta.get("growth", "full"), "small": meta.get("small", "ngram"),
           "recycle_below": meta.get("recycle_below")}
    bad = [k for k in want if want[k] not in (None, "") and got[k] != want[k]]
    if bad:
        raise TreeGraftError(
            f"the scheduler in {folder} was trained for " + ", ".join(f"{k} {got[k]!r}" for k in bad)
            + ", not " + ", ".join(f"{want[k]!r}" for k in bad)
            + f": use the settings it was trained for, or train one with `treegraft-lab collect --profile ... "
              f"--prune {prune} --growth {growth} --small {small}` and `treegraft-lab train-scheduler`")


def mid_card_agreement(pair) -> float:
    """The pair's mid drafter's greedy agreement with its target, from the card beside its weights
    (`treegraft-lab zoo card PAIR --write-card`); refused in one line when there is none."""
    mid = getattr(pair, "mid_id", "") or ""
    card = Path(mid) / "card.json" if mid else None
    if card is None or not card.is_file():
        raise TreeGraftError(
            f"this scheduler takes the mid drafter's agreement as an input, but {getattr(pair, 'name', pair)!r}'s mid "
            f"drafter has no measured card ({card or 'no mid drafter'}): run `treegraft-lab zoo card PAIR --write-card`, "
            "or use a scheduler trained without it")
    try:
        return float(json.loads(card.read_text())["agreement"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TreeGraftError(f"{card} holds no readable 'agreement' ({e}): write the card again with "
                             "`treegraft-lab zoo card PAIR --write-card`") from e


class AdaptivePolicy:
    """The online scheduler; `last_score` is the last de-normalised margin (the recorder reads it).
    `agreement`: the mid drafter's agreement, for an artifact that takes it as an input (else unused)."""

    name = "adaptive"

    def __init__(self, art: art_io.SchedulerArtifact, agreement: float | None = None) -> None:
        self.artifact = art
        self.depth = art.depth
        self.signals = list(art.signals)
        self.uses_agreement = art_io.AGREEMENT in art.inputs
        if self.uses_agreement and (agreement is None or not math.isfinite(agreement)):
            raise TreeGraftError("this scheduler takes the mid drafter's agreement as an input: pass agreement=, "
                                 "or build it with AdaptivePolicy.for_pair (which reads the drafter's card)")
        self.agreement = float(agreement) if self.uses_agreement else None
        w = {k: v.float().numpy() for k, v in art.weights.items()}
        # fold the input z-scoring into the first layer: W (x - m) / s + b = (W / s) x + (b - W m / s)
        self.x_mean = list(art.x_mean)
        w1 = w["l1.weight"] / np.asarray(art.x_std, dtype=np.float32)
        b1 = w["l1.bias"] - w1 @ np.asarray(art.x_mean, dtype=np.float32)
        self._net = (w1, b1, w["l2.weight"], w["l2.bias"], w["l3.weight"][0], float(w["l3.bias"][0]))
        self.y_mean, self.y_std = art.y_mean, art.y_std
        self.last_score = math.nan

    @classmethod
    def for_pair(cls, pair, config, profile=None) -> AdaptivePolicy:
        """The artifact for (pair, profile class, pruning), or `config.scheduler_path`; refused,
        in one line, when it was trained for another pair, profile class, pruning or depth."""
        from dataclasses import replace

        config = replace(config, prune=costs.concrete_prune(config, profile))
        name = getattr(pair, "name", None) if pair is not None else None
        folder = artifact_folder(pair, config, profile)
        if folder is None:
            raise TreeGraftError("schedule='adaptive' needs a pair with a name or config.scheduler_path")
        if not (folder / art_io.META_NAME).is_file() and not config.scheduler_path and folder.parent.is_dir():
            have = sorted(p.name for p in folder.parent.iterdir() if (p / art_io.META_NAME).is_file())
            raise TreeGraftError(
                f"no scheduler for pair {name!r} on profile {profile_class(profile)!r} with prune={config.prune!r}, "
                f"growth {config.growth!r}, small {config.small!r} "
                f"(looked in {folder}); trained ones: {', '.join(have) or 'none'}: pick a matching clock/prune, or "
                f"train one with `treegraft-lab collect` and `treegraft-lab train-scheduler`")
        art = art_io.load(folder)
        if art.depth != config.depth:
            raise TreeGraftError(f"the scheduler in {folder} was trained for depth {art.depth}, but depth={config.depth}; "
                                 "use that depth or train a scheduler for this one")
        check_match({"pair": art.pair, **art.meta}, None if config.scheduler_path else name, profile, config.prune, folder,
                    config.growth, config.small, config.recycle_below)
        return cls(art, mid_card_agreement(pair) if art_io.AGREEMENT in art.inputs else None)

    def features(self, ctx) -> list[float]:
        """The raw inputs for one decision (17; 18 with the mid drafter's agreement after the context)."""
        D, hist = self.depth, ctx.history
        t_tgt, t_mid = float(ctx.t_tgt_ms), float(ctx.t_mid_ms)
        ratio = math.log(t_tgt / t_mid) if t_tgt > 0 and t_mid > 0 else 0.0
        bits = [float(hist[j]) if j < len(hist) else 0.0 for j in range(D)]
        sig = ctx.signals()
        agree = [self.agreement] if self.uses_agreement else []
        return [math.log1p(ctx.prompt_len), t_tgt, t_mid, ratio, ctx.k / D, sum(hist) / D, *agree, *bits,
                *(float(sig[s]) for s in self.signals)]

    def score(self, x: list[float]) -> float:
        """The de-normalised margin for one input row (numpy: a 3-layer MLP this small costs less
        there than torch's per-op dispatch; it runs five times a round)."""
        w1, b1, w2, b2, w3, b3 = self._net
        h = np.maximum(w1 @ np.asarray(x, dtype=np.float32) + b1, 0.0)
        h = np.maximum(w2 @ h + b2, 0.0)
        return (float(w3 @ h) + b3) * self.y_std + self.y_mean

    def decide(self, ctx) -> bool:
        x = self.features(ctx)
        if not all(math.isfinite(v) for v in x):  # e.g. costs not measured yet: use the training mean
            x = [v if math.isfinite(v) else m for v, m in zip(x, self.x_mean)]
        self.last_score = self.score(x)
        return self.last_score > 0
