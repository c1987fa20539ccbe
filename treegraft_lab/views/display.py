"""Drawing helpers shared by the views: a figure drawn in an Output, a tree in a scrolling box with its
legend docked, and a view's caption line."""

from __future__ import annotations

import html

import ipywidgets as W
import plotly.graph_objects as go
from IPython.display import clear_output, display

from treegraft_lab.viz.export import exportable
from treegraft_lab.viz.tree import legend_html


def draw(out: W.Output, fig: go.Figure) -> go.Figure:
    """Show `fig` in `out`, replacing what it showed; returns `fig` (the figure on screen).

    A plain figure in an Output widget is drawn whole by JupyterLab's plotly renderer. Edits of
    a FigureWidget (in place, or a fresh one swapped into the box) were seen to leave the browser
    showing the previous figure when two changes came within one drawing on a loaded machine.
    """
    fig = exportable(fig)  # shown with the package's plotly config (viz.export): no cloud button, the PNG named
    with out:
        clear_output(wait=True)
        display(fig)
    return fig


class TreeBox(W.VBox):
    """A tree figure in a box that scrolls it sideways, with its legend docked above the box (in
    view wherever the reader scrolls). The reader's scroll survives a redraw: the box's content
    keeps the figure's size while the new figure replaces the old one, so the browser never
    shrinks the scrolled content and resets the scroll. A tree opens scrolled to its left edge,
    where `tidy_layout` puts the root and the accepted path."""

    def __init__(self, legend_below: bool = False) -> None:
        self.legend, self.output = W.HTML(), W.Output(layout={"flex": "0 0 auto"})
        self.box = W.Box([self.output], layout={"overflow": "auto", "max_width": "100%"})
        self.box.add_class("tg-scroll")
        self.figure = go.Figure()
        super().__init__([self.box, self.legend] if legend_below else [self.legend, self.box])

    def pin(self, fig: go.Figure) -> None:
        """Hold the box's content at `fig`'s size through the redraw."""
        self.output.layout.width = self.output.layout.min_width = f"{fig.layout.width}px"
        self.output.layout.min_height = f"{fig.layout.height}px"

    def show(self, fig: go.Figure) -> go.Figure:
        """Draw `fig` (a tree figure drawn with scroll=True) and its docked legend; returns `fig`."""
        self.legend.value = legend_html(fig)
        self.pin(fig)
        self.figure = draw(self.output, fig)
        return self.figure


def caption_html(text: str) -> str:
    """The line naming a view's pair, prompt, settings and profile (`viz.caption`), as HTML."""
    return f'<div class="tg-caption" style="font-size:12px;color:#444">{html.escape(text)}</div>'
