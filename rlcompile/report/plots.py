"""Plots shared by the benchmarks (matplotlib, written to PNG)."""

from __future__ import annotations

import math
from pathlib import Path


def tuning_curves(panels: dict[str, dict[str, list[dict]]], path: Path) -> None:
    """One row per panel (layer): best latency vs measurements (left) and vs wall time (right), one line per
    strategy, drawn from the first seed's history."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(panels), 2, figsize=(11, 3.2 * len(panels)), squeeze=False)
    for row, (title, histories) in enumerate(panels.items()):
        for name, history in histories.items():
            points = [p for p in history if math.isfinite(p["best_ms"])]
            axes[row][0].plot([p["trial"] for p in points], [p["best_ms"] for p in points], label=name)
            axes[row][1].plot([p["elapsed"] for p in points], [p["best_ms"] for p in points], label=name)
        axes[row][0].set_title(title, fontsize=9)
        axes[row][0].set_xlabel("measurements")
        axes[row][1].set_xlabel("wall time (s): search + build + run")
        for column in (0, 1):
            axes[row][column].set_ylabel("best latency (ms)")
            axes[row][column].set_yscale("log")
        axes[row][0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
