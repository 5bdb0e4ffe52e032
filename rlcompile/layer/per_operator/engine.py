"""Runs a network layer by layer with the primitives a plan chose, converting layouts on the way.

Each activation is kept in the layout its producer wrote; a consumer that needs the other layout gets
a converted copy, made once and shared by every consumer that needs it. Model outputs are returned in
NCHW. The per-layer overhead is a few dictionary lookups and the primitive's own call.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rlcompile.errors import first_line
from rlcompile.layer.per_operator import primitives
from rlcompile.layer.per_operator.network import Network


class Engine:
    def __init__(self, network: Network, plan: Mapping[str, str]) -> None:
        self.network = network
        self.steps = []
        #: layers whose chosen primitive refused to prepare here, run on the default instead (name -> why)
        self.fallbacks: dict[str, str] = {}
        for layer in network.layers:
            primitive = primitives.create(plan[layer.name])
            try:
                kernel = primitive.prepare(layer)
            except Exception as error:  # a library refusing a layer at run time is reported, not fatal
                self.fallbacks[layer.name] = f"{primitive.name}: {first_line(error)}"
                primitive = primitives.create(primitives.DEFAULT)
                kernel = primitive.prepare(layer)
            self.steps.append((layer.inputs, layer.outputs, primitive.layout, kernel))

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        stored: dict[str, tuple[np.ndarray, str]] = {
            name: (np.asarray(feeds[name]), "nchw") for name in self.network.inputs
        }
        converted: dict[tuple[str, str], np.ndarray] = {}

        def fetch(name: str, layout: str) -> np.ndarray:
            array, own = stored[name]
            if own == layout or array.ndim != 4:
                return array
            key = (name, layout)
            if key not in converted:
                converted[key] = primitives.convert(array, own, layout)
            return converted[key]

        for inputs, outputs, layout, kernel in self.steps:
            results = kernel([fetch(name, layout) for name in inputs])
            for name, result in zip(outputs, results, strict=False):
                stored[name] = (np.asarray(result), layout)
        return [fetch(name, "nchw") for name in self.network.outputs]
