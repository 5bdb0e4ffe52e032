"""The dependency-light baseline: convolution lowered to NumPy/OpenBLAS matrix products (QS-DNN's
"Vanilla" family), plus the element-wise and concatenation layers both layouts need.

im2col (NCHW) gathers every kernel window into a column and does one GEMM; im2row (NHWC) gathers
rows instead, so the GEMM's output is already NHWC; kn2row (NCHW) does one 1x1 GEMM per kernel
position and accumulates the shifted results, trading memory for more, smaller GEMMs.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from rlcompile.layer.per_operator.network import Layer
from rlcompile.layer.per_operator.primitives.base import Kernel, Primitive, conv_bias, conv_geometry


def padded(x: np.ndarray, pads: tuple[int, int, int, int], spatial_axes: tuple[int, int]) -> np.ndarray:
    if not any(pads):
        return x
    widths = [(0, 0)] * x.ndim
    widths[spatial_axes[0]] = (pads[0], pads[2])
    widths[spatial_axes[1]] = (pads[1], pads[3])
    return np.pad(x, widths)


def plain_conv(layer: Layer) -> bool:
    geometry = conv_geometry(layer)
    return geometry is not None and geometry[2] == (1, 1)


class Im2colConv(Primitive):
    name, library, layout = "numpy:im2col", "numpy", "nchw"

    def supports(self, layer: Layer) -> bool:
        return plain_conv(layer)

    def prepare(self, layer: Layer) -> Kernel:
        strides, pads, _, group = conv_geometry(layer)
        weights = layer.constants[1]
        out_channels, per_group, kh, kw = weights.shape
        matrices = weights.reshape(group, out_channels // group, per_group * kh * kw)
        bias = conv_bias(layer)
        _, _, oh, ow = layer.output_shapes[0]

        def run(inputs):
            x = padded(inputs[0], pads, (2, 3))
            windows = sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, :: strides[0], :: strides[1]]
            outputs = []
            for image in windows:  # (C, OH, OW, kh, kw)
                columns = image.transpose(0, 3, 4, 1, 2).reshape(group, per_group * kh * kw, oh * ow)
                outputs.append(np.matmul(matrices, columns).reshape(out_channels, oh, ow))
            result = np.stack(outputs)
            return [result + bias.reshape(1, -1, 1, 1) if bias is not None else result]

        return run


class UngroupedConv(Primitive):
    """A lowering for ordinary (group 1, undilated) convolutions."""

    library = "numpy"

    def supports(self, layer: Layer) -> bool:
        return plain_conv(layer) and conv_geometry(layer)[3] == 1

    @staticmethod
    def unpack(layer: Layer):
        """(strides, pads, weights, bias, output height, output width)."""
        strides, pads, _, _ = conv_geometry(layer)
        _, _, oh, ow = layer.output_shapes[0]
        return strides, pads, layer.constants[1], conv_bias(layer), oh, ow


class Im2rowConv(UngroupedConv):
    name, layout = "numpy:im2row", "nhwc"

    def prepare(self, layer: Layer) -> Kernel:
        strides, pads, weights, bias, oh, ow = self.unpack(layer)
        out_channels, channels, kh, kw = weights.shape
        matrix = np.ascontiguousarray(weights.transpose(2, 3, 1, 0).reshape(kh * kw * channels, out_channels))

        def run(inputs):
            x = padded(inputs[0], pads, (1, 2))
            windows = sliding_window_view(x, (kh, kw), axis=(1, 2))[:, :: strides[0], :: strides[1]]
            rows = windows.transpose(0, 1, 2, 4, 5, 3).reshape(x.shape[0] * oh * ow, kh * kw * channels)
            result = (rows @ matrix).reshape(x.shape[0], oh, ow, out_channels)
            return [result + bias if bias is not None else result]

        return run


class Kn2rowConv(UngroupedConv):
    name, layout = "numpy:kn2row", "nchw"

    def prepare(self, layer: Layer) -> Kernel:
        strides, pads, weights, bias, oh, ow = self.unpack(layer)
        out_channels, channels, kh, kw = weights.shape
        taps = [(i, j, np.ascontiguousarray(weights[:, :, i, j])) for i in range(kh) for j in range(kw)]
        sh, sw = strides

        def run(inputs):
            x = padded(inputs[0], pads, (2, 3))
            result = np.zeros((x.shape[0], out_channels, oh * ow), dtype=x.dtype)
            for i, j, tap in taps:
                shifted = x[:, :, i : i + sh * oh : sh, j : j + sw * ow : sw].reshape(x.shape[0], channels, oh * ow)
                result += np.matmul(tap, shifted)
            result = result.reshape(x.shape[0], out_channels, oh, ow)
            return [result + bias.reshape(1, -1, 1, 1) if bias is not None else result]

        return run


class NumpyDense(Primitive):
    """Gemm / MatMul with constant weights on 2-D activations."""

    name, library, layout = "numpy:gemm", "numpy", "nchw"

    def supports(self, layer: Layer) -> bool:
        if layer.op_type not in ("Gemm", "MatMul") or 1 not in layer.constants or len(layer.input_shapes[0]) != 2:
            return False
        return layer.op_type == "MatMul" or not layer.attribute("transA", 0)

    def prepare(self, layer: Layer) -> Kernel:
        weights = layer.constants[1]
        if layer.op_type == "Gemm":
            weights = (weights.T if layer.attribute("transB", 0) else weights) * layer.attribute("alpha", 1.0)
            bias = layer.constants.get(2)
            bias = None if bias is None else bias * layer.attribute("beta", 1.0)
        else:
            bias = None
        weights = np.ascontiguousarray(weights, dtype=np.float32)

        def run(inputs):
            result = inputs[0] @ weights
            return [result + bias if bias is not None else result]

        return run


UNARY = {
    "Relu": lambda x, layer: np.maximum(x, 0, dtype=x.dtype),
    "Clip": lambda x, layer: np.clip(x, *clip_bounds(layer)),
    "Sigmoid": lambda x, layer: 1 / (1 + np.exp(-x)),
}


def clip_bounds(layer: Layer) -> tuple[float, float]:
    low = layer.constants.get(1, layer.attribute("min", -np.inf))
    high = layer.constants.get(2, layer.attribute("max", np.inf))
    return float(np.asarray(low)), float(np.asarray(high))


class Elementwise(Primitive):
    """Layout-agnostic element-wise layers (Relu, Clip, Sigmoid; Add of two equal-shape activations)."""

    library = "numpy"

    def supports(self, layer: Layer) -> bool:
        if layer.op_type in UNARY:
            return len(layer.inputs) == 1
        return layer.op_type == "Add" and len(layer.inputs) == 2 and len(set(layer.input_shapes)) == 1

    def prepare(self, layer: Layer) -> Kernel:
        if layer.op_type == "Add":
            return lambda inputs: [inputs[0] + inputs[1]]
        function = UNARY[layer.op_type]
        return lambda inputs: [function(inputs[0], layer)]


class ElementwiseNCHW(Elementwise):
    name, layout = "numpy:elementwise", "nchw"


class ElementwiseNHWC(Elementwise):
    name, layout = "numpy:elementwise_nhwc", "nhwc"


class Concat(Primitive):
    """Concat of 4-D activations along channels, in either layout."""

    library = "numpy"

    def supports(self, layer: Layer) -> bool:
        rank = len(layer.output_shapes[0])
        return layer.op_type == "Concat" and rank == 4 and int(layer.attribute("axis", 0)) % rank == 1

    def prepare(self, layer: Layer) -> Kernel:
        axis = 1 if self.layout == "nchw" else 3
        return lambda inputs: [np.concatenate(inputs, axis=axis)]


class ConcatNCHW(Concat):
    name, layout = "numpy:concat", "nchw"


class ConcatNHWC(Concat):
    name, layout = "numpy:concat_nhwc", "nhwc"
