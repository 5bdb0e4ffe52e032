"""The selection problem on a lookup table: what a plan costs, and its exact optimum.

A plan picks one primitive per layer. Its predicted latency is the sum of the chosen primitives' times
plus, on every edge, the time to convert the producer's layout into the consumer's (the model's inputs
arrive and its outputs leave in NCHW), plus entering a domain wherever the plan switches to it (the table's
``segment_entry_ms``, learned in context; none in the per-operator tables). Solvers see layers in
topological order through :class:`SelectionProblem`: ``step_cost(i, choice, layouts)`` is QS-DNN's per-layer
reward (the layer's time plus the conversions paid on its inputs), and the total of a plan is the sum of its step
costs.

:func:`exact` is dynamic programming over the topological order whose state is the layout of every
live activation (produced, not yet consumed by all its readers), and of the layer just taken when entering a
domain has a price: exact for chains, trees and the series-parallel graphs of CNNs, where few activations are
live at once. If the states exceed ``max_states`` it keeps the cheapest ones and says the answer is not proven optimal.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from rlcompile.layer.table import SINK, SOURCE, LookupTable


@dataclass(frozen=True)
class Option:
    primitive: str
    ms: float
    layout: str


@dataclass(frozen=True)
class Incoming:
    producer: int  # index into the layers, -1 for the model input
    shape: tuple[int, ...]


class SelectionProblem:
    def __init__(self, table: LookupTable, allowed: Collection[str] | None = None) -> None:
        self.table = table
        #: the primitives plans may use (all the table's when None; a layer none of them runs keeps the default)
        self.allowed = None if allowed is None else frozenset(allowed)
        self.index = {name: i for i, name in enumerate(table.layers)}
        self.options: list[list[Option]] = []
        for name in table.layers:
            choices = [Option(p, ms, table.layouts[p]) for p, ms in sorted(table.options[name].items())
                       if allowed is None or p in allowed]  # fmt: skip
            self.options.append(choices or [Option(p, ms, table.layouts[p]) for p, ms in table.options[name].items()
                                            if p == table.default])  # fmt: skip
        self.incoming: list[list[Incoming]] = [[] for _ in table.layers]
        self.to_output: list[list[tuple[int, ...]]] = [[] for _ in table.layers]
        self.last_use = [-1] * len(table.layers)
        for edge in table.edges:
            producer = -1 if edge.producer == SOURCE else self.index[edge.producer]
            if edge.consumer == SINK:
                self.to_output[producer].append(edge.shape)
                continue
            consumer = self.index[edge.consumer]
            self.incoming[consumer].append(Incoming(producer, edge.shape))
            if producer >= 0:
                self.last_use[producer] = max(self.last_use[producer], consumer)

    def __len__(self) -> int:
        return len(self.options)

    def primitives(self) -> list[str]:
        """The table's primitives that plans may use."""
        return [name for name in self.table.layouts if self.allowed is None or name in self.allowed]

    def libraries(self) -> list[str]:
        """The libraries that plans may use."""
        return sorted({name.split(":")[0] for name in self.primitives()})

    def on(self, table: LookupTable) -> SelectionProblem:
        """This problem, the same primitives allowed, on ``table`` (a corrected table)."""
        return SelectionProblem(table, self.allowed)

    def without(self, libraries: Collection[str]) -> SelectionProblem:
        """This problem with the primitives of ``libraries`` left out."""
        return SelectionProblem(self.table, [name for name in self.primitives() if name.split(":")[0] not in libraries])

    def step_cost(self, layer: int, choice: int, layout_of: dict[int, str]) -> float:
        """The layer's time plus converting each input (and, for an output layer, its result) as needed, plus
        entering the layer's domain when the layer before it ran in another (a plan's segments are its runs of
        consecutive layers in one domain)."""
        option = self.options[layer][choice]
        cost = option.ms
        if self.enters(layer, option.layout, layout_of):
            cost += self.table.entry_ms(layout_of[layer - 1], option.layout)
        for edge in self.incoming[layer]:
            cost += self.table.conversion_ms(edge.shape, layout_of.get(edge.producer, self.table.host), option.layout)
        for shape in self.to_output[layer]:
            cost += self.table.conversion_ms(shape, option.layout, self.table.host)
        return cost

    def enters(self, layer: int, layout: str, layout_of: Mapping[int, str]) -> bool:
        """Whether ``layer``, run in ``layout``, starts a segment that enters it from another domain: the layer
        before it ran in another (the model's first layer enters from the caller, which the conversions price)."""
        return layer > 0 and layout_of.get(layer - 1, layout) != layout

    def total(self, plan: list[int]) -> float:
        return sum(self.step_costs(plan))

    def step_costs(self, plan: Sequence[int]) -> list[float]:
        """Each layer's :meth:`step_cost` along ``plan``: its time and the conversions paid on its inputs."""
        layout_of: dict[int, str] = {}
        costs = []
        for layer, choice in enumerate(plan):
            costs.append(self.step_cost(layer, choice, layout_of))
            layout_of[layer] = self.options[layer][choice].layout
        return costs

    def names(self, plan: list[int]) -> dict[str, str]:
        return {
            name: self.options[i][c].primitive for i, (name, c) in enumerate(zip(self.table.layers, plan, strict=True))
        }

    def choices(self, names: Sequence[str]) -> list[int]:
        """The option index of each layer's named primitive (the inverse of :meth:`names`)."""
        return [next(i for i, o in enumerate(self.options[k]) if o.primitive == n) for k, n in enumerate(names)]

    def fastest(self, layer: int) -> int:
        return min(range(len(self.options[layer])), key=lambda c: self.options[layer][c].ms)


def idle_libraries(problem: SelectionProblem, band: float) -> dict[str, float]:
    """The libraries the table's optimum does as well without, by what each would gain it (a share of its time).

    Each library but the default is tried, the one whose absence costs the exact optimum least first, each with those
    already left out: it is left out while the optimum without them all costs less than ``band`` more than the
    optimum with every library. A contest cannot tell such a gain from its noise (``band``: the tie band, or the
    calibration's noise when wider: :func:`~rlcompile.layer.selection.pricing.idle_band`), and the
    plans that use the library only add contenders to time; on the 2-core VMs, PyTorch in particular: its share of a
    plan ran 1.4-2.1x slower whenever another program took part of one CPU (``benchmarks/shared_cpu.py``), and its
    plans were the largest class of predictions off by more than 15% over the corpus, while no chosen plan of 90
    ``select`` runs had a PyTorch segment.
    """
    best = exact(problem).total_ms
    if not best > 0:
        return {}
    default = problem.table.default.split(":")[0]
    others = [library for library in problem.libraries() if library != default]
    alone = {library: exact(problem.without([library])).total_ms for library in others}
    left: dict[str, float] = {}
    for library in sorted(alone, key=alone.__getitem__):
        without = exact(problem.without([*left, library])).total_ms if left else alone[library]
        gain = without / best - 1
        if gain < band:
            left[library] = max(0.0, gain)
    return left


def best_within_library(problem: SelectionProblem, library: str) -> tuple[list[int], float]:
    """The optimal plan that uses only ``library`` (and the table's default for the layers it cannot run)."""
    allowed = {name for name in problem.table.layouts if name.split(":")[0] == library} | {problem.table.default}
    restricted = SelectionProblem(problem.table, allowed)
    names = [restricted.options[i][c].primitive for i, c in enumerate(exact(restricted).plan)]
    plan = problem.choices(names)
    return plan, problem.total(plan)


@dataclass
class ExactResult:
    plan: list[int]
    total_ms: float
    proven_optimal: bool
    max_states: int


def exact(problem: SelectionProblem, max_states: int = 4096) -> ExactResult:
    """Minimum-cost plan by dynamic programming over the layouts of the live activations."""
    # state: tuple of (producer, layout) for live producers -> (cost, plan)
    states: dict[tuple, tuple[float, list[int]]] = {(): (0.0, [])}
    proven, widest = True, 1
    for layer in range(len(problem)):
        following: dict[tuple, tuple[float, list[int]]] = {}
        for state, (cost, plan) in states.items():
            layout_of = dict(state)
            for choice, option in enumerate(problem.options[layer]):
                step = problem.step_cost(layer, choice, layout_of)
                live = {producer: kind for producer, kind in state if problem.last_use[producer] > layer}
                if problem.last_use[layer] > layer or problem.table.segment_entry_ms:  # the next layer's entry
                    live[layer] = option.layout
                key = tuple(sorted(live.items()))
                if key not in following or cost + step < following[key][0]:
                    following[key] = (cost + step, [*plan, choice])
        if len(following) > max_states:
            proven = False
            following = dict(sorted(following.items(), key=lambda item: item[1][0])[:max_states])
        widest = max(widest, len(following))
        states = following
    cost, plan = min(states.values(), key=lambda value: value[0])
    return ExactResult(plan, cost, proven, widest)
