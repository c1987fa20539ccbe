"""The schedule playground's session replays, tabulates and exports a round start with no widget at all."""

from __future__ import annotations

import ast
import io
import json
from pathlib import Path

import pandas as pd
import pytest

from tests.test_widgets import PROMPT, tiny_pair
from treegraft_lab import TreeGraftDecoder, costs, record
from treegraft_lab.config import preset
from treegraft_lab.errors import TreeGraftError
from treegraft_lab.views import session as session_module
from treegraft_lab.views.playground import SchedulePlayground
from treegraft_lab.views.session import PlaygroundSession
from treegraft_lab.viz.caption import prompt_words
from treegraft_lab.viz.runs import round_context

SESSION_FILE = Path(session_module.__file__)


@pytest.fixture(scope="module")
def recorded():
    """The tiny pair and a run of it priced on the paper's A100 profile (nothing measured)."""
    pair = tiny_pair()
    dec = TreeGraftDecoder(pair, preset("full", schedule="10101", budget=12, clock="a100-paper"))
    with record(dec) as rec:
        dec.generate(PROMPT, max_new_tokens=20)
    return pair, rec.to_run()


@pytest.fixture
def session(recorded, tmp_path, monkeypatch):
    monkeypatch.setattr("treegraft_lab.schedule.adaptive.artifact_dir", lambda name: tmp_path)  # no scheduler trained
    pair, run = recorded
    return PlaygroundSession(pair, run, round=1, clock="a100-paper", repeats=2, warmup=False)


def test_the_session_module_imports_no_widget_code():
    names = set()
    for node in ast.walk(ast.parse(SESSION_FILE.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    assert not {n for n in names if n.startswith(("ipywidgets", "IPython", "plotly"))}
    assert {n for n in names if n.startswith("treegraft_lab.views.")} <= {"treegraft_lab.views.table",
                                                                           "treegraft_lab.views.timing"}


def test_a_session_opens_on_the_recorded_rounds_settings(session, recorded):
    _, run = recorded
    rec = run.rounds.iloc[1]
    assert session.now == {"round": 1, "schedule": rec["schedule"], "eg": True, "nd": True, "budget": 12,
                           "prune": "topk", "clock": "a100-paper", "repeats": 2}
    assert session.context == round_context(run, 1) and session.changed() == {}


def test_a_replay_tabulates_the_recorded_round_plain_decoding_and_every_setting(session, recorded):
    _, run = recorded
    session.update(schedule="11101", budget=8)
    heard: list[str] = []
    df = session.replay(heard.append)
    assert list(df["setting"][:3]) == ["recorded run", "plain decoding", "yours (11101)"]
    assert set(df["setting"]) == {"recorded run", "plain decoding", "yours (11101)", "all-small", "all-mid"}
    assert len(heard) == 2 * 4 and heard[0].startswith("replaying: ") and "(1/2)" in heard[0]
    rows = df.set_index("setting")
    recorded_round = run.rounds.iloc[1]
    assert rows.loc["recorded run", "A"] == recorded_round["accepted"]
    assert rows.loc["recorded run", "pruning (budget)"] == "top-k (12)" and rows.loc["plain decoding", "pruning (budget)"] == "—"
    for name, (info, _) in session.results.items():
        assert rows.loc[name, "A"] == info.accepted and rows.loc[name, "kept"] == info.kept <= 8
        assert rows.loc[name, "pruning (budget)"] == "top-k (8)"
        assert rows.loc[name, "modelled round (ms)"] == pytest.approx(info.modelled_ms)
        assert len(session.times[name]) == 2
    assert rows.loc["yours (11101)", "schedule"] == "11101" and rows.loc["all-small", "mid calls"] == 0
    assert rows.loc["plain decoding", "speedup"] == 1.0 and rows.loc["plain decoding", "A"] == 0
    a100 = costs.load("a100-paper")
    assert rows.loc["plain decoding", "modelled tokens/s"] == pytest.approx(1000 / a100.target_ms(1))
    assert df.attrs["modelled_on"] == costs.profile_name(a100) and df.attrs["repeats"] == 2


def test_the_csv_names_what_made_the_table_and_reads_back_as_its_rows(session, recorded):
    _, run = recorded
    session.update(schedule="00000", eg=False)
    df = session.replay()
    csv = session.export_csv(df)
    head = [line[2:] for line in csv.splitlines() if line.startswith("# ")]
    fields = dict(line.split(": ", 1) for line in head[1:])
    assert head[0] == "TreeGraft Lab schedule playground: round 1 of recorded run 0, replayed"
    assert list(fields) == ["pair", "prompt", "recorded run", "replayed", "profile", "date"]
    assert fields["pair"] == "tiny" and fields["prompt"] == prompt_words(run.runs["prompt_text"].iloc[0])
    assert fields["replayed"].startswith("your schedule 00000, w/o EG, top-k pruning, budget 12, 2 timed replays")
    assert fields["profile"].startswith(costs.profile_name(costs.load("a100-paper")))
    back = pd.read_csv(io.StringIO(csv), comment="#")
    assert list(back.columns) == list(df.columns)
    assert back["setting"].tolist() == df["setting"].tolist() and back["A"].tolist() == df["A"].tolist()
    js = json.loads(session.export_json(df))
    assert js["about"] == head and js["settings"]["schedule"] == "00000" and len(js["rows"]) == len(df)
    yours = next(k for k in session.results if k.startswith("yours"))
    assert session.twins.get(yours) == "all-small"  # 00000 decides as all-small: named, timed together


def test_a_changed_setting_is_told_against_the_replay_and_an_unknown_one_refused(session):
    session.replay()
    assert session.changed() == {}
    session.update(budget=9, round=0)
    assert session.changed() == {"round": (1, 0), "budget": (12, 9)}
    assert session.round_idx == 0 and session.context == PROMPT
    with pytest.raises(TreeGraftError, match="no playground setting"):
        session.update(bugdet=9)


def test_the_playground_view_reads_and_drives_its_session(recorded, tmp_path, monkeypatch):
    monkeypatch.setattr("treegraft_lab.schedule.adaptive.artifact_dir", lambda name: tmp_path)
    pair, run = recorded
    pg = SchedulePlayground(pair, run, round=1, clock="a100-paper", repeats=1, warmup=False)
    pg.budget.value = 9
    assert pg.session.now["budget"] == 9 and pg.settings() == pg.session.settings()
    df = pg.replay()
    assert pg.results is pg.session.results and df["setting"].tolist() == pg.table_frame()["setting"].tolist()
    with pytest.raises(AttributeError):
        pg.no_such_attribute  # noqa: B018 - only the session's named attributes are read through
