"""OpenVINO's CPU plugin: ``compile_model`` on the model, latency hint, fp32.

OpenVINO picks bf16 by default on CPUs that have it (AVX-512 BF16 / AMX), which is faster and less
exact; runtimes are compared computing the same thing, so the precision hint follows the options
(fp32 unless asked otherwise).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import onnx

from rlcompile.errors import ModelError, first_line
from rlcompile.runtimes.base import NATIVE, Runner, Runtime, RuntimeOptions, graph_input_names, model_name

#: OpenVINO's name for each precision of :class:`RuntimeOptions`.
PRECISION_HINTS = {"fp32": "f32"}


def openvino_config(options: RuntimeOptions) -> dict:
    return {
        "INFERENCE_NUM_THREADS": options.thread_count,
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": PRECISION_HINTS[options.precision],
        "ENABLE_CPU_PINNING": False,  # pinned threads would fight the other libraries' pools
    }


class OpenVinoRunner(Runner):
    def __init__(self, compiled, input_names: list[str], prepare_seconds: float = 0.0) -> None:
        self.request = compiled.create_infer_request()
        self.count = len(compiled.outputs)
        self.input_names = input_names
        self.prepare_seconds = prepare_seconds

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        results = self.request.infer(list(inputs), share_inputs=True)
        return [results[index] for index in range(self.count)]


class OpenVinoRuntime(Runtime):
    name = "openvino"

    def unavailable(self) -> str | None:
        try:
            import openvino  # noqa: F401
        except ImportError as error:
            return f"openvino is not installed ({error})"
        return None

    def compile(self, model: onnx.ModelProto, options: RuntimeOptions = NATIVE,
                name: str | None = None) -> OpenVinoRunner:  # fmt: skip
        import openvino as ov

        started, core = time.perf_counter(), ov.Core()
        try:
            compiled = core.compile_model(core.read_model(model.SerializeToString()), "CPU", openvino_config(options))
        except RuntimeError as error:
            label = model_name(model, name, "segment")
            raise ModelError(f"OpenVINO cannot compile {label}: {first_line(error)}") from None
        return OpenVinoRunner(compiled, graph_input_names(model), time.perf_counter() - started)
