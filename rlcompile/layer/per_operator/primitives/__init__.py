"""Every primitive the layer level can choose from, by name (``library:variant``)."""

from __future__ import annotations

from rlcompile.errors import check_choice
from rlcompile.layer.per_operator.network import Layer
from rlcompile.layer.per_operator.primitives.base import LAYOUTS, THREADS, Kernel, Primitive, convert, thread_limit
from rlcompile.layer.per_operator.primitives.numpy_lowering import (
    ConcatNCHW,
    ConcatNHWC,
    ElementwiseNCHW,
    ElementwiseNHWC,
    Im2colConv,
    Im2rowConv,
    Kn2rowConv,
    NumpyDense,
)
from rlcompile.layer.per_operator.primitives.ort import OrtBasic, OrtNchwc
from rlcompile.layer.per_operator.primitives.torch_cpu import (
    Im2colBlasConv,
    NnpackConv,
    OneDnnConv,
    OneDnnConvChannelsLast,
    TorchPoolNCHW,
    TorchPoolNHWC,
)

PRIMITIVE_CLASSES: tuple[type[Primitive], ...] = (
    OrtBasic, OrtNchwc, OneDnnConv, OneDnnConvChannelsLast, Im2colBlasConv, NnpackConv, TorchPoolNCHW,
    TorchPoolNHWC, Im2colConv, Im2rowConv, Kn2rowConv, NumpyDense, ElementwiseNCHW, ElementwiseNHWC, ConcatNCHW,
    ConcatNHWC,
)  # fmt: skip
#: The fallback that runs any layer (and the reference every other primitive is checked against).
DEFAULT = "ort:basic"


def all_primitives() -> list[Primitive]:
    return [cls() for cls in PRIMITIVE_CLASSES]


def create(name: str) -> Primitive:
    by_name = {cls.name: cls for cls in PRIMITIVE_CLASSES}
    check_choice("primitive", name, by_name)
    return by_name[name]()


def candidates(layer: Layer) -> list[Primitive]:
    """The primitives that claim ``layer`` (the default always does)."""
    return [primitive for primitive in all_primitives() if primitive.supports(layer)]


__all__ = [
    "DEFAULT",
    "LAYOUTS",
    "PRIMITIVE_CLASSES",
    "THREADS",
    "Kernel",
    "Primitive",
    "all_primitives",
    "candidates",
    "convert",
    "create",
    "thread_limit",
]
