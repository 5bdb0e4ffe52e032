"""The per-operator profiler (QS-DNN's offline phase) and where its lookup table is stored.

Every primitive that claims a layer is first checked against the default (ONNX Runtime) on random
inputs, then timed (warm-up, median). Every layout conversion a plan might need is timed once per
tensor shape. The table is JSON, stored next to the model (the zoo's cache directory for built-in
models) under a name that includes the model's and the machine's fingerprints, and reused.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnxruntime as ort

from rlcompile.events import Listener, Step, ignore
from rlcompile.layer.per_operator import primitives
from rlcompile.layer.per_operator.network import Network
from rlcompile.layer.table import (
    LAYER_TIMING,
    TABLE_VERSION,
    Edge,
    LookupTable,
    read_table,
    save_table,
    shape_key,
    time_if_agrees,
)
from rlcompile.machine import cpu_identity, environment
from rlcompile.measure import MeasureConfig, measure_latency
from rlcompile.models import tables_home
from rlcompile.models.onnx_model import LoadedModel


def table_path(model: LoadedModel, threads: int, directory: Path | None = None) -> Path:
    """Next to the model, named by the model's content and this machine (CPU, threads, ORT, torch)."""
    import torch

    identity = f"{cpu_identity()}|{threads}|ort {ort.__version__}|torch {torch.__version__}|v{TABLE_VERSION}"
    machine = hashlib.sha1(identity.encode()).hexdigest()[:10]
    content = hashlib.sha1(model.serialized).hexdigest()[:10]
    if directory is None:
        directory = tables_home(model)
    return directory / f"{model.name}.layers-{content}-{machine}.json"


def load_or_profile(model: LoadedModel, network: Network, path: Path, progress: Listener = ignore,
                    timing: MeasureConfig = LAYER_TIMING) -> tuple[LookupTable, bool]:  # fmt: skip
    """The stored table when there is one, else a fresh profile (saved). Returns (table, reused)."""
    if (stored := read_table(path, progress)) is not None:
        return stored, True
    table = profile(network, progress, timing)
    save_table(table, path)
    return table, False


def profile(network: Network, progress: Listener = ignore, timing: MeasureConfig = LAYER_TIMING) -> LookupTable:
    """Check and time every candidate primitive of every layer, and every conversion."""
    rng = np.random.default_rng(0)
    options: dict[str, dict[str, float]] = {}
    rejected: dict[str, dict[str, str]] = {}
    layouts: dict[str, str] = {}
    for index, layer in enumerate(network.layers):
        progress(Step("layer", f"profiling layer {index + 1}/{len(network.layers)}: {layer.name} ({layer.describe()})",
                      index, len(network.layers), "layers profiled", layer.name))  # fmt: skip
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
    count = len(network.layers)
    progress(Step("layer", f"profiled {count} layers", count, count, "layers profiled"))
    conversions = time_conversions(network.edges, timing, rng)
    return LookupTable(network.name, [layer.name for layer in network.layers], options, layouts, network.edges,
                       conversions, rejected, environment(primitives.THREADS["count"]))  # fmt: skip


def random_activation(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


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
