"""Loading ONNX models with static input shapes, the form every level works on.

A user's file is read, its inputs are checked for dynamic dimensions (fixed with ``--input-shape``
or refused with a one-line error), and a model whose shapes were fixed or that computes shapes at
run time is folded with ``onnxslim`` so that TVM's Relax frontend can import it. The folded model is
verified against the original in ONNX Runtime before it replaces it.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from rlcompile.errors import DynamicShapeError, ModelError, first_line
from rlcompile.verify import compare_outputs

if TYPE_CHECKING:
    from rlcompile.runtimes import Runner, Runtime, RuntimeOptions

#: Highest IR version ONNX Runtime 1.31 accepts.
MAX_IR_VERSION = 13
#: Operators that compute shapes at run time; their presence asks for folding before TVM import.
SHAPE_COMPUTING_OPS = frozenset({"Shape", "Size", "ConstantOfShape", "NonZero", "Range"})

#: onnxslim passes that change the graph beyond folding; skipped so the fold is exact (fusions
#: reorder float arithmetic) and the graph level still sees the model's own structure.
FOLD_SKIPPED_OPTIMIZATIONS = ("graph_fusion", "subexpression_elimination", "weight_tying")

Shape = tuple[int, ...]
Dim = int | str | None


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype of a model input; dims are ints once the shape is static."""

    name: str
    shape: tuple[Dim, ...]
    dtype: np.dtype

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) and d > 0 for d in self.shape)

    def describe(self) -> str:
        dims = ",".join(str(d) if d not in (None, "") else "?" for d in self.shape)
        return f"{self.name}[{dims}] {self.dtype}"


@dataclass
class LoadedModel:
    """An ONNX model ready for the backends: static input shapes, known provenance."""

    name: str
    proto: onnx.ModelProto
    inputs: list[TensorSpec]
    source: str
    notes: list[str] = field(default_factory=list)
    #: why the shapes could not be folded at load time (ONNX Runtime runs the model as it is; TVM paths
    #: try another folder before they import it); ``None`` when folding was not needed or worked
    fold_failure: str | None = None
    #: the model as the user gave it (its input shapes fixed), where :attr:`proto` is that model folded for import;
    #: ``None`` where :attr:`proto` is the model as given (:attr:`native_proto`)
    given: onnx.ModelProto | None = field(default=None, repr=False)

    @functools.cached_property
    def serialized(self) -> bytes:
        """The model as bytes (ONNX Runtime takes these; computed once)."""
        return self.proto.SerializeToString()

    @property
    def output_names(self) -> list[str]:
        return [output.name for output in self.proto.graph.output]

    def op_counts(self) -> Counter[str]:
        return Counter(node.op_type for node in self.proto.graph.node)

    @property
    def native_proto(self) -> onnx.ModelProto:
        """The model a runtime runs natively: the user's as given, not the folded :attr:`proto`. Folding for import
        can cost a runtime speed: onnxslim gave every layer of ALBERT (one set of weights shared by all of them) its
        own copy, 23 MB became 58 MB, and OpenVINO ran it 1.05-1.07x slower than the file as given (2-core Zen 4)."""
        return self.proto if self.given is None else self.given

    def static_proto(self) -> onnx.ModelProto:
        """The proto a compiler that needs constant shapes imports (see :func:`foldable_for_import`)."""
        return foldable_for_import(self)

    def compile(self, runtime: Runtime, options: RuntimeOptions | None = None) -> Runner:
        """This model compiled by ``runtime`` (natively unless ``options`` say otherwise): the one way a whole
        model is handed to a runtime: as given (:attr:`native_proto`), folded for runtimes that need constant
        shapes."""
        return self.compile_copies(runtime, 1, options)[0]

    def compile_copies(self, runtime: Runtime, count: int, options: RuntimeOptions | None = None) -> list[Runner]:
        """``count`` independent compiles of this model by ``runtime`` (a native run and its identical twin), the
        model handed over once (:meth:`~rlcompile.runtimes.base.Runtime.compile_copies`)."""
        from rlcompile.runtimes import NATIVE

        return runtime.compile_copies(self.proto_for(runtime), count, options or NATIVE, self.name)

    def proto_for(self, runtime: Runtime) -> onnx.ModelProto:
        """The proto ``runtime`` is handed to run this whole model: as given (:attr:`native_proto`), folded for a
        runtime that needs constant shapes (:meth:`static_proto`)."""
        return self.static_proto() if runtime.needs_static_shapes else self.native_proto

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Reproducible random inputs; see :func:`random_tensor`."""
        rng = np.random.default_rng(seed)
        return {spec.name: random_tensor(spec, rng) for spec in self.inputs}


def random_tensor(spec: TensorSpec, rng: np.random.Generator) -> np.ndarray:
    """Standard-normal floats; integers and booleans in {0, 1}, valid as token ids, masks and types."""
    shape = tuple(int(d) for d in spec.shape)  # type: ignore[arg-type]
    if np.issubdtype(spec.dtype, np.floating):
        return rng.standard_normal(shape).astype(spec.dtype)
    if spec.dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    return rng.integers(0, 2, shape).astype(spec.dtype)


def parse_input_shape(text: str) -> tuple[str, Shape]:
    """Parse ``NAME=1,3,224,224`` (also ``NAME:1x3x224x224``) into a name and a shape."""
    separator = "=" if "=" in text else ":"
    name, _, dims = text.rpartition(separator)
    pieces = [piece.strip() for piece in re.split(r"[,x]", dims)]
    shape = tuple(int(p) for p in pieces) if all(p.isdigit() for p in pieces) else ()
    if not name or not shape or any(d <= 0 for d in shape):
        if re.search(r"\d\s*(-|\.\.|\|)\s*\d", dims):
            raise ModelError(f"--input-shape {text!r}: ranges and sets are taken by optimize (a shape profile); this "
                             "command works at one shape: give NAME=D1,D2,... with positive integers")  # fmt: skip
        raise ModelError(f"bad --input-shape {text!r}: expected NAME=D1,D2,... with positive integers")
    return name, shape


def parse_input_shapes(texts: Sequence[str] | None) -> dict[str, Shape]:
    """Parse repeated ``--input-shape`` values; a name given twice is an error."""
    shapes: dict[str, Shape] = {}
    for text in texts or ():
        name, shape = parse_input_shape(text)
        if name in shapes:
            raise ModelError(f"--input-shape given twice for input {name!r}")
        shapes[name] = shape
    return shapes


def graph_inputs(proto: onnx.ModelProto) -> list[TensorSpec]:
    """The model's real inputs (graph inputs that are not initializers)."""
    initializers = {init.name for init in proto.graph.initializer}
    specs = []
    for value in proto.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        dims: list[Dim] = []
        for dim in tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value > 0:
                dims.append(int(dim.dim_value))
            else:
                dims.append(dim.dim_param or None)
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        specs.append(TensorSpec(value.name, tuple(dims), dtype))
    return specs


def read_onnx(path: Path) -> onnx.ModelProto:
    """Read and check an ONNX file, turning every failure into a one-line :class:`ModelError`."""
    if not path.exists():
        raise ModelError(f"no such model file: {path}")
    if path.is_dir():
        raise ModelError(f"{path} is a directory, not an ONNX file nor a finished plan directory (it has no "
                         "manifest.json: re-running the command that wrote it finishes it)")  # fmt: skip
    try:
        proto = onnx.load(str(path))
    except Exception as error:  # protobuf raises several unrelated types on garbage
        raise ModelError(f"cannot read ONNX model {path}: {first_line(error)}") from None
    if not proto.graph.node:
        raise ModelError(f"{path} is not an ONNX model with a graph (no nodes found)")
    try:  # the checker reads the file itself: handing it the proto serialises every weight again (VGG-16: 7 s)
        onnx.checker.check_model(str(path))
    except Exception as error:
        raise ModelError(f"invalid ONNX model {path}: {first_line(error)}") from None
    return proto


#: Initializers of more elements than this are weights: shape inference needs only their type and dims (a shape
#: that a Reshape reads, an axis list, has a few elements and is kept).
SHAPE_TENSOR_LIMIT = 64


def weightless(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with its weights turned into graph inputs of the same type and shape: what shape inference needs.

    ONNX's shape inference serialises the model it is given; for VGG-16 (528 MB of weights) that and walking the
    weights took 28 s on the 2-core VM, the skeleton well under a second.
    """
    graph = proto.graph
    declared = {value.name for value in graph.input}
    small, as_inputs = [], []
    for tensor in graph.initializer:
        if np.prod(tensor.dims) <= SHAPE_TENSOR_LIMIT:
            small.append(tensor)
        elif tensor.name not in declared:
            as_inputs.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    skeleton = onnx.helper.make_graph(list(graph.node), graph.name, [*graph.input, *as_inputs], list(graph.output),
                                      small, value_info=list(graph.value_info))  # fmt: skip
    return onnx.helper.make_model(skeleton, opset_imports=list(proto.opset_import), ir_version=proto.ir_version,
                                  functions=list(proto.functions))  # fmt: skip


def inferred_values(proto: onnx.ModelProto, data_prop: bool = False) -> dict[str, onnx.ValueInfoProto]:
    """Every value's type and shape by name, from ONNX shape inference on :func:`weightless` ``proto`` (graph
    inputs, intermediate values, outputs; a weight appears as the input it became). ``data_prop``: shape
    computations (Shape, Gather, Concat) are propagated too. Raises what inference raises."""
    inferred = onnx.shape_inference.infer_shapes(weightless(proto), data_prop=data_prop)
    return {value.name: value for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]}


def static_shapes(proto: onnx.ModelProto, values: Mapping[str, onnx.ValueInfoProto] | None = None,
                  ) -> dict[str, tuple[int, ...]]:  # fmt: skip
    """Every value whose shape is fully known, by name: the initializers' and, from ``values``
    (:func:`inferred_values` when not given), those with every dimension a number."""
    shapes = {}
    for value in (inferred_values(proto) if values is None else values).values():
        dims = value.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
            shapes[value.name] = tuple(d.dim_value for d in dims)
    for init in proto.graph.initializer:
        shapes[init.name] = tuple(init.dims)
    return shapes


def fix_input_shapes(
    proto: onnx.ModelProto, inputs: list[TensorSpec], overrides: Mapping[str, Shape], model_name: str
) -> tuple[list[TensorSpec], bool]:
    """Apply ``--input-shape`` overrides; refuse unknown names, rank mismatches and leftover dynamics.

    Returns the static input specs and whether the proto was changed.
    """
    known = {spec.name for spec in inputs}
    for name in overrides:
        if name not in known:
            listed = ", ".join(spec.describe() for spec in inputs)
            raise ModelError(f"--input-shape names {name!r}, but {model_name} has inputs: {listed}")
    fixed: list[TensorSpec] = []
    changed = False
    for spec, value in zip(inputs, input_values(proto), strict=True):
        shape = overrides.get(spec.name)
        if shape is None:
            if not spec.is_static:
                raise DynamicShapeError(
                    f"input {spec.describe()} of {model_name} has dynamic dims; fix them with "
                    f"--input-shape {spec.name}={','.join(str(d) if isinstance(d, int) else 'N' for d in spec.shape)}"
                )
            fixed.append(spec)
            continue
        check_override(spec, shape)
        if tuple(spec.shape) != shape:
            set_static_shape(value, shape)
            changed = True
        fixed.append(TensorSpec(spec.name, shape, spec.dtype))
    return fixed, changed


def check_override(spec: TensorSpec, shape: Shape) -> None:
    """An override must keep the input's rank and agree with the dims that are already static."""
    if len(spec.shape) != len(shape):
        raise ModelError(
            f"--input-shape {spec.name} has {len(shape)} dims, but input {spec.describe()} has {len(spec.shape)}"
        )
    for index, (dim, wanted) in enumerate(zip(spec.shape, shape, strict=True)):
        if isinstance(dim, int) and dim != wanted:
            raise ModelError(f"--input-shape {spec.name} sets dim {index} to {wanted}, but the model fixes it to {dim}")


def input_values(proto: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    initializers = {init.name for init in proto.graph.initializer}
    return [value for value in proto.graph.input if value.name not in initializers]


def set_static_shape(value: onnx.ValueInfoProto, shape: Shape) -> None:
    dims = value.type.tensor_type.shape.dim
    for dim, size in zip(dims, shape, strict=True):
        dim.Clear()
        dim.dim_value = size


def needs_folding(proto: onnx.ModelProto) -> bool:
    """Whether the graph computes shapes at run time (TVM's frontend wants them constant)."""
    return any(node.op_type in SHAPE_COMPUTING_OPS for node in proto.graph.node)


def fold_model(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Constant-fold a model with static inputs using onnxslim (checked by :func:`checked_fold`)."""
    import onnxslim

    try:
        folded = onnxslim.slim(proto, skip_optimizations=list(FOLD_SKIPPED_OPTIMIZATIONS))
    except Exception as error:
        raise ModelError(f"folding the model with onnxslim failed: {first_line(error)}") from None
    if folded is None:
        raise ModelError("folding the model with onnxslim returned nothing")
    return folded


def fold_with_ort(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The second way to fold: ONNX Runtime's own basic level (constant folding with the static input shapes,
    standard ONNX operators only), saved as a model (checked by :func:`checked_fold`)."""
    import tempfile

    from rlcompile.runtimes.ort import create_session, session_options

    with tempfile.TemporaryDirectory(prefix="rlcompile-fold-") as scratch:
        options = session_options("basic")
        options.optimized_model_filepath = str(Path(scratch) / "folded.onnx")
        try:
            create_session(proto.SerializeToString(), options, "the model")
            return onnx.load(options.optimized_model_filepath)
        except Exception as error:
            raise ModelError(f"folding the model with ONNX Runtime failed: {first_line(error)}") from None


def checked_fold(fold, proto: onnx.ModelProto, inputs: list[TensorSpec], how: str) -> onnx.ModelProto:
    """``fold(proto)`` when its outputs agree with the original's in ONNX Runtime; :class:`ModelError` otherwise."""
    from rlcompile.runtimes.ort import run_proto

    scratch = onnx.ModelProto()
    scratch.CopyFrom(proto)  # a fold may change its argument in place (onnxslim renames outer-scope weights)
    folded = fold(scratch)
    folded.ir_version = min(folded.ir_version, MAX_IR_VERSION)
    feeds = {spec.name: random_tensor(spec, np.random.default_rng(0)) for spec in inputs}
    try:
        agreement = compare_outputs(run_proto(proto, feeds), run_proto(folded, feeds))
    except ValueError as error:
        raise ModelError(f"the model folded by {how} does not match the original: {error}") from None
    if not agreement.within():
        raise ModelError(f"folding with {how} changed the outputs (max rel error {agreement.max_rel:.3g})")
    return folded


def foldable_for_import(model: LoadedModel) -> onnx.ModelProto:
    """The proto a compiler that needs constant shapes should import: as loaded, or, when folding failed at
    load time, folded by ONNX Runtime instead; one line naming both failures when neither works."""
    if model.fold_failure is None:
        return model.proto
    try:
        return checked_fold(fold_with_ort, model.proto, model.inputs, "ONNX Runtime")
    except ModelError as error:
        raise ModelError(f"{model.name} computes shapes at run time and cannot be made static: "
                         f"{model.fold_failure}; {error}") from None  # fmt: skip


def load_onnx_file(path: Path, input_shapes: Mapping[str, Shape] | None = None) -> LoadedModel:
    """Load a user's ONNX file with static input shapes, folded for import when needed.

    When onnxslim's fold fails or changes the outputs, the model is kept as it is (ONNX Runtime runs it
    unfolded) and :attr:`LoadedModel.fold_failure` says why; TVM paths then try ONNX Runtime's folding.
    """
    proto = read_onnx(path)
    name = path.stem
    inputs, changed = fix_input_shapes(proto, graph_inputs(proto), input_shapes or {}, name)
    model = LoadedModel(name=name, proto=proto, inputs=inputs, source=str(path))
    if proto.ir_version > MAX_IR_VERSION:
        proto.ir_version = MAX_IR_VERSION
        model.notes.append(f"IR version lowered to {MAX_IR_VERSION} for ONNX Runtime")
    if changed or needs_folding(proto):
        try:
            model.proto, model.given = checked_fold(fold_model, proto, inputs, "onnxslim"), proto
            model.notes.append("shapes fixed and folded with onnxslim (outputs checked in ONNX Runtime)")
        except ModelError as error:
            model.fold_failure = str(error)
            model.notes.append(f"not folded ({error}); ONNX Runtime runs it as it is")
    return model
