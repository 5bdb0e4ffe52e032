"""PyTorch / oneDNN: the model (a segment, usually) as one TorchScript function, frozen and optimised for inference.

The segment's ONNX nodes are translated operator by operator into ``torch.nn.functional`` calls (the
operators CNNs and transformer blocks use; a segment with any other operator is not claimed), traced
with ``torch.jit.trace``, then ``torch.jit.freeze`` and ``torch.jit.optimize_for_inference`` fold the
weights and hand convolutions to oneDNN (MKL-DNN) with their fused activations, as a PyTorch user
deploying on CPU would.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from rlcompile.errors import ModelError, first_line
from rlcompile.runtimes.base import NATIVE, Runner, Runtime, RuntimeOptions, model_name
from rlcompile.threads import torch_wind_down_s


def attributes(node: onnx.NodeProto) -> dict:
    return {attribute.name: onnx.helper.get_attribute_value(attribute) for attribute in node.attribute}


def symmetric_padding(pads: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """(padding for the op, extra F.pad arguments or None) for ONNX's [begin..., end...] pads."""
    half = len(pads) // 2
    begin, end = list(pads[:half]), list(pads[half:])
    if begin == end:
        return tuple(begin), None
    extra = []
    for b, e in zip(reversed(begin), reversed(end), strict=True):
        extra += [b, e]
    return tuple(0 for _ in begin), tuple(extra)


def onnx_pads(a: dict, spatial: Sequence[int], kernel: Sequence[int]) -> list[int]:
    """ONNX's [begin..., end...] pads of a convolution or pool, ``auto_pad`` resolved: ``SAME_UPPER`` and
    ``SAME_LOWER`` pad so the output is ceil(input / stride), the odd pixel at the end (upper) or the start."""
    mode = a.get("auto_pad", b"NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode in ("NOTSET", ""):
        return list(a.get("pads", [0] * (2 * len(kernel))))
    if mode == "VALID":
        return [0] * (2 * len(kernel))
    strides, dilations = a.get("strides", [1] * len(kernel)), a.get("dilations", [1] * len(kernel))
    begin, end = [], []
    for size, k, stride, dilation in zip(spatial, kernel, strides, dilations, strict=True):
        total = max((math.ceil(size / stride) - 1) * stride + (k - 1) * dilation + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else large)
        end.append(large if mode == "SAME_UPPER" else small)
    return begin + end


def conv(F, node, a, x, w, b=None):
    padding, extra = symmetric_padding(onnx_pads(a, x.shape[2:], w.shape[2:]))
    if extra is not None:
        x = F.pad(x, extra)
    return F.conv2d(x, w, b, a.get("strides", 1), padding, a.get("dilations", 1), a.get("group", 1))


def pool(F, node, a, x):
    kernel = a["kernel_shape"]
    padding, extra = symmetric_padding(onnx_pads(a, x.shape[2:], kernel))
    strides = a.get("strides", [1] * len(kernel))
    if node.op_type == "MaxPool":
        if extra is not None:
            x = F.pad(x, extra, value=-math.inf)
        return F.max_pool2d(x, kernel, strides, padding, a.get("dilations", 1), bool(a.get("ceil_mode", 0)))
    if extra is not None:
        if not a.get("count_include_pad", 0):
            raise NotImplementedError("asymmetric AveragePool padding that excludes the pad")
        x = F.pad(x, extra)
    return F.avg_pool2d(x, kernel, strides, padding, bool(a.get("ceil_mode", 0)), bool(a.get("count_include_pad", 0)))


def gemm(F, node, a, x, w, c=None):
    x = x.t() if a.get("transA", 0) else x
    w = w.t() if a.get("transB", 0) else w
    y = (x @ w) * a.get("alpha", 1.0)
    return y if c is None else y + c * a.get("beta", 1.0)


def clip(F, node, a, x, low=None, high=None):
    low = a.get("min", -math.inf) if low is None else float(low)
    high = a.get("max", math.inf) if high is None else float(high)
    return x.clamp(low, high)


def reshape(F, node, a, x, shape):
    dims = [int(d) for d in shape.tolist()]
    dims = [x.shape[i] if d == 0 and not a.get("allowzero", 0) else d for i, d in enumerate(dims)]
    return x.reshape(dims)


def lrn(F, node, a, x):
    return F.local_response_norm(x, a["size"], a.get("alpha", 1e-4), a.get("beta", 0.75), a.get("bias", 1.0))


def reduce_mean(F, node, a, x, axes=None):
    axes = a.get("axes") if axes is None else [int(d) for d in axes.tolist()]
    return x.mean(dim=axes, keepdim=bool(a.get("keepdims", 1)))


def softmax(F, node, a, x):
    return x.softmax(a.get("axis", -1))


def batch_norm(F, node, a, x, scale, bias, mean, variance):
    return F.batch_norm(x, mean, variance, scale, bias, False, 0.0, a.get("epsilon", 1e-5))


def layer_norm(F, node, a, x, weight, bias=None):
    axis = a.get("axis", -1) % x.dim()
    return F.layer_norm(x, tuple(x.shape[axis:]), weight, bias, a.get("epsilon", 1e-5))


def gather(F, node, a, x, indices):
    axis = a.get("axis", 0) % x.dim()
    indices = torch.where(indices < 0, indices + x.shape[axis], indices).long()
    picked = x.index_select(axis, indices.reshape(-1))
    return picked.reshape((*x.shape[:axis], *indices.shape, *x.shape[axis + 1 :]))


def unsqueeze(F, node, a, x, axes=None):
    axes = a.get("axes") if axes is None else [int(d) for d in axes.tolist()]
    rank = x.dim() + len(axes)
    for axis in sorted(d % rank for d in axes):
        x = x.unsqueeze(axis)
    return x


def cast(F, node, a, x):
    return x.to(TORCH_DTYPES[onnx.helper.tensor_dtype_to_np_dtype(a["to"])])


def concat(F, node, a, *xs):
    return torch.cat(xs, a["axis"])


OPS: dict[str, Callable] = {
    "Conv": conv,
    "MaxPool": pool,
    "AveragePool": pool,
    "GlobalAveragePool": lambda F, n, a, x: x.mean(dim=(2, 3), keepdim=True),
    "GlobalMaxPool": lambda F, n, a, x: x.amax(dim=(2, 3), keepdim=True),
    "Gemm": gemm,
    "MatMul": lambda F, n, a, x, y: x @ y,
    "Add": lambda F, n, a, x, y: x + y,
    "Sub": lambda F, n, a, x, y: x - y,
    "Mul": lambda F, n, a, x, y: x * y,
    "Div": lambda F, n, a, x, y: x / y,
    "Pow": lambda F, n, a, x, y: x**y,
    "Sqrt": lambda F, n, a, x: x.sqrt(),
    "Erf": lambda F, n, a, x: x.erf(),
    "Tanh": lambda F, n, a, x: x.tanh(),
    "Relu": lambda F, n, a, x: F.relu(x),
    "Sigmoid": lambda F, n, a, x: x.sigmoid(),
    "HardSigmoid": lambda F, n, a, x: (x * a.get("alpha", 0.2) + a.get("beta", 0.5)).clamp(0, 1),
    "HardSwish": lambda F, n, a, x: F.hardswish(x),
    "LeakyRelu": lambda F, n, a, x: F.leaky_relu(x, a.get("alpha", 0.01)),
    "Clip": clip,
    "Flatten": lambda F, n, a, x: x.flatten(a.get("axis", 1)) if a.get("axis", 1) > 0 else x.reshape(1, -1),
    "Reshape": reshape,
    "Transpose": lambda F, n, a, x: x.permute(a["perm"]),
    "Concat": concat,
    "Softmax": softmax,
    "LRN": lrn,
    "ReduceMean": reduce_mean,
    "LayerNormalization": layer_norm,
    "BatchNormalization": batch_norm,
    "Gather": gather,
    "Unsqueeze": unsqueeze,
    "Cast": cast,
    "Identity": lambda F, n, a, x: x,
    "Dropout": lambda F, n, a, x, *rest: x,
}
#: Inputs read as Python values (shapes, bounds), not as tensors.
STATIC_INPUTS = {"Reshape": {1}, "Clip": {1, 2}, "ReduceMean": {1}, "Unsqueeze": {1}}
TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16,
                np.dtype(np.int64): torch.int64, np.dtype(np.int32): torch.int32, np.dtype(np.bool_): torch.bool}


class SegmentModule(torch.nn.Module):
    """Interprets the segment's nodes with torch; traced once into TorchScript."""

    def __init__(self, segment: onnx.ModelProto) -> None:
        super().__init__()
        graph = segment.graph
        self.constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant":
                self.constants[node.output[0]] = numpy_helper.to_array(attributes(node)["value"])
        self.nodes = [node for node in graph.node if node.op_type != "Constant"]
        missing = sorted({node.op_type for node in self.nodes} - set(OPS))
        if missing:
            raise NotImplementedError(f"no torch translation for {', '.join(missing)}")
        self.tensors = {name: torch.from_numpy(np.array(array)) for name, array in self.constants.items()}
        self.inputs = [value.name for value in graph.input if value.name not in self.constants]
        self.outputs = [value.name for value in graph.output]

    def forward(self, *arrays):
        import torch.nn.functional as F

        values = dict(zip(self.inputs, arrays, strict=True))
        for node in self.nodes:
            static = STATIC_INPUTS.get(node.op_type, set())
            arguments = []
            for position, name in enumerate(node.input):
                if not name:
                    arguments.append(None)
                elif position in static:
                    arguments.append(self.constants[name])
                else:
                    arguments.append(values[name] if name in values else self.tensors[name])
            result = OPS[node.op_type](F, node, attributes(node), *arguments)
            values[node.output[0]] = result
        return tuple(values[name] for name in self.outputs)


class TorchRunner(Runner):
    def __init__(self, function, threads: int, input_names: list[str], prepare_seconds: float = 0.0) -> None:
        self.function = function
        self.threads = threads
        self.input_names = input_names
        self.prepare_seconds = prepare_seconds
        self.wind_down_s = torch_wind_down_s(threads)

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        with torch.no_grad():
            results = self.function(*[torch.from_numpy(np.ascontiguousarray(array)) for array in inputs])
        return [result.numpy() for result in results]


class TorchRuntime(Runtime):
    name = "torch"

    def supports(self, nodes: Sequence[onnx.NodeProto]) -> bool:
        return all(node.op_type in OPS for node in nodes)

    def compile(self, model: onnx.ModelProto, options: RuntimeOptions = NATIVE, name: str | None = None) -> Runner:
        self.check_precision(options)
        started, threads = time.perf_counter(), options.thread_count
        torch.set_num_threads(threads)
        try:
            module = SegmentModule(model)
            inputs = [value for value in model.graph.input if value.name not in module.constants]
            examples = tuple(example_input(value) for value in inputs)
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript is deprecated, still the CPU path
                warnings.simplefilter("ignore", torch.jit.TracerWarning)  # shapes are static: auto_pad's sizes hold
                traced = torch.jit.trace(module, examples, check_trace=False)
                function = torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))
        except Exception as error:  # a translation or a TorchScript pass refusing the segment
            label = model_name(model, name, "segment")
            raise ModelError(f"PyTorch cannot compile {label}: {first_line(error)}") from None
        return TorchRunner(function, threads, list(module.inputs), time.perf_counter() - started)


def example_input(value: onnx.ValueInfoProto) -> torch.Tensor:
    """Zeros of the input's shape and type, for tracing."""
    tensor_type = value.type.tensor_type
    dtype = TORCH_DTYPES[onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)]
    return torch.zeros([dim.dim_value for dim in tensor_type.shape.dim], dtype=dtype)
