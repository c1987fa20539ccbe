"""Profiles you can trust: a measurement records the load beside it and how it compares with the cached
profile; one measured on a busy machine is flagged, never silently cached as good, and never replaces a
trusted cached profile unless forced. Timings and load readings are injected: nothing here is timed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from treegraft_lab import cli, costs, measure
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.tiny import tiny_pair
from treegraft_lab.views.profile import profile_line
from treegraft_lab.views.timing import baseline_words, moved_words

QUIET = (0.1, 1.0)  # 1-minute load average before and after 40 s of measuring with 2 threads, nothing else running
TWO_LOOPS = (2.0, 2.97)  # the same beside two busy loops that ran all along: 2 + 2 * (1 - e^(-40/60)) after


@pytest.fixture
def pair(tmp_path, monkeypatch):
    """A tiny pair whose profile is cached under tmp_path, measured with 2 threads on a 2-CPU machine."""
    monkeypatch.setenv("TREEGRAFT_PROFILE_CACHE", str(tmp_path / "profiles"))
    monkeypatch.setattr(measure, "measuring_threads", lambda pair: 2)
    monkeypatch.setattr(measure, "note", lambda message: None)
    measure.read_profile.cache_clear()
    return tiny_pair("llama")


def machine(monkeypatch, before: float, after: float, seconds: float = 40.0, cpus: int = 2) -> None:
    """Every measurement from now on reads the load `before` and `after` it, `seconds` apart, on `cpus` CPUs."""

    def readings():
        at = 0.0
        while True:
            yield measure.LoadReading(before, cpus, at)
            yield measure.LoadReading(after, cpus, at + seconds)
            at += 1000.0

    it = readings()
    monkeypatch.setattr(measure, "read_load", lambda: next(it))


def timings(monkeypatch, target_1: float, target_128: float, when: str) -> list[str]:
    """`measure.measure` replaced by timings: a target forward of 1 and 128 tokens, measured `when`.
    Returns the dates of the measurements made."""
    made = []

    def fake(pair, progress=True, repeats=5):
        made.append(when)
        return costs.DeviceProfile(f"measured {when}", {1: target_1, 128: target_128}, {}, 0.5, "stand-in",
                                   f"measured {when}", key=measure.profile_key(pair), n=repeats, spread=0.04,
                                   measured=when)

    monkeypatch.setattr(measure, "measure", fake)
    return made


def test_the_load_beside_a_measurement_leaves_out_its_own_threads_and_the_minute_before():
    def others(before, after, seconds=40.0, threads=2):
        start, end = measure.LoadReading(before, 2, 0.0), measure.LoadReading(after, 2, seconds)
        return measure.load_record(start, end, threads)["others"]

    assert others(*TWO_LOOPS) == pytest.approx(2.0, abs=0.05)  # two busy loops all along
    assert others(*QUIET) == 0.0  # nothing but the measurement
    assert others(2.0, 2.0) == pytest.approx(0.0, abs=0.01)  # this process decoded just before, then measured alone
    assert others(0.0, 4 * (1 - 2.718281828 ** (-40 / 60))) == pytest.approx(2.0, abs=0.05)  # loops started with it
    assert others(1.8, 2.0, seconds=5.0) == 1.8  # too short to tell its share apart: the load it began on
    record = measure.load_record(measure.LoadReading(0.5, 2, 0.0), measure.LoadReading(1.0, 2, 40.0), 2)
    assert set(record) == {"before", "after", "seconds", "cpus", "threads", "others"} and record["cpus"] == 2
    assert measure.load_record(None, measure.LoadReading(1.0, 2, 40.0), 2) == {}  # no load average on this system


def test_a_profile_measured_beside_two_busy_loops_is_flagged_never_cached_as_good(pair, monkeypatch):
    machine(monkeypatch, *TWO_LOOPS)
    timings(monkeypatch, 228.9, 900.0, "2026-12-04 10:00")
    said = []
    monkeypatch.setattr(measure, "note", said.append)
    prof = measure.for_pair(pair, progress=False)
    assert prof.flagged == ["busy: other load 2.0 on 2 CPUs (busy from 1.0)"]
    assert prof.load["others"] == pytest.approx(2.0, abs=0.05) and prof.load["cpus"] == 2 and prof.load["threads"] == 2
    assert len(said) == 1 and "is flagged: busy: other load 2.0 on 2 CPUs" in said[0] and "--refresh" in said[0]
    measure.read_profile.cache_clear()
    back = measure.cached(pair)  # cached with its flag and load: every use says so
    assert back.flagged == prof.flagged and back.load == prof.load and not measure.trusted(back, pair)
    assert "⚠ flagged: busy: other load 2.0 on 2 CPUs" in costs.profile_name(back)


def test_a_quiet_measurement_is_cached_unflagged_with_the_load_it_was_measured_on(pair, monkeypatch):
    machine(monkeypatch, *QUIET)
    timings(monkeypatch, 139.9, 600.0, "2026-12-04 09:00")
    prof = measure.for_pair(pair, progress=False)
    assert prof.flagged == [] and prof.load["others"] == 0.0 and prof.compared == {}
    measure.read_profile.cache_clear()
    assert measure.cached(pair) == prof and measure.trusted(prof, pair)
    assert costs.profile_name(prof).endswith("· measured 2026-12-04 09:00, n=5, spread 4%, other load 0.0 on 2 CPUs")


def test_a_loaded_re_measure_keeps_the_trusted_cached_profile_and_says_so_unless_forced(pair, monkeypatch):
    machine(monkeypatch, *QUIET)
    timings(monkeypatch, 139.9, 600.0, "2026-12-04 09:00")
    good = measure.for_pair(pair, progress=False)
    machine(monkeypatch, *TWO_LOOPS)  # the reviewer's re-measure: 139.9 ms became 228.9 ms at a 6% spread
    timings(monkeypatch, 228.9, 900.0, "2026-12-04 10:00")
    with pytest.raises(measure.ProfileKept) as kept:
        measure.for_pair(pair, refresh=True, progress=False)
    message = str(kept.value)
    assert "\n" not in message and message.startswith("kept the cached profile (measured 2026-12-04 09:00)")
    assert "busy: other load 2.0 on 2 CPUs" in message and "target forward 1.6x the cached profile's (139.9 -> 228.9 ms" in message
    assert "`treegraft-lab profile --refresh --force`" in message and isinstance(kept.value, TreeGraftError)
    assert kept.value.kept == good and kept.value.refused.compared["ratio"] == pytest.approx([1.636, 1.5], abs=1e-3)
    measure.read_profile.cache_clear()
    assert measure.cached(pair) == good  # the cache still holds the good one
    forced = measure.for_pair(pair, refresh=True, progress=False, force=True)
    assert forced.measured == "2026-12-04 10:00" and len(forced.flagged) == 2
    assert forced.compared["measured"] == "2026-12-04 09:00" and forced.compared["tokens"] == [1, 128]
    measure.read_profile.cache_clear()
    assert measure.cached(pair) == forced


def test_a_re_measure_slower_than_the_cached_one_is_flagged_only_while_others_load_the_machine(pair, monkeypatch):
    machine(monkeypatch, *QUIET)
    timings(monkeypatch, 139.9, 600.0, "2026-12-04 09:00")
    measure.for_pair(pair, progress=False)
    machine(monkeypatch, 0.6, 1.57)  # others about 0.6 on 2 CPUs: loaded (>= 0.5), not busy (< 1.0)
    timings(monkeypatch, 228.9, 600.0, "2026-12-04 10:00")
    with pytest.raises(measure.ProfileKept, match=r"target forward 1\.6x the cached profile's .* at 1 token, other load 0\.6"):
        measure.for_pair(pair, refresh=True, progress=False)
    machine(monkeypatch, *QUIET)  # as slow on a quiet machine: believed (the device did change), and kept
    new = measure.for_pair(pair, refresh=True, progress=False)
    assert new.flagged == [] and new.measured == "2026-12-04 10:00" and new.compared["ratio"][0] == pytest.approx(1.636, abs=1e-3)
    unknown = costs.DeviceProfile("u", {1: 1.0}, compared={"tokens": [1], "ms": [1.0], "new_ms": [1.6], "ratio": [1.6]})
    assert measure.load_problems(unknown) == ["target forward 1.6x the cached profile's (1.0 -> 1.6 ms at 1 token, "
                                              "load unknown)"]  # a system without a load average: the comparison decides


def test_a_flagged_cached_profile_is_replaced_by_any_re_measure(pair, monkeypatch):
    machine(monkeypatch, *TWO_LOOPS)
    timings(monkeypatch, 228.9, 900.0, "2026-12-04 10:00")
    measure.for_pair(pair, progress=False)  # flagged: nothing trusted to keep
    timings(monkeypatch, 230.0, 910.0, "2026-12-04 11:00")
    again = measure.for_pair(pair, refresh=True, progress=False)  # still busy: the newer flagged one, no comparison
    assert again.measured == "2026-12-04 11:00" and again.flagged and again.compared == {}


def test_a_profile_saved_before_loads_were_recorded_still_loads(tmp_path):
    doc = costs.DeviceProfile("old", {1: 100.0, 128: 200.0}, n=5, spread=0.04, measured="2026-12-01 09:00").to_dict()
    del doc["load"], doc["compared"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    old = costs.load(path)
    assert old.load == {} and old.compared == {} and "other load" not in costs.profile_name(old)
    golden = costs.load(Path(__file__).parent / "golden" / "cpu-float32-profile.json")
    assert golden.load == {} and ", n=5, spread 9%" in costs.profile_name(golden)


def test_the_profile_line_names_n_spread_load_and_why_it_is_flagged():
    key = {"hardware": "Intel Xeon", "dtype": "float32", "threads": 2}
    prof = costs.DeviceProfile("x", {1: 100.0, 128: 200.0}, key=key, n=5, spread=0.04, measured="2026-12-04 10:00",
                               load={"others": 2.04, "cpus": 2}, flagged=["busy: other load 2.0 on 2 CPUs (busy from 1.0)"])
    assert costs.profile_name(prof) == ("Intel Xeon, float32, 2 threads · measured 2026-12-04 10:00, n=5, spread 4%, "
                                        "other load 2.0 on 2 CPUs, ⚠ flagged: busy: other load 2.0 on 2 CPUs (busy from 1.0)")
    assert profile_line(prof).count("busy from") == 1  # said once
    unjudged = costs.DeviceProfile("y", {1: 1.0}, key=key, n=5, measured="2026-12-04 10:00")
    assert costs.profile_name(unjudged).endswith(", n=5, spread not judged")
    assert costs.profile_name(costs.DeviceProfile("z", {1: 1.0}, key=key, measured="2026-12-01")).endswith(
        "n and spread not recorded")


def test_the_profile_command_keeps_the_cached_profile_and_says_so_unless_forced(pair, monkeypatch, capsys):
    from treegraft_lab.commands import profile as command

    monkeypatch.setattr(command, "load_pair_from_args", lambda args, require_mid=False: pair)
    machine(monkeypatch, *QUIET)
    timings(monkeypatch, 139.9, 600.0, "2026-12-04 09:00")
    assert cli.main(["profile", "--refresh"]) == 0
    capsys.readouterr()
    machine(monkeypatch, *TWO_LOOPS)
    timings(monkeypatch, 228.9, 900.0, "2026-12-04 10:00")
    assert cli.main(["profile", "--refresh"]) == 0
    out, err = capsys.readouterr()
    assert "treegraft-lab: kept the cached profile (measured 2026-12-04 09:00)" in err and len(err.strip().splitlines()) == 1
    assert "measured 2026-12-04 09:00" in out and "(kept: the re-measure was flagged)" in out
    assert cli.main(["profile", "--refresh", "--force"]) == 0
    out, _ = capsys.readouterr()
    assert "measured 2026-12-04 10:00" in out and "flagged: busy: other load 2.0 on 2 CPUs" in out
    assert "other load about 2.0" in out and "1.64x at 1 token" in out
    assert cli.main(["profile", "--force"]) == 2
    assert "--force keeps a re-measured profile: give it with --refresh" in capsys.readouterr().err


def test_a_plain_baseline_that_moved_more_than_2x_between_repeats_says_the_machine_was_busy():
    assert baseline_words([9.6, 8.1, 9.0]) == "plain decoding (median of 3: 8.1–9.6)"
    moved = baseline_words([2.8, 9.6, 5.0])
    assert moved.startswith("plain decoding (median of 3: 2.8–9.6; ⚠ moved 3.4x between its 3 repeats, more than 2x")
    assert "the machine was probably busy" in moved
    assert moved_words([1.0, 2.0]) == "" and moved_words([4.0]) == ""  # exactly 2x, or one timing: nothing to say
    with pytest.raises(ValueError, match="time it first"):
        baseline_words([])
