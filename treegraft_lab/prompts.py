"""Prompt suites in the MT-bench / Spec-Bench question format (JSONL, one question a line).

Each line: `question_id` (int or str), `category` (str), `turns` (non-empty list of non-empty
strings, the user messages), optionally `reference` (any JSON: MT-bench and Spec-Bench use a
list of strings or a list of lists of strings; returned as it is, not checked) and `split`
("train", "eval" or "validation"). Any other field is not checked and is passed through unchanged, so
Spec-Bench's and MT-bench's published `question.jsonl` files read as they are. The project's
suites live in `data/prompts/<name>.jsonl` and are built by `scripts/build_prompts.py`.

A line without `split` (an external benchmark file) counts as eval: such a file is held-out
data, never training data, so the default `split="eval"` (and `"all"`) takes every line and
`split="train"` takes none.

The validation set (`data/prompts/treegraft-validation.jsonl`, built by
`scripts/build_validation.py`) is held out from everything that fits or chooses: scheduler
training, trajectory collection, drafter distillation and the scripts that chose the defaults
read prompts through `tuning_prompts`, which refuses it. `load_prompts(split="validation")` on
the default suite reads it, to report beside eval.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from treegraft_lab.errors import TreeGraftError
from treegraft_lab.paths import PROMPTS_DIR

DEFAULT_SUITE = "treegraft-suite"
VALIDATION_SUITE = "treegraft-validation"  # the default suite's validation split lives in its own file
SPLITS = ("train", "eval", "validation", "all")
ROW_SPLITS = ("train", "eval", "validation")


def list_suites() -> list[str]:
    """Names of the suites shipped in `data/prompts/`."""
    return sorted(p.stem for p in PROMPTS_DIR.glob("*.jsonl"))


def suite_path(name_or_path: str | Path) -> Path:
    """A suite name under `data/prompts/`, or a path to any .jsonl file in that format."""
    path = Path(name_or_path).expanduser()
    if path.suffix == ".jsonl" or path.is_file() or len(path.parts) > 1:
        if not path.is_file():
            raise TreeGraftError(f"prompt file {str(path)!r} not found; check the path")
        return path
    path = PROMPTS_DIR / f"{name_or_path}.jsonl"
    if not path.is_file():
        raise TreeGraftError(
            f"unknown prompt suite {str(name_or_path)!r}; known suites: "
            f"{', '.join(list_suites()) or '(none)'}, or pass a path to a .jsonl file"
        )
    return path


def _check_row(row: Any, where: str) -> dict:
    """Validate one question; return it with `split` set (default "eval"), all else as read."""
    if not isinstance(row, dict):
        raise TreeGraftError(f"{where}: expected a JSON object, got {type(row).__name__}")
    qid = row.get("question_id")
    if isinstance(qid, bool) or not isinstance(qid, (int, str)) or qid == "":
        raise TreeGraftError(f"{where}: 'question_id' must be an int or a non-empty string")
    if not isinstance(row.get("category"), str) or not row["category"]:
        raise TreeGraftError(f"{where}: 'category' must be a non-empty string")
    turns = row.get("turns")
    if "turns" not in row:
        raise TreeGraftError(f"{where}: 'turns' is missing; every question needs 'turns', the list of its user messages "
                             "(MT-bench / Spec-Bench question format)")
    if (
        not isinstance(turns, list)
        or not turns
        or not all(isinstance(t, str) and t.strip() for t in turns)
    ):
        raise TreeGraftError(f"{where}: 'turns' must be a non-empty list of non-empty strings")
    split = row.get("split", "eval")
    if split not in ROW_SPLITS:
        raise TreeGraftError(f"{where}: 'split' must be one of {', '.join(ROW_SPLITS)}, got {split!r}")
    return {**row, "split": split}


def read_jsonl(path: Path) -> list[dict]:
    """Every validated question of a file, in file order; errors name the line."""
    rows, seen = [], set()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}, line {n}"
            try:
                row = _check_row(json.loads(line), where)
            except json.JSONDecodeError as e:
                raise TreeGraftError(f"{where}: not valid JSON ({e.msg})") from None
            if row["question_id"] in seen:
                raise TreeGraftError(f"{where}: duplicate question_id {row['question_id']!r}")
            seen.add(row["question_id"])
            rows.append(row)
    if not rows:
        raise TreeGraftError(f"{path} holds no questions")
    return rows


def load_prompts(
    name_or_path: str | Path = DEFAULT_SUITE,
    split: str = "eval",
    categories: list[str] | str | None = None,
    limit: int | None = None,
    per_category: int | None = None,
) -> list[dict]:
    """Questions of a suite (or external .jsonl file) for one split, optionally filtered.

    `split` is "eval" (default), "train", "validation" or "all" (every line of the file); lines
    without a `split` field count as eval, so an external benchmark file (MT-bench, Spec-Bench) is
    read whole by default and `split="train"` on it returns an empty list. "validation" on the
    default suite reads `treegraft-validation.jsonl`, the suite's held-out validation set.
    `categories` keeps those categories (an unknown one is an error); `per_category` keeps the
    first n of each category; `limit` keeps the first n overall. Order is the file's.
    """
    if split not in SPLITS:
        raise TreeGraftError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    if split == "validation" and str(name_or_path) == DEFAULT_SUITE:
        name_or_path = VALIDATION_SUITE
    path = suite_path(name_or_path)
    rows = read_jsonl(path)
    if split != "all":
        rows = [r for r in rows if r["split"] == split]
    if categories is not None:
        wanted = [categories] if isinstance(categories, str) else list(categories)
        known = sorted({r["category"] for r in rows})
        unknown = [c for c in wanted if c not in known]
        if unknown:
            raise TreeGraftError(
                f"unknown categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} in "
                f"{path.name} ({split}); known: {', '.join(known)}"
            )
        rows = [r for r in rows if r["category"] in wanted]
    if per_category is not None:
        count: Counter[str] = Counter()
        kept = []
        for r in rows:
            count[r["category"]] += 1
            if count[r["category"]] <= per_category:
                kept.append(r)
        rows = kept
    if limit is not None:
        if limit < 0:
            raise TreeGraftError(f"limit must be >= 0, got {limit}")
        rows = rows[:limit]
    return rows


def refuse_validation(split: str, purpose: str) -> None:
    """Refuse, in one line, `split="validation"` for code that fits, trains or chooses (`purpose`)."""
    if split == "validation":
        raise TreeGraftError(f"{purpose} may not read the validation split: it is held out from every tuning, "
                             "training and default choice, to report on; use --split train (or eval)")


def tuning_prompts(name_or_path: str | Path = DEFAULT_SUITE, split: str = "train", *, purpose: str = "tuning",
                   **filters: Any) -> list[dict]:
    """`load_prompts` for code that fits, trains or chooses a default: refuses the validation split,
    asked for by name or found in the file's lines (a validation file read with split="all")."""
    refuse_validation(split, purpose)
    rows = load_prompts(name_or_path, split=split, **filters)
    held = [r["question_id"] for r in rows if r["split"] == "validation"]
    if held:
        raise TreeGraftError(f"{purpose} may not read validation prompts ({len(held)} in {name_or_path}, e.g. "
                             f"{held[0]!r}): they are held out from every tuning, training and default choice; "
                             "use the train split of treegraft-suite")
    return rows
