"""One fit of the table to every measured plan: a factor per library on its groups' prices and a factor per pair of
libraries on the cost of crossing between them, together.

A measured plan is one equation: its time (at the table's speed) is the sum, over the libraries it uses, of that
library's factor times its groups' prices, plus, over the pairs of libraries it crosses between, the pair's factor
times those crossings' standalone cost, plus its crossings to and from the caller. Fitted apart, the two kinds of
factor contradict each other: a single-library plan that falls back to ONNX Runtime between its groups crosses
between two libraries at every fall-back (PyTorch's single-library plan of hf:mobilenet-v2: 35 segments), and when
its crossings are priced too high no factor on the library's groups can make up for them: the calibration clipped
PyTorch's at its floor and the table still priced the plan at 305 ms for 70 ms measured (2-core VM), and the
crossings' fit, which left single-library plans out, never saw the plan that prices them best. Fitted together, each
plan's error is shared by what it measures.

Least squares on relative errors (each plan weighted by its own time), each factor held weakly at its current value
(:data:`PRIOR`, relative to how much it weighs in the plans), within its range (the exact bounded optimum:
:func:`bounded_least_squares`).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from rlcompile.layer.problem import SelectionProblem
from rlcompile.layer.table import LookupTable, pair_key

#: A library's cumulative factor (``notes["context_factor"]``) stays within this range, which only absurd values
#: leave. Measured on the 49 corpus models (``benchmarks/real_world.py``): a library's groups run 1.0-2.5x slower
#: inside its whole-model plan than their standalone times say (cache-hot when timed alone; OpenVINO on
#: bart-encoder about 2.1x, ORT on lenet5 2.5x); the in-context estimates can be far below the standalone times
#: (half a split taken off per boundary tensor): on hf:albert ORT's groups, 20.5 ms standalone, came to ~3.7 ms in
#: context for a 20 ms whole-model run, a factor of ~5.5.
FACTOR_RANGE = (0.1, 10.0)
#: The factor on the crossings between two libraries stays within this range. Lower bounds let the table make
#: crossings nearly free: with 0.05, after two probes whose plans crossed a few times each, the solvers answered
#: with ORT/OpenVINO plans of 19-25 segments that measured 3.2-4.1x their prediction (hf:mobilenet-v2,
#: hf:clip-vision, ``select --budget 60s`` on the 2-core VM).
BOUNDARY_SCALE_RANGE = (0.5, 20.0)
#: How strongly each factor is held at its current value, in proportion to its share of the plans' time: weak, so
#: that one measured plan moves the factors it alone determines, and an undetermined split between a library and its
#: crossings moves each by the same factor (held by the square of its share, a library with a few ms of groups beside
#: a fall-back plan's crossings takes the whole excess as a factor: PyTorch's came out at a bound of FACTOR_RANGE in 7
#: of 32 corpus runs). Its weight: a factor that one plan alone determines is held
#: back by about PRIOR / its share (relative), 0.02% for a crossing of 5% of a plan.
PRIOR = 1e-5


@dataclass(frozen=True)
class PlanFit:
    """Factors to apply: on each library's group prices (relative to now) and each pair's crossing factor (its new
    value, :meth:`~rlcompile.layer.table.LookupTable.boundary_scale`)."""

    library_factors: dict[str, float] = field(default_factory=dict)
    boundary_scales: dict[str, float] = field(default_factory=dict)


def library_boundaries(problem: SelectionProblem, choices: Sequence[int],
                       consumers: Collection[int] | None = None) -> dict[str, float]:  # fmt: skip
    """The plan's boundary costs between two libraries (not to or from the caller), per pair of libraries
    (:func:`~rlcompile.layer.table.pair_key`), as measured standalone (before the learned factors); ``consumers``:
    only the crossings into these groups (a segment's)."""
    table = problem.table
    totals: dict[str, float] = {}
    for consumer, edges in enumerate(problem.incoming):
        if consumers is not None and consumer not in consumers:
            continue
        target = problem.options[consumer][choices[consumer]].layout
        for edge in edges:
            source = problem.options[edge.producer][choices[edge.producer]].layout if edge.producer >= 0 else None
            if source is not None and source != target:
                key = pair_key(source, target)
                totals[key] = totals.get(key, 0.0) + table.conversion_ms(edge.shape, source, target, scaled=False)
    return totals


def plan_terms(problem: SelectionProblem, assignment: Sequence[str],
               ) -> tuple[dict[str, float], dict[str, float], float]:  # fmt: skip
    """(each library's group prices, each pair's standalone crossings, the rest: crossings to and from the caller)
    of the plan that runs each group in ``assignment``'s library."""
    choices = problem.choices(assignment)
    groups: dict[str, float] = {}
    for k, c in enumerate(choices):
        option = problem.options[k][c]
        groups[option.primitive] = groups.get(option.primitive, 0.0) + option.ms
    crossings = library_boundaries(problem, choices)
    scaled = sum(problem.table.boundary_scale(pair) * ms for pair, ms in crossings.items())
    return groups, crossings, problem.total(choices) - sum(groups.values()) - scaled


def fit_plans(table: LookupTable, plans: Sequence[tuple[SelectionProblem, Sequence[str], float]],
              libraries: bool = True) -> PlanFit:  # fmt: skip
    """The factors that make ``table`` predict each plan's measured milliseconds (at the table's speed).

    ``plans``: (the problem on ``table`` that prices the plan, a library per group, measured ms): a single-library
    plan is priced without the segment clocks' corrections (:func:`~rlcompile.layer.in_context.whole_model_prices`),
    a mixed one with them. ``libraries=False`` keeps the libraries' factors and fits the crossings only (the prices
    the segment clocks corrected are then left as they are). A factor no plan weighs
    (a library no plan uses, a pair none crosses) is not returned.
    """
    cumulative = table.notes.get("context_factor") or {}
    rows = []
    for problem, assignment, measured in plans:
        if not measured > 0 or not np.isfinite(measured):
            continue
        groups, crossings, rest = plan_terms(problem, assignment)
        if not libraries:
            rest += sum(groups.values())
            groups = {}
        rows.append(({f"lib:{name}": ms for name, ms in groups.items() if ms > 0}
                     | {f"pair:{pair}": ms for pair, ms in crossings.items() if ms > 0}, measured - rest, measured))
    names, matrix, rhs = relative_system(rows)
    if not names:
        return PlanFit()
    current, low, high = np.array([bounds(table, name, cumulative) for name in names]).T
    held = np.sqrt(PRIOR * matrix.sum(axis=0))
    solution = bounded_least_squares(np.vstack([matrix, np.diag(held)]), np.concatenate([rhs, held * current]),
                                     low, high)  # fmt: skip
    fit = PlanFit()
    for name, value in zip(names, solution, strict=True):
        kind, key = name.split(":", 1)
        (fit.library_factors if kind == "lib" else fit.boundary_scales)[key] = float(value)
    return fit


def bounds(table: LookupTable, name: str, cumulative: dict[str, float]) -> tuple[float, float, float]:
    """(current value, lowest, highest) of the factor ``name``: ``lib:LIBRARY`` (relative to now, its product with
    the factors applied before within :data:`FACTOR_RANGE`) or ``pair:PAIR`` (:data:`BOUNDARY_SCALE_RANGE`)."""
    kind, key = name.split(":", 1)
    if kind == "lib":
        before = cumulative.get(key, 1.0)
        return 1.0, FACTOR_RANGE[0] / before, FACTOR_RANGE[1] / before
    return table.boundary_scale(key), *BOUNDARY_SCALE_RANGE


def relative_system(rows: Sequence[tuple[Mapping[Hashable, float], float, float]],
                    ) -> tuple[list, np.ndarray, np.ndarray]:  # fmt: skip
    """The unknowns (sorted) and the equations ``matrix @ x = rhs`` of ``rows``: each (terms: milliseconds by
    unknown, target milliseconds, measured milliseconds) one equation ``sum(terms[u] * x[u]) = target``, divided by
    the measurement so that every row's error counts relative to it."""
    names = sorted({name for terms, _, _ in rows for name in terms})
    weights = np.array([1 / measured for _, _, measured in rows])
    matrix = np.array([[terms.get(name, 0.0) for name in names] for terms, _, _ in rows]).reshape(len(rows), len(names))
    return names, matrix * weights[:, None], np.array([target for _, target, _ in rows]) * weights


def bounded_least_squares(matrix: np.ndarray, rhs: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """argmin |matrix x - rhs| with low <= x <= high, exactly (scipy's bounded-variable least squares).

    Not by fixing each variable that leaves its range at the bound it crossed and solving the rest again: a
    variable once fixed was never freed, and with a hundred kinds' factors and a few pairs' (a refit after two
    probes), an early fix sent the rest to their bounds. On hf:clip-vision
    that refit put 131 of 131 factors at a bound and priced a 3-segment plan it had fitted at 8.2 ms at 16.0 (its
    segments' clocks: 8.2 ms; the final contest: 7.8): the exact solution leaves 76 at a bound and every plan within
    10% of its clocks."""
    from scipy.optimize import lsq_linear

    return np.clip(lsq_linear(matrix, rhs, bounds=(low, high), method="bvls").x, low, high)


def apply_fit(table: LookupTable, fit: PlanFit) -> None:
    """Scale each library's group prices by its factor (the product since the in-context estimates kept in
    ``notes["context_factor"]``) and set the pairs' crossing factors."""
    cumulative = table.notes.setdefault("context_factor", {})
    for library, factor in fit.library_factors.items():
        for options in table.options.values():
            if library in options:
                options[library] *= factor
        cumulative[library] = cumulative.get(library, 1.0) * factor
    table.boundary_scales = dict(table.boundary_scales) | fit.boundary_scales
