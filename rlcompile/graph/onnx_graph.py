"""The graphs the graph level rewrites: ``onnx_ir`` models with static shapes and unique node names.

Rules, cost model, searches and the environment all work on an :class:`onnx_ir.Model`. A rewrite
never touches the graph it was given: :func:`clone` copies nodes and values in O(nodes) and shares
the (immutable) weight tensors, so even BERT clones in milliseconds. Every value a rule creates
carries its shape and type, so the cost model can key new operators without re-running inference.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx
import onnx_ir as ir

from rlcompile.models.onnx_model import inferred_values

#: Metadata keys (on ``Graph.meta`` / ``Value.meta``); meta survives :func:`clone`.
_NAME_COUNTER = "rlcompile.names"
_FINGERPRINT = "rlcompile.fingerprint"
_ARRAY = "rlcompile.array"
_PARENT = "rlcompile.parent"


def from_proto(proto: onnx.ModelProto) -> ir.Model:
    """Shape-infer ``proto`` and convert it; nodes without a unique name get one.

    Inference runs on the weightless skeleton (:func:`~rlcompile.models.onnx_model.inferred_values`: hf:convnext's
    111 MB took 1.6 s whole) and its shapes are set on the converted model's values; a graph with subgraphs
    (If, Loop, Scan) is inferred whole, so that their values get shapes too.
    """
    if any(attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for node in proto.graph.node for attribute in node.attribute):  # fmt: skip
        model = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(proto, data_prop=True))
    else:
        known = inferred_values(proto, data_prop=True)
        model = ir.serde.deserialize_model(proto)
        for node in model.graph:
            for output in node.outputs:
                if output.name in known and known[output.name].type.HasField("tensor_type"):
                    ir.serde.deserialize_value_info_proto(known[output.name], output)
    seen: set[str] = set()
    for index, node in enumerate(model.graph):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{index}"
        seen.add(node.name)
    return model


def to_proto(model: ir.Model) -> onnx.ModelProto:
    return ir.serde.serialize_model(model)


def clone(model: ir.Model) -> ir.Model:
    """A structural copy: new nodes and values, shared weight tensors."""
    return ir.Model(
        model.graph.clone(),
        ir_version=model.ir_version,
        producer_name=model.producer_name,
        producer_version=model.producer_version,
    )


def set_parent(model: ir.Model, parent: ir.Model) -> None:
    """Record that ``model`` is ``parent`` after one rewrite (what a context cost model diffs against)."""
    model.graph.meta[_PARENT] = parent


def parent(model: ir.Model) -> ir.Model | None:
    """The graph ``model`` was rewritten from, if a rule made it. Node names identify nodes across the
    two: rules keep the names of nodes they leave alone and give new nodes fresh ones, and a clone of
    the child still differs from that parent by the same names."""
    return model.graph.meta.get(_PARENT)


def nodes_by_name(graph: ir.Graph) -> dict[str, ir.Node]:
    return {node.name: node for node in graph}


def unique_name(graph: ir.Graph, hint: str) -> str:
    """A fresh name for a node or value: deterministic per graph, never reused within it."""
    counter = graph.meta.get(_NAME_COUNTER, 0) + 1
    graph.meta[_NAME_COUNTER] = counter
    return f"{hint}__rlc{counter}"


def constant_tensor(value: ir.Value | None) -> ir.TensorProtocol | None:
    """The tensor behind an initializer or a ``Constant`` output (shared by every clone), else ``None``."""
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant" and producer.domain == "":
        attr = producer.attributes.get("value")
        if attr is not None and attr.type == ir.AttributeType.TENSOR:
            return attr.value
        tensor = ir.convenience.get_const_tensor(value)
        return tensor
    return None


def constant_array(value: ir.Value | None) -> np.ndarray | None:
    """The value's contents when it is an initializer or a ``Constant`` output, else ``None``.

    The array is cached on the tensor, which clones share: rules read weights at every location of
    every candidate graph, and decoding a TensorProto each time would dominate a search.
    """
    tensor = constant_tensor(value)
    if tensor is None:
        return None
    array = tensor.meta.get(_ARRAY)
    if array is None:
        array = tensor.numpy()
        array.flags.writeable = False
        tensor.meta[_ARRAY] = array
    return array


def folds_away_node(node: ir.Node) -> bool:
    """A node ONNX Runtime computes once at load time: a Constant, or every input a constant."""
    return node.op_type == "Constant" or all(value is None or is_constant(value) for value in node.inputs)


def is_constant(value: ir.Value | None) -> bool:
    if value is None:
        return False
    producer = value.producer()
    return value.const_value is not None or (producer is not None and producer.op_type == "Constant")


def static_shape(value: ir.Value) -> tuple[int, ...] | None:
    """The shape as ints, or ``None`` when unknown or symbolic."""
    if value.shape is None or not all(isinstance(dim, int) for dim in value.shape):
        return None
    return tuple(int(dim) for dim in value.shape)


def add_constant(graph: ir.Graph, array: np.ndarray, hint: str) -> ir.Value:
    """Register ``array`` as a new initializer and return its value."""
    array = np.ascontiguousarray(array)
    name = unique_name(graph, hint)
    value = ir.Value(
        name=name,
        shape=ir.Shape(array.shape),
        type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
        const_value=ir.Tensor(array, name=name),
    )
    graph.register_initializer(value)
    return value


def add_node(
    graph: ir.Graph,
    op_type: str,
    inputs: Sequence[ir.Value | None],
    attributes: Mapping[str, object] | None = None,
    outputs: Sequence[tuple[Sequence[int] | None, ir.DataType]] = (),
    hint: str | None = None,
) -> ir.Node:
    """Append a node whose outputs have the given (shape, dtype); call :func:`finish` afterwards."""
    node = ir.Node(
        "",
        op_type,
        inputs,
        ir.convenience.convert_attributes(dict(attributes or {})),
        num_outputs=len(outputs),
        name=unique_name(graph, hint or op_type),
    )
    for value, (shape, dtype) in zip(node.outputs, outputs, strict=True):
        value.name = unique_name(graph, f"{node.name}_out")
        value.shape = None if shape is None else ir.Shape(list(shape))
        value.type = ir.TensorType(dtype)
    graph.append(node)
    return node


def replace_value(old: ir.Value, new: ir.Value) -> None:
    """Point every use of ``old`` at ``new``; a graph output keeps its name."""
    if old.is_graph_output():
        name = old.name
        old.name = None
        new.name = name
    old.replace_all_uses_with(new, replace_graph_outputs=True)


def finish(graph: ir.Graph, removed: Iterable[ir.Node] = ()) -> None:
    """Drop the replaced nodes (now unused) and the weights nothing reads; restore topological order."""
    graph.remove(list(removed), safe=True)
    for name, value in list(graph.initializers.items()):
        if not value.uses() and not value.is_graph_output():
            del graph.initializers[name]
    graph.sort()


def attribute(node: ir.Node, name: str, default: object = None) -> object:
    """An attribute's Python value (ints as tuples), or ``default``."""
    attr = node.attributes.get(name)
    if attr is None:
        return default
    value = attr.value
    return tuple(value) if isinstance(value, Sequence) and not isinstance(value, str) else value


def attributes_key(node: ir.Node) -> str:
    """A canonical text of the node's attributes (sorted), for hashing and cost keys."""
    return ";".join(f"{name}={attribute(node, name)!r}" for name in sorted(node.attributes))


def fingerprint(value: ir.Value) -> str:
    """A content hash of a constant (cached on its tensor, which clones share)."""
    tensor = constant_tensor(value)
    cached = tensor.meta.get(_FINGERPRINT)
    if cached is None:
        array = constant_array(value)
        digest = hashlib.blake2b(digest_size=8)
        digest.update(f"{array.dtype}{array.shape}".encode())
        flat = array.reshape(-1)
        digest.update(flat[:: max(1, flat.size // 4096)].tobytes())
        digest.update(flat[-64:].tobytes())
        cached = digest.hexdigest()
        tensor.meta[_FINGERPRINT] = cached
    return cached


def graph_hash(graph: ir.Graph) -> str:
    """A hash of the computation, independent of names: equal graphs reached by different paths agree."""
    tokens: dict[int, str] = {}
    for value in graph.inputs:
        tokens[id(value)] = f"in:{value.name}"

    def token(value: ir.Value | None) -> str:
        if value is None:
            return "-"
        if id(value) not in tokens and is_constant(value):
            tokens[id(value)] = f"c:{fingerprint(value)}"
        return tokens[id(value)]

    for node in graph:
        if node.op_type == "Constant":
            continue
        digest = hashlib.blake2b(digest_size=12)
        digest.update(f"{node.domain}:{node.op_type}({attributes_key(node)})".encode())
        digest.update("|".join(token(value) for value in node.inputs).encode())
        node_token = digest.hexdigest()
        for index, output in enumerate(node.outputs):
            tokens[id(output)] = f"{node_token}.{index}"
    return hashlib.blake2b("|".join(token(value) for value in graph.outputs).encode(), digest_size=16).hexdigest()


def opset(graph: ir.Graph) -> int:
    return int(graph.opset_imports.get("", 17))


def graph_order(graph: ir.Graph) -> dict[ir.Node, int]:
    """Each node's position, to sort matches into graph order."""
    return {node: index for index, node in enumerate(graph)}


def single_use(value: ir.Value) -> bool:
    """Read by exactly one node and not a graph output: its producer can go once that node changes."""
    return len(value.uses()) == 1 and not value.is_graph_output()


def add_split(graph: ir.Graph, value: ir.Value, axis: int, sizes: Sequence[int], hint: str) -> list[ir.Value]:
    """Split ``value`` along ``axis`` into pieces of ``sizes`` (the input form from opset 13)."""
    shape = list(static_shape(value))
    pieces = [([*shape[:axis], size, *shape[axis + 1 :]], value.dtype) for size in sizes]
    sizes_array = np.asarray(sizes, dtype=np.int64)
    if opset(graph) >= 13:
        inputs, attributes = [value, add_constant(graph, sizes_array, f"{hint}_sizes")], {"axis": axis}
    else:
        inputs, attributes = [value], {"axis": axis, "split": sizes_array.tolist()}
    return list(add_node(graph, "Split", inputs, attributes, pieces, hint=hint).outputs)


def add_concat(graph: ir.Graph, values: Sequence[ir.Value], axis: int, hint: str) -> ir.Value:
    shapes = [list(static_shape(value)) for value in values]
    shape = [*shapes[0][:axis], sum(s[axis] for s in shapes), *shapes[0][axis + 1 :]]
    return add_node(graph, "Concat", values, {"axis": axis}, [(shape, values[0].dtype)], hint=hint).outputs[0]


def ancestors(graph: ir.Graph) -> dict[ir.Node, int]:
    """For each node, a bit set (Python int over graph order) of the nodes it depends on, itself included."""
    order = graph_order(graph)
    sets: dict[ir.Node, int] = {}
    for node in graph:
        bits = 1 << order[node]
        for value in node.inputs:
            producer = value.producer() if value is not None else None
            if producer is not None and producer in sets:
                bits |= sets[producer]
        sets[node] = bits
    return sets


def independent(first: ir.Node, second: ir.Node, sets: Mapping[ir.Node, int], order: Mapping[ir.Node, int]) -> bool:
    """Neither node depends on the other, so they may be merged into one."""
    return not (sets[second] >> order[first]) & 1 and not (sets[first] >> order[second]) & 1
