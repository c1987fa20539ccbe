"""`treegraft-lab train-scheduler`: rank signals, fit the value system, distil the online MLP.

    treegraft-lab train-scheduler

Reads `data/trajectories/<pair>/trajectories.parquet` (from `collect --merge`), writes the artifact
to `data/scheduler/<pair>/<profile class>-<prune>/` (see treegraft_lab.schedule.artifact): the
device profile the trajectories are priced with and their pruning rule are recorded, and
`schedule="adaptive"` loads only an artifact trained for its own (pair, profile class, pruning).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.paths import SCHEDULER_DIR, TRAJECTORIES_DIR
from treegraft_lab.presets import DEFAULT_PAIR


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pair", default=DEFAULT_PAIR, help="model pair (default: %(default)s)")
    parser.add_argument("--trajectories", type=Path, action="append", default=None,
                        help="merged parquet (default: data/trajectories/<pair>/trajectories.parquet); repeat it for "
                             "the trajectories of several mid drafters (same tree settings), trained on together")
    parser.add_argument("--agreement", action="store_true",
                        help="add the mid drafter's greedy agreement with its target (its card: data/models/<mid>/"
                             "card.json) as an input, per trajectories file from the pair it was collected with: one "
                             "scheduler across mid drafters (18 inputs; the decoder reads the running pair's card)")
    parser.add_argument("--profile", default=None,
                        help="re-price the trajectories with this device profile (a name or JSON file; default: the "
                             "one they were collected with). With prune=value, collect with that profile instead")
    parser.add_argument("--family", default=None, metavar="PROFILES",
                        help="one scheduler for a family of devices: comma-separated base profiles (names or JSON "
                             "files), each with its mid curve scaled to every --family-ratios T_mid/T_tgt; the rows are "
                             "priced on all of them; the artifact goes to <pair>/family-<prune>[-<growth>] and drives any "
                             "clock (pass it as scheduler_path)")
    parser.add_argument("--family-ratios", default="0.02:1:8", metavar="LO:HI:N",
                        help="T_mid/T_tgt of the family, N log-spaced from LO to HI (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=None,
                        help="artifact folder (default: data/scheduler/<pair>/<profile class>-<prune>)")
    parser.add_argument("--signals", default=None,
                        help="comma-separated signals to use instead of the CV top 6 ('release': the authors' six)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--value-steps", type=int, default=3000)
    parser.add_argument("--student-steps", type=int, default=4000)
    parser.add_argument("--rank-steps", type=int, default=1200)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    parser.add_argument("--a-head", default="linear", choices=("linear", "log", "relative"),
                        help="what f_theta's A head regresses: A (the paper's), log A, or log A over the round "
                             "start's all-small A (default: %(default)s)")
    parser.add_argument("--teacher", default="value", choices=("value", "replay"),
                        help="where the student's margin labels come from: f_theta (the paper's) or each round "
                             "start's own replayed schedules (default: %(default)s)")
    parser.add_argument("--margin-unit", default="tokens-per-ms", choices=("tokens-per-ms", "ms-per-token"),
                        help="what the teacher's margins compare: tokens per ms (eta, the paper's) or ms per token "
                             "(what a run's time adds up) (default: %(default)s)")
    parser.add_argument("--cost-copies", type=int, default=None, metavar="N",
                        help="profiles each round start is priced on (default: 8 of a family's, 4 scalings of one profile)")
    parser.add_argument("--margin-offset", default="auto",
                        help="tau: the student calls the mid drafter iff the teacher margin exceeds tau; "
                             "auto = chosen by the grouped CV (0 = the plain sign rule)")


def run(args: argparse.Namespace) -> int:
    """Read and check the trajectories, price them, train the value system and the student, save the artifact."""
    import torch

    from treegraft_lab.training.distill import train_pipeline

    if args.threads:
        torch.set_num_threads(args.threads)
    name = args.pair.replace("/", "_")
    paths = args.trajectories or [TRAJECTORIES_DIR / name / "trajectories.parquet"]
    infos = [read_info(p, args.pair) for p in paths]  # every file is refused before any is read
    info, path = infos[0], paths[0]
    decode = info["shard_meta"][0]["collect"]["decode"]
    check_same_trees(paths, infos)
    df = combined(paths, infos, args.agreement)
    prune = decode.get("prune", "topk")
    trees = trees_of(info)  # the trees it learns on
    df, prof = priced(args, df, info, path.with_suffix(".json"), decode, prune)
    family = family_profiles(args, prune)
    signals = chosen_signals(args.signals)
    t0 = time.time()
    student, value, chosen, meta = train_pipeline(
        df, prof, args.pair, signals=signals, folds=args.folds, seed=args.seed, value_steps=args.value_steps,
        student_steps=args.student_steps, rank_steps=args.rank_steps,
        offset="auto" if args.margin_offset == "auto" else float(args.margin_offset), decode=decode, family=family,
        a_head=args.a_head, teacher=args.teacher, cost_copies=args.cost_copies, margin_unit=args.margin_unit)
    art = scheduler_artifact(args, df, student, chosen, meta, prof, family, trees, prune,
                             training_record(args, df, paths, infos, prof, family, t0))
    out = args.out or default_out(name, args.agreement, family, prof, prune, trees)
    save_artifact(art, value, out)
    print(json.dumps({"artifact": str(out), "params": art.params, "selected": chosen, "r2": meta["r2"],
                      "student_cv": meta["student_cv"], "replay_tokens_per_s": meta["replay_tokens_per_s"]}, indent=1))
    return 0


def trees_of(info: dict):
    """The DecodeConfig the trees were grown with (older files record fewer of its defaults)."""
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.training.collect import collect_config

    d = info["shard_meta"][0]["collect"]["decode"]
    return collect_config({k: v for k, v in d.items() if k in DecodeConfig.__dataclass_fields__
                           and k not in ("schedule", "clock")})


def check_same_trees(paths: list[Path], infos: list[dict]) -> None:
    """Refuse trajectories files that replayed other trees than the first one."""
    decode = infos[0]["shard_meta"][0]["collect"]["decode"]
    other = [str(p) for p, i in zip(paths, infos) if trees_of(i) != trees_of(infos[0])]
    if other:
        raise TreeGraftError(f"{', '.join(other)} replayed other trees than {paths[0]} ({decode}): train on trajectories "
                             "collected with the same --prune, --growth, --budget, --depth and --width")


def priced(args: argparse.Namespace, df, info: dict, info_path: Path, decode: dict, prune: str):
    """(rows, profile): the profile the trajectories were collected with, or --profile with the rows re-priced on it."""
    from treegraft_lab import costs
    from treegraft_lab.training.collect import apply_costs

    prof = costs.DeviceProfile.from_dict(info["profile"], f"{info_path}'s profile")
    if args.profile:
        if prune == "value":
            raise TreeGraftError("these trajectories were pruned by value with their own profile: collect again with "
                                 f"`collect --profile {args.profile}` instead of re-pricing them")
        prof = costs.load(args.profile)
        df = apply_costs(df, prof, decode)
    return df, prof


def family_profiles(args: argparse.Namespace, prune: str) -> list | None:
    """--family: every base profile with its mid curve scaled to each --family-ratios ratio; else None."""
    if not args.family:
        return None
    from treegraft_lab import costs
    from treegraft_lab.regime import log_ratios, ratio_profiles

    if prune == "value":
        raise TreeGraftError("a family scheduler re-prices its rows on many profiles: collect them with --prune topk")
    try:
        lo, hi, n = args.family_ratios.split(":")
        ratios = log_ratios(float(lo), float(hi), int(n))
    except ValueError:
        raise TreeGraftError(f"--family-ratios {args.family_ratios!r}: write LO:HI:N, e.g. 0.02:1:8") from None
    return [p for base in args.family.split(",") for _, p in ratio_profiles(costs.load(base), ratios)]


def chosen_signals(text: str | None) -> list[str] | None:
    """--signals: six signal names ('release': the authors' six), or None for the CV's top 6."""
    from treegraft_lab.schedule.signals import RELEASE_SIGNALS, SIGNALS

    if not text:
        return None
    signals = list(RELEASE_SIGNALS) if text == "release" else text.split(",")
    bad = [s for s in signals if s not in SIGNALS]
    if bad or len(signals) != 6:
        raise TreeGraftError(f"--signals needs 6 of {', '.join(SIGNALS)}; got {signals}")
    return signals


def training_record(args: argparse.Namespace, df, paths: list[Path], infos: list[dict], prof, family, t0: float) -> dict:
    """How the scheduler was trained, as its artifact records it: the rows, the profile(s), the drafter, the
    collection, the arguments and command, the seconds since `t0` and the versions."""
    import torch

    info = infos[0]
    splits = {m.get("split") for i in infos for m in i.get("shard_meta", [])}
    return {
        "trajectories": str(paths[0]) if len(paths) == 1 else [str(p) for p in paths], "rows": len(df),
        "prompts": int(df["qid"].nunique()),
        "round_starts": int(df["state"].nunique()), "categories": sorted(df["category"].unique().tolist()),
        "split": sorted(s for s in splits if s), "profile": prof.to_dict(),
        "family": [p.to_dict() for p in family] if family else None,
        "drafter": {k: info.get("shard_meta", [{}])[0].get(k) for k in ("mid_id", "mid_training", "mid_final")},
        **({"mids": mids_record(df, infos)} if "mid_pair" in df else {}),
        "collection": {k: info.get("shard_meta", [{}])[0].get(k) for k in ("collect", "decode", "dtype", "threads")},
        "train_args": {k: plain(v) for k, v in vars(args).items() if not k.startswith("_")},
        "command": " ".join(["treegraft-lab", *sys.argv[1:]]) if sys.argv and "treegraft" in sys.argv[0] else None,
        "train_seconds": round(time.time() - t0, 1), "torch": torch.__version__, "python": platform.python_version(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def scheduler_artifact(args: argparse.Namespace, df, student, chosen: list[str], meta: dict, prof, family, trees,
                       prune: str, record: dict):
    """The student as a `SchedulerArtifact`, its parameter count checked against the one its inputs give."""
    import torch

    from treegraft_lab.schedule import artifact
    from treegraft_lab.schedule.adaptive import profile_class
    from treegraft_lab.training.distill import n_params
    from treegraft_lab.training.value import input_names

    D = int(df["D"].iloc[0])
    lin = [m for m in student.net if isinstance(m, torch.nn.Linear)]
    weights = {f"l{i + 1}.{p}": getattr(m, p).detach() for i, m in enumerate(lin) for p in ("weight", "bias")}
    small_meta = {} if trees.small == "ngram" else {"small": trees.small, "recycle_below": trees.recycle_below}
    art = artifact.SchedulerArtifact(
        args.pair, D, input_names(chosen, D, args.agreement), chosen, weights, student.xs.mean.tolist(), student.xs.std.tolist(),
        student.y_mean, student.y_std,
        {"profile_class": "family" if family else profile_class(prof), "profile_name": prof.name, "prune": prune,
         "growth": trees.growth, **small_meta, **meta, "training": record})
    want = artifact.params(len(art.inputs))
    if art.params != n_params(student.net) or art.params != want:
        raise TreeGraftError(f"the student has {art.params} parameters, expected {want}")
    return art


def default_out(name: str, agreement: bool, family, prof, prune: str, trees) -> Path:
    """data/scheduler/<pair>/<kind>-<prune>[-<growth>]: kind family, map (across mid drafters) or the profile class."""
    from treegraft_lab.schedule.adaptive import growth_suffix, profile_class

    cls = "family" if family else profile_class(prof)
    kind = "map" if agreement else cls  # across mid drafters: <pair>/map-<prune>[-<growth>]
    return SCHEDULER_DIR / name / f"{kind}-{prune}{growth_suffix(trees.growth, trees.small)}"


def save_artifact(art, value, out: Path) -> None:
    """Save the artifact with the value system's weights and scalers beside it, and load it back (a round trip)."""
    import torch

    from treegraft_lab.schedule import artifact

    vw = {k: v for k, v in value.net.state_dict().items()}
    vw.update({"x_mean": torch.from_numpy(value.xs.mean), "x_std": torch.from_numpy(value.xs.std),
               "y_mean": torch.from_numpy(value.ys.mean), "y_std": torch.from_numpy(value.ys.std)})
    artifact.save(art, out, value_weights=vw)
    artifact.load(out)  # round-trip check


def read_info(path: Path, pair: str) -> dict:
    """A merged trajectories file's trajectories.json, refused in one line when missing, of held-out
    prompts or without a profile."""
    if not path.is_file():
        raise TreeGraftError(f"no trajectories at {path}: run `treegraft-lab collect --pair {pair}` "
                             "and then `treegraft-lab collect --pair ... --merge`")
    info_path = path.with_suffix(".json")
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    splits = {m.get("split") for m in info.get("shard_meta", [])}
    if splits - {"train", None}:  # eval, all, validation: held-out prompts
        raise TreeGraftError(f"{path} holds {sorted(s for s in splits if s)} prompts: train the scheduler on the train "
                             "split only (eval and validation are held out)")
    if not info.get("profile") or not info.get("shard_meta"):
        raise TreeGraftError(f"{info_path} carries no device profile (missing, or an older format): "
                             "collect and merge the trajectories again")
    return info


def combined(paths: list[Path], infos: list[dict], agreement: bool):
    """The trajectories of one or more files as one frame. Several files (several mid drafters): each
    round start is renamed `<pair>/<state>` so that two drafters' starts on a prompt stay apart (the
    CV still groups them by prompt) and a `mid_pair` column names the drafter; with `agreement`, a
    `mid_agreement` column holds its card's agreement (`regime.mid_agreement`)."""
    import pandas as pd

    from treegraft_lab.regime import mid_agreement

    pairs = [i.get("pair", "") for i in infos]
    if len(set(pairs)) != len(pairs):
        raise TreeGraftError(f"the trajectories files name the pairs {pairs}: give one file per mid drafter")
    agree = [mid_agreement(p) for p in pairs] if agreement else [None] * len(pairs)  # a missing card, before reading
    if len(paths) == 1 and not agreement:
        return pd.read_parquet(paths[0])
    parts = []
    for path, pair, a in zip(paths, pairs, agree):
        df = pd.read_parquet(path)
        df = df.assign(state=pair + "/" + df["state"].astype(str), mid_pair=pair)
        parts.append(df.assign(mid_agreement=a) if agreement else df)
    return pd.concat(parts, ignore_index=True)


def mids_record(df, infos: list[dict]) -> dict:
    """Per mid drafter trained on: its weights' folder, round starts and (when an input) agreement."""
    out = {}
    for i in infos:
        sub = df[df["mid_pair"] == i["pair"]]
        out[i["pair"]] = {"mid_id": i["shard_meta"][0].get("mid_id"), "round_starts": int(sub["state"].nunique()),
                          "prompts": int(sub["qid"].nunique()),
                          **({"agreement": float(sub["mid_agreement"].iloc[0])} if "mid_agreement" in sub else {})}
    return out


def plain(v):
    """An argument as JSON holds it: paths (and lists of them) as strings."""
    return str(v) if isinstance(v, Path) else [plain(x) for x in v] if isinstance(v, list) else v
