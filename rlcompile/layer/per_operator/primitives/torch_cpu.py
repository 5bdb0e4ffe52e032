"""PyTorch's CPU convolutions and pooling, called directly so each library is chosen explicitly:
oneDNN (``torch.mkldnn_convolution``, NCHW and channels-last), im2col + BLAS
(``torch._C._nn.thnn_conv2d``) and NNPACK (``torch._nnpack_spatial_convolution``, where the CPU has it).

Activations cross the boundary without copies: ``torch.from_numpy`` shares memory, and an NHWC numpy
array is an NCHW tensor with channels-last strides after ``permute``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from rlcompile.layer.per_operator.network import Layer
from rlcompile.layer.per_operator.primitives.base import Kernel, Primitive, conv_bias, conv_geometry


def to_torch(array: np.ndarray, layout: str) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    return tensor.permute(0, 3, 1, 2) if layout == "nhwc" and array.ndim == 4 else tensor


def to_numpy(tensor: torch.Tensor, layout: str) -> np.ndarray:
    if layout == "nhwc" and tensor.dim() == 4:
        tensor = tensor.permute(0, 2, 3, 1)
    return tensor.contiguous().numpy()


def symmetric_padding(pads: tuple[int, ...]) -> list[int] | None:
    """torch pads both sides alike: ONNX (top, left, bottom, right) must be symmetric."""
    return [pads[0], pads[1]] if pads[0] == pads[2] and pads[1] == pads[3] else None


class TorchConv(Primitive):
    library = "torch"
    max_group: int | None = None  # None: any grouping

    def supports(self, layer: Layer) -> bool:
        geometry = conv_geometry(layer)
        if geometry is None or symmetric_padding(geometry[1]) is None:
            return False
        return self.max_group is None or (geometry[3] == 1 and geometry[2] == (1, 1))

    def prepare(self, layer: Layer) -> Kernel:
        strides, pads, dilations, group = conv_geometry(layer)
        padding = symmetric_padding(pads)
        weights = torch.tensor(layer.constants[1])
        if self.layout == "nhwc":
            weights = weights.contiguous(memory_format=torch.channels_last)
        bias = conv_bias(layer)
        bias = torch.tensor(bias) if bias is not None else torch.zeros(weights.shape[0])
        convolve = self.convolution(weights, bias, list(strides), padding, list(dilations), group)
        layout = self.layout

        def run(inputs):
            with torch.inference_mode():
                return [to_numpy(convolve(to_torch(inputs[0], layout)), layout)]

        return run

    def convolution(self, weights, bias, strides, padding, dilations, group):
        raise NotImplementedError


class OneDnnConv(TorchConv):
    name, layout = "torch:onednn", "nchw"

    def convolution(self, weights, bias, strides, padding, dilations, group):
        return lambda x: torch.mkldnn_convolution(x, weights, bias, padding, strides, dilations, group)


class OneDnnConvChannelsLast(OneDnnConv):
    name, layout = "torch:onednn_nhwc", "nhwc"


class Im2colBlasConv(TorchConv):
    name, layout, max_group = "torch:im2col_blas", "nchw", 1

    def convolution(self, weights, bias, strides, padding, dilations, group):
        kernel = list(weights.shape[2:])
        return lambda x: torch._C._nn.thnn_conv2d(x, weights, kernel, bias, strides, padding)


class NnpackConv(TorchConv):
    name, layout, max_group = "torch:nnpack", "nchw", 1

    def supports(self, layer: Layer) -> bool:
        return torch._nnpack_available() and super().supports(layer)

    def convolution(self, weights, bias, strides, padding, dilations, group):
        pads = [padding[1], padding[1], padding[0], padding[0]]
        return lambda x: torch._nnpack_spatial_convolution(x, weights, bias, pads, strides)

    def prepare(self, layer: Layer) -> Kernel:
        """NNPACK refuses some shapes on some CPUs only when called: try once so a refusal shows up here."""
        kernel = super().prepare(layer)
        kernel([np.zeros(layer.input_shapes[0], np.float32)])
        return kernel


class TorchPool(Primitive):
    """MaxPool / AveragePool / GlobalAveragePool in either layout."""

    library = "torch"

    def supports(self, layer: Layer) -> bool:
        if len(layer.input_shapes) != 1 or len(layer.input_shapes[0]) != 4:
            return False
        if layer.op_type == "GlobalAveragePool":
            return True
        if layer.op_type not in ("MaxPool", "AveragePool") or len(layer.outputs) != 1:
            return False
        kernel = layer.attribute("kernel_shape")
        padding = symmetric_padding(layer.attribute("pads", (0, 0, 0, 0)))
        fits = padding is not None and all(2 * p <= k for p, k in zip(padding, kernel, strict=True))
        return fits and str(layer.attribute("auto_pad", "NOTSET")) == "NOTSET" and layer.attribute("dilations") in (
            None, (1, 1))  # fmt: skip

    def prepare(self, layer: Layer) -> Kernel:
        layout = self.layout
        if layer.op_type == "GlobalAveragePool":
            pool = lambda x: F.adaptive_avg_pool2d(x, 1)  # noqa: E731
        else:
            kernel = list(layer.attribute("kernel_shape"))
            strides = list(layer.attribute("strides", (1, 1)))
            padding = symmetric_padding(layer.attribute("pads", (0, 0, 0, 0)))
            ceil = bool(layer.attribute("ceil_mode", 0))
            if layer.op_type == "MaxPool":
                pool = lambda x: F.max_pool2d(x, kernel, strides, padding, ceil_mode=ceil)  # noqa: E731
            else:
                include = bool(layer.attribute("count_include_pad", 0))
                pool = lambda x: F.avg_pool2d(x, kernel, strides, padding, ceil, include)  # noqa: E731

        def run(inputs):
            with torch.inference_mode():
                return [to_numpy(pool(to_torch(inputs[0], layout)), layout)]

        return run


class TorchPoolNCHW(TorchPool):
    name, layout = "torch:pool", "nchw"


class TorchPoolNHWC(TorchPool):
    name, layout = "torch:pool_nhwc", "nhwc"
