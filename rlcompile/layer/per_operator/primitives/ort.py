"""ONNX Runtime on one layer: the default that runs any operator, and MLAS's two convolution paths.

``ort:basic`` runs the layer as ONNX Runtime's plain NCHW kernel (MLAS GEMM-based convolution);
``ort:nchwc`` lets ONNX Runtime apply its NCHWc layout transform (blocked channels, with its own
reorders at the layer's boundary), which is how ORT_ENABLE_ALL runs convolutions on x86.
"""

from __future__ import annotations

from rlcompile.graph.cost import subgraph_with_feeds
from rlcompile.layer.per_operator.network import Layer
from rlcompile.layer.per_operator.primitives.base import THREADS, Kernel, Primitive
from rlcompile.runtimes.ort import create_session, session_options


class OrtLayer(Primitive):
    library, layout = "ort", "nchw"
    opt_level = "basic"

    def supports(self, layer: Layer) -> bool:
        return True

    def prepare(self, layer: Layer) -> Kernel:
        proto, _ = subgraph_with_feeds([layer.node], layer.opsets)
        options = session_options(self.opt_level, THREADS["count"])
        # One session per layer: idle sessions must not spin on the cores the next layer needs.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = create_session(proto.SerializeToString(), options, layer.name)
        names = [f"input{position}" for position in layer.activation_positions]

        def run(inputs):
            return session.run(None, dict(zip(names, inputs, strict=True)))

        return run


class OrtBasic(OrtLayer):
    name = "ort:basic"


class OrtNchwc(OrtLayer):
    name, opt_level = "ort:nchwc", "all"

    def supports(self, layer: Layer) -> bool:
        return layer.op_type == "Conv"
