"""Features that carry across shapes and operators: what a pretrained cost model reads.

A configuration's knob indices mean nothing on another task, and the decision features of
:mod:`rlcompile.kernel.transfer` line up only between tasks of one design-space structure. These do
line up everywhere: MetaSchedule's multi-level tiling on a CPU splits every spatial loop into four
levels and every reduction loop into two ("SSRSRS"), so a schedule is described by the tile it makes
at each level (log2 of the product of the spatial, and of the reduction, factors per level), the
vector tile of the innermost loop, the unroll step, where the cache write goes (the design space)
and the compute location, next to the task's own size (log2 FLOPs, extents). A tile knob of another
arity counts as "other" work.

Every config-dependent feature is a sum over knobs of a term that depends on that knob's value alone
(log-products are sums of logs), so the features of a batch are one table look-up per knob and a sum:
a search can rank thousands of configurations a step with them.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence

import numpy as np

from rlcompile.kernel.space import Config, KnobSpace

#: Bump when the features change: a model trained on another version is refused.
FEATURE_VERSION = 1
#: Tile arities of MetaSchedule's CPU multi-level tiling: spatial loops in 4 levels, reduction loops in 2.
SPATIAL_PARTS, REDUCTION_PARTS = 4, 2
MAX_SPACES = 3

TASK_FEATURES = (
    "log2 flops", "spatial loops", "reduction loops", "log2 spatial extent", "log2 reduction extent",
    "log2 last spatial extent", "log2 last reduction extent", "design spaces", "log2 flops per output",
    "compute-location knobs", "other tiles",
)  # fmt: skip
CONFIG_FEATURES = (
    "log2 spatial l0", "log2 spatial l1", "log2 spatial l2", "log2 spatial l3",
    "log2 reduction l0", "log2 reduction l1",
    "log2 vector tile", "vector tile % 16", "vector tile % 8", "log2 last spatial l2",
    "log2 previous spatial l3", "log2 last reduction l1",
    "log2 spatial l2*l3", "log2 spatial l1*l2*l3", "log2 register work",
    "log2 unroll", "other categorical", "space index", "space 0", "space 1", "space 2",
    "compute location", "inline", "at root", "log2 other innermost",
)  # fmt: skip
FEATURE_NAMES = TASK_FEATURES + CONFIG_FEATURES


def column(name: str) -> int:
    return FEATURE_NAMES.index(name)


def tile_parts(knob_name: str) -> tuple[int, int]:
    """(extent, parts) of a tile knob named ``tile3 extent 56 into 4``."""
    words = knob_name.split()
    return int(words[2]), int(words[4])


def categorical_candidates(knob_name: str) -> list[int]:
    """The candidate values of a categorical knob named ``categorical8 [0, 16, 64, 512]``."""
    return [int(v) for v in ast.literal_eval(knob_name.split(" ", 1)[1])]


class PortableFeatures:
    """The portable features of one task's configurations, as a constant row plus a table per knob."""

    def __init__(self, space: KnobSpace, flops: float) -> None:
        tiles = [(position, *tile_parts(knob.name)) for position, knob in enumerate(space.knobs) if knob.kind == "tile"]
        spatial = [t for t in tiles if t[2] == SPATIAL_PARTS]
        reduction = [t for t in tiles if t[2] == REDUCTION_PARTS]
        self.constant = np.zeros(len(FEATURE_NAMES), dtype=np.float32)
        spatial_extent = sum(math.log2(extent) for _, extent, _ in spatial)
        self._set(self.constant, {
            "log2 flops": math.log2(flops + 1), "spatial loops": len(spatial), "reduction loops": len(reduction),
            "log2 spatial extent": spatial_extent,
            "log2 reduction extent": sum(math.log2(extent) for _, extent, _ in reduction),
            "log2 last spatial extent": math.log2(spatial[-1][1]) if spatial else 0.0,
            "log2 last reduction extent": math.log2(reduction[-1][1]) if reduction else 0.0,
            "design spaces": len(space.traces), "log2 flops per output": math.log2(flops + 1) - spatial_extent,
            "compute-location knobs": sum(k.kind == "compute_location" for k in space.knobs),
            "other tiles": len(tiles) - len(spatial) - len(reduction),
        })  # fmt: skip
        roles = {position: "spatial" for position, _, _ in spatial}
        roles |= {position: "reduction" for position, _, _ in reduction}
        last_spatial = spatial[-1][0] if spatial else None
        previous_spatial = spatial[-2][0] if len(spatial) > 1 else None
        last_reduction = reduction[-1][0] if reduction else None
        self.tables = [self._table(position, knob, roles.get(position), position == last_spatial,
                                   position == previous_spatial, position == last_reduction)
                       for position, knob in enumerate(space.knobs)]  # fmt: skip

    @staticmethod
    def _set(row: np.ndarray, values: dict[str, float]) -> None:
        for name, value in values.items():
            row[column(name)] += value

    def _table(self, position: int, knob, role: str | None, last_spatial: bool, previous_spatial: bool,
               last_reduction: bool) -> np.ndarray:  # fmt: skip
        """One row per value of the knob: what that value adds to each feature."""
        table = np.zeros((knob.size, len(FEATURE_NAMES)), dtype=np.float32)
        for index, value in enumerate(knob.values):
            row = table[index]
            if knob.kind == "tile":
                logs = [math.log2(f) for f in value]
                if role == "spatial":
                    self._set(row, {f"log2 spatial l{level}": log for level, log in enumerate(logs)})
                    self._set(row, {"log2 spatial l2*l3": logs[2] + logs[3],
                                    "log2 spatial l1*l2*l3": logs[1] + logs[2] + logs[3],
                                    "log2 register work": logs[3]})  # fmt: skip
                    if last_spatial:
                        self._set(row, {"log2 vector tile": logs[3], "vector tile % 16": float(value[3] % 16 == 0),
                                        "vector tile % 8": float(value[3] % 8 == 0),
                                        "log2 last spatial l2": logs[2]})  # fmt: skip
                    if previous_spatial:
                        self._set(row, {"log2 previous spatial l3": logs[3]})
                elif role == "reduction":
                    self._set(row, {"log2 reduction l0": logs[0], "log2 reduction l1": logs[1],
                                    "log2 register work": logs[1]})  # fmt: skip
                    if last_reduction:
                        self._set(row, {"log2 last reduction l1": logs[1]})
                else:
                    self._set(row, {"log2 other innermost": logs[-1]})
            elif knob.kind == "categorical":
                candidates = categorical_candidates(knob.name)
                if candidates[0] == 0 and len(candidates) > 1 and candidates[-1] >= 16:  # the unroll step
                    self._set(row, {"log2 unroll": math.log2(1 + candidates[value])})
                else:
                    self._set(row, {"other categorical": value / max(len(candidates) - 1, 1)})
            elif knob.kind == "space":
                self._set(row, {"space index": value / max(knob.size - 1, 1)})
                if value < MAX_SPACES:
                    self._set(row, {f"space {value}": 1.0})
            else:  # compute location: -2 inline, -1 root, else a loop position
                self._set(row, {"compute location": index / max(knob.size - 1, 1), "inline": float(value == -2),
                                "at root": float(value == -1)})  # fmt: skip
        return table

    def __call__(self, configs: Sequence[Config]) -> np.ndarray:
        """One row of :data:`FEATURE_NAMES` per configuration."""
        indices = np.asarray(configs, dtype=np.int64).reshape(len(configs), len(self.tables))
        features = np.repeat(self.constant[None, :], len(configs), axis=0)
        for position, table in enumerate(self.tables):
            features += table[indices[:, position]]
        return features
