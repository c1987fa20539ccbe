"""One device cost profile: what a target forward, a mid-drafter call and an n-gram step cost.

Every decision that depends on speed reads a `DeviceProfile`: the verification budget
(`budget="auto"`), value pruning, the scheduler's T_tgt / T_mid inputs, the oracle and the
training data. Live timings are reported, never decided on, so one prompt, pair and profile give
the same decisions whatever the load of the machine.

A profile holds three curves, each piecewise linear between measured points (linear
extrapolation above the last point, flat below the first):
- `target[n]`: ms of one target forward of n tokens (a tree of n - 1 nodes plus its root) after
  `context` cached tokens;
- `mid[n]`: ms of one mid-drafter call forwarding n tokens (tree nodes plus any committed text
  it had not seen yet);
- `small_ms`: one n-gram drafting step (lookup, proposals and grafting of a W-node frontier).

`for_pair(pair)` measures the current device once (a progress bar, about 10-30 s on a CPU) and
caches the result on disk per (model shapes and files, device, dtype, threads, forward path),
so it is never measured inside a timed run. Named profiles (`a100-paper`, derived from the
paper's published step costs: data/profiles/README.md) and any measured JSON file are loaded
with `load`. `resolve(clock, pair)` is what a decoder calls: "wall" gives this device's profile.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.paths import DATA_DIR

FORMAT = "treegraft-profile/1"
PROFILES_DIR = DATA_DIR / "profiles"
TARGET_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128)
MID_SIZES = (1, 10, 25, 50, 100, 200, 400)
CONTEXT = 256
_MEMO: dict[str, DeviceProfile] = {}


def cache_dir() -> Path:
    """Where measured profiles are cached ($TREEGRAFT_PROFILE_CACHE, else ~/.cache/treegraft_lab/profiles)."""
    env = os.environ.get("TREEGRAFT_PROFILE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "treegraft_lab" / "profiles"


def interpolate(curve: dict[int, float], n: float) -> float:
    """Piecewise-linear value at `n` (flat below the first point, linear above the last)."""
    xs = sorted(curve)
    if n <= xs[0]:
        return curve[xs[0]]
    for a, b in zip(xs, xs[1:]):
        if n <= b:
            return curve[a] + (curve[b] - curve[a]) * (n - a) / (b - a)
    if len(xs) == 1:
        return curve[xs[0]]
    a, b = xs[-2], xs[-1]
    return curve[b] + (curve[b] - curve[a]) * (n - b) / (b - a)


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

    def target_ms(self, tokens: float) -> float:
        return interpolate(self.target, tokens)

    def mid_ms(self, tokens: float) -> float:
        if not self.mid:
            raise TreeGraftError(f"profile {self.name!r} has no mid-drafter curve: measure it on a pair with a mid drafter")
        return interpolate(self.mid, tokens)

    def step_ms(self, mid: bool, tokens: int = 0) -> float:
        """One draft step: a mid call forwarding `tokens`, or one n-gram step."""
        return self.mid_ms(tokens) if mid else self.small_ms

    def round_ms(self, steps: list[tuple[bool, int]], kept: int) -> float:
        """A round priced from its sizes: draft steps (mid?, tokens forwarded) and a verification
        of `kept` tokens (root included)."""
        return sum(self.step_ms(m, n) for m, n in steps) + self.target_ms(kept)

    def scaled(self, mid: float = 1.0, target: float = 1.0) -> DeviceProfile:
        """The profile with mid calls and target forwards `mid` / `target` times as costly."""
        return DeviceProfile(f"{self.name}*mid{mid:g}*tgt{target:g}", {n: v * target for n, v in self.target.items()},
                             {n: v * mid for n, v in self.mid.items()}, self.small_ms, self.device, self.source,
                             self.context, dict(self.key))

    @property
    def label(self) -> str:
        return f"modelled on {self.name}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["target"] = {str(k): v for k, v in self.target.items()}
        d["mid"] = {str(k): v for k, v in self.mid.items()}
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
            if not target or not all(math.isfinite(v) and v > 0 for v in [*target.values(), *mid.values()]):
                raise ValueError("curves need positive finite ms values")
            return cls(str(d["name"]), target, mid, float(d.get("small_ms", 1.0)), str(d.get("device", "")),
                       str(d.get("source", "")), int(d.get("context", CONTEXT)), dict(d.get("key", {})))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise TreeGraftError(f"{where} is not a usable device profile ({e}); measure one with "
                                 "`treegraft-lab profile --save FILE`") from e


def load(name_or_path: str | Path) -> DeviceProfile:
    """A named profile (data/profiles/<name>.json, e.g. "a100-paper") or a JSON file."""
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


# ---------------------------------------------------------------------------- measuring
def _folder(path: str) -> dict | None:
    """A model folder's fingerprint: its path and the names and sizes of its config and weights."""
    root = Path(path) if path else None
    if root is None or not root.is_dir():
        return None
    files = sorted([f.name, f.stat().st_size] for f in root.iterdir() if f.suffix == ".safetensors" or f.name == "config.json")
    return {"path": str(root.resolve()), "files": files}


def _shape(m) -> dict:
    cfg = m.config.to_dict()
    keys = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "vocab_size")
    return {k: cfg.get(k) for k in keys}


def _key(target: dict, mid: dict | None, device, dtype, forward_path: str) -> dict:
    import torch

    from treegraft_lab.models import cpu_name

    hw = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    return {"target": target, "mid": mid, "device": str(device), "hardware": hw,
            "dtype": str(dtype).removeprefix("torch."), "threads": torch.get_num_threads(),
            "forward_path": forward_path, "torch": torch.__version__}


def profile_key(pair) -> dict:
    """What a measured profile depends on: model files (or shapes, for models built in memory),
    device, dtype, threads and forward path."""
    mid = getattr(pair, "mid", None)
    t = _folder(getattr(pair, "target_id", "")) or _shape(pair.target)
    m = None if mid is None else (_folder(getattr(pair, "mid_id", "")) or _shape(mid))
    return _key(t, m, pair.target.device, pair.target.dtype, getattr(pair, "forward_path", "stock"))


def _digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _median_ms(fn, repeats: int, cuda: bool) -> float:
    """Median wall ms of `fn()` after one warm-up call (synchronising CUDA around each call)."""
    import torch

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


def forward_ms(model, n: int, context: int = CONTEXT, repeats: int = 3) -> float:
    """Median ms of one forward of `n` new tokens after `context` cached ones (a causal mask: a
    tree mask of the same size costs the same)."""
    import torch

    from treegraft_lab import kv

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (context + n,), generator=g).tolist()
    cache = kv.new_cache(model)
    kv.prefill(model, cache, ids[:context])
    allowed = torch.ones(n, context + n, dtype=torch.bool)
    allowed[:, context:] = torch.ones(n, n, dtype=torch.bool).tril()
    positions = torch.arange(context, context + n)
    head = model.get_output_embeddings()
    sub = head.sub_logits if hasattr(head, "sub_logits") else None  # as the mid drafter calls it

    def step() -> None:
        kv.masked_forward(model, cache, ids[context:], positions, allowed, sub)
        kv.truncate(cache, context)

    return _median_ms(step, repeats, model.device.type == "cuda")


def small_step_ms(tokenizer=None, context: int = 2000, width: int = 10, repeats: int = 50) -> float:
    """Median ms of one n-gram drafting step: a W-node frontier at depth 3 of a tree, proposals
    (per-parent top-W, n-gram chains) and grafting, over a `context`-token committed text."""
    from treegraft_lab import graft
    from treegraft_lab.drafters import NgramDrafter
    from treegraft_lab.tree import SMALL, DraftTree

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
    times = []
    for _ in range(repeats):
        tree = base.copy()
        t = time.perf_counter()
        props = small.propose(tree, frontier, width, width, 2)
        graft.graft(tree, props, SMALL, 4, True, 511)
        times.append(1000 * (time.perf_counter() - t))
    return sorted(times)[len(times) // 2]


def measure(pair, progress: bool = True, repeats: int = 5) -> DeviceProfile:
    """Measure this device's profile for `pair` (target curve, mid curve if it has a mid, n-gram step)."""
    import torch
    from tqdm.auto import tqdm

    mid = getattr(pair, "mid", None)
    jobs = [("target", n) for n in TARGET_SIZES] + ([("mid", n) for n in MID_SIZES] if mid is not None else [])
    curves: dict[str, dict[int, float]] = {"target": {}, "mid": {}}
    bar = tqdm(jobs, desc="measuring the device profile", disable=not progress, leave=False)
    with torch.inference_mode():
        for kind, n in bar:
            curves[kind][n] = forward_ms(pair.target if kind == "target" else mid, n, CONTEXT, repeats)
    for kind in curves:  # a forward of more tokens never costs less: a spike is noise (suffix minimum)
        sizes = sorted(curves[kind])
        for a, b in zip(sizes[-2::-1], sizes[::-1]):
            curves[kind][a] = min(curves[kind][a], curves[kind][b])
    key = profile_key(pair)
    small = small_step_ms(getattr(pair, "tokenizer", None))
    words = f"{key['hardware']}, {key['device']}, {key['dtype']}, {key['threads']} threads, forward path {key['forward_path']}"
    return DeviceProfile(f"{getattr(pair, 'name', 'pair')}@{key['device']}-{_digest(key)[:6]}", curves["target"],
                         curves["mid"], small, words, f"measured {time.strftime('%Y-%m-%d %H:%M')}", CONTEXT, key)


def for_pair(pair, refresh: bool = False, progress: bool = True) -> DeviceProfile:
    """This device's profile for `pair`: from the disk cache, else measured once and cached."""
    key = profile_key(pair)
    digest = _digest(key)
    if not refresh and digest in _MEMO:
        return _MEMO[digest]
    path = cache_dir() / f"{digest}.json"
    prof = None
    if not refresh and path.is_file():
        try:
            prof = DeviceProfile.from_dict(json.loads(path.read_text()), str(path))
        except (TreeGraftError, ValueError, OSError):
            prof = None  # a broken cache entry is measured again
    if prof is None:
        prof = measure(pair, progress=progress)
        prof.save(path)
    _MEMO[digest] = prof
    return prof


# ---------------------------------------------------------------------------- the command's fast path
def spec_key(name=None, target=None, mid=None, device="auto", dtype="auto") -> str:
    """A pair as the command line names it, plus what decides the machine, computed without
    importing torch: the index key of `lookup` / `remember`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        tv = version("torch")
    except PackageNotFoundError:
        tv = ""
    cpu = ""
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), "")
    except OSError:
        pass
    return json.dumps({"pair": name, "target": target, "mid": mid, "device": device, "dtype": dtype, "torch": tv,
                       "omp": os.environ.get("OMP_NUM_THREADS"), "cpus": os.cpu_count(), "cpu": cpu,
                       "gpu": Path("/dev/nvidia0").exists()}, sort_keys=True)


def _index() -> dict:
    try:
        return json.loads((cache_dir() / "index.json").read_text())
    except (OSError, ValueError):
        return {}


def lookup(spec: str) -> DeviceProfile | None:
    """The cached profile remembered for `spec`, if its model folders are unchanged."""
    entry = _index().get(spec)
    if not entry or any(_folder(p) != fp for p, fp in entry["folders"].items()):
        return None
    f = cache_dir() / f"{entry['digest']}.json"
    try:
        return DeviceProfile.from_dict(json.loads(f.read_text()), str(f))
    except (TreeGraftError, ValueError, OSError):
        return None


def remember(spec: str, pair) -> None:
    """Index `pair`'s cached profile under `spec` (so that `lookup` needs no model)."""
    key = profile_key(pair)
    folders = {m["path"]: m for m in (key["target"], key["mid"]) if m and "path" in m}
    idx = _index()
    idx[spec] = {"digest": _digest(key), "folders": folders}
    cache_dir().mkdir(parents=True, exist_ok=True)
    tmp = cache_dir() / "index.json.tmp"
    tmp.write_text(json.dumps(idx, indent=1) + "\n")
    tmp.rename(cache_dir() / "index.json")


def cached_path(pair) -> Path:
    return cache_dir() / f"{_digest(profile_key(pair))}.json"


def resolve(clock, pair) -> DeviceProfile:
    """The profile a decoder decides on: "wall" -> this device's (measured once, cached); a name
    or a path -> that profile; a DeviceProfile -> itself."""
    if isinstance(clock, DeviceProfile):
        return clock
    if clock == "wall":
        return for_pair(pair)
    return load(clock)


def scheduler_costs(profile: DeviceProfile, config, budget: int | None = None) -> tuple[float, float]:
    """The scheduler's T_tgt / T_mid inputs: one verification of the budget's tree (B_ver + 1 tokens;
    63 when the budget is "auto") and one mid call on the nodes a step grows (W x k per parent,
    W with the global rule). Constants of (profile, config): decisions never read live time."""
    if budget is None:
        budget = config.budget if isinstance(config.budget, int) else 63
    grow = config.width * (config.children if config.expansion == "per_parent" else 1)
    t_mid = profile.mid_ms(min(grow, config.node_cap)) if profile.mid else math.nan
    return profile.target_ms(budget + 1), t_mid
