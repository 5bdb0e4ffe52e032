"""Task schedulers: first batch for every task, then round-robin or by expected end-to-end gain."""

from __future__ import annotations

import math

import pytest

from rlcompile.errors import BudgetError, RlcompileError
from rlcompile.kernel import scheduler
from rlcompile.kernel.tasks import Task
from rlcompile.kernel.tuner import TaskState, check_budget


def states(*weights: int) -> list[TaskState]:
    return [TaskState(Task(f"t{i}", f"t{i}", None, None, weight=w), 0, None) for i, w in enumerate(weights)]


def hand_out(name: str, tasks: list[TaskState], total: int, batch: int, latency) -> list[str]:
    """Run the scheduler to the end of the budget; ``latency(state)`` is the best after each batch."""
    chosen, policy = [], scheduler.create(name)
    while granted := policy.grant(tasks, total, batch):
        state, trials = granted
        state.trials += trials
        state.best_seconds = latency(state, state.batches + 1)
        state.batch_bests.append(state.best_seconds)
        chosen.append(state.task.name)
    return chosen


def test_round_robin_splits_whole_batches_evenly_most_important_first() -> None:
    tasks = states(1, 1, 1)
    hand_out("round-robin", tasks, 100, 16, lambda s, n: 1.0)
    assert [s.trials for s in tasks] == [36, 32, 32]
    tasks = states(*[1] * 19)
    hand_out("round-robin", tasks, 64, 16, lambda s, n: 1.0)
    assert [s.trials for s in tasks] == [16, 16, 16, 16] + [0] * 15


@pytest.mark.parametrize("name", list(scheduler.NAMES))
def test_every_task_gets_a_first_batch_before_any_gets_a_second(name: str) -> None:
    tasks = states(50, 1, 1, 1)
    order = hand_out(name, tasks, 16 * 6, 16, lambda s, n: 1e-3 / n)
    assert order[:4] == ["t0", "t1", "t2", "t3"]
    assert sum(s.trials for s in tasks) == 96


def test_gradient_spends_where_the_end_to_end_latency_is() -> None:
    tasks = states(50, 1, 1)  # t0 is called 50 times: its batches matter 50x more
    order = hand_out("gradient", tasks, 16 * 10, 16, lambda s, n: 1e-3 / n)
    assert order.count("t0") == 8 and order.count("t1") == order.count("t2") == 1


def test_gradient_prefers_a_task_still_improving_over_a_flat_one_as_fast() -> None:
    tasks = states(1, 1)
    tasks[0].batch_bests, tasks[1].batch_bests = [4e-3, 3e-3, 2e-3, 1e-3], [1e-3] * 4
    for state in tasks:
        state.trials, state.best_seconds = 64, 1e-3
    assert scheduler.create("gradient").grant(tasks, 1000, 16) == (tasks[0], 16)
    assert scheduler.create("round-robin").grant(tasks, 1000, 16) == (tasks[0], 16)  # a tie: importance order


def test_gradient_retries_a_task_without_a_valid_schedule_then_gives_up() -> None:
    tasks = states(1, 100)
    order = hand_out("gradient", tasks, 16 * 8, 16, lambda s, n: math.inf if s.task.name == "t0" else 1e-3)
    assert order[:4] == ["t0", "t1", "t0", "t0"]
    assert order.count("t0") == scheduler.FAILED_BATCHES_TO_GIVE_UP


def test_exhausted_tasks_are_skipped_and_the_budget_is_exact() -> None:
    tasks = states(1, 1)
    tasks[0].exhausted = True
    assert hand_out("gradient", tasks, 40, 16, lambda s, n: 1e-3) == ["t1", "t1", "t1"]
    assert tasks[1].trials == 40


def test_unknown_scheduler_and_bad_budgets_are_one_line_errors() -> None:
    with pytest.raises(RlcompileError, match="unknown task scheduler 'fastest'"):
        scheduler.create("fastest")
    with pytest.raises(BudgetError):
        check_budget(0, 16)
    with pytest.raises(BudgetError):
        check_budget(10, 0)
