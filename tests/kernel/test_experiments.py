"""The comparisons the benchmarks report: reaching a latency and comparing against a reference strategy."""

from __future__ import annotations

import json

from rlcompile.kernel.experiments import (
    compare_to_reference,
    describe_best,
    first_within,
    history_panels,
    kernel_history,
    per_iteration,
    pooled_claims,
    reach_ratio,
    seed_claims,
    show_spread,
    spread,
    strategy_row,
    work_dir_kernel_history,
)


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


def seeded(best: list[float], seed: int, steps: int = 10, batches: int = 2) -> dict:
    result = run(best) | {"seed": seed, "search_steps": steps, "wall_seconds": 2.0 * len(best)}
    result["tasks"][0]["batches"] = batches
    return result


def test_reach_ratio_pairs_seeds_and_counts_those_that_never_reach() -> None:
    runs = {
        "sa": [seeded([4.0, 3.0, 2.0, 1.0], 0), seeded([4.0, 4.0, 4.0, 2.0], 1)],
        "chameleon": [seeded([3.0, 1.0, 1.0, 1.0], 0), seeded([4.0, 4.0, 4.0, 4.0], 1)],
    }
    claim = reach_ratio(runs, "sa", "chameleon", "sa")
    assert claim["measurement_ratios"] == [2.0]  # seed 0: sa needs 4 measurements to reach 1.05, chameleon 2
    assert claim["reached"] == "1/2"  # seed 1: chameleon never comes within 5% of sa's 2.0
    assert claim["time_ratio"]["median"] == 2.0


def test_seed_claims_compare_steps_per_iteration_and_pool_over_layers() -> None:
    runs = {"sa": [seeded([1.0], 0, steps=300, batches=3)], "rl": [seeded([1.0], 0, steps=50, batches=5)]}
    claims = seed_claims(runs)
    steps = claims["search steps per iteration, sa / rl (seed: 2.88x)"]
    assert steps["measurement_ratio"]["median"] == 10.0  # 100 steps per iteration against 10
    assert not any("adaptive" in label for label in claims)  # neither adaptive strategy ran
    pooled = pooled_claims({"L1": {"runs": runs}, "L2": {"runs": runs}})
    assert pooled["search steps per iteration, sa / rl (seed: 2.88x)"]["reached"] == "2/2"


def test_strategy_row_measures_against_evolutionarys_final_seed_by_seed() -> None:
    runs = {"evolutionary": [seeded([2.0, 1.0], 0)], "sa": [seeded([1.5, 1.04], 0)]}
    row = strategy_row(runs, "sa")
    assert row["measurements_to_goal"]["median"] == 2 and row["reached"] == "1/1"
    assert row["steps_per_iteration"]["median"] == 5.0
    assert strategy_row(runs, "evolutionary")["steps_per_iteration"] is None
    assert show_spread(row["best_ms"], ".2f") == "1.04" and show_spread(spread([1.0, 3.0, 2.0])) == "2.00 (1.00-3.00)"


def test_describe_best_weights_a_models_tasks_by_their_calls() -> None:
    assert describe_best([{"best_ms": 0.5, "weight": 1}]) == "best 0.5000 ms"
    tasks = [{"best_ms": 0.5, "weight": 2}, {"best_ms": 1.0, "weight": 1}, {"best_ms": None, "weight": 4}]
    assert describe_best(tasks) == "tuned kernels 2.000 ms weighted (2 of 3 tasks tuned)"


def test_per_iteration_counts_every_tasks_batches_in_a_model_run() -> None:
    assert per_iteration(seeded([1.0] * 6, 0, steps=30, batches=3), "search_steps") == 10.0
    model_run = {"search_steps": 60, "measurements": 48, "batches_per_task": [2, 3, 1]}
    assert per_iteration(model_run, "search_steps") == 10.0 and per_iteration(model_run, "measurements") == 8.0


def entry(task: str, seconds: float | None, at: float) -> dict:
    return {"task": task, "status": "ok" if seconds else "run_error", "seconds": seconds, "at": at}


def test_kernel_history_sums_every_tasks_best_weighted_by_calls_once_all_have_one() -> None:
    journal = [entry("a", 0.004, 101.0), entry("a", 0.002, 101.0), entry("b", None, 102.0),
               entry("b", 0.003, 103.0), entry("a", 0.003, 104.0), entry("a", 0.001, 105.0),
               entry("c", 0.5, 105.0)]  # fmt: skip
    history = kernel_history(journal, {"a": 2, "b": 1}, started=100.0)  # "c" is not one of the model's tasks
    assert history == [{"trial": 4, "elapsed": 3.0, "best_ms": 7.0}, {"trial": 6, "elapsed": 5.0, "best_ms": 5.0}]
    assert first_within(history, 5.2) == (6, 5.0) and first_within(history, 4.0) == (None, None)


def test_kernel_history_of_a_work_directory_starts_when_it_was_created(tmp_path) -> None:
    assert work_dir_kernel_history(tmp_path / "gone", {"a": 1}) is None
    recorded = {"recorded": {"recorded_at": "2026-01-01T00:00:00+00:00"}}
    (tmp_path / "environment.json").write_text(json.dumps(recorded))
    start = 1767225600.0  # 2026-01-01T00:00:00Z
    lines = [entry("a", 0.002, start + 30), entry("a", 0.001, start + 60)]
    (tmp_path / "measurements.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert [point["elapsed"] for point in work_dir_kernel_history(tmp_path, {"a": 1})] == [30.0, 60.0]
