"""Group prices corrected in context: each segment of a measured plan, timed inside the plan's run.

The table prices a fusion group in a library from its standalone time, scaled by one factor per library
(the calibration) and, between libraries, by one factor per pair of libraries (the refining probe). What a
solver picks is where those estimates are most wrong in its favour (the optimiser's curse): a group the table
prices too cheaply in a library attracts the plan. The refining probe therefore times every segment of the
plans it runs, inside those runs (:meth:`~rlcompile.layer.segments.SegmentEngine.run` with a clock), and
corrects the prices of the groups those segments hold (and of every group of their kinds), in exactly the library
that ran them, and the factors of the crossings between libraries they received: a segment that took twice what the
table says makes its groups (or the crossings into it) dearer; the segments of every probe are fitted together
(:func:`fit_group_prices`).
The plans solved on the corrected table then stand or fall by the final measurement, side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from rlcompile.layer.fit import BOUNDARY_SCALE_RANGE, bounded_least_squares, library_boundaries, relative_system
from rlcompile.layer.problem import SelectionProblem
from rlcompile.layer.table import LookupTable, switch_key

#: A segment's correction of its groups' prices stays within this range (of their price, and of their in-context
#: estimate when the calibration moved their library's away from it: :func:`segment_factor_range`).
SEGMENT_FACTOR_RANGE = (0.25, 4.0)
#: Corrections closer to 1 than this are within the probe's noise and not applied.
SEGMENT_FACTOR_DEADBAND = 0.03
#: How weakly each factor is held at 1 (:func:`solve_factors`): enough to decide what the segments leave open.
SEGMENT_PRIOR = 1e-6


@dataclass(frozen=True)
class Drift:
    """How much slower each library runs now than when the table was calibrated: its single-library plan's
    time now over its time then (``default`` for a library with no such pair, the ORT native run's ratio).

    Per library, because a shared machine's slow spells do not slow every library alike: on the 2-core Zen 4
    VM, ONNX Runtime ran ocr-det 2x slower for tens of seconds at a time (its memory-bound operators 2.5-4.5x)
    while OpenVINO ran it within 10% (``benchmarks/machine_state.py``). One factor for all libraries then
    prices an OpenVINO segment at ORT's speed.
    """

    by_library: Mapping[str, float] = field(default_factory=dict)
    default: float = 1.0

    def of(self, library: str) -> float:
        return self.by_library.get(library, self.default)

    def of_plan(self, problem: SelectionProblem, choices: Sequence[int]) -> float:
        """The plan's drift: each library's, weighted by the share of the plan's time the table gives it (each
        step's crossing into a group counted with the group's library)."""
        steps = problem.step_costs(choices)
        total = sum(steps)
        if total <= 0:
            return self.default
        libraries = [problem.options[k][c].primitive for k, c in enumerate(choices)]
        return sum(ms * self.of(library) for ms, library in zip(steps, libraries, strict=True)) / total

    def to_dict(self) -> dict:
        return {"default": self.default, **self.by_library}


def measure_drift(then: Mapping[str, float] | None, now: Mapping[str, float], default: float) -> Drift:
    """The drift of every library measured both ``then`` (the table's single-library plans) and ``now``."""
    then = then or {}
    return Drift({name: now[name] / then[name] for name in now if then.get(name) and now[name] > 0}, default)


@dataclass(frozen=True)
class TimedSegment:
    """One segment of a measured plan: its library, its groups (table indices) and its time in context (its share of
    the plan's median: :func:`~rlcompile.layer.selection.timing.segment_shares`)."""

    library: str
    groups: tuple[int, ...]
    ms: float


def segment_predictions(problem: SelectionProblem, choices: Sequence[int],
                        segments: Sequence[TimedSegment]) -> list[tuple[float, float]]:  # fmt: skip
    """Per segment, what the table says it costs: (its groups' own times, the crossings into it and out to the
    caller). Each crossing is charged to the segment that receives the value, as the segment's clock sees it."""
    steps = problem.step_costs(choices)
    result = []
    for segment in segments:
        own = sum(problem.options[k][choices[k]].ms for k in segment.groups)
        result.append((own, sum(steps[k] for k in segment.groups) - own))
    return result


@dataclass(frozen=True)
class SegmentFit:
    """What the segment clocks correct: factors on (group, library) prices, ``{group: {library: factor}}``, and the
    crossing factors of the pairs of libraries the segments received values across, ``{pair: new factor}``
    (:meth:`~rlcompile.layer.table.LookupTable.boundary_scale`)."""

    group_factors: dict[str, dict[str, float]] = field(default_factory=dict)
    boundary_scales: dict[str, float] = field(default_factory=dict)
    #: what each switch from one domain to another costs where a plan makes it, ms
    #: (:attr:`LookupTable.segment_entry_ms`)
    entry_ms: dict[str, float] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.group_factors or self.boundary_scales or self.entry_ms)


def fit_group_prices(problem: SelectionProblem, plans: Sequence[tuple[Sequence[str], Sequence[TimedSegment]]],
                     drift: Drift = Drift()) -> SegmentFit:  # fmt: skip
    """The factors on (group, library) prices and on the crossings between libraries that make the table predict
    each timed segment.

    ``plans``: each measured plan's assignment (a library per group) and its segments timed in context;
    ``drift``: how much slower each library ran during that measurement than at the table's calibration. Each
    segment is one equation: its groups' prices times their factors, plus the crossings it receives from another
    library (standalone estimates) times their pair's factor, plus entering its library after another one (a cost
    per library, whatever crosses), plus its crossings to and from the caller as they are, make its measurement.
    One factor per kind of group and library (``notes["group_kinds"]``: a transformer's
    repeated layers are one kind; without kinds each group is its own), so a correction reaches every layer of the
    kind, timed or not: one that reached a layer and not its twin would let the solver alternate libraries between
    them on a difference no measurement showed. The factors solve all the equations together, in relative terms
    (bounded least squares, :data:`SEGMENT_FACTOR_RANGE`, the pairs' :data:`~rlcompile.layer.fit.BOUNDARY_SCALE_RANGE`;
    weakly held at their current values, in proportion to their weight, so what nothing tells apart moves alike): a
    kind that two plans time, in segments of different sizes, takes what fits both, and a crossing is priced by the
    segments that receive it, a segment of a few cheap groups behind several crossings pricing little but them.

    Why the crossings here too: fitted on whole plans, one factor per pair took what the plans' group prices got
    wrong. On hf:deit (2-core VM, ``select --budget 60s``) the whole-plan fit set ORT/OpenVINO crossings at 6.5x
    their standalone estimate; the clocks of the plan that crossed there put an OpenVINO segment of three groups
    (0.03 ms) at 1.56 ms for 9.4 ms of crossings predicted, its long OpenVINO segment 0.69x its prices.
    The entry cost: the same kind of group costs more per group in a short segment than in a long one (on
    hf:bert-minilm an ORT segment of three groups took 0.96-4.0 ms for 0.89 ms of groups, and the plans that switch
    every few groups came out 1.2-1.7x their prediction once their kinds were fitted with the long segments), and it
    depends on the library that ran just before, so each ordered switch has its own (:func:`~rlcompile.layer.table.
    switch_key`: on hf:yolos an ORT segment after an OpenVINO one ran 0.7-1.7 ms over its prices, after a PyTorch one
    within them, while one entry cost per library gave ORT 0.18 ms). Group
    factors within :data:`SEGMENT_FACTOR_DEADBAND` of 1, pair factors within it of their current value, and entry
    costs within :data:`SEGMENT_ENTRY_DEADBAND_MS` of theirs are dropped.

    Each plan's segments summed are one more equation (:func:`plan_total`), weighted as the most detailed plan's
    segments together: segment by segment, a plan of 27 short segments has 27 equations to a 2-segment plan's 2, and
    its short segments' kinds decide the factors the long segments share. With each segment weighed the same, on
    hf:bert-minilm a 2-segment plan the probe measured at 9.53 ms was then priced at 6.35 (and measured 9.31 by the
    final contest); 8 of the 35 mixed plans a probe measured were priced more than 15% from that very measurement.
    """
    kinds = problem.table.notes.get("group_kinds") or {}
    layers = problem.table.layers
    kind = [kinds.get(name, name) for name in layers]
    table = problem.table
    rows: list[tuple[dict[tuple[str, ...], float], float, float]] = []  # (ms by unknown, target ms, measured)
    totals: list[tuple[dict[tuple[str, ...], float], float, float]] = []  # one row per plan: its segments' sum
    for assignment, segments in plans:
        choices = problem.choices(assignment)
        first = len(rows)
        for segment, (_, crossings) in zip(segments, segment_predictions(problem, choices, segments), strict=True):
            measured = segment.ms / drift.of(segment.library)
            if not np.isfinite(measured) or measured <= 0:
                continue
            terms: dict[tuple[str, ...], float] = {}
            for k in segment.groups:
                if (ms := problem.options[k][choices[k]].ms) > 0:  # a free group has nothing to scale
                    key = (kind[k], segment.library)
                    terms[key] = terms.get(key, 0.0) + ms
            pairs = library_boundaries(problem, choices, set(segment.groups))
            switch = entered_switch(problem, choices, segment)
            caller = crossings - sum(table.boundary_scale(pair) * ms for pair, ms in pairs.items())
            if switch is not None:
                caller -= table.segment_entry_ms.get(switch, 0.0)
                terms[(ENTRY, switch)] = 1.0
            terms |= {(PAIR, pair): ms for pair, ms in pairs.items() if ms > 0}
            if terms:
                rows.append((terms, measured - caller, measured))
        if len(rows) - first > 1:
            totals.append(plan_total(rows[first:]))
    current = {(tag, key): table.boundary_scale(key) if tag == PAIR else table.segment_entry_ms.get(key, 0.0)
               for terms, _, _ in rows for (tag, key) in terms if tag in (PAIR, ENTRY)}  # fmt: skip
    most = max((len(segments) for _, segments in plans), default=1)
    calibrated = table.notes.get("context_factor") or {}
    ranges = {key: segment_factor_range(calibrated.get(key[1], 1.0))
              for terms, _, _ in rows for key in terms if key[0] not in (PAIR, ENTRY)}  # fmt: skip
    fitted = solve_factors([*rows, *totals], current, [1.0] * len(rows) + [float(most)] * len(totals), ranges)
    factors: dict[str, dict[str, float]] = {}
    for k, name in enumerate(layers):
        for library in table.options[name]:
            factor = fitted.get((kind[k], library), 1.0)
            if abs(factor - 1) > SEGMENT_FACTOR_DEADBAND:
                factors.setdefault(name, {})[library] = factor
    scales = {pair: fitted[(tag, pair)] for (tag, pair), before in current.items()
              if tag == PAIR and abs(fitted[(tag, pair)] / before - 1) > SEGMENT_FACTOR_DEADBAND}  # fmt: skip
    entries = {switch: fitted[(tag, switch)] for (tag, switch), before in current.items()
               if tag == ENTRY and abs(fitted[(tag, switch)] - before) > SEGMENT_ENTRY_DEADBAND_MS}  # fmt: skip
    return SegmentFit(factors, scales, entries)


def segment_factor_range(calibrated: float) -> tuple[float, float]:
    """The range of a (kind, library) correction when the calibration scaled the library's in-context estimates by
    ``calibrated`` (``notes["context_factor"]``): :data:`SEGMENT_FACTOR_RANGE` of the price, widened to reach that
    range of the estimate. The calibration fits a library and its crossings from whole plans, one equation per
    plan, and can split one plan's time wrongly between them: on hf:mobilevit (a profile cut short) it put
    PyTorch's groups at ``FACTOR_RANGE``'s floor, 0.1, and a torch-to-ORT crossing at 38 ms; the segment clocks then
    timed PyTorch's 86 groups at 43.6 ms for 1.6 ms of prices, and a correction of at most 4x left a plan of 41 of
    them priced at 14.4 ms for 40-42 measured."""
    low, high = SEGMENT_FACTOR_RANGE
    return low * min(1.0, 1 / calibrated), high * max(1.0, 1 / calibrated)


def plan_total(rows: Sequence[tuple[Mapping[tuple[str, ...], float], float, float]],
               ) -> tuple[dict[tuple[str, ...], float], float, float]:  # fmt: skip
    """One plan's segment equations summed: its whole time as the table prices it, against the sum of its clocks."""
    terms: dict[tuple[str, ...], float] = {}
    for row_terms, _, _ in rows:
        for key, ms in row_terms.items():
            terms[key] = terms.get(key, 0.0) + ms
    return terms, sum(target for _, target, _ in rows), sum(measured for _, _, measured in rows)


def entered_switch(problem: SelectionProblem, choices: Sequence[int], segment: TimedSegment) -> str | None:
    """The switch (:func:`~rlcompile.layer.table.switch_key`) by which ``segment`` enters its domain when the group
    before its first one ran in another (None for a plan's first segment): where
    :meth:`~rlcompile.layer.problem.SelectionProblem.step_cost` charges the entry."""
    first = segment.groups[0]
    layout = problem.options[first][choices[first]].layout
    if first == 0:
        return None
    before = problem.options[first - 1][choices[first - 1]].layout
    return switch_key(before, layout) if problem.enters(first, layout, {first - 1: before}) else None


#: The tags of a pair's crossing factor and of a switch's entry cost among :func:`fit_group_prices`' unknowns (the
#: others are (kind, library)).
PAIR, ENTRY = "|pair|", "|entry|"
#: What a switch into a domain may cost, ms: up to what the 2-core VM measured for an ORT segment of a few groups
#: after an OpenVINO one (3 ms over its groups and crossings, hf:bert-minilm), with room.
SEGMENT_ENTRY_RANGE_MS = (0.0, 5.0)
#: How much more firmly an entry cost is held at the table's than a factor: it takes what segments of different
#: lengths tell apart, not a share of what nothing does (a plan whose segments of a library all ran slow makes its
#: groups dearer).
ENTRY_PRIOR_WEIGHT = 100.0
#: A fitted entry cost this close to the table's is not applied.
SEGMENT_ENTRY_DEADBAND_MS = 0.005


def solve_factors(rows: Sequence[tuple[Mapping[tuple[str, ...], float], float, float]],
                  current: Mapping[tuple[str, ...], float] | None = None,
                  weights: Sequence[float] | None = None,
                  ranges: Mapping[tuple[str, ...], tuple[float, float]] | None = None,
                  ) -> dict[tuple[str, ...], float]:  # fmt: skip
    """The factors x (by key) that best make ``sum(terms[key] * x[key]) == target`` for every (terms, target,
    measured) row, each row's error relative to its measurement (its square times its ``weights`` entry, 1 by
    default); each held at its ``current`` value (1 when it has none) by a prior of weight :data:`SEGMENT_PRIOR`
    times its share of the rows (an entry cost :data:`ENTRY_PRIOR_WEIGHT` times that), within its ``ranges`` entry
    or :data:`SEGMENT_FACTOR_RANGE` (a pair's crossing factor, keyed ``(PAIR, pair)``: within
    :data:`~rlcompile.layer.fit.BOUNDARY_SCALE_RANGE`; a switch's entry cost in ms, keyed ``(ENTRY, switch)``: within
    :data:`SEGMENT_ENTRY_RANGE_MS`)."""
    current = current or {}
    names, matrix, rhs = relative_system(rows)
    if not names:
        return {}
    weight = np.array([ENTRY_PRIOR_WEIGHT if name[0] == ENTRY else 1.0 for name in names])
    held = np.sqrt(SEGMENT_PRIOR * weight * matrix.sum(axis=0))
    if weights is not None:
        scale = np.sqrt(np.asarray(weights, dtype=float))
        matrix, rhs = matrix * scale[:, None], rhs * scale
    start = np.array([current.get(name, 1.0) for name in names])
    bounds = np.array([{PAIR: BOUNDARY_SCALE_RANGE, ENTRY: SEGMENT_ENTRY_RANGE_MS}.get(name[0])
                       or (ranges or {}).get(name, SEGMENT_FACTOR_RANGE) for name in names])  # fmt: skip
    solution = bounded_least_squares(np.vstack([matrix, np.diag(held)]), np.concatenate([rhs, held * start]),
                                     bounds[:, 0], bounds[:, 1])  # fmt: skip
    return {name: float(value) for name, value in zip(names, solution, strict=True)}


def apply_group_prices(problem: SelectionProblem, fit: SegmentFit) -> SelectionProblem:
    """Scale the table's prices by ``fit``'s group factors (recorded, cumulated, in ``notes["segment_factors"]``)
    and set its crossing factors; the problem on the corrected table."""
    table = problem.table
    record = table.notes.setdefault("segment_factors", {})
    for group, by_library in fit.group_factors.items():
        for library, factor in by_library.items():
            table.options[group][library] *= factor
            record.setdefault(group, {})[library] = record.get(group, {}).get(library, 1.0) * factor
    table.boundary_scales = dict(table.boundary_scales) | fit.boundary_scales
    table.segment_entry_ms = dict(table.segment_entry_ms) | fit.entry_ms
    return problem.on(table)


def whole_model_prices(table: LookupTable) -> LookupTable:
    """The table without the in-context corrections: what a single-library plan costs (that library for every
    group it runs, the default library for the rest), as the calibration measured it. A group's price inside a
    short segment of a mixed plan is not its share of the whole model's run (other fusions, other threading), so
    the segment clocks correct the mixed plans' prices and leave the single-library plans' as calibrated."""
    factors = table.notes.get("segment_factors") or {}
    if not factors:
        return table
    options = {group: {library: ms / factors.get(group, {}).get(library, 1.0) for library, ms in by_library.items()}
               for group, by_library in table.options.items()}  # fmt: skip
    return replace(table, options=options)
