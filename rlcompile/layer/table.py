"""The profiler and the lookup table it fills (QS-DNN's offline phase).

Every primitive that claims a layer is first checked against the default (ONNX Runtime) on random
inputs, then timed (warm-up, median). Every layout conversion a plan might need is timed once per
tensor shape. The table is JSON, stored next to the model (the zoo's cache directory for built-in
models) under a name that includes the model's and the machine's fingerprints, and reused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

from rlcompile import atomic
from rlcompile.layer import primitives
from rlcompile.layer.network import Edge, Network
from rlcompile.measure import MeasureConfig, cpu_identity, environment, measure_latency
from rlcompile.models.onnx_model import LoadedModel, first_line
from rlcompile.models.zoo import cache_dir
from rlcompile.verify import compare_outputs

#: Per-layer timing: the seed averages 50 runs; we take the median of at least 10 after warm-up.
LAYER_TIMING = MeasureConfig(warmup=3, min_repeats=10, min_time_s=0.05, max_time_s=3.0, floor_repeats=3)
TABLE_VERSION = 1


def shape_key(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape)


@dataclass
class LookupTable:
    """Measured milliseconds: per layer and primitive, and per conversion and tensor shape."""

    model: str
    layers: list[str]
    options: dict[str, dict[str, float]]
    layouts: dict[str, str]
    edges: list[Edge]
    conversions: dict[str, dict[str, float]]
    rejected: dict[str, dict[str, str]] = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    #: the domain (layout, or library) the model's inputs arrive in and its outputs leave in
    host: str = "nchw"
    #: the option every layer has (the fallback a restricted plan uses)
    default: str = "ort:basic"
    #: how the table was made (calibration, raw measurements), for reports
    notes: dict = field(default_factory=dict)
    #: factor on the cost of crossing between two non-host domains, learned from measured plans
    boundary_scale: float = 1.0

    def conversion_ms(self, shape: tuple[int, ...], source: str, target: str) -> float:
        """What crossing from ``source`` to ``target`` costs for a tensor of ``shape`` (0 when not measured)."""
        if source == target:
            return 0.0
        cost = self.conversions.get(shape_key(shape), {}).get(f"{source}->{target}", 0.0)
        return cost if self.host in (source, target) else cost * self.boundary_scale

    def to_json(self) -> dict:
        return asdict(self) | {"version": TABLE_VERSION, "edges": [asdict(edge) for edge in self.edges]}

    @classmethod
    def from_json(cls, data: dict) -> LookupTable:
        data = {k: v for k, v in data.items() if k != "version"}
        data["edges"] = [Edge(e["producer"], e["consumer"], e["value"], tuple(e["shape"])) for e in data["edges"]]
        return cls(**data)

    def libraries(self) -> list[str]:
        return sorted({name.split(":")[0] for name in self.layouts})


Progress = Callable[[str], None]


def table_path(model: LoadedModel, threads: int, directory: Path | None = None) -> Path:
    """Next to the model, named by the model's content and this machine (CPU, threads, ORT, torch)."""
    import torch

    identity = f"{cpu_identity()}|{threads}|ort {ort.__version__}|torch {torch.__version__}|v{TABLE_VERSION}"
    machine = hashlib.sha1(identity.encode()).hexdigest()[:10]
    content = hashlib.sha1(model.serialized).hexdigest()[:10]
    if directory is None:
        directory = cache_dir() if model.source.startswith("zoo:") else Path(model.source).parent
    return directory / f"{model.name}.layers-{content}-{machine}.json"


def load_or_profile(model: LoadedModel, network: Network, path: Path, progress: Progress = lambda m: None,
                    timing: MeasureConfig = LAYER_TIMING) -> tuple[LookupTable, bool]:  # fmt: skip
    """The stored table when there is one, else a fresh profile (saved). Returns (table, reused)."""
    if path.exists():
        try:
            return LookupTable.from_json(json.loads(path.read_text())), True
        except (ValueError, KeyError, TypeError):
            progress(f"ignoring unreadable table {path}")
    table = profile(network, progress, timing)
    save_table(table, path)
    return table, False


def save_table(table: LookupTable, path: Path) -> None:
    atomic.write_json(path, table.to_json(), indent=1)


def profile(network: Network, progress: Progress = lambda m: None, timing: MeasureConfig = LAYER_TIMING) -> LookupTable:
    """Check and time every candidate primitive of every layer, and every conversion."""
    rng = np.random.default_rng(0)
    options: dict[str, dict[str, float]] = {}
    rejected: dict[str, dict[str, str]] = {}
    layouts: dict[str, str] = {}
    for index, layer in enumerate(network.layers):
        progress(f"profiling layer {index + 1}/{len(network.layers)}: {layer.name} ({layer.describe()})")
        inputs = [random_activation(shape, rng) for shape in layer.input_shapes]
        reference = primitives.create(primitives.DEFAULT).prepare(layer)(inputs)
        options[layer.name] = {}
        for primitive in primitives.candidates(layer):
            ms, reason = time_primitive(primitive, layer, inputs, reference, timing)
            if reason is None:
                options[layer.name][primitive.name] = ms
                layouts[primitive.name] = primitive.layout
            else:
                rejected.setdefault(layer.name, {})[primitive.name] = reason
    conversions = time_conversions(network.edges, timing, rng)
    return LookupTable(network.name, [layer.name for layer in network.layers], options, layouts, network.edges,
                       conversions, rejected, environment(primitives.THREADS["count"]))  # fmt: skip


def random_activation(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def time_if_agrees(prepare: Callable[[], tuple[Callable[[], object], list]], reference: list, timing: MeasureConfig,
                   reference_name: str) -> tuple[float, str | None]:  # fmt: skip
    """(median ms, None) when ``prepare()`` -> (call, outputs) works and its outputs agree with ``reference``;
    (nan, why not) otherwise. A library refusing a layer is data, not a crash."""
    try:
        call, outputs = prepare()
    except Exception as error:
        return float("nan"), f"failed: {first_line(error)}"
    agreement = compare_outputs(reference, outputs)
    if not agreement.within():
        return float("nan"), f"disagrees with {reference_name} (max rel err {agreement.max_rel:.1e})"
    return measure_latency(call, timing).median_ms, None


def time_primitive(primitive, layer, inputs, reference, timing) -> tuple[float, str | None]:
    """(median ms, None) if the primitive agrees with the reference; (nan, why not) otherwise."""

    def prepare():
        kernel = primitive.prepare(layer)
        converted = [primitives.convert(x, "nchw", primitive.layout) for x in inputs]
        outputs = [primitives.convert(np.asarray(y), primitive.layout, "nchw") for y in kernel(converted)]
        return (lambda: kernel(converted)), outputs

    return time_if_agrees(prepare, reference, timing, primitives.DEFAULT)


def time_conversions(edges: list[Edge], timing: MeasureConfig, rng: np.random.Generator) -> dict[str, dict[str, float]]:
    conversions: dict[str, dict[str, float]] = {}
    for shape in sorted({edge.shape for edge in edges if len(edge.shape) == 4}):
        nchw = random_activation(shape, rng)
        nhwc = primitives.convert(nchw, "nchw", "nhwc")
        conversions[shape_key(shape)] = {
            f"{source}->{target}": measure_latency(
                lambda array=array, source=source, target=target: primitives.convert(array, source, target), timing
            ).median_ms
            for array, source, target in ((nchw, "nchw", "nhwc"), (nhwc, "nhwc", "nchw"))
        }
    return conversions
