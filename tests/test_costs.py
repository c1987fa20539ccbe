"""One device cost profile: measured once and cached, read by every decision, priced rounds."""

from __future__ import annotations

import json
import re
import time
from collections import Counter

import pytest

from tests.test_decoder import hf_greedy
from treegraft_lab import cli, costs, measure
from treegraft_lab.config import DecodeConfig, preset
from treegraft_lab.decoder import TreeGraftDecoder
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.hooks import record
from treegraft_lab.tiny import tiny_pair

pytestmark = pytest.mark.usefixtures("busy_machine")  # every test here runs beside two busy loops

IDS = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7, 1, 2, 3]


@pytest.fixture(autouse=True)
def quiet_load(monkeypatch):
    """The load average every measurement here reads: a quiet machine (injected, whatever the busy loops do;
    measuring under load: tests/test_profile_trust.py)."""
    monkeypatch.setattr(measure, "read_load", lambda: measure.LoadReading(0.1, 2, 0.0))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TREEGRAFT_PROFILE_CACHE", str(tmp_path / "profiles"))
    return tmp_path / "profiles"


def test_a_profile_round_trips_through_json_and_interpolates(tmp_path):
    p = costs.DeviceProfile("toy", {1: 10.0, 9: 18.0}, {1: 2.0, 11: 12.0}, 0.5, "a toy")
    back = costs.load(p.save(tmp_path / "toy.json"))
    assert back == p
    assert back.target_ms(5) == pytest.approx(14.0) and back.target_ms(0) == 10.0 and back.target_ms(17) == pytest.approx(26.0)
    assert back.round_ms([(False, 10), (True, 6)], 9) == pytest.approx(0.5 + 7.0 + 18.0)
    assert back.scaled(mid=2.0, target=0.5).round_ms([(True, 1)], 1) == pytest.approx(4.0 + 5.0)


def test_the_paper_profile_loads_by_name_and_a_bad_file_says_what_to_do(tmp_path):
    a100 = costs.load("a100-paper")
    assert a100.small_ms == 0.92 and a100.target_ms(1) == a100.target_ms(64) == pytest.approx(66.7)
    assert a100.mid_ms(100) == pytest.approx(40.0) and "derived" in a100.source
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "treegraft-profile/1", "name": "x", "target": {"1": -3}}))
    with pytest.raises(TreeGraftError, match="not a usable device profile"):
        costs.load(bad)
    with pytest.raises(TreeGraftError, match="a100-paper"):
        costs.load("no-such-profile")
    with pytest.raises(TreeGraftError, match="clock must be"):
        DecodeConfig(clock="")


def test_the_device_profile_is_measured_once_and_then_read_from_disk(cache, monkeypatch):
    pair = tiny_pair("llama")
    first = measure.for_pair(pair, progress=False)
    assert list(cache.glob("*.json")) == [measure.cached_path(pair)]
    assert set(first.target) == set(measure.TARGET_SIZES) and set(first.mid) == set(measure.MID_SIZES)
    values = sorted(first.target.items())
    assert all(a[1] <= b[1] for a, b in zip(values, values[1:]))  # a longer forward never costs less
    measure.read_profile.cache_clear()
    monkeypatch.setattr(measure, "measure", lambda *a, **k: pytest.fail("measured again instead of reading the cache"))
    assert measure.for_pair(pair) == first


@pytest.fixture
def counted(monkeypatch):
    """`measure.measure` replaced by a stand-in that counts its calls (no timing runs): each call
    returns a profile named by its call number."""
    calls = []

    def fake(pair, progress=True, repeats=5):
        calls.append(measure.profile_key(pair))
        return costs.DeviceProfile(f"measured-{len(calls)}", {1: 10.0, 64: 12.0}, {1: 2.0}, 0.5, "stand-in", n=repeats,
                                   spread=0.01)

    monkeypatch.setattr(measure, "measure", fake)
    return calls


def test_a_changed_weights_file_torch_version_or_thread_count_is_measured_again(cache, counted, tmp_path, monkeypatch):
    import torch
    from safetensors.torch import load_file, save_file

    from treegraft_lab import profile_cache

    pair = tiny_pair("llama")
    folder = tmp_path / "target"
    pair.target.save_pretrained(folder)
    pair.target_id = str(folder)  # a pair loaded from a folder: its files are fingerprinted
    spec = profile_cache.spec_key(target=str(folder))
    assert measure.for_pair(pair).name == "measured-1" and measure.for_pair(pair).name == "measured-1"
    profile_cache.remember(spec, measure.profile_key(pair))
    assert profile_cache.lookup(spec).name == "measured-1"

    weights = folder / "model.safetensors"  # written again, same size (a retrained model of the same shapes)
    size, state = weights.stat().st_size, load_file(weights)
    state = {k: v + 1.0 if i == 0 else v for i, (k, v) in enumerate(state.items())}
    save_file(state, weights, metadata={"format": "pt"})
    assert weights.stat().st_size == size
    assert profile_cache.lookup(spec) is None  # the profile command's index misses too
    assert measure.for_pair(pair).name == "measured-2" and measure.for_pair(pair).name == "measured-2"

    with monkeypatch.context() as mp:
        mp.setattr(torch, "__version__", "9.9.9+other")
        assert measure.for_pair(pair).name == "measured-3"
        mp.setattr(profile_cache, "version", lambda name: "9.9.9+other")
        assert profile_cache.spec_key(target=str(folder)) != spec  # the index is keyed by the torch version

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert measure.for_pair(pair).name == "measured-4"
    finally:
        torch.set_num_threads(threads)
    assert measure.for_pair(pair).name == "measured-2"  # back to the first settings: the cache again
    assert [k["threads"] for k in counted] == [threads] * 3 + [threads + 1]
    assert [k["torch"] for k in counted] == [torch.__version__] * 2 + ["9.9.9+other", torch.__version__]
    monkeypatch.setenv("OMP_NUM_THREADS", str(threads + 1))
    assert profile_cache.spec_key(target=str(folder)) != spec  # the index is keyed by the thread setting too


def test_the_profile_command_reads_its_cache_without_loading_a_model(cache, tiny_llama_dir, tiny_qwen3_dir,
                                                                     monkeypatch, capsys):
    args = ["profile", "--target", str(tiny_llama_dir), "--mid", str(tiny_qwen3_dir), "--device", "cpu",
            "--dtype", "float32", "--json"]
    assert cli.main(args) == 0
    measured = json.loads(capsys.readouterr().out)
    assert measured["format"] == "treegraft-profile/1" and measured["key"]["device"] == "cpu"
    from treegraft_lab import models

    monkeypatch.setattr(models, "load_pair", lambda *a, **k: pytest.fail("loaded the models"))
    assert cli.main(args) == 0
    assert json.loads(capsys.readouterr().out) == measured
    assert cli.main(["profile", "--show", "a100-paper"]) == 0
    assert "verification costs 1.00x a 1-token forward" in capsys.readouterr().out


def _decisions(dec, ids=IDS, n=24):
    with record(dec) as rec:
        gen = dec.generate(ids, max_new_tokens=n)
    run = rec.to_run()
    return gen, [(r.round, r.schedule, r.kept) for r in run.rounds.itertuples()]


class LoadedClock:
    """`time.perf_counter` of a machine under an erratic load: every reading jumps ahead by a seeded
    random 10 ms to 2 s, so every interval the decoder times is long and unlike the calm run's."""

    def __init__(self, seed: int = 0) -> None:
        import random

        self.rng, self.now, self.reads = random.Random(seed), 1000.0, 0

    def perf_counter(self) -> float:
        self.now += self.rng.uniform(0.01, 2.0)
        self.reads += 1
        return self.now


def test_decisions_do_not_follow_the_load_of_the_machine(cache, monkeypatch):
    """The same prompt, pair and profile decide the same when every timing the decoder reads comes from
    an erratically loaded clock (injected: no sleeps, nothing measured on this machine's clock)."""
    from types import SimpleNamespace

    from tests.test_scheduler import make_artifact, noisy_pair
    from treegraft_lab import decoder as decoder_module

    pair = noisy_pair()
    prof = costs.DeviceProfile("toy", {1: 20.0, 64: 40.0, 128: 80.0}, {1: 5.0, 500: 30.0}, 0.5)
    folder = cache.parent / "art"
    make_artifact(folder, pair="tiny-llama", profile_class="toy", prune="value")
    cfg = preset("full", schedule="adaptive", prune="value", scheduler_path=str(folder))
    calm, calm_rounds = _decisions(TreeGraftDecoder(pair, cfg, profile=prof))
    clock = LoadedClock()
    loaded_time = SimpleNamespace(perf_counter=clock.perf_counter, strftime=time.strftime)
    monkeypatch.setattr(decoder_module, "time", loaded_time)  # the round's own timings
    monkeypatch.setattr(measure, "time", loaded_time)  # its forwards' laps (`measure.Laps`)
    loaded, loaded_rounds = _decisions(TreeGraftDecoder(pair, cfg, profile=prof))
    assert clock.reads >= 2 * len(loaded_rounds)  # the decoder did read the loaded clock, every round
    assert loaded_rounds == calm_rounds and loaded.token_ids == calm.token_ids
    assert {s for _, s, _ in calm_rounds} - {"00000"}, "the toy scheduler never called the mid drafter"
    assert loaded.stats["modelled_ms"] == pytest.approx(calm.stats["modelled_ms"])


def test_a_scheduler_for_another_profile_or_pruning_is_refused(tmp_path):
    from tests.test_scheduler import make_artifact, noisy_pair

    make_artifact(tmp_path, pair="tiny-llama", profile_class="a100-paper", prune="topk")
    cfg = {"schedule": "adaptive", "scheduler_path": str(tmp_path)}
    TreeGraftDecoder(noisy_pair(), preset("full", clock="a100-paper", **cfg))  # the matching one loads
    pair = noisy_pair()
    here = costs.DeviceProfile("measured here", {1: 20.0, 64: 40.0}, {1: 5.0, 500: 30.0}, 0.5,
                               key={"device": "cpu", "dtype": "float32"}, n=5)  # a measured profile's class: cpu-float32
    with pytest.raises(TreeGraftError, match="trained for profile 'a100-paper', not 'cpu-float32'"):
        TreeGraftDecoder(pair, preset("full", **cfg), profile=here)
    with pytest.raises(TreeGraftError, match="trained for prune 'topk', not 'value'"):
        TreeGraftDecoder(noisy_pair(), preset("full", clock="a100-paper", prune="value", **cfg))


def test_a_modelled_run_is_lossless_and_priced_from_its_rounds_sizes():
    pair = tiny_pair("llama")
    a100 = costs.load("a100-paper")
    dec = TreeGraftDecoder(pair, preset("full", schedule="10101", clock="a100-paper"))
    sizes = []
    with dec.hooks({"step.expand": lambda ev: sizes.append((ev.data["call_mid"], ev.data["forwarded"]))}):
        gen = dec.generate(IDS, max_new_tokens=20)
    assert gen.token_ids == hf_greedy(pair.target, IDS, 20)
    assert gen.stats["modelled_on"] == "a100-paper"
    draft = sum((a100.mid_ms(len(fwd)) if fwd else a100.small_ms) if call else a100.small_ms for call, fwd in sizes)
    verify = sum(a100.target_ms(r.kept + 1) for r in gen.rounds)
    assert gen.stats["modelled_ms"] == pytest.approx(draft + verify, rel=1e-6)
    assert gen.stats["modelled_tokens_per_s"] == pytest.approx(1000 * len(gen.token_ids) / (draft + verify))




def small_mid_pair():
    """A tiny pair whose mid drafter has a quarter of the target's layers: a profile must find it cheaper."""
    from treegraft_lab.tiny import tiny_model

    pair = tiny_pair("llama")
    pair.target = tiny_model("llama", 64, layers=4, seed=0)
    assert measure.mid_is_smaller(pair)
    return pair


def fake_timer(monkeypatch, ms):
    """`measure.forward_times` replaced by a timing source: `ms(kind, n, call)` gives one forward's ms,
    `call` counting the timed forwards of that kind and size so far. Returns the list of (kind, n) timed."""
    seen = []

    def times(model, n, context=costs.CONTEXT, repeats=3):
        kind = "mid" if model.config.num_hidden_layers == 1 else "target"
        out = []
        for _ in range(repeats):
            out.append(ms(kind, n, sum(s == (kind, n) for s in seen)))
            seen.append((kind, n))
        return out

    monkeypatch.setattr(measure, "forward_times", times)
    return seen


def test_a_profile_whose_smaller_mid_costs_more_than_the_target_is_measured_again_then_kept_flagged(cache, monkeypatch):
    seen = fake_timer(monkeypatch, lambda kind, n, call: (60.0 if kind == "mid" else 30.0) + n / 10)
    said = []
    monkeypatch.setattr(measure, "note", said.append)
    pair = small_mid_pair()
    prof = measure.for_pair(pair, progress=False)
    assert seen.count(("mid", 1)) == 2 * 5  # measured once more before flagging
    assert prof.flagged and "a mid forward of 1 tokens" in prof.flagged[0] and not prof.checked
    assert len(said) == 1 and "is flagged: a mid forward of 1 tokens" in said[0]
    assert "`treegraft-lab profile --refresh`" in said[0] and "lossless" in said[0]
    measure.read_profile.cache_clear()
    again = measure.for_pair(pair, progress=False)  # cached with its flag: not measured again, said again
    assert again.flagged == prof.flagged and seen.count(("mid", 1)) == 2 * 5 and len(said) == 2


def test_the_profile_times_every_size_once_per_pass_so_a_busy_spell_slows_all_sizes_alike(cache, monkeypatch):
    seen = fake_timer(monkeypatch, lambda kind, n, call: (30.0 if kind == "mid" else 90.0) + n / 10)
    measure.for_pair(small_mid_pair(), progress=False)
    sizes = len(measure.TARGET_SIZES) + len(measure.MID_SIZES)
    assert len(seen) == 5 * sizes
    for p in range(5):  # pass p holds the p-th timing of every size
        assert sorted(seen[p * sizes:(p + 1) * sizes]) == sorted(set(seen))


def test_a_size_timed_fast_by_chance_does_not_make_a_run_of_tree_tokens_free():
    medians = {1: 70.0, 2: 72.0, 4: 76.0, 8: 66.0, 12: 90.0, 16: 98.0, 32: 130.0}  # 8 caught a quiet moment (-20%)
    fit = measure.fitted(medians)
    sizes = sorted(medians)
    assert list(fit) == sizes
    step = [(fit[b] - fit[a]) / (b - a) for a, b in zip(sizes, sizes[1:])]  # ms a token, size to size
    assert all(s > 0 for s in step)  # a token never free
    assert all(b >= a - 1e-9 for a, b in zip(step[1:], step[2:]))  # convex from the second size on
    assert min(fit[n] for n in (1, 2, 4, 8)) >= 70.0  # a running minimum would price 1..8 at 66 ms: seven free tokens
    gpu = measure.fitted({1: 20.0, 8: 20.2, 64: 21.0, 128: 33.0})  # flat, then rising: kept so
    assert gpu[1] == pytest.approx(20.0, abs=0.2) and gpu[128] == pytest.approx(33.0, abs=0.2)
    assert measure.fitted({1: 5.0, 2: 6.0}) == {1: 5.0, 2: 6.0}


def test_a_cpu_whose_one_token_forward_is_a_kernel_of_its_own_keeps_the_jump_to_two_tokens():
    """What decoding rounds measured on a 2-core Xeon with AMX (float32; tokens verified, root included: the root
    alone 58 ms, 4-6 tree tokens 73 ms, 10 tree tokens 78 ms, 16 tree tokens 94 ms). A convex fit from one token
    on spreads the jump over the first tree tokens, and value pruning then keeps nodes that do not pay."""
    measured = {1: 58.0, 5: 73.0, 7: 73.0, 11: 78.0, 17: 94.0}
    fit = measure.fitted(measured)
    assert fit[1] == pytest.approx(58.0) and fit[5] - fit[1] == pytest.approx(15.0, abs=0.5)  # the jump, kept
    assert fit[11] - fit[5] <= 6.0  # and not spread over the tokens after it
    assert all(fit[b] >= fit[a] for a, b in zip(sorted(fit), sorted(fit)[1:]))


def test_a_noisy_measurement_is_measured_again_and_kept_with_its_n_spread_and_date(cache, monkeypatch):
    def ms(kind, n, call):  # the first 5 timings of each size disagree by 2x, the next 5 within 3%
        base = (30.0 if kind == "mid" else 90.0) + n / 10
        return base * (2 if call < 5 and call % 2 else 1) if call < 5 else base * (1.03 if call % 2 else 1)

    seen = fake_timer(monkeypatch, ms)
    pair = small_mid_pair()
    prof = measure.for_pair(pair, progress=False)
    assert seen.count(("target", 64)) == 10  # the noisy measurement was measured again
    assert prof.n == 5 and prof.spread == pytest.approx(0.03 / 1.03) and prof.measured.startswith(time.strftime("%Y-%m-%d"))
    assert prof.checked == [measure.ORDER_CHECK, "repeated timings within 50%"]
    measure.read_profile.cache_clear()
    back = measure.cached(pair)
    assert (back.n, back.spread, back.measured, back.checked) == (prof.n, prof.spread, prof.measured, prof.checked)
    calls = Counter()  # timings of each (model, size) so far: of every five, 1 s, 1 ms, 1 s, 1 ms, 1 s

    def wild(m, n, c=0, repeats=5):
        out = []
        for _ in range(repeats):
            out.append(1.0 if calls[id(m), n] % 5 in (1, 3) else 1e3)
            calls[id(m), n] += 1
        return out

    monkeypatch.setattr(measure, "forward_times", wild)
    monkeypatch.setattr(measure, "note", lambda _: None)
    with pytest.raises(measure.ProfileKept, match=r"kept the cached profile .*disagree by"):  # disagrees twice
        measure.for_pair(pair, refresh=True, progress=False)  # the trusted cached profile stays
    busy = measure.for_pair(pair, refresh=True, progress=False, force=True)  # forced: kept, flagged
    assert any(re.search(r"disagree by .* \(more than 50%\)", f) for f in busy.flagged)


def test_a_cached_profile_that_is_insane_or_lacks_its_spread_is_measured_again(cache, monkeypatch):
    seen = fake_timer(monkeypatch, lambda kind, n, call: (30.0 if kind == "mid" else 90.0) + n / 10)
    pair = small_mid_pair()
    for old in (costs.DeviceProfile("insane", {1: 10.0, 128: 20.0}, {1: 30.0, 400: 90.0}, 0.5, n=5, spread=0.1),
                costs.DeviceProfile("unchecked", {1: 100.0, 128: 200.0}, {1: 30.0, 400: 90.0}, 0.5)):
        old.save(measure.cached_path(pair))
        measure.read_profile.cache_clear()
        assert measure.for_pair(pair, progress=False).name != old.name
    assert seen.count(("mid", 1)) == 2 * 5


def test_every_profile_line_names_n_spread_date_and_the_mid_against_the_target():
    from treegraft_lab.views.profile import ProfileLine, profile_html, profile_line

    a100 = costs.load("a100-paper")
    line = profile_line(a100)
    assert "n=0 (not measured here)" in line and "derived from published costs" in line
    assert "mid forward of 64 tokens 40.0 ms vs 66.7 ms for the target" in line and "⚠" not in line
    here = costs.DeviceProfile("x", {1: 100.0, 128: 200.0}, {1: 30.0, 400: 90.0}, 0.5, "", "measured 2026-12-03 04:30",
                               key={"hardware": "Intel Xeon", "dtype": "float32", "threads": 2}, n=5, spread=0.07,
                               measured="2026-12-03 04:30", checked=[measure.ORDER_CHECK])
    assert profile_line(here).startswith("profile Intel Xeon, float32, 2 threads · measured 2026-12-03 04:30, n=5, spread 7%; ")
    insane = costs.load("a100-paper").scaled(mid=3.0)  # a mid call dearer than a target step
    assert "⚠ a mid forward of 1 tokens" in profile_line(insane)
    assert 'data-mid-ms="120.000" data-target-ms="66.700" data-order="checked"' in profile_html(insane)
    assert ProfileLine(a100).button.disabled and not ProfileLine(here, pair=object()).button.disabled


def test_the_re_measure_button_measures_again_and_shows_the_new_profile_or_why_it_was_refused(monkeypatch):
    from treegraft_lab.views.profile import ProfileLine

    key = {"hardware": "Intel Xeon", "dtype": "float32", "threads": 2}
    old, new = (costs.DeviceProfile(name, {1: 100.0, 128: 200.0}, {1: 30.0, 400: 90.0}, 0.5, key=key, n=5, spread=0.1,
                                    measured=when, checked=[measure.ORDER_CHECK]) for name, when in
                (("old", "2026-12-01 09:00"), ("new", "2026-12-04 10:00")))
    asked, changed = [], []
    monkeypatch.setattr(measure, "for_pair", lambda pair, refresh=False, progress=True: asked.append(refresh) or new)
    line = ProfileLine(old, pair=object(), on_change=changed.append)
    line.button.click()
    assert asked == [True] and changed == [new] and "measured 2026-12-04 10:00" in line.text.value

    busy = costs.DeviceProfile("busy", {1: 180.0, 128: 330.0}, key=key, n=5, spread=0.06, measured="2026-12-04 11:00",
                               flagged=["busy: other load 2.0 on 2 CPUs (busy from 1.0)"])

    def refused(pair, refresh=False, progress=True):
        raise measure.ProfileKept(new, busy)  # the re-measure came out flagged: the cached profile stays

    monkeypatch.setattr(measure, "for_pair", refused)
    line.button.click()
    assert "kept the cached profile (measured 2026-12-04 10:00)" in line.text.value and "busy: other load" in line.text.value
    assert line.profile is new and changed == [new] and "measured 2026-12-04 11:00" not in line.text.value
    assert not line.button.disabled


def test_a_profile_with_a_long_context_curve_prices_tree_tokens_by_the_context_and_keeps_it_through_save_and_scale(tmp_path):
    prof = costs.DeviceProfile("t", {1: 50.0, 64: 180.0}, target_long={1: 60.0, 64: 300.0}, context_long=1536)
    assert prof.target_ms(64) == prof.target_ms(64, 100) == prof.target_ms(64, 256) == 180.0  # at or below the short context
    assert prof.target_ms(64, 1536) == 300.0 and prof.target_ms(64, 896) == pytest.approx(240.0)  # half way: linear
    assert prof.target_ms(64, 2816) == pytest.approx(420.0)  # beyond the long context: the same line
    back = costs.load(prof.save(tmp_path / "p.json"))
    assert back.target_long == prof.target_long and back.context_long == 1536 and back.target_ms(64, 896) == pytest.approx(240.0)
    assert prof.scaled(target=2.0).target_ms(64, 1536) == 600.0
    flat = costs.DeviceProfile("named", {1: 50.0, 64: 180.0})  # a named profile: one context, the price ignores it
    assert flat.target_ms(64, 5000) == 180.0


def test_the_long_context_curve_is_measured_only_for_models_whose_positions_reach_it():
    from types import SimpleNamespace

    from treegraft_lab.measure import long_context

    assert long_context(SimpleNamespace(config=SimpleNamespace(max_position_embeddings=512))) == 0  # the tests' tiny models
    assert long_context(SimpleNamespace(config=SimpleNamespace(max_position_embeddings=8192))) == costs.CONTEXT_LONG


def test_the_decoder_prices_its_trees_after_the_context_it_has_committed():
    """The decoder hands value pruning its committed length: with a long-context curve that makes every tree
    token dear past a few cached tokens, it verifies the root alone (a plain step) and stays lossless."""
    pair = tiny_pair("llama", scale=4.0)
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]
    cheap = {1: 10.0, 64: 12.0}
    dear = costs.DeviceProfile("t", cheap, {1: 1.0, 400: 2.0}, 0.1, context=4, target_long={1: 10.0, 2: 1000.0, 64: 60000.0},
                         context_long=20)
    flat = costs.DeviceProfile("t", cheap, {1: 1.0, 400: 2.0}, 0.1)
    kept = {}
    for name, prof in (("dear", dear), ("flat", flat)):
        dec = TreeGraftDecoder(pair, DecodeConfig(schedule="small", prune="value"), profile=prof)
        gen = dec.generate(prompt, max_new_tokens=12)
        assert gen.token_ids == hf_greedy(pair.target, prompt, 12)
        kept[name] = [r.kept for r in gen.rounds]
    assert set(kept["dear"]) == {0} and max(kept["flat"]) > 0  # kept: draft nodes verified beside the root
