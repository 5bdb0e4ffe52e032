"""Where the libraries leave headroom: which tasks are worth tuning, and in what order.

A tuned TVM kernel matters only where it can beat every library on its fusion group: a task whose best
library already runs near this CPU's limit cannot be won, however long it is tuned. The limit is the
roofline of :mod:`rlcompile.peak`: the FMA peak, or for a program that moves many bytes per FLOP (a
depthwise convolution, a matrix-vector product) the measured streaming bandwidth times its FLOPs per byte
(its tensors' sizes: what it must read and write at least once). So before the kernel level spends
measurements, each task's operator (a convolution or a matrix multiplication of the model, found by its
shapes) is timed alone in every library the layer level may choose (ONNX Runtime, OpenVINO, ...), and

    fraction of peak = FLOPs per call / best library time / FMA peak
    fraction of roofline = FLOPs per call / best library time / min(peak, FLOPs / bytes x bandwidth).

The budget goes first to the tasks with the most to win, ``calls x library time x (1 - fraction / reach)``
(``reach``: the fraction of the limit tuned kernels reach, :data:`TVM_REACH`; fraction of the roofline),
and a task whose library is within :data:`MIN_GAIN` of that reach is not tuned at all, with the reason
recorded. Timed alone, a small operator's tensors stay in cache, so a library may pass the streaming
roofline: that too says there is nothing to win. Tasks whose operator has
no library counterpart here (element-wise, pooling, reshapes: memory-bound, their FLOPs say nothing) keep
their place after the measured ones and are tuned in the scheduler's usual order.

An operator timed alone pays the layout reorders at its edges that a library running the whole model pays
once (resnet18's 64x56x56 3x3 convolution: OpenVINO alone 0.87 ms, ORT in the layer table's context
0.56 ms): the estimate errs toward tuning a task, not toward skipping one that had headroom; the layer
level measures every plan anyway.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx

from rlcompile import atomic, runtimes
from rlcompile.events import Event, Listener
from rlcompile.kernel.tasks import Task, param_shapes, unblocked
from rlcompile.machine import cpu_identity
from rlcompile.measure.timing import MeasureConfig, measure_latency
from rlcompile.models.onnx_model import graph_inputs, inferred_values, random_tensor, static_shapes
from rlcompile.peak import Peak, PeakUnknown, fma_peak
from rlcompile.tvm_bridge import tvm

#: The fraction of the FMA peak this project's tuned kernels reach on large convolutions (README: 91-100%
#: on the seed layers L3-L5 after 256 measurements): what tuning can hope for on any task.
TVM_REACH = 0.9
#: A library within this relative gain of :data:`TVM_REACH` leaves too little to win: crossing into a TVM
#: segment and back costs about as much (the layer level's boundary measurements).
MIN_GAIN = 0.10
#: Each operator timed alone: short, since it only orders the tasks.
TIMING = MeasureConfig(warmup=2, min_repeats=5, min_time_s=0.15, max_time_s=2.0, floor_repeats=1)
OPERATORS = ("Conv", "MatMul", "Gemm")
#: Where a tuning work directory keeps the library times (read back by a resumed run).
HEADROOM_FILE = "headroom.json"


@dataclass
class TaskHeadroom:
    """One task's best library, its fraction of the peak, and whether the kernel level tunes it."""

    task: str
    label: str
    calls: int
    flops: float
    library: str | None = None
    library_ms: float | None = None
    fraction_of_peak: float | None = None
    #: the library's GFLOP/s over the roofline's (memory-bound operators: bandwidth x FLOPs per byte)
    fraction_of_roofline: float | None = None
    #: "compute" or "memory": which side of the roofline the operator is on
    bound: str | None = None
    tune: bool = True
    reason: str = "no library counterpart measured: tuned in the usual order"

    @property
    def library_gflops(self) -> float | None:
        return self.flops / self.library_ms / 1e6 if self.library_ms else None

    @property
    def saving_ms(self) -> float:
        """Per inference, the most a tuned kernel at :data:`TVM_REACH` could save over the library."""
        if self.library_ms is None or self.fraction_of_roofline is None:
            return 0.0
        return self.calls * self.library_ms * max(0.0, 1.0 - self.fraction_of_roofline / TVM_REACH)

    def to_dict(self) -> dict:
        return asdict(self) | {"library_gflops": self.library_gflops}


def operator_key(kind: str, shapes: Sequence[Sequence[int]]) -> tuple | None:
    """What identifies a convolution (data, weight, output shapes) or a matrix multiplication (left operand
    and output shapes) across the ONNX graph and a task's PrimFunc; None for any other operator."""
    if any(0 in shape or not shape for shape in shapes):
        return None
    if kind == "conv" and len(shapes) >= 3 and all(len(shape) == 4 for shape in (shapes[0], shapes[1], shapes[-1])):
        return ("conv", tuple(shapes[0]), tuple(shapes[1]), tuple(shapes[-1]))
    if kind == "matmul" and len(shapes) >= 3:
        return ("matmul", tuple(shapes[0]), tuple(shapes[-1]))
    return None


def task_operator_key(task: Task) -> tuple | None:
    kind = task.name.removeprefix("fused_")
    shapes = [shape for shape in param_shapes(task.mod) if shape]  # scalars (a Clip's bounds) are not tensors
    if "conv2d" in kind:
        return operator_key("conv", [unblocked(shape) for shape in shapes])
    if "matmul" in kind or "dense" in kind:
        return operator_key("matmul", shapes)
    return None


def graph_operators(proto: onnx.ModelProto) -> dict[tuple, onnx.ModelProto]:
    """Each distinct convolution and matrix multiplication of a static-shaped graph, as a one-node model."""
    values = inferred_values(proto)
    initializers = {tensor.name: tensor for tensor in proto.graph.initializer}
    shapes = static_shapes(proto, values)

    def shape(name: str) -> list[int]:
        return list(shapes.get(name, ()))  # empty: not static, no operator key

    found: dict[tuple, onnx.ModelProto] = {}
    for node in proto.graph.node:
        if node.op_type not in OPERATORS or node.output[0] not in values:
            continue
        kind = "conv" if node.op_type == "Conv" else "matmul"
        key = operator_key(kind, [shape(node.input[0]), shape(node.input[1]), shape(node.output[0])])
        if key is not None and key not in found:
            found[key] = one_node_model(node, values, initializers, proto)
    return found


def one_node_model(node: onnx.NodeProto, values: Mapping[str, onnx.ValueInfoProto],
                   initializers: Mapping[str, onnx.TensorProto], model: onnx.ModelProto) -> onnx.ModelProto:
    """``node`` alone: its constant inputs kept, its other inputs made graph inputs (the IR and opset versions of
    the ``model`` it comes from)."""
    inputs = [values[name] for name in node.input if name and name not in initializers]
    constants = [initializers[name] for name in node.input if name in initializers]
    graph = onnx.helper.make_graph([node], "operator", inputs, [values[node.output[0]]], constants)
    return onnx.helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)


def time_operator(proto: onnx.ModelProto, library: runtimes.Runtime, threads: int) -> float:
    """Median ms of the one-node model in ``library`` (nan when it cannot run it)."""
    rng = np.random.default_rng(0)
    feeds = [random_tensor(spec, rng) for spec in graph_inputs(proto)]
    try:
        runner = library.compile(proto, runtimes.RuntimeOptions(threads))
        return measure_latency(lambda: runner(feeds), TIMING).median_ms
    except Exception:  # a library that cannot take this operator alone simply has no time for it
        return math.nan


def library_times(proto: onnx.ModelProto, tasks: Sequence[Task], libraries: Sequence[str], threads: int,
                  progress: Listener | None = None) -> dict[str, tuple[str, float]]:  # fmt: skip
    """Each task's fastest library and its median ms on the task's operator alone (tasks without a
    counterpart in the graph are absent)."""
    return times_until(proto, tasks, libraries, threads, progress, deadline=None)[0]


def times_until(proto: onnx.ModelProto, tasks: Sequence[Task], libraries: Sequence[str], threads: int,
                progress: Listener | None, deadline: float | None) -> tuple[dict[str, tuple[str, float]], list[str]]:
    """:func:`library_times` until ``deadline`` (a ``time.monotonic()``; ordering the tasks is worth no more
    than the tuning it orders), and the names of the tasks with a counterpart it did not reach."""
    operators = graph_operators(proto)
    created = {name: runtimes.create(name) for name in libraries}
    created = {name: runtime for name, runtime in created.items() if runtime.unavailable() is None}
    by_key: dict[tuple, tuple[str, float] | None] = {}  # None: no library runs the operator alone
    times: dict[str, tuple[str, float]] = {}
    untimed: list[str] = []
    for task in tasks:
        key = task_operator_key(task)
        if key is None or key not in operators:
            continue
        if key not in by_key:
            if deadline is not None and time.monotonic() >= deadline:
                untimed.append(task.name)
                continue
            timed = {name: time_operator(operators[key], runtime, threads) for name, runtime in created.items()}
            timed = {name: ms for name, ms in timed.items() if math.isfinite(ms)}
            by_key[key] = min(timed.items(), key=lambda item: item[1]) if timed else None
            if progress and (fastest := by_key[key]):
                progress(Event("kernel", f"kernel: {task.label}: {fastest[0]} {fastest[1]:.3f} ms alone"))
        if (fastest := by_key[key]) is not None:
            times[task.name] = fastest
    return times, untimed


def assess(tasks: Sequence[Task], times: Mapping[str, tuple[str, float]], peak: Peak | None) -> list[TaskHeadroom]:
    """Each task's headroom from its best library's time and the peak (in the tasks' order)."""
    rows = []
    for task in tasks:
        row = TaskHeadroom(task=task.name, label=task.label, calls=task.weight, flops=task.flops)
        if task.name in times:
            row.library, row.library_ms = times[task.name]
            if peak is None:
                row.reason = f"{row.library} measured; no FMA peak to judge it against: tuned in the usual order"
            else:
                judge(row, peak, task_bytes(task))
        rows.append(row)
    return rows


def judge(row: TaskHeadroom, peak: Peak, bytes_moved: float) -> None:
    """Fill in ``row``'s fractions of the peak and the roofline and whether it is worth tuning."""
    assert row.library_ms is not None
    seconds = row.library_ms / 1e3
    attainable = peak.attainable_gflops(row.flops, bytes_moved)
    row.fraction_of_peak = peak.fraction(row.flops, seconds)
    row.fraction_of_roofline = row.flops / seconds / 1e9 / attainable
    row.bound = "compute" if attainable >= peak.gflops else "memory"
    row.tune = row.fraction_of_roofline < TVM_REACH / (1 + MIN_GAIN)
    limit = "the FMA peak" if row.bound == "compute" else f"the bandwidth roofline ({attainable:.0f} GFLOP/s)"
    row.reason = (f"{row.library} reaches {row.fraction_of_roofline:.0%} of {limit}"
                  + ("" if row.tune else f"; tuned kernels reach ~{TVM_REACH:.0%}: too little to win"))


def task_bytes(task: Task) -> float:
    """The bytes a task's PrimFunc must read and write at least once: all its tensor parameters."""
    func = next(iter(task.mod.functions.values()))
    total = 0.0
    for param in func.params:
        shape = getattr(param, "shape", None)
        if shape is not None:
            bits = tvm.DataType(str(getattr(param, "dtype", "float32"))).bits
            total += math.prod(int(d) for d in shape) * bits / 8
    return total


def tuning_order(tasks: Sequence[Task], rows: Sequence[TaskHeadroom]) -> tuple[list[Task], dict[str, str]]:
    """The tasks to tune, most to win first (measured ones by :attr:`TaskHeadroom.saving_ms`, then the rest in
    their given order), and the skipped ones with their reason (keyed by task name)."""
    by_name = {row.task: row for row in rows}
    measured = [task for task in tasks if by_name[task.name].fraction_of_roofline is not None]
    unmeasured = [task for task in tasks if by_name[task.name].fraction_of_roofline is None]
    kept = sorted((t for t in measured if by_name[t.name].tune), key=lambda t: -by_name[t.name].saving_ms)
    skipped = {task.name: by_name[task.name].reason for task in measured if not by_name[task.name].tune}
    return kept + unmeasured, skipped


@dataclass
class Headroom:
    """What :func:`measure_headroom` found: the peak (or why there is none) and a row per task."""

    peak_gflops: float | None
    rows: list[TaskHeadroom]
    note: str | None = None
    bandwidth_gbs: float | None = None

    def to_dict(self) -> dict:
        return {"peak_gflops": self.peak_gflops, "bandwidth_gbs": self.bandwidth_gbs, "note": self.note,
                "rows": [row.to_dict() for row in self.rows]}  # fmt: skip


def measure_headroom(proto: onnx.ModelProto, tasks: Sequence[Task], libraries: Sequence[str], threads: int,
                     saved: Path, cache_dir: Path, progress: Listener | None = None,
                     deadline: float | None = None) -> Headroom:  # fmt: skip
    """The peak at ``threads`` (cached per CPU in ``cache_dir``) and each task's best library time until
    ``deadline``, kept in ``saved`` for the same model, libraries, threads and CPU, so a resumed run does not
    time them again (it times only those the deadline left out)."""
    try:
        peak, note = fma_peak(threads, cache_dir), None
    except PeakUnknown as error:
        peak, note = None, f"no FMA peak: {error}"
    key = {"model": hashlib.sha256(proto.SerializeToString()).hexdigest(), "libraries": list(libraries),
           "threads": threads, "cpu": cpu_identity()}  # fmt: skip
    try:
        cached = json.loads(saved.read_text()) if saved.exists() else {}
    except (OSError, ValueError):
        cached = {}
    if cached.get("key") != key:
        cached = {"times": {}, "untimed": [task.name for task in tasks]}
    times = {name: (library, ms) for name, (library, ms) in cached["times"].items()}
    missing = [task for task in tasks if task.name in cached.get("untimed", [])]
    untimed: list[str] = []
    if missing:
        found, untimed = times_until(proto, missing, libraries, threads, progress, deadline)
        times |= found
        atomic.write_json(saved, {"key": key, "times": times, "untimed": untimed}, indent=1)
    rows = assess(tasks, times, peak)
    for row in rows:
        if row.task in untimed:
            row.reason = "not timed in a library before the deadline: tuned in the usual order"
    return Headroom(peak.gflops if peak else None, rows, note, peak.bandwidth_gbs if peak else None)
