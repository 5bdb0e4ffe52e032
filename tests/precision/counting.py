"""A stand-in evaluator for the searches: plans "measured" by counting, errors from given deviations."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlcompile.measure import LatencyStats
from rlcompile.precision.evaluate import BudgetSpent, Evaluation, Evaluator
from rlcompile.precision.space import Mode, PrecisionPlan, Unit

LENET_INPUT = {"input": ((1, 1, 32, 32), np.dtype(np.float32))}


@dataclass
class CountingEvaluator(Evaluator):
    """A stand-in for a model whose metric counts wrong samples out of 32: one more for each 0.1 of the int8
    units' summed output deviation (so no unit alone changes it); each int8 unit saves 1 ms of 10."""

    deviations: tuple[float, ...] = ()
    #: whether its probe run gives the units' deviations (else it fails, as on a graph the probe cannot copy)
    probed: bool = False
    #: what each unit's int8 kernels save (ms), as a runtime's counters tell; None: unknown, every unit saves 1 ms
    saved: tuple[float, ...] | None = None
    #: the runtime that cannot compile a plan with int8 groups (each such plan fails, as a real compile's would)
    fails_in: str | None = None

    def sensitivity(self, mode: Mode) -> np.ndarray | None:
        return np.array(self.deviations) if self.probed else super().sensitivity(mode)

    def savings(self, mode: Mode) -> np.ndarray | None:
        self.savings_found.setdefault(mode, "no counters" if self.saved is None else np.array(self.saved))
        return None if self.saved is None else np.array(self.saved)

    def screen(self, evaluations: list[Evaluation], deadline: float | None) -> dict:
        return {}  # its brief times are exact: nothing to time in turns

    def __call__(self, plan: PrecisionPlan) -> Evaluation:
        if plan in self.cache:
            return self.cache[plan]
        if self.spent:
            raise BudgetSpent
        if plan.int8 and plan.mode.runtime == self.fails_in:
            self.cache[plan] = Evaluation(plan, failure=f"{self.fails_in} cannot compile the plan")
            self.visited.append(plan)
            return self.cache[plan]
        deviation = float(np.array(self.deviations)[list(plan.int8)].sum())
        ms = 10.0 - (len(plan.int8) if self.saved is None else float(np.array(self.saved)[list(plan.int8)].sum()))
        error = np.floor(deviation / 0.1 + 1e-9) / 32
        latency = LatencyStats(ms, ms, ms, ms, ms, 0.0, 1, 0, (ms,))
        evaluation = Evaluation(plan, error, error, deviation, latency, within=error <= self.tolerance)
        self.cache[plan] = evaluation
        self.visited.append(plan)
        return evaluation


def counting(deviations: list[float], max_evaluations: int = 200, probed: bool = False,
             saved: list[float] | None = None, fails_in: str | None = None) -> CountingEvaluator:  # fmt: skip
    units = [Unit(i, f"g{i}", (f"n{i}",), 1.0) for i in range(len(deviations))]
    return CountingEvaluator(units, None, {}, None, None, [], 0.0, 0.01, 1, max_evaluations=max_evaluations,
                             deviations=tuple(deviations), probed=probed,
                             saved=None if saved is None else tuple(saved), fails_in=fails_in)  # fmt: skip
