"""TASO's cost-based backtracking search (Jia et al., SOSP'19; seed 004, Algorithm 2).

A priority queue of graphs ordered by cost. Each step pops the cheapest graph and applies every
rewrite at every location; a new graph (by structural hash) becomes the best if it is cheaper, and is
queued if its cost is below ``alpha`` times the best cost (``alpha`` > 1 lets the search pass through
slightly worse graphs to reach better ones) and it is not more than ``size_cap`` times the original
node count. The search stops when the queue empties, after ``max_steps`` pops, or out of time.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

import onnx_ir as ir

from rlcompile.graph.cost import CostModel
from rlcompile.graph.rules import Rule
from rlcompile.graph.search.base import (
    Clock,
    Evaluated,
    GraphSearch,
    ProgressCallback,
    SearchBudget,
    SearchResult,
    expand,
    graph_key,
)


class TasoSearch(GraphSearch):
    name = "taso"

    def __init__(
        self, budget: SearchBudget | None = None, alpha: float = 1.05, size_cap: float = 2.0, max_queue: int = 1000
    ) -> None:
        super().__init__(budget)
        self.alpha = alpha
        self.size_cap = size_cap
        self.max_queue = max_queue

    def search(
        self, model: ir.Model, rules: Sequence[Rule], cost_model: CostModel, progress: ProgressCallback | None = None
    ) -> SearchResult:
        clock = Clock(self.budget)
        best = Evaluated(model, cost_model.graph_cost(model), ())
        initial = best.cost_ms
        max_nodes = self.size_cap * len(model.graph)
        order = itertools.count()
        queue = [(best.cost_ms, next(order), best)]
        seen = {graph_key(model)}
        steps = evaluated = pruned = 0
        stopped_by = "converged"
        while queue:
            if steps >= self.budget.max_steps or clock.out_of_time():
                stopped_by = "budget" if steps >= self.budget.max_steps else "time"
                break
            _, _, state = heapq.heappop(queue)
            steps += 1
            for _, successor in expand(state, rules, cost_model):
                key = graph_key(successor.model)
                if key in seen:
                    continue
                seen.add(key)
                evaluated += 1
                if successor.cost_ms < best.cost_ms:
                    best = successor
                if successor.cost_ms < self.alpha * best.cost_ms and len(successor.model.graph) <= max_nodes:
                    heapq.heappush(queue, (successor.cost_ms, next(order), successor))
            if len(queue) > self.max_queue:
                pruned += len(queue) - self.max_queue
                queue = heapq.nsmallest(self.max_queue, queue)
            if progress:
                progress(steps, best.cost_ms, evaluated)
        extra = {"alpha": self.alpha, "queue_left": len(queue), "pruned": pruned}
        return SearchResult(
            best.model, initial, best.cost_ms, list(best.history), steps, evaluated, clock.elapsed, stopped_by, extra
        )
