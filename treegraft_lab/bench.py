"""The benchmark harness: TreeGraft and its peers, interleaved prompt by prompt in one process.

Methods (`METHODS`): `ar` (the target's plain greedy HF `generate`, the reference), `hf-stock`
(the same `generate` on transformers' stock forwards and cache: "HF as shipped", which `ar`
beats when the pair runs the packed CPU path of `treegraft_lab.cpu_path`), `hf-pld`
(HF prompt-lookup decoding, `prompt_lookup_num_tokens=10`), `hf-assisted` (HF assisted
generation with the mid drafter), the training-free tree peers `recycling` (Token Recycling) and
`suffix` (suffix decoding) through the decoder's round loop (`baselines.PEERS`), the decoder's
schedules `small`, `mid`, `10101`, `adaptive`, the rule schedules `rule:match` and `rule:score`
(values fitted on the train split, `schedule.rules`), the cascade baseline `csd`, and the
ablations `no-eg` / `no-nd` (fixed 10101 schedule). The tree methods' small drafter is the
`small` entry of `growth` (default: the n-gram drafter).

Protocol: one warm-up generation per method on the first prompt (not timed); then for every
prompt and repeat (default 3), every method runs once, in an order rotated from prompt to prompt
and repeat to repeat so that drift (thermal, other load) hits all alike. A method that keeps state
across runs (Token Recycling's matrix) sees each prompt once: every repeat of a prompt starts from
the state the method had before the prompt, and the next prompt from the state its first repeat left
(`SameStart`), so repeats are one computation timed again. Every output is compared
with `ar`'s for the same prompt (greedy: it must be identical; in bf16 the match rate is reported).
Every tree method's generation also leaves a digest of its decisions (tokens, and each round's
schedule, mid calls, accepted count and kept tree): methods whose digests agree everywhere decoded
identically, are timed as one pool and print one number ("= all-small").

Definitions, used everywhere in the tables:
- tokens/s: new tokens / wall time of `generate` (prefill included), summed over prompts.
- speedup: the mean over prompts of (method tokens/s) / (ar tokens/s) on that prompt (this
  project's definition); repeats of one prompt are pooled first. Its spread: the min–max over
  repeats of the same mean taken within one repeat (method and ar from the same repeat). A ratio of means per task group
  (Spec-Bench's averaging) is `treegraft_lab.specbench.speedup_table`; Spec-Bench's own figure, the
  baseline recounted from its answer text, needs answer files (`bench --answers`).
- A: accepted draft tokens per round, bonus token EXCLUDED; A+1: tokens per round, bonus included.
- draft / verify / overhead: shares of round time; overhead is the part of the round spent
  outside model forwards (Python, tree bookkeeping), inside both drafting and verification.
HF methods expose no per-round numbers: their A, shares and mid calls are left empty (NaN).

Modelled clocks (`model_on`, e.g. ["a100-paper"]): every tree method is run again with
`DecodeConfig(clock=<the profile's name>)` and the profile handed to its decoder (the real models
run and stay lossless; the scheduler, pruner and budget decide on the profile's costs) and timed
by the profile from each round's sizes; the HF methods are priced from their counted forwards (n tokens -> target_ms(n), mid_ms(n) for the
assistant, one n-gram step per prompt-lookup forward; the prefill priced as one token). Their
records carry `clock` = the profile's name and their tables say "modelled on <profile>";
`clock` = "wall" records are measured. Prefill is excluded from every modelled time.
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import pandas as pd
import torch

from treegraft_lab.baselines import PLD_TOKENS
from treegraft_lab.costs import DeviceProfile
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.resume import Journal

METHODS = ("ar", "hf-stock", "hf-pld", "hf-assisted", "recycling", "suffix", "small", "mid", "10101", "adaptive",
           "rule:match", "rule:score", "csd", "no-eg", "no-nd", "learned", "oracle")
# the oracle replays every schedule each round, the learned scheduler was learned on the map's settings: ask by name
DEFAULT_METHODS = tuple(m for m in METHODS if m not in ("learned", "oracle"))
HF_METHODS = ("ar", "hf-stock", "hf-pld", "hf-assisted")
TREE_METHODS = {  # method -> DecodeConfig overrides
    "small": {"schedule": "small"},
    "mid": {"schedule": "mid"},
    "10101": {"schedule": "10101"},
    "adaptive": {"schedule": "adaptive"},
    "rule:match": {"schedule": "rule:match"},
    "rule:score": {"schedule": "rule:score"},
    "oracle": {"schedule": "oracle"},
    "learned": {"schedule": "learned"},
    "no-eg": {"schedule": "10101", "expanded_graft": False},
    "no-nd": {"schedule": "10101", "non_destructive": False},
}
MAIN_COLUMNS = {"hf-stock": "HF stock", "small": "All Small", "mid": "All Mid", "adaptive": "TreeGraft", "oracle": "Oracle",
                "hf-pld": "HF PLD", "hf-assisted": "HF assisted", "recycling": "Token Recycling", "suffix": "Suffix decoding"}
ABLATION_ROWS = {"csd": "CSD", "no-eg": "w/o EG", "no-nd": "w/o ND", "10101": "TreeGraft fixed (10101)",
                 "adaptive": "TreeGraft adaptive", "rule:match": "TreeGraft rule:match", "rule:score": "TreeGraft rule:score"}

Runner = Callable[[list[int], int], dict]


@dataclass
class BenchResult:
    """Per-generation records, the per-(category, method) summary, run metadata, skipped methods."""

    records: pd.DataFrame
    summary: pd.DataFrame
    meta: dict
    skipped: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        """{"overall": {method: speedup}, "per_category": {category: {method: speedup}}, "spread":
        {method: [min, max] of the overall per-repeat ratios}, "same_decisions": {method: the method
        it decoded identically to}} on the wall clock, plus {"modelled": {profile: {...}}} for
        modelled clocks."""
        out = _speedup_json(self.summary[self.summary.clock == "wall"])
        clocks = [c for c in dict.fromkeys(self.summary.clock) if c != "wall"]
        if clocks:
            out["modelled"] = {c: _speedup_json(self.summary[self.summary.clock == c]) for c in clocks}
        return out


def _speedup_json(s: pd.DataFrame) -> dict:
    per = {c: _speedups(g) for c, g in s[s.category != "overall"].groupby("category", sort=True)}
    overall = s[s.category == "overall"]
    spread = {r.method: [round(float(r.spread_lo), 4), round(float(r.spread_hi), 4)] for r in overall.itertuples()}
    same = {r.method: r.same_as for r in overall.itertuples() if r.same_as}
    return {"overall": _speedups(overall), "per_category": per, "spread": spread, "same_decisions": same}


def _speedups(rows: pd.DataFrame) -> dict[str, float]:
    return {m: round(float(v), 4) for m, v in zip(rows.method, rows.speedup)}


# ---------------------------------------------------------------------------------- runners


def _hf_runner(pair, assistant=None, stock: bool = False, **gen_kwargs) -> Runner:
    """Greedy `target.generate`; `gen_kwargs` go into the generation config (e.g. prompt lookup).

    The target runs the pair's forward path with the pair's cache (`kv.new_cache`), or, with
    `stock`, transformers' own forwards and cache (`cpu_path.disabled`)."""
    import contextlib
    import copy

    from transformers import GenerationConfig

    from treegraft_lab import cpu_path, kv, measure

    devices = measure.cuda_devices(pair.target, assistant)  # every GPU the forwards use is waited for
    base = GenerationConfig.from_dict({**pair.target.generation_config.to_dict(), "do_sample": False,
                                       "temperature": None, "top_p": None, "top_k": None})
    extra = {} if assistant is None else {"assistant_model": assistant}

    @torch.inference_mode()
    def run(ids: list[int], max_new_tokens: int) -> dict:
        gc = copy.deepcopy(base)
        gc.update(max_new_tokens=max_new_tokens, **gen_kwargs)
        x = torch.tensor([ids], device=pair.device)
        with cpu_path.disabled(pair.target) if stock else contextlib.nullcontext(), count_forwards(pair.target) as tgt, \
                count_forwards(assistant) as mid:
            cache = {} if stock or assistant is not None else kv.forward_kwargs(pair.target, kv.new_cache(pair.target))
            out, wall = measure.timed(lambda: pair.target.generate(x, attention_mask=torch.ones_like(x), generation_config=gc,
                                                                   **cache, **extra), devices=devices)
        return {"token_ids": out[0, len(ids):].tolist(), "wall_s": wall, "target_calls": tgt, "mid_calls_n": mid,
                "lookups": len(tgt) if "prompt_lookup_num_tokens" in gen_kwargs else 0}

    return run


@contextmanager
def count_forwards(model):
    """Collect the token count of every forward of `model` (a forward pre-hook) into a list."""
    calls: list[int] = []
    if model is None:
        yield calls
        return

    def hook(_mod, args, kwargs):
        x = kwargs.get("input_ids", args[0] if args else None)
        if x is None:
            x = kwargs.get("inputs_embeds")
        calls.append(int(x.shape[1]) if x is not None else 1)

    h = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield calls
    finally:
        h.remove()


def price_hf(profile, out: dict) -> float:
    """Modelled ms of an HF generation from its counted forwards (the first, prefill, as one token)."""
    tgt, mid = out.get("target_calls") or [], out.get("mid_calls_n") or []
    ms = sum(profile.target_ms(n) for n in [1, *tgt[1:]]) if tgt else 0.0
    ms += sum(profile.mid_ms(n) for n in [1, *mid[1:]]) if mid else 0.0
    return ms + out.get("lookups", 0) * profile.small_ms


def _note_round(keys: list, ev) -> None:
    """A "round.accept" hook: append a committed round's decisions (schedule, mid calls, accepted,
    and the kept tree as (token, parent) per kept node)."""
    if ev.data.get("committed", True):
        info, t = ev.data["info"], ev.tree
        keys.append((info.schedule, info.mid_calls, info.accepted, tuple((t.tokens[v], t.parent[v]) for v in ev.data["kept"])))


def decisions_digest(token_ids: list[int], rounds: list) -> str:
    """A short digest of a generation's decisions: its tokens and every round's schedule, mid calls,
    accepted count and kept tree. Equal digests: the same computation."""
    import hashlib

    return hashlib.blake2b(repr((list(token_ids), rounds)).encode(), digest_size=8).hexdigest()


def decoder_runner(dec) -> Runner:
    """A `Runner` over a built decoder: its generation as a bench record (tokens, wall time, rounds, splits)."""
    def run(ids: list[int], max_new_tokens: int) -> dict:
        keys: list = []
        with dec.hooks({"round.accept": lambda ev: _note_round(keys, ev)}):
            gen = dec.generate(ids, max_new_tokens=max_new_tokens)
        s = gen.stats
        rounds = s["rounds"]
        return {"token_ids": gen.token_ids, "wall_s": s["wall_s"], "rounds": rounds,
                "decisions": decisions_digest(gen.token_ids, keys), "tree_tokens": sum(len(k[3]) for k in keys),
                "accepted": round(s["accepted_per_round"] * rounds), "mid_calls": round(s["mid_calls_per_round"] * rounds),
                "draft_s": s["draft_s"], "verify_s": s["verify_s"], "forward_s": s["forward_s"],
                "overhead_s": s["overhead_s"], "prefill_s": s["prefill_s"], "modelled_ms": s["modelled_ms"]}

    run.carried_state, run.restore_state = dec.carried_state, dec.restore_state  # see `interleaved`
    return run


def tree_decoder(pair, method: str, budget: int | str = 63, prune: str = "topk", clock: str = "wall",
                 growth: dict | None = None, profile: DeviceProfile | None = None):
    """The decoder through which `method` runs the round loop, so that it can be recorded
    (`treegraft_lab.record`) and drawn: every method of `METHODS` but plain decoding and HF's own;
    "hf-pld" is prompt lookup's draft in the round loop (`baselines.PromptLookupDecoder`: the bench
    times HF's own). Arguments as `make_runner`'s."""
    from treegraft_lab.baselines import PEERS, CascadeDecoder, PromptLookupDecoder
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder

    if method == "csd":
        return CascadeDecoder(pair, DecodeConfig(schedule="mid", budget=budget, prune=prune, clock=clock, **(growth or {})),
                              profile)
    if method in PEERS:
        return PEERS[method](pair, DecodeConfig(budget=budget, clock=clock, **(growth or {})), profile)
    if method == "hf-pld":
        return PromptLookupDecoder(pair, DecodeConfig(clock=clock, **(growth or {})), profile)
    if method in TREE_METHODS:
        return TreeGraftDecoder(pair, DecodeConfig(budget=budget, prune=prune, clock=clock, **(growth or {}),
                                                   **TREE_METHODS[method]), profile)
    raise TreeGraftError(f"method {method!r} has no tree to record; the tree methods are: "
                         f"{', '.join(m for m in METHODS if m not in ('ar', 'hf-stock', 'hf-assisted'))}")


def make_runner(pair, method: str, budget: int | str = 63, prune: str = "topk", clock: str = "wall",
                growth: dict | None = None, profile: DeviceProfile | None = None) -> tuple[Runner, dict]:
    """A callable `(ids, max_new_tokens) -> record` for `method`, and facts about it (budget);
    `clock`: the name of the profile the tree methods decide on, `profile` that profile resolved
    (`measure.resolve`; None: the decoders read it, `TreeGraftDecoder`). growth: DecodeConfig
    overrides of the tree methods' growth rule and small drafter (`presets.GROWTHS`, `small`; default:
    the speed preset's); the cascade (csd) drafts its chain with the same small drafter."""
    if method not in METHODS:
        raise TreeGraftError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    if method == "ar":
        return _hf_runner(pair), {}
    if method == "hf-stock":
        return _hf_runner(pair, stock=True), {}
    if method == "hf-pld":
        return _hf_runner(pair, prompt_lookup_num_tokens=PLD_TOKENS), {}
    if method == "hf-assisted":
        if pair.mid is None:
            raise TreeGraftError("the pair has no mid drafter")
        return _hf_runner(pair, assistant=pair.mid), {}
    dec = tree_decoder(pair, method, budget, prune, clock, growth, profile)
    return decoder_runner(dec), {"budget": dec.budget}


class SameStart:
    """Repeats of one prompt from the same start. A decoder that keeps state across runs (Token
    Recycling's matrix: its runner's `carried_state`) starts every repeat of a prompt from the state
    it had before the prompt's first repeat, and goes on to the next prompt with the state that first
    repeat left. Each prompt is then seen once, as in a stream of distinct prompts, and its repeats
    are one computation timed again, not runs that have already seen the answer."""

    def __init__(self, runners: dict) -> None:
        self.runners = {k: r for k, r in runners.items() if hasattr(r, "carried_state")}
        self.before: dict = {}
        self.after: dict = {}

    def prompt(self) -> None:
        """A new prompt starts: remember every decoder's state."""
        self.before = {k: r.carried_state() for k, r in self.runners.items()}
        self.after = {}

    def run(self, key, runner: Runner, ids: list[int], max_new_tokens: int) -> dict:
        """One repeat of the prompt by `runner`, from the state the prompt started with."""
        if key in self.before:
            runner.restore_state(self.before[key])
        out = runner(ids, max_new_tokens)
        if key in self.before and key not in self.after:
            self.after[key] = runner.carried_state()
        return out

    def done(self) -> None:
        """The prompt's repeats are over: on to the next with the state its first repeat left."""
        for k, state in self.after.items():
            self.runners[k].restore_state(state)


def warm_up(runner: Runner, ids: list[int], max_new_tokens: int) -> dict:
    """An untimed generation that leaves no state behind in a decoder that keeps state across runs."""
    state = runner.carried_state() if hasattr(runner, "carried_state") else None
    out = runner(ids, max_new_tokens)
    if state is not None:
        runner.restore_state(state)
    return out


def interleaved(runners: dict[str, Runner], prompts: list[list[int]], repeats: int = 2,
                max_new_tokens: int = 64) -> dict[str, list[list[dict]]]:
    """Side by side in one process: every runner once on the first prompt, untimed, then each prompt
    `repeats` times per runner, the runners' order rotated from one generation to the next so that
    none always runs first, every repeat of a prompt from the same start (`SameStart`). Returns
    {name: [records of prompt i]} (`Runner` records: token_ids, wall_s, ...)."""
    names = list(runners)
    for run in runners.values():
        warm_up(run, prompts[0], 16)
    same = SameStart(runners)
    out: dict[str, list[list[dict]]] = {n: [[] for _ in prompts] for n in names}
    for i, ids in enumerate(prompts):
        same.prompt()
        for rep in range(repeats):
            k = (i * repeats + rep) % len(names)
            for n in names[k:] + names[:k]:
                out[n][i].append(same.run(n, runners[n], ids, max_new_tokens))
        same.done()
    return out


# ---------------------------------------------------------------------------------- the run


def run_bench(pair, prompts: list[dict], methods: list[str] | tuple[str, ...] = DEFAULT_METHODS, max_new_tokens: int = 128,
              repeats: int = 3, budget: int | str = 63, warmup_tokens: int = 16, progress: bool = True,
              settings: dict | None = None, prune: str = "topk", model_on: list[str] | tuple[str, ...] = (),
              prune_modelled: str | None = None, model_only: bool = False, growth: dict | None = None,
              warmup_prompt: str | None = None, model_repeats: int | None = None, journal: Journal | None = None) -> BenchResult:
    """Run every method on every prompt (first turn, chat template applied) and summarise.

    model_on: profiles (names or files) to also run and price the methods on (see the module
    docstring); prune_modelled: the pruning rule there (default: `prune`); model_only: run the
    tree methods on the modelled clocks only (the wall clock then has ar and the HF methods, which
    the modelled clocks price); growth: the tree methods' growth rule (DecodeConfig overrides);
    warmup_prompt: the untimed warm-up's prompt (default: the first prompt); model_repeats: repeats
    on the modelled clocks (default: `repeats`; their times do not depend on the machine's speed,
    so repeating them buys no precision); journal: where each prompt's records and the state its
    methods carry go as it finishes (`resume.Journal`); prompts it holds are not run again, and the
    first one run starts from the state the last stored one left."""
    from treegraft_lab import costs
    from treegraft_lab.prompting import encode_prompt

    methods = methods_with_ar(methods)
    if not prompts:
        raise TreeGraftError("no prompts to benchmark")
    journal = journal or Journal()
    meta = {"hardware": hardware(pair), "load_start": journal.once("load_start", os.getloadavg),
            "started": journal.once("started", lambda: time.strftime("%Y-%m-%d %H:%M:%S")),
            "repeats_from": "same start"}  # `SameStart`: a prompt's repeats are one computation
    encoded = [encode_prompt(pair.tokenizer, q["turns"][0]) for q in prompts]
    loaded = [(costs.load(x), x) for x in model_on]
    profiles = {p.name: p for p, _ in loaded}
    clocks = {p.name: x for p, x in loaded}  # a profile's name -> the clock that names it (a name or a file)
    keys = wall_keys(methods, profiles, model_only)
    here = wall_profile(pair, keys, journal)
    keys += [(m, c) for c in profiles for m in methods if m not in HF_METHODS]
    warm = encode_prompt(pair.tokenizer, warmup_prompt) if warmup_prompt else encoded[0]
    runners, facts, skipped = warmed_runners(pair, keys, budget, prune, prune_modelled or prune, clocks, growth,
                                             profiles, here, warm, min(warmup_tokens, max_new_tokens))
    order = [k for k in keys if k in runners]
    n_model = repeats if model_repeats is None else min(model_repeats, repeats)
    rows = run_prompts(prompts, encoded, order, runners, methods, profiles, repeats, n_model, max_new_tokens,
                       journal, progress)
    meta.update(load_end=os.getloadavg(), finished=time.strftime("%Y-%m-%d %H:%M:%S"),
                budgets={m: f["budget"] for m, f in facts.items() if "budget" in f},
                settings={**(settings or {}), "methods": list(dict.fromkeys(m for m, _ in order)),
                          "max_new_tokens": max_new_tokens, "repeats": repeats, "budget": budget, "prune": prune,
                          "warmup_tokens": warmup_tokens, "prompts": len(prompts), "model_on": list(profiles),
                          "prune_modelled": prune_modelled or prune, "growth": _growth_name(growth),
                          "small": (growth or {}).get("small", "ngram")},
                profiles={c: {"device": p.device, "source": p.source} for c, p in profiles.items()},
                skipped=skipped, **({"resumed": journal.resumed()} if journal.resumed() else {}))
    records = pd.DataFrame(rows)
    return BenchResult(records, summarize(records), meta, skipped)


def methods_with_ar(methods) -> list[str]:
    """The methods with ar first (the reference: always run), each once; refused when one is unknown."""
    methods = list(dict.fromkeys(["ar", *methods]))
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise TreeGraftError(f"unknown method(s) {', '.join(bad)}; known: {', '.join(METHODS)}")
    return methods


def wall_keys(methods: list[str], profiles: dict, model_only: bool) -> list[tuple[str, str]]:
    """(method, "wall") of every method timed on this machine: all of them, or with `model_only` (and a modelled
    clock) only ar and the HF methods."""
    return [(m, "wall") for m in methods if not (model_only and profiles) or m in HF_METHODS]


def wall_profile(pair, keys: list[tuple[str, str]], journal: Journal) -> DeviceProfile | None:
    """This device's profile, resolved once for every wall-clock decoder (measured only if one runs; a resumed run
    reads the one it stored)."""
    from treegraft_lab import measure

    if not any(m not in HF_METHODS for m, _ in keys):
        return None
    return journal.once("wall_profile", lambda: measure.resolve("wall", pair), DeviceProfile.to_dict,
                        DeviceProfile.from_dict)


def warmed_runners(pair, keys: list[tuple[str, str]], budget: int | str, prune: str, prune_modelled: str,
                   clocks: dict, growth: dict | None, profiles: dict, here, warm: list[int], warm_tokens: int):
    """(runners, facts, skipped): a runner per (method, clock), each warmed up untimed; a peer that refuses (e.g. HF
    and the assistant) is skipped and said so on stderr, a refusing ar raises."""
    runners, facts, skipped = {}, {}, {}
    for m, c in keys:
        label = m if c == "wall" else f"{m}@{c}"
        try:
            rule = prune if c == "wall" else prune_modelled
            runners[(m, c)], facts[label] = make_runner(pair, m, budget, rule, clocks.get(c, "wall"), growth,
                                                        profiles.get(c, here))
            warm_up(runners[(m, c)], warm, warm_tokens)  # also where HF may refuse
        except Exception as e:  # a peer refusing (e.g. HF and the assistant) is a result, not a crash
            if m == "ar":
                raise
            skipped[label] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            runners.pop((m, c), None)
            print(f"bench: skipping {label}: {skipped[label]}", file=sys.stderr)
    return runners, facts, skipped


def run_prompts(prompts: list[dict], encoded: list[list[int]], order: list[tuple[str, str]], runners: dict,
                methods: list[str], profiles: dict, repeats: int, n_model: int, max_new_tokens: int, journal: Journal,
                progress: bool) -> list[dict]:
    """Every prompt's record rows, in order: stored ones read from the journal, the others run (`prompt_rows`) and
    stored with the state their methods carry; a progress bar on stderr."""
    from tqdm.auto import tqdm

    rows = []
    walls = sum(c == "wall" for _, c in order)
    per_prompt = repeats * walls + n_model * (len(order) - walls)
    bar = tqdm(total=len(prompts) * per_prompt, desc="bench", disable=not progress, file=sys.stderr)
    same = SameStart(runners)  # every repeat of a prompt from the same start
    for k, state in (journal.state() or {}).items():  # resumed: as the last stored prompt left them
        if k in same.runners:
            same.runners[k].restore_state(state)
    try:  # the bar closes before a Ctrl-C's line is printed
        for i, (q, ids) in enumerate(zip(prompts, encoded)):
            stored = journal.get(f"{i}/{q['question_id']}")
            if stored is not None:
                rows += stored
                bar.update(per_prompt)
                continue
            new = prompt_rows(i, q, ids, order, same, runners, methods, profiles, repeats, n_model, max_new_tokens, bar)
            rows += new
            journal.add(f"{i}/{q['question_id']}", new, {k: r.carried_state() for k, r in same.runners.items()} or None)
    finally:
        bar.close()
    return rows


def prompt_rows(i: int, q: dict, ids: list[int], order: list[tuple[str, str]], same: SameStart, runners: dict,
                methods: list[str], profiles: dict, repeats: int, n_model: int, max_new_tokens: int, bar) -> list[dict]:
    """Prompt `i`'s rows: `repeats` rounds of every runner in an order rotated by prompt and repeat, each from the
    prompt's start state (`SameStart`); the modelled clocks only in the first `n_model`."""
    rows = []
    same.prompt()
    for r in range(repeats):
        modelled = r < n_model
        rot = order[(i + r) % len(order):] + order[:(i + r) % len(order)]
        rot = [k for k in rot if modelled or k[1] == "wall"]
        outs = {}
        for k in rot:
            outs[k] = same.run(k, runners[k], ids, max_new_tokens)
            bar.update()
        rows += repeat_rows(q, ids, r, order, outs, methods, profiles if modelled else {})
    same.done()
    return rows


def repeat_rows(q: dict, ids: list[int], r: int, order: list[tuple[str, str]], outs: dict, methods: list[str],
                profiles: dict) -> list[dict]:
    """One repeat's record rows from its outputs: every wall-clock run, then per modelled profile each method's
    (a tree method's rerun on it, an HF method's wall run priced by its counted forwards)."""
    rows = []
    ref = outs[("ar", "wall")]["token_ids"]
    for m, c in order:
        if c == "wall":
            rows.append(record_row(q, ids, m, r, outs[(m, c)], ref, "wall"))
    for c, prof in profiles.items():  # modelled: tree methods rerun, HF priced
        for m in methods:
            out = outs.get((m, c)) if m not in HF_METHODS else outs.get((m, "wall"))
            if out is None:
                continue
            ms = price_hf(prof, out) if m in HF_METHODS else out["modelled_ms"]
            rows.append(record_row(q, ids, m, r, {**out, "wall_s": ms / 1000, "measured_wall_s": out["wall_s"]}, ref, c))
    return rows


def _growth_name(growth: dict | None) -> str:
    from treegraft_lab.config import DecodeConfig

    return DecodeConfig(**(growth or {})).growth


def record_row(q: dict, ids: list[int], method: str, repeat: int, out: dict, ref: list[int], clock: str = "wall") -> dict:
    toks = out["token_ids"]
    div = next((j for j, (a, b) in enumerate(zip(toks, ref)) if a != b), None)
    if div is None and len(toks) != len(ref):
        div = min(len(toks), len(ref))
    nan = math.nan
    return {"question_id": str(q["question_id"]), "category": q["category"], "prompt_tokens": len(ids),
            "method": method, "clock": clock, "measured_wall_s": out.get("measured_wall_s", out["wall_s"]), "repeat": repeat, "new_tokens": len(toks), "wall_s": out["wall_s"],
            "tokens_per_s": len(toks) / out["wall_s"] if out["wall_s"] > 0 else nan,
            **{k: out.get(k, nan) for k in ("rounds", "accepted", "mid_calls", "tree_tokens", "draft_s", "verify_s",
                                            "forward_s", "overhead_s", "prefill_s")},
            "match": div is None, "diverge_at": -1 if div is None else div, "decisions": out.get("decisions", "")}


# ---------------------------------------------------------------------------------- summary


def per_prompt_speedup(records: pd.DataFrame) -> pd.DataFrame:
    """One row per (question, method): pooled tokens/s and its ratio to ar's on that prompt."""
    g = records.groupby(["category", "question_id", "method"], sort=False)[["new_tokens", "wall_s"]].sum().reset_index()
    g["tokens_per_s"] = g.new_tokens / g.wall_s
    ar = g[g.method == "ar"].set_index("question_id").tokens_per_s
    g["speedup"] = g.tokens_per_s / g.question_id.map(ar)
    return g


def repeat_ratios(records: pd.DataFrame) -> pd.DataFrame:
    """One row per (method, repeat): the mean over prompts of (method tokens/s) / (ar tokens/s) on
    that prompt in the SAME repeat. Their min and max are the spread printed beside a speedup."""
    rec = records if "repeat" in records.columns else records.assign(repeat=0)
    g = rec.groupby(["question_id", "method", "repeat"], sort=False)[["new_tokens", "wall_s"]].sum().reset_index()
    g["tokens_per_s"] = g.new_tokens / g.wall_s
    ar = g[g.method == "ar"][["question_id", "repeat", "tokens_per_s"]].rename(columns={"tokens_per_s": "ar"})
    g = g.merge(ar, on=["question_id", "repeat"], how="left")
    g["ratio"] = g.tokens_per_s / g.ar
    return g.groupby(["method", "repeat"], sort=False).ratio.mean().reset_index()


def same_decisions(records: pd.DataFrame) -> dict[str, str]:
    """Method -> the earlier method (in the records' order) that decoded identically: the same
    tokens and the same decisions (schedule, mid calls, accepted, kept tree) every round, on every
    prompt and repeat (`decisions_digest`). Methods without a digest (the HF ones) have no twin."""
    if "decisions" not in records.columns:
        return {}
    rec = records[records.decisions.fillna("").astype(str) != ""]
    rep = rec.repeat if "repeat" in rec.columns else 0
    rec = rec.assign(repeat=rep)
    twins: dict[str, str] = {}
    first: dict[tuple, str] = {}
    for m, g in rec.groupby("method", sort=False):
        key = tuple(sorted(zip(g.question_id, g.repeat, g.decisions)))
        if key in first:
            twins[m] = first[key]
        else:
            first[key] = m
    return twins


def _summary_row(rec: pd.DataFrame, pp: pd.DataFrame) -> dict:
    rounds = rec.rounds.sum(min_count=1)
    round_s = (rec.forward_s + rec.overhead_s).sum(min_count=1)
    a = rec.accepted.sum(min_count=1) / rounds
    return {"prompts": pp.question_id.nunique(), "generations": len(rec),
            "tokens_per_s": rec.new_tokens.sum() / rec.wall_s.sum(), "speedup": pp.speedup.mean(),
            "speedup_min": pp.speedup.min(), "speedup_max": pp.speedup.max(),
            "accepted_per_round": a, "tokens_per_round": a + 1, "mid_calls_per_round": rec.mid_calls.sum(min_count=1) / rounds,
            "tree_tokens_per_round": (rec.tree_tokens.sum(min_count=1) / rounds) if "tree_tokens" in rec else math.nan,
            "ms_per_round": 1000 * round_s / rounds, "draft_share": rec.draft_s.sum(min_count=1) / round_s,
            "verify_share": rec.verify_s.sum(min_count=1) / round_s, "overhead_share": rec.overhead_s.sum(min_count=1) / round_s,
            "match_rate": rec.match.mean()}


def summarize(records: pd.DataFrame) -> pd.DataFrame:
    """Rows per (clock, category, method) plus category "overall" (all prompts pooled); on a
    modelled clock wall_s holds the modelled time. spread_lo / spread_hi: min and max of the
    per-repeat ratios (`repeat_ratios`) over `repeats` repeats. Methods that decoded identically
    within a category (`same_decisions`) are timed together there: their generations are pooled
    under the first of them, every number is that pool's, and `same_as` names it."""
    if "clock" not in records.columns:
        records = records.assign(clock="wall")
    return pd.concat([_summarize_clock(records[records.clock == c]).assign(clock=c)
                      for c in dict.fromkeys(records.clock)], ignore_index=True)


def _summarize_clock(records: pd.DataFrame) -> pd.DataFrame:
    rows = []
    methods = list(dict.fromkeys(records.method))
    for cat in [*sorted(records.category.unique()), "overall"]:
        sub = records if cat == "overall" else records[records.category == cat]
        twins = same_decisions(sub)
        timed = sub.assign(method=sub.method.replace(twins))  # one computation, one pool
        pp, reps = per_prompt_speedup(timed), repeat_ratios(timed)
        for m in methods:
            lead = twins.get(m, m)
            ratios = reps[reps.method == lead].ratio.dropna()
            rows.append({"category": cat, "method": m, **_summary_row(timed[timed.method == lead], pp[pp.method == lead]),
                         "spread_lo": ratios.min(), "spread_hi": ratios.max(), "repeats": len(ratios),
                         "same_as": twins.get(m, "")})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------- context


def hardware(pair=None) -> dict:
    """CPU model and vector extensions, cores, threads, library versions, device and dtype, git commit."""
    import transformers

    from treegraft_lab.models import cpu_flags, cpu_name

    cpu = cpu_name()
    flags = cpu_flags()
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
    info = {"cpu": cpu, "cpu_isa": " ".join(isa) or "unknown", "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__, "platform": platform.platform()}
    if pair is not None:
        info.update(device=str(pair.device), dtype=str(pair.dtype).replace("torch.", ""),
                    forward_path=getattr(pair, "forward_path", "stock"), dtype_reason=getattr(pair, "dtype_reason", ""))
        if pair.device.type == "cuda":
            info["gpu"] = torch.cuda.get_device_name(pair.device)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                                cwd=os.path.dirname(__file__)).stdout.strip()
        info["git_commit"] = commit or "unknown"
    except (OSError, subprocess.SubprocessError):
        info["git_commit"] = "unknown"
    return info


# ---------------------------------------------------------------------------------- tables


def _fmt(x: float, spec: str = ".2f", suffix: str = "") -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:{spec}}{suffix}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _cell(s: pd.DataFrame, cat: str, m: str) -> pd.Series | None:
    hit = s[(s.category == cat) & (s.method == m)]
    return None if hit.empty else hit.iloc[0]


SPREAD_WORDS = "in brackets: min–max of the per-repeat ratios"


def speedup_cell(r, names: dict[str, str] | None = None) -> str:
    """"1.31x (1.24–1.38)": the speedup and, over 2+ repeats, the min–max of its per-repeat ratios;
    "= <method>" when it decoded identically to an earlier method (one computation, one number)."""
    cell = _fmt(r.speedup, ".2f", "x")
    if getattr(r, "repeats", 1) > 1 and not math.isnan(r.spread_lo):
        cell += f" ({r.spread_lo:.2f}–{r.spread_hi:.2f})"
    same = getattr(r, "same_as", "")
    return cell + (f" = {(names or {}).get(same, same)}" if isinstance(same, str) and same else "")


def main_table(summary: pd.DataFrame) -> str:
    """Paper's main-table layout: speedup over ar per category; All Small / All Mid / TreeGraft, then peers."""
    cats = [*sorted(c for c in summary.category.unique() if c != "overall"), "overall"]
    cols = [m for m in MAIN_COLUMNS if m in set(summary.method)]
    rows = []
    for c in cats:
        ar = _cell(summary, c, "ar")
        rows.append([c, _fmt(ar.tokens_per_s, ".1f")] + [speedup_cell(_cell(summary, c, m), MAIN_COLUMNS) for m in cols])
    return _table([f"Category (speedup over ar; {SPREAD_WORDS})", "AR tokens/s", *(MAIN_COLUMNS[m] for m in cols)], rows)


def ablation_table(summary: pd.DataFrame) -> str:
    """Paper's ablation layout: rows CSD / w/o EG / w/o ND / TreeGraft fixed / adaptive; cells speedup / A."""
    cats = [*sorted(c for c in summary.category.unique() if c != "overall"), "overall"]
    rows = []
    for m, label in ABLATION_ROWS.items():
        if m not in set(summary.method):
            continue
        cells = [_cell(summary, c, m) for c in cats]
        rows.append([label] + [f"{speedup_cell(r, MAIN_COLUMNS)} / {_fmt(r.accepted_per_round)}" for r in cells])
    return _table([f"Method (speedup / A; {SPREAD_WORDS})", *cats], rows)


def detail_table(summary: pd.DataFrame, category: str = "overall") -> str:
    """Every method on one category: throughput, acceptance (with and without bonus), round split."""
    s = summary[summary.category == category]
    rows = [[r.method + (f" (= {r.same_as})" if isinstance(getattr(r, "same_as", ""), str) and r.same_as else ""),
             _fmt(r.tokens_per_s, ".1f"), _fmt(r.speedup, ".2f", "x"),
             f"{_fmt(r.spread_lo, '.2f')}–{_fmt(r.spread_hi, '.2f')}" if getattr(r, "repeats", 1) > 1 else "–",
             f"{_fmt(r.speedup_min, '.2f')}–{_fmt(r.speedup_max, '.2f')}", _fmt(r.accepted_per_round),
             _fmt(r.tokens_per_round), _fmt(r.mid_calls_per_round), _fmt(getattr(r, "tree_tokens_per_round", math.nan), ".1f"),
             _fmt(r.ms_per_round, ".1f"),
             _fmt(100 * r.draft_share, ".0f", "%"), _fmt(100 * r.verify_share, ".0f", "%"),
             _fmt(100 * r.overhead_share, ".0f", "%"), _fmt(100 * r.match_rate, ".0f", "%")] for r in s.itertuples()]
    return _table(["Method", "tokens/s", "speedup", "min–max per repeat", "range over prompts", "A", "A+1",
                   "mid calls/round", "tree tokens/round", "ms/round", "draft", "verify", "overhead", "match ar"], rows)


def render_markdown(result: BenchResult) -> str:
    """The report: main and ablation tables, details, hardware and settings."""
    m, hw, st = result.meta, result.meta["hardware"], result.meta.get("settings", {})
    load = f"{m['load_start'][0]:.2f} at start, {m['load_end'][0]:.2f} at end (1-min load average)"
    out = ["# TreeGraft benchmark", "",
           f"{hw.get('cpu')} ({hw.get('cpu_isa', 'extensions not recorded')}; {hw.get('cores')} cores, "
           f"{hw.get('torch_threads')} torch threads), device "
           f"{hw.get('device')}{' ' + hw['gpu'] if 'gpu' in hw else ''}, {hw.get('dtype')}, "
           f"forward path {hw.get('forward_path', 'stock')}, torch {hw.get('torch')}, "
           f"transformers {hw.get('transformers')}, git {hw.get('git_commit')}. Load: {load}. "
           f"{m['started']} to {m['finished']}.{resumed_words(m)}", "",
           "Settings: " + ", ".join(f"{k}={v}" for k, v in st.items()) + f"; resolved budgets {m.get('budgets')}.", "",
           "Speedup = mean over prompts of (tokens/s) / (ar tokens/s) on the same prompt; ar = the target's plain "
           "greedy HF `generate`. A = accepted draft tokens per round, bonus EXCLUDED (A+1 includes it).", "",
           "Spread: every repeat runs all methods on a prompt back to back (order rotated); a repeat's ratio is the mean "
           "over prompts of a method's tokens/s over ar's in that same repeat, and the min–max of those ratios is printed "
           "beside each speedup. \"= X\": the method decoded exactly as X (the same tokens, schedule, mid calls and kept "
           "tree every round, on every prompt): one computation, timed as one pool, one number.", "",
           *_clock_sections(result, "wall")]
    for c in (c for c in dict.fromkeys(result.summary.clock) if c != "wall"):
        prof = m.get("profiles", {}).get(c, {})
        out += [f"# Modelled on {c}", "",
                f"Every tree method run again deciding on the profile {c} ({prof.get('device', '')}) and timed by it "
                "from each round's sizes; HF methods priced from their counted forwards; prefill excluded. "
                "tokens/s and speedups below are modelled on " + c + "; ms/round and the shares are measured here. "
                f"Profile: {prof.get('source', '')}", "", *_clock_sections(result, c, level="##")]
    if result.skipped:
        out += ["## Skipped methods", ""] + [f"- `{k}`: {v}" for k, v in result.skipped.items()] + [""]
    wall = result.summary[result.summary.clock == "wall"]
    for c in sorted(x for x in wall.category.unique() if x != "overall"):
        out += [f"## {c}", "", detail_table(wall, c), ""]
    return "\n".join(out)


def resumed_words(meta: dict) -> str:
    """" Resumed at prompt k (<date>) ...": when an interrupted run was continued (`resume`), else ""."""
    at = meta.get("resumed") or []
    if not at:
        return ""
    when = ", ".join(f"at prompt {s['stored'] + 1} ({s['started']})" for s in at)
    return (f" Interrupted and resumed {when}: the later prompts ran in a new process, every method warmed up "
            "again, with what the methods carry across prompts (Token Recycling's matrix) as the last stored prompt left it.")


def _clock_sections(result: BenchResult, clock: str, level: str = "##") -> list[str]:
    s = result.summary[result.summary.clock == clock]
    tag = "" if clock == "wall" else f", modelled on {clock}"
    return [f"{level} Main table (speedup over ar{tag})", "", main_table(s), "",
            f"{level} Ablation (speedup / A{tag})", "", ablation_table(s), "",
            f"{level} All methods, overall{tag}", "", detail_table(s), "",
            "tree tokens/round: tokens each verification forward carries, the root included (1: a plain decoding step).",
            "draft / verify / overhead: shares of round time; overhead = time outside model forwards (inside both).",
            "match ar: share of generations identical to ar's greedy output.", ""]


def save(result: BenchResult, folder) -> None:
    """records.parquet, summary.parquet, results.md, results.json (speedups + metadata)."""
    import json
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    result.records.to_parquet(folder / "records.parquet", index=False)
    result.summary.to_parquet(folder / "summary.parquet", index=False)
    (folder / "results.md").write_text(render_markdown(result), encoding="utf-8")
    (folder / "results.json").write_text(json.dumps({**result.to_json(), "meta": result.meta}, indent=1, default=str),
                                         encoding="utf-8")


# ---------------------------------------------------------------------------------- schedules side by side, modelled
def modelled_side_by_side(pair, ids: list[int], config, profile: DeviceProfile, max_new_tokens: int,
                          schedules: tuple[str, ...] = ("small", "mid", "learned"), record: str | None = None,
                          tick=None):
    """`ids` decoded once per schedule with `config` on `profile` (modelled: the decisions and the
    times are that profile's): one row each (schedule, modelled speedup over plain decoding priced on
    the same profile, accepted draft tokens per round (bonus excluded), mid calls per round, lossless
    against plain greedy decoding), and the recorded run of `record` (None: no recording). `tick`: called
    after each decode (a progress bar's update)."""
    from dataclasses import replace

    from treegraft_lab.baselines import autoregressive
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.hooks import record as recording

    plain = autoregressive(pair, ids, max_new_tokens=max_new_tokens).token_ids
    rows, run = [], None
    for schedule in schedules:
        dec = TreeGraftDecoder(pair, replace(config, schedule=schedule), profile)
        if schedule == record:
            with recording(dec) as rec:
                gen = dec.generate(ids, max_new_tokens=max_new_tokens)
            run = rec.to_run()
        else:
            gen = dec.generate(ids, max_new_tokens=max_new_tokens)
        rows.append({"schedule": schedule, "speedup": len(gen.token_ids) * profile.target_ms(1) / gen.stats["modelled_ms"],
                     "accepted_per_round": gen.stats["accepted_per_round"],
                     "mid_calls_per_round": sum(r.mid_calls for r in gen.rounds) / len(gen.rounds),
                     "lossless": gen.token_ids == plain[: len(gen.token_ids)], "policy": dec.policy})
        if tick is not None:
            tick()
    return rows, run
