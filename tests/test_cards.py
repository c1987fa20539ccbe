"""A scheduler card's tables hold the numbers of the JSON file beside it."""

from __future__ import annotations

import json

from treegraft_lab.paths import DATA_DIR


def test_the_family_cards_ceiling_table_holds_ceiling_json():
    card = (DATA_DIR / "scheduler" / "smollm2-pocket" / "family-topk-lookup" / "CARD.md").read_text()
    c = json.loads((DATA_DIR / "scheduler" / "smollm2-pocket" / "family-topk-lookup" / "ceiling.json").read_text())
    base = c["all-small"]
    rows = {"regression of the margin, call iff > 0": c["held_out"]["regression, margin (std) > 0"],
            "regression of the margin in ms per token, call iff > 0": c["held_out"]["regression in ms per token, margin (std) > 0"],
            "classifier of the margin's sign weighted by its size, call iff P > 0.6":
                c["held_out"]["weighted classifier, P(call pays) > 0.6"]}
    for name, r in rows.items():
        line = f"| {name} | {r['tokens_per_s']:.2f} | {r['tokens_per_s'] / base:.3f} | {r['mid_calls_per_round']:.2f} |"
        assert line in card, line
    assert f"| oracle (the best schedule of each round, in hindsight) | {c['oracle']:.2f} | {c['oracle'] / base:.3f} |" in card
    assert f"| all-small | {base:.2f} | 1.000 | 0 |" in card
