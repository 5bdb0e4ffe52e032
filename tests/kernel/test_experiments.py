"""The comparisons the benchmarks report: reaching a latency and comparing against a reference strategy."""

from __future__ import annotations

from rlcompile.kernel.experiments import compare_to_reference, first_within, history_panels


def run(best: list[float], search: float = 1.0) -> dict:
    history = [{"trial": i + 1, "elapsed": 2.0 * (i + 1), "best_ms": b} for i, b in enumerate(best)]
    task = {
        "best_ms": best[-1],
        "gflops": 1.0 / best[-1],
        "elapsed_seconds": history[-1]["elapsed"],
        "history": history,
    }
    return {"tasks": [task], "search_seconds": search, "search_steps": 10, "measurements": len(best), "failures": 0}


def test_first_within_returns_measurements_and_seconds() -> None:
    history = run([5.0, 3.0, 2.0, 1.0])["tasks"][0]["history"]
    assert first_within(history, 2.5) == (3, 6.0)
    assert first_within(history, 0.5) == (None, None)


def test_compare_to_reference_counts_the_cost_of_reaching_five_percent() -> None:
    runs = {"evolutionary": [run([4.0, 2.0, 1.0, 1.0])], "sa": [run([1.04, 1.0, 1.0, 1.0])],
            "random": [run([9.0, 8.0, 8.0, 8.0])]}  # fmt: skip
    result = compare_to_reference(runs, "evolutionary")
    assert result["reference_best_ms"] == 1.0
    assert result["strategies"]["sa"]["measurements_to_reference"] == 1
    assert result["strategies"]["evolutionary"]["measurements_to_reference"] == 3
    assert result["strategies"]["random"]["reached"] == "0/1"
    assert result["strategies"]["random"]["measurements_to_reference"] is None
    assert compare_to_reference({"sa": runs["sa"]}, "evolutionary")["reference"] == "sa"


def test_history_panels_take_the_first_seed() -> None:
    layers = {"L6": {"label": "conv", "runs": {"sa": [run([2.0, 1.0]), run([3.0, 3.0])]}}}
    panels = history_panels(layers)
    assert list(panels) == ["L6: conv"] and [p["best_ms"] for p in panels["L6: conv"]["sa"]] == [2.0, 1.0]
