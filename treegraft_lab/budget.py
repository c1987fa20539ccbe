"""`budget="auto"`: pick the verification budget B_ver from the target's measured cost curve.

A tree of B non-root nodes costs the target one forward of B + 1 tokens (the root included). On
a GPU that costs about the same for 1 or 64 tokens; on a small CPU it grows steeply (64 tokens
~4x one token, docs/performance.md). The best budget therefore depends on the device.

Model of one round (documented, deliberately simple):

- cost(B) = fixed_ms + verify_ms(B + 1), where verify_ms is measured (medians) at a few tree
  sizes on the current device over a short synthetic cached context and linearly interpolated,
  and fixed_ms is the drafting cost, which does not depend on B: the expected mid-drafter calls
  per round times one measured mid call on W nodes, plus ~1 ms per n-gram step.
- tokens per round E(B) = 1 + a_max * (1 - exp(-B / b_scale)): accepted draft tokens grow
  concavely with the budget and saturate at a_max (bonus token: the 1). The defaults
  (`ACCEPTANCE`) were fitted on the offline pair's 10101 schedule (docs/performance.md);
  override them with `config.extra["acceptance"] = (a_max, b_scale)`.

The budget maximising E(B) / cost(B) over 1..`config.extra.get("max_budget", 63)` is returned.
Cost curves are cached per (model, device, dtype), so every decoder on one pair profiles once.
"""

from __future__ import annotations

import math
import time

import torch

from treegraft_lab import kv

SIZES = (1, 4, 8, 16, 24, 32, 48, 64)  # tokens per profiled forward (root + B non-root nodes)
CONTEXT = 256  # synthetic cached context length
ACCEPTANCE = (2.2, 10.0)  # (a_max, b_scale): see the module docstring
SMALL_STEP_MS = 1.0

_CURVES: dict[tuple, dict[int, float]] = {}
_MID_MS: dict[tuple, float] = {}


def _key(model) -> tuple:
    return (id(model), getattr(model, "name_or_path", ""), str(model.device), str(model.dtype))


def _median_ms(fn, repeats: int, cuda: bool) -> float:
    """Median wall ms of `fn()` after one warm-up call (synchronising CUDA around each call)."""
    fn()
    times = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append(1000 * (time.perf_counter() - t))
    return sorted(times)[len(times) // 2]


def forward_cost_ms(model, n: int, context: int = CONTEXT, repeats: int = 3) -> float:
    """Median ms of one causal forward of `n` new tokens after `context` cached ones."""
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (context + n,), generator=g).tolist()
    cache = kv.new_cache(model)
    kv.prefill(model, cache, ids[:context])
    allowed = torch.ones(n, context + n, dtype=torch.bool)
    allowed[:, context:] = torch.ones(n, n, dtype=torch.bool).tril()
    positions = torch.arange(context, context + n)

    def step() -> None:
        kv.masked_forward(model, cache, ids[context:], positions, allowed)
        kv.truncate(cache, context)

    return _median_ms(step, repeats, model.device.type == "cuda")


def cost_curve(model, sizes: tuple[int, ...] = SIZES, context: int = CONTEXT, repeats: int = 3) -> dict[int, float]:
    """{tokens: ms} for one tree forward of each size; cached per (model, device, dtype)."""
    key = (*_key(model), sizes, context)
    if key not in _CURVES:
        _CURVES[key] = {n: forward_cost_ms(model, n, context, repeats) for n in sizes}
    return _CURVES[key]


def interpolate(curve: dict[int, float], n: float) -> float:
    """Piecewise-linear cost at `n` tokens (flat extrapolation below, linear above)."""
    xs = sorted(curve)
    if n <= xs[0]:
        return curve[xs[0]]
    for a, b in zip(xs, xs[1:]):
        if n <= b:
            return curve[a] + (curve[b] - curve[a]) * (n - a) / (b - a)
    a, b = xs[-2], xs[-1]
    return curve[b] + (curve[b] - curve[a]) * (n - b) / (b - a)


def expected_tokens(budget: int, a_max: float, b_scale: float) -> float:
    """Tokens per round (bonus included) under the concave acceptance model."""
    return 1.0 + a_max * (1.0 - math.exp(-budget / b_scale))


def choose_budget(curve: dict[int, float], fixed_ms: float = 0.0, acceptance: tuple[float, float] = ACCEPTANCE,
                  max_budget: int = 63) -> int:
    """The budget in 1..max_budget maximising expected tokens per ms."""
    a_max, b_scale = acceptance

    def eta(b: int) -> float:
        return expected_tokens(b, a_max, b_scale) / (fixed_ms + interpolate(curve, b + 1))

    return max(range(1, max_budget + 1), key=eta)


def expected_mid_calls(config) -> float:
    """Mid calls per round implied by the schedule (adaptive, oracle, policies: half the steps)."""
    from treegraft_lab.config import parse_mask

    name = config.schedule_name
    if name == "small":
        return 0.0
    if name == "mid":
        return float(config.depth)
    mask = parse_mask(config.schedule, config.depth) if isinstance(config.schedule, (str, list, tuple)) else None
    return float(sum(mask)) if mask is not None else config.depth / 2


def mid_cost_ms(mid, width: int) -> float:
    """One mid-drafter call on `width` new nodes (cached per model, device, dtype)."""
    key = (*_key(mid), width)
    if key not in _MID_MS:
        _MID_MS[key] = forward_cost_ms(mid, width)
    return _MID_MS[key]


def auto_budget(pair, config, curve: dict[int, float] | None = None, mid_ms: float | None = None) -> int:
    """The budget for `config` on `pair`'s device; `curve` / `mid_ms` may be injected (tests)."""
    extra = config.extra or {}
    curve = curve if curve is not None else cost_curve(pair.target)
    calls = expected_mid_calls(config)
    if calls and mid_ms is None:
        mid_ms = mid_cost_ms(pair.mid, config.width) if getattr(pair, "mid", None) is not None else 0.0
    fixed = calls * (mid_ms or 0.0) + (config.depth - calls) * SMALL_STEP_MS
    return choose_budget(curve, fixed, tuple(extra.get("acceptance", ACCEPTANCE)), int(extra.get("max_budget", 63)))
