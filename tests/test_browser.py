"""01_step_through.ipynb in a real browser: JupyterLab on localhost, headless Debian Chromium, Playwright.

Runs all cells, moves the step slider with the keyboard, and checks that the plotly tree changed,
that no widget is stuck loading or failed, that labels do not overlap on screen, and that the page
asked for nothing but the local server. A screenshot is saved to test-artifacts/.
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

import pytest

from tests.test_notebooks import NB_DIR, shared_runs_dir

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
NOTEBOOK = "01_step_through.ipynb"


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


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 with a random token, temp dirs, and the sample run recorded."""
    ensure_chromium()
    from treegraft_lab.zoo.target import cache_dir

    runs = shared_runs_dir(tmp_path_factory)
    base = tmp_path_factory.mktemp("lab")
    root, home = base / "root", base / "home"
    root.mkdir()
    home.mkdir()
    shutil.copy(NB_DIR / NOTEBOOK, root / NOTEBOOK)  # a copy: JupyterLab may autosave outputs into it
    env = {**os.environ, "SMOKE": "1", "TREEGRAFT_RUNS_DIR": str(runs), "RERECORD": "0", "HOME": str(home),
           "TREEGRAFT_LAB_CACHE": str(cache_dir()), "JUPYTER_CONFIG_DIR": str(base / "config"),
           "JUPYTER_DATA_DIR": str(base / "data"), "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
           "IPYTHONDIR": str(base / "ipython")}
    # record the sample run once here (the model decodes in this process), so the notebook only loads it
    subprocess.run([sys.executable, "-c", "from treegraft_lab import workbench as wb; wb.sample_run()"], env=env,
                   check=True, capture_output=True, timeout=600)
    news = base / "config/lab/user-settings/@jupyterlab/apputils-extension/notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false"}))
    port, token = free_port(), secrets.token_hex(16)
    log = open(base / "lab.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
                             f"--port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
                             "--allow-root"], env=env, stdout=log, stderr=subprocess.STDOUT)
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


def test_step_through_notebook_renders_and_the_slider_redraws_the_tree(lab):
    from playwright.sync_api import sync_playwright

    os.environ["HOME"], home_before = str(lab["home"]), os.environ.get("HOME", "")  # Chromium writes under HOME
    blocked: list[str] = []

    def route(r):
        u = r.request.url
        if u.startswith(lab["url"]) or u.startswith(("data:", "blob:")):
            r.continue_()
        else:
            blocked.append(u)
            r.abort()

    ARTIFACTS.mkdir(exist_ok=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.route("**/*", route)
            page.goto(f"{lab['url']}/lab/tree/{NOTEBOOK}?reset&token={lab['token']}")
            page.wait_for_selector("#jp-main-statusbar >> text=Idle", timeout=90_000)
            try:
                page.locator("li.lm-MenuBar-item", has_text="Run").first.click()
                page.locator("li.lm-Menu-item", has_text="Run All Cells").first.click()
            except Exception:
                page.screenshot(path=str(ARTIFACTS / "browser_failure.png"))
                raise
            viewer = ".tg-viewer .js-plotly-plot .main-svg"
            page.wait_for_selector(viewer, timeout=300_000)
            page.wait_for_selector("#jp-main-statusbar >> text=Idle", timeout=120_000)
            title = ".tg-viewer .js-plotly-plot .gtitle"
            before = page.locator(title).text_content()
            n_before = page.locator(".tg-viewer .js-plotly-plot .scatterlayer .point").count()
            handle = page.locator(".tg-step-slider [role=slider]").first
            handle.scroll_into_view_if_needed()
            handle.click()
            page.keyboard.press("ArrowRight")
            page.wait_for_function("([sel, old]) => { const t = document.querySelector(sel); return t && t.textContent !== old; }",
                                   arg=[title, before], timeout=60_000)
            after = page.locator(title).text_content()
            n_after = page.locator(".tg-viewer .js-plotly-plot .scatterlayer .point").count()
            for _ in range(60):  # widgets render asynchronously: wait until none says it is loading
                text = page.locator(".jp-Notebook").inner_text()
                if "Loading widget" not in text:
                    break
                time.sleep(0.5)
            text = page.locator(".jp-Notebook").inner_text()
            boxes = page.eval_on_selector_all(".tg-viewer .js-plotly-plot .textpoint text",
                                              "els => els.map(e => { const r = e.getBoundingClientRect();"
                                              " return [r.left, r.top, r.right, r.bottom, e.textContent]; })")
            page.locator(".tg-viewer").screenshot(path=str(ARTIFACTS / "browser_01_step_through.png"))
            page.screenshot(path=str(ARTIFACTS / "browser_01_page.png"))
            browser.close()
    finally:
        os.environ["HOME"] = home_before
    assert "after draft step 1" in before and "after draft step 2" in after, (before, after)
    assert n_after > 0 and n_before > 0
    assert "Error displaying widget" not in text and "Loading widget" not in text
    assert not blocked, f"requests to outside hosts: {blocked[:5]}"
    drawn = [b for b in boxes if b[4] and b[2] > b[0]]
    assert drawn, "the tree has no labels on screen"
    for i, a in enumerate(drawn):
        for b in drawn[i + 1:]:
            overlap_x = min(a[2], b[2]) - max(a[0], b[0])
            overlap_y = min(a[3], b[3]) - max(a[1], b[1])
            assert overlap_x <= 1 or overlap_y <= 1, f"labels {a[4]!r} and {b[4]!r} overlap on screen"
