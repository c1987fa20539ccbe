"""Long runs that lose nothing: every finished prompt appended to a journal, a run continued with --resume.

`bench` (and `bench --answers`), `regime --collect / --decode` and `collect` keep a journal folder
beside their output while they run (`Journal`): run.json (the settings the run started with, its
command, its sessions), records.jsonl (one JSON line per finished unit, a prompt or a prompt at one
ratio: its key and its records, flushed and synced before the next unit starts) and state-<n>.pt
(what the methods carry from one prompt to the next, Token Recycling's matrix, as unit n left it).
A unit's line is its commit: a unit cut short by Ctrl-C or a kill leaves no line (a torn last line
is dropped on reading) and runs again on --resume, from the state the last stored unit left, so a
resumed run computes what an uninterrupted one does. The final files are written from every unit's
records, then the journal folder is removed: a complete output folder looks as it always did.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from treegraft_lab.errors import TreeGraftError

RUN, RECORDS = "run.json", "records.jsonl"


def _plain(x: Any) -> Any:
    """JSON for what json cannot write: numpy scalars as Python numbers, anything else as text."""
    return x.item() if hasattr(x, "item") else str(x)


def plain(x: Any) -> Any:
    """`x` as it reads back from JSON (tuples as lists, paths as text): how settings are compared."""
    return json.loads(json.dumps(x, default=_plain))


def digest(x: Any) -> str:
    """A short digest of a JSON-able value (a prompt list) or of a folder's files (a scheduler artifact)."""
    path = Path(x) if isinstance(x, (str, Path)) else None
    if path is not None and path.is_dir():
        x = {p.name: hashlib.blake2b(p.read_bytes(), digest_size=8).hexdigest() for p in sorted(path.iterdir()) if p.is_file()}
    return hashlib.blake2b(json.dumps(x, sort_keys=True, default=_plain).encode(), digest_size=8).hexdigest()


def flags(args, skip: tuple[str, ...] = ()) -> dict:
    """The command's flags as settings ({"--max-new-tokens": 8, ...}), but `skip` (dests), --resume and
    the private ones: what a resumed run must share with the run it continues."""
    return plain({f"--{k.replace('_', '-')}": v for k, v in sorted(vars(args).items())
                  if not k.startswith("_") and k not in ("resume", *skip)})


def command(args, name: str, out_flag: str | None = None, out: Path | str | None = None) -> str:
    """The command line that ran (`cli.main` keeps it on `args`), without --resume and with `out_flag out`
    added where the folder was left to its default: the command a --resume repeats."""
    argv = getattr(args, "_argv", None) or (sys.argv[1:] if sys.argv[1:2] == [name] else [name, "..."])
    argv = [a for a in argv if a != "--resume"]
    if out_flag and out is not None and not any(a == out_flag or a.startswith(f"{out_flag}=") for a in argv):
        argv += [out_flag, str(out)]
    return "treegraft-lab " + shlex.join(argv)


def _read(path: Path) -> dict[str, Any]:
    """key -> records of every whole line; a torn last line (a write cut short) is dropped."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    out = {}
    for n, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines):
                break
            raise TreeGraftError(f"{path}, line {n}: not JSON; the journal is damaged: run again without --resume") from None
        out[row["key"]] = row["records"]
    return out


class Journal:
    """A run's journal in `folder` (`Journal.open`); `Journal()` keeps nothing (a run called from Python).
    Nothing is written before the first unit is stored: a run that fails to load its models leaves no folder."""

    def __init__(self, folder: Path | None = None, command: str = "", name: str = "", out_flag: str = "") -> None:
        self.folder, self.name, self.out_flag = folder, name, out_flag
        self.meta: dict = {"command": command, "settings": {}, "sessions": [], "once": {}}
        self.done: dict[str, Any] = {}  # key -> records, in the order they were stored
        self.started = False  # whether `folder` holds this run's journal (written at its first unit)

    @property
    def resume_command(self) -> str:
        """The command that resumes the run."""
        return f"{self.meta['command']} --resume"

    @classmethod
    def open(cls, folder: Path | str, settings: dict, command: str, resume: bool, name: str, out_flag: str) -> Journal:
        """The journal of a run writing into `folder`'s parent: a fresh one, or with `resume` the stored
        one, whose settings must equal `settings`. Units stored and no `resume`: refused in one line."""
        j = cls(Path(folder), command, name, out_flag)
        stored = (j.folder / RUN).is_file()
        done = _read(j.folder / RECORDS) if stored else {}
        if done and not resume:
            was = json.loads((j.folder / RUN).read_text())["command"]
            raise TreeGraftError(f"{j.folder.parent} holds an interrupted {name} run ({len(done)} stored): continue it "
                                 f"with `{was} --resume`, or give another {out_flag}")
        if resume and stored:
            j.meta, j.done, j.started = json.loads((j.folder / RUN).read_text()), done, True
            lines = [json.dumps({"key": k, "records": r}, default=_plain) + "\n" for k, r in done.items()]
            _atomic(j.folder / RECORDS, "".join(lines))  # a torn last line is gone before anything is appended
        j.meta["sessions"].append({"started": time.strftime("%Y-%m-%d %H:%M:%S"), "stored": len(j.done)})
        j.check(settings)
        return j

    def check(self, settings: dict) -> None:
        """Refuse, in one line naming the flags, settings that differ from the stored run's; store new ones."""
        new, old = plain(settings), self.meta["settings"]
        diff = [f"{k} {old[k]!r} there, {v!r} here" for k, v in new.items() if k in old and old[k] != v]
        if diff:
            raise TreeGraftError(f"--resume: {self.folder.parent} holds a {self.name} run with other settings ({'; '.join(diff)}): "
                                 f"resume it with its own flags ({self.resume_command}) or give another {self.out_flag}")
        old.update(new)
        self._save()

    def get(self, key: str) -> Any:
        """A stored unit's records, None if it was not stored."""
        return self.done.get(key)

    def count(self, prefix: str = "") -> int:
        return sum(k.startswith(prefix) for k in self.done)

    def add(self, key: str, records: Any, state: Any = None) -> None:
        """Store a finished unit (its state first, then its line: the line commits it)."""
        if self.folder is None:
            return
        import torch

        if not self.started:  # the first unit: a stale journal goes, this run's is written (no folder before)
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder.mkdir(parents=True)
            self.started = True
            self._save()
        n = len(self.done)
        if state is not None:
            tmp = self.folder / f"state-{n}.tmp"
            torch.save(state, tmp)
            tmp.rename(self.folder / f"state-{n}.pt")
        with open(self.folder / RECORDS, "a", encoding="utf-8") as f:
            f.write(json.dumps({"key": key, "records": records}, default=_plain) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.done[key] = records
        for p in self.folder.glob("state-*"):
            if p.name != f"state-{n}.pt":
                p.unlink()

    def state(self) -> Any:
        """The state the last stored unit left (None: none stored, or it carried none)."""
        path = self.folder / f"state-{len(self.done) - 1}.pt" if self.folder is not None and self.done else None
        if path is None or not path.is_file():
            return None
        import torch

        return torch.load(path, weights_only=True)

    def once(self, key: str, make: Callable[[], Any], dump: Callable = lambda x: x, load: Callable = lambda x: x) -> Any:
        """`make()` in the run's first session, stored (as `dump` writes it); in a resumed one what it
        gave then (`load` of it): a resumed run decides on the profile and start time the run began with."""
        if self.folder is not None and key in self.meta["once"]:
            return load(self.meta["once"][key])
        value = make()
        if self.folder is not None:
            self.meta["once"][key] = plain(dump(value))
            self._save()
        return value

    def resumed(self) -> list[dict]:
        """The sessions after the first: when each started and how many units were stored then."""
        return self.meta["sessions"][1:]

    def interrupted(self, name: str, stored: str) -> str:
        """The one line a Ctrl-C prints: what is stored, where, and the command that resumes it."""
        return f"{name}: interrupted; {stored} stored in {self.folder.parent}; resume with: {self.resume_command}"

    def close(self) -> None:
        """The run is complete and its final files written: the journal goes."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _save(self) -> None:
        if self.folder is not None and self.started:
            _atomic(self.folder / RUN, json.dumps(self.meta, indent=1, default=_plain) + "\n")


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.rename(path)
