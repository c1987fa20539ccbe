"""The TreeGraft paper's reported numbers, written once: every table, figure and view reads them here."""

from __future__ import annotations

RESELECTED_SHARE = 0.6147  # frontier nodes a mid step reselected at an earlier depth (the paper does not say over which calls)
MEAN_POOL = 112.54  # the mean candidate pool of expanded graft-position selection, in nodes
POOL_RATIO = 2.38  # that pool over the conventional pool
CONVENTIONAL_POOL = MEAN_POOL / POOL_RATIO  # derived, not reported
A = {"10101": 2.17, "adaptive": 2.30}  # acceptance length: the fixed schedule [1,0,1,0,1] and the adaptive scheduler

# Main table: speedup over autoregressive decoding (A100, wall clock with prefill, 256 tokens); n: questions per
# speedup (the release times the first 80 questions of six datasets per pair; the overall row pools 10 pairs).
MAIN_HOW = "A100, wall clock with prefill, 256 tokens"
MAIN = [("Qwen3-32B / 1.7B", 1.21, 1.26, 1.49, 480), ("LLaMA-70B / 1B", 1.44, 2.30, 2.30, 480),
        ("LLaMA-8B / 3B", 1.40, 0.94, 1.42, 480), ("overall (10 pairs)", 1.32, 1.39, 1.60, 4800)]
MAIN_COLUMNS = ("pair", "All Small", "All Mid", "TreeGraft", "n")

# Ablation (GSM8K and CNN/DM, 2 x 80 questions): method, label, speedup, A.
ABLATION = [("ar", "plain decoding (autoregressive)", 1.0, float("nan")), ("csd", "CSD", 0.94, 0.81),
            ("no-eg", "w/o EG", 1.35, 1.80), ("no-nd", "w/o ND", 1.20, 1.47),
            ("10101", "TreeGraft fixed (10101)", 1.43, 2.17), ("adaptive", "TreeGraft adaptive", 1.94, 2.30)]
ABLATION_N = 160
