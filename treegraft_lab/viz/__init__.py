"""Views of recorded runs: plotly draft-tree figures and animation (`tree`), seaborn plots (`stats`).

Everything here reads a recorded `Run` (see `treegraft_lab.hooks`); no model is needed.
"""

from treegraft_lab.viz.stats import acceptance_by_depth, decisions_by_step, graft_depth_hist
from treegraft_lab.viz.tree import (
    called_round,
    called_rounds,
    focus_ranges,
    growth_animation,
    showcase_round,
    showcase_step,
    step_nodes,
    tidy_layout,
    tree_figure,
)

__all__ = ["acceptance_by_depth", "called_round", "called_rounds", "decisions_by_step", "focus_ranges", "graft_depth_hist", "growth_animation",
           "showcase_round", "showcase_step", "step_nodes", "tidy_layout", "tree_figure"]
