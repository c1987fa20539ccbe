"""The offline stage's units on Ray: a prompt's replays, a prompt's decode at a ratio, a fold, a shard.

    results = engine.run(units, Engine(workers=2), journal=journal, desc="replay")

A unit is `Unit(key, fn, args)`: `fn(pair, *args)` where the unit needs the model pair (its `loader` is
given), else `fn(*args)`, returning what the journal stores for it (JSON-able records). Each runs as a
Ray task. With no address Ray starts on this machine (`ray.init` with `workers` x `threads` CPUs) and
stops when the run ends; `address` (or the RAY_ADDRESS environment variable) joins a running cluster,
whose CPUs and GPUs then bound how many units run at once. A worker loads the pair once through its
`PairLoader` (the pair's name, device and dtype: `load_pair` runs on that worker, so every node needs the
pair's weights at the same path, or its hub id reachable) and keeps it for its later units.

Nothing is lost: each finished unit reaches this process, which stores it in the run's journal
(`resume.Journal`) before it waits for the next, so `--resume` continues from what was stored; a worker
that dies mid-unit is replaced by Ray and the unit runs again (`RETRIES`), from its own inputs only, so
the gathered results equal an uninterrupted run's. Results are returned in the units' order, whatever
order they finished in. Ctrl-C cancels the tasks still queued and stops a Ray this run started.

`Engine(workers=0)` runs every unit here, in order, without Ray (`--no-ray`): the one-process run.
On a CPU each unit gets `threads` torch threads; on CUDA one GPU (`num_gpus=1`; not tried here: no GPU
on this project's machines).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from treegraft_lab.errors import TreeGraftError

RETRIES = 3  # times Ray runs a unit again after its worker died


@dataclass(frozen=True)
class PairLoader:
    """How a worker loads the model pair: `load_pair(name, device=..., dtype=...)`, once per worker process.
    `build`: another module-level function of no arguments that returns a pair (a test's tiny pair)."""

    name: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    build: Callable[[], Any] | None = None

    def __call__(self) -> Any:
        key = (self.name, self.device, self.dtype, self.build)
        if key not in _LOADED:
            if self.build is not None:
                _LOADED[key] = self.build()
            else:
                from treegraft_lab.models import load_pair

                _LOADED[key] = load_pair(self.name, device=self.device, dtype=self.dtype)
        return _LOADED[key]

    @property
    def on_cuda(self) -> bool:
        return str(self.device).startswith("cuda")

    def planned_dtype(self) -> Any:
        """The dtype the workers will load the pair in, without loading it here (a `build` pair: loaded)."""
        if self.build is not None:
            return self().dtype
        from treegraft_lab.models import planned_dtype

        return planned_dtype(self.name, self.device, self.dtype)


_LOADED: dict = {}  # this process's loaded pairs, by loader


@dataclass(frozen=True)
class Unit:
    """One piece of work: its journal key, the function and its arguments (`loader`: give it the pair)."""

    key: str
    fn: Callable[..., Any]
    args: tuple = ()
    loader: Callable[[], Any] | None = None


def loader_of(pair: Any) -> Callable[[], Any]:
    """What a unit loads its pair with: a `PairLoader` (or another function returning a pair) as it is; a
    loaded pair, wrapped (run here, or shipped whole to the Ray workers: fine for a small test pair)."""
    return pair if callable(pair) and not hasattr(pair, "tokenizer") else _Loaded(pair)


@dataclass(frozen=True)
class _Loaded:
    pair: Any

    def __call__(self) -> Any:
        return self.pair


@dataclass(frozen=True)
class Engine:
    """Where units run: `workers` at once (0: here, in order, without Ray), `threads` torch threads each on
    a CPU, on the Ray at `address` (None: RAY_ADDRESS, else a local Ray started for the run)."""

    workers: int = 1
    threads: int = 1
    address: str | None = None

    def __post_init__(self) -> None:
        if self.workers < 0 or self.threads < 1:
            raise TreeGraftError(f"--workers {self.workers} / --threads {self.threads}: give workers >= 0 "
                                 "(0: no Ray, in this process) and threads >= 1")

    @property
    def cluster(self) -> str | None:
        return self.address or os.environ.get("RAY_ADDRESS") or None

    def words(self) -> str:
        """Where the units run, in words (for a run's card)."""
        if not self.workers:
            return "in one process, without Ray"
        where = f"the Ray cluster at {self.cluster}" if self.cluster else "a local Ray on this machine"
        return (f"{self.workers} Ray worker{'s' * (self.workers > 1)} of {self.threads} torch "
                f"thread{'s' * (self.threads > 1)} each, on {where}")


LOCAL = Engine(workers=0)  # every unit here, in order: what a call from Python does unless given an engine


def call(unit: Unit) -> Any:
    """A unit's function on its arguments (the pair first, loaded once per process, where it takes one)."""
    return unit.fn(unit.loader(), *unit.args) if unit.loader is not None else unit.fn(*unit.args)


def _task(unit: Unit, threads: int) -> tuple[Any, float]:
    """A unit on a Ray worker, with its torch threads set: its result and the seconds it took there."""
    import time

    import torch

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    return call(unit), time.perf_counter() - t0


def run(units: Sequence[Unit], engine: Engine = LOCAL, journal: Any = None, desc: str = "units",
        progress: bool = True, on_done: Callable[[Unit, Any], None] | None = None,
        seconds: dict[str, float] | None = None) -> list[Any]:
    """Every unit's result, in the units' order: those `journal` holds read from it, the others run on
    `engine`, each stored in `journal` (`journal.add(key, result)`) and passed to `on_done` as it finishes.
    `seconds`: filled with each unit run's own time (key -> s, where it ran: not the wait for a worker)."""
    import time

    from tqdm.auto import tqdm

    from treegraft_lab.resume import Journal

    journal = journal or Journal()
    done = {u.key: journal.get(u.key) for u in units if journal.get(u.key) is not None}
    todo = [u for u in units if u.key not in done]
    workers = engine.workers
    label = f"{desc} ({workers} Ray worker{'s' * (workers != 1)})" if workers else desc
    bar = tqdm(total=len(units), initial=len(done), desc=label, unit="unit", disable=not progress)

    times = seconds if seconds is not None else {}

    def store(u: Unit, result: Any, took: float) -> None:
        times[u.key] = took
        journal.add(u.key, result)
        done[u.key] = result
        if on_done is not None:
            on_done(u, result)
        bar.update(1)

    try:
        if workers == 0:
            for u in todo:
                t0 = time.perf_counter()
                result = call(u)
                store(u, result, time.perf_counter() - t0)
        elif todo:
            _on_ray(todo, engine, store)
    finally:
        bar.close()
    return [done[u.key] for u in units]


def _on_ray(todo: list[Unit], engine: Engine, store: Callable[[Unit, Any, float], None]) -> None:
    """`todo` as Ray tasks, at most `engine.workers` at a time; each result stored as it arrives."""
    ray, started = _connect(engine)
    queue, running = list(todo), {}
    try:
        gpus = 1 if any(getattr(u.loader, "on_cuda", False) for u in todo) else 0  # untried: no GPU here
        remote = ray.remote(_task).options(num_cpus=engine.threads, num_gpus=gpus, max_retries=RETRIES,
                                           retry_exceptions=False)
        while queue or running:
            while queue and len(running) < engine.workers:
                u = queue.pop(0)
                running[remote.remote(u, engine.threads)] = u
            ready, _ = ray.wait(list(running), num_returns=1)
            for ref in ready:
                u = running.pop(ref)
                try:
                    result, took = ray.get(ref)
                except ray.exceptions.RayTaskError as e:  # the unit's own error, raised here as it was there
                    raise e.as_instanceof_cause() from None
                store(u, result, took)
    except KeyboardInterrupt:
        for ref in running:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()


def _connect(engine: Engine):
    """The `ray` module, connected to `engine.cluster` or to a local Ray started here; and whether it was
    started here (then the run stops it)."""
    import ray

    if ray.is_initialized():
        return ray, False
    if engine.cluster:
        ray.init(address=engine.cluster, log_to_driver=False)
        return ray, False
    ray.init(num_cpus=engine.workers * engine.threads, include_dashboard=False, log_to_driver=False)
    return ray, True


def timing_words(seconds: dict[str, float], wall: float, engine: Engine) -> str:
    """One line: how many units ran where, the wall time, and each unit's own time (median, min-max)."""
    import statistics

    if not seconds:
        return f"no unit to run ({engine.words()})"
    t = sorted(seconds.values())
    return (f"{len(t)} units on {engine.words()} in {wall:.1f} s; a unit's own time: median {statistics.median(t):.2f} s "
            f"({t[0]:.2f}-{t[-1]:.2f})")


def add_arguments(parser) -> None:
    """--workers, --address and --no-ray, for the commands whose units run on Ray."""
    parser.add_argument("--workers", type=int, default=None,
                        help="units run at once on Ray (default: this machine's CPU count, or the cluster's)")
    parser.add_argument("--address", default=None,
                        help="join the Ray cluster at this address (default: RAY_ADDRESS, else a local Ray for the run)")
    parser.add_argument("--no-ray", action="store_true", help="run every unit here, one after another, without Ray")


def from_args(args, threads: int = 1) -> Engine:
    """The Engine `add_arguments`' flags ask for; `threads` torch threads per unit."""
    if args.no_ray:
        return Engine(workers=0, threads=threads)
    workers = args.workers if args.workers is not None else max(1, (os.cpu_count() or 1) // threads)
    if workers < 1:
        raise TreeGraftError(f"--workers {workers}: give a number >= 1, or --no-ray to run in this process")
    return Engine(workers=workers, threads=threads, address=args.address)
