"""This device's cost profile, measured once and cached; the one timing helper.

The pure cost model is `treegraft_lab.costs`; this module is what fills it on the running
machine. `for_pair(pair)` measures the device once (a progress bar, about 20-60 s on a CPU) and
caches the result on disk per (model shapes and files, device, dtype, threads, forward path);
`cached(pair)` only reads that cache. `resolve(clock, pair)` turns a `DecodeConfig.clock` (a name)
into a `DeviceProfile` and is called once at the edge (the CLI commands, bench, widgets and notebook
helpers), which hand the result to the decoder (`TreeGraftDecoder(pair, config, profile=...)`);
a decoder handed none only reads (`read_only`): it never measures.

A measured profile is checked (`measure_checked`): a smaller mid drafter must cost less than the
target, and repeated timings must agree within MAX_SPREAD; one that fails is measured once more,
then kept flagged (`flagged`), and every process that uses it says so in one line. It keeps n, the spread and the date, which the views show beside it.

A measurement also records the machine's load (`load_record`: the 1-minute load average before and
after, the CPUs, this process's measuring threads) and, when it re-measures a trusted cached profile,
how its target curve compares (`compare`). It is flagged when other programs kept at least BUSY_LOAD
of the CPUs busy, or when its target forward came out more than SLOWER times the cached one's while
they kept at least LOADED of them busy (`load_problems`). A flagged re-measure never replaces a trusted
cached profile unless forced (`for_pair(..., force=True)`, `treegraft-lab profile --refresh --force`):
`ProfileKept` says in one line that the cached one stays.

`timed(fn, *args, devices=...)` is how the package times work where it measures: it synchronises
every CUDA device the models use before and after the call (`cuda_devices`), so queued kernels
on any of them are counted. A decoding round does not wait for its timings: `Laps` times its
forwards with CUDA events, read after the round's own host read.
"""

from __future__ import annotations

import functools
import json
import math
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from treegraft_lab import graft, kv
from treegraft_lab.costs import CONTEXT, CONTEXT_LONG, PROFILES_DIR, DeviceProfile, load
from treegraft_lab.drafters import NgramDrafter
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.models import cpu_name
from treegraft_lab.notes import note
from treegraft_lab.profile_cache import cache_dir, digest, folder_fingerprint
from treegraft_lab.tree import SMALL, DraftTree

TARGET_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)  # dense where small trees are priced
LONG_SIZES = (1, 8, 16, 64)  # the target curve at CONTEXT_LONG: what a tree token costs after a long prompt
METHOD = "interleaved passes, convex fit with a first step"  # in the profile key: a profile measured otherwise is measured again
MID_SIZES = (1, 10, 25, 50, 100, 200, 400)


# ---------------------------------------------------------------------------- timing
def cuda_devices(*models) -> tuple[torch.device, ...]:
    """Every CUDA device holding a parameter of `models` (None entries skipped), in order."""
    devs = {p.device for m in models if m is not None for p in m.parameters() if p.device.type == "cuda"}
    return tuple(sorted(devs, key=str))


def synchronize(devices: tuple[torch.device, ...]) -> None:
    """Wait for the queued work of every device in `devices` (`torch.cuda.synchronize` alone waits
    for the current device only)."""
    for d in devices:
        torch.cuda.synchronize(d)


def timed(fn, *args, devices: tuple[torch.device, ...] = ()):
    """`fn(*args)` and its wall seconds, every CUDA device in `devices` synchronised before and after."""
    synchronize(devices)
    t = time.perf_counter()
    out = fn(*args)
    synchronize(devices)
    return out, time.perf_counter() - t


class Laps:
    """Seconds of forwards within a round without waiting for the device.

    `run(fn, *args)` times one call: on the CPU (nothing queued) by the wall clock around it; with
    CUDA devices by a pair of timing events on each device's current stream (the span of the
    slowest device), so the host does not wait. `take()` returns the seconds run since the last
    take: call it after a host read that waited for that work (the round's verification result),
    and the events are read without waiting. `clear()` drops laps never taken (a replay's)."""

    def __init__(self, devices: tuple[torch.device, ...] = ()) -> None:
        self.devices = tuple(devices)
        self.cpu_s = 0.0
        self.events: list[tuple[list, list]] = []

    def _mark(self) -> list:
        marks = []
        for d in self.devices:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(torch.cuda.current_stream(d))
            marks.append(ev)
        return marks

    def run(self, fn, *args):
        """`fn(*args)`, timed as one lap."""
        if not self.devices:
            t = time.perf_counter()
            out = fn(*args)
            self.cpu_s += time.perf_counter() - t
            return out
        start = self._mark()
        out = fn(*args)
        self.events.append((start, self._mark()))
        return out

    def take(self) -> float:
        """Seconds of the laps run since the last take or clear."""
        total = self.cpu_s
        for start, end in self.events:
            for ev in end:
                if not ev.query():  # not yet done: wait (the decoder takes after its read, never here)
                    ev.synchronize()
            total += max(a.elapsed_time(b) for a, b in zip(start, end)) / 1000
        self.clear()
        return total

    def clear(self) -> None:
        self.cpu_s, self.events = 0.0, []


# ---------------------------------------------------------------------------- measuring
def _shape(m) -> dict:
    cfg = m.config.to_dict()
    keys = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "vocab_size")
    return {k: cfg.get(k) for k in keys}


def _key(target: dict, mid: dict | None, device, dtype, forward_path: str) -> dict:
    hw = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    return {"target": target, "mid": mid, "device": str(device), "hardware": hw,
            "dtype": str(dtype).removeprefix("torch."), "threads": torch.get_num_threads(),
            "forward_path": forward_path, "torch": torch.__version__, "measured_by": METHOD}


def profile_key(pair) -> dict:
    """What a measured profile depends on: model files (or shapes, for models built in memory),
    device, dtype, threads and forward path."""
    mid = getattr(pair, "mid", None)
    t = folder_fingerprint(getattr(pair, "target_id", "")) or _shape(pair.target)
    m = None if mid is None else (folder_fingerprint(getattr(pair, "mid_id", "")) or _shape(mid))
    return _key(t, m, pair.target.device, pair.target.dtype, getattr(pair, "forward_path", "stock"))


_held: dict | None = None  # (id(model), context) -> [cache, ids, sizes warmed], within `prefilled` only


@contextmanager
def prefilled() -> Iterator[None]:
    """Within it, `forward_times` prefills each (model, context) once and warms each size once, so that
    interleaved passes over the sizes cost one forward per timing."""
    global _held
    _held = {}
    try:
        yield
    finally:
        _held = None


def forward_times(model, n: int, context: int = CONTEXT, repeats: int = 3) -> list[float]:
    """ms of each of `repeats` forwards of `n` new tokens after `context` cached ones (a causal
    mask: a tree mask of the same size costs the same), after one warm-up."""
    held = _held.get((id(model), context)) if _held is not None else None
    if held is None:
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, model.config.vocab_size, (context + max(TARGET_SIZES[-1], MID_SIZES[-1], n),),
                            generator=g).tolist()
        cache = kv.new_cache(model)
        kv.prefill(model, cache, ids[:context])
        held = [cache, ids, set()]
        if _held is not None:
            _held[(id(model), context)] = held
    cache, ids, warmed = held
    allowed = torch.ones(n, context + n, dtype=torch.bool)
    allowed[:, context:] = torch.ones(n, n, dtype=torch.bool).tril()
    positions = torch.arange(context, context + n)
    head = model.get_output_embeddings()
    sub = head.sub_logits if hasattr(head, "sub_logits") else None  # as the mid drafter calls it

    def step() -> None:
        kv.masked_forward(model, cache, ids[context:context + n], positions, allowed, sub)
        kv.truncate(cache, context)

    devices = cuda_devices(model)
    if n not in warmed:
        step()  # warm-up
        warmed.add(n)
    return [1000 * timed(step, devices=devices)[1] for _ in range(repeats)]


def forward_ms(model, n: int, context: int = CONTEXT, repeats: int = 3) -> float:
    """Median ms of one forward of `n` new tokens after `context` cached ones (`forward_times`)."""
    return statistics.median(forward_times(model, n, context, repeats))


def small_step_ms(tokenizer=None, context: int = 2000, width: int = 10, repeats: int = 50) -> float:
    """Median ms of one n-gram drafting step: a W-node frontier at depth 3 of a tree, proposals
    (per-parent top-W, n-gram chains) and grafting, over a `context`-token committed text."""
    text = PROFILES_DIR.parent / "prompts" / "treegraft-suite.jsonl"
    ids: list[int] = []
    if tokenizer is not None and text.is_file():
        turns = [t for line in text.read_text().splitlines()[:60] for t in json.loads(line)["turns"]]
        try:
            ids = list(tokenizer("\n".join(turns))["input_ids"])
        except (TypeError, KeyError):  # a tokenizer stand-in that cannot encode text
            ids = []
    if len(ids) < 100:  # no tokenizer: a repetitive synthetic text
        ids = [(i * 7919) % 211 + (i % 13) for i in range(context)]
    while len(ids) < context:
        ids = ids + ids
    ids = ids[:context]
    small = NgramDrafter(5, 1)
    small.index.extend(ids)
    base = DraftTree.start(ids[-1])
    frontier = [0]
    for step in range(1, 4):
        toks = list(dict.fromkeys(ids[step * 97:]))[:width]
        frontier = [base.add_child(frontier[i % len(frontier)], t, -1.0, SMALL, step)[0] for i, t in enumerate(toks)]

    def step(tree: DraftTree) -> None:
        graft.graft(tree, small.propose(tree, frontier, width, width, 2), SMALL, 4, True, 511)

    return 1000 * statistics.median(timed(step, base.copy())[1] for _ in range(repeats))


def long_context(model) -> int:
    """The long context a model's profile is measured at: CONTEXT_LONG, 0 for a model whose positions
    stop before it (the tests' tiny models)."""
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", 0) or 0
    return CONTEXT_LONG if limit >= CONTEXT_LONG + max(LONG_SIZES) else 0


def measure(pair, progress: bool = True, repeats: int = 5) -> DeviceProfile:
    """Measure this device's profile for `pair` (target curve, mid curve if it has a mid, n-gram step):
    `repeats` interleaved passes, each timing every size once (`forward_times`), so that a busy spell
    of the machine slows every size alike rather than a few. Each curve is the nondecreasing convex
    least-squares fit of the sizes' medians (`fitted`). The profile keeps n, the spread
    of the repeats (`rel_spread`, median over the sizes of at least JUDGED_MS; None unless most
    forwards are that long: tiny models are timed, not judged) and the date. Not checked: see `measure_checked`."""
    mid = getattr(pair, "mid", None)
    long = long_context(pair.target)
    jobs = [("target", n) for n in TARGET_SIZES] + ([("mid", n) for n in MID_SIZES] if mid is not None else [])
    jobs += [("target_long", n) for n in LONG_SIZES] if long else []
    times: dict[tuple[str, int], list[float]] = {job: [] for job in jobs}
    bar = tqdm(total=repeats * len(jobs), desc="measuring the device profile", disable=not progress, leave=False)
    with torch.inference_mode(), prefilled():
        for _ in range(repeats):
            for kind, n in jobs:
                model = mid if kind == "mid" else pair.target
                times[kind, n] += forward_times(model, n, long if kind == "target_long" else CONTEXT, 1)
                bar.update()
    bar.close()
    curves: dict[str, dict[int, float]] = {"target": {}, "mid": {}, "target_long": {}}
    spreads = []
    for (kind, n), ts in times.items():
        curves[kind][n] = statistics.median(ts)
        if curves[kind][n] >= JUDGED_MS:  # shorter forwards: the OS scheduler's slices, not the device
            spreads.append(rel_spread(ts))
    curves = {kind: fitted(curve) for kind, curve in curves.items()}
    key = profile_key(pair)
    small = small_step_ms(getattr(pair, "tokenizer", None))
    words = f"{key['hardware']}, {key['device']}, {key['dtype']}, {key['threads']} threads, forward path {key['forward_path']}"
    when = time.strftime("%Y-%m-%d %H:%M")
    return DeviceProfile(f"{getattr(pair, 'name', 'pair')}@{key['device']}-{digest(key)[:6]}", curves["target"],
                         curves["mid"], small, words, f"measured {when}", CONTEXT, key, n=repeats,
                         spread=statistics.median(spreads) if 2 * len(spreads) >= len(jobs) else None, measured=when,
                         target_long=curves["target_long"], context_long=long)


def fitted(curve: dict[int, float]) -> dict[int, float]:
    """{size: ms} fitted: the smallest size (one token: a decoding step) as measured, capped by the fit
    at the next size, and from the second size on the least-squares fit by a nondecreasing convex
    piecewise-linear curve with a knot at each size (scipy's non-negative least squares over hinge
    functions): a forward of more tokens never costs less, and past one token a token never costs
    less than the one before it. One token is fitted apart because a CPU may run it with another
    kernel than a few tokens (a matrix-vector product against a matrix product: AMX, AVX-512): the
    jump it measured between one token and two stays there, instead of being spread over the first
    tree tokens, which value pruning would then keep at a loss. A size timed fast or slow
    by chance moves its neighbours a little instead of making a run of tokens free (a running minimum,
    or an isotonic fit, prices a flat stretch at 0 ms a token, and value pruning then fills it)."""
    if len(curve) < 3:
        return dict(curve)
    import numpy as np
    from scipy.optimize import nnls

    first, *rest = sorted(curve)
    xs = np.array(rest, dtype=float)  # the curve from the second size on: convex
    basis = np.column_stack([np.ones_like(xs), *(np.maximum(0.0, xs - k) for k in xs[:-1])])
    weights, _ = nnls(basis, np.array([curve[int(x)] for x in xs]))
    out = {int(x): float(v) for x, v in zip(xs, basis @ weights)}
    return {first: min(curve[first], out[rest[0]]), **out}  # the smallest size as measured, never above the next


# ---------------------------------------------------------------------------- sanity
MAX_SPREAD = 0.5  # repeated timings of one forward must agree within 50% (interquartile range over the median)
JUDGED_MS = 20.0  # the spread is judged over forwards of at least 20 ms (a busy OS slices time finer than that)
MID_SMALLER = 0.5  # a mid drafter with at most half the target's compute must measure cheaper than it
ORDER_CHECK = "a mid forward costs less than a target forward of as many tokens"


def rel_spread(times: list[float]) -> float:
    """How much repeated timings of one thing disagree: their interquartile range over their median
    (0: identical; one preempted repeat of five moves it little)."""
    med = statistics.median(times)
    if len(times) < 2 or med <= 0:
        return 0.0
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return (q3 - q1) / med


def compute_params(model) -> int:
    """Parameters a forward multiplies by (the input embedding, a lookup, left out), the weights of
    dynamically quantised linears included (packed, they are not `parameters()`: an int8 copy of the
    target has as many as the target)."""
    emb = model.get_input_embeddings()
    skip = {id(p) for p in emb.parameters()} if emb is not None else set()
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    packed = sum(m.weight().numel() for m in model.modules() if isinstance(m, DynamicInt8Linear))
    return packed + sum(p.numel() for p in model.parameters() if id(p) not in skip)


def mid_is_smaller(pair) -> bool:
    """Whether `pair`'s mid drafter has at most MID_SMALLER of the target's compute, so that a
    profile must find it cheaper (the tests' tiny stand-ins and a target used as its own mid are not)."""
    mid = getattr(pair, "mid", None)
    return mid is not None and compute_params(mid) <= MID_SMALLER * compute_params(pair.target)


def problems(prof: DeviceProfile, pair=None) -> list[str]:
    """What is insane about `prof`, in words ([] when sane): a mid forward no cheaper than a target
    forward of as many tokens (checked when the pair's mid is smaller, or with no pair), repeated
    timings spread wider than MAX_SPREAD."""
    out = []
    if prof.mid and (pair is None or mid_is_smaller(pair)):
        bad = [n for n in sorted(prof.mid) if n <= max(prof.target) and prof.mid[n] >= prof.target_ms(n)]
        if bad:
            n = bad[0]
            out.append(f"a mid forward of {n} tokens measured {prof.mid[n]:.1f} ms, no less than a target forward of as "
                       f"many ({prof.target_ms(n):.1f} ms), though the mid drafter is the smaller model")
    if prof.spread is not None and prof.spread > MAX_SPREAD:
        out.append(f"repeated timings disagree by {prof.spread:.0%} (more than {MAX_SPREAD:.0%})")
    return out


def measure_checked(pair, progress: bool = True, measure_fn=None, previous: DeviceProfile | None = None) -> DeviceProfile:
    """`measure` (or `measure_fn(pair, progress=...)`: injected timings in tests), checked by `problems`;
    one that fails is measured once more. Each measurement records the load beside it (`read_load` before and
    after, `load_record`) and its target curve against `previous` (the trusted cached profile it re-measures,
    `compare`). The profile records the checks it passed; one that fails twice, or was measured on a busy
    machine (`load_problems`: not measured again, the load average remembers the last minute), is kept but
    flagged: `flagged` holds why, and every use says so (`warn_flagged`), until it is measured again on a
    quiet machine."""
    measure_fn = measure_fn or measure
    for _ in range(2):
        start = read_load()
        prof = measure_fn(pair, progress=progress)
        prof.load = load_record(start, read_load(), measuring_threads(pair))
        prof.compared = compare(prof, previous)
        found = problems(prof, pair)
        if not found:
            break
    if not found:
        prof.checked = ([ORDER_CHECK] if prof.mid and mid_is_smaller(pair) else []) + (
            [f"repeated timings within {MAX_SPREAD:.0%}"] if prof.spread is not None else [])
    prof.flagged = found + load_problems(prof)
    return prof


# ---------------------------------------------------------------------------- load
BUSY_LOAD = 0.5  # flagged when other programs keep at least half the CPUs busy while it measures
LOADED = 0.25  # ... or a quarter of them, and its target forward measures more than SLOWER x the cached profile's
SLOWER = 1.5
LOAD_SPAN = 30.0  # s: a shorter measurement moves the 1-minute load average too little to tell its own share apart
LOAD_WINDOW = 60.0  # s: the time constant of the 1-minute load average


@dataclass(frozen=True)
class LoadReading:
    """The 1-minute load average (runnable threads, averaged), the CPUs it is shared by, when (monotonic s)."""

    average: float
    cpus: int
    at: float


def read_load() -> LoadReading | None:
    """This machine's load now (`os.getloadavg`, `os.cpu_count`); None where the system keeps no load average.
    The one place measuring reads the load: tests replace it."""
    try:
        average = os.getloadavg()[0]
    except (OSError, AttributeError):
        return None
    return LoadReading(average, os.cpu_count() or 1, time.monotonic())


def measuring_threads(pair) -> int:
    """The threads a measurement of `pair` keeps runnable: torch's intra-op threads on a CPU, one on a GPU."""
    return torch.get_num_threads() if pair.target.device.type == "cpu" else 1


def load_record(start: LoadReading | None, end: LoadReading | None, threads: int) -> dict:
    """The load beside a measurement that ran `threads` threads between two readings ({} without both).

    "others" estimates the runnable threads of other programs, averaged over the measurement. The
    1-minute load average L moves towards the runnable count r with L_end = L_start * f + r * (1 - f),
    f = exp(-span / 60 s), so r = (L_end - L_start * f) / (1 - f) and others = r - threads: this process's
    work just before (a notebook that decoded) or a job that just ended are not counted. A measurement
    shorter than LOAD_SPAN moves L too little for that: others = max(L_start, L_end - threads)."""
    if start is None or end is None:
        return {}
    span = max(0.0, end.at - start.at)
    if span >= LOAD_SPAN:
        f = math.exp(-span / LOAD_WINDOW)
        others = (end.average - start.average * f) / (1 - f) - threads
    else:
        others = max(start.average, end.average - threads)
    return {"before": round(start.average, 2), "after": round(end.average, 2), "seconds": round(span, 1),
            "cpus": start.cpus, "threads": threads, "others": round(max(0.0, others), 2)}


def compare(prof: DeviceProfile, previous: DeviceProfile | None) -> dict:
    """`prof`'s target forward over `previous`'s at 1 token and at the largest size both measured ({} without
    a previous profile)."""
    if previous is None or not previous.target:
        return {}
    top = max(set(prof.target) & set(previous.target), default=min(max(prof.target), max(previous.target)))
    sizes = sorted({1, top})
    return {"measured": previous.measured, "tokens": sizes,
            "ms": [round(previous.target_ms(n), 2) for n in sizes], "new_ms": [round(prof.target_ms(n), 2) for n in sizes],
            "ratio": [round(prof.target_ms(n) / previous.target_ms(n), 3) for n in sizes]}


def load_problems(prof: DeviceProfile) -> list[str]:
    """Why `prof`'s load record or comparison makes it untrustworthy, in short words ([] when neither does):
    other programs kept at least BUSY_LOAD of the CPUs busy, or its target forward measured more than SLOWER x
    the cached profile's while they kept at least LOADED of them busy (or the load is unknown)."""
    load, cmp = prof.load or {}, prof.compared or {}
    others, cpus = load.get("others"), load.get("cpus", 1)
    out = []
    if others is not None and others >= BUSY_LOAD * cpus:
        out.append(f"busy: other load {others:.1f} on {cpus} CPUs (busy from {BUSY_LOAD * cpus:.1f})")
    ratio = max(cmp.get("ratio") or [0.0])
    if ratio > SLOWER and (others is None or others >= LOADED * cpus):
        i = cmp["ratio"].index(ratio)
        beside = "load unknown" if others is None else f"other load {others:.1f} on {cpus} CPUs"
        out.append(f"target forward {ratio:.1f}x the cached profile's ({cmp['ms'][i]:.1f} -> {cmp['new_ms'][i]:.1f} ms "
                   f"at {cmp['tokens'][i]} token{'s' if cmp['tokens'][i] != 1 else ''}, {beside})")
    return out


class ProfileKept(TreeGraftError):
    """A re-measure that came out flagged, refused: the trusted cached profile (`kept`) stays in use."""

    def __init__(self, kept: DeviceProfile, refused: DeviceProfile) -> None:
        self.kept, self.refused = kept, refused
        super().__init__(f"kept the cached profile (measured {kept.measured}): the new measurement was flagged "
                         f"({'; '.join(refused.flagged)}); measure again when the machine is quiet, or keep it anyway "
                         "with `treegraft-lab profile --refresh --force`")


def warn_flagged(prof: DeviceProfile, pair=None) -> None:
    """Say once, in one line, that `prof` is flagged (the decisions it prices may be off)."""
    if prof.flagged:
        note(f"the device profile of {getattr(pair, 'name', 'the pair')} ({prof.measured}) is flagged: "
             f"{'; '.join(prof.flagged)}. The machine was probably busy: decoding stays lossless, but choices "
             "that weigh time (pruning, the scheduler) may be off; measure again when it is quiet with "
             "`treegraft-lab profile --refresh`, or decide on a named profile (clock='a100-paper')")


@functools.cache
def read_profile(path: str, mtime_ns: int) -> DeviceProfile | None:
    """A cached profile file, read once per (path, version); None when it is broken."""
    try:
        return DeviceProfile.from_dict(json.loads(Path(path).read_text()), path)
    except (TreeGraftError, ValueError, OSError):
        return None


def cached(pair) -> DeviceProfile | None:
    """`pair`'s profile on this device from the disk cache, or None: never measures."""
    path = cached_path(pair)
    return read_profile(str(path), path.stat().st_mtime_ns) if path.is_file() else None


def trusted(prof: DeviceProfile | None, pair) -> bool:
    """Whether a cached profile can stand as it is: measured with its n, not flagged, sane, and with the
    long-context curve where the pair's target reaches it."""
    if prof is None or not prof.n or prof.flagged or problems(prof, pair):
        return False
    return bool(prof.target_long) or not long_context(pair.target)


def for_pair(pair, refresh: bool = False, progress: bool = True, force: bool = False) -> DeviceProfile:
    """This device's profile for `pair`: from the disk cache, else measured (`measure_checked`) and
    cached. A cached one measured without its n or spread, or failing `problems`, is measured again.
    `refresh` measures again; a re-measure that comes out flagged does not replace a trusted cached
    profile (`ProfileKept`, which says so in one line) unless `force`."""
    prof = None if refresh else cached(pair)
    stale = prof is not None and bool(long_context(pair.target)) and not prof.target_long  # measured before the long curve
    insane = prof is not None and not prof.flagged and bool(problems(prof, pair))  # a flagged one says so instead
    if prof is None or not prof.n or stale or insane:  # none yet, broken, unchecked, insane or asked again
        old = cached(pair) if refresh else None
        good = old if trusted(old, pair) else None
        prof = measure_checked(pair, progress=progress, previous=good)
        if prof.flagged and good is not None and not force:
            raise ProfileKept(good, prof)
        prof.save(cached_path(pair))
    warn_flagged(prof, pair)
    return prof


def cached_path(pair) -> Path:
    """Where `pair`'s measured profile on this device is (or will be) cached."""
    return cache_dir() / f"{digest(profile_key(pair))}.json"


def resolve(clock: str, pair) -> DeviceProfile:
    """The profile a `DecodeConfig.clock` names, for `pair`: "wall" -> this device's (`for_pair`:
    measured once, then read from its cache); a profile name ("a100-paper") or JSON file -> that
    profile (`costs.load`). The one public way to turn a clock into a profile: the edges (commands,
    bench, widgets, notebook helpers) call it once and hand the result to each decoder as
    `TreeGraftDecoder(pair, config, profile=...)`."""
    return for_pair(pair) if clock == "wall" else load(clock)


def read_only(clock: str, pair) -> DeviceProfile:
    """`resolve` without measuring, for a decoder handed no profile: a named or saved profile is
    read from its file, "wall" from this device's cache; a "wall" profile not measured yet is a
    TreeGraftError that says how to get one."""
    if clock != "wall":
        return load(clock)
    prof = cached(pair)
    if prof is None:
        raise TreeGraftError(
            f"clock 'wall' needs this device's profile for {getattr(pair, 'name', 'the pair')}, which is not measured "
            "yet: run `treegraft-lab profile` once, or pass profile=treegraft_lab.measure.resolve('wall', pair) to the "
            "decoder (measures and caches it), or decide on a named profile such as clock='a100-paper'")
    return prof
