"""Droplet search: coordinate descent around the best measured configuration.

After Canesche et al.'s droplet search for AutoTVM: measure the neighbourhood of the current best point
(every knob one step up or down), move to the best neighbour when it is faster by more than the
``significance`` margin, otherwise widen the neighbourhood (steps of 2, 3, ...). The published method
decides "faster" with a t-test on repeated runs; here each candidate has one median measurement, so a
relative margin stands in for the test. The cost model orders the neighbours when it is trained.
"""

from __future__ import annotations

import math

from rlcompile.kernel.measurer import Measurement
from rlcompile.kernel.space import Config
from rlcompile.kernel.strategies.base import Proposal, SearchStrategy


class DropletSearch(SearchStrategy):
    name = "droplet"

    def __init__(self, seed: int = 0, significance: float = 0.01, max_radius: int = 4) -> None:
        super().__init__(seed)
        self.significance = significance
        self.max_radius = max_radius
        self.center: Config | None = None
        self.center_seconds = math.inf
        self.radius = 1

    def _propose(self, count: int) -> list[Proposal]:
        self.stats.steps += 1
        if self.center is None:
            self.recenter()
        if self.center is None:
            return self.random_proposals(count)
        while self.radius <= self.max_radius:
            neighbours = [
                c
                for c in self.context.space.neighbours(self.center, self.radius)
                if c not in self.context.measured_configs
            ]
            if self.context.cost_model.trained and neighbours:
                scores = self.predict(neighbours)
                neighbours = [neighbours[i] for i in sorted(range(len(neighbours)), key=lambda i: -scores[i])]
            else:
                self.rng.shuffle(neighbours)
            proposals = self.realise(neighbours, count)
            if proposals:
                return proposals + self.random_proposals(count - len(proposals), {p.key for p in proposals})
            self.radius += 1
        self.radius = 1  # neighbourhood exhausted: restart from random points
        self.center = None
        return self.random_proposals(count)

    def recenter(self) -> None:
        measured = [(s, c) for c, s in self.context.measured_configs.items() if math.isfinite(s)]
        if measured:
            self.center_seconds, self.center = min(measured)

    def observe(self, proposals: list[Proposal], measurements: list[Measurement]) -> None:
        best = min(((m.seconds, p.config) for p, m in zip(proposals, measurements, strict=True)
                    if m.ok and p.config is not None), default=None)  # fmt: skip
        if best is not None and best[0] < self.center_seconds * (1 - self.significance):
            self.center_seconds, self.center = best
            self.radius = 1
        elif self.center is not None:
            self.radius += 1
