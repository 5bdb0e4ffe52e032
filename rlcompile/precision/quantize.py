"""int8 per fusion group, as QDQ nodes inside the one model: ONNX Runtime's static quantizer, calibrated once.

The activations' ranges are computed once on the calibration samples (ONNX Runtime's MinMax calibrator,
kept in a cache file, for the tensors every placement may quantize); every plan then quantizes only the
nodes of its int8 groups from that cache, so a search can try many plans without calibrating again.
Weights are per-channel int8 (symmetric), activations uint8; on an x86 CPU without VNNI the weights keep 7
bits (``reduce_range``), as ONNX Runtime advises against saturation. A mixed plan is one QDQ model that one
runtime runs, so it pays no library boundary.

Where the QDQ pairs go depends on the runtime that runs the model (:data:`PLACEMENTS`), since each fuses
them into its int8 kernels differently. Measured on a 2-core Emerald Rapids Xeon (VNNI, no AMX), OpenVINO,
every weighted operator in int8, against ONNX Runtime's usual placement (each quantized operator's output
quantized too): ResNet-18 0.87-0.93x its time, MobileNet-v2 0.74x, PaddleOCR's recogniser 0.75x with a third of
its output error, when only the operators' inputs are quantized, as NNCF places them; ONNX Runtime's own
kernels (QLinearConv) need the outputs quantized and ran the recogniser 1.9x slower without them.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from rlcompile.errors import ModelError, first_line
from rlcompile.layer.groups import name_nodes
from rlcompile.machine import cpu_flags
from rlcompile.precision.keys import keys_quantized_before_swap

#: The operators whose int8 kernels make the speed (a group is a choice when it has one).
QUANTIZED_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
#: Per-channel QuantizeLinear/DequantizeLinear (their ``axis``) exist from this ONNX opset on.
PER_CHANNEL_OPSET = 13


@dataclass(frozen=True)
class Placement:
    """Which of a plan's nodes get QDQ pairs, and where, for one runtime: the operator types quantized (of
    the nodes a plan names), those whose outputs are left in float, whether a pooling node is quantized
    though its input is not yet (its output then shares the input's scale), whether attention's keys are
    quantized before the swap of their last two axes (:func:`keys_quantized_before_swap`), and whether the runtime
    sets the activations' ranges at run time itself where a MatMul's weights are int8 (then a plan with ranges set
    at run time, :data:`DYNAMIC`, writes only the weights in int8: :func:`quantize_weights`); the operator types it
    quantizes with ranges set at run time."""

    op_types: frozenset[str]
    float_outputs: frozenset[str] = frozenset()
    force_pooling: bool = False
    keys_before_swap: bool = False
    sets_ranges_itself: bool = False
    dynamic_ops: tuple[str, ...] = ("MatMul", "Gemm")

    def options(self, overrides: dict[str, list[dict]] | None = None) -> dict:
        """ONNX Runtime's ``quantize_static`` arguments for this placement, with per-tensor ``overrides``
        (:func:`attention_overrides`)."""
        extra = {"WeightSymmetric": True, "ActivationSymmetric": False,
                 "OpTypesToExcludeOutputQuantization": sorted(self.float_outputs),
                 "ForceQuantizeNoInputCheck": self.force_pooling, "TensorQuantOverrides": overrides or {}}  # fmt: skip
        return {"op_types_to_quantize": sorted(self.op_types), "extra_options": extra}


#: ONNX Runtime fuses DequantizeLinear -> Conv/MatMul -> QuantizeLinear into its QLinear kernels, so each
#: operator's output is quantized, and a Relu or Clip right after one is folded into that output's range.
ORT_PLACEMENT = Placement(QUANTIZED_OPS | {"Relu", "Clip"})
#: OpenVINO fuses an activation, a residual Add and the next operator's quantization into an int8
#: convolution: only the inputs are quantized (a residual Add's both inputs), and max pooling runs in int8. A MatMul
#: whose weights alone are int8 it runs with its activations quantized as they come (its dynamic quantization, in
#: groups of 32 along the reduced axis).
OPENVINO_PLACEMENT = Placement(QUANTIZED_OPS | {"Add", "MaxPool"}, QUANTIZED_OPS | {"Add"}, force_pooling=True,
                               keys_before_swap=True, sets_ranges_itself=True, dynamic_ops=("MatMul",))
PLACEMENTS = {"ort": ORT_PLACEMENT, "openvino": OPENVINO_PLACEMENT}
#: How the activations' ranges are set from the calibration samples: ONNX Runtime's calibrators by name, with their
#: options (``percentile``: the range covers 99.999% of the values seen, clipping rare outliers; ``entropy``: the
#: threshold of least KL divergence over 2048 bins, as TensorRT does; ORT's default of 128 bins leaves one threshold,
#: MinMax's). Entropy is not among the recipes the search measures: on paraphrase-MiniLM-L3-v2 (OpenVINO bf16, all
#: MatMuls int8) its cosine error was 0.00126 with SmoothQuant against MinMax's 0.00094, 0.117 with the attention in
#: int8 too, and its calibration took 30-35 s against MinMax's 1-3 s.
CALIBRATION_METHODS = {"minmax": ("MinMax", {}), "percentile": ("Percentile", {"percentile": 99.999}),
                       "entropy": ("Entropy", {"num_bins": 2048, "num_quantized_bins": 128})}  # fmt: skip
#: Ranges set at run time instead, per call, no calibration: ONNX Runtime's dynamic quantization (DynamicQuantizeLinear
#: before each quantized MatMul or Gemm), or for a runtime that sets them itself (:attr:`Placement.sets_ranges_itself`)
#: the MatMuls' weights in int8.
DYNAMIC = "dynamic"
#: The weights' block along the reduced axis where only they are written in int8 (ONNX Runtime's MatMulNBits, 8
#: bits): OpenVINO's dynamic quantization groups the activations by 32 too. On paraphrase-MiniLM-L3-v2 (OpenVINO bf16,
#: 2-core Zen 5) blocks of 32 gave half the cosine error of one scale per output channel, at the same speed.
WEIGHT_BLOCK = 32
#: A calibrated range beyond this magnitude is a sentinel (an attention mask's lowest-float fill), not an activation:
#: the nodes touching it stay in float.
UNBOUNDED = 1e30
#: The operator types whose tensors are calibrated: those of every placement, so one calibration serves all.
CALIBRATED_OPS = frozenset().union(*(placement.op_types for placement in PLACEMENTS.values()))


def placement_for(runtime: str) -> Placement:
    """The placement ``runtime`` runs fastest (ONNX Runtime's for a runtime without one of its own)."""
    return PLACEMENTS.get(runtime, ORT_PLACEMENT)


def with_per_channel_opset(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model at opset 13 at least (older exports, e.g. Paddle's opset 11/12, cannot hold per-channel QDQ;
    ONNX Runtime's quantizer writes it anyway and the result does not load), converted by onnx's converter, every node
    named: the converter writes a Squeeze's or ReduceSum's axes as a Constant node without a name, and a plan derived
    from the all-int8 model (:func:`derive`) finds its float nodes by name."""
    version = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), PER_CHANNEL_OPSET)
    if version >= PER_CHANNEL_OPSET:
        return proto
    from onnx import version_converter

    try:
        return name_nodes(version_converter.convert_version(proto, PER_CHANNEL_OPSET))
    except Exception as error:  # the converter cannot take every graph: said in one line by the caller
        raise ModelError(f"cannot raise the model from opset {version} to {PER_CHANNEL_OPSET} for int8: "
                         f"{first_line(error)}") from None


def model_constants(proto: onnx.ModelProto) -> set[str]:
    """The names of the model's initializers and ``Constant`` outputs."""
    constants = {tensor.name for tensor in proto.graph.initializer}
    return constants | {out for node in proto.graph.node if node.op_type == "Constant" for out in node.output}


def is_activation_matmul(node: onnx.NodeProto, constants: set[str]) -> bool:
    """Whether ``node`` is a MatMul of two activations (attention's), its second input not a constant."""
    return node.op_type == "MatMul" and len(node.input) > 1 and node.input[1] not in constants


def attention_overrides(proto: onnx.ModelProto, nodes: Iterable[str]) -> dict[str, list[dict]]:
    """ONNX Runtime's per-tensor overrides for the MatMuls of two activations among ``nodes`` (attention's): their
    inputs in symmetric int8, the queries, keys and values being signed (OpenVINO fuses an attention into one int8
    kernel with them so, not with unsigned ranges), but a Softmax's output, whose weights start at 0 and keep the
    default unsigned range."""
    from onnxruntime.quantization import QuantType

    wanted, constants = set(nodes), model_constants(proto)
    producers = {out: node.op_type for node in proto.graph.node for out in node.output}
    return {name: [{"quant_type": QuantType.QInt8, "symmetric": True}] for node in proto.graph.node
            if node.name in wanted and is_activation_matmul(node, constants)
            for name in node.input[:2] if producers.get(name) != "Softmax"}  # fmt: skip


def has_vnni() -> bool:
    """Whether this CPU has an 8-bit dot-product instruction (AVX512-VNNI, AVX-VNNI or AMX-INT8)."""
    return bool(cpu_flags() & {"avx512_vnni", "avx_vnni", "amx_int8"})


def derive(full: onnx.ModelProto, float_proto: onnx.ModelProto, nodes: frozenset[str]) -> onnx.ModelProto | None:
    """``full`` (a QDQ model of ``float_proto``) with only ``nodes`` left in int8, without the quantizer: every other
    node of ``float_proto`` is its float self again (its float inputs; a MatMul whose weights alone were int8 a
    MatMul), and the QDQ nodes and quantized weights that nothing reads any more are dropped. Each node in ``nodes``
    keeps the QDQ inputs ``full`` gave it (the same calibrated scales and weights the quantizer would write: ONNX
    Runtime's quantizer spends seconds per plan quantizing every weight again, channel by channel). ``None`` where
    ``full`` lost a float node or renamed its outputs (ONNX Runtime's placement folds a Relu into the convolution
    before it), or where ``float_proto``'s nodes are not uniquely named: only the quantizer can place that plan."""
    float_nodes = {node.name: node for node in float_proto.graph.node}
    if len(float_nodes) != len(float_proto.graph.node) or "" in float_nodes:
        return None  # a name that is missing or repeated cannot say which node is which
    kept = {node.name: node for node in full.graph.node if node.name in float_nodes}
    if len(kept) != len(float_nodes) or any(list(kept[name].output) != list(node.output)
                                            for name, node in float_nodes.items()):  # fmt: skip
        return None
    model = onnx.ModelProto()
    model.CopyFrom(full)
    separate_shadowed(model.graph, set(float_nodes), float_values(float_proto.graph))
    for node in model.graph.node:
        if node.name in float_nodes and node.name not in nodes:
            node.CopyFrom(float_nodes[node.name])
    drop_unread(model.graph, set(float_nodes))
    present = {tensor.name for tensor in model.graph.initializer}
    read = read_names(model.graph)
    model.graph.initializer.extend(tensor for tensor in float_proto.graph.initializer
                                   if tensor.name in read and tensor.name not in present)  # fmt: skip
    return model


def float_values(graph: onnx.GraphProto) -> set[str]:
    """The names of ``graph``'s inputs, initializers and node outputs."""
    names = {value.name for value in graph.input} | {tensor.name for tensor in graph.initializer}
    return names | {out for node in graph.node for out in node.output}


def separate_shadowed(graph: onnx.GraphProto, float_nodes: set[str], names: set[str]) -> None:
    """Renames the outputs of the quantizer's own nodes that carry a float value's name (a quantized bias is the
    DequantizeLinear of the bias's name), and what reads them, so a float node can read the float value again."""
    renamed = {out: f"{out}/int8" for node in graph.node if node.name not in float_nodes
               for out in node.output if out in names}  # fmt: skip
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name in renamed:
                node.input[index] = renamed[name]
        for index, name in enumerate(node.output):
            if name in renamed:
                node.output[index] = renamed[name]


def read_names(graph: onnx.GraphProto) -> set[str]:
    """Every value name a node of ``graph`` reads, in its subgraphs (If/Loop bodies) too, and its outputs."""
    names = {value.name for value in graph.output}
    for node in graph.node:
        names.update(node.input)
        for attribute in node.attribute:
            for body in [attribute.g, *attribute.graphs]:
                names |= read_names(body)
    return names


def drop_unread(graph: onnx.GraphProto, keep: set[str]) -> None:
    """Removes the nodes not named in ``keep`` whose outputs nothing reads, until none is left, then the
    initializers nothing reads."""
    while True:
        read = read_names(graph)
        unread = [i for i, node in enumerate(graph.node) if node.name not in keep and not set(node.output) & read]
        if not unread:
            break
        for index in reversed(unread):
            del graph.node[index]
    read = read_names(graph)
    for index in reversed(range(len(graph.initializer))):
        if graph.initializer[index].name not in read:
            del graph.initializer[index]


def quantize_weights(proto: onnx.ModelProto, source: Path, target: Path, nodes: Iterable[str]) -> None:
    """Writes ``proto`` (saved in ``source``) to ``target`` with the weights of the MatMuls among ``nodes`` in int8
    (symmetric, a scale per :data:`WEIGHT_BLOCK` along the reduced axis: ONNX Runtime's ``MatMulNBitsQuantizer``),
    their activations in float for the runtime to quantize as they come; the other MatMuls stay float (the quantizer
    takes every MatMul it is not told to leave)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    wanted = set(nodes)
    others = [node.name for node in proto.graph.node if node.op_type == "MatMul" and node.name not in wanted]
    # it logs every node at its own INFO level
    with quieted(logging.getLogger(MatMulNBitsQuantizer.__module__), logging.WARNING):
        quantizer = MatMulNBitsQuantizer(str(source), bits=8, block_size=WEIGHT_BLOCK, is_symmetric=True,
                                         nodes_to_exclude=others)  # fmt: skip
        quantizer.process()
    for node in quantizer.model.model.graph.node:  # named as the MatMul it replaces, as a plan names its nodes
        if node.op_type == "MatMulNBits" and node.name.removesuffix("_Q8") in wanted:
            node.name = node.name.removesuffix("_Q8")
    quantizer.model.save_model_to_file(str(target))


def quantized_at_run_time(proto: onnx.ModelProto, nodes: Iterable[str], placement: Placement) -> bool:
    """Whether ``placement``'s runtime sets the ranges at run time for some of ``nodes`` (their operator types among
    its :attr:`~Placement.dynamic_ops`)."""
    wanted = set(nodes)
    return any(node.name in wanted and node.op_type in placement.dynamic_ops for node in proto.graph.node)


@contextlib.contextmanager
def quieted(log: logging.Logger, level: int) -> Iterator[None]:
    """``log`` at ``level`` inside the block, at its own level again after it."""
    before = log.level
    log.setLevel(level)
    try:
        yield
    finally:
        log.setLevel(before)


class SampleReader:
    """ONNX Runtime's calibration reader over a list of feeds."""

    def __init__(self, feeds: Sequence[dict[str, np.ndarray]]) -> None:
        self.feeds = list(feeds)
        self.index = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.index >= len(self.feeds):
            return None
        self.index += 1
        return self.feeds[self.index - 1]

    def __len__(self) -> int:
        return len(self.feeds)


def bounded_histograms(calibrator, unbounded: set[str]):
    """ONNX Runtime's histogram collector for ``calibrator`` (percentile, entropy), less the tensors with a value that
    is not finite or beyond :data:`UNBOUNDED` (their names added to ``unbounded``): an attention mask's fill leaves no
    finite bins to its histogram, and numpy's refusal would fail the whole calibration."""
    from onnxruntime.quantization.calibrate import HistogramCollector

    class BoundedHistograms(HistogramCollector):
        def collect(self, name_to_arr: dict) -> None:
            found = {name for name, arrays in name_to_arr.items()
                     if not all(np.all(np.isfinite(a)) and np.max(np.abs(a), initial=0.0) < UNBOUNDED for a in arrays)}
            unbounded.update(found)
            for name in found:
                self.histogram_dict.pop(name, None)
            return super().collect({name: arrays for name, arrays in name_to_arr.items() if name not in found})

    return BoundedHistograms(method=calibrator.method, symmetric=calibrator.symmetric, num_bins=calibrator.num_bins,
                             num_quantized_bins=calibrator.num_quantized_bins, percentile=calibrator.percentile,
                             scenario=calibrator.scenario)  # fmt: skip


def with_unbounded(data, unbounded: set[str]):
    """``data`` (ONNX Runtime's ``TensorsData``) with an infinite range for each tensor of ``unbounded``: what
    :meth:`Quantizer.unbounded_nodes` reads to keep its readers and writers in float."""
    from onnxruntime.quantization.calibrate import TensorData, TensorsData

    infinite = np.array(np.inf, np.float32)
    ranges = {name: TensorData(lowest=-infinite, highest=infinite) for name in unbounded}
    return TensorsData(data.calibration_method, {**data.data, **ranges})


def cached_values(entry: object) -> list[float]:
    """A bound as ONNX Runtime's calibration cache writes it: an array (``{"data": ...}``, MinMax's both bounds) or a
    bare number (the histogram methods' lowest bound)."""
    found = entry.get("data", [0.0]) if isinstance(entry, dict) else entry
    return [float(value) for value in np.ravel(found)]


class Quantizer:
    """QDQ models of one float model, any set of its nodes in int8, from one calibration."""

    def __init__(self, proto: onnx.ModelProto, calibration: Sequence[dict[str, np.ndarray]],
                 work: Path | None = None, quantizable: Iterable[str] = (),
                 method: str = "minmax") -> None:  # fmt: skip
        self.original = proto
        #: the calibration method (:data:`CALIBRATION_METHODS`)
        self.method = method
        #: every node a plan may quantize: a plan of some of them is derived from the model of all (:func:`derive`)
        self.quantizable = frozenset(quantizable)
        #: why this model cannot be quantized (every int8 plan then fails with it), or None
        self.refusal: str | None = None
        try:
            self.proto = with_per_channel_opset(proto)
        except ModelError as error:
            self.proto, self.refusal = proto, str(error)
        self.calibration = list(calibration)
        self.temporary = tempfile.TemporaryDirectory(prefix="rlcompile-int8-") if work is None else None
        self.work = Path(work or self.temporary.name)
        self.work.mkdir(parents=True, exist_ok=True)
        self.cache = self.work / "calibration.json"
        self.source = self.work / "float.onnx"
        onnx.save(self.proto, str(self.source))
        #: each quantized model's file in ``work``, until :meth:`close`: on disk, not in memory, since a search
        #: visits tens of plans, each with its own copy of the weights (BERT-base's: over 100 MB)
        self.models: dict[tuple[Placement, frozenset[str]], Path] = {}
        self.calibrated = False
        #: the nodes that stay in float whatever a plan asks (:meth:`bounded`), found when calibrated
        self.unbounded: frozenset[str] = frozenset()

    def quantized(self, nodes: Iterable[str], placement: Placement = ORT_PLACEMENT) -> onnx.ModelProto:
        """The model with ``nodes`` (ONNX node names; those of the placement's operator types) in int8, QDQ
        pairs where ``placement`` puts them; the float model when there are none."""
        key = frozenset(nodes)
        if not key:
            return self.original
        model = onnx.load(str(self.model_file(key, placement)))
        return keys_quantized_before_swap(model) if placement.keys_before_swap else model

    def model_file(self, key: frozenset[str], placement: Placement) -> Path:
        """The file of the QDQ model with ``key`` in int8 as the quantizer places them (before any rewrite of
        :meth:`quantized`: a plan derived from the model of all needs that model's QDQ nodes where the quantizer put
        them), made on first use."""
        if (placement, key) not in self.models:
            derived = None
            if key < self.quantizable:
                derived = derive(onnx.load(str(self.model_file(self.quantizable, placement))), self.proto, key)
            target = self.work / f"int8-{len(self.models)}.onnx"  # after the model of all took its own
            if derived is None:
                self.quantize(sorted(key), placement, target)
            else:
                onnx.save(derived, str(target))
            self.models[placement, key] = target
        return self.models[placement, key]

    def calibrate(self) -> None:
        """The ranges of every tensor of :data:`CALIBRATED_OPS`'s nodes on the calibration samples (by
        :attr:`method`), written to
        the cache that every quantization reads (a cache left in ``work`` by an earlier run is replaced)."""
        from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator, save_tensors_data

        with tempfile.TemporaryDirectory(prefix="rlcompile-calibrate-") as folder:
            name, options = CALIBRATION_METHODS[self.method]
            calibrator = create_calibrator(self.source, sorted(CALIBRATED_OPS),
                                           augmented_model_path=str(Path(folder) / "augmented.onnx"),
                                           calibrate_method=CalibrationMethod[name], extra_options=options)  # fmt: skip
            unbounded = set()
            if name != "MinMax":
                calibrator.collector = bounded_histograms(calibrator, unbounded)
            with contextlib.redirect_stdout(io.StringIO()):  # the histogram calibrators print their progress
                calibrator.collect_data(SampleReader(self.calibration))
                save_tensors_data(with_unbounded(calibrator.compute_data(), unbounded), self.cache)
        self.unbounded = self.unbounded_nodes()
        self.calibrated = True

    def quantize(self, nodes: list[str], placement: Placement, target: Path) -> None:
        """Writes the model with ``nodes`` in int8, placed by ``placement``, to ``target`` (with ranges set at run
        time, :data:`DYNAMIC`, the MatMuls and Gemms among them, or only the MatMuls' weights where the placement's
        runtime sets the ranges itself)."""
        from onnxruntime.quantization import (
            CalibrationMethod,
            QuantFormat,
            QuantType,
            quantize_dynamic,
            quantize_static,
        )

        if self.refusal is not None:
            raise ModelError(self.refusal)
        # ORT's advice to pre-process goes to the root logger; a tensor that is always zero (a token-type embedding)
        # makes ORT divide 0 by 0 for its zero point, warning on stderr about a value it then does not use
        with quieted(logging.getLogger(), logging.ERROR), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                if self.method == DYNAMIC:
                    if placement.sets_ranges_itself:
                        quantize_weights(self.proto, self.source, target, nodes)
                    else:
                        quantize_dynamic(str(self.source), str(target), weight_type=QuantType.QInt8, per_channel=True,
                                         reduce_range=not has_vnni(), nodes_to_quantize=nodes,
                                         op_types_to_quantize=list(placement.dynamic_ops))  # fmt: skip
                    return
                if not self.calibrated:
                    self.calibrate()
                nodes = self.bounded(nodes)
                if not nodes:
                    onnx.save(self.proto, str(target))
                    return
                quantize_static(str(self.source), str(target), None,
                                quant_format=QuantFormat.QDQ, per_channel=True, reduce_range=not has_vnni(),
                                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, nodes_to_quantize=nodes,
                                calibrate_method=CalibrationMethod[CALIBRATION_METHODS[self.method][0]],
                                calibration_cache_path=str(self.cache),
                                **placement.options(attention_overrides(self.proto, nodes)))  # fmt: skip
            except Exception as error:  # the quantizer on a graph it cannot take: said in one line by the caller
                raise ModelError(f"ONNX Runtime's quantizer cannot quantize this model: {first_line(error)}") from None

    def bounded(self, nodes: list[str]) -> list[str]:
        """``nodes`` less those reading or writing a tensor whose calibrated range is infinite or beyond
        :data:`UNBOUNDED` (an attention mask's fill): its scale would be too, and OpenVINO's compile of such a model
        dies of a floating-point exception (all-MiniLM-L6-v2 with its mask Adds quantized)."""
        return [name for name in nodes if name not in self.unbounded]

    def unbounded_nodes(self) -> frozenset[str]:
        """The nodes reading or writing a tensor whose range in the calibration cache is unbounded."""
        data = json.loads(self.cache.read_text()).get("data", {})
        unbounded = {name for name, ranges in data.items()
                     if not all(np.isfinite(bound) and abs(bound) < UNBOUNDED for key in ("lowest", "highest")
                                for bound in cached_values(ranges.get(key, 0.0)))}  # fmt: skip
        return frozenset(node.name for node in self.proto.graph.node
                         if unbounded.intersection(node.input) or unbounded.intersection(node.output))  # fmt: skip

    def close(self) -> None:
        """Removes the quantized models (the calibration stays in ``work``)."""
        for path in self.models.values():
            path.unlink(missing_ok=True)
        self.models.clear()
        if self.temporary is not None:
            self.temporary.cleanup()
