"""What a plotly figure of the workbench carries out of the notebook.

Every plotly figure the package draws is a `Figure`: wherever it is shown (a cell's last line, `display`,
`viz.style.show`, a widget, a saved HTML file) its toolbar has no button that uploads it to a cloud service
(plotly.js's "Share chart", on by default in the JupyterLab renderer) and no plotly logo, and its "Download
plot as a png" button saves a file named after the view's caption: pair, prompt, settings and profile.
The caption itself is drawn inside the figure (its title, or a footnote where the view names it beside the
figure on screen), so the PNG carries it.
"""

from __future__ import annotations

import re
from typing import Any

import plotly.graph_objects as go

CLOUD_BUTTONS = ["sendChartToCloud"]  # plotly.js's "Share chart..." button: an upload to plotly's cloud service
FILE_CHARS = 150  # the longest PNG file name offered (characters, before ".png")
FALLBACK = "treegraft-figure"


def file_stem(caption: str | None, name: str | None = None) -> str:
    """A file name (no extension) made from a view's caption ("pair … · prompt “…” (n characters) · settings ·
    profile …"), `name` (what the figure shows, e.g. "tree-round3-step2") first: lower case, words joined by
    "-", the caption's parts by "_"."""
    parts = [name] if name else []
    for part in (caption or "").split(" · "):
        part = re.sub(r"\(\d[\d,]* characters\)", "", part)
        part = re.sub(r"^(pair|prompt|profile) ", "", part.strip())
        parts.append(part)
    slugs = [s for s in (re.sub(r"[^a-z0-9.+]+", "-", p.lower()).strip("-.") for p in parts) if s]
    stem = "_".join(slugs)
    if len(stem) > FILE_CHARS:  # cut at the last word that fits
        cut = max(stem.rfind("-", 0, FILE_CHARS + 1), stem.rfind("_", 0, FILE_CHARS + 1))
        stem = stem[:cut] if cut > 0 else stem[:FILE_CHARS]
    return stem.rstrip("-_.") or FALLBACK


def label(fig: go.Figure, caption: str | None, name: str | None = None) -> go.Figure:
    """Note on `fig` (its layout's meta, which survives copies and saved JSON) the caption and name its
    exported PNG is named after; returns `fig`."""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    fig.layout.meta = {**meta, "caption": caption or "", "name": name or ""}
    return fig


def figure_config(fig: go.Figure) -> dict[str, Any]:
    """plotly's config for `fig`: no cloud upload button, no logo, the PNG named after its caption (`label`)."""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    return {"displaylogo": False, "showSendToCloud": False, "modeBarButtonsToRemove": list(CLOUD_BUTTONS),
            "toImageButtonOptions": {"format": "png", "filename": file_stem(meta.get("caption"), meta.get("name"))}}


class Figure(go.Figure):
    """A plotly figure shown and saved with `figure_config`, however it is displayed."""

    def _repr_mimebundle_(self, include=None, exclude=None, validate=True, **kwargs):
        return super()._repr_mimebundle_(include, exclude, validate, **{"config": figure_config(self), **kwargs})

    def _ipython_display_(self):
        import plotly.io as pio

        if pio.renderers.render_on_display and pio.renderers.default:
            pio.show(self, config=figure_config(self))
        else:
            print(repr(self))

    def show(self, *args, **kwargs):
        return super().show(*args, **{"config": figure_config(self), **kwargs})

    def write_html(self, *args, **kwargs):
        return super().write_html(*args, **{"config": figure_config(self), **kwargs})


def exportable(fig: go.Figure, caption: str | None = None, name: str | None = None) -> Figure:
    """`fig` as a `Figure` (the same object where it is one already), labelled with `caption` and `name`
    where given."""
    out = fig if isinstance(fig, Figure) else Figure(fig)
    return label(out, caption, name) if caption is not None or name is not None else out
