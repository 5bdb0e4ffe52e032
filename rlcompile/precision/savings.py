"""What lowering each group saves, measured: the runtime's own per-kernel counters on the float model and on the
all-int8 one, called in turns.

A group's share of the MACs times what lowering everything saves is far from what a group saves where int8 has
no dot-product instruction: OpenVINO on a 2-core Zen 3 (AVX2, no VNNI), PaddleOCR's recogniser all in int8, its
1x1 convolutions ran in 0.51x their fp32 time, the depthwise ones in 0.90x, the fully connected layers in 1.7x and
the first convolution (3 input channels) in 3.6x. A group whose int8 kernel is not faster only adds error; the
searches leave it in float (:func:`rlcompile.precision.searches.base.paying_units`) and the proxy's knapsack
weighs each group by what it saves here.

Each executed kernel is charged to the fusion group whose ONNX nodes it runs (the runtime names what it fused:
OpenVINO's ``originalLayersNames``); kernels of no group's nodes (a standalone quantization, a reorder) are charged
to none, so the savings are what the groups' own kernels save, not what the plan's conversions cost: every plan
is measured end to end anyway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from rlcompile.precision.space import Unit
from rlcompile.runtimes import Runtime
from rlcompile.runtimes.base import RuntimeOptions

#: Calls of each model whose median per-kernel time is taken (the two models in turns).
SAVING_ROUNDS = 15


def unit_savings(runtime: Runtime, float_model: onnx.ModelProto, lowered: onnx.ModelProto, groups: Sequence,
                 units: Sequence[Unit], feeds: Mapping[str, np.ndarray],
                 options: RuntimeOptions) -> np.ndarray | None:  # fmt: skip
    """Each unit's group's time in ``float_model`` less its time in ``lowered`` (ms; negative where int8 is slower),
    or ``None`` where ``runtime`` keeps no per-kernel counters. Raises what the runtime raises."""
    found = runtime.layer_times([float_model, lowered], feeds, options, SAVING_ROUNDS)
    if found is None:
        return None
    exact, quantized = (group_times(layers, groups) for layers in found)
    return np.array([exact[unit.index] - quantized[unit.index] for unit in units])


def group_times(layers: Sequence[tuple[frozenset[str], float]], groups: Sequence) -> np.ndarray:
    """Each group's summed kernel time: a kernel is charged to the group that holds most of the nodes it runs
    (the first of them on a tie), to none when it runs none of a group's nodes."""
    owner = {name: index for index, group in enumerate(groups) for name in group.nodes}
    times = np.zeros(len(groups))
    for names, ms in layers:
        counts = np.bincount([owner[name] for name in names if name in owner], minlength=len(groups))
        if counts.any():
            times[int(np.argmax(counts))] += ms
    return times
