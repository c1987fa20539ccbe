"""Spec-Bench's conventions: multi-turn answer files per method, and its speedup per task group.

Questions: Spec-Bench's or MT-bench's `question.jsonl` as published (`prompts.load_prompts` reads
it). Every turn of every question is decoded with the conversation so far (the target's chat
template; each later turn's prompt holds the method's OWN earlier answers, as Spec-Bench does).

Answer files: one per method, `DIR/<method>.jsonl`, one JSON line per question:
`question_id`, `category`, `answer_id`, `model_id`, `tstamp`, `choices: [{"index": 0, "turns":
[answer text per turn], "decoding_steps": [target verification forwards per turn, prefill not
counted; plain decoding: one per token], "new_tokens": [tokens generated per turn],
"wall_time": [seconds per turn, its prefill included], "accept_lengths": [tokens each target
forward accepted, bonus token included, every round of every turn; plain decoding: 1 each]}]`.
A round cut short by max_new_tokens or the end of text still lists what the target accepted.

Spec-Bench speedup per task group, its `evaluation/speed.py` arithmetic: a method's tokens/s on a
question = sum of its `new_tokens` / sum of its `wall_time` over the turns; the baseline's tokens
are not read from its `new_tokens` but recounted from its answer text, each turn re-tokenised with
the target's tokenizer at its defaults, less one a turn (`specbench_tokens`); a group's speedup = the
mean over the group's method questions of tokens/s / the mean over the group's baseline questions
(a ratio of means). So the baseline set against itself need not give 1.00x. Beside it this
project's own definition: the mean over questions of the per-question ratio, generated tokens on
both sides. Mean accepted tokens: the mean of all `accept_lengths` of the group pooled.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from pathlib import Path

import pandas as pd

from treegraft_lab.costs import DeviceProfile
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.resume import Journal

MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
GROUPS = {"mt_bench": MT_BENCH, "translation": ("translation",), "summarization": ("summarization",),
          "qa": ("qa",), "math_reasoning": ("math_reasoning",), "rag": ("rag",)}
PLAIN = ("ar", "hf-stock")  # one token per target forward
SPECBENCH_COLUMNS = {"questions": "questions", "tokens_per_s": "tokens/s (mean over questions)",
                     "speedup": "Spec-Bench speedup (speed.py)",
                     "speedup_per_question": "our speedup (mean of per-question ratios)",
                     "mean_accepted": "mean accepted tokens"}
GENERATED_HEADER = "ratio of means (generated tokens; no answer text to re-tokenise)"


def group_of(category: str) -> str:
    """Spec-Bench's task group of a category (MT-bench's eight are `mt_bench`); others keep their name."""
    return next((g for g, cats in GROUPS.items() if category in cats), category)


def answer_methods() -> tuple[str, ...]:
    """Methods that can write answer files: plain decoding and every tree method (they count
    accepted tokens per forward; the Hugging Face peers hf-pld and hf-assisted do not expose them)."""
    from treegraft_lab.baselines import PEERS
    from treegraft_lab.bench import TREE_METHODS

    return (*PLAIN, *TREE_METHODS, "csd", *PEERS)


def check_writable(folder) -> Path:
    """Create `folder` and check a file can be written in it; one clear error line otherwise."""
    folder = Path(folder).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{uuid.uuid4().hex[:8]}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise TreeGraftError(f"cannot write answer files to {str(folder)!r} ({e.strerror or e}); "
                             "give --answers a folder you can write to") from None
    return folder


# ---------------------------------------------------------------------------------- decoding


def conversation_runner(pair, method: str, budget: int | str = 63, prune: str = "topk", clock: str = "wall",
                        growth: dict | None = None, profile: DeviceProfile | None = None):
    """A callable `(messages, max_new_tokens) -> dict` decoding one turn with `method` (timed on the
    wall clock; `clock`: the name of the profile its decisions read, `profile` that profile resolved,
    as `bench.make_runner` takes them; growth: DecodeConfig overrides)."""
    from treegraft_lab import bench
    from treegraft_lab.baselines import PEERS, CascadeDecoder
    from treegraft_lab.config import DecodeConfig
    from treegraft_lab.decoder import TreeGraftDecoder
    from treegraft_lab.prompting import encode_prompt

    if method not in answer_methods():
        raise TreeGraftError(f"method {method!r} cannot write Spec-Bench answers (no per-forward accept lengths); "
                             f"use {', '.join(answer_methods())}")
    if method in PLAIN:
        hf, _ = bench.make_runner(pair, method)

        def run_plain(messages: list[dict], max_new_tokens: int) -> dict:
            out = hf(encode_prompt(pair.tokenizer, messages), max_new_tokens)
            n = len(out["token_ids"])
            return {**out, "decoding_steps": n, "accept_lengths": [1] * n}

        return run_plain
    cfg = DecodeConfig(budget=budget, prune=prune, clock=clock, **(growth or {}),
                       **({"schedule": "mid"} if method in ("csd", *PEERS) else bench.TREE_METHODS[method]))
    cls = CascadeDecoder if method == "csd" else PEERS.get(method, TreeGraftDecoder)
    dec = cls(pair, cfg, profile)

    def run_tree(messages: list[dict], max_new_tokens: int) -> dict:
        gen = dec.generate(messages, max_new_tokens=max_new_tokens)
        s, rounds = gen.stats, gen.rounds
        return {"token_ids": gen.token_ids, "wall_s": s["wall_s"], "rounds": len(rounds),
                "accepted": sum(r.accepted for r in rounds), "mid_calls": sum(r.mid_calls for r in rounds),
                **{k: s[k] for k in ("draft_s", "verify_s", "forward_s", "overhead_s", "prefill_s")},
                "decoding_steps": len(rounds), "accept_lengths": [r.accepted + 1 for r in rounds]}

    run_tree.carried_state, run_tree.restore_state = dec.carried_state, dec.restore_state  # see `bench.warm_up`
    return run_tree


_SUMMED = ("wall_s", "rounds", "accepted", "mid_calls", "draft_s", "verify_s", "forward_s", "overhead_s", "prefill_s")


def answering_methods(methods) -> list[str]:
    """ar first, then the other methods once each; refused unless every one can write answers."""
    methods = list(dict.fromkeys(["ar", *methods]))
    bad = [m for m in methods if m not in answer_methods()]
    if bad:
        raise TreeGraftError(f"method(s) {', '.join(bad)} cannot write Spec-Bench answers (no per-forward accept "
                             f"lengths); use {', '.join(answer_methods())}")
    return methods


def _warm_runners(pair, methods: list[str], first: dict, budget: int | str, prune: str, growth: dict | None,
                  journal: Journal, warmup_tokens: int) -> dict:
    """One conversation runner per method on this device's profile (resolved once), each warmed up
    untimed on the first turn of question `first`, then set to the state the journal's last question left it in."""
    from treegraft_lab import bench, measure

    here = journal.once("wall_profile", lambda: measure.resolve("wall", pair), DeviceProfile.to_dict,
                        DeviceProfile.from_dict)  # this device's profile, resolved once for every decoder
    runners = {m: conversation_runner(pair, m, budget, prune, "wall", growth, here) for m in methods}
    for run in runners.values():  # warm-up, untimed, leaving no state behind (Token Recycling's matrix)
        bench.warm_up(run, [{"role": "user", "content": first["turns"][0]}], warmup_tokens)
    for m, state in (journal.state() or {}).items():  # resumed: as the last stored question left them
        runners[m].restore_state(state)
    return runners


def rotated(methods: list[str], i: int) -> list[str]:
    """The order the methods decode question `i` in: rotated by `i` (as `bench.run_bench`)."""
    return methods[i % len(methods):] + methods[:i % len(methods)]


def answer_line(q: dict, choice: dict, model_id: str) -> dict:
    """One answer file line: the question's id and category, a fresh answer id, the time, the choice."""
    return {"question_id": q["question_id"], "category": q["category"], "answer_id": uuid.uuid4().hex[:22],
            "model_id": model_id, "tstamp": time.time(), "choices": [choice]}


def answer_question(q: dict, i: int, methods: list[str], runners: dict, files: dict, max_new_tokens: int, tokenizer,
                    model_id: str, bar) -> list[dict]:
    """Question `i` conversed by every method (each answer line written as it ends); one record per
    method, in `methods` order, ar's tokens the reference."""
    from treegraft_lab import bench

    outs = {}
    for m in rotated(methods, i):
        outs[m] = _converse(runners[m], q["turns"], max_new_tokens, tokenizer)
        files[m].write(json.dumps(answer_line(q, outs[m]["choice"], f"{model_id}-{m}")) + "\n")
        files[m].flush()
        bar.update()
    ref = outs["ar"]["token_ids"]
    rows = []
    for m in methods:
        o = outs[m]
        rec = bench.record_row(q, o["prompt_ids"], m, 0, {**o["totals"], "token_ids": o["token_ids"]}, ref)
        rows.append({**rec, "turns": len(q["turns"])})
    return rows


def answer_questions(pair, questions: list[dict], methods, folder, max_new_tokens: int = 256, budget: int | str = 63,
                     prune: str = "topk", model_id: str | None = None, warmup_tokens: int = 16,
                     progress: bool = True, growth: dict | None = None, journal: Journal | None = None) -> pd.DataFrame:
    """Decode every turn of every question with each method; write `folder/<method>.jsonl`.

    Methods run interleaved question by question, in an order rotated from question to question
    (as `bench.run_bench`); each is warmed up once (untimed) on the first turn, leaving no state behind. Returns one
    record per (question, method) in `bench`'s record format (turns summed; `match`: every turn
    identical to ar's), so `bench.summarize` applies. `journal` (`resume.Journal`): each question's
    records and the state its methods carry are stored as it finishes; questions it holds are not
    run again (their answer lines are kept, the lines of a question cut short dropped).
    """
    import sys

    from tqdm.auto import tqdm

    methods = answering_methods(methods)
    if not questions:
        raise TreeGraftError("no questions to answer")
    folder = check_writable(folder)
    model_id = model_id or getattr(pair, "name", "model")
    journal = journal or Journal()
    runners = _warm_runners(pair, methods, questions[0], budget, prune, growth, journal,
                            min(warmup_tokens, max_new_tokens))
    done = journal.count()
    for m in methods:
        keep_lines(folder / f"{m}.jsonl", done)
    files = {m: open(folder / f"{m}.jsonl", "a", encoding="utf-8") for m in methods}
    rows = []
    bar = tqdm(total=len(questions) * len(methods), desc="answers", disable=not progress, file=sys.stderr)
    try:
        for i, q in enumerate(questions):
            stored = journal.get(f"{i}/{q['question_id']}")
            if stored is not None:
                rows += stored
                bar.update(len(methods))
                continue
            rows_q = answer_question(q, i, methods, runners, files, max_new_tokens, pair.tokenizer, model_id, bar)
            rows += rows_q
            journal.add(f"{i}/{q['question_id']}", rows_q,
                        {m: r.carried_state() for m, r in runners.items() if hasattr(r, "carried_state")} or None)
            done = i + 1
    finally:
        bar.close()
        for f in files.values():
            f.close()
        if done < len(questions):  # cut short: every file holds the answers of the same whole questions
            for m in methods:
                keep_lines(folder / f"{m}.jsonl", done)
    return pd.DataFrame(rows)


def keep_lines(path: Path, n: int) -> None:
    """Keep the first `n` whole lines of an answer file (create it empty); refuse one that holds fewer."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True) if path.is_file() else []
    whole = [x for x in lines if x.endswith("\n")]
    if len(whole) < n:
        raise TreeGraftError(f"{path} holds {len(whole)} answers where the interrupted run stored {n}: the answer folder "
                             "changed since; run again without --resume")
    if len(lines) != n:
        path.write_text("".join(whole[:n]), encoding="utf-8")


def _converse(run, turns: list[str], max_new_tokens: int, tokenizer) -> dict:
    """Every turn with the conversation so far (the method's own earlier answers)."""
    from treegraft_lab.prompting import encode_prompt

    messages, texts, steps, new, wall, accept, ids = [], [], [], [], [], [], []
    totals = dict.fromkeys(_SUMMED, 0.0)
    for turn in turns:
        messages.append({"role": "user", "content": turn})
        out = run(messages, max_new_tokens)
        text = tokenizer.decode(out["token_ids"], skip_special_tokens=True).strip()
        messages.append({"role": "assistant", "content": text})
        texts.append(text)
        steps.append(out["decoding_steps"])
        new.append(len(out["token_ids"]))
        wall.append(out["wall_s"])
        accept += out["accept_lengths"]
        ids += out["token_ids"]
        for k in _SUMMED:
            totals[k] = totals[k] + out.get(k, math.nan)
    choice = {"index": 0, "turns": texts, "decoding_steps": steps, "new_tokens": new, "wall_time": wall,
              "accept_lengths": accept}
    return {"choice": choice, "token_ids": ids, "totals": totals,
            "prompt_ids": encode_prompt(tokenizer, [{"role": "user", "content": turns[0]}])}


# ---------------------------------------------------------------------------------- reading and speedups

CHOICE_FIELDS = ("turns", "decoding_steps", "new_tokens", "wall_time", "accept_lengths")


def _check_answer(row, where: str) -> None:
    if not isinstance(row, dict) or "question_id" not in row or "category" not in row:
        raise TreeGraftError(f"{where}: not a Spec-Bench answer line (it needs question_id, category and choices)")
    ch = row.get("choices")
    if not isinstance(ch, list) or not ch or not isinstance(ch[0], dict):
        raise TreeGraftError(f"{where}: not a Spec-Bench answer line ('choices' must be a non-empty list)")
    missing = [k for k in ("turns", "new_tokens", "wall_time") if not isinstance(ch[0].get(k), list)]
    if missing:
        raise TreeGraftError(f"{where}: not a Spec-Bench answer line (choices[0] lacks {', '.join(missing)})")
    if sum(ch[0]["wall_time"]) <= 0:
        raise TreeGraftError(f"{where}: wall_time sums to {sum(ch[0]['wall_time'])}, so it has no tokens/s")


def read_answer_file(path) -> list[dict]:
    """Every answer line of one Spec-Bench answer file (checked; errors name file and line)."""
    path = Path(path)
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise TreeGraftError(f"{path.name}, line {n}: not JSON, so not a Spec-Bench answer file") from None
            _check_answer(row, f"{path.name}, line {n}")
            rows.append(row)
    if not rows:
        raise TreeGraftError(f"{path.name}: empty, so not a Spec-Bench answer file")
    return rows


def read_answers(folder) -> tuple[dict[str, list[dict]], dict[str, str]]:
    """The answer files of a folder ({method (file stem): rows}) and the .jsonl files that are not
    answer files ({file name: one line saying why}). Other files (a README) are ignored."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TreeGraftError(f"{str(folder)!r} is not a folder of Spec-Bench answer files")
    answers, skipped = {}, {}
    for p in sorted(folder.glob("*.jsonl")):
        try:
            answers[p.stem] = read_answer_file(p)
        except (TreeGraftError, OSError, UnicodeDecodeError) as e:
            skipped[p.name] = str(e)
    if not answers:
        raise TreeGraftError(f"{folder} holds no Spec-Bench answer file (<method>.jsonl)")
    return answers, skipped


def pick_baseline(methods, baseline: str | None = None) -> str:
    """`baseline`, else "ar", else the one file named like Spec-Bench's vanilla/baseline run."""
    methods = list(methods)
    if baseline is not None:
        if baseline not in methods:
            raise TreeGraftError(f"baseline {baseline!r} is not among the answer files: {', '.join(methods)}")
        return baseline
    if "ar" in methods:
        return "ar"
    named = [m for m in methods if "vanilla" in m.lower() or "baseline" in m.lower()]
    if len(named) == 1:
        return named[0]
    raise TreeGraftError(f"which answer file is the baseline? name it (one of {', '.join(methods)})")


def specbench_tokens(turns: list[str], tokenizer) -> int:
    """Spec-Bench's count of a baseline answer's tokens: every turn's text encoded by `tokenizer` at its
    defaults (special tokens added), one token less a turn for the BOS that encoding is assumed to
    prepend. A tokenizer that prepends none (SmolLM2's) loses one real token a turn in this count."""
    return sum(len(tokenizer(text)["input_ids"]) - 1 for text in turns)


def per_question(answers: dict[str, list[dict]], tokenizer=None) -> pd.DataFrame:
    """One row per (method, question): group, tokens, seconds, tokens/s, accept lengths summed, and
    `specbench_tokens`: the answer text re-tokenised as Spec-Bench counts a baseline (NaN without a
    `tokenizer`; give the target's, the one the answers were decoded with)."""
    rows = []
    for m, lines in answers.items():
        for a in lines:
            c = a["choices"][0]
            acc = c.get("accept_lengths") or []
            rows.append({"method": m, "question_id": str(a["question_id"]), "category": a["category"],
                         "group": group_of(a["category"]), "new_tokens": sum(c["new_tokens"]),
                         "wall_s": sum(c["wall_time"]), "accept_sum": float(sum(acc)), "accept_n": len(acc),
                         "specbench_tokens": math.nan if tokenizer is None else specbench_tokens(c["turns"], tokenizer)})
    df = pd.DataFrame(rows)
    df["tokens_per_s"] = df["new_tokens"] / df["wall_s"]
    return df


def records_per_question(records: pd.DataFrame) -> pd.DataFrame:
    """`per_question` from `bench` records (wall clock; repeats pooled; no accept lengths). Methods
    that decoded a question identically (`bench.same_decisions`) are timed together there: each
    gets the pool's mean, so one computation prints one number."""
    from treegraft_lab.bench import same_decisions

    r = records[records["clock"] == "wall"] if "clock" in records else records
    g = r.groupby(["method", "question_id", "category"], sort=False)[["new_tokens", "wall_s"]].sum().reset_index()
    for q, rq in r.groupby("question_id", sort=False):
        pools: dict[str, list[str]] = {}
        for m, lead in same_decisions(rq).items():
            pools.setdefault(lead, [lead]).append(m)
        for members in pools.values():
            sel = (g["question_id"] == q) & g["method"].isin(members)
            g.loc[sel, ["new_tokens", "wall_s"]] = g.loc[sel, ["new_tokens", "wall_s"]].mean().to_numpy()
    g["group"] = g["category"].map(group_of)
    g["tokens_per_s"] = g["new_tokens"] / g["wall_s"]
    return g.assign(accept_sum=math.nan, accept_n=0, specbench_tokens=math.nan)


def _groups(pq: pd.DataFrame) -> list[str]:
    present = set(pq["group"])
    return [g for g in GROUPS if g in present] + sorted(present - set(GROUPS)) + ["overall"]


def speedup_table(pq: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """Per (group, method): questions, mean tokens/s, the Spec-Bench speedup, ours, mean accepted tokens.

    `speedup`: Spec-Bench's speed.py, the method's mean tokens/s over the baseline's mean tokens/s
    (`baseline_tokens_per_s`) counted on its re-tokenised text; where the baseline has no text
    (`per_question` without a tokenizer, `records_per_question`) on its generated tokens, and
    `baseline_counted` says which. `speedup_generated`: the same ratio of means on generated tokens.
    `speedup_per_question`: ours, the mean of per-question ratios. Groups: Spec-Bench's six present,
    then overall."""
    base = pick_baseline(dict.fromkeys(pq["method"]), baseline)
    ref = pq[pq["method"] == base].set_index("question_id")["tokens_per_s"]
    rows = []
    for g in _groups(pq):
        sel = pq if g == "overall" else pq[pq["group"] == g]
        b = sel[sel["method"] == base]
        recounted = len(b) > 0 and "specbench_tokens" in b and bool(b["specbench_tokens"].notna().all())
        base_tps = (b["specbench_tokens"] / b["wall_s"]).mean() if recounted else b["tokens_per_s"].mean()
        for m in dict.fromkeys(pq["method"]):
            s = sel[sel["method"] == m]
            if s.empty:
                continue
            tps = s["tokens_per_s"].mean()
            n_acc = s["accept_n"].sum()
            rows.append({"group": g, "method": m, "questions": len(s), "tokens_per_s": tps,
                         "baseline_tokens_per_s": base_tps if len(b) else math.nan,
                         "baseline_counted": "re-tokenised" if recounted else "generated",
                         "speedup": tps / base_tps if len(b) else math.nan,
                         "speedup_generated": tps / b["tokens_per_s"].mean() if len(b) else math.nan,
                         "speedup_per_question": (s["tokens_per_s"] / s["question_id"].map(ref)).mean(),
                         "mean_accepted": s["accept_sum"].sum() / n_acc if n_acc else math.nan})
    return pd.DataFrame(rows)


def speedup_markdown(table: pd.DataFrame, baseline: str = "ar") -> str:
    """The speedup table as Markdown: Spec-Bench's speed.py figure (3 decimals) and ours beside it."""
    def f(x, spec, suffix=""):
        return "–" if x != x else f"{x:{spec}}{suffix}"

    recounted = bool((table["baseline_counted"] == "re-tokenised").all())
    cols = {**SPECBENCH_COLUMNS, **({} if recounted else {"speedup": GENERATED_HEADER})}
    lines = ["| " + " | ".join(["group", "method", *cols.values()]) + " |", "|" + "---|" * (len(cols) + 2)]
    for r in table.itertuples():
        lines.append(f"| {r.group} | {r.method} | {r.questions} | {f(r.tokens_per_s, '.1f')} | {f(r.speedup, '.3f', 'x')} "
                     f"| {f(r.speedup_per_question, '.3f', 'x')} | {f(r.mean_accepted, '.2f')} |")
    if recounted:
        how = (f"Spec-Bench speedup = mean over questions of tokens/s / the same mean for {baseline}, whose tokens are "
               "recounted from its answer text (each turn re-tokenised, less one), as Spec-Bench's speed.py does; "
               f"so {baseline} against itself need not be 1.000x.")
    else:
        how = (f"Ratio of means = mean over questions of tokens/s / the same mean for {baseline}, generated tokens on "
               "both sides (Spec-Bench's speed.py recounts the baseline from answer files: bench --answers).")
    note = (f"Speedup over {baseline}. {how} Ours = mean over questions of the per-question ratio, generated tokens. "
            "Mean accepted tokens = tokens per target forward, bonus included (Spec-Bench's accept_lengths).")
    return "\n".join(lines) + "\n\n" + note


def overall_line(table: pd.DataFrame) -> str:
    """One line: each method's overall Spec-Bench speedup (speed.py), ours beside it where the two
    differ at three decimals."""
    overall = table[table["group"] == "overall"]
    parts = []
    for r in overall.itertuples():
        ours = f"{r.speedup_per_question:.3f}x"
        parts.append(f"{r.method} {r.speedup:.3f}x" + ("" if f"{r.speedup:.3f}x" == ours else f" (ours {ours})"))
    what = "Spec-Bench speedup" if (overall["baseline_counted"] == "re-tokenised").all() else "Ratio of means (generated tokens)"
    return f"{what}, overall: " + ", ".join(parts)
