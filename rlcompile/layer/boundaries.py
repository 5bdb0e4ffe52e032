"""What splitting a segment costs: the boundary between two libraries timed on probe models of each shape a plan
hands over, and a line by size for the shapes not timed."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx

from rlcompile.errors import first_line
from rlcompile.layer.table import (
    Edge,
    shape_key,
)
from rlcompile.measure import (
    MeasureConfig,
    measure_after,
    measure_latency,
)
from rlcompile.runtimes import RuntimeOptions

#: Alternations per boundary measurement (median of the B calls).
BOUNDARY_REPEATS = 25
#: Past the profile's deadline, at least this many boundary shapes are still measured: a line needs two.
MIN_PRICED = 2
#: Widest last axis a boundary probe multiplies by a square matrix.
PROBE_MAX_WIDTH = 4096
#: Timing of the probes that measure what splitting a segment costs.
BOUNDARY_TIMING = MeasureConfig(warmup=3, min_repeats=15, min_time_s=0.05, max_time_s=2.0, floor_repeats=3)
#: Past the profile's deadline the :data:`MIN_PRICED` boundary shapes still measured take about a quarter of the
#: time (hf:convnext's largest shape: 2.7 s at the full repeats on a slowed 2-core VM, 7.4 s for two shapes).
LATE_BOUNDARY_REPEATS = 7
LATE_BOUNDARY_TIMING = MeasureConfig(warmup=1, min_repeats=5, min_time_s=0.01, max_time_s=0.5, floor_repeats=1)


def probe_model(shape: tuple[int, ...], depth: int) -> onnx.ModelProto:
    """``depth`` chained operators over a float tensor of ``shape`` that keep it and use the thread pool.

    A 1x1 convolution (channels to channels) for 4-D tensors, a square MatMul on the last axis otherwise:
    layout-sensitive and parallel, like the groups on either side of a real boundary. A last axis wider
    than :data:`PROBE_MAX_WIDTH` (a flattened feature map) gets a per-element Mul instead: its square
    weight would not fit in a protobuf.
    """
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    width = shape[1] if len(shape) == 4 else shape[-1]
    if len(shape) == 4:
        op, dims = "Conv", (width, width, 1, 1)
    elif width <= PROBE_MAX_WIDTH:
        op, dims = "MatMul", (width, width)
    else:
        op, dims = "Mul", (width,)
    weight = (rng.standard_normal(dims) / np.sqrt(width)).astype(np.float32)
    names = ["x", *[f"y{i}" for i in range(depth)]]
    nodes = [helper.make_node(op, [names[i], "w"], [names[i + 1]], name=f"probe{i}") for i in range(depth)]
    graph = helper.make_graph(nodes, "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, list(shape))],
                              [numpy_helper.from_array(weight, "w")])  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def handoff_ms(before: Callable[[], object] | None, after: Callable[[], object],
               repeats: int = BOUNDARY_REPEATS) -> float:  # fmt: skip
    """Median time of ``after()`` when it runs right after ``before()`` (warm-up of 3 pairs)."""
    return measure_after(before, after, repeats)


def split_ms(single: Callable[[np.ndarray], object], chain: Callable[[np.ndarray], object], array: np.ndarray,
             timing: MeasureConfig = BOUNDARY_TIMING) -> float:  # fmt: skip
    """What cutting a library's segment at a tensor costs: two one-operator segments minus one of two operators."""
    apart = measure_latency(lambda: single(single(array)[0]), timing).median_ms
    together = measure_latency(lambda: chain(array), timing).median_ms
    return max(0.0, apart - together)


def libraries_meeting(edges: Sequence[Edge], standalone: Mapping[str, Mapping[str, float]]) -> dict[tuple, set[str]]:
    """{shape: the libraries that can run a group on either side of an edge of that shape}.

    Only these need pricing there: where every group beside a shape has one library (the others refused
    it, or the profile was cut before them) no boundary of that shape can be chosen, and only that
    library's split (what the group saves inside a segment) is wanted; the hand-offs, which cost a compiled
    probe per library and a timing per pair, are skipped.
    """
    meeting: dict[tuple, set[str]] = {}
    for edge in edges:
        sides = [standalone.get(edge.producer, {}), standalone.get(edge.consumer, {})]
        meeting.setdefault(edge.shape, set()).update(name for side in sides for name in side)
    return meeting


def time_boundaries(meeting: Mapping[tuple, set[str]], created, threads,
                    deadline: float | None = None) -> tuple[dict[str, dict[str, float]], int]:  # fmt: skip
    """{shape: {"A->B": ms}} for every boundary shape and pair of libraries meeting there (and the caller,
    "host"); ``meeting`` is :func:`libraries_meeting`'s. Returns it and how many shapes were estimated.

    A boundary from A to B costs half of A's split cost (leaving A: call return, layout back to NCHW),
    half of B's (entering B: call, layout in) and the hand-off penalty of B running right after A
    (A's threads still spinning, B's waking up) beyond B running after itself.

    The shapes are measured smallest and largest first, then the sizes between (:func:`spread_order`); past
    ``deadline`` (after :data:`MIN_PRICED` shapes) the shapes left are priced by :func:`fit_by_size` from
    the measured ones: a boundary left unpriced would be free, and the solver would cross libraries for nothing;
    the shapes measured past it are measured with fewer repeats (:data:`LATE_BOUNDARY_TIMING`).
    """
    conversions: dict[str, dict[str, float]] = {}
    rng = np.random.default_rng(0)
    shapes = spread_order(sorted(meeting, key=lambda shape: (int(np.prod(shape)), shape)))
    for index, shape in enumerate(shapes):
        late = deadline is not None and time.monotonic() > deadline
        if late and index >= MIN_PRICED:
            break
        libraries = {name: library for name, library in created.items() if name in meeting[shape]}
        try:
            conversions[shape_key(shape)] = time_boundary(shape, libraries, threads, rng, late)
        except Exception as error:  # a probe a library refuses leaves that boundary unpriced, reported
            conversions[shape_key(shape)] = {"error": first_line(error)}
    left = [shape for shape in shapes if shape_key(shape) not in conversions]
    measured = {shape: conversions[shape_key(shape)] for shape in shapes if shape_key(shape) in conversions}
    for shape in left:
        conversions[shape_key(shape)] = fit_by_size(measured, shape, meeting[shape])
    return conversions, len(left)


def spread_order(items: Sequence) -> list:
    """``items`` (sorted by size) reordered so that any prefix spans their range: first, last, middle, then the
    middles of the halves, and so on."""
    if len(items) <= 2:
        return list(items)
    order = [0, len(items) - 1]
    spans = collections.deque([(1, len(items) - 2)])
    while spans:
        low, high = spans.popleft()
        if low <= high:
            middle = (low + high) // 2
            order.append(middle)
            spans.extend([(low, middle - 1), (middle + 1, high)])
    return [items[i] for i in order]


def fit_by_size(measured: Mapping[tuple, Mapping[str, float]], shape: tuple[int, ...], meeting: set[str],
                ) -> dict[str, float]:  # fmt: skip
    """The entries :func:`time_boundary` would measure for ``shape``, each from a line (ms against elements, never
    below zero) fitted to the measured shapes that have that entry; an entry no measured shape has (two libraries
    never measured together) takes the line of every measured library-to-library hand-off pooled."""
    points: dict[str, list[tuple[float, float]]] = {}
    for other, entries in measured.items():
        for key, ms in entries.items():
            if isinstance(ms, float | int):
                points.setdefault(key, []).append((float(np.prod(other)), float(ms)))
                if "->" in key and "host" not in key:
                    points.setdefault("pair", []).append((float(np.prod(other)), float(ms)))

    def line(key: str) -> float:
        xs, ys = zip(*(points.get(key) or points.get("pair") or [(1.0, 0.0)]), strict=True)
        if len(set(xs)) < 2:
            return max(0.0, float(np.mean(ys)))
        slope, intercept = np.polyfit(xs, ys, 1)
        return max(0.0, float(intercept + slope * np.prod(shape)))

    keys = [f"split:{name}" for name in meeting] + [f"host->{name}" for name in meeting]
    keys += [f"{name}->host" for name in meeting]
    keys += [f"{a}->{b}" for a in meeting for b in meeting if a != b]
    return {key: line(key) for key in keys}


def time_boundary(shape: tuple[int, ...], created, threads: int, rng: np.random.Generator,
                  late: bool = False) -> dict[str, float]:  # fmt: skip
    """The boundary costs of one tensor shape (see :func:`time_boundaries`); ``late``: fewer repeats."""
    timing, repeats = (LATE_BOUNDARY_TIMING, LATE_BOUNDARY_REPEATS) if late else (BOUNDARY_TIMING, BOUNDARY_REPEATS)
    array = rng.standard_normal(shape).astype(np.float32)
    options = RuntimeOptions(threads)
    single = {name: library.compile(probe_model(shape, 1), options) for name, library in created.items()}
    chain = {name: library.compile(probe_model(shape, 2), options) for name, library in created.items()}
    calls = {name: (lambda runner=runner, array=array: runner([array])) for name, runner in single.items()}
    split = {name: split_ms(lambda x, r=single[name]: r([x]), lambda x, r=chain[name]: r([x]), array, timing)
             for name in created}  # fmt: skip
    after_self = {name: handoff_ms(calls[name], calls[name], repeats) for name in created}
    entry = {}
    for target in created:
        entry[f"host->{target}"] = split[target] / 2
        entry[f"{target}->host"] = split[target] / 2
        for source in created:
            if source != target:
                penalty = max(0.0, handoff_ms(calls[source], calls[target], repeats) - after_self[target])
                entry[f"{source}->{target}"] = (split[source] + split[target]) / 2 + penalty
    return entry | {f"split:{name}": ms for name, ms in split.items()}
