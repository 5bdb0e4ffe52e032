"""The benchmarks' side-by-side grid: every agent's graph timed against one shared original."""

from __future__ import annotations

from rich.console import Console

from rlcompile.graph.experiments import agreement_summary, answers_summary, learning_table, run_grid, table
from rlcompile.measure import QUICK


def test_grid_times_every_agent_against_one_measurement_of_the_original():
    rows = run_grid(["lenet5"], ["greedy", "taso"], Console(quiet=True), rounds=2, timing=QUICK, max_steps=3)
    assert [row["agent"] for row in rows] == ["greedy", "taso"]
    assert rows[0]["ort_original_ms"] == rows[1]["ort_original_ms"] > 0
    for row in rows:
        assert row["ratio_optimized_over_original"] == row["ort_optimized_ms"] / row["ort_original_ms"]
        assert row["agreement"]["max_rel"] < 1e-4
        assert row["returned_ratio"] == (row["ratio_optimized_over_original"] if row["returned_kept"] else 1.0)
    assert table(rows, "t").row_count == 2 and learning_table(rows, "t").row_count == 0


def test_agreement_counts_only_changes_beyond_the_noise():
    # start: estimated 10, measured 100; noise 2%: the third graph's measured change (1%) is not decided
    summary = agreement_summary([9.0, 11.0, 9.5], 10.0, [90.0, 95.0, 101.0], 100.0, noise=0.02)
    assert (summary["agree"], summary["decided"], summary["graphs"]) == (1, 2, 3)
    answers = answers_summary([{"rewrites": 2, "measured_ratio": 0.9}, {"rewrites": 1, "measured_ratio": 1.01},
                               {"rewrites": 0, "measured_ratio": 1.0}], noise=0.02)  # fmt: skip
    assert answers == {"rewrote": 2, "faster": 1, "slower": 0}
