"""The eight notebooks in a real browser: JupyterLab on localhost, headless Debian Chromium, Playwright.

Each notebook runs all its cells under SMOKE=1 (BROWSER_SMOKE=0: the full sizes); where it invites interaction the test interacts (the
viewer's sliders and pruning switch, the animation's play button, the playground's toggles and
replay). Then every cell is looked at on screen: no matplotlib figure left as text, no widget
loading or broken, nothing wider than its output area, no legend or plot control outside its
figure, no two controls on top of each other, no "nan" in a table or verdict, every profile line with its n,
spread and date and a mid drafter cheaper than the target. Screenshots of every cell go to
test-artifacts/browser/. A broken twin notebook shows that each check does fail.
Needs /usr/bin/chromium (`make browser-deps` installs it; this test tries apt-get itself otherwise).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from tests.test_notebooks import NB_DIR, NOTEBOOKS, executed_problems, shared_runs_dir
from treegraft_lab.commands import lab as lab_command

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
ARTIFACTS = Path(os.environ.get("BROWSER_ARTIFACTS") or Path(__file__).resolve().parent.parent / "test-artifacts" / "browser")
VIEWPORT = {"width": 1280, "height": 1300}  # a laptop screen's width, JupyterLab's default layout (file browser open); tall for screenshots
TWIN = "broken_twin.ipynb"
ERROR_TWIN = "broken_twin_error.ipynb"  # the twin with its tiny-run cell made to error
TINY_RUN_CELL = 9
KERNEL_THREADS = os.environ.get("OMP_NUM_THREADS", "1")  # the lab's kernels (their measured profiles are keyed by it)
README_SHOTS = {"01_step_through.ipynb": (".tg-viewer", "viewer"), "02_tree_growth_animation.ipynb": (".js-plotly-plot", "growth"),
                "05_scheduler_boundary.ipynb": (".js-plotly-plot", "boundary"), "06_schedule_playground.ipynb": (".tg-playground", "playground")}
# The gallery (docs/gallery.md; `make screenshots` copies gallery/*.png to docs/img/gallery/): one picture per notebook, its
# main view as the page shows it after the run: the element `selector` in the output of the first code cell whose source
# matches `pattern`. 01's viewer is moved to its round with the most accepted tokens, at verify, first.
GALLERY = {"01_step_through.ipynb": (r"StepThroughViewer\(run\)", ".tg-viewer"),
           "02_tree_growth_animation.ipynb": (r"growth_animation\(run", ".js-plotly-plot"),
           "03_graft_positions.ipynb": (r"reselection_by_step\(run\)", "img"),
           "04_feature_importance.ipynb": (r"importance_plot\(imp", "img"),
           "05_scheduler_boundary.ipynb": (r"boundary_figure\(policy", ".js-plotly-plot"),
           "06_schedule_playground.ipynb": (r"pg = SchedulePlayground\(", ".tg-playground"),
           "07_paper_tables.ipynb": (r"ablation_long\(", "img"),
           "08_where_when_matters.ipynb": (r"\Afig\s*\Z", "img")}

# Every check, run on one cell element; returns [kind, detail] pairs.
CHECKS_JS = r"""
(cell, opts) => {
  const out = [], box = e => e.getBoundingClientRect(), shown = b => b.width > 0 && b.height > 0;
  const snake = /^[a-z][a-z0-9]*(_[a-z0-9]+)+$/;
  // a view names its pair, prompt (where it shows one prompt), settings and profile: "pair X · prompt “…” · ... · profile Y"
  const named = (el, prompt) => {
    const lines = e => [...e.querySelectorAll('tspan.line')].map(l => l.textContent).join(' ') || e.textContent;  // a wrapped title's lines
    const t = (el.innerText || '') + ' ' + [...el.querySelectorAll('.gtitle, .g-gtitle')].map(lines).join(' ');
    const miss = [[/pair \S+/, 'pair'], [/profile \S/, 'profile']].concat(prompt ? [[/prompt “/, 'prompt']] : [])
      .filter(([re]) => !re.test(t)).map(([, w]) => w);
    const table = el.querySelector('table');
    if (el.matches('.tg-playground') && table && !/(top-k|value) \(\d+\)/.test(table.innerText)) miss.push("each row's pruning");
    if (miss.length) out.push(['view-unnamed', `${el.className.baseVal ?? el.className} names no ${miss.join(', ')}`.slice(0, 160)]);
  };
  for (const v of cell.querySelectorAll('.tg-viewer, .tg-playground, .tg-compare')) named(v, true);
  for (const v of opts.named ? cell.querySelectorAll(opts.named) : []) named(v, false);
  const hit = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 &&
                        Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1;
  for (const o of cell.querySelectorAll('.jp-OutputArea-output')) {
    const text = o.innerText || '', ob = box(o);
    if (/<Figure size \d+x\d+ with \d+ Axes>/.test(text)) out.push(['matplotlib-text', text.slice(0, 60)]);
    if (/Loading widget|Error displaying widget/.test(text)) out.push(['widget-not-shown', text.slice(0, 80)]);
    for (const el of o.querySelectorAll('.js-plotly-plot svg.main-svg, img, table, .jupyter-widgets')) {
      const b = box(el), sc = el.closest('.tg-scroll');
      if (sc && sc !== el) continue;  // inside a box that scrolls sideways on purpose (the box itself is checked)
      if (shown(b) && (b.right > ob.right + 1 || b.left < ob.left - 1))
        out.push(['wider-than-output', `${el.tagName.toLowerCase()} ${Math.round(b.width)} px in ${Math.round(ob.width)} px`]);
    }
    for (const img of o.querySelectorAll('img')) {  // a figure scaled down to under half its size: its text is unreadable
      const b = box(img);
      if (img.complete && img.naturalWidth > 0 && shown(b) && b.width < 0.5 * img.naturalWidth)
        out.push(['image-shrunk', `${img.naturalWidth} px image shown at ${Math.round(b.width)} px`]);
    }
    if (o.scrollWidth > o.clientWidth + 1 && !o.closest('.tg-scroll')) out.push(['wider-than-output', `scrolls: ${o.scrollWidth} px in ${o.clientWidth} px`]);
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
    const title = plot.querySelector('.gtitle'), tb = title && box(title);
    if (tb && shown(tb)) {
      if (tb.left < sb.left - 1 || tb.right > sb.right + 1 || tb.top < sb.top - 1)
        out.push(['title-cut', `"${title.textContent.slice(0, 50)}" [${Math.round(tb.left)}, ${Math.round(tb.right)}] in ` +
                  `[${Math.round(sb.left)}, ${Math.round(sb.right)}]`]);
      for (const bar of plot.querySelectorAll('.modebar'))
        if (hit(box(bar), tb)) out.push(['title-under-toolbar', title.textContent.slice(0, 50)]);
    }
    // tree figures: points carry customdata [node, created step, kept, accepted, folded, depth, whole accepted label]
    const text = title ? title.textContent : '', area = plot.querySelector('.nsewdrag');
    const ab = area ? box(area) : sb, kept = /kept (\d+) of/.exec(text), step = /after draft step (\d+)/.exec(text);
    // what the reader sees of the plot: its area, within the box that scrolls it sideways and the output area
    const sc = plot.closest('.tg-scroll'), vb = [ab, sc && box(sc), plot.closest('.jp-OutputArea-output') &&
      box(plot.closest('.jp-OutputArea-output'))].filter(Boolean).reduce((a, b) => ({left: Math.max(a.left, b.left),
      right: Math.min(a.right, b.right), top: Math.max(a.top, b.top), bottom: Math.min(a.bottom, b.bottom)}));
    const within = (b, r) => b.left + b.width / 2 >= r.left - 1 && b.left + b.width / 2 <= r.right + 1 &&
                             b.top + b.height / 2 >= r.top - 1 && b.top + b.height / 2 <= r.bottom + 1;
    const cut = (b, r) => b.left < r.left - 1 || b.right > r.right + 1 || b.top < r.top - 1 || b.bottom > r.bottom + 1;
    let keptDrawn = 0, isTree = false;
    for (const g of plot.querySelectorAll('.scatterlayer g.trace')) {
      const cd = g.__data__, tr = cd && cd[0] && cd[0].trace;
      if (!tr || !tr.customdata || !tr.customdata.length) continue;
      const c0 = tr.customdata[0];  // a tree's points carry 6 values each; other figures' customdata is not checked
      if (!c0 || typeof c0 !== 'object' || c0.length < 6) continue;
      isTree = true;
      const labels = new Map([...g.querySelectorAll('g.textpoint')].filter(t => t.textContent.trim() &&
        shown(box(t))).map(t => [cd.indexOf(t.__data__), t]));
      const labelled = new Set(labels.keys());
      for (const p of g.querySelectorAll('path.point')) {
        const k = cd.indexOf(p.__data__), c = tr.customdata[k];
        if (!c || typeof c !== 'object') continue;
        const [node, created, isKept, accepted, folded, depth, whole] = c, b = box(p), cs = getComputedStyle(p);
        const inside = shown(b) && b.left + b.width / 2 >= ab.left - 1 && b.left + b.width / 2 <= ab.right + 1 &&
                       b.top + b.height / 2 >= ab.top - 1 && b.top + b.height / 2 <= ab.bottom + 1;
        const opaque = parseFloat(cs.opacity || '1') * parseFloat(p.style.opacity || '1') >= 0.5 && cs.display !== 'none';
        if (kept && !step && isKept && !folded && depth > 0 && inside && opaque) keptDrawn++;
        if (!step && accepted && !folded && !labelled.has(k)) out.push(['accepted-unlabelled', `node ${node} at depth ${depth}`]);
        if (inside && cut(b, ab)) out.push(['node-clipped', `node ${node} at depth ${depth} cut by the plot's edge`]);
        const lab = labels.get(k);
        if (!step && accepted && !folded && depth > 0 && whole !== undefined && lab &&
            (lab.textContent.trim() !== whole || cut(box(lab), ab)))
          out.push(['accepted-label-clipped', `node ${node}: "${lab.textContent.trim()}" drawn for "${whole}"` +
                    (cut(box(lab), ab) ? ', cut by the plot\'s edge' : '')]);
        if (depth === 0 && !folded && !within(b, vb)) out.push(['tree-out-of-view', `the root (node ${node}) is outside the view`]);
        if (!step && accepted && !folded && depth > 0 && !within(b, vb))
          out.push(['tree-out-of-view', `accepted node ${node} at depth ${depth} is outside the view`]);
        const ring = /rgb\(17, 17, 17\)/.test(p.style.stroke) && parseFloat(p.style.strokeWidth) >= 2;
        if (step && ring && created !== +step[1])
          out.push(['ring-other-step', `node ${node} created at step ${created} ringed in step ${step[1]}`]);
      }
    }
    if (isTree && kept && keptDrawn !== +kept[1]) out.push(['kept-not-drawn', `title says kept ${kept[1]}, ${keptDrawn} drawn`]);
    for (const lg of isTree ? plot.querySelectorAll('g.legend') : [])
      if (shown(box(lg)) && !within(box(lg), sc ? box(sc) : sb)) out.push(['tree-out-of-view', 'the legend is outside the view']);
    if (isTree && !plot.closest('.tg-viewer, .tg-playground, .tg-compare')) named(plot, true);
    if (opts.words) for (const t of plot.querySelectorAll('.g-xtitle, .g-ytitle, .g-x2title, .g-y2title'))
      if (snake.test(t.textContent.trim().split(' (')[0])) out.push(['snake-case-header', `axis title ${t.textContent}`]);
    const buttons = [...plot.querySelectorAll('g.updatemenu-button')].map(box).filter(shown);
    const slider = [...plot.querySelectorAll('g.slider-group > text.slider-label, rect.slider-rail-rect, g.slider-label-group')]
      .map(box).filter(shown);
    for (const a of buttons) for (const b of slider) if (hit(a, b)) out.push(['controls-overlap', 'plot button and slider']);
  }
  if (opts.words) for (const th of cell.querySelectorAll('.jp-OutputArea-output table th'))
    if (snake.test(th.textContent.trim())) out.push(['snake-case-header', th.textContent.trim()]);
  for (const sl of cell.querySelectorAll('.tg-round-slider')) {
    const h = sl.querySelector('[role=slider]');
    if (!h) continue;
    const track = Math.max(0, ...[...sl.querySelectorAll('.noUi-base, .noUi-target')].map(e => box(e).width));
    const n = parseFloat(h.getAttribute('aria-valuemax')) - parseFloat(h.getAttribute('aria-valuemin'));
    if (n > 0 && track / n < 4) out.push(['slider-too-narrow', `${Math.round(track)} px for ${n} rounds`]);
  }
  const sel = '.widget-inline-hbox, .jupyter-button, .widget-checkbox, .widget-dropdown, .widget-label';
  const ctrls = [...cell.querySelectorAll(sel)].filter(e => !e.parentElement.closest(sel)).map(e => [e, box(e)])
    .filter(([, b]) => shown(b));
  for (let i = 0; i < ctrls.length; i++)
    for (let j = i + 1; j < ctrls.length; j++)
      if (hit(ctrls[i][1], ctrls[j][1]))
        out.push(['controls-overlap', `${ctrls[i][0].innerText.slice(0, 30)} / ${ctrls[j][0].innerText.slice(0, 30)}`]);
  for (const o of cell.querySelectorAll('.jp-OutputArea-output')) {  // a table cell or verdict reading nan, NaN, nanx
    const t = o.innerText || '', m = /(^|[^a-z])nan(x|%)?(?![a-z])/i.exec(t);
    if (m) out.push(['nan-shown', t.slice(Math.max(0, m.index - 40), m.index + 20).replace(/\s+/g, ' ')]);
  }
  for (const p of cell.querySelectorAll('.tg-profile')) {  // a profile line: its n and date, a mid cheaper than the target
    const t = p.innerText || '', mid = parseFloat(p.dataset.midMs), tgt = parseFloat(p.dataset.targetMs);
    if (!/n=\d+|n and spread not recorded/.test(t) || !/measured \d{4}-\d{2}-\d{2}|derived/.test(t))
      out.push(['profile-undated', t.slice(0, 80)]);
    if (p.dataset.order === 'checked' && mid >= tgt) out.push(['profile-insane', `mid ${mid} ms, target ${tgt} ms: ${t.slice(0, 60)}`]);
  }
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


def broken_twin(tiny_run: str | None = None) -> nbformat.NotebookNode:
    """One cell per defect the checks must catch, and one clean cell. Cell i's expected check is TWIN_EXPECT[i].
    `tiny_run` replaces the cell that records the tiny run (TINY_RUN_CELL)."""
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
        tiny_run or tiny_run_cell(),
        *[code for code, _ in TREE_TWINS],
        "from treegraft_lab.viz.regime import regime_figure\nf = regime_figure(pd.DataFrame({'ratio': [0.1, 1.0], "
        "'schedule': ['all-small'] * 2, 'speedup': [2.0, 2.0], 'A': [3.0, 3.0], 'mid_calls_per_round': [0.0, 0.0]}))\n"
        "f.set_size_inches(26, 7)\nf",  # the regime map drawn far wider than the screen
        *[code for code, _ in OTHER_TWINS],
        *[code for code, _ in PROFILE_TWINS],
    ]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells], metadata={
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}})


def tiny_run_cell() -> str:
    """A twin cell recording a run with the tests' tiny model pair (seconds, no files), and a round that accepted."""
    import inspect

    from treegraft_lab import tiny

    return (inspect.getsource(tiny) + "\nfrom treegraft_lab import DecodeConfig, TreeGraftDecoder, record, viz\n"
            "from treegraft_lab.views.playground import SchedulePlayground\n"
            "from treegraft_lab.views.step_through import StepThroughViewer\n"
            "pair = tiny_pair()\npair.mid = pair.target  # the target as its own mid drafter: paths get accepted\n"
            "dec = TreeGraftDecoder(pair, DecodeConfig(schedule='10101', budget=12, clock='a100-paper'))  # no device profile needed\n"
            "with record(dec) as rec:\n    dec.generate([5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7], max_new_tokens=20)\n"
            "run = rec.to_run()\nR = int(run.rounds.sort_values('accepted').iloc[-1]['round'])\n"
            "def tree_trace(f, want):\n"
            "    t = next(t for t in f.data if t.customdata is not None and any(want(c) for c in t.customdata))\n"
            "    return t, next(i for i, c in enumerate(t.customdata) if want(c))")


TREE_TWINS = [  # a tree figure, or another view, with one defect each; the playground replays before it is broken
    ("f = viz.tree_figure(run, R)\nfor t in f.data:\n    if t.customdata is not None and len(t.customdata):\n"
     "        t.text = ['' if c[3] else x for c, x in zip(t.customdata, t.text)]\nf", "accepted-unlabelled"),
    ("viz.tree_figure(run, R).update_layout(title={'x': 0.99, 'xanchor': 'right', 'y': 0.995, 'yanchor': 'top'})",
     "title-under-toolbar"),
    ("viz.tree_figure(run, R).update_layout(title={'text': 'a title far too long for its figure, ' * 8})", "title-cut"),
    ("f = viz.tree_figure(run, R)\nt, k = tree_trace(f, lambda c: c[2] and c[5] > 0 and not c[3])\n"
     "t.x = [-1000 if i == k else x for i, x in enumerate(t.x)]\nf", "kept-not-drawn"),
    ("s = W.IntSlider(0, 0, 100, description='round', layout={'width': '150px'})\ns.add_class('tg-round-slider')\ns",
     "slider-too-narrow"),
    ("pd.DataFrame({'pool_size': [3], 'call_mid': [True]})", "snake-case-header"),
    ("f = viz.tree_figure(run, R, 3)\nt, k = tree_trace(f, lambda c: c[1] < 3 and c[5] > 0)\n"
     "t.marker.line.color = ['#111' if i == k else c for i, c in enumerate(t.marker.line.color)]\n"
     "t.marker.line.width = [3 if i == k else w for i, w in enumerate(t.marker.line.width)]\nf", "ring-other-step"),
    ("viz.tree_figure(run, R, 3)", None),
    ("f = viz.tree_figure(run, R)\nt, k = tree_trace(f, lambda c: c[3] and c[5] > 0 and len(c[6]) > 1)\n"
     "t.text = [x[:1] if i == k else x for i, x in enumerate(t.text)]  # the defect: 'i' for 'is'\nf", "accepted-label-clipped"),
    ("f = viz.tree_figure(run, R)\nf.update_xaxes(range=[min(min(t.x) for t in f.data if t.customdata is not None and len(t.x)), "
     "f.layout.xaxis.range[1]])  # the defect: the range ends on the left column's nodes\nf", "node-clipped"),
    ("o = W.Output(layout={'overflow': 'auto', 'max_width': '100%'})\no.add_class('tg-scroll')\n"
     "f = viz.tree_figure(run, R, scroll=True, width=2400)\n"
     "f.update_xaxes(range=f.layout.xaxis.range[::-1])  # the defect: the root far right, out of the box as it opens\n"
     "with o:\n    display(f)\no", "tree-out-of-view"),
    ("viz.tree_figure(run, R, caption=None)", "view-unnamed"),
    ("pg = SchedulePlayground(pair, run, round=R, clock='a100-paper', prune='topk', repeats=1)\npg.replay()\n"
     "pg._check_stale = lambda: None  # the defect: no cue when a control moves\npg", None),
]
OTHER_TWINS = [  # defects the page-level checks catch (not look()'s cell checks): cell source, what catches it
    ("from IPython.display import HTML\nHTML('<img src=\"https://example.invalid/pixel.png\" width=1 height=1>')",
     "outside-request"),
    ("v = StepThroughViewer(run, round=R)\nv.siblings.value = 0  # all children: wider than the box\n"
     "v.placing.value = True  # the whole round's layout: as wide at every step\n"
     "v.plot.pin = lambda fig: None  # the defect: the box's content does not keep its width through a redraw\n"
     "v.plot.output.layout.width = v.plot.output.layout.min_width = v.plot.output.layout.min_height = None\n"
     "v.add_class('tg-twin-scroll')\nv", "scroll-reset"),
    ("b = W.VBox([go.FigureWidget(go.Scatter(x=[0, 0.001], y=[0, 0], mode='markers+text', text=['first label', "
     "'second label']), layout={'width': 500, 'height': 300, 'xaxis': {'range': [-1, 1]}})])\nb.add_class('tg-twin-labels')\nb", "labels-overlap"),
    ("sticky = SchedulePlayground(pair, run, round=R, clock='a100-paper', prune='topk', repeats=1)\nsticky.replay()\n"
     "sticky.changed = lambda: {'budget': (12, 13)}  # the defect: the cue never clears\n"
     "sticky.add_class('tg-twin-sticky')\nsticky", "stale-cue-not-cleared"),
]
PROFILE_TWINS = [  # a profile line or a table/verdict with one defect each, and the real ones clean
    ("from treegraft_lab import costs\nfrom treegraft_lab.views.profile import ProfileLine\n"
     "ProfileLine(costs.load('a100-paper').scaled(mid=3.0))  # a mid call dearer than a target step", "profile-insane"),
    ("from IPython.display import HTML\nHTML('<div class=\"tg-profile\" data-order=\"checked\" data-mid-ms=\"40\" "
     "data-target-ms=\"66.7\">profile paper A100: a mid forward of 64 tokens 40.0 ms vs 66.7 ms</div>')  # no n, no date",
     "profile-undated"),
    ("ProfileLine(costs.load('a100-paper'))", None),
    ("pd.DataFrame({'speedup': [1.2, float('nan')]})", "nan-shown"),
    ("from IPython.display import Markdown\nMarkdown('the verdict: all-mid (nanx)')", "nan-shown"),
    ("from treegraft_lab.viz.style import styled\nstyled(pd.DataFrame({'speedup': [1.2, float('nan')]}))", None),
]
TWIN_EXPECT = [None, "matplotlib-text", "widget-not-shown", "wider-than-output", "wider-than-output", "outside-figure",
               "controls-overlap", "controls-overlap", None, None] + [kind for _, kind in TREE_TWINS] + ["image-shrunk"] + [
    None] * len(OTHER_TWINS) + [kind for _, kind in PROFILE_TWINS]
NAMED = {"05_scheduler_boundary.ipynb": ".js-plotly-plot"}  # views named by pair and profile besides trees, viewer, playground
WORDS = {"01_step_through.ipynb", "02_tree_growth_animation.ipynb", "05_scheduler_boundary.ipynb", "06_schedule_playground.ipynb",
         "08_where_when_matters.ipynb", TWIN}  # headers and axis titles in words
PROFILED = {"05_scheduler_boundary.ipynb", "06_schedule_playground.ipynb", "08_where_when_matters.ipynb"}  # show a profile line


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 with a random token and temp dirs, serving copies of the notebooks."""
    ensure_chromium()
    from treegraft_lab.profile_cache import cache_dir as profile_cache
    from treegraft_lab.zoo.target import cache_dir

    runs = Path(os.environ.get("BROWSER_RUNS_DIR") or shared_runs_dir(tmp_path_factory))  # recorded runs to reuse
    base = tmp_path_factory.mktemp("lab")
    root, home = base / "root", base / "home"
    root.mkdir()
    home.mkdir()
    for name in NOTEBOOKS:  # copies: JupyterLab may autosave outputs into them
        shutil.copy(NB_DIR / name, root / name)
    nbformat.write(broken_twin(), root / TWIN)
    nbformat.write(broken_twin(tiny_run_cell().replace("budget=12", "budget=0")), root / ERROR_TWIN)
    smoke = os.environ.get("BROWSER_SMOKE", "1")  # BROWSER_SMOKE=0: the full notebooks, as a researcher runs them
    env = {**os.environ, "SMOKE": smoke, "TREEGRAFT_RUNS_DIR": str(runs), "RERECORD": "0", "HOME": str(home),
           "TREEGRAFT_LAB_CACHE": str(cache_dir()), "TREEGRAFT_PROFILE_CACHE": str(profile_cache()),  # measured once, shared
           "JUPYTER_CONFIG_DIR": str(base / "config"),
           "JUPYTER_DATA_DIR": str(base / "data"), "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
           "IPYTHONDIR": str(base / "ipython"), "OMP_NUM_THREADS": KERNEL_THREADS}
    settings = base / "config/lab/user-settings/@jupyterlab"
    for rel, value in (("apputils-extension/notification.jupyterlab-settings", {"fetchNews": "false"}),
                       ("notebook-extension/tracker.jupyterlab-settings", {"windowingMode": "none"})):
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(value))
    port, token = free_port(), secrets.token_hex(16)
    log = open(base / "lab.log", "w")
    # the server `make lab` starts (127.0.0.1, the token, this Python as the notebooks' kernel), on the copies
    proc = subprocess.Popen(lab_command.server_command(root, port, "--LabApp.expose_app_in_browser=True"),  # the page reads the model
                            env=lab_command.server_env(token, lab_command.write_kernelspec(base / "kernel"), env),
                            stdout=log, stderr=subprocess.STDOUT, cwd=NB_DIR)
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
        yield {"url": url, "token": token, "home": home, "root": root}
    finally:
        lab_command.stop(proc)  # the command's own shutdown: terminate, then kill after 30 s
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


def open_and_run_all(browser, lab, name: str, timeout_s: float = float(os.environ.get("BROWSER_TIMEOUT_S", 900))):
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
    state = page.wait_for_function(RUN_ALL_STATE_JS, timeout=timeout_s * 1000, polling=500).json_value()
    if state["cell"] >= 0:  # Run All stops at an error: say which cell and what, at once
        page.screenshot(path=str(ARTIFACTS / f"error_{name.removesuffix('.ipynb')}.png"))
        page.close()
        pytest.fail(f"{name}: cell {state['cell']} ({state['source']!r}) raised an error:\n{state['error']}", pytrace=False)
    wait_widgets(page)
    return page


# Run All's progress: {cell: -1} once every code cell has run; {cell: i, source, error} as soon as cell i shows an
# error (a traceback, or an "XxxError: ..." line in its stderr output, as IPython prints a SyntaxError); else false.
RUN_ALL_STATE_JS = r"""() => {
  const cells = [...document.querySelectorAll('.jp-Notebook .jp-Cell')];
  for (let i = 0; i < cells.length; i++) {
    for (const o of cells[i].querySelectorAll(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")) {
      const t = o.innerText || '';
      const last = t.split('\n').map(l => l.trim()).filter(l => /^[A-Za-z_.]*(Error|Exception)\b/.test(l)).pop();
      if (/Traceback \(most recent call last\)/.test(t) || last) {
        const src = (cells[i].querySelector('.jp-InputArea-editor') || cells[i]).innerText.trim().split('\n')[0];
        return {cell: i, source: src.slice(0, 80), error: last || t.slice(-400)};
      }
    }
  }
  const p = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')];
  return p.length > 0 && p.every(e => /\[\d+\]/.test(e.textContent)) ? {cell: -1} : false;
}"""


def executed_notebook(page) -> nbformat.NotebookNode:
    """The notebook as the browser holds it after Run All, outputs included: the current notebook's model
    as JSON (the lab runs with its app exposed to the page; nothing is saved)."""
    nb = nbformat.from_dict(page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.toJSON()"))
    for cell in nb.cells:  # multiline strings as one string, as nbformat.read gives them
        for out in cell.get("outputs", []):
            for mime, value in out.get("data", {}).items():
                if isinstance(value, list):
                    out["data"][mime] = "".join(value)
            if isinstance(out.get("text"), list):
                out["text"] = "".join(out["text"])
    return nb


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
        problems += [(i, kind, detail) for kind, detail in cell.evaluate(CHECKS_JS, {"words": name in WORDS,
                                                                                     "named": NAMED.get(name)})]
        if cell.locator(".jp-OutputArea-output").count():
            cell.screenshot(path=str(folder / f"cell{i:02d}.png"))
    return problems


def plot_title(page, root: str) -> str:
    return page.locator(f"{root} .js-plotly-plot .gtitle").first.text_content()


def wait_changed(page, selector: str, old: str, timeout_s: float = 60) -> None:
    page.wait_for_function("([sel, old]) => { const t = document.querySelector(sel); return t && t.textContent !== old; }",
                           arg=[selector, old], timeout=timeout_s * 1000)


def overlapping_labels(page, root: str = ".tg-viewer") -> list[tuple[str, str]]:
    """Pairs of text labels of the plotly figure(s) under `root` that overlap on screen; fails if none is drawn."""
    boxes = page.eval_on_selector_all(f"{root} .js-plotly-plot .textpoint text",
                                      "els => els.map(e => { const r = e.getBoundingClientRect();"
                                      " return [r.left, r.top, r.right, r.bottom, e.textContent]; })")
    drawn = [b for b in boxes if b[4] and b[2] > b[0]]
    assert drawn, f"{root}: no labels on screen"
    return [(a[4], b[4]) for i, a in enumerate(drawn) for b in drawn[i + 1:]
            if min(a[2], b[2]) - max(a[0], b[0]) > 1 and min(a[3], b[3]) - max(a[1], b[1]) > 1]


def assert_labels_apart(page) -> None:
    overlaps = overlapping_labels(page)
    assert not overlaps, f"labels overlap on screen: {overlaps[:3]}"


def check_cell(page, selector: str) -> list[tuple[str, str]]:
    """The checks, now, on the cell holding `selector` (headers in words included)."""
    cell = page.locator(".jp-Cell", has=page.locator(selector)).last
    return [tuple(p) for p in cell.evaluate(CHECKS_JS, {"words": True})]


MOVES: list[dict] = []  # every move of a control in this module: notebook, what, seconds to redraw, screenshot


def moved(page, name: str, what: str, t0: float, selector: str) -> None:
    """Record a move (its redraw time since `t0`), screenshot the view, and fail on any check's problem."""
    seconds = time.perf_counter() - t0
    folder = ARTIFACTS / "moves" / name.removesuffix(".ipynb")
    folder.mkdir(parents=True, exist_ok=True)
    shot = folder / f"{len([m for m in MOVES if m['notebook'] == name]):02d}_{what.replace(' ', '_')[:40]}.png"
    page.locator(".jp-Cell", has=page.locator(selector)).last.locator(".jp-OutputArea").first.screenshot(path=str(shot))
    MOVES.append({"notebook": name, "move": what, "seconds": round(seconds, 2), "screenshot": str(shot.name)})
    (ARTIFACTS / "moves.json").write_text(json.dumps(MOVES, indent=1))
    problems = check_cell(page, selector)
    assert not problems, f"after {what}: {problems}"


STALE_JS = """root => { const pg = document.querySelector(root); if (!pg) return null;
  const note = pg.querySelector('.tg-stale-note'), table = pg.querySelector('table'), btn = pg.querySelector('button.tg-replay');
  let dim = 1; for (let e = table; e && e !== pg; e = e.parentElement) dim *= parseFloat(getComputedStyle(e).opacity);
  return {note: !!note && note.getBoundingClientRect().height > 0 && /stale/.test(note.innerText) && note.innerText.includes('→'),
          dim: dim, button: btn ? btn.innerText + ' ' + btn.className : '', text: note ? note.innerText : ''}; }"""


def stale_cue(page, root: str = ".tg-playground") -> list[tuple[str, str]]:
    """Move one schedule toggle of a replayed playground WITHOUT replaying: within 10 s the results must be
    dimmed, a line must say what changed, and the replay button must ask to be pressed; moving it back clears it."""
    toggle = page.locator(root).locator(".widget-toggle-button").first
    toggle.click()
    ok = lambda c: c and c["note"] and c["dim"] < 0.6 and ("changed" in c["button"] or "mod-danger" in c["button"])  # noqa: E731
    for _ in range(40):
        cue = page.evaluate(f"({STALE_JS})({json.dumps(root)})")
        if ok(cue):
            break
        time.sleep(0.25)
    toggle.click()
    if not ok(cue):
        return [("stale-without-cue", f"after a toggle, no full cue: {cue}")]
    for _ in range(40):
        cue = page.evaluate(f"({STALE_JS})({json.dumps(root)})")
        if not cue["note"] and cue["dim"] > 0.99:
            return []
        time.sleep(0.25)
    return [("stale-cue-not-cleared", f"the toggle is back but the cue stays: {cue}")]


def budget_key(page, key: str) -> None:
    """The playground's budget slider moved one step by the keyboard."""
    handle = page.locator(".tg-playground .widget-slider", has_text="budget").locator("[role=slider]").first
    handle.focus()
    page.keyboard.press(key)


def control_cue(page, name: str, what: str, change, back, word: str) -> list[tuple[str, str]]:
    """Move a playground control (`change`) without replaying: the stale note must name it (`word`), as a
    screenshot shows; moving it back (`back`) must clear the note."""
    t0 = time.perf_counter()
    change()
    try:
        page.wait_for_function(f"() => ({STALE_JS})('.tg-playground').note && "
                               f"({STALE_JS})('.tg-playground').text.includes({json.dumps(word)})", timeout=30_000)
    except Exception:
        return [("stale-without-cue", f"{what}: the stale note does not name {word}")]
    moved(page, name, f"{what}, not replayed", t0, ".tg-playground")
    back()
    try:
        page.wait_for_function(f"() => !({STALE_JS})('.tg-playground').note", timeout=30_000)
    except Exception:
        return [("stale-cue-not-cleared", f"{what} is back but the note stays")]
    return []


def scroll_kept(page, root: str, redraw) -> list[tuple[str, str]]:
    """Scroll the tree box under `root` sideways, redraw it with `redraw(page)` (which returns once the
    new figure is drawn), and say whether the reader's scroll survived; the box is scrolled back after."""
    box = page.locator(f"{root} .tg-scroll").first
    box.scroll_into_view_if_needed()
    width, room = box.evaluate("b => [b.scrollWidth, b.clientWidth]")
    if width < room + 60:
        return [("scroll-untested", f"{root}: the tree ({width} px) does not scroll in its {room} px box")]
    want = min(120, width - room)
    box.evaluate(f"b => {{ b.scrollLeft = {want}; }}")
    time.sleep(0.3)
    redraw(page)
    time.sleep(1.0)  # plotly has drawn the new figure; a reset would have happened by now
    got = box.evaluate("b => b.scrollLeft")
    box.evaluate("b => { b.scrollLeft = 0; }")
    return [] if abs(got - want) <= 2 else [("scroll-reset", f"{root}: scrolled to {want} px, {got} px after a redraw")]


OUTSIDE_JS = """root => {
  const box = document.querySelector(root + ' .tg-scroll').getBoundingClientRect();
  return [...document.querySelectorAll(root + ' .tg-scroll .scatterlayer .point')].map(p => p.getBoundingClientRect())
    .filter(r => r.width > 0 && (r.left < box.left - 1 || r.right > box.right + 1)).length;
}"""


def nodes_outside(page, root: str) -> list[tuple[str, str]]:
    """The tree's nodes drawn outside the visible part of its box, under `root` (a reader sees none of them)."""
    n = page.evaluate(OUTSIDE_JS, root)
    return [("nodes-out-of-view", f"{root}: {n} nodes outside the box")] if n else []


def placing(page, label: str, wide: bool) -> None:
    """The viewer's layout choice set to `label`; returns once the box is as wide (`wide`) or fits."""
    page.locator(".tg-viewer .tg-placing select").select_option(label=label)
    page.wait_for_function("wide => { const b = document.querySelector('.tg-viewer .tg-scroll'); "
                           "return (b.scrollWidth > b.clientWidth + 60) === wide; }", arg=wide, timeout=60_000)


def step_right(root: str):
    """A redraw: the step slider of the viewer under `root` one position right (back to its first at the end)."""
    def redraw(page) -> None:
        title = f"{root} .js-plotly-plot .gtitle"
        before = page.locator(title).first.text_content()
        handle = page.locator(f"{root} .tg-step-slider [role=slider]").first
        handle.focus()
        page.keyboard.press("ArrowRight")
        wait_changed(page, title, before)
    return redraw


# Where the nodes a draft step added are drawn: {step, added, outside} for the plotly figure `root` shows, `outside`
# counting those whose marker centre lies outside the plot area or outside the browser's window (the reader does
# not see them). A node's trace and point are found from the figure's data: customdata [node, created step, ...].
ADDED_JS = r"""root => {
  const gd = document.querySelector(root + ' .js-plotly-plot');
  const title = (gd.querySelector('.gtitle') || {}).textContent || '';
  const m = title.match(/after draft step (\d+)/) || (gd.querySelector('g.slider-group > text.slider-label') || {textContent: ''})
    .textContent.match(/step (\d+)/);
  if (!m) return {step: null, added: 0, outside: 0};
  const step = +m[1], g = gd.getBoundingClientRect(), xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  const pane = (gd.closest('.jp-WindowedPanel-outer') || gd.closest('.jp-Notebook') || document.body).getBoundingClientRect();
  const top = Math.max(0, pane.top), bottom = Math.min(window.innerHeight, pane.bottom);  // what the notebook shows
  let added = 0, outside = 0;
  gd.data.forEach(t => (t.customdata || []).forEach((c, j) => {
    if (c[0] < 0 || c[1] !== step || t.x[j] === null) return;
    added += 1;  // where plotly draws the point: its axes' pixel mapping, inside the plot area and the window?
    const px = xa.l2p(t.x[j]), py = ya.l2p(t.y[j]), x = g.left + xa._offset + px, y = g.top + ya._offset + py;
    if (px < -1 || px > xa._length + 1 || py < -1 || py > ya._length + 1 ||
        x < 0 || x > window.innerWidth || y < top || y > bottom) outside += 1;
  }));
  return {step, added, outside};
}"""

# The top and bottom (px in the window) of the elements matching each selector under `root`, together.
# and the height of what the notebook shows of the page (the window less JupyterLab's bars).
SPAN_JS = r"""([root, sels]) => {
  const es = sels.map(s => document.querySelector(root + ' ' + s)).filter(e => e), rs = es.map(e => e.getBoundingClientRect());
  const pane = (es.length && es[0].closest('.jp-WindowedPanel-outer') || document.body).getBoundingClientRect();
  return {found: rs.length, top: Math.min(...rs.map(r => r.top)), bottom: Math.max(...rs.map(r => r.bottom)),
          pane: Math.min(window.innerHeight, pane.bottom) - Math.max(0, pane.top)};
}"""


def on_one_screen(page, root: str, sels: list[str]) -> dict:
    """Scroll so that the elements `sels` under `root` start at the notebook's top; they must fit what the
    notebook shows of the window (1280 x 800 less JupyterLab's bars) together."""
    page.evaluate("([root, s]) => document.querySelector(root + ' ' + s).scrollIntoView({block: 'start'})", [root, sels[0]])
    time.sleep(0.3)
    span = page.evaluate(SPAN_JS, [root, sels])
    assert span["found"] == len(sels), (root, sels, span)
    assert span["bottom"] - span["top"] <= span["pane"], f"{root}: {sels} span {span['bottom'] - span['top']:.0f} px, " \
                                                        f"the notebook shows {span['pane']:.0f} px"
    return span


def added_in_view(page, root: str) -> dict:
    """The step `root`'s figure shows: every node it added is in view (or the check says which are not)."""
    got = page.evaluate(ADDED_JS, root)
    assert got["outside"] == 0, f"{root}: {got['outside']} of the {got['added']} nodes step {got['step']} added are out of view"
    return got


def every_step_in_view(page, name: str = "01_step_through.ipynb") -> None:
    """At 1280 x 800: the viewer's controls and its tree on one screen, and at every draft step of the round it
    opens on, every node the step added inside the visible figure; then the side-by-side view of two methods."""
    view, title = ".tg-viewer", ".tg-viewer .js-plotly-plot .gtitle"
    (ARTIFACTS / "moves").mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1280, "height": 800})
    assert "opened on round" in page.locator(".tg-viewer .tg-why").first.text_content()
    handle = page.locator(".tg-step-slider [role=slider]").first
    handle.scroll_into_view_if_needed()
    handle.focus()
    page.keyboard.press("Home")
    page.wait_for_function(f"() => document.querySelector('{title}').textContent.includes('after draft step 1')", timeout=60_000)
    seen = []
    for _ in range(12):
        on_one_screen(page, view, [".tg-step-slider", ".js-plotly-plot g.draglayer .nsewdrag"])
        got = added_in_view(page, view)
        seen.append(got)
        page.screenshot(path=str(ARTIFACTS / "moves" / f"focus_{name.removesuffix('.ipynb')}_step{got['step']}.png"))
        before = plot_title(page, view)
        handle.focus()
        page.keyboard.press("ArrowRight")
        wait_changed(page, title, before)
        if "verified" in plot_title(page, view):
            break
    assert len(seen) >= 2 and sum(s["added"] for s in seen) > 0, seen
    handle.focus()
    page.keyboard.press("Home")  # back to step 1 for what follows
    page.wait_for_function(f"() => document.querySelector('{title}').textContent.includes('after draft step 1')", timeout=60_000)
    cmp_ = ".tg-compare"
    page.wait_for_selector(f"{cmp_} .js-plotly-plot .main-svg", timeout=120_000)
    titles = page.locator(f"{cmp_} .js-plotly-plot .gtitle").all_text_contents()
    assert sum("accepted" in t for t in titles) == 2, titles  # two trees, each with what the target accepted
    assert page.locator(f"{cmp_} table").count() == 1  # acceptance by depth
    shoot(page, page.locator(cmp_).first, ARTIFACTS / "moves" / "compare_01.png")
    page.set_viewport_size(VIEWPORT)


def interact_01(page, name: str = "01_step_through.ipynb") -> None:
    title, view = ".tg-viewer .js-plotly-plot .gtitle", ".tg-viewer"
    every_step_in_view(page, name)
    placing(page, "layout: this step", wide=False)
    assert not nodes_outside(page, view)  # a step laid out on its own nodes fits the box
    t0 = time.perf_counter()
    placing(page, "layout: whole round", wide=True)  # every node in its final place: as wide as the round's tree
    moved(page, name, "layout whole round", t0, view)
    assert not scroll_kept(page, view, step_right(view))  # step 1 -> 2
    t0 = time.perf_counter()
    placing(page, "layout: this step", wide=False)
    moved(page, name, "layout this step", t0, view)
    assert not nodes_outside(page, view)  # step 2: what the step drafted is in the box
    page.locator(".tg-step-slider [role=slider]").first.focus()
    page.keyboard.press("Home")
    page.wait_for_function(f"() => document.querySelector('{title}').textContent.includes('after draft step 1')",
                           timeout=60_000)
    before = plot_title(page, view)
    handle = page.locator(".tg-step-slider [role=slider]").first
    handle.scroll_into_view_if_needed()
    handle.click()
    t0 = time.perf_counter()
    page.keyboard.press("ArrowRight")
    wait_changed(page, title, before)
    moved(page, name, "step 2", t0, view)
    assert "after draft step 1" in before and "after draft step 2" in plot_title(page, view)
    assert_labels_apart(page)
    t0 = time.perf_counter()
    page.keyboard.press("End")  # the last position: verify
    page.wait_for_function(f"() => document.querySelector('{title}').textContent.includes('verified')", timeout=60_000)
    moved(page, name, "step verify", t0, view)
    box = page.locator(".tg-viewer .widget-checkbox input")
    assert box.is_enabled(), "the pruned-nodes switch is off at verify"
    n = page.locator(".tg-viewer .js-plotly-plot .scatterlayer .point").count()
    t0 = time.perf_counter()
    box.click()
    page.wait_for_function(f"() => document.querySelectorAll('.tg-viewer .js-plotly-plot .scatterlayer .point').length !== {n}",
                           timeout=60_000)
    moved(page, name, "pruned hidden", t0, view)
    box.click()  # back to the default view for the screenshot
    page.wait_for_function(f"() => document.querySelectorAll('.tg-viewer .js-plotly-plot .scatterlayer .point').length === {n}",
                           timeout=60_000)
    for label in ("all children", "10 per parent", "4 children per parent"):
        before = page.locator(".tg-viewer .js-plotly-plot .scatterlayer").first.inner_html()
        t0 = time.perf_counter()
        page.locator(".tg-viewer .widget-dropdown select").last.select_option(label=label)
        page.wait_for_function("old => document.querySelector('.tg-viewer .js-plotly-plot .scatterlayer').innerHTML !== old",
                               arg=before, timeout=60_000) if label != "10 per parent" else time.sleep(2)
        moved(page, name, label, t0, view)
    handle.click()
    page.keyboard.press("Home")
    rounds = page.locator(".tg-round-slider [role=slider]").first
    last = int(float(rounds.get_attribute("aria-valuemax")))
    rounds.click()
    page.keyboard.press("Home")  # the viewer opened on its showcase round: from round 0
    page.wait_for_function(f"() => document.querySelector('{title}').textContent.startsWith('round 0 ')", timeout=60_000)
    for target, how in ((1, "next"), (last // 2, "slider"), (last, "slider"), (last - 1, "prev")):
        t0 = time.perf_counter()
        if how == "slider":
            rounds.click()
            page.keyboard.press("End" if target == last else "Home")
            for _ in range(target if target != last else 0):
                page.keyboard.press("ArrowRight")
        else:
            page.locator(".tg-viewer button", has_text=how).first.click()
        page.wait_for_function(f"() => document.querySelector('{title}').textContent.startsWith('round {target} ')",
                               timeout=60_000)
        moved(page, name, f"round {target} by {how}", t0, view)


def interact_02(page, name: str = "02_tree_growth_animation.ipynb") -> None:
    shown = ".js-plotly-plot g.slider-group > text.slider-label"  # "showing: step 1"
    page.set_viewport_size({"width": 1280, "height": 800})
    anim = ".jp-Cell:has(g.updatemenu-button)"
    on_one_screen(page, anim, ["g.updatemenu-button", "g.draglayer .nsewdrag"])  # play and the tree on one screen
    before = page.locator(shown).first.text_content()
    t0 = time.perf_counter()
    page.locator(".js-plotly-plot g.updatemenu-button", has_text="play").first.click()
    wait_changed(page, shown, before)
    seen: dict[str, list] = {}
    for _ in range(60):  # every frame is checked while the animation plays
        label = page.locator(shown).first.text_content()
        found = check_cell(page, ".js-plotly-plot")
        if "step" in label:  # the nodes this frame's step added are in view (re-read once if caught mid-frame)
            got = page.evaluate(ADDED_JS, anim)
            if got["outside"]:
                time.sleep(0.15)
                got = page.evaluate(ADDED_JS, anim)
            found = found + ([("added-out-of-view", f"{label}: {got}")] if got["outside"] else [])
        if found:  # caught mid-transition (markers restyled before the title)? read the same frame once more
            time.sleep(0.1)
            found = check_cell(page, ".js-plotly-plot") if page.locator(shown).first.text_content() == label else []
        seen.setdefault(label, []).extend(found)
        if "verify" in label:
            break
        time.sleep(0.2)
    moved(page, name, "played to verify", t0, ".js-plotly-plot")
    assert any("step" in k for k in seen) and any("verify" in k for k in seen), seen.keys()
    assert not [p for v in seen.values() for p in v], seen
    page.set_viewport_size(VIEWPORT)


def replay_06(page, name: str, what: str, done_js: str) -> None:
    pg = page.locator(".tg-playground")
    time.sleep(1)  # the kernel takes each control change before the click
    t0 = time.perf_counter()
    pg.locator("button.tg-replay").click()
    page.wait_for_function("() => document.querySelector('.tg-playground button.tg-replay').disabled || "
                           "document.querySelector('.tg-playground').innerText.includes('replaying')", timeout=60_000, polling=50)
    page.wait_for_function("() => !document.querySelector('.tg-playground .tg-stale-note') && "
                           "!document.querySelector('.tg-playground button.tg-replay').disabled && "
                           "/replayed \\d+ settings/.test(document.querySelector('.tg-playground').innerText)", timeout=600_000)
    page.wait_for_function(done_js, timeout=600_000)
    moved(page, name, what, t0, ".tg-playground")


def other_tree(page) -> None:
    """A redraw of the playground's tree: all-mid's tree, about as wide as yours (all-small's is narrower: its
    box rightly scrolls less)."""
    title = ".tg-playground .js-plotly-plot .gtitle"
    before = page.locator(title).first.text_content()
    page.locator(".tg-playground .widget-dropdown", has_text="tree of").locator("select").select_option(label="all-mid")
    wait_changed(page, title, before)


def interact_06(page, name: str = "06_schedule_playground.ipynb") -> None:
    pg = page.locator(".tg-playground")
    pg.locator(".widget-toggle-button").nth(1).click()
    replay_06(page, name, "replay with step 2 flipped",
              "() => [...document.querySelectorAll('.tg-playground .widget-html')].some(e => e.innerText.includes('yours (1'))")
    assert not stale_cue(page)
    assert not control_cue(page, name, "budget one down", lambda: budget_key(page, "ArrowLeft"),
                           lambda: budget_key(page, "ArrowRight"), "budget")
    nd = pg.locator(".widget-checkbox", has_text="ND (non-destructive").locator("input")
    assert not control_cue(page, name, "ND off", nd.click, nd.click, "ND")
    assert not scroll_kept(page, ".tg-playground", other_tree)
    t0 = time.perf_counter()
    pg.locator(".widget-checkbox", has_text="EG").locator("input").click()
    page.wait_for_function(f"() => ({STALE_JS})('.tg-playground').note", timeout=30_000)
    moved(page, name, "EG off, not replayed", t0, ".tg-playground")
    replay_06(page, name, "replay EG off",
              "() => document.querySelector('.tg-playground table').innerText.includes('w/o EG')")
    pg.locator(".widget-checkbox", has_text="EG").locator("input").click()
    rounds = pg.locator(".tg-round-pick select")
    last = rounds.locator("option").last.text_content().split()[0]  # another round (labels use no-break spaces)
    rounds.select_option(index=rounds.locator("option").count() - 1)
    replay_06(page, name, f"replay round {last}",
              f"() => document.querySelector('.tg-playground').innerText.includes('round {last} of run')")
    # the profile selector: the paper's A100 costs (with top-k pruning, what its scheduler is trained for)
    pg.locator(".widget-dropdown", has_text="profile").locator("select").select_option(label="paper A100 (modelled)")
    pg.locator(".widget-dropdown", has_text="pruning").locator("select").select_option(label="top-k by score (paper)")
    replay_06(page, name, "replay on the A100 profile, top-k",
              "() => document.querySelector('.tg-playground table').innerText.includes('NVIDIA A100')")
    for i in range(2):  # the same settings again: the spread shows in the table
        replay_06(page, name, f"replay again {i + 1}", "() => true")
    assert "plain decoding" in pg.locator("table").inner_text()
    links = pg.locator(".tg-export a")
    assert links.count() == 2 and links.first.get_attribute("href").startswith("data:text/csv;base64,")


def shoot(page, element, path: Path) -> None:
    """A screenshot of `element`; the window is made taller for one taller than the screen (JupyterLab scrolls the
    notebook inside the page, so an element screenshot shows only what fits), then set back."""
    box = element.bounding_box()
    tall = box is not None and box["height"] > VIEWPORT["height"] - 200
    if tall:
        page.set_viewport_size({"width": VIEWPORT["width"], "height": int(box["height"]) + 300})
        time.sleep(1)
    element.scroll_into_view_if_needed()
    time.sleep(0.5)  # what scrolled into view is drawn
    path.parent.mkdir(parents=True, exist_ok=True)
    element.screenshot(path=str(path))
    if tall:
        page.set_viewport_size(VIEWPORT)


def best_round_at_verify(page, view: str = ".tg-viewer") -> None:
    """The viewer under `view` on the round with the most accepted draft tokens (the first such), at verify."""
    title = f"{view} .js-plotly-plot .gtitle"
    rounds = page.locator(f"{view} .tg-round-slider [role=slider]").first
    last = int(float(rounds.get_attribute("aria-valuemax")))

    def goto(r: int) -> None:
        rounds.focus()
        page.keyboard.press("Home")
        for _ in range(r):
            page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => document.querySelector('{title}').textContent.startsWith('round {r} ')", timeout=60_000)

    accepted = []
    for r in range(last + 1):
        if r == 0:
            goto(0)
        else:
            before = plot_title(page, view)
            page.locator(f"{view} button", has_text="next").first.click()
            wait_changed(page, title, before)
            page.wait_for_function(f"() => document.querySelector('{title}').textContent.startsWith('round {r} ')",
                                   timeout=60_000)
        found = re.search(rf"round {r}: .*?A = (\d+)", page.locator(view).inner_text())
        accepted.append(int(found.group(1)) if found else -1)
    goto(max(range(last + 1), key=lambda r: (accepted[r], -r)))
    page.locator(f"{view} .tg-step-slider [role=slider]").first.focus()
    page.keyboard.press("End")
    page.wait_for_function(f"() => document.querySelector('{title}').textContent.includes('verified')", timeout=60_000)


def gallery_shot(page, nb, name: str) -> Path | None:
    """The notebook's gallery picture (GALLERY), or None if no code cell matches its pattern."""
    pattern, selector = GALLERY[name]
    i = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code" and re.search(pattern, c.source)), None)
    if i is None:
        return None
    if name.startswith("01_"):
        best_round_at_verify(page)
    path = ARTIFACTS / "gallery" / f"{name.removesuffix('.ipynb')}.png"
    shoot(page, page.locator(".jp-Notebook .jp-Cell").nth(i).locator(".jp-OutputArea").first.locator(selector).first, path)
    return path


INTERACT = {"01_step_through.ipynb": interact_01, "02_tree_growth_animation.ipynb": interact_02,
            "06_schedule_playground.ipynb": interact_06}


def test_each_check_fails_on_its_broken_twin(browser, lab):
    page = open_and_run_all(browser, lab, TWIN, timeout_s=180)
    problems = look(page, TWIN)
    stale = stale_cue(page)  # the twin's playground gives no cue when a control moves
    sticky = stale_cue(page, ".tg-twin-sticky")  # this one's cue never clears
    offbox = nodes_outside(page, ".tg-twin-scroll")  # the whole round's layout at step 1: nodes beyond the box
    reset = scroll_kept(page, ".tg-twin-scroll", step_right(".tg-twin-scroll"))  # this viewer's box loses its scroll
    overlaps = overlapping_labels(page, ".tg-twin-labels")
    page.close()
    outside = [u for u in browser[1] if "example.invalid" in u]
    browser[1][:] = [u for u in browser[1] if u not in outside]  # the twin's own request, caught: not the notebooks'
    assert [kind for kind, _ in stale] == ["stale-without-cue"], stale
    assert [kind for kind, _ in sticky] == ["stale-cue-not-cleared"], sticky
    assert [kind for kind, _ in reset] == ["scroll-reset"], reset
    assert [kind for kind, _ in offbox] == ["nodes-out-of-view"], offbox
    assert overlaps == [("first label", "second label")], overlaps
    assert outside, "the outside-request check missed the twin's image from example.invalid"
    found = {(i, kind) for i, kind, _ in problems}
    for i, kind in enumerate(TWIN_EXPECT):
        if kind:
            assert (i, kind) in found, f"the {kind} check missed cell {i} of the broken twin: {problems}"
        else:
            assert not [p for p in problems if p[0] == i], f"a clean cell was flagged: {problems}"


def test_run_all_fails_at_once_naming_the_cell_that_errors(browser, lab):
    """Run All stops at the first error: the test names that cell and its error within a minute, instead of waiting
    for prompt numbers that never come."""
    with pytest.raises(pytest.fail.Exception,
                       match=rf"cell {TINY_RUN_CELL} \(.*\) raised an error:\n.*TreeGraftError: .*budget"):
        open_and_run_all(browser, lab, ERROR_TWIN, timeout_s=60)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_shows_what_it_claims_in_the_browser(browser, lab, name):
    page = open_and_run_all(browser, lab, name)
    nb = executed_notebook(page)
    executed = executed_problems(name, nb)  # figures, headline tables, errors
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
    profiles = page.locator(".tg-profile").count()
    page.screenshot(path=str(ARTIFACTS / f"page_{name.removesuffix('.ipynb')}.png"))
    if name in README_SHOTS:  # `make screenshots` copies these to docs/img/
        selector, shot = README_SHOTS[name]
        (ARTIFACTS / "readme").mkdir(exist_ok=True)
        shoot(page, page.locator(selector).first, ARTIFACTS / "readme" / f"{shot}.png")
    gallery = gallery_shot(page, nb, name)
    page.close()
    assert gallery, f"{name}: no code cell matches its gallery pattern {GALLERY[name]!r}"
    assert not tracebacks, tracebacks[:2]
    assert not executed, executed
    assert name not in PROFILED or profiles, f"{name} decides on a profile but shows no profile line (n, spread, date)"
    assert not problems, "\n".join(f"cell {i}: {kind}: {detail}" for i, kind, detail in problems)
    assert not browser[1], f"requests to outside hosts: {browser[1][:5]}"
