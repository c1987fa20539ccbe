"""`treegraft-lab demo`: three prompts, plain decoding against TreeGraft and HF prompt lookup.

Prints this device's cost profile and what it implies, then a short table (tokens/s, speedup,
speedup on each prompt, tokens per round, lossless) measured here with the settings the profile
recommends, and the same methods modelled on the paper's A100 profile (`a100-paper`, labelled
modelled). The prompts show where each method helps: one that copies from its prompt (a function
to rewrite), one in between (questions about a given text), one with nothing to copy (a poem).
Every method generates once on a warm-up prompt, untimed, before anything is timed; then three
times a prompt on this machine's clock, interleaved (pooled; the min–max of the per-repeat
speedups beside each), and once on a100-paper's. A method that decoded exactly as another (the
same tokens and kept tree every round) says so and prints that one pooled number; the adaptive
row says when it made no mid call.
"""

from __future__ import annotations

import argparse
import time

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.presets import DEFAULT_PAIR, DEMO_PROMPTS, SHOWCASE_PROFILE

PROMPTS = DEMO_PROMPTS  # kind -> one user message (presets.py)
WARMUP_PROMPT = "List three facts about the moon."
REPEATS = 3  # timed generations per prompt and method, interleaved; their spread is printed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pair", default=DEFAULT_PAIR, help="a registered pair name")
    parser.add_argument("--prompt", default=None, help="one user message instead of the three built-in prompts")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate")
    parser.add_argument("--when", action="store_true",
                        help=f"only the WHEN table: where WHEN pays, modelled on {SHOWCASE_PROFILE} (a100-paper with a mid "
                             "drafter at a tenth of a verification's cost): all-small, all-mid, adaptive, learned, oracle")
    parser.add_argument("--out", default=None,
                        help="with --when: a folder to write the WHEN table to (showcase.json: its rows, prompts, "
                             "command, machine and date; `treegraft-lab report` reads data/showcase/ into the README)")


def _dtype(name: str) -> str:
    """"auto", or the dtype this device's scheduler was trained for where auto has none (said so)."""
    from treegraft_lab.commands.common import DEFAULT_GROWTH, DEFAULT_SMALL
    from treegraft_lab.schedule.choice import choose_settings

    choice = choose_settings(name, growth=DEFAULT_GROWTH, small=DEFAULT_SMALL, prefer_prune="value")
    if choice.dtype != "auto":
        print(f"note: {choice.note}")
    return choice.dtype


def _load(name: str):
    """The pair; without its mid drafter, said so, when the mid cannot be found."""
    import warnings

    from treegraft_lab.models import load_pair

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pair = load_pair(name, require_mid=False, dtype=_dtype(name))
    for w in caught:
        if "loading the target alone" in str(w.message):
            print(f"note: {w.message}")
    return pair


METHODS = {"ar": "plain decoding", "small": "TreeGraft all-small", "adaptive": "TreeGraft adaptive",
           "10101": "TreeGraft fixed 10101", "hf-pld": "HF prompt lookup"}


def recommended(prof) -> dict:
    """Settings a device profile recommends: its pruning rule (`costs.prune_for`, as `DecodeConfig(prune="auto")`)."""
    from treegraft_lab.costs import prune_for

    return {"prune": prune_for(prof)[0], "budget": 63}


def _note(r) -> str:
    """What a row's number is: "= <method>" when it decoded exactly as an earlier row (one
    computation, one number), "no mid call" when adaptive never called the mid drafter."""
    notes = [f"same decisions as {METHODS.get(r.same_as, r.same_as)}"] if isinstance(r.same_as, str) and r.same_as else []
    if r.name == "adaptive" and r.mid_calls_per_round == 0:
        notes.append("no mid call")
    return "; ".join(notes)


def _cell(per, method: str, kind: str, width: int) -> str:
    """One prompt's speedup, with the min–max of its per-repeat speedups where there were repeats."""
    if (method, kind) not in per.index:
        return f"{'-':>{width}}"
    r = per.loc[(method, kind)]
    text = f"{r.speedup:.2f}x" + (f" ({r.spread_lo:.2f}–{r.spread_hi:.2f})" if r.repeats > 1 else "")
    return f"{text:>{width}}"


def method_table(result, clock: str, kinds: list[str]) -> list[str]:
    summ = result.summary[result.summary.clock == clock]
    s = summ[summ.category == "overall"].set_index("method")
    per = summ.set_index(["method", "category"])
    rec = result.records[result.records.clock == clock]
    width = 20 if clock == "wall" else 12  # measured: each prompt's min–max over repeats beside its speedup
    cols = "".join(f"{k:>{width}}" for k in kinds) if len(kinds) > 1 else ""
    rows = [f"  {'method':<24}{'tokens/s':>9}{'speedup':>9}{'min–max':>12}{cols}{'tokens/round':>14}  lossless"]
    for m, label in METHODS.items():
        if m not in s.index:
            continue
        r = s.loc[m]
        tpr = "-" if r.tokens_per_round != r.tokens_per_round else f"{r.tokens_per_round:.2f}"
        spread = f"{r.spread_lo:.2f}–{r.spread_hi:.2f}" if r.repeats > 1 else "-"
        lossless = "yes" if bool(rec[rec.method == m].match.all()) else "NO"
        each = "".join(_cell(per, m, k, width) for k in kinds) if cols else ""
        note = _note(r)
        rows.append(f"  {label:<24}{r.tokens_per_s:>9.1f}{r.speedup:>8.2f}x{spread:>12}{each}{tpr:>14}  {lossless}"
                    + (f"  ({note})" if note else ""))
    return rows


SHOWN = {"small": "all-small", "mid": "all-mid", "adaptive": "adaptive", "learned": "learned", "oracle": "oracle"}


def showcase(pair, prompts: dict[str, str], n: int) -> dict:
    """The WHEN table on the showcase setting (`presets.SHOWCASE_PROFILE`, the regime map's settings):
    each prompt decoded by every schedule of `SHOWCASE_SCHEDULES`, modelled on that profile (a progress
    bar while it decodes); prints one row a prompt (modelled speedup over plain decoding, mid calls a
    round beside each scheduler) and a sentence computed from them; returns {prompt: rows}."""
    from tqdm.auto import tqdm

    from treegraft_lab import costs, regime
    from treegraft_lab.bench import modelled_side_by_side
    from treegraft_lab.presets import SHOWCASE_PROFILE, SHOWCASE_SCHEDULES
    from treegraft_lab.prompting import encode_prompt
    from treegraft_lab.schedule.stepwise import learned_folder

    schedules = SHOWCASE_SCHEDULES
    if not (learned_folder(pair.name) / "stepwise.json").is_file():  # a pair with no learned scheduler: the others
        schedules = tuple(s for s in schedules if s != "learned")
    prof = costs.load(SHOWCASE_PROFILE)
    cfg = regime.map_config("lookup", SHOWCASE_PROFILE)
    print(f"Where WHEN pays, modelled on {SHOWCASE_PROFILE} (the paper's A100 step costs with the mid drafter at a tenth "
          f"of a verification's cost; not measured): {pair.name}, {n} new tokens a prompt, greedy, top-k 63, lookup "
          "growth, n-gram small drafter:")
    out: dict[str, list[dict]] = {}
    with tqdm(total=len(prompts) * len(schedules), desc="WHEN table", leave=False) as bar:
        for kind, text in prompts.items():
            out[kind], _ = modelled_side_by_side(pair, encode_prompt(pair.tokenizer, text), cfg, prof, n, schedules,
                                                 tick=bar.update)
    head = "".join(f"{SHOWN[s] + ('' if s in ('small', 'mid') else ' (calls)'):>20}" for s in schedules)
    print(f"  {'prompt':<12}{head}  lossless")
    for kind, rows in out.items():
        cells = "".join(f"{r['speedup']:.2f}x".rjust(20) if r["schedule"] in ("small", "mid")
                        else f"{r['speedup']:.2f}x ({r['mid_calls_per_round']:.2f})".rjust(20) for r in rows)
        print(f"  {kind:<12}{cells}  {'yes' if all(r['lossless'] for r in rows) else 'NO'}")
    print("  " + showcase_sentence(out))
    from treegraft_lab.schedule.adaptive import artifact_folder
    from treegraft_lab.schedule.choice import scheduler_kind

    folder = artifact_folder(pair, cfg, prof)
    print("(speedup: plain decoding's modelled time over the method's, both priced on the profile; calls: mid calls a "
          f"round; adaptive: the paper's scheduler g_psi, here {folder.name}, the {scheduler_kind(folder)}; learned: "
          "the per-step scheduler; "
          "oracle: the best schedule a round, in hindsight; step through the learned scheduler's rounds in "
          "notebooks/05_scheduler_boundary.ipynb)")
    return out


def showcase_sentence(out: dict[str, list[dict]]) -> str:
    """How often each scheduler made mid calls and beat both endpoints, from the rows."""
    words = []
    for who in ("adaptive", "learned"):
        wins, calls = 0, 0.0
        for rows in out.values():
            by = {r["schedule"]: r for r in rows}
            if who not in by:
                break
            wins += by[who]["speedup"] > max(by["small"]["speedup"], by["mid"]["speedup"])
            calls += by[who]["mid_calls_per_round"] / len(out)
        else:
            words.append(f"{who} made {calls:.2f} mid calls a round and beat both endpoints on {wins} of {len(out)} prompts")
    return "; ".join(words).capitalize() + "."


def when_pays(args: argparse.Namespace) -> int:
    """`--when`: the WHEN table alone (`showcase`), written to `args.out` when given (`save_showcase`)."""
    from treegraft_lab.models import load_pair

    prompts = {"your prompt": args.prompt} if args.prompt else PROMPTS
    pair = load_pair(args.pair, dtype="float32")
    t0 = time.strftime("%Y-%m-%d %H:%M:%S")
    out = showcase(pair, prompts, args.max_new_tokens)
    if args.out:
        path = save_showcase(args.out, pair, prompts, out, args.max_new_tokens, t0)
        print(f"wrote {path}")
    return 0


def save_showcase(folder, pair, prompts: dict[str, str], out: dict[str, list[dict]], n: int, started: str):
    """`folder`/showcase.json: the WHEN table's rows (without the policy objects), the prompts, the scheduler
    adaptive loaded, the command that made it, the machine and the dates."""
    import json
    import shlex
    import sys
    from pathlib import Path

    from treegraft_lab import costs, regime
    from treegraft_lab.bench import hardware
    from treegraft_lab.paths import REPO_DIR
    from treegraft_lab.schedule.adaptive import artifact_folder

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    adaptive = artifact_folder(pair, regime.map_config("lookup", SHOWCASE_PROFILE), costs.load(SHOWCASE_PROFILE))
    data = {"profile": SHOWCASE_PROFILE, "pair": pair.name, "max_new_tokens": n, "prompts": prompts,
            "adaptive_scheduler": adaptive.resolve().relative_to(REPO_DIR).as_posix(),
            "rows": {k: [{c: v for c, v in r.items() if c != "policy"} for r in rows] for k, rows in out.items()},
            "sentence": showcase_sentence(out),
            "command": "treegraft-lab demo " + shlex.join(sys.argv[2:] if sys.argv[1:2] == ["demo"] else sys.argv[1:]),
            "hardware": hardware(pair), "started": started, "finished": time.strftime("%Y-%m-%d %H:%M:%S")}
    path = folder / "showcase.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def run(args: argparse.Namespace) -> int:
    """Check the flags, load the pair, say what this device's profile implies, run and print the bench, then
    the WHEN table."""
    if args.max_new_tokens < 1:
        raise TreeGraftError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    from treegraft_lab.commands.common import check_pair

    check_pair(args.pair)
    if args.out and not args.when:
        raise TreeGraftError("--out writes the WHEN table: use it with --when (demo --when --out FOLDER)")
    if args.when:
        return when_pays(args)
    t0 = time.perf_counter()
    pair = _load(args.pair)
    print_pair(pair, time.perf_counter() - t0)
    prof, rec = device_settings(pair)
    prompts = {"your prompt": args.prompt} if args.prompt else PROMPTS
    for line in prompt_lines(prompts):
        print(line)
    print()
    methods = list(METHODS) if pair.mid is not None else ["ar", "small", "hf-pld"]
    if pair.mid is None:
        print("note: no mid drafter, so only the n-gram drafter's methods run\n")
    result = demo_bench(pair, prompts, methods, args.max_new_tokens, rec)
    print_tables(result, prof, rec, list(prompts), args.max_new_tokens, t0)
    if pair.mid is not None:
        print()
        showcase(pair if str(pair.dtype) == "torch.float32" else _float32(args.pair), prompts, args.max_new_tokens)
    print("\nNext: `make lab` opens the workbench (JupyterLab on notebooks/, on this machine only, with a token); "
          "start with 01_step_through.ipynb, which steps through a decoding round by round.")
    return 0


def print_pair(pair, seconds: float) -> None:
    """The pair's models, device, dtype (and why), forward path and load time."""
    mid = type(pair.mid).__name__ if pair.mid is not None else "none"
    print(f"pair {pair.name}: target {pair.target_id}, mid {mid}; {pair.device}, "
          f"{str(pair.dtype).removeprefix('torch.')}; loaded in {seconds:.1f} s")  # fmt: skip
    print(f"dtype {pair.dtype_reason}; forward path: {pair.forward_path}")


def device_settings(pair) -> tuple:
    """(this device's profile, the settings it recommends), both printed with what the profile implies."""
    from treegraft_lab import measure
    from treegraft_lab.commands.profile import implication

    prof = measure.for_pair(pair)
    rec = recommended(prof)
    print(f"device profile {prof.name} ({prof.device}; {prof.source}):\n  {implication(prof)}")
    print(f"  recommended here: prune={rec['prune']}, budget {rec['budget']} (at most; value pruning sizes each round)")
    return prof, rec


def prompt_lines(prompts: dict[str, str]) -> list[str]:
    """One line a prompt: its kind and the first 100 characters of its first line (" ..." where cut)."""
    return [f"prompt ({kind}): {text.splitlines()[0][:100]}{' ...' if len(text) > 100 or chr(10) in text else ''}"
            for kind, text in prompts.items()]


def demo_bench(pair, prompts: dict[str, str], methods: list[str], n: int, rec: dict):
    """The methods on the prompts: warmed up, then `REPEATS` times on this machine's clock and once on a100-paper's."""
    from treegraft_lab import bench
    from treegraft_lab.commands.common import DEFAULT_GROWTH, DEFAULT_SMALL
    from treegraft_lab.config import GROWTHS

    growth = {**GROWTHS[DEFAULT_GROWTH], "small": DEFAULT_SMALL}
    return bench.run_bench(pair, [{"question_id": k, "category": k, "turns": [t]} for k, t in prompts.items()], methods,
                           n, budget=rec["budget"], prune=rec["prune"], warmup_tokens=32,
                           progress=True, model_on=["a100-paper"], prune_modelled="topk", growth=growth,
                           warmup_prompt=WARMUP_PROMPT, repeats=REPEATS, model_repeats=1)


def print_tables(result, prof, rec: dict, kinds: list[str], n: int, t0: float) -> None:
    """The measured table, the a100-paper table, what was skipped, and what the numbers are."""
    from treegraft_lab import costs
    from treegraft_lab.commands.common import DEFAULT_GROWTH, DEFAULT_SMALL
    from treegraft_lab.commands.profile import implication

    print(f"Measured on this machine ({prof.device}; {n} new tokens a prompt, greedy, prune={rec['prune']}, "
          f"{DEFAULT_GROWTH} growth, small drafter {DEFAULT_SMALL}; speedup over all prompts with the min–max of its "
          f"{REPEATS} per-repeat ratios, then on each prompt, its min–max in brackets):")
    print("\n".join(method_table(result, "wall", kinds)))
    a100 = costs.load("a100-paper")
    print("\nModelled on a100-paper (the paper's A100 step costs, not measured: data/profiles/README.md; the same "
          "models run, every decision and every time on that profile; prune=topk, budget 63):")
    print("\n".join(method_table(result, "a100-paper", kinds)))
    print(f"  ({implication(a100)})")
    for k, v in result.skipped.items():
        print(f"skipped {k}: {v}")
    print(f"\n(speedup: tokens/s over plain decoding on the same prompt, the mean over prompts; every method generated "
          f"once on a warm-up prompt first, untimed, then {REPEATS} times a prompt on this machine's clock, the methods "
          "interleaved (once modelled: its times do not vary); min–max: the same speedup within each repeat, lowest and "
          "highest; same decisions: the same tokens and the same kept tree every round, timed together as one number; "
          f"lossless: output identical to plain decoding; {time.perf_counter() - t0:.0f} s in all)")


def _float32(name: str):
    """The pair in float32 (the showcase's schedulers decide for float32 trees)."""
    from treegraft_lab.models import load_pair

    return load_pair(name, dtype="float32")
