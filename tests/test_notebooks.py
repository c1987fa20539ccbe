"""Every workbench notebook is committed clean and, run top to bottom with SMOKE=1, shows what it claims:
each cell tagged "figure" outputs an image or a plotly figure, no matplotlib figure is left as its text
repr, the tables of cells tagged "headline" hold no NaN, no cell errors and no script comes from the
internet. The browser test (tests/test_browser.py) runs each notebook once, in JupyterLab, and applies
these checks to the notebook as the browser holds it; this file holds the checks and the full-size run
of notebook 08.

The notebooks share one folder of recorded runs for the whole test session (what one notebook
records, the next one loads), so the model decodes each small run once.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pandas as pd
import pytest

NB_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(p.name for p in NB_DIR.glob("*.ipynb"))
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CELL_TIMEOUT_S = 420


def shared_runs_dir(tmp_path_factory) -> Path:
    """One folder of recorded runs per test session, shared by the notebook and browser tests."""
    path = tmp_path_factory.getbasetemp() / "workbench-runs"
    path.mkdir(exist_ok=True)
    return path


FIGURE_MIMES = ("image/png", "application/vnd.plotly.v1+json")


def content_problems(nb) -> list[str]:
    """What an executed notebook fails to show: figure cells without a figure, matplotlib text reprs,
    NaN in headline tables."""
    out = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.get("tags", [])
        data = [o.get("data", {}) for o in cell.outputs if o.output_type in ("display_data", "execute_result")]
        text = " ".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        text += " ".join(d.get("text/plain", "") for d in data if len(d) == 1)  # a text-only repr
        if re.search(r"<Figure size \d+x\d+ with \d+ Axes>", text):
            out.append(f"cell {i}: a matplotlib figure shown as text")
        if "figure" in tags and not any(m in d for d in data for m in FIGURE_MIMES):
            out.append(f"cell {i}: tagged figure, but shows no image or plotly figure")
        if "headline" in tags:
            html = " ".join(d.get("text/html", "") for d in data)
            if not html:
                out.append(f"cell {i}: tagged headline, but shows no table")
            if re.search(r">\s*(NaN|nan|None)\s*<", html):
                out.append(f"cell {i}: a headline table shows NaN")
    return out


def test_content_checks_catch_a_broken_twin():
    def cell(tags, *outputs):
        c = nbformat.v4.new_code_cell("x", metadata={"tags": tags})
        c.outputs = [nbformat.v4.new_output("display_data", data=d) for d in outputs]
        return c

    broken = nbformat.v4.new_notebook(cells=[
        cell([], {"text/plain": "<Figure size 1000x360 with 2 Axes>"}),
        cell(["figure"], {"text/plain": "a caption only"}),
        cell(["headline"], {"text/html": "<table><tr><td>NaN</td></tr></table>", "text/plain": "t"}),
        cell(["figure"], {"image/png": "iVBORw0KGgo=", "text/plain": "<IPython.core.display.Image object>"}),
        cell(["headline"], {"text/html": "<table><tr><td>—</td><td>61.47%</td></tr></table>", "text/plain": "t"}),
    ])
    found = content_problems(broken)
    assert [p.split(":")[0] for p in found] == ["cell 0", "cell 1", "cell 2"], found


def test_every_notebook_tags_its_figures_and_headline_tables():
    for name in NOTEBOOKS:
        tags = {t for c in nbformat.read(NB_DIR / name, as_version=4).cells for t in c.metadata.get("tags", [])}
        if name.startswith(("01", "02", "03", "04", "05", "07", "08")):
            assert "figure" in tags, name
        if name.startswith(("03", "04", "05", "06", "07", "08")):
            assert "headline" in tags, name


def long_functions(nb, limit: int = 3) -> list[str]:
    """The functions (and methods) defined in a notebook's code cells that run over `limit` lines."""
    import ast

    out = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in cell.source.splitlines())
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit:
                out.append(f"cell {i}: {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    return out


def test_notebook_07_defines_no_function_longer_than_three_lines():
    nb = nbformat.read(NB_DIR / "07_paper_tables.ipynb", as_version=4)
    assert long_functions(nb) == [], "move the logic into treegraft_lab.viz.paper_bench and call it"


def test_long_function_check_sees_a_four_line_function():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("def ok(x):\n    return x\n"),
                                         nbformat.v4.new_code_cell("%%time\ndef f(x):\n    y = x\n    z = y\n    return z")])
    assert long_functions(nb) == ["cell 1: f (4 lines)"]


def test_there_are_eight_notebooks():
    assert len(NOTEBOOKS) == 8, NOTEBOOKS


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_committed_with_outputs_cleared(name):
    nb = nbformat.read(NB_DIR / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{name}: clear the outputs before committing"
    assert "SMOKE" in "".join(c.source for c in nb.cells) or "wb.sizes()" in "".join(c.source for c in nb.cells)


def executed_problems(name: str, nb) -> list[str]:
    """What a notebook executed top to bottom (with SMOKE=1) fails to show. The browser test runs every
    notebook once in JupyterLab, reads it as the browser holds it, and asserts this is empty: an error
    output, a script loaded from the internet, `content_problems`, and 08's adaptive row."""
    text = json.dumps(nb)
    out = []
    # plotly's JS is embedded (its bundle merely mentions a CDN address for map topologies), never loaded by URL
    if re.search(r"<script[^>]*src=[\\\"']*https?://", text):
        out.append("a script is loaded from the internet")
    out += [f"cell {i}: error output {o.get('ename')}" for i, c in enumerate(nb.cells) if c.cell_type == "code"
            for o in c.outputs if o.output_type == "error"]
    out += content_problems(nb)
    if name.startswith("08"):  # the adaptive scheduler's real decodes are in the smoke run's tables too
        (paper,) = [c for c in nb.cells if "headline" in c.metadata.get("tags", []) and "PAPER.MAIN" in c.source]
        html = next(o["data"]["text/html"] for o in paper.outputs if o.output_type == "execute_result")
        row = html[html.index("TreeGraft (adaptive)"):]
        row = row[:row.index("</tr>")]
        if "—" in row or row.count("x</td>") != 3:
            out.append(f"08: the adaptive row is not filled: {row}")
    return out


def test_executed_problems_catch_an_error_a_cdn_script_and_an_empty_adaptive_row():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")])
    assert executed_problems("01_x.ipynb", nb) == []
    nb.cells[0].outputs = [nbformat.v4.new_output("error", ename="ValueError", evalue="v", traceback=[])]
    nb.cells.append(nbformat.v4.new_markdown_cell('<script src="https://cdn.example/plotly.js"></script>'))
    assert executed_problems("01_x.ipynb", nb) == ["a script is loaded from the internet", "cell 0: error output ValueError"]
    table = "<table><tr><td>TreeGraft (adaptive)</td><td>—</td><td>1.2x</td></tr></table>"
    cell = nbformat.v4.new_code_cell("t  # PAPER.MAIN", metadata={"tags": ["headline"]})
    cell.outputs = [nbformat.v4.new_output("execute_result", data={"text/html": table, "text/plain": "t"})]
    assert [p[:30] for p in executed_problems("08_x.ipynb", nbformat.v4.new_notebook(cells=[cell]))] == [
        "08: the adaptive row is not fi"]


@pytest.mark.slow
def test_the_regime_notebook_at_full_size_tables_every_ratio_the_family_was_decoded_at(executed_notebook):
    """Notebook 08 reads only stored data, so it runs at full size here: its headline table keeps
    every ratio the family scheduler was decoded at, and a scheduler decoded at fewer is named
    beside it instead of leaving NaN cells."""
    from treegraft_lab import regime

    nb = executed_notebook("08_where_when_matters.ipynb", "0")  # the same run tests/test_regime_mids.py reads
    assert not content_problems(nb), content_problems(nb)
    runs = regime.load_decodes(NB_DIR.parent / "data" / "regime" / "smollm2-pocket-lookup-topk", "a100-paper")
    family = sorted(runs.loc[runs["schedule"] == "adaptive-family", "ratio"].unique())
    (cell,) = [c for c in nb.cells if "headline" in c.metadata.get("tags", []) and "family / better" in c.source]
    html = next(o["data"]["text/html"] for o in cell.outputs if o.output_type == "execute_result")
    body = html[html.index("<tbody>"):html.index("</tbody>")]
    assert len(family) >= 6 and body.count("<tr>") == len(family)
    notes = " ".join(o["data"].get("text/markdown", "") for o in cell.outputs if o.output_type == "display_data")
    assert "adaptive-single, decoded at 0.6 only" in notes
    cells = [re.findall(r"<t[hd][^>]*>\s*(.*?)\s*</t[hd]>", row) for row in re.findall(r"<tr>(.*?)</tr>", html, re.S)]
    col = cells[0].index("family / better")  # the header row; body rows start with their ratio
    gain = regime.when_pays(pd.Series({float(r[0]): float(r[col].rstrip("x")) for r in cells if r and r[0][:1].isdigit()}))
    assert f"**Where WHEN pays.** {gain}" in notes and "the family scheduler beats" in gain
    (paper,) = [c for c in nb.cells if "headline" in c.metadata.get("tags", []) and "PAPER.MAIN" in c.source]
    html = next(o["data"]["text/html"] for o in paper.outputs if o.output_type == "execute_result")
    # the paper's columns hold its numbers; ours is a named extra column with its n, never in the paper's
    assert "ours, extra (n = 12)" in html and html.count("(paper, n = 480)") == 2 and html.count("1.49x") == 1


def stream_text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


SHOWCASE_RUN = "suite-adaptive-budget=63-clock=a100-paper@0.1-prune=topk-small=ngram-n1-t32-smoke"  # 05's and 06's


def planes_of(policy) -> list[tuple[str, str]]:
    sig = policy.signals
    return [(sig[0], sig[1]), (sig[2], sig[3]), (sig[4], sig[5]), ("t_tgt_ms", "t_mid_ms")]


@pytest.mark.slow
def test_notebook_05_opens_on_a_boundary_where_when_pays_and_draws_the_one_sided_case_after(
        executed_notebook, tmp_path_factory, monkeypatch):
    """05's first figure: TreeGraft adaptive (what schedule="adaptive" loads, here the family scheduler) on the
    showcase setting, whose recorded run both calls and skips the mid drafter, drawn with those decisions and a
    sentence computed from them; then TreeGraft adaptive on a100-paper, one-sided, said as such."""
    import types

    from treegraft_lab import DecodeConfig, costs, load_run
    from treegraft_lab.presets import SHOWCASE_CONFIG, SHOWCASE_PROFILE
    from treegraft_lab.schedule.adaptive import AdaptivePolicy
    from treegraft_lab.viz import boundary

    runs = shared_runs_dir(tmp_path_factory)
    monkeypatch.setenv("TREEGRAFT_RUNS_DIR", str(runs))  # the kernel records its runs there; this test reads them back
    monkeypatch.setenv("RERECORD", "0")
    nb = executed_notebook("05_scheduler_boundary.ipynb", "1")
    assert executed_problems("05_scheduler_boundary.ipynb", nb) == []
    (setup,) = [c for c in nb.cells if "adaptive_words(pair.name, profile_class(profile)" in c.source]
    assert ("TreeGraft adaptive for smollm2-pocket on a100-paper@0.1 (prune=topk, growth lookup, small drafter "
            "ngram) is family-topk-lookup, the family scheduler") in stream_text(setup)
    pocket = types.SimpleNamespace(name="smollm2-pocket")
    policy = AdaptivePolicy.for_pair(pocket, DecodeConfig(schedule="adaptive", **SHOWCASE_CONFIG), costs.load(SHOWCASE_PROFILE))
    inputs = boundary.step_inputs(load_run(runs / SHOWCASE_RUN), policy)
    recorded = inputs["recorded call"].astype(bool)
    assert recorded.any() and not recorded.all()  # the run's own decisions: calls and skips
    share = inputs.groupby("step")["recorded call"].mean()
    field = boundary.field(policy, inputs, int((share - 0.5).abs().idxmin()), planes_of(policy))
    assert not field.uniform and field.crossing()  # a boundary, on the planes of inputs it reads
    (verdict,) = [c for c in nb.cells if "FIELD = boundary.field(policy" in c.source]
    assert stream_text(verdict).strip() == field.text("TreeGraft adaptive (family-topk-lookup)", f"On {SHOWCASE_PROFILE}")
    (first,) = [c for c in nb.cells if "boundary_figure(policy, inputs" in c.source]
    fig = next(o["data"][FIGURE_MIMES[1]] for o in first.outputs if FIGURE_MIMES[1] in o.get("data", {}))
    drawn = {t.get("name"): len([v for v in t.get("x") or [] if v is not None]) for t in fig["data"]}
    assert drawn["recorded: called mid"] > 0 and drawn["recorded: skipped"] > 0
    (one,) = [c for c in nb.cells if "ONE_CONFIG = " in c.source]
    one_policy = AdaptivePolicy.for_pair(pocket, DecodeConfig(schedule="adaptive", clock="a100-paper", prune="topk"),
                                         costs.load("a100-paper"))
    one_inputs = boundary.step_inputs(load_run(runs / "suite-adaptive-clock=a100-paper-prune=topk-n1-t8-smoke"), one_policy)
    one_share = one_inputs.groupby("step")["recorded call"].mean()
    one_field = boundary.field(one_policy, one_inputs, int((one_share - 0.5).abs().idxmin()), planes_of(one_policy))
    said = one_field.text("TreeGraft adaptive (a100-paper-topk-lookup-ngram+recycling)", "On a100-paper")
    assert said in stream_text(one) and any(FIGURE_MIMES[1] in o.get("data", {}) for o in one.outputs)


@pytest.mark.slow
def test_notebook_06_opens_on_a_round_where_adaptive_calls_the_mid_drafter_and_beats_both_endpoints(
        executed_notebook, tmp_path_factory, monkeypatch):
    """06's playground opens on a round of TreeGraft adaptive's recorded run on the showcase setting where it called
    the mid drafter and the target accepted a node only the mid drafter drafted; its replay table has adaptive's
    modelled tokens/s above all-small's and all-mid's on that round."""
    from treegraft_lab import load_run

    runs = shared_runs_dir(tmp_path_factory)
    monkeypatch.setenv("TREEGRAFT_RUNS_DIR", str(runs))
    monkeypatch.setenv("RERECORD", "0")
    nb = executed_notebook("06_schedule_playground.ipynb", "1")
    assert executed_problems("06_schedule_playground.ipynb", nb) == []
    (opening,) = [c for c in nb.cells if "paying_round(" in c.source]
    prompt_id, rd = map(int, re.search(r"opening on prompt (\d+), round (\d+):", stream_text(opening)).groups())
    run = load_run(runs / SHOWCASE_RUN)
    steps = run.steps[(run.steps["run"] == prompt_id) & (run.steps["round"] == rd)]
    tree = run.tree[(run.tree["run"] == prompt_id) & (run.tree["round"] == rd)]
    assert steps["call_mid"].astype(bool).any()
    assert ((tree["drafted_by"] == "mid") & tree["accepted"].astype(bool)).any()
    (replayed,) = [c for c in nb.cells if "table = pg.replay()" in c.source]
    html = next(o["data"]["text/html"] for o in replayed.outputs if o.output_type == "execute_result")
    rows = [re.findall(r"<t[hd][^>]*>\s*(.*?)\s*</t[hd]>", tr, re.S) for tr in re.findall(r"<tr>(.*?)</tr>", html, re.S)]
    modelled = {r[0]: float(r[-1]) for r in rows if r and r[-1].replace(".", "", 1).isdigit()}
    (adaptive,) = [v for k, v in modelled.items() if "adaptive" in k and not k.startswith("all-")]
    (small,) = [v for k, v in modelled.items() if k.startswith("all-small")]
    (mid,) = [v for k, v in modelled.items() if k.startswith("all-mid")]
    assert adaptive > max(small, mid)


@pytest.mark.slow
def test_notebook_08_says_which_scheduler_is_treegraft_adaptive_and_tables_it_as_such(executed_notebook):
    """08 says, computed from the stored decodes, which of its schedulers is TreeGraft adaptive (what
    schedule="adaptive" loads for its pair, profile and settings) and what the family scheduler is; its row
    "TreeGraft (adaptive)" beside the paper's holds TreeGraft adaptive's speedup, the family scheduler a row of its own."""
    from treegraft_lab import costs, regime
    from treegraft_lab.schedule.choice import treegraft_adaptive

    folder = NB_DIR.parent / "data" / "regime" / "smollm2-pocket-lookup-topk"
    base, cfg = costs.load("a100-paper"), regime.map_config("lookup")
    mine = treegraft_adaptive("smollm2-pocket", "a100-paper", cfg)
    name = regime.adaptive_name(folder, "smollm2-pocket", base, cfg)
    nb = executed_notebook("08_where_when_matters.ipynb", "1")
    (which,) = [c for c in nb.cells if "regime.which_adaptive(" in c.source]
    shown = "".join(o["data"].get("text/markdown", "") for o in which.outputs if o.output_type == "execute_result")
    assert shown.startswith("**Which scheduler is which.** **TreeGraft adaptive** for smollm2-pocket on a100-paper")
    assert f" is {mine.name}, the single-profile scheduler for a100-paper" in shown and name == "adaptive-single"
    assert f"Its decodes on this map are `{name}`" in shown
    assert "`adaptive-family` is family-topk-lookup, the family scheduler" in shown
    df, _ = regime.load(folder)
    reps = regime.split(df, 5)[:2]  # SMOKE: the notebook's two prompts
    at = regime.summary(regime.load_decodes(folder, "a100-paper", reps, [0.6])).set_index("schedule")["speedup"]
    (paper,) = [c for c in nb.cells if "headline" in c.metadata.get("tags", []) and "PAPER.MAIN" in c.source]
    html = next(o["data"]["text/html"] for o in paper.outputs if o.output_type == "execute_result")
    rows = {r[0]: r[1:] for r in (re.findall(r"<t[hd][^>]*>\s*(.*?)\s*</t[hd]>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", html, re.S))}
    assert rows["TreeGraft (adaptive)"][-1] == f"{at[name]:.2f}x"
    assert rows["family scheduler"] == ["—", "—", f"{at['adaptive-family']:.2f}x"]


@pytest.mark.slow
def test_notebook_08_tables_each_schedulers_capture_and_says_it_in_a_sentence_computed_from_the_stored_walks(
        executed_notebook):
    """08's capture section: one row per scheduler (the eval map's and every held-out learner, the hindsight
    diagnostic marked as such) and the sentence `capture_sentence` gives for the stored data."""
    from treegraft_lab import costs, regime
    from treegraft_lab.training import imitation as im

    nb = executed_notebook("08_where_when_matters.ipynb", "0")
    (table,) = [c for c in nb.cells if "held_out_capture(" in c.source]
    html = next(o["data"]["text/html"] for o in table.outputs if o.output_type == "execute_result")
    held = im.held_out_capture(regime.held_out_folder("smollm2-pocket"), costs.load("a100-paper"), regime.map_config())
    assert held, "no held-out walks stored: treegraft-lab regime --learn"
    for name, cap in held.items():
        assert name in html and f"{cap['ci95'][0]:.0%} to {cap['ci95'][1]:.0%}" in html
    assert "hindsight (diagnostic)" in html and "adaptive-family" in html and "adaptive-map" in html
    (said,) = [c for c in nb.cells if "capture_sentence(" in c.source]
    text = "".join(o["data"].get("text/markdown", "") for o in said.outputs if o.output_type == "execute_result")
    assert re.match(r"\*\*On \d+ held-out prompts the best learned scheduler", text) and "% of the oracle's gain" in text
    assert "(4 prompts, no interval)" in text  # the eval map's n, read from its data


@pytest.mark.slow
def test_notebook_05_steps_through_the_learned_scheduler_where_when_pays(executed_notebook):
    """05's WHEN-pays section: all-small, all-mid, TreeGraft adaptive and the learned scheduler on a100-paper@0.1, all
    lossless; the learned scheduler calls the mid drafter there, and its table lists those steps with the inputs it read."""
    nb = executed_notebook("05_scheduler_boundary.ipynb", "1")
    (cell,) = [c for c in nb.cells if "WHEN_PAYS = SHOWCASE_PROFILE" in c.source]
    html = next(o["data"]["text/html"] for o in cell.outputs if o.output_type == "execute_result")
    rows = {r[0]: r[1:] for r in (re.findall(r"<t[hd][^>]*>\s*(.*?)\s*</t[hd]>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", html, re.S)) if r}
    named = ("all-small", "all-mid", "TreeGraft adaptive", "learned scheduler")
    assert set(named) <= set(rows) and all(rows[k][-1] == "True" for k in named)
    (steps,) = [c for c in nb.cells if "the learned scheduler was asked at" in c.source]
    shown = stream_text(steps)
    called = int(re.search(r"called the mid drafter at (\d+)", shown).group(1))
    from treegraft_lab.schedule.stepwise import StepwisePolicy, learned_folder

    inputs = StepwisePolicy.load(learned_folder("smollm2-pocket")).features
    assert called > 0 and all(f in shown for f in inputs)  # the inputs that made it call, named
