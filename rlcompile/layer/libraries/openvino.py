"""OpenVINO's CPU plugin: ``compile_model`` on the segment, latency hint, fp32.

OpenVINO picks bf16 by default on CPUs that have it (AVX-512 BF16 / AMX), which is faster and less
exact; the layer level compares libraries computing the same thing, so the precision hint is fp32.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from rlcompile.errors import ModelError
from rlcompile.layer.libraries.base import Library, Runner
from rlcompile.models.onnx_model import first_line


def openvino_config(threads: int) -> dict:
    return {
        "INFERENCE_NUM_THREADS": threads,
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": "f32",
        "ENABLE_CPU_PINNING": False,  # pinned threads would fight the other libraries' pools
    }


class OpenVinoRunner(Runner):
    def __init__(self, compiled) -> None:
        self.request = compiled.create_infer_request()
        self.count = len(compiled.outputs)

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        results = self.request.infer(list(inputs), share_inputs=True)
        return [results[index] for index in range(self.count)]


class OpenVinoLibrary(Library):
    name = "openvino"

    def unavailable(self) -> str | None:
        try:
            import openvino  # noqa: F401
        except ImportError as error:
            return f"openvino is not installed ({error})"
        return None

    def compile(self, segment: onnx.ModelProto, threads: int, exclusive: bool = False) -> Runner:
        import openvino as ov

        core = ov.Core()
        try:
            model = core.read_model(segment.SerializeToString())
            return OpenVinoRunner(core.compile_model(model, "CPU", openvino_config(threads)))
        except RuntimeError as error:
            name = segment.graph.name or "segment"
            raise ModelError(f"OpenVINO cannot compile {name}: {first_line(error)}") from None
