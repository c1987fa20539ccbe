"""One line that names what a view shows: the model pair, the prompt, the settings and the device profile.

Every view of a run (the step-through viewer, the growth animation, the playground, the scheduler's
boundary) carries this line, so a screenshot says which pair, prompt, settings and profile made it:
"pair <pair> · prompt “A hash map is…” (197 characters) · schedule 10101, budget 16, top-k
pruning · profile Intel Xeon, float32, 2 threads · measured 2026-12-01 10:00".
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

PRUNE_WORDS = {"topk": "top-k pruning", "value": "value pruning"}
PROMPT_CHARS = 40  # characters of the prompt quoted (the whole prompt is in the view's prompt box)


USER_TURN = re.compile(r"<\|(?:im_start|start_header_id)\|>\s*user\s*(?:<\|end_header_id\|>)?(.*?)(?:<\|(?:im_end|eot_id)\|>|$)",
                       re.S)  # the user's message inside a chat template (ChatML, Llama 3)


def prompt_words(prompt: str, chars: int = PROMPT_CHARS) -> str:
    """The prompt quoted on one line (the user's message of a chat-templated prompt), cut to
    `chars` characters, with the whole prompt's length."""
    turns = USER_TURN.findall(str(prompt))
    flat = " ".join((turns[-1] if turns else re.sub(r"<\|[^|]*\|>", " ", str(prompt))).split())
    quoted = flat if len(flat) <= chars else flat[: chars - 1].rstrip() + "…"
    return f"prompt “{quoted}” ({len(str(prompt))} characters)"


def settings_words(config: dict[str, Any]) -> str:
    """The decoding settings a view depends on: schedule, budget, pruning (and EG/ND when off)."""
    parts = [f"schedule {config['schedule']}"] if config.get("schedule") is not None else []
    if config.get("budget") is not None:
        parts.append(f"budget {config['budget']}")
    if config.get("prune"):
        parts.append(PRUNE_WORDS.get(config["prune"], f"{config['prune']} pruning"))
    parts += [f"w/o {k}" for k, f in (("EG", "expanded_graft"), ("ND", "non_destructive")) if config.get(f) is False]
    return ", ".join(parts)


def named(pair: str, profile: str, prompt: str | None = None, settings: str | None = None) -> str:
    """The view's line: "pair <name> · prompt “…” · <settings> · profile <words>" (prompt and settings optional)."""
    parts = [f"pair {pair or 'unnamed'}"] + ([prompt] if prompt else []) + ([settings] if settings else [])
    return " · ".join(parts + [f"profile {profile or 'unknown'}"])


@functools.lru_cache(maxsize=32)
def profile_words(name: str) -> str:
    """A recorded profile name (`rounds.modelled_on`) in words (device, dtype, date): a named
    profile from data/profiles, a measured one from the profile cache; else the name itself."""
    from treegraft_lab.costs import DeviceProfile, load, profile_name
    from treegraft_lab.profile_cache import cache_dir

    try:
        return profile_name(load(name))
    except Exception:  # noqa: BLE001 - not a named profile: look for a measured one of that name
        pass
    folder = cache_dir()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            doc = json.loads(path.read_text())
            if doc.get("name") == name:
                return profile_name(DeviceProfile.from_dict(doc, str(path)))
        except Exception:  # noqa: BLE001 - a broken cache entry is skipped
            continue
    return name


def run_caption(run, run_id: int = 0, prompt: bool = True) -> str:
    """The line naming the pair, prompt, settings and profile of recorded run `run_id`."""
    runs = run.runs[run.runs["run"] == run_id]
    if runs.empty:
        raise ValueError(f"the recorded run has no run {run_id}: pick one of {run.runs['run'].tolist()}")
    row = runs.iloc[0]
    cfg = json.loads(row["config"]) if isinstance(row.get("config"), str) else {}
    rounds = run.rounds[run.rounds["run"] == run_id]
    prof = str(rounds["modelled_on"].iloc[0]) if "modelled_on" in rounds and len(rounds) else str(cfg.get("clock", ""))
    words = str(row["profile"]) if "profile" in row and isinstance(row["profile"], str) and row["profile"] else None
    text = prompt_words(row["prompt_text"]) if prompt and "prompt_text" in row else None
    return named(str(row.get("pair", "") or ""), words or profile_words(prof), text, settings_words(cfg))
