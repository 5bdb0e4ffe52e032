"""Models: the built-in zoo and users' ONNX files, both loaded as :class:`LoadedModel`.

``load_model("resnet18")`` and ``load_model("path/to/model.onnx", {"x": (1, 3, 224, 224)})`` give the
same kind of object, so every command accepts a zoo name wherever it accepts a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from rlcompile.errors import ModelError
from rlcompile.models.onnx_model import (
    LoadedModel,
    Shape,
    TensorSpec,
    fix_input_shapes,
    graph_inputs,
    load_onnx_file,
    parse_input_shapes,
    read_onnx,
)
from rlcompile.models.packaged import PACKAGED, packaged_path
from rlcompile.models.zoo import ZOO, cache_dir, export_path, get_entry

__all__ = ["PACKAGED", "ZOO", "LoadedModel", "TensorSpec", "load_model", "parse_input_shapes", "tables_home"]


def load_model(spec: str, input_shapes: Mapping[str, Shape] | None = None) -> LoadedModel:
    """Load a zoo model or a packaged model (:mod:`.packaged`) by name or an ONNX file by path, with static
    input shapes."""
    if spec in ZOO:
        return load_zoo_model(spec, input_shapes or {})
    if spec in PACKAGED:
        return load_packaged_model(spec, input_shapes)
    check_model_spec(spec)
    return load_onnx_file(Path(spec), input_shapes)


def tables_home(model: LoadedModel) -> Path:
    """Where a model's lookup tables are kept unless the user says: next to the user's file; in the cache for a zoo
    or packaged model (a wheel's folder in site-packages is not the user's to write in)."""
    packaged = model.name in PACKAGED and Path(model.source).name == PACKAGED[model.name].filename
    return cache_dir() if model.source.startswith("zoo:") or packaged else Path(model.source).parent


def check_model_spec(spec: str) -> None:
    """Refuse, at once, a model that is neither a zoo name, a packaged model nor a file: a command says so before
    its slow imports (an existing file's reader says what else may be wrong with it)."""
    path = Path(spec)
    if spec in ZOO or spec in PACKAGED or path.exists():
        return
    if path.suffix.lower() == ".onnx":
        raise ModelError(f"no such model file: {path}")
    raise ModelError(f"unknown model {spec!r}: not a zoo model ({', '.join(ZOO)}), not a packaged model "
                     f"({', '.join(PACKAGED)}) and no such file")  # fmt: skip


def load_packaged_model(name: str, input_shapes: Mapping[str, Shape] | None) -> LoadedModel:
    """A model shipped in a wheel, with its default input shapes unless the user gives them."""
    entry = PACKAGED[name]
    model = load_onnx_file(packaged_path(name), {**entry.shapes, **(input_shapes or {})})
    model.name = name
    model.notes.insert(0, entry.description)
    return model


def load_zoo_model(name: str, input_shapes: Mapping[str, Shape]) -> LoadedModel:
    """A zoo model; its shapes are fixed at export, so overrides may only repeat them."""
    path = export_path(name)
    proto = read_onnx(path)
    inputs, _ = fix_input_shapes(proto, graph_inputs(proto), input_shapes, name)
    return LoadedModel(name=name, proto=proto, inputs=inputs, source=f"zoo:{name}", notes=[get_entry(name).description])
