"""What a graph costs: the sum of per-operator runtimes measured with ONNX Runtime, or the whole graph timed.

:class:`OperatorCostModel` is TASO's cost model on this machine: each operator is timed once per
(op type, input shapes and dtypes, which inputs are constants, attributes) in a one-node ONNX Runtime
session, and the result is kept in a JSON file under the cache directory so later runs (and other
models with the same layers) never time it again. Operators whose inputs are all constants cost
nothing: ONNX Runtime folds them. :class:`MeasuredCostModel` times the whole graph instead
(ORT_ENABLE_ALL); it is exact on this machine and far slower, so searches use the sum and the CLI
reports the measured latency of the result beside it.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort

from rlcompile import atomic
from rlcompile.errors import RlcompileError, check_choice, first_line
from rlcompile.graph import onnx_graph, regions
from rlcompile.graph.regions import operator_key
from rlcompile.machine import cpu_identity, host_cores
from rlcompile.measure import MeasureConfig, measure_latency
from rlcompile.models.zoo import cache_root
from rlcompile.names import GRAPH_COSTS
from rlcompile.runtimes import RuntimeOptions
from rlcompile.runtimes.ort import OrtRuntime

#: Timing of one operator: short, because a zoo model has hundreds of distinct operators.
OPERATOR_TIMING = MeasureConfig(warmup=2, min_repeats=5, min_time_s=0.05, max_time_s=2.0, floor_repeats=3)
_COST = "rlcompile.cost"


class CostModel(ABC):
    """Estimates a graph's latency in milliseconds; lower is better."""

    name: str

    @abstractmethod
    def graph_cost(self, model: ir.Model) -> float: ...

    def save(self) -> None:  # noqa: B027 -- optional hook, most cost models learn nothing
        """Persist whatever was learnt (nothing by default)."""


def feed_for(value: ir.Value, rng: np.random.Generator) -> np.ndarray:
    """A random input of the value's shape; integers are zeros (valid indices), booleans ones."""
    dtype = value.dtype.numpy()
    shape = onnx_graph.static_shape(value)
    if shape is None:  # shape inference left it unknown: the operator cannot be timed alone (it costs 0)
        raise ValueError(f"input {value.name} of the operator has no static shape")
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    return np.ones(shape, dtype) if dtype == np.bool_ else np.zeros(shape, dtype)


def subgraph_with_feeds(nodes: Sequence[ir.Node], opsets: dict[str, int]) -> tuple[onnx.ModelProto, dict]:
    """The nodes alone in a model (:func:`regions.region_model`) and random feeds for its inputs."""
    rng = np.random.default_rng(0)
    proto, external = regions.region_model(nodes, opsets)
    return proto, {name: feed_for(value, rng) for name, value in external.items()}


class OperatorCostModel(CostModel):
    """Sum of per-operator ONNX Runtime runtimes, each measured once and cached on disk."""

    name = "sum"

    def __init__(
        self,
        cache_file: Path | None = None,
        threads: int | None = None,
        timing: MeasureConfig = OPERATOR_TIMING,
        opt_level: str = "all",
    ) -> None:
        self.threads = threads or host_cores()
        self.opt_level = opt_level
        self.timing = timing
        self.cache_file = cache_file or default_cache_file(self.threads, opt_level)
        self.costs: dict[str, float] = self._load()
        self.measured = 0
        self.failures: dict[str, str] = {}
        self._unsaved = 0
        self._meta_key = f"{_COST}:{self.cache_file.name}"

    def _load(self) -> dict[str, float]:
        try:
            return {key: float(ms) for key, ms in json.loads(self.cache_file.read_text()).items()}
        except (OSError, ValueError, AttributeError):
            return {}

    def graph_cost(self, model: ir.Model) -> float:
        opsets = dict(model.graph.opset_imports)
        return float(sum(self.node_cost(node, opsets) for node in model.graph))

    def node_cost(self, node: ir.Node, opsets: dict[str, int]) -> float:
        cached = node.meta.get(self._meta_key)
        if cached is None:
            cached = 0.0 if onnx_graph.folds_away_node(node) else self.operator_cost(operator_key(node), node, opsets)
            node.meta[self._meta_key] = cached
        return cached

    def operator_cost(self, key: str, node: ir.Node, opsets: dict[str, int]) -> float:
        return self.cached_cost(key, [node], opsets)

    def cached_cost(self, key: str, nodes: Sequence[ir.Node], opsets: dict[str, int]) -> float:
        """The cached timing under ``key``, timing ``nodes`` as a subgraph the first time."""
        if key not in self.costs:
            self.costs[key] = self.time_subgraph(key, nodes, opsets)
            self.measured += 1
            self._unsaved += 1
            if self._unsaved >= 25:
                self.save()
        return self.costs[key]

    def _time(self, key: str, node: ir.Node, opsets: dict[str, int]) -> float:
        return self.time_subgraph(key, [node], opsets)

    def time_subgraph(self, key: str, nodes: Sequence[ir.Node], opsets: dict[str, int]) -> float:
        """Median ms of the nodes alone; nodes ONNX Runtime cannot run alone are counted and cost 0."""
        try:
            proto, feeds = subgraph_with_feeds(nodes, opsets)
            runner = OrtRuntime(self.opt_level).compile(proto, RuntimeOptions(self.threads, exclusive=True), key)
            return measure_latency(runner.timer(feeds), self.timing).median_ms
        except (RlcompileError, ort.capi.onnxruntime_pybind11_state.Fail, ValueError) as error:
            self.failures[key] = first_line(error)
            return 0.0

    def save(self) -> None:
        """Write the cache atomically (a killed run leaves the previous file intact)."""
        if not self._unsaved:
            return
        atomic.write_json(self.cache_file, self.costs, indent=0, sort_keys=True)
        self._unsaved = 0


def default_cache_file(threads: int, opt_level: str) -> Path:
    """One cache per machine, ONNX Runtime version, thread count and optimisation level."""
    identity = f"{cpu_identity()}|ort {ort.__version__}|{threads} threads|{opt_level}"
    digest = hashlib.sha1(identity.encode()).hexdigest()[:12]
    return cache_root() / "graph_costs" / f"operators-{digest}.json"


#: Activations ONNX Runtime fuses into the Conv that feeds them (its ConvActivationFusion).
FUSED_ACTIVATIONS = ("Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid")


def fused_into_conv(node: ir.Node) -> bool:
    """An activation whose input is a Conv output read by nothing else: ORT runs it inside the Conv."""
    if node.op_type not in FUSED_ACTIVATIONS or node.domain != "" or not node.inputs or node.inputs[0] is None:
        return False
    producer = node.inputs[0].producer()
    return producer is not None and producer.op_type == "Conv" and onnx_graph.single_use(node.inputs[0])


class FusionAwareCostModel(OperatorCostModel):
    """The per-operator sum, with activations ONNX Runtime fuses into their Conv counted as free.

    The plain sum charges a Relu after a Conv as a separate operator, so a rewrite that moves the Relu
    away from its Conv (e.g. merging branch convolutions behind a Split) looks free while ORT loses the
    fusion. The decision depends on the node's producer, which rewrites change, so it is taken at every
    call and never cached on the node.
    """

    name = "fused"

    def graph_cost(self, model: ir.Model) -> float:
        opsets = dict(model.graph.opset_imports)
        return float(sum(0.0 if fused_into_conv(node) else self.node_cost(node, opsets) for node in model.graph))


class RegionCostModel(OperatorCostModel):
    """Regions (:mod:`.regions`: an operator and the elementwise chain ORT fuses into it) timed as ORT
    subgraphs with every optimisation on, summed; each region timed once per structural key, on disk.

    Where the plain sum charges Conv, Add and Relu apart, this times them as ORT runs them (one
    FusedConv), so a rewrite that breaks a fusion, or makes one, moves the estimate the way it moves
    the measured latency. One-operator regions share the plain sum's cache.
    """

    name = "region"

    def graph_cost(self, model: ir.Model) -> float:
        opsets = dict(model.graph.opset_imports)
        total = 0.0
        for region in regions.partition(model):
            if len(region) == 1:
                total += self.node_cost(region[0], opsets)
            else:
                total += self.cached_cost(regions.region_key(region), region, opsets)
        return float(total)


class ContextCostModel(OperatorCostModel):
    """A graph's cost = its parent's cost + what ORT_ENABLE_ALL takes more or less for the rewritten
    region in context (:func:`regions.changed_region`: the changed nodes and their neighbourhood, timed
    before and after as subgraphs, each timing cached by structural key); a graph no rule made (the
    search's start) is timed whole.

    Both subgraphs share their boundary, so what ORT adds there (NCHWc reorders, copies) cancels, and
    fusions, layouts and Split copies inside are timed as ORT runs them. Errors add up along a path of
    rewrites; each step's error is that of two short timings, and changes inside that error
    (:attr:`dead_band`) count as none.
    """

    name = "context"
    _GRAPH_COST = "rlcompile.cost.context"
    #: A region's change smaller than this share of its time is taken as none: two short timings of
    #: one subgraph differ by about that much, and a search must not chase it.
    dead_band = 0.03

    def graph_cost(self, model: ir.Model) -> float:
        known = model.graph.meta.get(self._GRAPH_COST)
        if known is not None and known[0] == id(model.graph):  # a clone carries its source's entry
            return known[1]
        parent = onnx_graph.parent(model)
        if parent is None:
            cost = self.whole_graph(model)
        else:
            before, after = regions.changed_region(parent, model)
            was, now = self.subgraph_cost(before, parent), self.subgraph_cost(after, model)
            cost = self.graph_cost(parent) + (now - was if abs(now - was) > self.dead_band * was else 0.0)
        model.graph.meta[self._GRAPH_COST] = (id(model.graph), cost)
        return cost

    def subgraph_cost(self, nodes: Sequence[ir.Node], model: ir.Model) -> float:
        return self.cached_cost(regions.region_key(nodes), nodes, dict(model.graph.opset_imports)) if nodes else 0.0

    def whole_graph(self, model: ir.Model) -> float:
        key = f"graph:{onnx_graph.graph_hash(model.graph)}"
        return self.cached_cost(key, [node for node in model.graph if node.op_type != "Constant"],
                                dict(model.graph.opset_imports))  # fmt: skip


class MeasuredCostModel(CostModel):
    """The whole graph timed in ONNX Runtime (ORT_ENABLE_ALL): exact here, about a second per graph."""

    name = "measured"

    def __init__(
        self, feeds: dict[str, np.ndarray], threads: int | None = None, timing: MeasureConfig = OPERATOR_TIMING
    ) -> None:
        self.feeds = feeds
        self.threads = threads or host_cores()
        self.timing = timing

    def graph_cost(self, model: ir.Model) -> float:
        return measure_graph(onnx_graph.to_proto(model), self.feeds, self.threads, self.timing)


def measure_graph(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int, timing: MeasureConfig) -> float:
    runner = OrtRuntime("all").compile(proto, RuntimeOptions(threads, exclusive=True), proto.graph.name or "graph")
    return measure_latency(runner.timer(feeds), timing).median_ms


COST_MODELS = GRAPH_COSTS
#: What the graph level optimises unless told otherwise: the closest to ORT_ENABLE_ALL within a model
#: of the cheap cost models (``benchmarks/graph_rewriting.py --parts costs``; README, "Graph level").
DEFAULT = "context"


def create(name: str, feeds: dict[str, np.ndarray] | None = None) -> CostModel:
    """``sum`` (per-operator, cached), ``fused`` (the same, ORT's Conv+activation fusion free), ``region``
    (ORT's fusion units timed as subgraphs, cached), ``context`` (the parent's cost plus the rewritten
    region timed in context) or ``measured`` (whole graph; needs ``feeds``)."""
    check_choice("cost model", name, COST_MODELS)
    if name == "sum":
        return OperatorCostModel()
    if name == "fused":
        return FusionAwareCostModel()
    if name == "region":
        return RegionCostModel()
    if name == "context":
        return ContextCostModel()
    if feeds is None:
        raise RlcompileError("the measured cost model times whole graphs: it needs the model's inputs (feeds)")
    return MeasuredCostModel(feeds)
