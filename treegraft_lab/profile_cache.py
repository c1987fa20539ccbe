"""Where measured device profiles are cached, and the index that finds one without a model.

Imports neither torch nor a model, so that `treegraft-lab profile` answers from its cache at
once: `spec_key` names a pair as the command line gives it, `lookup` reads the profile remembered
for it. Measuring and the cache entries themselves: `treegraft_lab.measure`.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from treegraft_lab.costs import DeviceProfile
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.paths import cache_root


def cache_dir() -> Path:
    """Where measured profiles are cached: $TREEGRAFT_PROFILE_CACHE, else `paths.cache_root()`/profiles."""
    env = os.environ.get("TREEGRAFT_PROFILE_CACHE")
    return Path(env) if env else cache_root() / "profiles"


def folder_fingerprint(path: str) -> dict | None:
    """A model folder's fingerprint: its path and the names, sizes and modification times of its
    config and weights (weights written again, say by a new distillation, keep their size)."""
    root = Path(path) if path else None
    if root is None or not root.is_dir():
        return None
    files = sorted([f.name, st.st_size, st.st_mtime_ns] for f in root.iterdir()
                   if f.suffix == ".safetensors" or f.name == "config.json" for st in [f.stat()])
    return {"path": str(root.resolve()), "files": files}


def digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def spec_key(name=None, target=None, mid=None, device="auto", dtype="auto") -> str:
    """A pair as the command line names it, plus what decides the machine, computed without
    importing torch: the index key of `lookup` / `remember`."""
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
    if not entry or any(folder_fingerprint(p) != fp for p, fp in entry["folders"].items()):
        return None
    f = cache_dir() / f"{entry['digest']}.json"
    try:
        return DeviceProfile.from_dict(json.loads(f.read_text()), str(f))
    except (TreeGraftError, ValueError, OSError):
        return None


def remember(spec: str, key: dict) -> None:
    """Index the cached profile measured for `key` (`measure.profile_key`) under `spec`, so that
    `lookup` needs no model."""
    folders = {m["path"]: m for m in (key["target"], key["mid"]) if m and "path" in m}
    idx = _index()
    idx[spec] = {"digest": digest(key), "folders": folders}
    cache_dir().mkdir(parents=True, exist_ok=True)
    tmp = cache_dir() / "index.json.tmp"
    tmp.write_text(json.dumps(idx, indent=1) + "\n")
    tmp.rename(cache_dir() / "index.json")
