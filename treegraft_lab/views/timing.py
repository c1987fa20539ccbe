"""The timing statistics of the playground and the notebooks: plain decoding as the baseline row,
medians and per-repeat speedups, settings that decided alike, and words when the timings moved."""

from __future__ import annotations

import math
from typing import Any

PLAIN_OFF = 2.0  # warn when plain decoding measures this many times off what this device's profile predicts
PLAIN_MOVED = 2.0  # ... or when its repeats' fastest over slowest exceeds this: the machine was probably busy


def median(xs: list[float]) -> float:
    """The median of `xs` (NaN for none)."""
    xs = sorted(xs)
    n = len(xs)
    return math.nan if not n else xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def baseline_row(name: str, s_per_token: list[float], modelled_ms: float) -> dict[str, Any]:
    """The plain-decoding row: one token per target forward, timed here and priced by the profile."""
    return {"setting": name, "schedule": "—", "A": 0, "mid calls": 0, "nodes": 0, "kept": 0,
            "draft (ms)": 0.0, "verify (ms)": 1000 * median(s_per_token), "eta": [1 / t for t in s_per_token],
            "modelled round (ms)": modelled_ms}


def repeat_speedups(tokens: int, round_s: list[list[float]], plain_s: list[float]) -> list[float]:
    """A replayed round's speedup over plain decoding in each repeat: (tokens / round time) over
    (1 / plain seconds per token), both from the same repeat. `round_s[i]`: repeat i's round
    times, one per setting timed together (their mean is the repeat's round time)."""
    return [tokens * p / (sum(r) / len(r)) for r, p in zip(round_s, plain_s)]


def twin_settings(keys: dict[str, Any], prefer: tuple[str, ...] = ("all-small", "all-mid")) -> dict[str, str]:
    """Setting -> the setting it decided exactly as (equal keys: schedule, mid calls, accepted, kept
    tree), the `prefer`red names first, then the earliest."""
    order = sorted(keys, key=lambda k: (k not in prefer, prefer.index(k) if k in prefer else 0))
    first: dict[Any, str] = {}
    return {k: first[keys[k]] for k in order if first.setdefault(keys[k], k) != k}


def decision_key(info, rrun) -> tuple:
    """A replayed round's decisions: schedule, mid calls, accepted count and its kept tree
    (token and parent of every kept node)."""
    t = rrun.tree_at(0)
    kept = t[t["kept"]].sort_values("node") if "kept" in t.columns else t.iloc[:0]
    return (info.schedule, info.mid_calls, info.accepted, tuple(zip(kept["token"].tolist(), kept["parent"].tolist())))


def moved_words(samples: list[float]) -> str:
    """Words when repeated timings of plain decoding moved more than PLAIN_MOVED x (max over min), else ""."""
    pos = [x for x in samples if x > 0]
    if len(pos) < 2 or max(pos) <= PLAIN_MOVED * min(pos):
        return ""
    return (f"moved {max(pos) / min(pos):.1f}x between its {len(pos)} repeats, more than {PLAIN_MOVED:g}x: "
            "the machine was probably busy")


def baseline_words(tokens_per_s: list[float]) -> str:
    """A plain-decoding baseline timed several times, in words: "plain decoding (median of 3: 8.1–9.6)", and
    "⚠ moved 3.4x between its 3 repeats, more than 2x: the machine was probably busy" where it did."""
    xs = sorted(tokens_per_s)
    if not xs:
        raise ValueError("baseline_words needs at least one timing of plain decoding: time it first")
    moved = moved_words(xs)
    return (f"plain decoding (median of {len(xs)}: {xs[0]:.1f}–{xs[-1]:.1f}" + (f"; ⚠ {moved})" if moved else ")"))


def plain_warning(plain_s: list[float], here: Any = None) -> str:
    """Words when plain decoding's repeats (`plain_s`, seconds per token) moved more than PLAIN_MOVED x
    (`moved_words`), or measured more than PLAIN_OFF times off what `here` predicts (this device's
    profile, given only when the replay decided on it), else ""."""
    moved = moved_words(plain_s)
    if moved:
        return (f"plain decoding {moved}, so the measured columns are not this device's usual speed. Replay "
                "again when it is quiet.")
    if not plain_s or here is None:
        return ""
    measured, predicted = 1 / median(plain_s), 1000 / here.target_ms(1)
    if max(measured / predicted, predicted / measured) <= PLAIN_OFF:
        return ""
    return (f"plain decoding measured {measured:.1f} tokens/s here, but this device's profile predicts "
            f"{predicted:.1f}: the machine is busier (or otherwise set up) than when it was profiled, so the "
            "measured columns are not this device's usual speed. Replay again, or re-measure the profile "
            "(treegraft-lab profile --refresh).")
