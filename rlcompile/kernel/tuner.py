"""The tuning loop shared by every strategy: propose, measure, record, learn, repeat.

Per task it builds the knob space and a search context, restores whatever the work directory already
holds (measurements are never repeated), and then runs batches until the task's budget is spent:
the strategy proposes, the measurer builds and times, the journal and the database record, both cost
models learn, the strategy observes. The budget is handed out a batch at a time by a task scheduler
(:mod:`rlcompile.kernel.scheduler`): every task's first batch in order of importance (calls x FLOPs),
then by expected gain (``gradient``) or in turn (``round-robin``); with a wall-clock deadline the loop
stops at the first batch boundary past it (the journal keeps every finished batch).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rlcompile.errors import BudgetError, RlcompileError, first_line
from rlcompile.kernel import scheduler as schedulers
from rlcompile.kernel.cost_model import MIN_TRAINING_SAMPLES, KnobXGB
from rlcompile.kernel.measurer import DEVICE_LOST, NOT_RUN, UNMEASURED, Measurement, Measurer
from rlcompile.kernel.pretrained import PretrainedModel, TaskPrior
from rlcompile.kernel.space import KnobSpace
from rlcompile.kernel.strategies import SearchContext, SearchStrategy
from rlcompile.kernel.strategies.base import Proposal
from rlcompile.kernel.tasks import Task
from rlcompile.kernel.transfer import Prior, WarmStart, agent_path, load_agent, save_agent
from rlcompile.kernel.workdir import WorkDir
from rlcompile.tvm_bridge import load_tensor_intrinsics

DEFAULT_TRIALS_PER_TASK = 32
DEFAULT_BATCH_SIZE = 16
FAILURE_STATUSES = ("build_error", "run_error", "timeout")


def default_trials(task_count: int) -> int:
    """The budget when none is given: 32 measurements per task (two default batches each)."""
    return DEFAULT_TRIALS_PER_TASK * task_count


def check_budget(trials: int, batch_size: int) -> None:
    if trials <= 0:
        raise BudgetError(f"the trial budget must be positive, got {trials}")
    if batch_size <= 0:
        raise BudgetError(f"the batch size must be positive, got {batch_size}")


@dataclass
class TaskState:
    """Progress of one task: trials, best latency, failures, time spent, and the history to plot."""

    task: Task
    budget: int
    strategy: SearchStrategy
    context: SearchContext | None = None
    trials: int = 0
    resumed: int = 0
    statuses: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    best_seconds: float = math.inf
    measure_seconds: float = 0.0
    elapsed_seconds: float = 0.0
    history: list[dict] = field(default_factory=list)
    exhausted: bool = False
    #: candidates whose remote device went away in every attempt: not recorded, proposed again later
    device_lost: int = 0
    #: candidates the deadline left no time to run (or stopped): not recorded, proposed again by a later run
    not_run: int = 0
    #: best latency after each of the task's batches (the task scheduler's input)
    batch_bests: list[float] = field(default_factory=list)
    #: measurements of other tasks the cost model started from (``--warm-start``)
    warm_start_samples: int = 0
    #: what the task's cost model started from: "cold", or the pretrained model's name
    cost_model: str = "cold"
    #: why the task cannot be tuned at all (its design space cannot be built or replayed); it keeps TVM's
    #: default schedule and the other tasks are tuned
    skipped: str | None = None

    @property
    def batches(self) -> int:
        return len(self.batch_bests)

    @property
    def failures(self) -> int:
        return sum(self.statuses[s] for s in FAILURE_STATUSES)

    @property
    def valid(self) -> bool:
        """At least one candidate built, ran and was timed (a zero-FLOP task such as a reshape included)."""
        return math.isfinite(self.best_seconds)

    @property
    def gflops(self) -> float:
        return self.task.flops / self.best_seconds / 1e9 if self.valid else 0.0

    @property
    def done(self) -> bool:
        return self.exhausted or self.trials >= self.budget

    def summary(self) -> dict:
        return {
            "task": self.task.name, "label": self.task.label, "workload_key": self.task.workload_key,
            "weight": self.task.weight, "flops": self.task.flops, "budget": self.budget, "trials": self.trials,
            "resumed": self.resumed, "best_ms": self.best_seconds * 1e3 if math.isfinite(self.best_seconds) else None,
            "gflops": self.gflops, "statuses": dict(self.statuses), "errors": dict(self.errors.most_common(5)),
            "search_seconds": self.strategy.stats.search_seconds, "measure_seconds": self.measure_seconds,
            "elapsed_seconds": self.elapsed_seconds, "search": self.strategy.stats.to_dict(),
            "exhausted": self.exhausted, "device_lost": self.device_lost, "not_run": self.not_run,
            "batches": self.batches, "warm_start_samples": self.warm_start_samples, "cost_model": self.cost_model,
            "skipped": self.skipped, "history": self.history,
        }  # fmt: skip


Callback = Callable[[TaskState], None]


class Tuner:
    """Tunes a list of tasks with one strategy per task (created by ``make_strategy``).

    ``trials`` is the total over all tasks (default :func:`default_trials`), handed out a batch at a time
    by the task ``scheduler`` (:mod:`rlcompile.kernel.scheduler`); a task's ``budget`` is what it has been
    granted so far. Measurements restored from the journal count against the total. ``warm_start``: the
    knob cost model of each task starts trained on earlier work directories' tasks of the same structure.
    ``pretrained``: the prior every task's cost model starts from and fine-tunes (``--cost-model``); the
    strategies that use MetaSchedule's own model (``evolutionary``) then rank with this one too, so
    comparisons still differ only in search.
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        make_strategy: Callable[[], SearchStrategy],
        work_dir: WorkDir,
        measurer: Measurer,
        trials: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        seed: int = 0,
        callbacks: Sequence[Callback] = (),
        deadline: float | None = None,
        scheduler: str = "gradient",
        warm_start: WarmStart | None = None,
        pretrained: PretrainedModel | None = None,
    ) -> None:
        if not tasks:
            raise BudgetError("no task to tune")
        self.total_trials = trials if trials is not None else default_trials(len(tasks))
        check_budget(self.total_trials, batch_size)
        self.scheduler = schedulers.create(scheduler)
        self.states = [TaskState(task, 0, make_strategy()) for task in tasks]
        self.work_dir = work_dir
        self.measurer = measurer
        self.batch_size = batch_size
        self.seed = seed
        self.callbacks = list(callbacks)
        self.deadline = deadline
        self.ms_cost_model = None
        self.warm_start = warm_start
        self.pretrained = pretrained

    @property
    def out_of_time(self) -> bool:
        """Past the wall-clock ``deadline`` (``time.monotonic()``), when one was given."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def run(self) -> list[TaskState]:
        journal = list(self.work_dir.journal())
        for state in self.states:
            entries = [e for e in journal if e["task"] == state.task.workload_key]
            self.guarded(state, lambda state=state, entries=entries: self.restore(state, entries))
        while not self.out_of_time and (granted := self.scheduler.grant(self.states, self.total_trials,
                                                                        self.batch_size)):  # fmt: skip
            state, trials = granted
            state.budget = state.trials + trials
            self.run_batch(state)
            state.budget = state.trials  # a grant the batch did not use (adaptive sampling) goes back
        return self.states

    def shared_ms_cost_model(self):
        """MetaSchedule's XGB model, shared across tasks as MetaSchedule does; trains from the same
        number of samples as the knob model so no strategy ranks on noise longer than another."""
        if self.ms_cost_model is None:
            from tvm.s_tir.meta_schedule.cost_model import XGBModel

            self.ms_cost_model = XGBModel(num_warmup_samples=MIN_TRAINING_SAMPLES, verbose_eval=0)
        return self.ms_cost_model

    def context_for(self, state: TaskState) -> SearchContext:
        from tvm.s_tir import meta_schedule as ms

        if state.context is None:
            load_tensor_intrinsics(state.task.target)
            task = state.task
            tune_context = ms.TuneContext(
                mod=task.mod,
                target=task.target,
                space_generator="post-order-apply",
                task_name=task.name,
                num_threads="physical",
                rand_state=self.seed,
            )
            space = KnobSpace.for_task(tune_context)
            prior = self.prior_for(space)
            state.warm_start_samples = len(prior) if prior is not None else 0
            bound, state.cost_model = self.bind_prior(space, task)
            cost_model = KnobXGB(space, self.seed, prior, bound)
            native = bound is None or not getattr(state.strategy, "uses_ms_cost_model", False)
            ms_cost_model = self.shared_ms_cost_model() if native else knob_model_for_metaschedule(cost_model)
            state.context = SearchContext(task=task, tune_context=tune_context, space=space, cost_model=cost_model,
                                          database=self.work_dir.database, ms_cost_model=ms_cost_model,
                                          seed=self.seed)  # fmt: skip
        return state.context

    def bind_prior(self, space: KnobSpace, task: Task) -> tuple[TaskPrior | None, str]:
        """The pretrained prior for one task and its name; a task whose space the portable features cannot
        describe is tuned cold, with the reason, rather than skipped."""
        if self.pretrained is None:
            return None, "cold"
        try:
            return self.pretrained.bind(space, task.flops), self.pretrained.name
        except (ValueError, IndexError, SyntaxError) as error:
            return None, f"cold (the pretrained features do not fit this task: {first_line(error)})"

    def prior_for(self, space: KnobSpace) -> Prior | None:
        """Measurements of earlier work directories' tasks shaped like this one (``--warm-start``)."""
        return self.warm_start.prior_for(space) if self.warm_start is not None else None

    def restore(self, state: TaskState, entries: list[dict]) -> None:
        """Rebuild a task's progress from the journal: counts, best, history, cost models."""
        if not entries:
            return
        context = self.context_for(state)
        configs, seconds = [], []
        for entry in entries:
            value = entry["seconds"] if entry["status"] == "ok" else None
            self.count(state, entry["status"], value, entry.get("error"))
            context.measured[entry["key"]] = value if value is not None else math.inf
            config = tuple(entry["config"]) if entry.get("config") is not None else None
            if config is not None and context.space.contains(config):
                context.measured_configs[config] = value if value is not None else math.inf
                configs.append(config)
                seconds.append(value)
            state.elapsed_seconds = max(state.elapsed_seconds, entry.get("elapsed", 0.0))
            state.history.append(
                {"trial": state.trials, "elapsed": state.elapsed_seconds, "best_ms": state.best_seconds * 1e3}
            )
        state.resumed = state.trials
        state.budget = state.trials
        state.batch_bests = [h["best_ms"] / 1e3 for h in state.history[self.batch_size - 1 :: self.batch_size]]
        if state.trials % self.batch_size:
            state.batch_bests.append(state.best_seconds)
        context.cost_model.update(configs, seconds)
        if getattr(state.strategy, "uses_ms_cost_model", False):
            self.restore_ms_cost_model(context)
        self.prepare(state)

    def prepare(self, state: TaskState) -> None:
        """Start the task's strategy, from its own saved agent (resume) or a warm-start one when there is."""
        context = self.context_for(state)
        state.strategy.prepare(context)
        saved = load_agent(agent_path(self.work_dir.path, state.task.workload_key))
        if saved is not None and saved["strategy"] == state.strategy.name:
            state.strategy.load_agent_state(saved["state"])
        elif self.warm_start is not None and (agent := self.warm_start.agent_for(context.space, state.strategy.name)):
            state.strategy.load_agent_state(agent)

    def restore_ms_cost_model(self, context: SearchContext) -> None:
        from tvm.s_tir import meta_schedule as ms

        database = context.database
        workload = database.commit_workload(context.task.mod)
        records = database.get_top_k(workload, 1 << 20)
        if records:
            candidates = [record.as_measure_candidate() for record in records]
            results = [ms.runner.RunnerResult([float(s) for s in record.run_secs], None) for record in records]
            context.ms_cost_model.update(context.tune_context, candidates, results)

    def count(self, state: TaskState, status: str, seconds: float | None, error: str | None) -> None:
        state.trials += 1
        state.statuses[status] += 1
        if error:
            state.errors[error] += 1
        if seconds is not None:
            state.best_seconds = min(state.best_seconds, seconds)

    def guarded(self, state: TaskState, step: Callable[[], None]) -> bool:
        """Run ``step`` (building or replaying the task's design space); a task TVM cannot schedule is skipped
        with the reason (the rest are tuned), never fatal. Whether the step ran."""
        try:
            step()
        except Exception as error:  # TVM's ScheduleError and kin: one task's space, not the run
            state.skipped, state.exhausted = first_line(error), True
            self.notify(state)
            return False
        return True

    def run_batch(self, state: TaskState) -> None:
        if (state.context is None or state.strategy.context is None) and not self.guarded(
                state, lambda: self.prepare(state)):  # fmt: skip
            return
        started = time.perf_counter()
        proposals = state.strategy.propose(min(self.batch_size, state.budget - state.trials))
        if not proposals:
            state.exhausted = True
            self.notify(state)
            return
        measure_started = time.perf_counter()
        candidates = [proposal.candidate() for proposal in proposals]
        measurements = self.measurer.measure(candidates, deadline=self.deadline)
        state.measure_seconds += time.perf_counter() - measure_started
        kept = [index for index, measurement in enumerate(measurements) if measurement.status not in UNMEASURED]
        unmeasured = Counter(measurement.status for measurement in measurements)
        state.device_lost += unmeasured[DEVICE_LOST]
        state.not_run += unmeasured[NOT_RUN]
        if measurements and unmeasured[DEVICE_LOST] == len(measurements):
            raise RlcompileError("every candidate of a batch lost its remote device, in every retry: no RPC server "
                                 "is left to measure on; what was measured is saved, so start a server and run "
                                 "again to resume")  # fmt: skip
        proposals, candidates, measurements = ([items[i] for i in kept] for items in (proposals, candidates,
                                                                                       measurements))  # fmt: skip
        if proposals:
            self.record(state, proposals, candidates, measurements, started)
            state.strategy.observe(proposals, measurements)
            if (agent := state.strategy.agent_state()) is not None:
                save_agent(self.work_dir.path, state.task.workload_key, state.context.space, state.strategy.name,
                           state.trials, agent)  # fmt: skip
        state.batch_bests.append(state.best_seconds)
        self.notify(state)

    def record(self, state: TaskState, proposals: list[Proposal], candidates: list, measurements: list[Measurement],
               started: float) -> None:  # fmt: skip
        """Journal, database, counters and cost models, in that order (the journal is the resume point)."""
        from tvm.s_tir import meta_schedule as ms

        context = state.context
        batch_elapsed = time.perf_counter() - started
        finished_at = time.time()
        entries = []
        for index, (proposal, measurement) in enumerate(zip(proposals, measurements, strict=True)):
            self.count(state, measurement.status, measurement.seconds, measurement.error)
            elapsed = state.elapsed_seconds + batch_elapsed * (index + 1) / len(proposals)
            state.history.append({"trial": state.trials, "elapsed": elapsed, "best_ms": state.best_seconds * 1e3})
            context.measured[proposal.key] = measurement.seconds if measurement.ok else math.inf
            if proposal.config is not None:
                context.measured_configs[proposal.config] = measurement.seconds if measurement.ok else math.inf
            entries.append({
                "task": state.task.workload_key, "task_name": state.task.name, "key": proposal.key,
                "config": list(proposal.config) if proposal.config is not None else None,
                "status": measurement.status, "seconds": measurement.seconds, "error": measurement.error,
                "strategy": state.strategy.name, "elapsed": elapsed, "at": round(finished_at, 3),
            })  # fmt: skip
        state.elapsed_seconds += batch_elapsed
        workload = context.database.commit_workload(state.task.mod)
        for proposal, candidate, measurement in zip(proposals, candidates, measurements, strict=True):
            if measurement.ok:
                record = ms.database.TuningRecord(
                    proposal.schedule.trace, workload, [measurement.seconds], state.task.target, candidate.args_info
                )
                context.database.commit_tuning_record(record)
        self.work_dir.append(entries)
        context.cost_model.update([p.config for p in proposals], [m.seconds if m.ok else None for m in measurements])
        if getattr(state.strategy, "uses_ms_cost_model", False):
            results = [ms.runner.RunnerResult([m.seconds] if m.ok else None, None if m.ok else m.error)
                       for m in measurements]  # fmt: skip
            context.ms_cost_model.update(context.tune_context, candidates, results)

    def notify(self, state: TaskState) -> None:
        for callback in self.callbacks:
            callback(state)


def knob_model_for_metaschedule(cost_model: KnobXGB):
    """The knob cost model (pretrained prior included) behind MetaSchedule's cost-model interface, so
    MetaSchedule's evolutionary search ranks with it. It learns through the tuner's own updates, so its
    ``update`` does nothing; a candidate whose configuration cannot be read back ranks last."""
    import numpy as np
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.cost_model import PyCostModel

    @derived_object
    class KnobCostModel(PyCostModel):
        def load(self, path: str) -> None:
            pass

        def save(self, path: str) -> None:
            pass

        def update(self, context, candidates, results) -> None:
            pass

        def predict(self, context, candidates) -> np.ndarray:
            configs = [cost_model.space.from_schedule(candidate.sch) for candidate in candidates]
            known = [i for i, config in enumerate(configs) if config is not None]
            scores = np.full(len(candidates), -1.0, dtype="float64")
            if known:
                scores[known] = cost_model.predict([configs[i] for i in known])
            return scores

    return KnobCostModel()
