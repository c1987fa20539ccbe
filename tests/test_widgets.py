"""The step-through viewer redraws in place from a recorded run; the playground replays a round start."""

from __future__ import annotations

import base64
import html
import io
import json
import re
import types

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from treegraft_lab import TreeGraftDecoder, measure, record
from treegraft_lab.config import preset
from treegraft_lab.costs import profile_name
from treegraft_lab.views.playground import SchedulePlayground
from treegraft_lab.views.step_through import (
    ROUND_PX,
    VERIFY,
    StepThroughViewer,
    output_html,
    round_pieces,
)
from treegraft_lab.viz.runs import accepted_spans, round_context
from treegraft_lab.workbench import tiny_run

PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]


class IdTokenizer:
    """Decodes id i as "t{i} "; no chat template (prompts are token ids here)."""

    chat_template = eos_token_id = None

    def __len__(self) -> int:
        return 64

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(f"t{int(i)} " for i in ids)

    def __call__(self, text: str) -> dict:  # words to ids (the device profile times n-gram steps on real text)
        return {"input_ids": [sum(map(ord, w)) % 64 for w in text.split()]}


def tiny_lm(layers: int, seed: int):
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=64, max_position_embeddings=256,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)  # sharper distributions: the n-gram drafter gets matches
    model.generation_config.eos_token_id = None
    return model


def tiny_pair():
    target, mid = tiny_lm(2, 0), tiny_lm(1, 1)
    return types.SimpleNamespace(name="tiny", tokenizer=IdTokenizer(), target=target, mid=mid,
                                 device=target.device, dtype=torch.float32)


@pytest.fixture(scope="module")
def tiny():
    pair = tiny_pair()  # the run is priced on this device's profile, as the playground's default clock
    dec = TreeGraftDecoder(pair, preset("full", schedule="10101", budget=12), profile=measure.resolve("wall", pair))
    with record(dec) as rec:
        gen = dec.generate(PROMPT, max_new_tokens=20)
    return pair, rec.to_run(), gen


def test_round_context_is_the_prompt_plus_tokens_emitted_by_earlier_rounds(tiny):
    pair, run, gen = tiny
    assert round_context(run, 0) == PROMPT
    acc = run.rounds["accepted"].tolist()
    for rd in range(1, len(acc)):
        n = sum(a + 1 for a in acc[:rd])
        assert round_context(run, rd) == PROMPT + gen.token_ids[:n]
    spans = accepted_spans(run)
    assert spans[0][1] == 0 and spans[-1][2] == len(gen.token_ids)


def test_round_pieces_rebuild_the_output_text_without_a_tokenizer(tiny):
    _, run, gen = tiny
    text = "".join(a + b for a, b in round_pieces(run))
    assert text.startswith(run.runs.iloc[0]["output_text"].strip())
    assert 'class="tg-accepted"' in output_html(run, 1)


def test_viewer_redraws_the_figure_when_the_step_or_round_moves():
    run = tiny_run(rounds=3)
    v = StepThroughViewer(run, round=0)  # round 0, step 1 (no round given: the showcase round and step)
    first = v.figure
    n_points = sum(len(t.x) for t in first.data if t.x)
    v.step.value = 3
    assert v.figure is not first and v.plot in v.children
    assert sum(len(t.x) for t in v.figure.data if t.x) > n_points
    assert "after draft step 3" in v.figure.layout.title.text
    v.step.value = VERIFY
    assert "verified" in v.figure.layout.title.text
    v.round.value = 2
    assert v.step.value == 1 and "round 2" in v.figure.layout.title.text
    assert "round 2" in v.info.value and "tg-accepted" in v.text.value
    assert "tg-step-slider" in v.step._dom_classes


def test_playground_replays_the_recorded_round_start(tiny):
    pair, run, gen = tiny
    pg = SchedulePlayground(pair, run, round=1)
    assert pg.mask == run.rounds.iloc[1]["schedule"]
    pg.toggles[1].value = True
    pg.budget.value = 8
    df = pg.replay()
    names = list(df["setting"])
    assert names[0] == "recorded run" and "all-small" in names and "all-mid" in names
    assert names[1] == "plain decoding" and names[2].startswith("yours (11101")
    assert (df["kept"].iloc[1:] <= 8).all()
    assert len(pg.figure.data) > 0 and "replay of round 1" in pg.figure.layout.title.text.replace("<br>", " ")
    assert pg.figure.layout.xaxis.visible is False  # the whole layout came with the first drawing
    # greedy decoding is lossless: from the right start state, every replay emits the very tokens
    # that followed it in the recorded output
    start = len(round_context(run, 1)) - len(PROMPT)
    for info, rrun in pg.results.values():
        t = rrun.tree_at(0)
        emitted = t[t["accepted"] & (t["parent"] >= 0)].sort_values("depth")["token"].tolist()
        emitted.append(int(rrun.rounds.iloc[0]["bonus_token"]))
        assert emitted == gen.token_ids[start : start + info.accepted + 1]
    pg.prune.value = "value"  # cost-aware pruning keeps at most the budget, often fewer
    df = pg.replay()
    assert (df["kept"].iloc[1:] <= 8).all() and all(c.prune == "value" for c in pg.settings().values())


def test_the_table_shows_the_profile_priced_round_beside_the_measured_one(tiny):
    from treegraft_lab import costs

    pair, run, _ = tiny
    pg = SchedulePlayground(pair, run, round=1, clock="a100-paper")
    df = pg.replay()
    prof = costs.load("a100-paper")
    small = df[df["setting"] == "all-small"].iloc[0]  # D n-gram steps and one verification of the kept tree
    assert small["modelled round (ms)"] == pytest.approx(5 * prof.small_ms + prof.target_ms(small["kept"] + 1))
    assert small["modelled tokens/s"] == pytest.approx(1000 * (small["A"] + 1) / small["modelled round (ms)"])
    assert df.attrs["modelled_on"] == profile_name(prof) and "NVIDIA A100" in df.attrs["modelled_on"]
    assert f"modelled on {profile_name(prof)}" in pg.table.value
    assert "measured here" in pg.table.value and "NaN" not in pg.table.value
    assert df["modelled round (ms)"].iloc[1:].notna().all()
    assert pd.isna(df["modelled round (ms)"].iloc[0])  # the recorded round was priced on this device, not on a100-paper


def test_the_profile_selector_changes_the_profile_every_replay_decides_on(tiny):
    pair, run, _ = tiny
    pg = SchedulePlayground(pair, run, round=1)
    assert pg.clock.value == "wall" and [v for _, v in pg.clock.options] == ["wall", "a100-paper", "a100-paper@0.1"]
    pg.clock.value = "a100-paper"
    assert all(c.clock == "a100-paper" for c in pg.settings().values())
    pg.replay()
    assert all(set(r.rounds["modelled_on"]) == {"a100-paper"} for _, r in pg.results.values())
    pg.clock.value = "wall"
    pg.replay()
    here = measure.resolve("wall", pair).name  # this device's measured profile
    assert here != "a100-paper" and all(set(r.rounds["modelled_on"]) == {here} for _, r in pg.results.values())


def test_adaptive_is_offered_only_when_a_scheduler_is_trained_for_the_chosen_profile_and_pruning(tiny, tmp_path, monkeypatch):
    from tests.test_scheduler import make_artifact
    from treegraft_lab import costs

    pair, run, _ = tiny
    make_artifact(tmp_path / "a100-paper-topk", pair="tiny", profile_class="a100-paper", prune="topk")
    monkeypatch.setattr("treegraft_lab.schedule.adaptive.artifact_dir", lambda name: tmp_path)
    pg = SchedulePlayground(pair, run, round=1, prune="topk")
    assert "adaptive" not in pg.settings() and "not offered" in pg.adaptive.value
    pg.clock.value = "a100-paper"
    assert "adaptive" in pg.settings() and "not offered" not in pg.adaptive.value
    assert "a100-paper-topk" in pg.adaptive.value
    pg.prune.value = "value"
    assert "adaptive" not in pg.settings() and "not offered" in pg.adaptive.value
    pg.prune.value = "topk"
    pg.replay()
    steps = pg.results["adaptive"][1].steps  # the adaptive replay decided on the a100-paper costs
    want = costs.scheduler_costs(costs.load("a100-paper"), pg.settings()["adaptive"], pg.budget.value)
    assert steps["t_tgt_ms"].tolist() == pytest.approx([want[0]] * len(steps))
    assert steps["t_mid_ms"].tolist() == pytest.approx([want[1]] * len(steps))


def test_playground_without_a_pair_is_view_only():
    pg = SchedulePlayground(None, tiny_run(rounds=2), round=1)
    assert pg.button.disabled and "No model pair" in pg.status.value


def test_info_line_gives_the_reselected_share_as_a_percentage_and_a_dash_where_it_does_not_apply():
    from treegraft_lab.views.step_through import info_html

    run = tiny_run(rounds=2)
    assert "earlier depth: —" in info_html(run, 0, 1)  # step 1: the only candidate is the root
    assert "earlier depth: —" in info_html(run, 0, 2)  # a small step
    share = run.steps[(run.steps["round"] == 0) & (run.steps["step"] == 3)]["reselected_earlier"].iloc[0]
    assert f"earlier depth: {share:.0%}" in info_html(run, 0, 3)


def test_pruned_switch_acts_only_on_the_verified_tree():
    v = StepThroughViewer(tiny_run(rounds=2))
    assert v.pruned.disabled
    v.step.value = VERIFY
    assert not v.pruned.disabled


def test_adaptive_decisions_are_reproduced_from_the_recorded_inputs(tiny, tmp_path):
    """The boundary view re-scores recorded steps with the policy's own decide: same inputs, same decisions."""
    from tests.test_scheduler import make_artifact
    from treegraft_lab.schedule.adaptive import AdaptivePolicy
    from treegraft_lab.schedule.artifact import load
    from treegraft_lab.viz.boundary import boundary_figure, step_inputs

    pair = tiny[0]
    folder = tmp_path / "cpu-float32-topk"  # trained for this device's profile class, with top-k pruning
    make_artifact(folder, pair="tiny")
    dec = TreeGraftDecoder(pair, preset("full", schedule="adaptive", budget=12, scheduler_path=str(folder)),
                           profile=measure.resolve("wall", pair))
    with record(dec) as rec:
        dec.generate(PROMPT, max_new_tokens=12)
    seen = step_inputs(rec.to_run(), AdaptivePolicy(load(folder)))
    assert len(seen) and (seen["call"] == seen["recorded call"]).all()
    assert seen["g"].to_numpy() == pytest.approx(seen["recorded g"].to_numpy(), abs=1e-6, nan_ok=True)
    first = seen["round"] == seen["round"].min()  # the first round: the policy is not asked
    assert seen.loc[first, "g"].isna().all() and seen.loc[~first, "g"].notna().all() and (~first).any()
    policy = AdaptivePolicy(load(folder))
    sig = policy.signals
    planes = [(sig[0], sig[1]), (sig[2], sig[3]), (sig[4], sig[5]), ("t_tgt_ms", "t_mid_ms")]
    fig, notes = boundary_figure(policy, seen, 3, planes)
    contours = [t for t in fig.data if t.type == "contour"]
    assert len(contours) + len(notes) == len(planes)  # every plane draws g = 0 or says why it has none
    assert "tokens/s" in fig.data[0].colorbar.title.text
    markers = [t for t in fig.data if t.type == "scatter" and t.name and t.name.startswith("recorded")]
    drawn = sum(len(t.x) for t in markers) / len(planes)
    assert drawn == ((seen["step"] == 3) & ~first).sum()  # the unasked first round is not drawn as a decision
    assert "first-round step(s) left out" in fig.layout.title.text
    only_first, _ = boundary_figure(policy, seen[first], 3, planes)  # a one-round run: nothing was asked
    assert "no step-3 decision was asked" in only_first.layout.title.text
    assert "left out" not in only_first.layout.title.text


def test_a_round_change_arriving_while_the_viewer_redraws_is_drawn_not_dropped():
    run = tiny_run(rounds=3)
    v = StepThroughViewer(run)
    v._busy = True  # as if a redraw were running when the kernel delivers the next change
    v.round.value = 2
    assert "round 0" in v.figure.layout.title.text  # queued, not drawn yet
    v._busy = False
    v.step.value = VERIFY  # the next change runs the queue: the round's steps and figure follow
    assert "round 2" in v.figure.layout.title.text and "round 2" in v.info.value
    assert [o for o, _ in v.step.options][0].startswith("1")


def test_the_playground_marks_its_results_stale_the_moment_a_control_differs_from_the_replay(tiny):
    pair, run, _ = tiny
    pg = SchedulePlayground(pair, run, round=1, repeats=1)
    pg.toggles[0].value = not pg.toggles[0].value
    assert pg.changed() == {} and 'class="tg-stale-note"' not in pg.stale.value  # nothing replayed yet: nothing to be stale
    pg.replay()
    assert "tg-stale" not in pg.table._dom_classes and pg.button.description == "replay"
    before = pg.mask
    pg.toggles[1].value = not pg.toggles[1].value
    pg.budget.value = 9
    assert set(pg.changed()) == {"schedule", "budget"}
    assert "<b>stale</b>" in pg.stale.value and f"schedule {before} → {pg.mask}" in pg.stale.value
    assert "budget 12 → 9" in html.unescape(pg.stale.value)
    assert {"tg-stale"} <= set(pg.table._dom_classes) & set(pg.plot._dom_classes)
    assert pg.button.button_style == "danger" and "settings changed" in pg.button.description
    pg.toggles[1].value = not pg.toggles[1].value
    pg.budget.value = 12
    assert pg.changed() == {} and "tg-stale" not in pg.table._dom_classes and pg.button.button_style == "primary"
    assert 'class="tg-stale-note"' not in pg.stale.value
    pg.pick_round.value = 0  # another round start is another replay
    assert "round" in pg.changed() and pg.context == round_context(run, 0) and "<b>stale</b>" in pg.stale.value


def test_the_table_has_a_plain_decoding_row_and_measured_columns_from_repeats_with_their_range(tiny):
    pair, run, _ = tiny
    pg = SchedulePlayground(pair, run, round=1, clock="a100-paper", repeats=3)
    df = pg.replay()
    assert df.attrs["repeats"] == 3 and all(len(t) == 3 for t in pg.times.values()) and len(pg.plain_s) == 3
    plain = df[df["setting"] == "plain decoding"].iloc[0]
    assert plain["A"] == 0 and plain["modelled tokens/s"] == pytest.approx(1000 / pg.profile().target_ms(1))
    assert plain["eta (tokens/s)"] == pytest.approx(sorted(1 / t for t in pg.plain_s)[1])
    replayed = df.iloc[2:]
    assert (replayed["eta low"] <= replayed["eta (tokens/s)"]).all() and (replayed["eta (tokens/s)"] <= replayed["eta high"]).all()
    text = pg.table.value
    assert "median of 3 replays" in text and "range" in text and "plain decoding" in text
    for raw in ("mid_calls", "pool_size", "A (tokens)", "eta (tokens/s)"):
        assert raw not in text  # headers in words


def test_the_profile_is_named_by_device_dtype_and_date_never_by_its_hash(tiny):
    pair, run, _ = tiny
    pg = SchedulePlayground(pair, run, round=1, repeats=1)
    df = pg.replay()
    here = measure.for_pair(pair)
    words = profile_name(here)
    assert "float32" in words and "thread" in words and "measured 20" in words and here.name not in words
    assert df.attrs["modelled_on"] == words and here.name not in pg.table.value and here.name not in pg.adaptive.value
    assert html.escape(words) in pg.adaptive.value  # the note beside the selector says which profile it is


def test_the_pruning_rule_is_explained_beside_its_control():
    pg = SchedulePlayground(None, recorded_tiny_run(), round=1)
    pg.prune.value = "value"
    assert "budget is then only a cap" in pg.prune_note.value and "plain decoding" in pg.prune_note.value
    pg.prune.value = "topk"
    assert "highest path score" in pg.prune_note.value and "size of the verified tree" in pg.prune_note.value


def test_the_table_exports_as_csv_and_json(tiny, tmp_path):
    pair, run, _ = tiny
    pg = SchedulePlayground(pair, run, round=1, repeats=1)
    df = pg.replay()
    links = dict((ext, base64.b64decode(b64).decode()) for ext, b64 in
                 __import__("re").findall(r'download="[^"]+\.(csv|json)" href="data:[^;]+;base64,([^"]+)"', pg.export.value))
    assert pd.read_csv(io.StringIO(links["csv"]), comment="#")["setting"].tolist() == df["setting"].tolist()
    js = json.loads(links["json"])
    assert js["round"] == 1 and js["settings"]["schedule"] == pg.mask and len(js["rows"]) == len(df)
    assert pd.read_csv(pg.save(str(tmp_path / "t.csv")), comment="#")["A"].tolist() == df["A"].tolist()
    assert len(json.loads(open(pg.save(str(tmp_path / "t.json"))).read())["rows"]) == len(df)


def test_an_exported_table_names_its_pair_prompt_settings_profile_and_date(tiny, tmp_path):
    """The CSV opens with "# key: value" lines (pair, prompt, the recorded and the replayed settings, the
    profile, the date) and the JSON carries the same lines; a CSV reader that skips comments reads the table."""
    from treegraft_lab.viz.caption import prompt_words, run_caption

    pair, run, _ = tiny
    pg = SchedulePlayground(pair, run, round=1, clock="a100-paper", prune="value", repeats=1, warmup=False)
    pg.eg.value = False
    df = pg.replay()
    links = dict((ext, base64.b64decode(b64).decode()) for ext, b64 in
                 re.findall(r'download="[^"]+\.(csv|json)" href="data:[^;]+;base64,([^"]+)"', pg.export.value))
    for csv in (links["csv"], open(pg.save(str(tmp_path / "t.csv"))).read()):
        head = dict(line[2:].split(": ", 1) for line in csv.splitlines() if line.startswith("# ") and ": " in line)
        assert head["pair"] == "tiny" and head["prompt"] == prompt_words(run.runs["prompt_text"].iloc[0])
        assert head["recorded run"].startswith("schedule 10101, budget 12, top-k pruning, priced on ")
        assert head["replayed"].startswith(f"your schedule {pg.mask}, w/o EG, value pruning, budget 12, 1 timed replays")
        assert head["profile"].startswith(profile_name(measure.resolve("a100-paper", pair)))
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", head["date"])
        assert pd.read_csv(io.StringIO(csv), comment="#")["setting"].tolist() == df["setting"].tolist()
    js = json.loads(links["json"])
    assert js["about"] == [line[2:] for line in links["csv"].splitlines() if line.startswith("# ")]
    assert run_caption(run).split(" · ")[1] in js["about"][2]  # the prompt, quoted as every view quotes it


def test_every_plotly_view_is_shown_without_a_cloud_button_and_exports_a_png_named_and_captioned(tiny, monkeypatch):
    """Shown however (a cell's last line, display, a widget, a saved HTML file), a figure's toolbar offers
    no upload to plotly's cloud and no logo, and its PNG button names the file after pair, prompt and settings;
    the caption is drawn in the figure (title or footnote), so the PNG carries it."""
    import plotly.io as pio

    from treegraft_lab.viz import export
    from treegraft_lab.viz.caption import run_caption
    from treegraft_lab.viz.tree import growth_animation, tree_figure

    pair, run, _ = tiny
    line = run_caption(run)
    v = StepThroughViewer(run)
    pg = SchedulePlayground(pair, run, round=1, clock="a100-paper", prune="value", repeats=1, warmup=False)
    pg.replay()
    figs = {"tree": tree_figure(run, 0), "animation": growth_animation(run, 0), "viewer": v.figure, "playground": pg.figure}
    monkeypatch.setattr(pio.renderers, "default", "plotly_mimetype")
    shown = []
    monkeypatch.setattr(pio, "show", lambda fig, **kw: shown.append(kw.get("config")))
    for name, fig in figs.items():
        config = fig._repr_mimebundle_()["application/vnd.plotly.v1+json"]["config"]
        fig._ipython_display_()
        assert shown.pop() == config == export.figure_config(fig), name
        assert config["showSendToCloud"] is False and config["displaylogo"] is False, name
        assert "sendChartToCloud" in config["modeBarButtonsToRemove"], name
        stem = config["toImageButtonOptions"]["filename"]
        assert "_tiny_t5-t6-t7-t8-t9" in stem and "budget-12" in stem, (name, stem)
        html_file = io.StringIO()
        fig.write_html(html_file, include_plotlyjs=False)
        assert '"showSendToCloud": false' in html_file.getvalue(), name
        drawn = " ".join([fig.layout.title.text or "", *(a.text or "" for a in fig.layout.annotations)]).replace("<br>", " ")
        drawn = re.sub(r"<[^>]+>", "", drawn)
        assert "pair tiny" in drawn and "profile " in drawn, name
    assert html.escape(line).replace("<br>", " ").split(" · ")[1] in re.sub(r"<[^>]+>", "", v.figure.layout.annotations[-1].text)
    assert "pair" not in v.figure.layout.title.text  # on screen the viewer names it once, above the tree
    assert "replay of round 1: " in pg.figure.layout.annotations[-1].text.replace("<br>", " ")
    assert export.figure_config(pg.figure)["toImageButtonOptions"]["filename"].startswith("tree-round0-verify_tiny_")


def test_the_round_slider_gives_every_round_some_px_and_prev_next_step_one_round(tiny):
    _, run, _ = tiny
    v = StepThroughViewer(run)
    rounds = v.round.max
    assert int(v.round.layout.width.removesuffix("px")) - 100 >= min(ROUND_PX * rounds, 560)
    v.next.click()
    assert v.round.value == 1 and "round 1" in v.figure.layout.title.text
    v.prev.click()
    assert v.round.value == 0 and v.prev.disabled


_TINY_RUN = None


def recorded_tiny_run():
    """A run recorded with the tiny pair (module-level cache, for tests that need no pair)."""
    global _TINY_RUN
    if _TINY_RUN is None:
        pair = tiny_pair()
        dec = TreeGraftDecoder(pair, preset("full", schedule="10101", budget=12), profile=measure.resolve("wall", pair))
        with record(dec) as rec:
            dec.generate(PROMPT, max_new_tokens=20)
        _TINY_RUN = rec.to_run()
    return _TINY_RUN


def test_playground_picks_the_pruning_its_scheduler_was_trained_for_and_says_so(tiny, tmp_path, monkeypatch):
    from tests.test_scheduler import make_artifact

    pair, run, _ = tiny  # recorded with top-k pruning; the only scheduler here is for value pruning
    monkeypatch.setattr("treegraft_lab.schedule.adaptive.artifact_dir", lambda name: tmp_path)
    pg = SchedulePlayground(pair, run, round=1)
    assert pg.prune.value == "topk" and "adaptive" not in pg.settings()
    assert "not offered</b> (no scheduler for pair tiny as cpu-float32-topk; trained: none)" in pg.adaptive.value
    make_artifact(tmp_path / "cpu-float32-value", pair="tiny", profile_class="cpu-float32", prune="value")
    pg = SchedulePlayground(pair, run, round=1)
    assert pg.prune.value == "value" and "adaptive" in pg.settings()
    assert "pruning set to value: float32, prune=value: the settings the adaptive scheduler cpu-float32-value" in pg.adaptive.value
    assert SchedulePlayground(pair, run, round=1, prune="topk").prune.value == "topk"  # a rule given is kept


def test_a_replays_speedup_in_each_repeat_reads_plain_decoding_from_the_same_repeat():
    from treegraft_lab.views.timing import repeat_speedups

    # 3 tokens a round; plain decoding 0.1, 0.2, 0.1 s a token; the round 0.15 s, then two settings timed together
    ups = repeat_speedups(3, [[0.15], [0.3, 0.3], [0.1, 0.2]], [0.1, 0.2, 0.1])
    assert ups == pytest.approx([2.0, 2.0, 2.0])
    assert repeat_speedups(3, [[0.3], [0.3]], [0.1, 0.2]) == pytest.approx([1.0, 2.0])  # not the pooled 1.5 twice


def test_the_playground_warms_up_untimed_then_interleaves_every_setting_with_plain_decoding(tiny, monkeypatch):
    from treegraft_lab import baselines, decoder

    pair, run, _ = tiny
    calls: list[str] = []
    real_replay, real_plain = decoder.replay_round, baselines.plain_token_s
    monkeypatch.setattr(decoder, "replay_round", lambda p, c, cfg, **kw: (calls.append(cfg.schedule_name), real_replay(p, c, cfg, **kw))[1])
    monkeypatch.setattr(baselines, "plain_token_s", lambda p, c: (calls.append("plain"), real_plain(p, c))[1])
    pg = SchedulePlayground(pair, run, round=1, clock="a100-paper", repeats=2)
    pg.replay()
    jobs = len(pg.settings()) + 1
    assert len(calls) == 3 * jobs  # one untimed pass, then two timed ones
    assert all(len(t) == 2 for t in pg.times.values()) and len(pg.plain_s) == 2
    passes = [calls[i * jobs:(i + 1) * jobs] for i in range(3)]
    assert all(sorted(p) == sorted(passes[0]) for p in passes)  # every pass runs every setting and plain decoding once
    assert passes[1][0] != passes[2][0]  # in an order rotated from repeat to repeat
    assert "after an untimed warm-up" in pg.progress.value
    calls.clear()
    SchedulePlayground(pair, run, round=1, clock="a100-paper", repeats=2, warmup=False).replay()
    assert len(calls) == 2 * jobs


def test_the_playground_names_settings_that_decide_identically_and_times_them_together(tiny):
    pair, run, _ = tiny
    pg = SchedulePlayground(pair, run, round=1, clock="a100-paper", repeats=2)
    for t in pg.toggles:
        t.value = False  # yours: 00000, the decisions of all-small
    df = pg.replay().set_index("setting")
    yours = next(k for k in pg.results if k.startswith("yours"))
    assert pg.twins == {yours: "all-small"}
    assert df.loc[yours, "same decisions as"] == "all-small" and df.loc["all-mid", "same decisions as"] == ""
    cols = ["draft (ms)", "verify (ms)", "eta (tokens/s)", "eta low", "eta high", "speedup", "speedup low", "speedup high"]
    assert df.loc[yours, cols].tolist() == df.loc["all-small", cols].tolist()  # one pool, one number
    assert df.loc["plain decoding", "speedup"] == 1.0 and df.loc["all-mid", "speedup low"] <= df.loc["all-mid", "speedup"]
    assert f"all-small (= {yours}: same decisions, timed together)" in pg.table.value  # one row on screen for the two
    assert "min–max of per-repeat speedups" in pg.table.value


def test_the_playground_warns_when_plain_decoding_is_far_from_what_the_device_profile_predicts(tiny, monkeypatch):
    from treegraft_lab import baselines, measure

    pair, run, _ = tiny
    expected = measure.resolve("wall", pair).target_ms(1) / 1000
    for factor, warned in ((1.5, False), (3.0, True), (1 / 3, True)):
        monkeypatch.setattr(baselines, "plain_token_s", lambda p, c, f=factor: f * expected)
        pg = SchedulePlayground(pair, run, round=1, clock="wall", repeats=1, warmup=False)
        df = pg.replay()
        assert bool(df.attrs["warning"]) == warned and ("tg-plain-warning" in pg.table.value) == warned
    assert "profile predicts" in df.attrs["warning"]
    pg = SchedulePlayground(pair, run, round=1, clock="a100-paper", repeats=1, warmup=False)
    assert pg.replay().attrs["warning"] == ""  # an A100's prediction says nothing about this machine


def test_the_playground_says_when_plain_decoding_moved_more_than_2x_between_its_repeats(tiny, monkeypatch):
    import itertools

    from treegraft_lab import baselines

    pair, run, _ = tiny
    per_token = itertools.cycle([0.010, 0.030, 0.012])  # injected: three repeats 3x apart (a busy spell)
    monkeypatch.setattr(baselines, "plain_token_s", lambda p, c: next(per_token))
    pg = SchedulePlayground(pair, run, round=1, clock="a100-paper", repeats=3, warmup=False)
    df = pg.replay()
    assert "plain decoding moved 3.0x between its 3 repeats, more than 2x" in df.attrs["warning"]
    assert "probably busy" in df.attrs["warning"] and "tg-plain-warning" in pg.table.value


def test_every_view_names_its_pair_prompt_settings_and_profile(tiny):
    """The viewer's caption, the playground's status and table, a lone tree figure and the animation."""
    from treegraft_lab.viz.caption import run_caption
    from treegraft_lab.viz.tree import growth_animation, tree_figure

    pair, run, _ = tiny
    line = run_caption(run)
    assert line.startswith("pair tiny · prompt “") and "schedule 10101, budget 12, top-k pruning" in line
    assert "· profile " in line and run.rounds["modelled_on"].iloc[0] not in line.split("· profile ")[1]  # in words
    v = StepThroughViewer(run)
    assert html.escape(line) in v.info.value
    for fig in (tree_figure(run, 0), growth_animation(run, 0)):
        assert "pair tiny" in fig.layout.title.text and "profile " in fig.layout.title.text
    assert "pair" not in v.figure.layout.title.text  # the viewer names it once, above the tree
    pg = SchedulePlayground(pair, run, round=1, clock="a100-paper", prune="value", repeats=1)
    assert html.escape(line) in pg.status.value
    df = pg.replay()
    rows = dict(zip(df["setting"], df["pruning (budget)"]))
    assert rows["recorded run"] == "top-k (12)" and rows["plain decoding"] == "—"
    assert {rows[k] for k in rows if k not in ("recorded run", "plain decoding")} == {"value (12)"}
    assert "replays: value pruning, budget 12" in pg.table.value and "Recorded run: schedule 10101, budget 12, top-k" in pg.table.value
    assert "value pruning, budget 12" in pg.figure.layout.title.text.replace("<br>", " ")


def test_the_tree_box_keeps_the_figure_size_through_a_redraw_and_docks_the_legend():
    run = tiny_run(rounds=2)
    v = StepThroughViewer(run)
    v.siblings.value = 0
    fig = v.figure
    assert v.plot.output.layout.min_width == f"{fig.layout.width}px" == v.plot.output.layout.width
    assert v.plot.output.layout.min_height == f"{fig.layout.height}px"
    assert "tg-scroll" in v.plot.box._dom_classes and "new at this step" in v.plot.legend.value
    assert fig.layout.showlegend is False


def test_the_boundary_axes_name_the_signals_in_words_from_the_one_glossary(tiny, tmp_path):
    """Every plane's axes carry the glossary's words for its signals and costs, never their recorded names."""
    from tests.test_scheduler import make_artifact
    from treegraft_lab.schedule import signals
    from treegraft_lab.schedule.adaptive import AdaptivePolicy
    from treegraft_lab.schedule.artifact import load
    from treegraft_lab.viz.boundary import boundary_figure, step_inputs

    rows = signals.glossary([*signals.SIGNALS, "t_tgt_ms", "t_mid_ms"])
    assert [r["recorded as"] for r in rows] == [*signals.SIGNALS, "t_tgt_ms", "t_mid_ms"]
    snake = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)+")  # a recorded name, not words
    assert len({r["in words"] for r in rows}) == len(rows) and not any(snake.fullmatch(r["in words"]) for r in rows)
    folder = tmp_path / "cpu-float32-topk"
    make_artifact(folder, pair="tiny")
    dec = TreeGraftDecoder(tiny[0], preset("full", schedule="adaptive", budget=12, scheduler_path=str(folder)),
                           profile=measure.resolve("wall", tiny[0]))
    with record(dec) as rec:
        dec.generate(PROMPT, max_new_tokens=12)
    policy = AdaptivePolicy(load(folder))
    sig = policy.signals
    planes = [(sig[0], sig[1]), (sig[2], sig[3]), (sig[4], sig[5]), ("t_tgt_ms", "t_mid_ms")]
    fig, _ = boundary_figure(policy, step_inputs(rec.to_run(), policy), 3, planes)
    titles = [fig.layout[f"{ax}axis{i or ''}"].title.text for i in (0, 2, 3, 4) for ax in "xy"]
    assert titles == [signals.words(n) for plane in planes for n in plane]
    assert not set(titles) & {*signals.SIGNALS, "t_tgt_ms", "t_mid_ms"}


def test_the_viewer_lays_a_draft_step_out_on_its_own_nodes_unless_asked_for_the_whole_round():
    """A step's tree fits its own nodes (what the step drafted is in the box); "layout: whole round" keeps every
    node where the final tree has it, as wide as that tree at every step."""
    v = StepThroughViewer(tiny_run(rounds=2), round=0)
    v.placing.value = False  # "layout: this step" (the default is "focus: this step's change")
    v.siblings.value = 0
    v.step.value = 1
    own = v.figure.layout.width
    v.placing.value = True
    whole = v.figure.layout.width
    v.step.value = VERIFY
    assert own < whole == v.figure.layout.width
    v.placing.value, v.step.value = False, 1
    assert v.figure.layout.width == own
