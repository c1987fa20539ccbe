"""The cost model: what a target forward, a mid-drafter call and an n-gram step cost on one device.

Pure: a `DeviceProfile` and arithmetic on it; nothing here measures or imports a model
(`treegraft_lab.measure` measures this device's profile and caches it). Every decision that
depends on speed reads a profile: the verification budget (`budget="auto"`), value pruning, the
scheduler's T_tgt / T_mid inputs, the oracle and the training data. Live timings are reported,
never decided on, so one prompt, pair and profile give the same decisions whatever the load of
the machine.

A profile holds three curves, each piecewise linear between measured points (linear
extrapolation above the last point, flat below the first):
- `target[n]`: ms of one target forward of n tokens (a tree of n - 1 nodes plus its root) after
  `context` cached tokens;
- `mid[n]`: ms of one mid-drafter call forwarding n tokens (tree nodes plus any committed text
  it had not seen yet);
- `small_ms`: one n-gram drafting step (lookup, proposals and grafting of a W-node frontier).

Named profiles (`a100-paper`, derived from the paper's published step costs:
data/profiles/README.md) and any saved JSON file are read with `load`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.paths import DATA_DIR

FORMAT = "treegraft-profile/1"
PROFILES_DIR = DATA_DIR / "profiles"
CONTEXT = 256
CONTEXT_LONG = 1536  # the second context the target curve is measured at: a tree token's price grows with it
SKIPPED = -1  # the size recorded for a draft step that did nothing (`DeviceProfile.step_ms`)


def interpolate(curve: dict[int, float], n: float) -> float:
    """Piecewise-linear value at `n` (flat below the first point, linear above the last)."""
    xs = sorted(curve)
    ys = [curve[x] for x in xs]
    if n <= xs[-1] or len(xs) == 1:
        return float(np.interp(n, xs, ys))
    return ys[-1] + (ys[-1] - ys[-2]) * (n - xs[-1]) / (xs[-1] - xs[-2])


@dataclass
class DeviceProfile:
    """Costs of one (pair, device, dtype, threads): curves in ms, see the module docstring."""

    name: str
    target: dict[int, float]
    mid: dict[int, float] = field(default_factory=dict)
    small_ms: float = 1.0
    device: str = ""  # in words: CPU or GPU name, threads, dtype, forward path
    source: str = ""  # "measured <date>" or the derivation of a named profile
    context: int = CONTEXT
    key: dict = field(default_factory=dict)  # what the cache entry was measured for
    n: int = 0  # timings per measured size (0: not measured here, e.g. derived from published costs)
    spread: float | None = None  # repeated timings' disagreement: median over sizes of (max - min) / median
    measured: str = ""  # when it was measured ("2026-12-03 04:30"); "" for a derived profile
    checked: list[str] = field(default_factory=list)  # the sanity checks it passed when measured, in words
    target_long: dict[int, float] = field(default_factory=dict)  # the target curve after `context_long` cached tokens
    context_long: int = 0  # 0: measured at `context` only (a named profile): the cost does not depend on the context
    flagged: list[str] = field(default_factory=list)  # why it is not to be trusted (a busy machine), in words
    load: dict = field(default_factory=dict)  # the machine's load while measuring (`measure.load_record`); {}: not recorded
    compared: dict = field(default_factory=dict)  # its target curve against the cached profile it re-measured; {}: none

    def target_ms(self, tokens: float, context: int | None = None) -> float:
        """A target forward of `tokens` new tokens; after `context` cached ones where the profile has its
        curve at a long context too (linear in the context between the two curves, beyond them as well;
        never below the curve at `self.context`). Without either: the curve at `self.context`."""
        t = interpolate(self.target, tokens)
        if context is None or not self.target_long or context <= self.context:
            return t
        return t + self.context_weight(context) * (interpolate(self.target_long, tokens) - t)

    def context_weight(self, context: int) -> float:
        """How far `context` lies from the short curve's context towards the long one's (0 at or below it)."""
        if not self.target_long or context <= self.context:
            return 0.0
        return (context - self.context) / (self.context_long - self.context)

    def mid_ms(self, tokens: float) -> float:
        if not self.mid:
            raise TreeGraftError(f"profile {self.name!r} has no mid-drafter curve: measure it on a pair with a mid drafter")
        return interpolate(self.mid, tokens)

    def step_ms(self, mid: bool, size: int = 0) -> float:
        """One draft step, the single pricing rule of the decoder, replays and training rows.

        `size` is a step's recorded size: for a mid step the tokens it forwarded (0: it forwarded
        nothing and proposed from rows it had scored: priced as an n-gram step); for an n-gram
        step its frontier nodes (any size costs `small_ms`); `SKIPPED` (-1) for a step the growth
        skipped (lookup growth's `min_step_p`): 0 ms.
        """
        if size < 0:
            return 0.0
        return self.mid_ms(size) if mid and size > 0 else self.small_ms

    def round_ms(self, steps: list[tuple[bool, int]], kept: int) -> float:
        """A round priced from its sizes: draft steps (mid?, tokens forwarded) and a verification
        of `kept` tokens (root included)."""
        return sum(self.step_ms(m, n) for m, n in steps) + self.target_ms(kept)

    def scaled(self, mid: float = 1.0, target: float = 1.0) -> DeviceProfile:
        """The profile with mid calls and target forwards `mid` / `target` times as costly."""
        return DeviceProfile(f"{self.name}*mid{mid:g}*tgt{target:g}", {n: v * target for n, v in self.target.items()},
                             {n: v * mid for n, v in self.mid.items()}, self.small_ms, self.device, self.source,
                             self.context, dict(self.key), self.n, self.spread, self.measured, list(self.checked),
                             {n: v * target for n, v in self.target_long.items()}, self.context_long, list(self.flagged),
                             dict(self.load), dict(self.compared))

    @property
    def label(self) -> str:
        return f"modelled on {self.name}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["target"] = {str(k): v for k, v in self.target.items()}
        d["mid"] = {str(k): v for k, v in self.mid.items()}
        d["target_long"] = {str(k): v for k, v in self.target_long.items()}
        return {"format": FORMAT, **d}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        tmp.rename(path)
        return path

    @classmethod
    def from_dict(cls, d: dict, where: str = "profile") -> DeviceProfile:
        try:
            if d.get("format") != FORMAT:
                raise ValueError(f"format is {d.get('format')!r}, not {FORMAT!r}")
            target = {int(k): float(v) for k, v in d["target"].items()}
            mid = {int(k): float(v) for k, v in (d.get("mid") or {}).items()}
            long = {int(k): float(v) for k, v in (d.get("target_long") or {}).items()}
            if long and int(d.get("context_long", 0)) <= int(d.get("context", CONTEXT)):
                raise ValueError("context_long must exceed context where target_long is given")
            if not target or not all(math.isfinite(v) and v > 0 for v in [*target.values(), *mid.values(), *long.values()]):
                raise ValueError("curves need positive finite ms values")
            spread = d.get("spread")
            return cls(str(d["name"]), target, mid, float(d.get("small_ms", 1.0)), str(d.get("device", "")),
                       str(d.get("source", "")), int(d.get("context", CONTEXT)), dict(d.get("key", {})),
                       int(d.get("n", 0)), None if spread is None else float(spread), str(d.get("measured", "")),
                       [str(c) for c in d.get("checked", [])], long, int(d.get("context_long", 0)) if long else 0,
                       [str(f) for f in d.get("flagged", [])], dict(d.get("load") or {}), dict(d.get("compared") or {}))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise TreeGraftError(f"{where} is not a usable device profile ({e}); measure one with "
                                 "`treegraft-lab profile --save FILE`") from e


def at_ratio(base: DeviceProfile, ratio: float) -> DeviceProfile:
    """`base` with its mid curve scaled so that the scheduler's T_mid / T_tgt (`scheduler_costs` of the
    map's settings: the lookup growth, W 10, a 63-node budget) is `ratio`; named "<base>@<ratio>". The
    target curve is left as it is: a mid drafter `ratio` times a verification's cost on that device."""
    from treegraft_lab.config import GROWTHS, DecodeConfig

    if not (isinstance(ratio, (int, float)) and 0 < ratio < 100):
        raise TreeGraftError(f"a cost ratio T_mid / T_tgt must lie in (0, 100), got {ratio!r}")
    t_tgt, t_mid = scheduler_costs(base, DecodeConfig(**GROWTHS["lookup"], small="ngram"))
    return replace(base.scaled(mid=ratio * t_tgt / t_mid), name=f"{base.name}@{ratio:g}")


def load(name_or_path: str | Path) -> DeviceProfile:
    """A named profile (data/profiles/<name>.json, e.g. "a100-paper") or a saved JSON file;
    "<name>@<ratio>" (e.g. "a100-paper@0.1"): that profile with its mid drafter at T_mid / T_tgt = ratio
    (`at_ratio`)."""
    if isinstance(name_or_path, str) and "@" in name_or_path and not Path(name_or_path).exists():
        name, _, r = name_or_path.rpartition("@")
        try:
            ratio = float(r)
        except ValueError:
            raise TreeGraftError(f"profile {name_or_path!r}: write NAME@RATIO with a number, e.g. a100-paper@0.1") from None
        return at_ratio(load(name), ratio)
    p = Path(name_or_path)
    if not p.suffix and not p.exists():
        p = PROFILES_DIR / f"{name_or_path}.json"
    if not p.is_file():
        named = sorted(x.stem for x in PROFILES_DIR.glob("*.json"))
        raise TreeGraftError(f"no device profile {str(name_or_path)!r}: give a JSON file or one of {', '.join(named)}, "
                             "or 'wall' for this device's measured profile")
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise TreeGraftError(f"device profile {p} is not valid JSON ({e})") from e
    return DeviceProfile.from_dict(doc, str(p))


def profile_name(profile) -> str:
    """A profile in words, never its cache hash: device, dtype, date and, for a measured one, its n, spread,
    the load beside the measurement and why it is flagged: "Intel Xeon, float32, 2 threads · measured
    2026-12-01 09:00, n=5, spread 4%, other load 0.2 on 2 CPUs", "NVIDIA A100 (the paper's setting, fp16) ·
    derived from published costs"."""
    key = getattr(profile, "key", {}) or {}
    if key.get("hardware"):
        threads = key.get("threads", "?")
        device = f"{key['hardware']}, {key.get('dtype', '')}, {threads} thread{'' if threads == 1 else 's'}"
    else:
        device = profile.device.split(")")[0] + ")" if ")" in profile.device else (profile.device or profile.name)
    src = profile.source or ""
    when = (f"measured {profile.measured}" if getattr(profile, "measured", "") else " ".join(src.split()[:2])
            if src.startswith("measured") else "derived from published costs")
    ratio = profile.name.rpartition("@")[2] if "@" in profile.name else ""
    if ratio.replace(".", "", 1).isdigit():  # `at_ratio`: the mid drafter's cost set by a ratio, said
        when += f" · mid drafter at T_mid / T_tgt = {ratio}"
    return f"{device} · {when}{measured_words(profile)}"


def measured_words(profile) -> str:
    """", n=5, spread 4%, other load 0.2 on 2 CPUs[, ⚠ flagged: ...]" for a measured profile; "" for a derived one."""
    n, spread = getattr(profile, "n", 0), getattr(profile, "spread", None)
    if not n:
        return ", n and spread not recorded" if (getattr(profile, "key", {}) or {}).get("hardware") else ""
    words = f", n={n}, spread {'not judged' if spread is None else f'{spread:.0%}'}"
    load = getattr(profile, "load", {}) or {}
    if "others" in load:
        words += f", other load {load['others']:.1f} on {load.get('cpus', '?')} CPUs"
    flagged = getattr(profile, "flagged", []) or []
    return words + (f", ⚠ flagged: {'; '.join(flagged)}" if flagged else "")


def scheduler_costs(profile: DeviceProfile, config, budget: int | None = None) -> tuple[float, float]:
    """The scheduler's T_tgt / T_mid inputs: one verification of the budget's tree (B_ver + 1 tokens;
    63 when the budget is "auto") and one mid call on the nodes a step grows (W x k per parent,
    W with the global rule). Constants of (profile, config): decisions never read live time."""
    if budget is None:
        budget = config.budget if isinstance(config.budget, int) else 63
    grow = config.width * (config.children if config.expansion == "per_parent" else 1)
    t_mid = profile.mid_ms(min(grow, config.node_cap)) if profile.mid else math.nan
    return profile.target_ms(budget + 1), t_mid


STEEP = 1.3  # value pruning where a 64-token target forward costs at least this many 1-token ones


def prune_for(profile) -> tuple[str, str]:
    """The pruning rule a device profile recommends, and why: "value" where every verified node
    costs (a 64-token target forward >= STEEP x a 1-token one: CPUs), else "topk" (flat GPU curves)."""
    ratio = profile.target_ms(64) / profile.target_ms(1)
    rule = "value" if ratio >= STEEP else "topk"
    return rule, f"a 64-token target forward costs {ratio:.1f}x a 1-token one on {profile.name}"


def concrete_prune(config, profile) -> str:
    """`config.prune`, with "auto" replaced by the profile's recommendation (`prune_for`; "topk" with no profile)."""
    if config.prune != "auto":
        return config.prune
    return prune_for(profile)[0] if profile is not None else "topk"
