"""What a primitive is: one library's implementation of one kind of layer, in one tensor layout.

A primitive consumes and produces 4-D activations in its ``layout`` (``nchw`` or ``nhwc``; other ranks
have no layout), and :meth:`Primitive.prepare` turns a layer into a callable that takes the layer's
activation inputs (numpy arrays, already in that layout) and returns its outputs. Preparing may pack
weights; calling must not allocate more than the result. Converting between layouts is what the
planner pays for between layers (QS-DNN's "compatibility layers").
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

from rlcompile.layer.per_operator.network import Layer

LAYOUTS = ("nchw", "nhwc")
#: Threads every library may use. Libraries keep their own thread pools, and on a small machine the
#: idle pools of one library spin on the cores the next layer's library needs (measured: 10-20 ms lost
#: per switch on 2 cores), so the layer level runs single-threaded by default, as the seed did.
THREADS = {"count": 1}


@contextlib.contextmanager
def thread_limit(count: int):
    """Limit torch, BLAS/OpenMP pools and (through :data:`THREADS`) ONNX Runtime sessions to ``count``."""
    import torch
    from threadpoolctl import threadpool_limits

    previous_torch, previous_count = torch.get_num_threads(), THREADS["count"]
    torch.set_num_threads(count)
    THREADS["count"] = count
    try:
        with threadpool_limits(count):
            yield
    finally:
        torch.set_num_threads(previous_torch)
        THREADS["count"] = previous_count


Kernel = Callable[[Sequence[np.ndarray]], list[np.ndarray]]


def convert(array: np.ndarray, source: str, target: str) -> np.ndarray:
    """``array`` in ``target`` layout (4-D only; anything else is returned as is)."""
    if source == target or array.ndim != 4:
        return array
    axes = (0, 2, 3, 1) if target == "nhwc" else (0, 3, 1, 2)
    return np.ascontiguousarray(array.transpose(axes))


class Primitive(ABC):
    """One implementation of some layers; ``name`` is ``library:variant``."""

    name: ClassVar[str]
    library: ClassVar[str]
    layout: ClassVar[str] = "nchw"

    @abstractmethod
    def supports(self, layer: Layer) -> bool: ...

    @abstractmethod
    def prepare(self, layer: Layer) -> Kernel: ...

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


def conv_geometry(layer: Layer) -> tuple[tuple[int, int], tuple[int, int, int, int], tuple[int, int], int] | None:
    """(strides, pads, dilations, group) of a 2-D Conv with constant weights, or ``None``."""
    if layer.op_type != "Conv" or 1 not in layer.constants or len(layer.input_shapes) != 1:
        return None
    if len(layer.input_shapes[0]) != 4 or str(layer.attribute("auto_pad", "NOTSET")) != "NOTSET":
        return None
    return (
        tuple(layer.attribute("strides", (1, 1))),
        tuple(layer.attribute("pads", (0, 0, 0, 0))),
        tuple(layer.attribute("dilations", (1, 1))),
        int(layer.attribute("group", 1)),
    )


def conv_bias(layer: Layer) -> np.ndarray | None:
    return layer.constants.get(2)
