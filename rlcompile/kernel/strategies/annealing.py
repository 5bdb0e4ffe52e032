"""Simulated annealing on the cost model, as AutoTVM's XGBTuner does it (the seeds' baseline).

AutoTVM (python/tvm/autotvm/tuner/sa_model_optimizer.py, xgboost_tuner.py): 128 persistent parallel
chains; up to 500 iterations, stopping early when the best-scored set has not changed for 50; a move
sets one random knob to a random other value; a move is accepted with probability
exp(min((new - old) / (t + 1e-5), 1)), the temperature cooling linearly from 1 to 0. The best-scored
unmeasured points form the batch, whose last 5% is replaced by random points (epsilon-greedy). Until the
cost model has been trained, batches are random, as in AutoTVM. With ``sampling="adaptive"`` (the
seeds' "SA + AS") the batch is the k-means centroids of the 64 best-scored points instead.
"""

from __future__ import annotations

import heapq

import numpy as np

from rlcompile.kernel.sampling import PLAN_SIZE, adaptive_sample, check_sampling
from rlcompile.kernel.space import Config, with_knob
from rlcompile.kernel.strategies.base import Proposal, SearchStrategy


class SimulatedAnnealing(SearchStrategy):
    name = "sa"

    def __init__(
        self,
        seed: int = 0,
        chains: int = 128,
        max_iterations: int = 500,
        early_stop: int = 50,
        epsilon: float = 0.05,
        temperature: tuple[float, float] = (1.0, 0.0),
        sampling: str = "greedy",
        candidates: str = "top",
        plan_size: int = PLAN_SIZE,
    ) -> None:
        super().__init__(seed)
        self.sampling, self.candidates, self.plan_size = check_sampling(sampling, candidates, plan_size)
        #: Measurements adaptive sampling asked for per batch (Figure 6).
        self.samples_per_batch: list[int] = []
        self.trajectory: list[Config] = []
        self.chains = chains
        self.max_iterations = max_iterations
        self.early_stop = early_stop
        self.epsilon = epsilon
        self.temperature = temperature
        self.points: list[Config] = []
        #: Iterations each batch's search took until it stopped (the seeds' "search steps", Figure 5).
        self.steps_per_batch: list[int] = []

    def _propose(self, count: int) -> list[Proposal]:
        if not self.model_guided():
            self.stats.steps += 1
            return self.random_proposals(count)
        greedy = max(1, round(count * (1 - self.epsilon)))
        adaptive = self.sampling == "adaptive"
        ranked = self.find_maximums(max(count, greedy, self.plan_size if adaptive else 0))
        if adaptive:
            candidates = ranked if self.candidates == "top" else self.trajectory
            sample = adaptive_sample(self.context.space, candidates, self.context.measured_configs, self.rng,
                                     seed=self.seed)  # fmt: skip
            self.samples_per_batch.append(len(sample.configs))
            return self.realise_sample(sample.configs, ranked, count)
        taken: set[str] = set()
        proposals = self.realise(ranked, greedy, taken)
        return proposals + self.random_proposals(count - len(proposals), taken)

    def find_maximums(self, count: int) -> list[Config]:
        """Anneal the persistent chains; return the ``count`` best-scored unmeasured points, best first."""
        space = self.context.space
        if not self.points:
            self.points = self.random_configs(self.chains)
        points = list(self.points)
        scores = self.predict(points)
        excluded = set(self.context.measured_configs)
        self.trajectory = []
        heap: list[tuple[float, int, Config | None]] = [(-np.inf, -index, None) for index in range(count)]
        in_heap: set[Config] = set()
        start, end = self.temperature
        cooling = (start - end) / (self.max_iterations + 1)
        temperature = start
        iteration = last_change = 0
        while iteration < self.max_iterations and iteration < last_change + self.early_stop:
            new_points = [self.random_walk(point, space.sizes) for point in points]
            new_scores = self.predict(new_points)
            self.trajectory += new_points
            accept = self.rng.random(len(points)) < np.exp(np.minimum((new_scores - scores) / (temperature + 1e-5), 1))
            for index in np.flatnonzero(accept):
                points[index], scores[index] = new_points[index], new_scores[index]
            for score, point in zip(new_scores, new_points, strict=True):
                if score > heap[0][0] and point not in in_heap and point not in excluded:
                    _, _, dropped = heapq.heapreplace(heap, (float(score), iteration, point))
                    in_heap.discard(dropped)
                    in_heap.add(point)
                    last_change = iteration
            iteration += 1
            temperature -= cooling
        self.points = points
        self.stats.steps += iteration
        self.steps_per_batch.append(iteration)
        return [point for _, _, point in sorted(heap, key=lambda item: -item[0]) if point is not None]

    def random_walk(self, config: Config, sizes: np.ndarray) -> Config:
        """Set one random knob (with more than one value) to a random other value."""
        movable = np.flatnonzero(sizes > 1)
        if len(movable) == 0:
            return config
        position = int(self.rng.choice(movable))
        value = int(self.rng.integers(sizes[position] - 1))
        value += value >= config[position]
        return with_knob(config, position, value)
