"""The interface every kernel search strategy implements, and the per-task context it works in.

A strategy proposes a batch of schedules to measure, given the task's knob space, the shared cost model
and what has been measured; the tuner measures them and tells the strategy what happened. Strategies
never build or run code themselves and never update the cost model: the tuner does both, the same way
for every strategy, so comparisons differ only in search.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from rlcompile.kernel.cost_model import KnobXGB
from rlcompile.kernel.measurer import Measurement
from rlcompile.kernel.space import Config, KnobSpace
from rlcompile.kernel.tasks import Task
from rlcompile.tvm_bridge import module_key


def schedule_key(schedule) -> str:
    """Identity of a post-processed schedule (two configurations TVM repairs to one program are one)."""
    return module_key(schedule.mod)


@dataclass
class Proposal:
    """A schedule to measure, with its configuration when it has one in the knob space."""

    schedule: object
    config: Config | None
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            self.key = schedule_key(self.schedule)

    def candidate(self):
        from tvm.s_tir import meta_schedule as ms

        return ms.MeasureCandidate(self.schedule, ms.arg_info.ArgInfo.from_entry_func(self.schedule.mod, True))


@dataclass
class SearchContext:
    """What a strategy may use for one task."""

    task: Task
    tune_context: object  # tvm.s_tir.meta_schedule.TuneContext
    space: KnobSpace
    cost_model: KnobXGB
    database: object  # tvm.s_tir.meta_schedule.Database
    ms_cost_model: object  # MetaSchedule's XGBModel, for strategies that use it natively
    seed: int = 0
    measured: dict[str, float] = field(default_factory=dict)  # key -> seconds (inf when failed)
    measured_configs: dict[Config, float] = field(default_factory=dict)

    @property
    def best_seconds(self) -> float:
        return min(self.measured.values(), default=float("inf"))

    def is_measured(self, key: str) -> bool:
        return key in self.measured


@dataclass
class SearchStats:
    """Counters every strategy reports: search wall time, search steps, cost-model predictions."""

    search_seconds: float = 0.0
    steps: int = 0
    predictions: int = 0
    invalid_configs: int = 0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class SearchStrategy(ABC):
    """Base class: ``prepare`` once per task, then ``propose`` / ``observe`` per batch."""

    name: str = ""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.stats = SearchStats()
        self.context: SearchContext | None = None
        self.rng = np.random.default_rng(seed)

    def prepare(self, context: SearchContext) -> None:
        """Start searching a task (called once per task, also when resuming)."""
        self.context = context
        self.rng = np.random.default_rng([self.seed, int(context.task.workload_key, 16) % (2**32)])

    def propose(self, count: int) -> list[Proposal]:
        """Up to ``count`` unmeasured schedules; an empty list means the strategy has nothing left."""
        started = time.perf_counter()
        try:
            return self._propose(count)
        finally:
            self.stats.search_seconds += time.perf_counter() - started

    @abstractmethod
    def _propose(self, count: int) -> list[Proposal]: ...

    def observe(self, proposals: Sequence[Proposal], measurements: Sequence[Measurement]) -> None:  # noqa: B027
        """Learn from measured proposals (default: nothing; the tuner updates the cost model)."""

    def agent_state(self) -> dict | None:
        """What the strategy has learned that could help another task of the same structure (default: none)."""
        return None

    def load_agent_state(self, state: dict) -> None:  # noqa: B027
        """Start from ``agent_state()`` of an earlier task or run (called right after :meth:`prepare`)."""

    # helpers shared by the knob-space strategies

    def model_guided(self) -> bool:
        """Whether a search guided by the cost model makes sense yet: its predictions mean something (trained on
        measurements, or a pretrained prior) and the task has knobs to search (a reshape may have none)."""
        return self.context.cost_model.trained and bool(self.context.space.knobs)

    def predict(self, configs: Sequence[Config]) -> np.ndarray:
        self.stats.predictions += len(configs)
        return self.context.cost_model.predict(list(configs))

    def realise(self, configs: Iterable[Config], count: int, taken: set[str] | None = None) -> list[Proposal]:
        """Turn configurations into up to ``count`` valid, unmeasured, distinct proposals, in order."""
        proposals: list[Proposal] = []
        taken = set() if taken is None else taken
        for config in configs:
            if len(proposals) >= count:
                break
            schedule = self.context.space.to_schedule(config)
            if schedule is None:
                self.stats.invalid_configs += 1
                continue
            proposal = Proposal(schedule, self.context.space.from_schedule(schedule) or config)
            if proposal.key in taken or self.context.is_measured(proposal.key):
                continue
            taken.add(proposal.key)
            proposals.append(proposal)
        return proposals

    def realise_sample(self, sample: Iterable[Config], ranked: Iterable[Config], count: int) -> list[Proposal]:
        """Adaptive sampling's picks as proposals; when none survives (every centroid invalid or already
        measured under another knob vector), the best-ranked points, then random ones: an empty batch
        would end the task's tuning early."""
        return self.realise(sample, count) or self.realise(ranked, count) or self.random_proposals(count)

    def random_configs(self, count: int) -> list[Config]:
        return [self.context.space.random_config(self.rng) for _ in range(count)]

    def random_proposals(self, count: int, taken: set[str] | None = None, attempts: int = 20) -> list[Proposal]:
        """Random valid unmeasured proposals (gives up after ``attempts`` x ``count`` draws)."""
        proposals: list[Proposal] = []
        taken = set() if taken is None else taken
        for _ in range(attempts):
            missing = count - len(proposals)
            if missing <= 0:
                break
            proposals += self.realise(self.random_configs(missing), missing, taken)
        return proposals
