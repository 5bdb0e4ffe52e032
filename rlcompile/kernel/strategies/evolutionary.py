"""MetaSchedule's own EvolutionarySearch with its own XGB cost model: the reference strategy.

The TVM object does the search (population 512, 20% from the measured top, 4 genetic iterations,
mutation probability 0.85, 5% epsilon-greedy: MetaSchedule's defaults); this class only adapts it to
the common interface. It reads what has been measured from the shared database, so a resumed run does
not propose finished candidates again.
"""

from __future__ import annotations

from rlcompile.kernel.measurer import Measurement
from rlcompile.kernel.strategies.base import Proposal, SearchContext, SearchStrategy

#: Trials the TVM object is told it may use; the tuner enforces the real budget.
UNBOUNDED_TRIALS = 1 << 30


class EvolutionarySearch(SearchStrategy):
    name = "evolutionary"
    uses_ms_cost_model = True

    def __init__(self, seed: int = 0, population: int = 512, genetic_iterations: int = 4,
                 mutate_probability: float = 0.85, epsilon: float = 0.05) -> None:  # fmt: skip
        super().__init__(seed)
        self.options = {"population_size": population, "genetic_num_iters": genetic_iterations,
                        "genetic_mutate_prob": mutate_probability, "eps_greedy": epsilon}  # fmt: skip
        self.tune_context = None
        self.batch_size = 0
        self.candidates: list = []
        self.candidate_keys: list[str] = []

    def prepare(self, context: SearchContext) -> None:
        super().prepare(context)
        self.tune_context = None  # created at the first proposal, when the batch size is known

    def start(self, batch_size: int) -> None:
        from tvm.s_tir import meta_schedule as ms

        task = self.context.task
        self.tune_context = ms.TuneContext(
            mod=task.mod, target=task.target, space_generator="post-order-apply",
            search_strategy=ms.search_strategy.EvolutionarySearch(**self.options),
            task_name=task.name, num_threads="physical", rand_state=self.seed,
        )  # fmt: skip
        design_spaces = self.tune_context.generate_design_space()
        self.tune_context.pre_tuning(UNBOUNDED_TRIALS, batch_size, design_spaces, self.context.database,
                                     self.context.ms_cost_model)  # fmt: skip
        self.batch_size = batch_size

    def _propose(self, count: int) -> list[Proposal]:
        if self.tune_context is None or count != self.batch_size:
            self.start(count)
        self.stats.steps += 1
        candidates = self.tune_context.generate_measure_candidates() or []
        proposals = [Proposal(c.sch, self.context.space.from_schedule(c.sch)) for c in candidates]
        self.candidates = list(candidates)
        self.candidate_keys = [p.key for p in proposals]
        proposals = [p for p in proposals if not self.context.is_measured(p.key)]
        return proposals[:count]

    def observe(self, proposals: list[Proposal], measurements: list[Measurement]) -> None:
        """Tell the TVM object about every candidate it generated (skipped ones count as failures)."""
        from tvm.s_tir import meta_schedule as ms

        by_key = {p.key: m for p, m in zip(proposals, measurements, strict=True)}
        results = []
        for key in self.candidate_keys:
            measurement = by_key.get(key)
            if measurement is not None and measurement.ok:
                results.append(ms.runner.RunnerResult([measurement.seconds], None))
            else:
                results.append(
                    ms.runner.RunnerResult(None, "not measured" if measurement is None else measurement.error)
                )
        self.tune_context.notify_runner_results(self.candidates, results)
