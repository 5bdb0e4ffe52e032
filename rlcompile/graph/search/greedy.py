"""Greedy rewriting: apply the single best-improving rewrite until none improves the cost."""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from rlcompile.graph.cost import CostModel
from rlcompile.graph.rules import Rule
from rlcompile.graph.search.base import Clock, Evaluated, GraphSearch, ProgressCallback, SearchResult, expand


class GreedySearch(GraphSearch):
    name = "greedy"

    def search(
        self, model: ir.Model, rules: Sequence[Rule], cost_model: CostModel, progress: ProgressCallback | None = None
    ) -> SearchResult:
        clock = Clock(self.budget)
        initial = cost_model.graph_cost(model)
        current = Evaluated(model, initial, ())
        steps = evaluated = 0
        stopped_by = "converged"
        while True:
            if steps >= self.budget.max_steps or clock.out_of_time():
                stopped_by = "budget" if steps >= self.budget.max_steps else "time"
                break
            successors = [state for _, state in expand(current, rules, cost_model)]
            evaluated += len(successors)
            steps += 1
            best = min(successors, key=lambda state: state.cost_ms, default=None)
            if best is None or best.cost_ms >= current.cost_ms:
                break
            current = best
            if progress:
                progress(steps, current.cost_ms, evaluated)
        return SearchResult(
            current.model, initial, current.cost_ms, list(current.history), steps, evaluated, clock.elapsed, stopped_by
        )
