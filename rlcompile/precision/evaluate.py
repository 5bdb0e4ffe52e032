"""Evaluating a precision plan: build it, measure its error on the held-out samples and its latency.

Every search asks the same :class:`Evaluator`, which caches each plan it measured (a search that visits a
plan again pays nothing), counts evaluations against a budget of evaluations and wall time, and records
failures (a plan that does not compile or that gives non-finite outputs) instead of stopping. The error is
the metric averaged over the validation samples, never the calibration ones; a plan is *within* the
contract when its error exceeds the fp32 model's own by at most the tolerance.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx

from rlcompile.errors import first_line
from rlcompile.measure import QUICK, Contender, LatencyStats, MeasureConfig, Settle, measure_latency, run_contest
from rlcompile.precision.contract import (
    Metric,
    MetricError,
    Samples,
    mean_error,
    relative_l2,
    within_tolerance,
)
from rlcompile.precision.quantize import Quantizer, placement_for
from rlcompile.precision.savings import unit_savings
from rlcompile.precision.sensitivity import local_deviations
from rlcompile.precision.space import DEFAULT_RECIPE, Mode, PrecisionPlan, Recipe, Unit
from rlcompile.runtimes import Runner, Runtime, RuntimeOptions

#: Rounds of brief blocks :meth:`Evaluator.screen` times its plans in turns for.
SCREEN_ROUNDS = 3


class BudgetSpent(Exception):
    """The searches' evaluations or time are spent: every search stops and returns what it has."""


@dataclass
class Evaluation:
    """One plan, measured: its error (mean over validation samples), the excess over fp32's own, latency."""

    plan: PrecisionPlan
    error: float = float("nan")
    excess: float = float("nan")
    #: how far its outputs are from fp32's (relative L2, mean over the validation samples): a continuous
    #: measure of what lowering did, where the metric itself is a share of samples that moves in steps
    deviation: float = float("nan")
    latency: LatencyStats | None = None
    within: bool = False
    failure: str | None = None
    seconds: float = 0.0
    #: the median ms when timed in turns with other plans (:meth:`Evaluator.screen`)
    screened_ms: float | None = None

    @property
    def ms(self) -> float:
        return self.latency.median_ms if self.latency else float("inf")

    @property
    def ranking_ms(self) -> float:
        """What the plan is ranked by: its time in turns with the fp32 plans when screened, else the brief one."""
        return self.screened_ms if self.screened_ms is not None else self.ms


def failures(evaluations: Iterable[Evaluation]) -> dict[str, int]:
    """How many plans failed for each reason (a plan that does not compile, or whose outputs are not finite): where
    every plan of a runtime fails alike, the searches lose that runtime, which the user is told."""
    return dict(Counter(e.failure for e in evaluations if e.failure is not None))


@dataclass
class Evaluator:
    """Measures plans of one model against one accuracy contract, each at most once."""

    units: list[Unit]
    #: the default recipe's quantizer; another recipe's comes from ``quantizers`` (:meth:`quantizer_for`)
    quantizer: Quantizer
    created: Mapping[str, Runtime]
    samples: Samples
    metric: Metric
    reference: list[list[np.ndarray]]
    fp32_error: float
    tolerance: float
    threads: int
    timing: MeasureConfig = QUICK
    #: the grouped model the plans lower (its inputs and outputs are the plans'); units index its groups
    grouped: object = None
    max_evaluations: int = 200
    deadline: float | None = None
    #: when the search running now must stop (its share of the time to ``deadline``; see ``share_time``)
    search_deadline: float | None = None
    cache: dict[PrecisionPlan, Evaluation] = field(default_factory=dict)
    #: plans in the order they were first evaluated
    visited: list[PrecisionPlan] = field(default_factory=list)
    #: each runtime's and recipe's units' local deviations (:meth:`sensitivity`), or why the probe failed
    sensitivities: dict[tuple[str, Recipe], np.ndarray | str] = field(default_factory=dict)
    #: each mode's units' measured int8 savings in ms (:meth:`savings`), or why they are not known
    savings_found: dict[Mode, np.ndarray | str] = field(default_factory=dict)
    #: how a recipe's quantizer is made (``None``: only the default recipe can be built), and those made so far
    quantizer_factory: Callable[[Recipe], Quantizer] | None = None
    quantizers: dict[tuple[float, str], Quantizer] = field(default_factory=dict)

    def quantizer_for(self, recipe: Recipe) -> Quantizer:
        """The quantizer of ``recipe``'s float model (smoothed or not) and calibration, made once."""
        key = recipe.quantizer_key
        if key == DEFAULT_RECIPE.quantizer_key:
            return self.quantizer
        if key not in self.quantizers:
            if self.quantizer_factory is None:
                raise ValueError(f"no quantizer for the recipe {recipe.label!r}")
            self.quantizers[key] = self.quantizer_factory(recipe)
        return self.quantizers[key]

    def close(self) -> None:
        """Removes every quantizer's models."""
        for quantizer in [self.quantizer, *self.quantizers.values()]:
            quantizer.close()

    @property
    def spent(self) -> bool:
        now = time.monotonic()
        out_of_time = any(end is not None and now > end for end in (self.deadline, self.search_deadline))
        return len(self.visited) >= self.max_evaluations or out_of_time

    def affords(self, count: int) -> bool:
        """Whether ``count`` more evaluations fit in the evaluation cap and, at the mean time of those so far, before
        the running search's deadline: what decides whether a search can rank groups end to end."""
        if len(self.visited) + count > self.max_evaluations:
            return False
        ends = [end for end in (self.deadline, self.search_deadline) if end is not None]
        seconds = float(np.mean([self.cache[plan].seconds for plan in self.visited])) if self.visited else 0.0
        return not ends or time.monotonic() + count * seconds <= min(ends)

    def share_time(self, searches_left: int) -> None:
        """The next search may use an equal share of the time left to ``deadline`` among ``searches_left``
        searches; what one leaves unused passes to those after it. A search whose every evaluation costs
        seconds (int8 quantisation of a large model) thus cannot leave the last one, the agent's, nothing."""
        if self.deadline is not None:
            now = time.monotonic()
            self.search_deadline = now + max(self.deadline - now, 0.0) / max(searches_left, 1)

    def __call__(self, plan: PrecisionPlan) -> Evaluation:
        """The plan's evaluation (cached); raises :class:`BudgetSpent` when a new one is not allowed."""
        if plan in self.cache:
            return self.cache[plan]
        if self.spent:
            raise BudgetSpent
        started = time.monotonic()
        evaluation = Evaluation(plan)
        try:
            runner = self.compile(plan)
            outputs = [runner.run(self.samples.feeds(sample)) for sample in self.samples.validation]
            if not all(np.all(np.isfinite(o)) for out in outputs for o in out if np.issubdtype(o.dtype, np.floating)):
                raise ValueError("non-finite outputs")
            evaluation.error = mean_error(self.metric, self.samples, self.reference, outputs)
            evaluation.excess = evaluation.error - self.fp32_error
            evaluation.deviation = mean_error(relative_l2, self.samples, self.reference, outputs)
            evaluation.within = within_tolerance(evaluation.excess, self.tolerance)
            evaluation.latency = measure_latency(runner.timer(self.samples.feeds(self.samples.validation[0])),
                                                 self.timing)  # fmt: skip
        except MetricError:
            raise  # the user's metric failed: one line, the search cannot go on without it
        except Exception as error:  # a plan that cannot be built or run is recorded, never fatal
            evaluation.failure = first_line(error)
        evaluation.seconds = time.monotonic() - started
        self.cache[plan] = evaluation
        self.visited.append(plan)
        return evaluation

    def screen(self, evaluations: list[Evaluation], deadline: float | None) -> dict[PrecisionPlan, Runner]:
        """Set each evaluation's :attr:`~Evaluation.screened_ms`: its plan timed in turns with the others
        (:data:`SCREEN_ROUNDS` rounds of brief blocks, ending by ``deadline``); a plan that no longer compiles keeps
        only its brief time. Returns the runners it compiled (a finalist's candidate runs its own).

        The searches time each plan once, briefly, right after it is compiled and run on every held-out sample: on
        the 2-core Zen 4 VM, which runs 1.5-2x slower in spells of tens of seconds, OpenVINO bf16's one block on
        PaddleOCR's recogniser measured 9.15 ms against fp32's 9.14 ms (0.61x fp32 in turns); on a Zen 3 VM,
        OpenVINO's all-int8 recogniser 20.3 ms against fp32's 18.1, and its plans with 2-6 groups in int8
        26-29 ms where in turns they ran 17-19."""
        feeds = self.samples.feeds(self.samples.validation[0])
        contenders, timed, runners = [], {}, {}
        for index, evaluation in enumerate(evaluations):
            try:
                runner = self.compile(evaluation.plan)
            except Exception:  # it ran in the search; its brief time judges it
                continue
            label = f"{index}: {evaluation.plan.label(len(self.units))}"  # labels alone repeat (int8 k/n groups)
            contenders.append(Contender.from_timer(label, runner.timed(feeds)))
            timed[label], runners[evaluation.plan] = evaluation, runner
        if len(contenders) < 2:
            return runners
        settle = Settle(max_batches=1, deadline=deadline) if deadline is not None else None
        standings = run_contest(contenders, self.timing, SCREEN_ROUNDS, settle)
        for label, evaluation in timed.items():
            evaluation.screened_ms = standings.median(label)
        return runners

    def sensitivity(self, mode: Mode) -> np.ndarray | None:
        """Each unit's local deviation in ``mode``'s runtime's placement, from one probe run on the calibration
        samples (:mod:`~rlcompile.precision.sensitivity`; cached); ``None`` when the probe cannot run
        (why: :attr:`sensitivities`; the searches then rank end to end). Raises :class:`BudgetSpent` when a new
        probe is not allowed."""

        def probe() -> np.ndarray | str:
            feeds = [self.samples.feeds(sample) for sample in self.samples.calibration]
            found = local_deviations(self.quantizer_for(mode.recipe), self.units, placement_for(mode.runtime), feeds,
                                     mode.recipe)  # fmt: skip
            return found if np.all(np.isfinite(found)) else "non-finite deviations"

        return self.once(self.sensitivities, (mode.runtime, mode.recipe), probe)

    def savings(self, mode: Mode) -> np.ndarray | None:
        """What each unit's int8 kernels save in ``mode`` (ms, from the runtime's counters on the float and the
        all-int8 model in turns: :mod:`~rlcompile.precision.savings`; cached); ``None`` where the runtime
        keeps no counters or they cannot be read (why: :attr:`savings_found`; the searches then lower every
        unit). Raises :class:`BudgetSpent` when a new measurement is not allowed."""

        def measure() -> np.ndarray | str:
            lowered = self.model(PrecisionPlan(mode, frozenset(range(len(self.units)))))
            options = RuntimeOptions(self.threads, exclusive=True, precision=mode.floats)
            found = unit_savings(self.created[mode.runtime], self.quantizer_for(mode.recipe).original, lowered,
                                 self.grouped.groups, self.units, self.samples.feeds(self.samples.validation[0]),
                                 options)  # fmt: skip
            return f"{mode.runtime} keeps no per-kernel counters" if found is None else found

        return self.once(self.savings_found, mode, measure)

    def once(self, store: dict, key: object, compute: Callable[[], np.ndarray | str]) -> np.ndarray | None:
        """``store[key]``, computed by ``compute`` the first time (an array, or why there is none; what it raises is
        kept as why, in one line): the array, or ``None``. Raises :class:`BudgetSpent` when new work is not allowed."""
        if key not in store:
            if self.spent:
                raise BudgetSpent
            try:
                store[key] = compute()
            except Exception as error:  # what the runtime cannot give: the searches go on without it
                store[key] = first_line(error)
        found = store[key]
        return None if isinstance(found, str) else found

    def model(self, plan: PrecisionPlan) -> onnx.ModelProto:
        """The plan's ONNX model: the float model with its int8 units as QDQ nodes, placed for its runtime."""
        recipe = plan.mode.recipe
        nodes = [node for index in plan.int8 for node in self.units[index].quantized(recipe)]
        return self.quantizer_for(recipe).quantized(nodes, placement_for(plan.mode.runtime))

    def compile(self, plan: PrecisionPlan, exclusive: bool = True) -> Runner:
        options = RuntimeOptions(self.threads, exclusive=exclusive, precision=plan.mode.floats)
        return self.created[plan.mode.runtime].compile(self.model(plan), options)

    def best(self, plans: list[PrecisionPlan] | None = None) -> Evaluation | None:
        """The fastest evaluation within the contract (of ``plans``, else of all; of none when ``plans`` is
        empty: a search the budget stopped before its own plans found nothing, whatever others found)."""
        pool = [self.cache[p] for p in (self.visited if plans is None else plans) if p in self.cache]
        within = [e for e in pool if e.within and e.failure is None]
        return min(within, key=lambda e: e.ms) if within else None
