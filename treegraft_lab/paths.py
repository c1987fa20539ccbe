"""Where the project's data lives (the repository's `data/` folder for an editable install)."""

from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_DIR / "data"
PROMPTS_DIR = DATA_DIR / "prompts"
MODELS_DIR = DATA_DIR / "models"
SCHEDULER_DIR = DATA_DIR / "scheduler"
TRAJECTORIES_DIR = DATA_DIR / "trajectories"
RUNS_DIR = DATA_DIR / "runs"
