"""The dtype and pruning rule to run with when they are not given: ones for which the pair has a
trained adaptive scheduler, so that adaptive runs on any machine without the user knowing which
settings it was trained for. Shared by `bench`, `demo`, the workbench notebooks and the schedule
playground. A setting given explicitly is kept; where no scheduler fits, the note says why and
the caller runs without adaptive."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PRUNES = ("topk", "value")


@dataclass(frozen=True)
class SchedulerChoice:
    """The dtype ("auto" or a name) and pruning rule to use, the scheduler folder they have (None:
    none), and one line saying what was chosen and why, or why adaptive is off."""

    dtype: str
    prune: str
    folder: Path | None
    note: str

    @property
    def offered(self) -> bool:
        return self.folder is not None


def _dtypes(device: str, clock: str) -> list[str]:
    """The dtypes tried when none is given: "auto", then float32 where auto is something else on
    this device (a measured profile's class names its dtype; a named profile's does not)."""
    import torch

    from treegraft_lab.models import resolve_device, resolve_dtype

    if clock != "wall" or resolve_dtype("auto", resolve_device(device)) == torch.float32:
        return ["auto"]
    return ["auto", "float32"]


def dtype_name(dtype: str, device: str) -> str:
    from treegraft_lab.models import resolve_device, resolve_dtype

    return str(resolve_dtype(dtype, resolve_device(device))).removeprefix("torch.")


def choose_settings(pair_name: str | None, *, device: str = "auto", dtype: str | None = None,
                    prune: str | None = None, clock: str = "wall", growth: str = "full", small: str = "ngram",
                    prefer_prune: str = "topk") -> SchedulerChoice:
    """The first (dtype, prune) with a trained scheduler for `pair_name` under `clock`, `growth` and
    `small`: dtype "auto" before float32, `prefer_prune` before the other rule; `dtype` or `prune`
    given (not None) is the only one tried. None found: the given settings or the first tried,
    and a note that says adaptive is off and why. A pair without a registered name (None) keeps
    the given settings: its scheduler is looked up when it loads."""
    from treegraft_lab.schedule.adaptive import artifact_dir, default_folder

    dtypes = [dtype] if dtype else _dtypes(device, clock)
    prunes = [prune] if prune else [prefer_prune, *[p for p in PRUNES if p != prefer_prune]]
    if not pair_name:
        return SchedulerChoice(dtypes[0], prunes[0], None, "adaptive: the scheduler of a pair given by folder is "
                                                           "looked up when it loads")
    tried = []
    for d in dtypes:
        for p in prunes:
            folder = default_folder(pair_name, clock, p, growth, device, d, small)
            if (folder / "scheduler.json").is_file():
                return SchedulerChoice(d, p, folder, _chosen(d, p, folder, dtypes, prunes, device, clock))
            tried.append(folder.name)
    return SchedulerChoice(dtypes[0], prunes[0], None,
                           f"adaptive off: no scheduler for pair {pair_name} as {' or '.join(tried)} (looked in "
                           f"{artifact_dir(pair_name)}), so it runs without adaptive; train one with "
                           "`treegraft-lab collect` and `treegraft-lab train-scheduler`")


def _chosen(dtype: str, prune: str, folder: Path, dtypes: list[str], prunes: list[str], device: str,
            clock: str) -> str:
    """One line: the settings chosen for the scheduler, and the defaults they replace."""
    why = []
    if dtype != dtypes[0]:
        why.append(f"not {dtype_name(dtypes[0], device)}, which has none")
    if prune != prunes[0]:
        why.append(f"not prune={prunes[0]}, which has none")
    dt = dtype_name(dtype, device) if clock == "wall" else "any dtype"
    return (f"{dt}, prune={prune}: the settings the adaptive scheduler {folder.name} was trained for"
            + (f" ({'; '.join(why)})" if why else ""))


def resolve_auto(config, pair, profile):
    """`config` with schedule="auto" and prune="auto" made concrete for `pair` and `profile`, and one
    line saying what was chosen and why ("" when nothing was "auto"). Pruning: the profile's
    recommendation (`prune_for`). Schedule: "adaptive" where the pair has a mid drafter and a
    scheduler trained for these settings loads (the other pruning rule is tried too when pruning was
    "auto"), else "small" (all-small: no mid call), with the reason."""
    from dataclasses import replace

    from treegraft_lab.costs import prune_for
    from treegraft_lab.errors import TreeGraftError
    from treegraft_lab.schedule.adaptive import AdaptivePolicy, artifact_folder, profile_class

    if config.prune != "auto" and config.schedule != "auto":
        return config, ""
    rec, why = prune_for(profile)
    prunes = [config.prune] if config.prune != "auto" else [rec, *[p for p in PRUNES if p != rec]]
    said = [] if config.prune != "auto" else [f"prune={rec} ({why})"]
    if config.schedule != "auto":
        return replace(config, prune=prunes[0]), "DecodeConfig " + said[0]
    reason = "the pair has no mid drafter"
    if getattr(pair, "mid", None) is not None:
        for p in prunes:
            cfg = replace(config, schedule="adaptive", prune=p)
            folder = artifact_folder(pair, cfg, profile)
            try:
                AdaptivePolicy.for_pair(pair, cfg, profile)
            except TreeGraftError as e:
                reason = (f"no scheduler trained for {folder.name if folder else 'a pair without a name'}"
                          if folder is None or not folder.is_dir() else str(e).split(": pick")[0].split(": use")[0])
                continue
            if p != prunes[0]:
                said = [f"prune={p} (the scheduler's; {why})"]
            return cfg, (f"DecodeConfig on {profile_class(profile)}: schedule=adaptive (scheduler {folder.name}), "
                         + ", ".join(said) + "; name a schedule (e.g. '10101') to fix it")
    cfg = replace(config, schedule="small", prune=prunes[0])
    return cfg, (f"DecodeConfig on {profile_class(profile)}: schedule=small, no mid call ({reason}), "
                 + ", ".join(said) + "; name a schedule (e.g. '10101') to fix it")


def scheduler_kind(folder: Path) -> str:
    """What a scheduler artifact is, in words, from its scheduler.json: the map scheduler (trained over
    several mid drafters and a family of device profiles), the family scheduler (trained over a family
    of device profiles, the cost ratio one of its inputs) or the single-profile scheduler of one profile
    class (what `schedule="adaptive"` loads where one is trained, else the family one)."""
    from treegraft_lab.schedule import artifact as art_io

    meta = art_io.read_meta(folder)
    training = meta.get("training") or {}
    if meta.get("profile_class") != "family":
        return f"single-profile scheduler for {meta.get('profile_class')}"
    n = len(training.get("family") or [])
    over = f"{n} device profiles" if n else "a family of device profiles"
    if art_io.AGREEMENT in meta.get("inputs", []):
        mids = training.get("mids") or {}
        drafters = f"{len(mids)} mid drafters" if mids else "several mid drafters"
        return (f"map scheduler (trained over {drafters} and {over}; the cost ratio T_mid / T_tgt and the mid "
                "drafter's agreement are inputs)")
    return f"family scheduler (trained over {over}; the cost ratio T_mid / T_tgt is an input)"


def treegraft_adaptive(pair_name: str, clock: str, config, device: str = "auto", dtype: str = "auto") -> Path:
    """The scheduler folder that `DecodeConfig(schedule="adaptive")` loads for `pair_name` on the profile
    `clock` names, with `config`'s pruning, tree growth and small drafter (`adaptive.default_folder`; it
    may hold no artifact: `adaptive_words` says so). TreeGraft adaptive is the one artifact per (pair,
    profile class, pruning, growth, small drafter), or where none is trained for that profile class, the
    pair's family scheduler for those settings; a map scheduler runs only when named by `scheduler_path`."""
    from treegraft_lab.schedule.adaptive import default_folder

    return default_folder(pair_name, clock, config.prune, config.growth, device, dtype, config.small)


def adaptive_words(pair_name: str, profile_class: str, config, folder: Path | None) -> str:
    """One sentence: which scheduler TreeGraft adaptive is for `pair_name` on `profile_class` under
    `config`'s pruning, growth and small drafter (`folder`: `treegraft_adaptive`'s answer, or the folder a
    decoder resolved), and what kind it is (`scheduler_kind`); or that none is trained there."""
    settings = (f"{pair_name} on {profile_class} (prune={config.prune}, growth {config.growth}, small drafter "
                f"{config.small})")
    if folder is None or not (folder / "scheduler.json").is_file():
        return (f"TreeGraft adaptive for {settings}: no scheduler is trained"
                + (f" ({folder.name} holds none)" if folder is not None else "")
                + ", so schedule='adaptive' is refused there and schedule='auto' runs all-small")
    return (f"TreeGraft adaptive for {settings} is {folder.name}, the {scheduler_kind(folder)}: the scheduler "
            "DecodeConfig(schedule='adaptive') loads for these settings")
