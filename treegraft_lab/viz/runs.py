"""What a recorded run's tables say about its text without a model: the token ids committed when a
round starts, and the span of the output each round emitted."""

from __future__ import annotations

from typing import Any


def round_context(run: Any, round: int, run_id: int = 0) -> list[int]:
    """Token ids committed when `round` starts: the prompt plus every token emitted before it.

    Each earlier round emitted its accepted draft tokens plus one bonus token. The ids are
    rebuilt from the runs table's output ids, so no model is needed.
    """
    r = run.runs[run.runs["run"] == run_id].iloc[0]
    rounds = run.rounds[(run.rounds["run"] == run_id) & (run.rounds["round"] < round)]
    n = int((rounds["accepted"] + 1).sum())
    return list(r["prompt_ids"]) + list(r["output_ids"])[:n]


def accepted_spans(run: Any, run_id: int = 0) -> list[tuple[int, int, int]]:
    """(round, start, end) token offsets into the output for each round's emitted tokens."""
    rounds = run.rounds[run.rounds["run"] == run_id].sort_values("round")
    out_len = len(run.runs[run.runs["run"] == run_id].iloc[0]["output_ids"])
    spans, pos = [], 0
    for rd, acc in zip(rounds["round"], rounds["accepted"]):
        end = min(pos + int(acc) + 1, out_len)
        spans.append((int(rd), pos, end))
        pos = end
    return spans
