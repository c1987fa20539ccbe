"""`treegraft-lab collect`: scheduler trajectories (every schedule replayed from sampled round starts).

    treegraft-lab collect --split train --shard 0/4   # one job of an array
    treegraft-lab collect --merge                     # after all shards
    treegraft-lab collect --shards 4 --profile a100-paper   # all four shards on Ray (local, or --address), then merged
    treegraft-lab collect --profile a100-paper --out data/trajectories/<pair>-a100

Trees are pruned and priced with one device profile (treegraft_lab.costs): this device's
measured one by default, or `--profile NAME|FILE`; the artifact trained on them is for that
profile (see treegraft_lab.training.collect). Each prompt is stored in shard-i-of-n.partial/ as it
finishes (`treegraft_lab.resume`); an interrupted shard continues with `--resume` (the same flags).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from treegraft_lab import engine
from treegraft_lab.commands.common import add_prune_argument, check_pair, growth_from_args
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.paths import TRAJECTORIES_DIR
from treegraft_lab.presets import DEFAULT_PAIR


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pair", default=DEFAULT_PAIR, help="model pair (default: %(default)s)")
    parser.add_argument("--target", default=None, help="a target folder or name instead of --pair's")
    parser.add_argument("--mid", default=None, help="override the pair's mid drafter (folder or name)")
    parser.add_argument("--prompts", default="treegraft-suite", help="prompt suite or .jsonl file")
    parser.add_argument("--split", default="train",
                        help="train (default), eval or all; never validation, which no scheduler is trained on")
    parser.add_argument("--limit", type=int, default=None, help="first N prompts only")
    parser.add_argument("--per-category", type=int, default=None, help="first N prompts of each category")
    parser.add_argument("--states", type=int, default=2, help="round starts sampled per prompt")
    parser.add_argument("--max-new", type=int, default=128, help="continuation length the starts are drawn from")
    parser.add_argument("--exact-verify", action="store_true",
                        help="verify (and time) every schedule alone instead of one forward over their path trie")
    parser.add_argument("--known-answer", action="store_true",
                        help="read acceptance from the target's greedy answer instead of verifying each schedule "
                             "(exact for greedy decoding; the target runs once per prompt; nothing timed)")
    parser.add_argument("--timed", type=int, default=3, help="schedules per round start verified alone, timed")
    parser.add_argument("--shard", default="0/1", help="i/n: this job collects prompts i, i+n, ...")
    parser.add_argument("--shards", type=int, default=None, metavar="N",
                        help="collect all N shards, each a unit on Ray (--workers, --address; --no-ray: one after "
                             "another here), then merge them")
    parser.add_argument("--profile", default="wall",
                        help="device profile the trees are pruned and priced with: 'wall' (this device's, measured "
                             "once and cached), a name such as a100-paper, or a JSON file (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=None, help="folder (default: data/trajectories/<pair>)")
    parser.add_argument("--merge", action="store_true", help="merge the shards of --out into trajectories.parquet")
    parser.add_argument("--mid-lag", type=int, default=0, metavar="N",
                        help="at each round start the mid drafter lags the text by 0..N tokens, as after rounds "
                             "without a mid call, so replayed calls pay that backlog (default: 0, no lag)")
    parser.add_argument("--warm", action="store_true",
                        help="reach each round start by decoding the prompt with all-small rounds (value pruning's "
                             "calibration and the mid drafter's backlog as in a real decode) instead of starting fresh")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--width", type=int, default=10)
    parser.add_argument("--budget", type=int, default=63)
    add_prune_argument(parser)
    parser.add_argument("--growth", default="full", choices=("lookup", "full", "release", "compact"),
                        help="tree growth rule of the replayed rounds (config.GROWTHS; default: %(default)s)")
    parser.add_argument("--small", default="ngram", help="the small drafter of the replayed trees (default: %(default)s)")
    parser.add_argument("--children", type=int, default=10, help="children per frontier parent (k)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads (0: torch default; with --shards on Ray: per shard, default 1)")
    engine.add_arguments(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--resume", action="store_true",
                        help="continue this shard's interrupted collection in --out (the same flags): prompts it "
                             "stored are not collected again")


def parse_shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise TreeGraftError(f"--shard {text!r}: write it as i/n, e.g. 0/4") from None
    if not (n >= 1 and 0 <= i < n):
        raise TreeGraftError(f"--shard {text!r}: need n >= 1 and 0 <= i < n")
    return i, n


def _out_dir(args: argparse.Namespace) -> Path:
    return args.out or TRAJECTORIES_DIR / args.pair.replace("/", "_")


def _drafter_record(mid_id: str) -> dict:
    """Which drafter version was used (the pocket drafter's training record, when there is one)."""
    rec = Path(mid_id) / "training_record.json" if mid_id else None
    if rec is None or not rec.is_file():
        return {"mid_id": mid_id}
    r = json.loads(rec.read_text())
    keys = ("step", "elapsed", "tokens_seen")
    return {"mid_id": mid_id, "mid_training": {k: r.get(k) for k in keys},
            "mid_final": r.get("elapsed", 0) >= 60 * r.get("config", {}).get("minutes", float("inf")) - 5}


def decode_of(args: argparse.Namespace) -> dict:
    """The replayed trees' DecodeConfig overrides the flags give."""
    return {"depth": args.depth, "width": args.width, "budget": args.budget, "prune": args.prune, **growth_from_args(args)}


def check_inputs(args: argparse.Namespace) -> tuple[dict, list[dict]]:
    """The replayed trees' DecodeConfig overrides and the prompts, each refused in one line."""
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.prompts import refuse_validation, tuning_prompts

    refuse_validation(args.split, "collect (scheduler training data)")
    for flag, value in (("--states", args.states), ("--max-new", args.max_new)):
        if value < 1:
            raise TreeGraftError(f"{flag} {value}: give a number >= 1")
    check_pair(None if args.target else args.pair)
    decode = decode_of(args)
    DecodeConfig(**decode)  # a bad budget, depth, width, growth or small drafter
    prompts = tuning_prompts(args.prompts, split=args.split, purpose="collect (scheduler training data)", limit=args.limit,
                             per_category=args.per_category)
    if not prompts:
        raise TreeGraftError(f"no prompts in {args.prompts!r} for --split {args.split}: a file without a split field "
                             "counts as eval, so pass --split eval or --split all")
    return decode, prompts


def run(args: argparse.Namespace) -> int:
    import torch

    from treegraft_lab import costs, measure
    from treegraft_lab.costs import DeviceProfile
    from treegraft_lab.training.collect import collect_shard, merge

    if args.threads:
        torch.set_num_threads(args.threads)
    shard = parse_shard(args.shard)
    if args.mid_lag < 0:
        raise TreeGraftError(f"--mid-lag {args.mid_lag}: give a number of tokens >= 0")
    out = _out_dir(args)
    if args.merge:
        path = merge(out, None if args.profile == "wall" else costs.load(args.profile))
        print(json.dumps({"trajectories": str(path), **{k: v for k, v in json.loads((out / "trajectories.json").read_text()).items()
                                                          if k in ("states", "prompts", "rows", "complete", "collected_with", "prune")}}, indent=1))
        return 0
    from treegraft_lab import load_pair

    decode, prompts = check_inputs(args)  # every setting is refused here, before any model loads
    if args.shards is not None:
        return _all_shards(args, prompts)
    fixed = None if args.profile == "wall" else costs.load(args.profile)
    out = args.out or (None if args.target else _out_dir(args))
    journal = _journal(args, out, shard, prompts) if out else None  # an interrupted run is refused before loading
    pair = load_pair(None if args.target else args.pair, target=args.target, mid=args.mid, device=args.device,
                     dtype=args.dtype)
    out = out or TRAJECTORIES_DIR / pair.name.replace("/", "_")
    journal = journal or _journal(args, out, shard, prompts)
    meta = {"prompts": str(args.prompts), "split": args.split, "dtype": str(pair.dtype), "threads": torch.get_num_threads(),
            **_drafter_record(getattr(pair, "mid_id", ""))}
    journal.check({"pair": pair.name, **{k: v for k, v in meta.items() if k != "threads"}})
    profile = journal.once("profile", lambda: fixed or measure.resolve("wall", pair), DeviceProfile.to_dict,
                           DeviceProfile.from_dict)  # resumed: the profile the run began with
    try:
        path = collect_shard(pair, prompts, _config(args, shard, decode), out, profile, meta=meta,
                             progress=not args.quiet, journal=journal)
    except KeyboardInterrupt:
        print(journal.interrupted("collect", f"{journal.count()} of {len(prompts[shard[0]::shard[1]])} prompts of shard "
                                             f"{shard[0]}/{shard[1]}"), file=sys.stderr)
        raise
    journal.close()
    print(path)
    return 0


def _config(args: argparse.Namespace, shard: tuple[int, int], decode: dict):
    from treegraft_lab.training.collect import CollectConfig

    return CollectConfig(states=args.states, max_new=args.max_new, seed=args.seed, shard=shard,
                         shared_verify=not args.exact_verify, timed=args.timed, decode=decode, mid_lag=args.mid_lag,
                         warm=args.warm, known=args.known_answer)


def pair_loader(args: argparse.Namespace):
    """How each Ray worker loads the pair (`engine.PairLoader`): --pair, or --target / --mid; a test swaps in its own."""
    from treegraft_lab.engine import PairLoader

    if args.target or args.mid:
        raise TreeGraftError("--shards loads the pair on each worker by its name: give --pair (not --target / --mid), "
                             "or collect one --shard at a time")
    return PairLoader(args.pair, args.device, args.dtype)


def _all_shards(args: argparse.Namespace, prompts: list[dict]) -> int:
    """`--shards N`: every shard a unit on Ray (each keeps its own journal, so a shard whose worker died, or a
    run resumed, continues from the prompts it stored), then the shards merged into trajectories.parquet."""
    from treegraft_lab import costs, measure
    from treegraft_lab.training.collect import merge

    check_pair(args.pair)
    if args.shards < 1:
        raise TreeGraftError(f"--shards {args.shards}: give a number >= 1")
    if args.shard != "0/1":
        raise TreeGraftError("give --shards N (all shards) or --shard i/n (one of them), not both")
    runs_on = engine.from_args(args, threads=args.threads or 1)
    out = _out_dir(args)
    shards = [(i, args.shards) for i in range(args.shards)]
    for shard in shards:  # an interrupted shard without --resume, or other flags, is refused before anything runs
        _journal(_as_shard(args, shard), out, shard, prompts)
    loader = pair_loader(args)
    fixed = None if args.profile == "wall" else costs.load(args.profile)
    profile = fixed or measure.resolve("wall", loader())  # every shard prices with one profile
    units = [engine.Unit(f"shard/{i}", collect_unit, (_as_shard(args, (i, n)), (i, n), prompts, out, profile), loader)
             for i, n in shards]
    try:
        paths = engine.run(units, runs_on, desc="collect (shards)", progress=not args.quiet)
    except KeyboardInterrupt:
        print(f"collect: interrupted; each shard's stored prompts are in {out}; resume with: "
              f"{resume_command(args)}", file=sys.stderr)
        raise
    path = merge(out, fixed)
    print("\n".join(paths + [str(path)]))
    return 0


def resume_command(args: argparse.Namespace) -> str:
    from treegraft_lab import resume

    return f"{resume.command(args, 'collect')} --resume"


def _as_shard(args: argparse.Namespace, shard: tuple[int, int]) -> argparse.Namespace:
    """`args` as one shard's job runs it (`--shard i/n`; its journal's settings are that job's)."""
    return argparse.Namespace(**{**vars(args), "shard": f"{shard[0]}/{shard[1]}", "shards": None})


def collect_unit(pair, args: argparse.Namespace, shard: tuple[int, int], prompts: list[dict], out: Path, priced) -> str:
    """One shard of `--shards`, on a worker: its journal opened to continue (the driver refused an interrupted one
    without --resume), collected, closed; the shard's file path."""
    import torch

    from treegraft_lab.costs import DeviceProfile
    from treegraft_lab.training.collect import collect_shard

    journal = _journal(argparse.Namespace(**{**vars(args), "resume": True}), out, shard, prompts)
    decode = decode_of(args)
    meta = {"prompts": str(args.prompts), "split": args.split, "dtype": str(pair.dtype), "threads": torch.get_num_threads(),
            **_drafter_record(getattr(pair, "mid_id", ""))}
    journal.check({"pair": pair.name, **{k: v for k, v in meta.items() if k != "threads"}})
    profile = journal.once("profile", lambda: priced, DeviceProfile.to_dict, DeviceProfile.from_dict)
    path = collect_shard(pair, prompts, _config(args, shard, decode), out, profile, meta=meta, progress=False,
                         journal=journal)
    journal.close()
    return str(path)


def _journal(args: argparse.Namespace, out: Path, shard: tuple[int, int], prompts: list[dict]):
    """The shard's journal (`resume.Journal`), stored with every flag that changes what is collected."""
    from treegraft_lab import resume
    from treegraft_lab.training.collect import journal_folder

    skip = ("out", "quiet", "threads", "merge", "shards", "workers", "address", "no_ray")  # where it runs changes nothing
    settings = {**resume.flags(args, skip), "prompts digest": resume.digest(prompts)}
    return resume.Journal.open(journal_folder(out, shard), settings, resume.command(args, "collect"), args.resume,
                               "collect", "--out")
