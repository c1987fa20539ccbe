"""The seven notebooks in a real browser: JupyterLab on localhost, headless Debian Chromium, Playwright.

Each notebook runs all its cells under SMOKE=1; where it invites interaction the test interacts (the
viewer's sliders and pruning switch, the animation's play button, the playground's toggles and
replay). Then every cell is looked at on screen: no matplotlib figure left as text, no widget
loading or broken, nothing wider than its output area, no legend or plot control outside its
figure, no two controls on top of each other. Screenshots of every cell go to
test-artifacts/browser/. A broken twin notebook shows that each check does fail.
Needs /usr/bin/chromium (`make browser-deps` installs it; this test tries apt-get itself otherwise).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from tests.test_notebooks import NB_DIR, NOTEBOOKS, shared_runs_dir

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "browser"
VIEWPORT = {"width": 1280, "height": 1300}  # a laptop screen's width, JupyterLab's default layout (file browser open); tall for screenshots
TWIN = "broken_twin.ipynb"
README_SHOTS = {"01_step_through.ipynb": (".tg-viewer", "viewer"), "02_tree_growth_animation.ipynb": (".js-plotly-plot", "growth"),
                "05_scheduler_boundary.ipynb": (".js-plotly-plot", "boundary"), "06_schedule_playground.ipynb": (".tg-playground", "playground")}

# Every check, run on one cell element; returns [kind, detail] pairs.
CHECKS_JS = r"""
cell => {
  const out = [], box = e => e.getBoundingClientRect(), shown = b => b.width > 0 && b.height > 0;
  const hit = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 &&
                        Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1;
  for (const o of cell.querySelectorAll('.jp-OutputArea-output')) {
    const text = o.innerText || '', ob = box(o);
    if (/<Figure size \d+x\d+ with \d+ Axes>/.test(text)) out.push(['matplotlib-text', text.slice(0, 60)]);
    if (/Loading widget|Error displaying widget/.test(text)) out.push(['widget-not-shown', text.slice(0, 80)]);
    for (const el of o.querySelectorAll('.js-plotly-plot svg.main-svg, img, table, .jupyter-widgets')) {
      const b = box(el);
      if (shown(b) && (b.right > ob.right + 1 || b.left < ob.left - 1))
        out.push(['wider-than-output', `${el.tagName.toLowerCase()} ${Math.round(b.width)} px in ${Math.round(ob.width)} px`]);
    }
    if (o.scrollWidth > o.clientWidth + 1) out.push(['wider-than-output', `scrolls: ${o.scrollWidth} px in ${o.clientWidth} px`]);
  }
  for (const plot of cell.querySelectorAll('.js-plotly-plot')) {
    const svg = plot.querySelector('svg.main-svg');
    if (!svg) continue;
    const sb = box(svg);
    for (const el of plot.querySelectorAll('g.legend, g.slider-container, g.updatemenu-container')) {
      const b = box(el);
      if (shown(b) && (b.left < sb.left - 1 || b.right > sb.right + 1 || b.top < sb.top - 1 || b.bottom > sb.bottom + 1))
        out.push(['outside-figure', `${el.getAttribute('class')} [${Math.round(b.left)}, ${Math.round(b.right)}] x ` +
                  `[${Math.round(b.top)}, ${Math.round(b.bottom)}] in [${Math.round(sb.left)}, ${Math.round(sb.right)}] x ` +
                  `[${Math.round(sb.top)}, ${Math.round(sb.bottom)}]`]);
    }
    const buttons = [...plot.querySelectorAll('g.updatemenu-button')].map(box).filter(shown);
    const slider = [...plot.querySelectorAll('g.slider-group > text.slider-label, rect.slider-rail-rect, g.slider-label-group')]
      .map(box).filter(shown);
    for (const a of buttons) for (const b of slider) if (hit(a, b)) out.push(['controls-overlap', 'plot button and slider']);
  }
  const sel = '.widget-inline-hbox, .jupyter-button, .widget-checkbox, .widget-dropdown, .widget-label';
  const ctrls = [...cell.querySelectorAll(sel)].filter(e => !e.parentElement.closest(sel)).map(e => [e, box(e)])
    .filter(([, b]) => shown(b));
  for (let i = 0; i < ctrls.length; i++)
    for (let j = i + 1; j < ctrls.length; j++)
      if (hit(ctrls[i][1], ctrls[j][1]))
        out.push(['controls-overlap', `${ctrls[i][0].innerText.slice(0, 30)} / ${ctrls[j][0].innerText.slice(0, 30)}`]);
  return out;
}
"""


def ensure_chromium() -> None:
    if Path(CHROMIUM).exists():
        return
    if shutil.which("apt-get") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=False, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"], env=env,
                       check=False, capture_output=True)
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing and apt-get could not install it: run `make browser-deps` (as root)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def broken_twin() -> nbformat.NotebookNode:
    """One cell per defect the checks must catch, and one clean cell. Cell i's expected check is TWIN_EXPECT[i]."""
    cells = [
        "import ipywidgets as W, pandas as pd, plotly.graph_objects as go\nfrom matplotlib.figure import Figure\n"
        "def fig(**kw):\n    return go.Figure(go.Scatter(x=[0, 1], y=[0, 1], name='a line'), layout=kw)",
        "f = Figure(figsize=(10, 3.6)); f.subplots(1, 2); f",
        "display({'application/vnd.jupyter.widget-view+json': {'model_id': 'no-such-model', 'version_major': 2, "
        "'version_minor': 0}}, raw=True)",
        "fig(width=2000, height=300)",
        "pd.DataFrame([[123456.789] * 40], columns=[f'a long column {i}' for i in range(40)])",
        "fig(width=600, height=300, showlegend=True, legend={'x': 0.9}, margin={'r': 20, 'autoexpand': False})",
        "fig(width=600, height=300, updatemenus=[{'type': 'buttons', 'x': 0.1, 'y': -0.1, 'yanchor': 'top', "
        "'buttons': [{'label': 'play', 'method': 'skip'}]}], sliders=[{'x': 0.0, 'y': -0.1, 'yanchor': 'top', "
        "'len': 0.9, 'currentvalue': {'prefix': 'showing: '}, 'steps': [{'label': 'one', 'method': 'skip'}, {'label': 'two', 'method': 'skip'}]}], "
        "margin={'b': 150})",
        "W.HBox([W.Button(description='first'), W.Button(description='second', layout={'margin': '0 0 0 -60px'})])",
        "fig(width=500, height=300)",
    ]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells], metadata={
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}})


TWIN_EXPECT = [None, "matplotlib-text", "widget-not-shown", "wider-than-output", "wider-than-output", "outside-figure",
               "controls-overlap", "controls-overlap", None]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 with a random token and temp dirs, serving copies of the notebooks."""
    ensure_chromium()
    from treegraft_lab.profile_cache import cache_dir as profile_cache
    from treegraft_lab.zoo.target import cache_dir

    runs = shared_runs_dir(tmp_path_factory)
    base = tmp_path_factory.mktemp("lab")
    root, home = base / "root", base / "home"
    root.mkdir()
    home.mkdir()
    for name in NOTEBOOKS:  # copies: JupyterLab may autosave outputs into them
        shutil.copy(NB_DIR / name, root / name)
    nbformat.write(broken_twin(), root / TWIN)
    env = {**os.environ, "SMOKE": "1", "TREEGRAFT_RUNS_DIR": str(runs), "RERECORD": "0", "HOME": str(home),
           "TREEGRAFT_LAB_CACHE": str(cache_dir()), "TREEGRAFT_PROFILE_CACHE": str(profile_cache()),  # measured once, shared
           "JUPYTER_CONFIG_DIR": str(base / "config"),
           "JUPYTER_DATA_DIR": str(base / "data"), "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
           "IPYTHONDIR": str(base / "ipython"), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    settings = base / "config/lab/user-settings/@jupyterlab"
    for rel, value in (("apputils-extension/notification.jupyterlab-settings", {"fetchNews": "false"}),
                       ("notebook-extension/tracker.jupyterlab-settings", {"windowingMode": "none"})):
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(value))
    port, token = free_port(), secrets.token_hex(16)
    log = open(base / "lab.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
                             f"--port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
                             "--allow-root"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=NB_DIR)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail(f"JupyterLab did not start; see {base / 'lab.log'}")
        yield {"url": url, "token": token, "home": home}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def browser(lab):
    """One headless Chromium for the module; `blocked` collects every request to a host other than the lab."""
    from playwright.sync_api import sync_playwright

    home_before = os.environ.get("HOME", "")
    os.environ["HOME"] = str(lab["home"])  # Chromium writes under HOME
    blocked: list[str] = []
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            yield b, blocked
            b.close()
    finally:
        os.environ["HOME"] = home_before


def open_and_run_all(browser, lab, name: str, timeout_s: float = 300):
    """A page with `name` open and every cell executed; widgets given time to render."""
    b, blocked = browser

    def route(r):
        u = r.request.url
        if u.startswith(lab["url"]) or u.startswith(("data:", "blob:")):
            r.continue_()
        else:
            blocked.append(u)
            r.abort()

    page = b.new_page(viewport=VIEWPORT)
    page.route("**/*", route)
    page.goto(f"{lab['url']}/lab/tree/{name}?reset&token={lab['token']}", timeout=120_000)
    page.wait_for_selector("#jp-main-statusbar >> text=Idle", timeout=90_000)
    page.locator("li.lm-MenuBar-item", has_text="Run").first.click()
    page.locator("li.lm-Menu-item", has_text="Run All Cells").first.click()
    done = """() => { const p = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')];
                      return p.length > 0 && p.every(e => /\\[\\d+\\]/.test(e.textContent)); }"""
    page.wait_for_function(done, timeout=timeout_s * 1000, polling=500)
    wait_widgets(page)
    return page


def wait_widgets(page, seconds: float = 30) -> None:
    for _ in range(int(seconds * 2)):
        if "Loading widget" not in page.locator(".jp-Notebook").inner_text():
            return
        time.sleep(0.5)


def look(page, name: str) -> list[tuple[int, str, str]]:
    """Run the checks on every cell (scrolled into view) and screenshot each cell with outputs."""
    folder = ARTIFACTS / name.removesuffix(".ipynb")
    folder.mkdir(parents=True, exist_ok=True)
    cells = page.locator(".jp-Notebook .jp-Cell")
    problems = []
    for i in range(cells.count()):
        cell = cells.nth(i)
        cell.scroll_into_view_if_needed()
        problems += [(i, kind, detail) for kind, detail in cell.evaluate(CHECKS_JS)]
        if cell.locator(".jp-OutputArea-output").count():
            cell.screenshot(path=str(folder / f"cell{i:02d}.png"))
    return problems


def plot_title(page, root: str) -> str:
    return page.locator(f"{root} .js-plotly-plot .gtitle").first.text_content()


def wait_changed(page, selector: str, old: str, timeout_s: float = 60) -> None:
    page.wait_for_function("([sel, old]) => { const t = document.querySelector(sel); return t && t.textContent !== old; }",
                           arg=[selector, old], timeout=timeout_s * 1000)


def assert_labels_apart(page) -> None:
    boxes = page.eval_on_selector_all(".tg-viewer .js-plotly-plot .textpoint text",
                                      "els => els.map(e => { const r = e.getBoundingClientRect();"
                                      " return [r.left, r.top, r.right, r.bottom, e.textContent]; })")
    drawn = [b for b in boxes if b[4] and b[2] > b[0]]
    assert drawn, "the tree has no labels on screen"
    for i, a in enumerate(drawn):
        for b in drawn[i + 1:]:
            apart = min(a[2], b[2]) - max(a[0], b[0]) <= 1 or min(a[3], b[3]) - max(a[1], b[1]) <= 1
            assert apart, f"labels {a[4]!r} and {b[4]!r} overlap on screen"


def interact_01(page) -> None:
    title = ".tg-viewer .js-plotly-plot .gtitle"
    before = plot_title(page, ".tg-viewer")
    handle = page.locator(".tg-step-slider [role=slider]").first
    handle.scroll_into_view_if_needed()
    handle.click()
    page.keyboard.press("ArrowRight")
    wait_changed(page, title, before)
    assert "after draft step 1" in before and "after draft step 2" in plot_title(page, ".tg-viewer")
    assert_labels_apart(page)
    page.keyboard.press("End")  # the last position: verify
    page.wait_for_function(f"() => document.querySelector('{title}').textContent.includes('verified')", timeout=60_000)
    box = page.locator(".tg-viewer .widget-checkbox input")
    assert box.is_enabled(), "the pruned-nodes switch is off at verify"
    n = page.locator(".tg-viewer .js-plotly-plot .scatterlayer .point").count()
    box.click()
    page.wait_for_function(f"() => document.querySelectorAll('.tg-viewer .js-plotly-plot .scatterlayer .point').length !== {n}",
                           timeout=60_000)
    box.click()  # back to the default view for the screenshot
    page.wait_for_function(f"() => document.querySelectorAll('.tg-viewer .js-plotly-plot .scatterlayer .point').length === {n}",
                           timeout=60_000)
    handle.click()
    page.keyboard.press("Home")
    page.locator(".tg-round-slider [role=slider]").first.click()
    page.keyboard.press("ArrowRight")
    page.wait_for_function(f"() => document.querySelector('{title}').textContent.startsWith('round 1')", timeout=60_000)


def interact_02(page) -> None:
    shown = ".js-plotly-plot g.slider-group > text.slider-label"  # "showing: step 1"
    before = page.locator(shown).first.text_content()
    page.locator(".js-plotly-plot g.updatemenu-button", has_text="play").first.click()
    wait_changed(page, shown, before)
    time.sleep(6)  # let the animation reach the verified tree


def interact_06(page) -> None:
    pg = page.locator(".tg-playground")
    pg.locator(".widget-toggle-button").nth(1).click()
    pg.locator("button", has_text="replay").click()
    page.wait_for_function("() => [...document.querySelectorAll('.tg-playground .widget-html')]"
                           ".some(e => e.innerText.includes('yours (1'))", timeout=240_000)
    page.wait_for_function("() => document.querySelector('.tg-playground').innerText.includes('replayed')", timeout=240_000)
    # the profile selector: the paper's A100 costs (with top-k pruning, what its scheduler is trained for)
    pg.locator(".widget-dropdown", has_text="profile").locator("select").select_option(label="paper A100 (modelled)")
    pg.locator(".widget-dropdown", has_text="pruning").locator("select").select_option(label="top-k by score (paper)")
    time.sleep(2)  # the kernel updates the adaptive note for each change before the click is taken
    pg.locator("button", has_text="replay").click()
    page.wait_for_function("() => document.querySelector('.tg-playground table').innerText.includes('modelled on a100-paper')",
                           timeout=240_000)


INTERACT = {"01_step_through.ipynb": interact_01, "02_tree_growth_animation.ipynb": interact_02,
            "06_schedule_playground.ipynb": interact_06}


def test_each_check_fails_on_its_broken_twin(browser, lab):
    page = open_and_run_all(browser, lab, TWIN, timeout_s=120)
    problems = look(page, TWIN)
    page.close()
    found = {(i, kind) for i, kind, _ in problems}
    for i, kind in enumerate(TWIN_EXPECT):
        if kind:
            assert (i, kind) in found, f"the {kind} check missed cell {i} of the broken twin: {problems}"
        else:
            assert not [p for p in problems if p[0] == i], f"a clean cell was flagged: {problems}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_shows_what_it_claims_in_the_browser(browser, lab, name):
    page = open_and_run_all(browser, lab, name)
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts()
    tracebacks = [e for e in errors if "Traceback" in e or "Error" in e.split("\n")[0]]
    if name in INTERACT:
        try:
            INTERACT[name](page)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / f"failure_{name}.png"))
            raise
        wait_widgets(page)
    problems = look(page, name)
    page.screenshot(path=str(ARTIFACTS / f"page_{name.removesuffix('.ipynb')}.png"))
    if name in README_SHOTS:  # `make screenshots` copies these to docs/img/
        selector, shot = README_SHOTS[name]
        (ARTIFACTS / "readme").mkdir(exist_ok=True)
        page.locator(selector).first.screenshot(path=str(ARTIFACTS / "readme" / f"{shot}.png"))
    page.close()
    assert not tracebacks, tracebacks[:2]
    assert not problems, "\n".join(f"cell {i}: {kind}: {detail}" for i, kind, detail in problems)
    assert not browser[1], f"requests to outside hosts: {browser[1][:5]}"
