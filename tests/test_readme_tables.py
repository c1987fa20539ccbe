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
DOCS = ("README.md", "docs/results.md", "docs/design.md", "docs/gpu.md")  # where the tables and sentences live


def docs_text() -> str:
    """The README and the docs pages it links, as one text."""
    return "\n".join((REPO_DIR / name).read_text() for name in DOCS)


def readme_table(header: str) -> list[list[str]]:
    """The body rows (cells stripped) of the README table whose header line is `header`."""
    lines = docs_text().splitlines()
    hits = [i for i, line in enumerate(lines) if line.strip() == header]
    assert len(hits) == 1, f"expected one README table headed {header!r}, found {len(hits)}"
    rows = []
    for line in lines[hits[0] + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def labelled(header: str) -> dict[str, list[str]]:
    """The README table headed `header` as {row label: its other cells}, bold marks dropped (they
    are emphasis, not numbers); every label once."""
    rows = readme_table(header)
    out = {r[0]: [c.replace("**", "") for c in r[1:]] for r in rows}
    assert len(out) == len(rows), f"a row label repeats in the README table {header!r}"
    return out


def assert_rows(header: str, want: dict[str, list[str]], source: str) -> None:
    """Each README row, found by its label, holds exactly `want[label]` as formatted text."""
    got = labelled(header)
    assert list(got) == list(want), f"README rows {list(got)} against {source}'s {list(want)}"
    for label, cells in want.items():
        assert got[label] == cells, f"README row {label!r}: {got[label]} against {source}: {cells}"


def x(v: float) -> str:
    return f"{v:.2f}x"


def bench_summary(folder: str, clock: str) -> pd.DataFrame:
    """A benchmark's summary rows on `clock`, indexed by (category, method)."""
    d = pd.read_parquet(DATA_DIR / "bench" / folder / "summary.parquet")
    return d[d["clock"] == clock].set_index(["category", "method"])


@pytest.mark.parametrize("header, folder, clock, columns", [
    ("| category | all-small | adaptive | HF prompt lookup | all-small / prompt lookup | suffix | Token Recycling |",
     "smollm2-pocket-wall-peers", "wall", ["small", "adaptive", "hf-pld", "small/hf-pld", "suffix", "recycling"]),
    ("| category | all-small | adaptive | HF prompt lookup | all-small / HF prompt lookup |",
     "smollm2-pocket-a100-lookup", "a100-paper", ["small", "adaptive", "hf-pld", "small/hf-pld"]),
])
def test_the_readme_per_category_bench_tables_match_their_results(header, folder, clock, columns):
    sp = bench_summary(folder, clock)["speedup"]

    def cell(cat: str, col: str) -> str:
        a, _, b = col.partition("/")
        return f"{sp[cat, a] / sp[cat, b]:.2f}" if b else x(sp[cat, a])

    assert_rows(header, {cat: [cell(cat, c) for c in columns] for cat in (*CATEGORIES, "overall")}, folder)


SMALL_AB = {  # README label -> the method of data/growth/small-ab-wall.json
    "HF prompt lookup": "HF prompt lookup",
    "n-gram": "ngram",
    "n-gram + recycling, recycled candidates under every node": "ngram+recycling, everywhere",
    "n-gram + recycling, where the match is shorter than 1": "ngram+recycling, match < 1",
    "n-gram + recycling, where the match is shorter than 2 (default)": "ngram+recycling, match < 2 (default)",
    "n-gram + recycling, where the match is shorter than 3": "ngram+recycling, match < 3",
}


def test_the_readme_small_drafter_table_matches_its_json():
    doc = json.loads((DATA_DIR / "growth" / "small-ab-wall.json").read_text())
    by_method = {r["method"]: r for r in doc["rows"]}
    assert set(by_method) - {"plain decoding"} == set(SMALL_AB.values())
    header = ("| small drafter | speedup over plain | / prompt lookup | worst category / prompt lookup | code | math "
              "| multi_turn | qa | rewrite | summarization |")
    want = {label: [x(r["speedup"]), f"{r['over_prompt_lookup']:.3f}", f"{r['worst_category_over_prompt_lookup']:.3f}",
                    *(x(r["per_category"][c]) for c in CATEGORIES)]
            for label, r in ((label, by_method[m]) for label, m in SMALL_AB.items())}
    assert_rows(header, want, "small-ab-wall.json")


SMALL_MODELLED = {  # README label -> the entry of data/growth/small-a100-paper-topk.json
    "HF prompt lookup (peer)": "HF prompt lookup",
    "suffix decoding (peer)": "suffix decoding (the peer)",
    "n-gram, full growth": "release",
    "suffix, full growth": "release, suffix",
    "n-gram + suffix, full growth": "release, n-gram + suffix",
    "n-gram, lookup growth (default)": "lookup, n-gram",
    "suffix, lookup growth": "lookup, suffix",
    "n-gram + suffix, lookup growth": "lookup, n-gram + suffix",
}


def test_the_readme_modelled_small_drafter_table_matches_its_json():
    doc = json.loads((DATA_DIR / "growth" / "small-a100-paper-topk.json").read_text())
    assert set(doc["speedup"]) == set(SMALL_MODELLED.values())
    want = {label: [x(doc["speedup"][key][c]) for c in (*CATEGORIES, "overall")] for label, key in SMALL_MODELLED.items()}
    assert_rows("| small drafter, growth | code | math | multi_turn | qa | rewrite | summarization | overall |", want,
                "small-a100-paper-topk.json")


def test_the_readme_main_and_ablation_tables_match_the_modelled_benchmark():
    from treegraft_lab.viz.stats import bench_acceptance

    folder = "smollm2-pocket-a100-modelled"
    s = bench_summary(folder, "a100-paper").loc["overall"]
    rec = pd.read_parquet(DATA_DIR / "bench" / folder / "records.parquet")
    acc = bench_acceptance(rec)
    a = acc[(acc["clock"] == "a100-paper") & (acc["category"] == "overall")].set_index("method")["A"]
    ours = "ours, SmolLM2-135M / pocket drafter, modelled on a100-paper"
    main = labelled("| main table (speedup over plain decoding) | All Small | All Mid | TreeGraft (adaptive) | oracle "
                    "| HF prompt lookup |")
    assert main[ours] == [x(s.loc[m, "speedup"]) for m in ("small", "mid", "adaptive", "oracle", "hf-pld")]
    abl = labelled("| ablation (speedup / A) | CSD | w/o EG | w/o ND | fixed 10101 | adaptive |")
    methods = ("csd", "no-eg", "no-nd", "10101", "adaptive")
    assert abl["ours, modelled on a100-paper, all 6 categories"] == [f"{x(s.loc[m, 'speedup'])} / {a[m]:.2f}" for m in methods]
    assert abl["ours: accepted draft tokens / round (our definition)"] == [f"{s.loc[m, 'accepted_per_round']:.2f}"
                                                                          for m in methods]


def _or_dash(v: float, fmt: str) -> str:
    return "-" if pd.isna(v) else format(v, fmt)


def test_the_readme_release_growth_wall_table_matches_its_benchmark():
    from treegraft_lab.viz.stats import bench_acceptance

    folder = "smollm2-pocket-wall-value"
    s = bench_summary(folder, "wall").loc["overall"]
    acc = bench_acceptance(pd.read_parquet(DATA_DIR / "bench" / folder / "records.parquet"))
    a = acc[acc["category"] == "overall"].set_index("method")["A"]
    labels = {"plain decoding (`ar`, HF `generate` on the packed path)": "ar", "HF prompt lookup (`hf-pld`)": "hf-pld",
              "TreeGraft all-small": "small", "TreeGraft adaptive (`cpu-float32-value` scheduler)": "adaptive",
              "TreeGraft fixed 10101": "10101"}
    want = {label: [f"{s.loc[m, 'tokens_per_s']:.1f}", x(s.loc[m, "speedup"]), _or_dash(a.get(m), ".2f"),
                    _or_dash(s.loc[m, "accepted_per_round"], ".2f"), _or_dash(s.loc[m, "mid_calls_per_round"], ".2f"),
                    f"{100 * s.loc[m, 'match_rate']:.0f}%"] for label, m in labels.items()}
    assert_rows("| method | tokens/s | speedup over plain decoding | A (new tokens / target forward) "
                "| ours: accepted draft tokens / round | mid calls / round | identical to plain |", want, folder)


def test_the_readme_wall_peers_table_matches_its_benchmark():
    from treegraft_lab import specbench
    from treegraft_lab.viz.stats import bench_acceptance

    folder = "smollm2-pocket-wall-peers"
    s = bench_summary(folder, "wall").loc["overall"]
    rec = pd.read_parquet(DATA_DIR / "bench" / folder / "records.parquet")
    acc = bench_acceptance(rec)
    a = {**acc[acc["category"] == "overall"].set_index("method")["A"].to_dict(), "ar": 1.0}  # plain: one token a forward
    ratio_of_means = specbench.speedup_table(specbench.records_per_question(rec)).set_index(["group", "method"])["speedup"]
    labels = {"plain decoding (`ar`)": "ar", "HF prompt lookup (`hf-pld`)": "hf-pld",
              "Token Recycling (`recycling`)": "recycling", "suffix decoding (`suffix`)": "suffix",
              "TreeGraft all-small": "small", "TreeGraft adaptive (learned scheduler)": "adaptive",
              "TreeGraft `rule:match`": "rule:match", "TreeGraft `rule:score`": "rule:score"}
    peers = ("recycling", "suffix")  # their own trees, no mid drafter: "-" where the bench records 0 calls
    assert (s.loc[list(peers), "mid_calls_per_round"] == 0).all()
    want = {label: [f"{s.loc[m, 'tokens_per_s']:.1f}", x(s.loc[m, "speedup"]), x(ratio_of_means["overall", m]),
                    f"{a[m]:.2f}" if m in a else "not counted",
                    "-" if m in peers else _or_dash(s.loc[m, "mid_calls_per_round"], ".2f"),
                    f"{100 * s.loc[m, 'match_rate']:.0f}%"] for label, m in labels.items()}
    assert_rows("| method | tokens/s | speedup over plain (mean of per-prompt ratios) | Spec-Bench speedup (ratio of means) "
                "| tokens / target forward (A, bonus included) | mid calls / round | identical to plain |", want, folder)


def test_the_readme_regime_table_is_what_the_regime_command_prints(capsys):
    from treegraft_lab import cli

    assert cli.main(["regime", "--markdown"]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    lines = docs_text().splitlines()
    assert printed and lines.count(printed[0]) == 1, "the README has no (or two) tables headed as the command's"
    i = lines.index(printed[0])
    assert lines[i:i + len(printed) + 1] == [*printed, ""], "README regime table differs from `treegraft-lab regime --markdown`"


def test_the_readme_column_beside_the_papers_pairs_holds_the_regime_maps_numbers_at_0_6():
    from treegraft_lab import costs, regime

    df, _ = regime.load(DATA_DIR / "regime" / "smollm2-pocket-lookup-topk")
    reps = regime.split(df, 5)
    m = regime.regime_map(reps, costs.load("a100-paper"), [0.6], ["all-small", "all-mid", "oracle"]).set_index("schedule")
    runs = regime.load_decodes(DATA_DIR / "regime" / "smollm2-pocket-lookup-topk", "a100-paper")
    dec = regime.summary(runs[runs["ratio"] == 0.6]).set_index("schedule")
    header = ("| speedup over plain decoding | Qwen3-32B / 1.7B (paper, n = 480) | LLaMA-70B / 1B (paper, n = 480) "
              "| ours, extra: SmolLM2-135M / pocket, modelled (n = 12) |")
    rows = {label: cells[2] for label, cells in labelled(header).items()}
    assert len(reps) == 12
    assert {name: rows[name] for name in ("all-small", "all-mid", "oracle")} == {
        name: x(m.loc[name, "speedup"]) for name in ("all-small", "all-mid", "oracle")}
    assert rows["TreeGraft (adaptive)"] == (f"{x(dec.loc['adaptive-family', 'speedup'])} (family), "
                                            f"{x(dec.loc['adaptive-single', 'speedup'])} (single-profile)")


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
    text = " ".join(docs_text().split())
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
    text = " ".join(docs_text().split())
    assert f"reach {min(best.values()):.2f}-{max(best.values()):.2f}x all-small" in text
    assert f"against the oracle's {c['oracle'] / base:.2f}x" in text


SPECBENCH_HEADER = ("| task group (questions) | small: Spec-Bench speedup (speed.py) | small: ours (mean of per-question ratios) "
                    "| small: mean accepted tokens | 10101: Spec-Bench speedup (speed.py) | 10101: ours | 10101: mean accepted tokens |")


def specbench_rows() -> dict[str, list[str]]:
    """The README's Spec-Bench rows from the committed answer files: speed.py's speedup (the `ar` baseline re-tokenised
    with the target's tokenizer), ours, and the mean accepted tokens, for `small` and `10101`."""
    from transformers import AutoTokenizer

    from treegraft_lab import specbench
    from treegraft_lab.zoo.target import ensure_target

    answers, _ = specbench.read_answers(DATA_DIR / "specbench" / "example-answers")
    pq = specbench.per_question(answers, AutoTokenizer.from_pretrained(ensure_target()))
    t = specbench.speedup_table(pq, "ar").set_index(["group", "method"])
    rows = {}
    for g in dict.fromkeys(t.index.get_level_values("group")):
        cells = [f"{t.loc[(g, m), c]:.3f}x" if c != "mean_accepted" else f"{t.loc[(g, m), c]:.2f}"
                 for m in ("small", "10101") for c in ("speedup", "speedup_per_question", "mean_accepted")]
        rows[f"{g} ({t.loc[(g, 'small'), 'questions']})"] = cells
    return rows


def test_the_readme_specbench_table_is_speed_pys_arithmetic_on_the_answer_files():
    assert_rows(SPECBENCH_HEADER, specbench_rows(), "data/specbench/example-answers")
