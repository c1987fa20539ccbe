"""The workbench notebooks' sizing and caches: SMOKE sizing, the pair and clock they decode with, the
pair loaded once, and the runs they record, saved and loaded again (the sample, suite and tiny runs).

Every notebook starts with `from treegraft_lab import workbench as wb` and `S = wb.sizes()`:
with the environment variable `SMOKE=1` the sizes shrink so that a notebook runs in a minute or
two on a 2-core CPU (one or two prompts, a few dozen tokens, small budgets).
"""

from __future__ import annotations

import functools
import json
import os
import random
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treegraft_lab.config import GROWTH_FIELDS, DecodeConfig
from treegraft_lab.config import preset as make_preset
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.hooks import load_run, record
from treegraft_lab.paths import RUNS_DIR
from treegraft_lab.presets import DEFAULT_PAIR, SPEED_GROWTH, SPEED_SMALL
from treegraft_lab.prompts import load_prompts
from treegraft_lab.schedule.choice import choose_settings, dtype_name


def smoke() -> bool:
    """True when the environment variable `SMOKE` is set to something other than 0/empty."""
    return os.environ.get("SMOKE", "").strip().lower() not in ("", "0", "false", "no")


@dataclass(frozen=True)
class Sizes:
    """How much work a notebook does. `smoke` is True for the shrunken SMOKE=1 sizes."""

    smoke: bool
    prompts: int  # prompts in total (spread over categories where a notebook groups by category)
    per_category: int
    max_new_tokens: int
    budget: int


def sizes(smoke_mode: bool | None = None) -> Sizes:
    """The notebook sizes: tiny under SMOKE=1, the full ones otherwise."""
    s = smoke() if smoke_mode is None else smoke_mode
    if s:
        return Sizes(True, prompts=2, per_category=1, max_new_tokens=12, budget=16)
    return Sizes(False, prompts=12, per_category=2, max_new_tokens=96, budget=63)


PAIR_ENV, DEVICE_ENV, CLOCK_ENV = "TREEGRAFT_PAIR", "TREEGRAFT_DEVICE", "TREEGRAFT_CLOCK"


@dataclass(frozen=True)
class Params:
    """What every notebook decodes with: a pair (a registered name, or a folder holding `target/`
    and `mid/` model folders), a device and the clock its decisions read ("wall" or a profile)."""

    pair: str
    device: str
    clock: str

    @property
    def default(self) -> bool:
        return self.pair == DEFAULT_PAIR and self.clock == "wall"

    def pair_name(self) -> str:
        """The name runs and schedulers are filed under (a pair folder's own name)."""
        from treegraft_lab.models import PAIRS  # lazy: models loads torch and transformers

        return self.pair if self.pair in PAIRS else Path(self.pair).expanduser().name

    def scheduler_choice(self) -> Any:
        """The dtype and pruning the notebooks run with: ones this pair's adaptive scheduler was
        trained for on this device and clock where one is (`schedule.choice`), value pruning first, for
        the trees the notebooks grow (the speed preset's growth and small drafter)."""
        return choose_settings(self.pair_name(), device=self.device, clock=self.clock, growth=SPEED_GROWTH,
                               small=SPEED_SMALL, prefer_prune="value" if self.clock == "wall" else "topk")

    def scheduler_lines(self) -> list[str]:
        """Which adaptive scheduler the notebooks use for this pair and clock, or the commands that make one."""
        from treegraft_lab.models import PAIRS  # lazy: models loads torch and transformers

        name, choice = self.pair_name(), self.scheduler_choice()
        if choice.offered:
            return [f"adaptive scheduler for {name}: {choice.folder}", f"({choice.note})"]
        src = f"--pair {name}" if self.pair in PAIRS else (
            f"--target {self.pair}/target --mid {self.pair}/mid")
        prune = choice.prune
        return [choice.note.split(" (looked in")[0].replace("adaptive off: ", "") + ":",
                "the adaptive parts of 04, 05 and 06 have none to show. Make one with:",
                f"  treegraft-lab collect {src} --profile {self.clock} --prune {prune} --device {self.device}",
                f"  treegraft-lab collect {src} --merge",
                f"  treegraft-lab train-scheduler --pair {name} --profile {self.clock} --prune {prune}"]

    def __repr__(self) -> str:
        lines = [f"pair {self.pair}, device {self.device}, clock {self.clock}",
                 f"(set by {PAIR_ENV}, {DEVICE_ENV}, {CLOCK_ENV} or wb.params(...))"]
        try:
            lines += self.scheduler_lines()
        except Exception as e:  # a profile name that does not resolve, an unknown device
            lines.append(f"scheduler status unknown: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
        return "\n".join(lines)


_PARAMS: list[Params | None] = [None]


def params(pair: str | None = None, device: str | None = None, clock: str | None = None) -> Params:
    """Set the notebook's parameters: each argument, else its environment variable (`TREEGRAFT_PAIR`,
    `TREEGRAFT_DEVICE`, `TREEGRAFT_CLOCK`), else the offline pair on "auto" with the wall clock.
    `demo_pair`, `sample_run` and `suite_run` read them."""
    p = Params(pair or os.environ.get(PAIR_ENV) or DEFAULT_PAIR, device or os.environ.get(DEVICE_ENV) or "auto",
               clock or os.environ.get(CLOCK_ENV) or "wall")
    _PARAMS[0] = p
    return p


def current() -> Params:
    """The parameters `params` set (or, before any call, those of the environment)."""
    return _PARAMS[0] or params()


def demo_pair(device: str | None = None) -> Any:
    """The notebook's pair (`params`); for the offline pair before its drafter exists, a stand-in
    with the target as mid.

    The stand-in is only for development of views: its "mid drafter" IS the target, so every mid
    proposal is accepted and mid calls cost a full target forward. A note is printed when used.
    """
    p = current()
    return cached_pair(p.pair, device or p.device)


def pair_dtype(name: str, device: str) -> str:
    """The dtype the notebooks load `name` in: "auto", or the one its adaptive scheduler was trained
    for on this device where auto has none (printed, so the notebook says why)."""
    p = Params(name, device, current().clock)
    choice = p.scheduler_choice()
    if choice.dtype != "auto":  # only the dtype: each run names its own pruning in its caption
        trained = f"its adaptive scheduler {choice.folder.name}" if choice.folder else "its adaptive scheduler"
        print(f"note: the pair loads in {choice.dtype}, the dtype {trained} was trained for "
              f"({dtype_name('auto', device)}, this device's default, has none)")
    return choice.dtype


@functools.lru_cache(maxsize=2)
def cached_pair(name: str, device: str) -> Any:
    # lazy: transformers and models (torch) load with the pair, not with the notebook's sizes
    from transformers.utils import logging as hf_logging

    from treegraft_lab.models import PAIRS, load_pair

    hf_logging.disable_progress_bar()  # no "Loading weights" bar widget in notebook outputs
    dtype = pair_dtype(name, device)
    if name != DEFAULT_PAIR:
        if name in PAIRS:
            return load_pair(name, device=device, dtype=dtype)
        folder = Path(name).expanduser()
        if not ((folder / "target").is_dir() and (folder / "mid").is_dir()):
            raise TreeGraftError(f"{PAIR_ENV}={name!r} is neither a registered pair ({', '.join(PAIRS)}) nor a folder "
                                 "holding target/ and mid/ model folders")
        pair = load_pair(target=folder / "target", mid=folder / "mid", device=device, dtype=dtype)
        pair.name = folder.name
        return pair
    try:
        return load_pair(DEFAULT_PAIR, device=device, dtype=dtype)
    except TreeGraftError as e:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pair = load_pair(DEFAULT_PAIR, device=device, require_mid=False, dtype=dtype)
        print(f"note: using a stand-in pair (the target as its own mid drafter): {e}")
        return types.SimpleNamespace(
            name="smollm2-standin", tokenizer=pair.tokenizer, target=pair.target,
            mid=pair.target, device=pair.device, dtype=pair.dtype,
        )


def record_runs(pair: Any, prompts: list, config: Any, max_new_tokens: int,
                progress: Callable[[int], None] | None = None, profile: Any = None) -> Any:
    """Decode each prompt (a string or a suite row) under `config`; return one recorded Run.

    Suite rows keep their `category` and `question_id` in the runs table. The config's clock is
    resolved here, once (this device's profile is measured on first use), unless `profile` (a
    DeviceProfile, e.g. one scaled from the clock's) is given: the decoder prices with it. `progress(tokens)`:
    called after every round with the tokens the current prompt has emitted so far.
    """
    from treegraft_lab import measure  # lazy: measure and the decoder load torch
    from treegraft_lab.decoder import TreeGraftDecoder

    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:  # before the profile is measured
        raise TreeGraftError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    dec = TreeGraftDecoder(pair, config, profile=profile or measure.resolve(config.clock, pair))
    done = [0]

    def count(ev) -> None:
        done[0] = 0 if ev.name == "run.start" else done[0] + ev.data["info"].accepted + 1
        progress(min(done[0], max_new_tokens))

    hooks = [("run.start", count), ("round.accept", count)] if progress else []
    with record(dec) as rec, dec.hooks(hooks):
        for p in prompts:
            dec.generate(p["turns"][0] if isinstance(p, dict) else p, max_new_tokens=max_new_tokens)
    run = rec.to_run()
    run.runs["category"] = [p.get("category", "") if isinstance(p, dict) else "" for p in prompts]
    run.runs["question_id"] = [str(p.get("question_id", i)) if isinstance(p, dict) else str(i) for i, p in enumerate(prompts)]
    return run


def runs_dir() -> Path:
    """Where notebooks keep the runs they record: `$TREEGRAFT_RUNS_DIR`, else `data/runs/`."""
    env = os.environ.get("TREEGRAFT_RUNS_DIR")
    return Path(env) if env else RUNS_DIR


def cached_run(name: str, record: Callable[[], Any], config: Any = None) -> Any:
    """Load the run saved as `name` (suffixed `-smoke` under SMOKE=1), or call `record()` and save it.
    With `config` (the DecodeConfig `record` decodes with), a saved run that grew its trees otherwise
    (another growth or small drafter, e.g. recorded under older defaults) is recorded again.

    Set `RERECORD=1` to record afresh. Views need only the saved tables, never the model.
    """
    p = current()
    sub = "" if p.default else f"{p.pair_name()}@{Path(p.clock).stem}/"  # another pair or clock: its own folder
    path = runs_dir() / (sub + name + ("-smoke" if smoke() else ""))
    if (path / "meta.json").exists() and os.environ.get("RERECORD", "") in ("", "0"):
        run = load_run(path)
        if len(run.runs) and all(_same_trees(c, config) for c in run.runs["config"]):
            print(f"loaded the recorded run {path} (set RERECORD=1 to record it again)")
            return run
        print(f"{path} was recorded with other tree growth settings: recording it again")
    run = record()
    run.save(path)
    print(f"recorded and saved to {path}")
    return run


def _same_trees(recorded: str, config: Any = None) -> bool:
    """Whether a recorded run's config (JSON) names every growth field, and, given `config`, grows its
    trees as `config` does (the same growth fields and small drafter)."""
    rec = json.loads(recorded)
    if not all(f in rec for f in GROWTH_FIELDS):  # older runs predate the growth options
        return False
    return config is None or all(rec.get(f) == getattr(config, f) for f in (*GROWTH_FIELDS, "small"))


SAMPLE_PROMPT = "Explain what a hash map is, with a short example."


def sample_run() -> Any:
    """The shared sample run of the notebooks: one prompt, schedule 10101 (mid at steps 1, 3, 5), top-k
    pruning: fixed by name, so that every round shows grafting and its whole budget."""
    S = sizes()
    cfg = DecodeConfig(schedule="10101", prune="topk", budget=S.budget, clock=current().clock)
    return cached_run("sample", lambda: record_runs(demo_pair(), [SAMPLE_PROMPT], cfg, S.max_new_tokens), cfg)


SUITE_SMOKE_CATEGORIES = ("math", "code")  # short prompts: cheap prefill


def suite_prompts(limit: int | None = None) -> list[dict]:
    """Eval prompts of the treegraft suite: `per_category` of each category (SMOKE: math, then code)."""
    S = sizes()
    cats = list(SUITE_SMOKE_CATEGORIES) if S.smoke else None
    rows = load_prompts("treegraft-suite", split="eval", categories=cats, per_category=S.per_category)
    if cats:
        rows.sort(key=lambda r: cats.index(r["category"]))
    return rows[: limit or S.prompts]


def suite_run(schedule: str = "10101", limit: int | None = None, max_new_tokens: int | None = None,
              preset: str = "speed", profile: Any = None, **config: Any) -> Any:
    """The suite prompts decoded with `schedule` under `preset` ("speed", the defaults, or "release";
    `presets.PRESETS`), top-k pruning unless given, and any DecodeConfig overrides, recorded once.
    `profile`: a DeviceProfile to price with instead of the one the clock names (its name joins the
    run's); a folder among the overrides (`scheduler_path`) names the run by its last part."""
    S = sizes()
    cfg = make_preset(preset, schedule=schedule, **{"budget": S.budget, "clock": current().clock, "prune": "topk", **config})
    extra = "".join(f"-{k}={Path(str(v)).name if k == 'scheduler_path' else v}" for k, v in sorted(config.items()))
    extra += f"-at={profile.name}" if profile is not None else ""
    n = max_new_tokens or S.max_new_tokens
    name = f"suite-{schedule}" + ("" if preset == "speed" else f"-{preset}") + extra + (f"-n{limit}" if limit else "") \
        + (f"-t{n}" if max_new_tokens else "")
    return cached_run(name, lambda: record_runs(demo_pair(), suite_prompts(limit), cfg, n, profile=profile), cfg)


# ---------------------------------------------------------------------------- tiny runs


def tiny_run(rounds: int = 3, schedule: str = "10101", budget: int = 63, seed: int = 0, **config: Any) -> Any:
    """A recorded run of the tiny random models (`treegraft_lab.tiny`): the decoder's own rounds,
    decisions and trees in a second or two, for tests and for trying the views without the offline
    pair. The prompt is a repetitive random token sequence drawn from `seed` (so the n-gram
    drafter finds matches); the "full" preset (full growth, the n-gram drafter: WHERE and HOW drawn
    plainly) with `config` as DecodeConfig overrides (growth fields, small, non_destructive, ...).
    Priced on the a100-paper profile (nothing is measured); the first `rounds` rounds are kept."""
    from treegraft_lab.decoder import TreeGraftDecoder  # lazy: the decoder and tiny load torch
    from treegraft_lab.tiny import tiny_pair

    rng = random.Random(seed)
    motif = [rng.randrange(64) for _ in range(6)]
    prompt = motif * 3 + [rng.randrange(64) for _ in range(4)]
    cfg = make_preset("full", schedule=schedule, budget=budget, **{"clock": "a100-paper", **config})
    dec = TreeGraftDecoder(tiny_pair("llama", vocab=64, scale=4.0), cfg)
    with record(dec) as rec:
        dec.generate(prompt, max_new_tokens=rounds * (cfg.depth + 1))
    run = rec.to_run()
    for name in ("rounds", "steps", "nodes", "tree"):
        f = getattr(run, name)
        setattr(run, name, f[f["round"] < rounds].reset_index(drop=True))
    if len(run.rounds) < rounds:
        raise ValueError(f"the tiny run ended after {len(run.rounds)} rounds, before {rounds}")
    return run
