"""Which task gets the next batch of measurements: the budget allocation across a model's tasks.

A model has tens of tasks of very different weight; the end-to-end latency is ``sum(calls x best)``.
Both schedulers first give every task one batch, most important (calls x FLOPs) first, so that a task
that gets tuned at all never stays on TVM's naive default schedule, and then:

* ``round-robin``: one batch per task in turn (the budget split evenly; AutoTVM's default);
* ``gradient``: the task whose next batch is expected to cut the end-to-end latency most, after
  MetaSchedule's ``GradientBased`` scheduler (Zheng et al., Ansor, section 6): for a task with best
  latency history ``b`` over its ``n`` batches, ``g = calls x (alpha x (b[n-1-w] - b[n-1]) / w + (1 - alpha)
  x b[n-1] / n)`` with ``alpha = 0.2`` and window ``w = 3``: the recent improvement per batch and an
  optimistic forward estimate. A task with no valid measurement yet goes first (up to
  :data:`FAILED_BATCHES_TO_GIVE_UP` batches: its default schedule would cost the most).

``create(name)`` returns one; ``NAMES`` lists them.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rlcompile.errors import check_choice

if TYPE_CHECKING:
    from rlcompile.kernel.tuner import TaskState

ALPHA = 0.2
WINDOW = 3
#: Batches without a single valid measurement after which a task gets no more (it cannot be built).
FAILED_BATCHES_TO_GIVE_UP = 3


class TaskScheduler(ABC):
    """Picks the next task to measure a batch of, from tasks that are neither exhausted nor given up."""

    name: str = ""

    def next_task(self, states: Sequence[TaskState]) -> TaskState | None:
        """The task for the next batch (``states`` are in importance order), or None when none is left."""
        alive = [s for s in states if not s.exhausted and not given_up(s)]
        if not alive:
            return None
        unstarted = [s for s in alive if s.batches == 0]
        return unstarted[0] if unstarted else self.choose(alive)

    def grant(self, states: Sequence[TaskState], total_trials: int, batch_size: int) -> tuple[TaskState, int] | None:
        """The next task and how many trials its batch gets, or None when the budget or the tasks are spent."""
        remaining = total_trials - sum(state.trials for state in states)
        state = self.next_task(states) if remaining > 0 else None
        return None if state is None else (state, min(batch_size, remaining))

    @abstractmethod
    def choose(self, started: Sequence[TaskState]) -> TaskState:
        """Among tasks that each had a batch already."""


def given_up(state: TaskState) -> bool:
    return not math.isfinite(state.best_seconds) and state.batches >= FAILED_BATCHES_TO_GIVE_UP


class RoundRobin(TaskScheduler):
    name = "round-robin"

    def choose(self, started: Sequence[TaskState]) -> TaskState:
        return min(started, key=lambda s: s.trials)  # ties: the more important task (min is stable)


class Gradient(TaskScheduler):
    name = "gradient"

    def __init__(self, alpha: float = ALPHA, window: int = WINDOW) -> None:
        self.alpha = alpha
        self.window = window

    def choose(self, started: Sequence[TaskState]) -> TaskState:
        return max(started, key=self.gradient)  # ties: the more important task (max is stable)

    def gradient(self, state: TaskState) -> float:
        """Expected end-to-end seconds saved by the task's next batch (``inf`` while nothing is valid)."""
        bests = state.batch_bests
        if not bests or not math.isfinite(bests[-1]):
            return math.inf
        n, best, w = len(bests), bests[-1], self.window
        backward = (bests[n - 1 - w] - best) / w if n > w and math.isfinite(bests[n - 1 - w]) else 0.0
        forward = best / n
        return state.task.weight * (self.alpha * backward + (1 - self.alpha) * forward)


NAMES = {cls.name: cls for cls in (Gradient, RoundRobin)}


def create(name: str) -> TaskScheduler:
    """``create("gradient")`` / ``create("round-robin")``."""
    check_choice("task scheduler", name, NAMES)
    return NAMES[name]()
