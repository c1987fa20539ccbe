"""How a notebook shows its tables and figures: tables formatted for reading (`styled`), and figures
shown and saved under `figures_dir()` (`show`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from IPython.display import Image, display

from treegraft_lab.workbench import runs_dir

TABLE_CSS = [{"selector": "th, td", "props": "padding: 2px 6px; text-align: right; white-space: nowrap"},
             {"selector": "th.row_heading, td.col0", "props": "text-align: left"}]


WRAP_CSS = [{"selector": "th.col_heading", "props": "white-space: normal; max-width: 9em; vertical-align: bottom"},
            {"selector": "td.col0, td.col1", "props": "white-space: normal; max-width: 14em"}]  # a wide table fits 848 px


def styled(df: pd.DataFrame, pct: tuple = (), ratio: tuple = (), ms: tuple = (), ints: tuple = (),
           decimals: int = 2, pct_decimals: int = 1, ratio_decimals: int = 2, wrap: bool = False) -> Any:
    """`df` for display: shares as %, ratios as x, milliseconds rounded, other floats to `decimals`,
    "—" where a value does not apply (NaN), padded and right-aligned columns; `wrap`: headers and the
    first two columns wrap (a table of many worded columns stays inside the output's 848 px)."""
    fmt: dict[str, Any] = {c: f"{{:.{pct_decimals}%}}" for c in pct} | {c: f"{{:.{ratio_decimals}f}}x" for c in ratio}
    fmt |= {c: "{:,.0f}" for c in (*ms, *ints)}
    rest = [c for c in df.columns if c not in fmt and pd.api.types.is_float_dtype(df[c])]
    fmt |= {c: f"{{:.{decimals}f}}" for c in rest}
    return df.style.format({c: f for c, f in fmt.items() if c in df.columns}, na_rep="—").set_table_styles(
        TABLE_CSS + (WRAP_CSS if wrap else []))


def figures_dir() -> Path:
    """Where notebooks save figures: `workbench.runs_dir()/figures`."""
    path = runs_dir() / "figures"
    path.mkdir(parents=True, exist_ok=True)
    return path


def show(fig: Any, name: str) -> None:
    """Display `fig` in the notebook and save it as `figures_dir()/name`: matplotlib as .png, plotly as
    a stand-alone .html (plotly's JavaScript embedded, so it opens offline). The package's plotly figures
    (`viz.export.Figure`) are shown and saved with their config: no cloud upload button, and a PNG button
    that names the file after the caption."""
    if hasattr(fig, "savefig"):
        path = figures_dir() / f"{name}.png"
        fig.savefig(path, dpi=100)
        display(Image(path.read_bytes()))
    else:
        path = figures_dir() / f"{name}.html"
        fig.write_html(path, include_plotlyjs=True)
        display(fig)
    print(f"saved {path}")
