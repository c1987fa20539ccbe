"""The README's per-category result tables hold the numbers of the files they cite.

Those tables are written by hand from a benchmark's summary or a script's JSON; these tests
re-read the files and fail when a table and its file disagree (a rerun that was not copied over,
or a typo)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from treegraft_lab.paths import DATA_DIR, REPO_DIR

CATEGORIES = ("code", "math", "multi_turn", "qa", "rewrite", "summarization")


def readme_table(header: str) -> list[list[str]]:
    """The body rows (cells stripped) of the README table whose header line is `header`."""
    lines = (REPO_DIR / "README.md").read_text().splitlines()
    hits = [i for i, line in enumerate(lines) if line.strip() == header]
    assert len(hits) == 1, f"expected one README table headed {header!r}, found {len(hits)}"
    rows = []
    for line in lines[hits[0] + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def number(cell: str) -> float:
    return float(cell.replace("*", "").rstrip("x"))


def bench_cells(folder: str, clock: str, methods: list[str]) -> dict[str, list[float]]:
    """Per category (and overall): the methods' speedups on `clock` from a benchmark's summary."""
    d = pd.read_parquet(DATA_DIR / "bench" / folder / "summary.parquet")
    table = d[d["clock"] == clock].pivot_table(index="category", columns="method", values="speedup")
    return {cat: [float(table.loc[cat, m]) for m in methods] for cat in (*CATEGORIES, "overall")}


@pytest.mark.parametrize("header, folder, clock, columns", [
    ("| category | all-small | adaptive | HF prompt lookup | all-small / prompt lookup | suffix | Token Recycling |",
     "smollm2-pocket-wall-peers", "wall", ["small", "adaptive", "hf-pld", "small/hf-pld", "suffix", "recycling"]),
    ("| category | all-small | adaptive | HF prompt lookup | all-small / HF prompt lookup |",
     "smollm2-pocket-a100-lookup", "a100-paper", ["small", "adaptive", "hf-pld", "small/hf-pld"]),
])
def test_the_readme_per_category_bench_tables_match_their_results(header, folder, clock, columns):
    plain = [c for c in columns if "/" not in c]
    want = bench_cells(folder, clock, plain)
    rows = readme_table(header)
    assert [r[0] for r in rows] == [*CATEGORIES, "overall"]
    for row in rows:
        got = dict(zip(plain, want[row[0]]))
        for cell, col in zip(row[1:], columns):
            a, _, b = col.partition("/")
            value = got[a] / got[b] if b else got[a]
            assert number(cell) == pytest.approx(value, abs=0.006), f"{folder} {row[0]} {col}: README {cell}, file {value:.3f}"


def test_the_readme_small_drafter_table_matches_its_json():
    doc = json.loads((DATA_DIR / "growth" / "small-ab-wall.json").read_text())
    by_method = {r["method"]: r for r in doc["rows"]}
    header = ("| small drafter | speedup over plain | / prompt lookup | worst category / prompt lookup | code | math "
              "| multi_turn | qa | rewrite | summarization |")
    rows = readme_table(header)
    assert len(rows) >= 3
    # README names, in the JSON's order after plain decoding
    methods = [r["method"] for r in doc["rows"] if r["method"] != "plain decoding"]
    assert len(rows) == len(methods)
    for row, method in zip(rows, methods):
        r = by_method[method]
        want = [r["speedup"], r["over_prompt_lookup"], r["worst_category_over_prompt_lookup"],
                *(r["per_category"][c] for c in CATEGORIES)]
        for cell, value in zip(row[1:], want):
            assert number(cell) == pytest.approx(value, abs=0.006), f"{row[0]} ({method}): README {cell}, file {value:.3f}"


def test_every_row_of_the_readme_modelled_small_drafter_table_is_in_its_json():
    doc = json.loads((DATA_DIR / "growth" / "small-a100-paper-topk.json").read_text())
    cols = (*CATEGORIES, "overall")
    entries = {name: [v[c] for c in cols] for name, v in doc["speedup"].items()}
    rows = readme_table("| small drafter, growth | code | math | multi_turn | qa | rewrite | summarization | overall |")
    assert len(rows) >= 3
    for row in rows:
        cells = [number(c) for c in row[1:]]
        found = [n for n, vals in entries.items() if all(abs(a - b) <= 0.006 for a, b in zip(cells, vals))]
        assert found, f"README row {row[0]!r} {cells} matches no entry of small-a100-paper-topk.json"


def test_the_readme_column_beside_the_papers_pairs_holds_the_regime_maps_numbers_at_0_6():
    from treegraft_lab import costs, regime

    df, _ = regime.load(DATA_DIR / "regime" / "smollm2-pocket-lookup-topk")
    reps = regime.split(df, 5)
    m = regime.regime_map(reps, costs.load("a100-paper"), [0.6], ["all-small", "all-mid", "oracle"]).set_index("schedule")
    runs = regime.load_decodes(DATA_DIR / "regime" / "smollm2-pocket-lookup-topk", "a100-paper")
    dec = regime.summary(runs[runs["ratio"] == 0.6]).set_index("schedule")
    header = ("| speedup over plain decoding | Qwen3-32B / 1.7B (paper, n = 480) | LLaMA-70B / 1B (paper, n = 480) "
              "| ours, extra: SmolLM2-135M / pocket, modelled (n = 12) |")
    rows = {r[0]: r[3] for r in readme_table(header)}
    assert len(reps) == 12
    for name in ("all-small", "all-mid", "oracle"):
        assert number(rows[name]) == pytest.approx(m.loc[name, "speedup"], abs=0.006)
    family, single = (number(c.split()[0]) for c in rows["TreeGraft (adaptive)"].split(","))
    assert family == pytest.approx(dec.loc["adaptive-family", "speedup"], abs=0.006)
    assert single == pytest.approx(dec.loc["adaptive-single", "speedup"], abs=0.006)


def regime_data():
    from treegraft_lab import costs, regime

    folder = DATA_DIR / "regime" / "smollm2-pocket-lookup-topk"
    reps = regime.split(regime.load(folder)[0], 5)
    runs = regime.load_decodes(folder, "a100-paper", reps)
    ratios = sorted(runs.loc[runs["schedule"] == "adaptive-family", "ratio"].unique())
    rows = regime.priced(reps, costs.load("a100-paper"), ratios, ["all-small", "all-mid", "oracle"])
    return regime, rows, runs[runs["schedule"] == "adaptive-family"]


def test_the_readme_sentences_on_the_regime_map_hold_its_numbers():
    regime, rows, family = regime_data()
    text = " ".join((REPO_DIR / "README.md").read_text().split())
    m = regime.by_ratio(rows).set_index(["ratio", "schedule"])
    a_mid, a_small = (m.loc[(0.0956, s), "A"] for s in ("all-mid", "all-small"))
    assert f"acceptance length A {a_mid:.2f} against {a_small:.2f}" in text and "n = 12 prompts" in text
    sh = regime.step_shares(pd.concat([rows, family]))
    shares = sh.set_index(["schedule", "step", "ratio"])["share"].sort_index()
    oracle_step = {k: shares.loc[("oracle", k)] for k in (1, 5)}
    assert (f"most at step 1 ({100 * oracle_step[1].min():.0f}-{100 * oracle_step[1].max():.0f}% of rounds) and step 5 "
            f"({100 * oracle_step[5].min():.0f}-{100 * oracle_step[5].max():.0f}%)") in text
    calls = m.xs("oracle", level="schedule")["mid_calls_per_round"]
    assert f"({calls.iloc[0]:.2f} calls a round at 0.02, {calls.iloc[-1]:.2f} at 1.0)" in text
    fam = shares.loc["adaptive-family"].unstack("step")
    late = fam.loc[fam.index >= 0.457]
    rounds = int(sh.query("schedule == 'adaptive-family' and ratio == 0.457")["rounds"].iloc[0])
    assert f"at step 1 only ({100 * fam.loc[0.6, 1]:.0f}% of rounds at 0.6; one round of {rounds} at" in text
    assert round(late.loc[0.457, 2] * rounds) == 1 and (late[[3, 4, 5]] == 0).all().all() and late.loc[[0.6, 1.0], 2].eq(0).all()


def test_the_ceiling_tables_and_sentences_hold_ceiling_json():
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
    best = {}  # each learner at its best threshold
    for name, r in c["held_out"].items():
        learner = name.rsplit(" ", 1)[0]
        best[learner] = max(best.get(learner, 0.0), r["tokens_per_s"] / base)
    text = " ".join((REPO_DIR / "README.md").read_text().split())
    assert f"reach {min(best.values()):.2f}-{max(best.values()):.2f}x all-small" in text
    assert f"against the oracle's {c['oracle'] / base:.2f}x" in text
