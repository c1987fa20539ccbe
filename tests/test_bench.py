"""The benchmark harness and `budget="auto"`: tiny models, hand-made numbers, no timed assertions."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from treegraft_lab import bench, budget
from treegraft_lab.config import DecodeConfig
from treegraft_lab.costs import DeviceProfile
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.schedule import artifact
from treegraft_lab.schedule.adaptive import AdaptivePolicy
from treegraft_lab.tiny import tiny_pair

PROMPTS = [
    {"question_id": "q1", "category": "code", "turns": [" ".join(f"w{j % 5}" for j in range(24))]},
    {"question_id": "q2", "category": "math", "turns": [" ".join(f"w{j % 3}" for j in range(20))]},
]


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(scale=4.0)


@pytest.fixture(scope="module")
def result(pair):
    methods = ["ar", "hf-pld", "small", "10101", "no-nd", "adaptive", "recycling", "suffix", "rule:match"]
    return bench.run_bench(pair, PROMPTS, methods, max_new_tokens=8, budget=8, warmup_tokens=4, progress=False, repeats=1)


def test_harness_records_and_summary(result):
    ran = ["ar", "hf-pld", "small", "10101", "no-nd", "recycling", "suffix"]
    assert "adaptive" in result.skipped and "scheduler" in result.skipped["adaptive"]  # no artifact for a tiny pair
    assert "no fitted rule:match" in result.skipped["rule:match"]  # nor a fitted rule
    assert sorted(result.records.method.unique()) == sorted(ran)
    assert len(result.records) == len(PROMPTS) * len(ran)
    assert set(result.summary.category) == {"code", "math", "overall"}
    s = result.summary.set_index(["category", "method"])
    assert s.loc[("overall", "ar"), "speedup"] == pytest.approx(1.0)
    # float32 tiny models, greedy: every method is lossless against plain HF generate
    assert result.records.match.all(), result.records[~result.records.match]
    tree = s.loc[("overall", "10101")]
    assert tree.tokens_per_round == pytest.approx(tree.accepted_per_round + 1)
    assert tree.mid_calls_per_round == pytest.approx(3.0)  # 10101: three mid calls every round
    assert 0 <= tree.overhead_share <= 1 and 0 < tree.verify_share < 1
    assert math.isnan(s.loc[("overall", "hf-pld"), "accepted_per_round"])  # HF exposes no rounds


def test_json_and_tables(result, tmp_path):
    js = result.to_json()
    assert set(js) == {"overall", "per_category", "spread", "same_decisions"}
    assert set(js["per_category"]) == {"code", "math"}
    assert set(js["overall"]) == {"ar", "hf-pld", "small", "10101", "no-nd", "recycling", "suffix"}
    md = bench.render_markdown(result)
    for needle in ("## Main table", "All Small", "HF PLD", "Token Recycling", "Suffix decoding", "## Ablation", "w/o ND", "TreeGraft fixed (10101)",
                   "AMD" if "AMD" in result.meta["hardware"]["cpu"] else result.meta["hardware"]["cpu"][:10],
                   "torch", "Load:", "`adaptive`"):
        assert needle in md
    bench.save(result, tmp_path)
    assert len(pd.read_parquet(tmp_path / "records.parquet")) == len(result.records)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["overall"] == js["overall"] and "hardware" in saved["meta"]


def _rec(q, cat, method, tokens, wall, rounds=math.nan, accepted=math.nan, repeat=0):
    return {"question_id": q, "category": cat, "method": method, "repeat": repeat, "new_tokens": tokens, "wall_s": wall,
            "rounds": rounds, "accepted": accepted, "mid_calls": math.nan, "draft_s": math.nan, "verify_s": math.nan,
            "forward_s": math.nan, "overhead_s": math.nan, "match": True}


def test_speedup_is_mean_of_per_prompt_ratios():
    recs = pd.DataFrame([
        _rec("p1", "a", "ar", 100, 10.0),           # 10 tokens/s
        _rec("p1", "a", "x", 100, 2.0, 40, 60),     # repeats pooled: 200 tokens / 6.6 s = 30 tokens/s
        _rec("p1", "a", "x", 100, 4.6667, 40, 60, repeat=1),
        _rec("p2", "b", "ar", 100, 5.0),            # 20 tokens/s
        _rec("p2", "b", "x", 100, 5.0, 50, 25),     # 20 tokens/s
    ])
    s = bench.summarize(recs).set_index(["category", "method"])
    assert s.loc[("a", "x"), "speedup"] == pytest.approx(3.0, rel=1e-4)
    assert s.loc[("b", "x"), "speedup"] == pytest.approx(1.0)
    assert s.loc[("overall", "x"), "speedup"] == pytest.approx(2.0, rel=1e-4)  # the ratio of totals would be ~1.93
    assert s.loc[("overall", "x"), "accepted_per_round"] == pytest.approx(145 / 130)  # pooled over rounds
    assert s.loc[("overall", "x"), "tokens_per_round"] == pytest.approx(145 / 130 + 1)


def test_cli_json_prints_one_object(pair, tmp_path, monkeypatch, capsys):
    from treegraft_lab import cli
    from treegraft_lab.commands import bench as cmd

    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(q) for q in PROMPTS))
    monkeypatch.setattr(cmd, "load_pair_from_args", lambda args, require_mid=True: pair)
    out = tmp_path / "run"
    rc = cli.main(["bench", "--prompts", str(path), "--methods", "ar,small", "--max-new-tokens", "4",
                   "--budget", "4", "--warmup-tokens", "2", "--out", str(out), "--json"])
    assert rc == 0
    js = json.loads(capsys.readouterr().out)
    assert set(js) == {"overall", "per_category", "spread", "same_decisions", "specbench"}
    assert set(js["overall"]) == {"ar", "small"}
    assert set(js["specbench"]["overall"]) == {"ar", "small"}  # Spec-Bench's ratio of means beside ours
    assert (out / "results.md").is_file() and (out / "summary.parquet").is_file()
    assert cli.main(["bench", "--prompts", str(path), "--methods", "ar,nope"]) == 2


# ---------------------------------------------------------------------------------- auto budget


STEEP = {1: 10.0, 4: 11.0, 8: 14.0, 16: 30.0, 24: 50.0, 32: 70.0, 48: 110.0, 64: 150.0}


def test_choose_budget_follows_the_cost_curve():
    flat, steep = DeviceProfile("flat", {1: 10.0, 64: 10.0}), DeviceProfile("steep", STEEP)
    b_flat, b_steep = budget.choose_budget(flat), budget.choose_budget(steep)
    assert b_flat == 63  # free verification: take the whole budget
    assert 1 <= b_steep < 16 and b_steep < b_flat
    assert budget.choose_budget(flat, max_budget=20) == 20
    assert steep.target_ms(12) == pytest.approx(22.0)
    assert steep.target_ms(80) == pytest.approx(190.0)  # linear beyond the last size


def test_auto_budget_reads_the_profile(pair):
    cfg = DecodeConfig(schedule="10101")
    cheap_draft = budget.auto_budget(pair, cfg, DeviceProfile("a", STEEP, {1: 0.1, 500: 0.1}))
    dear_draft = budget.auto_budget(pair, cfg, DeviceProfile("b", STEEP, {1: 200.0, 500: 200.0}))
    assert 1 <= cheap_draft < dear_draft <= 63  # a fixed drafting cost makes a bigger tree relatively cheaper
    small = budget.auto_budget(pair, DecodeConfig(schedule="small"), DeviceProfile("c", STEEP))
    assert 1 <= small <= 63
    assert budget.auto_budget(pair, DecodeConfig(), DeviceProfile("d", {1: 1.0}), max_budget=5) == 5


def by_hand_budget(target: dict[int, float], draft_ms: float, acceptance: tuple[float, float, float]) -> int:
    """budget.py's documented model, written out: the B in 1..63 maximising (1 + A(B)) / (draft_ms +
    target[B + 1]), A(B) = a_max x / (1 + x), x = (B / half) ** power."""
    a_max, half, power = acceptance

    def tokens_per_ms(b: int) -> float:
        x = (b / half) ** power
        return (1 + a_max * x / (1 + x)) / (draft_ms + target[b + 1])

    return max(range(1, 64), key=tokens_per_ms)


def test_a_decoder_with_auto_budget_takes_the_budget_its_device_profile_implies(pair, monkeypatch):
    """budget="auto": the decoder's budget is the model's best for the drafting cost its schedule
    implies on the profile (10101: 3 mid calls of W x k = 100 nodes and 2 n-gram steps; small: 5
    n-gram steps), so a dearer mid drafter buys a bigger tree."""
    from treegraft_lab.decoder import TreeGraftDecoder

    curve = {n: 10.0 + 0.05 * n * n for n in range(1, 65)}  # every size given: nothing interpolated
    acc = (2.0, 4.0, 1.0)
    monkeypatch.setattr(budget, "ACCEPTANCE", {"small": acc, "default": acc})
    got = {}
    for schedule, mid_ms in (("10101", 0.1), ("10101", 400.0), ("small", 400.0)):
        prof = DeviceProfile("toy", curve, {1: mid_ms, 500: mid_ms}, small_ms=0.5)
        dec = TreeGraftDecoder(pair, DecodeConfig(schedule=schedule, budget="auto"), profile=prof)
        calls = schedule.count("1")
        got[schedule, mid_ms] = dec.budget
        assert dec.budget == by_hand_budget(curve, calls * mid_ms + (5 - calls) * 0.5, acc), (schedule, mid_ms)
    assert got["10101", 0.1] < got["10101", 400.0], got  # the draft profile moved the budget


def test_fit_acceptance_recovers_the_model():
    truth = (2.0, 4.0, 0.8)
    pts = {b: budget.accepted(b, *truth) for b in (2, 4, 8, 16, 32, 63)}
    assert budget.fit_acceptance(pts) == pytest.approx(truth, rel=1e-3)
    assert budget.accepted(4.0, *truth) == pytest.approx(1.0)  # `half` gives a_max / 2


def test_auto_budget_reads_the_adaptive_artifacts_call_rate(tmp_path):
    from test_scheduler import make_artifact

    folder = tmp_path / "sched"
    make_artifact(folder, pair="smollm2-pocket")
    meta = json.loads((folder / "scheduler.json").read_text())
    meta["student_train"] = {"call_rate": 0.2}
    (folder / "scheduler.json").write_text(json.dumps(meta))
    cfg = DecodeConfig(schedule="adaptive", scheduler_path=str(folder))
    assert budget.expected_mid_calls(cfg, AdaptivePolicy(artifact.load(folder))) == pytest.approx(1.0)
    # no artifact: half the steps, as for other policies
    assert budget.expected_mid_calls(DecodeConfig(schedule="adaptive")) == 2.5


def test_a_decoder_with_an_adaptive_schedule_and_budget_auto_loads_the_artifact_once(tmp_path, monkeypatch):
    from test_scheduler import make_artifact

    from treegraft_lab.decoder import TreeGraftDecoder

    make_artifact(tmp_path, profile_class="a100-paper", growth="lookup", small="ngram+recycling", recycle_below=2,
                  student_train={"call_rate": 0.2})
    loads = []
    monkeypatch.setattr(artifact, "load", lambda folder, _load=artifact.load: loads.append(folder) or _load(folder))
    dec = TreeGraftDecoder(tiny_pair(), DecodeConfig(schedule="adaptive", budget="auto", clock="a100-paper",
                                                     scheduler_path=str(tmp_path)))
    assert loads == [tmp_path] and dec.budget == budget.auto_budget(None, dec.config, dec.profile, dec.policy)


def _chain_tree(edge_ps):
    """Root -> a -> b -> ... with the given n-gram edge scores, plus one unlikely sibling of a."""
    import math

    from treegraft_lab.tree import SMALL, DraftTree

    t = DraftTree.start(0)
    parent = 0
    for i, p in enumerate(edge_ps, 1):
        parent, _ = t.add_child(parent, i, math.log(p), SMALL, i, ngram_n=3)
    t.add_child(0, 99, math.log(0.05), SMALL, 1, ngram_n=1)
    return t


def test_value_pruning_verifies_everything_where_nodes_cost_nothing():
    from treegraft_lab.budget import ValuePruner

    tree = _chain_tree([0.9, 0.8, 0.7])
    flat = ValuePruner(DeviceProfile("t", {1: 50.0, 64: 50.0}))
    assert flat.prune(tree, 63) == [0, 1, 2, 3, 4]  # every live node, the unlikely sibling too
    assert flat.prune(tree, 2) == [0, 1, 2]  # never more than the budget: the two most likely


def test_value_pruning_keeps_only_nodes_worth_their_verification_time():
    from treegraft_lab.budget import ValuePruner

    steep = ValuePruner(DeviceProfile("t", {1: 50.0, 2: 75.0, 64: 1625.0}))  # each node costs half a plain decoding step
    tree = _chain_tree([0.9, 0.8, 0.3])
    # chances 0.9, 0.72, 0.216, 0.05: worth a node when above 25 ms * (1 / 50 ms) = 0.5
    assert steep.prune(tree, 63) == [0, 1, 2]
    weak = _chain_tree([0.4])
    assert steep.prune(weak, 63) == [0]  # nothing worth it: the root alone, a plain decoding step


def test_value_pruning_calibrates_each_drafters_chances_from_what_the_target_accepted():
    from treegraft_lab.budget import ValuePruner

    pr = ValuePruner(DeviceProfile("t", {1: 50.0, 2: 75.0, 64: 1625.0}))
    tree = _chain_tree([0.75])
    before = pr.chances(tree)[1]
    for _ in range(20):  # the 3-gram edge scored 0.75 is rejected every time
        pr.observe(tree, [0, 1, 2], [0], 50.0)
    assert pr.bins[("n3", 3)] == [0.0, 20.0]
    assert pr.bins[("n1", 0)] == [0.0, 20.0]
    assert pr.chances(tree)[1] < 0.1 < before
    assert pr.prune(tree, 63) == [0]
    assert pr.rate() == pytest.approx(1 / 50)  # 20 tokens in 1,000 ms: exactly plain decoding's rate
    pr.observe(tree, [0], [0, 1], 100.0)  # a round of 2 tokens in 100 ms lifts the run above it
    assert pr.rate() == pytest.approx(22 / 1100)
    slow = ValuePruner(DeviceProfile("t", {1: 50.0, 64: 50.0}))
    slow.observe(tree, [0], [0], 500.0)  # 1 token in 500 ms: the rate never drops below 1 / 50
    assert slow.rate() == pytest.approx(1 / 50)


def test_a_modelled_clock_reruns_the_tree_methods_and_prices_the_hf_ones():
    pair = tiny_pair("llama", scale=4.0)
    prompts = [{"question_id": "q1", "category": "c", "turns": [[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]]}]
    res = bench.run_bench(pair, prompts, ["ar", "hf-pld", "small", "10101"], max_new_tokens=8, warmup_tokens=2,
                          progress=False, model_on=["a100-paper"], repeats=1)
    rec = res.records.set_index(["clock", "method"])
    assert set(res.records.clock) == {"wall", "a100-paper"} and len(res.records) == 8
    from treegraft_lab import costs

    a100 = costs.load("a100-paper")
    ar = rec.loc[("a100-paper", "ar")]
    assert ar.wall_s == pytest.approx(ar.new_tokens * a100.target_ms(1) / 1000)  # one 1-token forward per token
    assert ar.measured_wall_s == rec.loc[("wall", "ar")].wall_s
    assert rec.loc[("a100-paper", "10101")].match  # rerun deciding on the A100 profile, still lossless
    js = res.to_json()
    assert set(js["modelled"]["a100-paper"]["overall"]) == {"ar", "hf-pld", "small", "10101"}
    assert "# Modelled on a100-paper" in bench.render_markdown(res)


def test_wall_repeats_do_not_repeat_the_modelled_clock():
    pair = tiny_pair("llama", scale=4.0)
    prompts = [{"question_id": "q1", "category": "c", "turns": [[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]]}]
    res = bench.run_bench(pair, prompts, ["ar", "hf-pld", "small"], max_new_tokens=8, warmup_tokens=2, progress=False,
                          model_on=["a100-paper"], repeats=2, model_repeats=1)
    reps = res.records.groupby("clock")["repeat"].agg(lambda r: sorted(set(r)))
    assert reps["wall"] == [0, 1] and reps["a100-paper"] == [0]
    assert len(res.records) == 3 * 2 + 3  # ar, hf-pld, small twice on the wall clock, once modelled


def test_interleaved_runs_every_method_on_every_prompt_in_rotated_order():
    from treegraft_lab.bench import interleaved

    calls = []

    def runner(name):
        def run(ids, n):
            calls.append((name, ids[0], n))
            return {"token_ids": [0] * n, "wall_s": 1.0}
        return run

    out = interleaved({"a": runner("a"), "b": runner("b"), "c": runner("c")}, [[10], [11]], repeats=2, max_new_tokens=8)
    assert calls[:3] == [("a", 10, 16), ("b", 10, 16), ("c", 10, 16)]  # the untimed warm-up
    timed = calls[3:]
    assert [c[0] for c in timed[:3]] == ["a", "b", "c"] and [c[0] for c in timed[3:6]] == ["b", "c", "a"]
    assert all(len(out[m][i]) == 2 for m in "abc" for i in (0, 1)) and all(c[2] == 8 for c in timed)
    assert [c[1] for c in timed] == [10] * 6 + [11] * 6


def test_a_decoder_that_keeps_state_across_runs_repeats_each_prompt_from_the_same_start():
    from treegraft_lab.bench import interleaved

    seen = []

    def stateful(name):
        box = {"runs": 0}  # the state a decoder keeps across runs: here, how many runs it saw

        def run(ids, n):
            seen.append((name, ids[0], n, box["runs"]))
            box["runs"] += 1
            return {"token_ids": [0] * n, "wall_s": 1.0}
        run.carried_state = lambda: dict(box)
        run.restore_state = lambda state: box.update(state)
        return run

    interleaved({"a": stateful("a"), "b": stateful("b")}, [[10], [11], [12]], repeats=3, max_new_tokens=8)
    assert seen[:2] == [("a", 10, 16, 0), ("b", 10, 16, 0)]  # the warm-up starts fresh...
    timed = [s for s in seen[2:]]
    for name in "ab":
        starts = [(ids, runs) for m, ids, _, runs in timed if m == name]
        # ...and leaves nothing: prompt 10 three times from 0 runs, 11 from 1 (10 seen once), 12 from 2
        assert starts == [(10, 0)] * 3 + [(11, 1)] * 3 + [(12, 2)] * 3


def test_the_bench_repeats_a_prompt_with_token_recyclings_matrix_as_it_was_before_the_prompt(pair):
    res = bench.run_bench(pair, PROMPTS, ["ar", "small"], max_new_tokens=12, budget=8, warmup_tokens=4,
                          progress=False, repeats=3, growth={"small": "ngram+recycling"})
    small = res.records[(res.records.method == "small") & (res.records.clock == "wall")]
    assert small.match.all()
    per_prompt = small.groupby("question_id").decisions.nunique()
    assert (per_prompt == 1).all()  # the three repeats of a prompt: one computation
    assert small.decisions.nunique() == len(PROMPTS)


# ---------------------------------------------------------------------------------- spread, same decisions


def test_each_repeats_ratio_reads_ar_from_the_same_repeat_and_the_spread_is_their_min_and_max():
    recs = pd.DataFrame([
        _rec("p1", "a", "ar", 100, 10.0), _rec("p1", "a", "ar", 100, 5.0, repeat=1),     # 10, then 20 tokens/s
        _rec("p1", "a", "x", 100, 5.0), _rec("p1", "a", "x", 100, 5.0, repeat=1),        # 20, 20: ratios 2.0 and 1.0
        _rec("p2", "a", "ar", 100, 10.0), _rec("p2", "a", "ar", 100, 10.0, repeat=1),    # 10, 10
        _rec("p2", "a", "x", 100, 10.0), _rec("p2", "a", "x", 100, 2.5, repeat=1),       # 10, 40: ratios 1.0 and 4.0
    ])
    ratios = bench.repeat_ratios(recs).set_index(["method", "repeat"]).ratio
    assert ratios[("x", 0)] == pytest.approx((2.0 + 1.0) / 2) and ratios[("x", 1)] == pytest.approx((1.0 + 4.0) / 2)
    assert ratios[("ar", 0)] == pytest.approx(1.0) and ratios[("ar", 1)] == pytest.approx(1.0)
    x = bench.summarize(recs).set_index(["category", "method"]).loc[("overall", "x")]
    assert (x.spread_lo, x.spread_hi, x.repeats) == (pytest.approx(1.5), pytest.approx(2.5), 2)
    assert bench.speedup_cell(x) == f"{x.speedup:.2f}x (1.50–2.50)"


def test_one_repeat_prints_no_spread():
    recs = pd.DataFrame([_rec("p1", "a", "ar", 100, 10.0), _rec("p1", "a", "x", 100, 5.0)])
    x = bench.summarize(recs).set_index(["category", "method"]).loc[("overall", "x")]
    assert x.repeats == 1 and bench.speedup_cell(x) == "2.00x"


def test_methods_that_decode_identically_are_named_timed_together_and_print_one_number(pair, monkeypatch):
    # "00000" never calls the mid drafter: the very decisions of all-small; 10101 decides otherwise
    monkeypatch.setattr(bench, "METHODS", (*bench.METHODS, "00000"))
    monkeypatch.setitem(bench.TREE_METHODS, "00000", {"schedule": "00000"})
    res = bench.run_bench(pair, PROMPTS, ["ar", "small", "00000", "10101"], max_new_tokens=8, budget=8, warmup_tokens=4,
                          progress=False, repeats=2)
    digests = res.records.groupby("method").decisions.agg(set)
    assert digests["small"] == digests["00000"] and not digests["small"] & digests["10101"]
    s = res.summary[res.summary.clock == "wall"].set_index(["category", "method"])
    for cat in ("code", "math", "overall"):
        small, twin, other = s.loc[(cat, "small")], s.loc[(cat, "00000")], s.loc[(cat, "10101")]
        assert twin.same_as == "small" and small.same_as == "" and other.same_as == ""
        assert twin.speedup == small.speedup and twin.tokens_per_s == small.tokens_per_s  # one pool, one number
        assert (twin.spread_lo, twin.spread_hi) == (small.spread_lo, small.spread_hi)
        assert twin.generations == small.generations == 2 * 2 * (2 if cat == "overall" else 1)
    assert res.to_json()["same_decisions"] == {"00000": "small"}
    from treegraft_lab import specbench

    sb = specbench.speedup_table(specbench.records_per_question(res.records)).set_index(["group", "method"])
    assert (sb.xs("small", level="method").speedup == sb.xs("00000", level="method").speedup).all()
    assert "| 00000 (= small) |" in bench.detail_table(s.reset_index())


def test_the_decisions_digest_reads_the_kept_tree_not_only_tokens_schedule_and_acceptance(pair):
    from treegraft_lab.decoder import TreeGraftDecoder

    ids = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]
    wide, narrow = (bench.decoder_runner(TreeGraftDecoder(pair, DecodeConfig(schedule="10101", budget=b, clock="a100-paper")))(ids, 12)
                    for b in (12, 8))
    same = ("token_ids", "rounds", "accepted", "mid_calls")
    assert [wide[k] for k in same] == [narrow[k] for k in same]  # the same tokens, rounds and acceptance ...
    assert wide["decisions"] != narrow["decisions"]  # ... from other kept trees


def test_the_demo_names_the_adaptive_row_that_made_no_mid_call_and_prints_its_twins_number():
    from treegraft_lab.commands.demo import method_table

    def rec(method, wall, repeat, decisions, mid_calls=0.0):
        return {**_rec("p1", "copies", method, 60, wall, rounds=20, accepted=40, repeat=repeat),
                "mid_calls": mid_calls, "decisions": decisions, "clock": "wall"}

    recs = [rec("ar", 2.0, r, "") for r in (0, 1, 2)]
    recs += [rec("small", w, r, "d") for r, w in enumerate((1.0, 0.8, 1.2))]
    recs += [rec("adaptive", w, r, "d") for r, w in enumerate((1.1, 0.9, 1.3))]  # the same decisions, timed apart
    recs += [rec("10101", 1.5, r, "e", mid_calls=60.0) for r in (0, 1, 2)]
    records = pd.DataFrame(recs)
    rows = method_table(bench.BenchResult(records, bench.summarize(records), {}), "wall", ["copies"])
    small, adaptive, fixed = (next(r for r in rows if label in r) for label in ("all-small", "adaptive", "10101"))
    assert "min–max" in rows[0]
    assert "(same decisions as TreeGraft all-small; no mid call)" in adaptive
    assert adaptive.split("(")[0].split()[2:] == small.split("(")[0].split()[2:]  # one pool, one number
    assert "1.60–2.35" in small  # ar's 30 tokens/s against each repeat's pool: 120 tokens in 2.1, 1.7 and 2.5 s
    assert "(" not in fixed  # it called the mid drafter and decided otherwise


def test_value_pruning_keeps_fewer_nodes_after_a_long_context_where_the_profile_prices_tree_tokens_dearer_there():
    from treegraft_lab.budget import ValuePruner

    # after 256 cached tokens a node costs a fifth of a plain step; after 1,536 (the long curve) a whole one
    prof = DeviceProfile("t", {1: 50.0, 2: 60.0, 64: 680.0}, target_long={1: 50.0, 2: 100.0, 64: 3200.0}, context_long=1536)
    tree = _chain_tree([0.9, 0.8, 0.7])  # chances 0.9, 0.72, 0.50, 0.05
    pr = ValuePruner(prof)
    assert pr.prune(tree, 63) == [0, 1, 2, 3] == pr.prune(tree, 63, context=256)  # the short curve: 3 chain nodes pay
    assert pr.prune(tree, 63, context=1536) == [0]  # a node costs a plain step: none pays
    assert pr.prune(tree, 63, context=900) == [0, 1, 2]  # half way a node costs 0.6 of a step: 0.9 and 0.72 pay



def test_value_pruning_starts_a_run_from_what_each_drafters_edges_earned_in_earlier_runs():
    from treegraft_lab.budget import ValuePruner

    pr = ValuePruner(DeviceProfile("t", {1: 50.0, 2: 75.0, 64: 1625.0}))
    tree = _chain_tree([0.75])
    fresh = pr.chances(tree)[1]
    assert fresh == pytest.approx(0.75)  # nothing seen yet: the drafter's own score
    for _ in range(20):  # a run where the 3-gram edge is rejected every time
        pr.observe(tree, [0, 1, 2], [0], 50.0)
    pr.start()  # the next run: its own bins are empty, the source's rate is carried
    assert pr.bins == {} and pr.carried[("n3", -1)] == [0.0, 20.0]
    prior = pr.chances(tree)[1]
    assert prior == pytest.approx((0 + 2 * 0.75) / (20 + 2))  # the 3-gram drafter's earned rate as the prior
    other = ValuePruner(pr.profile, carried={})  # a pruner that saw no earlier run starts from the score again
    assert other.chances(tree)[1] == pytest.approx(fresh)


def test_a_repeats_rows_are_the_wall_runs_then_each_modelled_clocks_with_hf_methods_priced_by_their_forwards():
    prof = DeviceProfile("flat", {1: 10.0, 64: 10.0}, {1: 1.0, 64: 1.0}, small_ms=0.5)
    q, ids = {"question_id": "q1", "category": "code"}, [1, 2, 3]
    outs = {("ar", "wall"): {"token_ids": [7, 8, 9], "wall_s": 0.3, "target_calls": [3, 1, 1]},
            ("small", "wall"): {"token_ids": [7, 8, 9], "wall_s": 0.1, "rounds": 2},
            ("small", "flat"): {"token_ids": [7, 8, 0], "wall_s": 0.2, "modelled_ms": 40.0, "rounds": 2}}
    order = [("ar", "wall"), ("small", "wall"), ("small", "flat")]
    rows = bench.repeat_rows(q, ids, 1, order, outs, ["ar", "small"], {"flat": prof})
    assert [(r["method"], r["clock"], r["repeat"]) for r in rows] == [
        ("ar", "wall", 1), ("small", "wall", 1), ("ar", "flat", 1), ("small", "flat", 1)]
    ar_flat, small_flat = rows[2], rows[3]
    assert ar_flat["wall_s"] == pytest.approx(0.03)  # three target forwards of 10 ms, the prefill as one token
    assert ar_flat["measured_wall_s"] == 0.3 and small_flat["measured_wall_s"] == 0.2
    assert small_flat["wall_s"] == pytest.approx(0.04) and small_flat["diverge_at"] == 2 and not small_flat["match"]
    wall_only = bench.repeat_rows(q, ids, 1, order, outs, ["ar", "small"], {})  # a repeat past model_repeats
    assert [(r["method"], r["clock"]) for r in wall_only] == [("ar", "wall"), ("small", "wall")] and wall_only[1]["match"]


def test_the_wall_clock_runs_every_method_unless_modelled_only_and_ar_comes_first_once():
    assert bench.methods_with_ar(["small", "ar", "small", "hf-pld"]) == ["ar", "small", "hf-pld"]
    with pytest.raises(TreeGraftError, match="unknown method"):
        bench.methods_with_ar(["small", "nope"])
    methods = ["ar", "small", "hf-pld"]
    assert bench.wall_keys(methods, {"a100-paper": None}, False) == [(m, "wall") for m in methods]
    assert bench.wall_keys(methods, {}, True) == [(m, "wall") for m in methods]  # no modelled clock: all on the wall
    assert bench.wall_keys(methods, {"a100-paper": None}, True) == [("ar", "wall"), ("hf-pld", "wall")]


def test_the_bench_command_reads_its_methods_and_knows_which_need_the_mid_drafter():
    from types import SimpleNamespace

    from treegraft_lab.commands import bench as cmd

    assert cmd.bench_methods(" ar, small,,10101 ") == ["ar", "small", "10101"]
    with pytest.raises(TreeGraftError, match="unknown method\\(s\\) nope; known: ar, "):
        cmd.bench_methods("ar,nope")
    assert not cmd.needs_mid(["ar", "hf-pld", "small", "recycling", "suffix"])
    assert cmd.needs_mid(["ar", "10101"]) and cmd.needs_mid(["hf-assisted"])
    pair = SimpleNamespace(name="p", target_id="t", mid_id="")
    args = SimpleNamespace(prompts="treegraft-suite", split="eval", limit_per_category=2)
    assert cmd.run_settings(pair, args) == {"pair": "p", "target": "t", "mid": "", "prompt_suite": "treegraft-suite",
                                            "split": "eval", "limit_per_category": 2}
