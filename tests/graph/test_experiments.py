"""The benchmarks' side-by-side grid: every agent's graph timed against one shared original."""

from __future__ import annotations

from rich.console import Console

from rlcompile.graph.experiments import learning_table, run_grid, table
from rlcompile.measure import QUICK


def test_grid_times_every_agent_against_one_measurement_of_the_original():
    rows = run_grid(["lenet5"], ["greedy", "taso"], Console(quiet=True), rounds=2, timing=QUICK, max_steps=3)
    assert [row["agent"] for row in rows] == ["greedy", "taso"]
    assert rows[0]["ort_original_ms"] == rows[1]["ort_original_ms"] > 0
    for row in rows:
        assert row["ratio_optimized_over_original"] == row["ort_optimized_ms"] / row["ort_original_ms"]
        assert row["agreement"]["max_rel"] < 1e-4
    assert table(rows, "t").row_count == 2 and learning_table(rows, "t").row_count == 0
