"""Segments: maximal runs of consecutive fusion groups that one library runs, compiled as one unit.

A plan gives each fusion group a library. Cutting the groups (in their topological order) wherever
the library changes yields segments; each is extracted as its own ONNX model (its nodes, the constant
nodes and initializers they read, its boundary activations as inputs and outputs) and compiled whole
by its library, so ONNX Runtime's fusions and NCHWc chains, OpenVINO's graph compiler and oneDNN's
fused convolutions all apply inside a segment. Values cross a boundary once, as numpy arrays. The
all-ONNX-Runtime plan is one segment: the model itself, run natively.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx.utils

from rlcompile import runtimes
from rlcompile.layer.groups import FusionGroup, outer_scope_reads
from rlcompile.runtimes import Runner, Runtime, RuntimeOptions


@dataclass
class Segment:
    library: str
    groups: list[int]
    inputs: list[str]
    outputs: list[str]
    proto: onnx.ModelProto | None = field(default=None, repr=False)
    #: the float precision the library computes it in (its int8 parts, if any, are QDQ nodes in ``proto``)
    precision: str = "fp32"


def cut_segments(groups: Sequence[FusionGroup], assignment: Sequence[str],
                 model_outputs: Sequence[str]) -> list[Segment]:  # fmt: skip
    """Consecutive groups with the same library, with the activations each segment reads and writes."""
    if len(assignment) != len(groups):
        raise ValueError(f"plan has {len(assignment)} choices for {len(groups)} groups")
    runs = library_runs(assignment)
    readers: dict[str, set[int]] = {}
    for index, group in enumerate(groups):
        for name in group.inputs:
            readers.setdefault(name, set()).add(index)
    segments = []
    for run in runs:
        members = set(run)
        produced = {name for index in run for name in groups[index].outputs}
        inputs = list(dict.fromkeys(name for index in run for name in groups[index].inputs if name not in produced))
        outputs = [name for index in run for name in groups[index].outputs
                   if name in model_outputs or readers.get(name, set()) - members]  # fmt: skip
        segments.append(Segment(assignment[run[0]], run, inputs, outputs))
    return segments


def library_runs(assignment: Sequence[str]) -> list[list[int]]:
    """The indices of each run of consecutive groups that ``assignment`` gives one library: a plan's segments."""
    runs: list[list[int]] = []
    for index, library in enumerate(assignment):
        if runs and assignment[runs[-1][-1]] == library:
            runs[-1].append(index)
        else:
            runs.append([index])
    return runs


def boundary_values(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict:
    """The values of ``names`` (activations inside the model) for ``feeds``, from one ONNX Runtime run."""
    from rlcompile.runtimes.ort import run_proto

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {value.name for value in probe.graph.output}
    wanted = [name for name in names if name not in known]
    probe.graph.output.extend(onnx.ValueInfoProto(name=name) for name in wanted)
    outputs = [value.name for value in probe.graph.output]
    return dict(zip(outputs, run_proto(probe, feeds), strict=True))


def value_info(name: str, array: np.ndarray) -> onnx.ValueInfoProto:
    element = onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
    return onnx.helper.make_tensor_value_info(name, element, list(array.shape))


class SegmentExtractor:
    """Extracts segments of one model; boundary values get their types from ``examples`` (name -> array)."""

    def __init__(self, model: onnx.ModelProto, examples: Mapping[str, np.ndarray]) -> None:
        typed = onnx.ModelProto()
        typed.CopyFrom(model)
        known = {value.name for value in [*typed.graph.value_info, *typed.graph.input, *typed.graph.output]}
        typed.graph.value_info.extend(value_info(name, np.asarray(array)) for name, array in examples.items()
                                      if name not in known)  # fmt: skip
        self.extractor = onnx.utils.Extractor(typed)
        self.opset_import = list(model.opset_import)
        self.ir_version = model.ir_version
        self.initializers = {init.name: init for init in model.graph.initializer}
        self.nodes = list(model.graph.node)
        self.producer = {name: index for index, node in enumerate(self.nodes) for name in node.output}

    def extract(self, segment: Segment, name: str) -> onnx.ModelProto:
        proto = self.extractor.extract_model(segment.inputs, segment.outputs)
        # onnx's extractor follows node inputs only: the weights an If/Loop body reads by outer-scope name
        # are added here (without them ONNX Runtime refuses the segment)
        self.add_outer_scope_constants(proto)
        proto.graph.name = name
        proto.ir_version = self.ir_version
        del proto.opset_import[:]
        proto.opset_import.extend(self.opset_import)
        return proto

    def add_outer_scope_constants(self, proto: onnx.ModelProto) -> None:
        """The weights and constant nodes that the segment's subgraphs read by outer-scope name."""
        graph = proto.graph
        available = ({init.name for init in graph.initializer} | {value.name for value in graph.input}
                     | {name for node in graph.node for name in node.output})  # fmt: skip
        missing = [name for node in graph.node for name in outer_scope_reads(node) if name not in available]
        needed: set[int] = set()
        while missing:
            name = missing.pop()
            if name in available:
                continue
            available.add(name)
            if name in self.initializers:
                graph.initializer.append(self.initializers[name])
            elif name in self.producer:  # a Constant (or a node over constants) outside the segment
                needed.add(self.producer[name])
                missing.extend(self.nodes[self.producer[name]].input)
        front = [self.nodes[index] for index in sorted(needed)]
        rest = list(graph.node)
        del graph.node[:]
        graph.node.extend([*front, *rest])

    def attach(self, segments: Sequence[Segment], stem: str = "segment") -> None:
        """Give every segment its ONNX model."""
        for index, segment in enumerate(segments):
            segment.proto = self.extract(segment, f"{stem}{index:02d}_{segment.library}")


@dataclass
class CompiledSegment:
    segment: Segment
    runner: Runner
    compile_seconds: float
    #: the intra-op threads it was compiled with (``None``: not recorded, a plan's own count)
    threads: int | None = None


class SegmentEngine:
    """Runs compiled segments in order, passing boundary activations between them as numpy arrays."""

    def __init__(self, compiled: Sequence[CompiledSegment], inputs: Sequence[str], outputs: Sequence[str]) -> None:
        self.compiled = list(compiled)
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        #: one segment computing the model's outputs in order from its inputs: no bookkeeping per call
        #: (it costs microseconds, a tenth of a small model's run)
        self.direct = len(self.compiled) == 1 and self.compiled[0].segment.outputs == self.outputs and (
            self.compiled[0].segment.inputs == self.inputs)
        #: that segment's runner called by input name (:meth:`~rlcompile.runtimes.base.Runner.caller`), else None
        self.call = self.compiled[0].runner.caller(self.inputs) if self.direct else None

    @classmethod
    def compile(cls, segments: Sequence[Segment], inputs: Sequence[str], outputs: Sequence[str], threads: int,
                created: Mapping[str, Runtime] | None = None) -> SegmentEngine:  # fmt: skip
        """Compile every segment with its runtime (``created`` maps names to configured runtimes)."""
        compiled = []
        for segment in segments:
            options = RuntimeOptions(threads, exclusive=len(segments) == 1, precision=segment.precision)
            runtime = (created or {}).get(segment.library) or runtimes.create(segment.library)
            started = time.perf_counter()
            runner = runtime.compile(segment.proto, options)
            compiled.append(CompiledSegment(segment, runner, time.perf_counter() - started, threads))
        return cls(compiled, inputs, outputs)

    @property
    def libraries(self) -> list[str]:
        return [item.segment.library for item in self.compiled]

    def runs_whole(self, proto: onnx.ModelProto) -> bool:
        """Whether this engine is one segment running ``proto`` itself: that library's native run of the model."""
        return len(self.compiled) == 1 and self.compiled[0].segment.proto is proto

    @property
    def wind_down_s(self) -> float:
        """How long its libraries' idle threads spin after a run (a plan of one ONNX Runtime segment runs it
        exclusively; PyTorch's workers spin after each of its segments): what a contest waits after its turn."""
        return max(item.runner.wind_down_s for item in self.compiled)

    def caller(self) -> Callable[[Mapping[str, np.ndarray]], list[np.ndarray]]:
        """:meth:`run` as one callable: the one segment's own call by name where there is one (:attr:`call`)."""
        return self.call or self.run

    def run(self, feeds: Mapping[str, np.ndarray], clock: list[list[float]] | None = None) -> list[np.ndarray]:
        """The model's outputs for ``feeds``. ``clock`` (a list per segment): each segment's seconds in this run,
        its inputs' hand-over included, are appended to its list: what the segment costs in context."""
        if self.call is not None and clock is None:
            return self.call(feeds)
        values = {name: np.asarray(feeds[name]) for name in self.inputs}
        for index, item in enumerate(self.compiled):
            started = time.perf_counter()
            results = item.runner([values[name] for name in item.segment.inputs])
            values.update(zip(item.segment.outputs, results, strict=True))
            if clock is not None:
                clock[index].append(time.perf_counter() - started)
        return [np.asarray(values[name]) for name in self.outputs]
