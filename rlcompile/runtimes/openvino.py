"""OpenVINO's CPU plugin: ``compile_model`` on the model, latency hint, fp32 unless asked for bf16.

OpenVINO picks bf16 by default on CPUs that have it (AVX-512 BF16 / AMX), which is faster and less
exact; runtimes are compared computing the same thing, so the precision hint follows the options
(fp32 unless asked otherwise). bf16 is offered only where the CPU has it (AVX512-BF16 or AMX-BF16,
detected; OpenVINO would emulate it elsewhere, slower than fp32). The hint applies to the whole
model: OpenVINO 2026.4 keeps no per-node float precision set from Python (a ``disable_fp16_compression``
or ``disable_precision_conversion`` rt_info entry, set in Python or written into the IR, is dropped on
reading and the node still runs in bf16), so a plan's fp32 islands inside bf16 cannot be expressed in
one OpenVINO model; int8 islands can (QDQ nodes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import onnx

from rlcompile.errors import ModelError, first_line
from rlcompile.machine import cpu_flags
from rlcompile.runtimes.base import NATIVE, Feeds, Runner, Runtime, RuntimeOptions, graph_input_names, model_name

#: OpenVINO's name for each precision of :class:`RuntimeOptions`.
PRECISION_HINTS = {"fp32": "f32", "bf16": "bf16"}
#: The CPU flags that give OpenVINO native bf16 arithmetic.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


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
        # inputs by index in a dict, not a list: on ocr-cls (0.6 ms a call, 2-core Zen 4) a list made each call 7%
        # slower (1.155 against 1.078 ms in one alternating run, twins 0.3% apart), the outputs taken as a tuple
        results = self.request.infer(dict(enumerate(inputs)), share_inputs=True)
        return list(results.to_tuple())

    def caller(self, names: Sequence[str]) -> Callable[[Feeds], list[np.ndarray]]:
        infer, positions = self.request.infer, list(enumerate(names))

        def call(feeds: Feeds) -> list[np.ndarray]:
            return list(infer({index: feeds[name] for index, name in positions}, share_inputs=True).to_tuple())

        return call


def layers(compiled, times: dict[str, list[float]]) -> list[tuple[frozenset[str], float]]:
    """Each executed node's original layer names (``originalLayersNames``) and median time of ``times``."""
    originals = {op.get_friendly_name(): op.get_rt_info()["originalLayersNames"].astype(str)
                 for op in compiled.get_runtime_model().get_ordered_ops()}  # fmt: skip
    return [(frozenset(filter(None, originals.get(name, name).split(","))), float(np.median(values)))
            for name, values in times.items()]  # fmt: skip


class OpenVinoRuntime(Runtime):
    name = "openvino"

    def unavailable(self) -> str | None:
        try:
            import openvino  # noqa: F401
        except ImportError as error:
            return f"openvino is not installed ({error})"
        return None

    def precisions(self) -> dict[str, str | None]:
        bf16 = None if cpu_flags() & BF16_FLAGS else "this CPU has neither AVX512-BF16 nor AMX-BF16"
        return {"fp32": None, "bf16": bf16}

    def compile(self, model: onnx.ModelProto, options: RuntimeOptions = NATIVE,
                name: str | None = None) -> OpenVinoRunner:  # fmt: skip
        return self.compile_copies(model, 1, options, name)[0]

    def layer_times(self, models: Sequence[onnx.ModelProto], feeds: Feeds, options: RuntimeOptions = NATIVE,
                    rounds: int = 15) -> list[list[tuple[frozenset[str], float]]]:  # fmt: skip
        """OpenVINO's performance counters (``PERF_COUNT``): each executed node's ``originalLayersNames`` (the
        ONNX nodes it was made from, by name; OpenVINO's own names for what its passes made of them too) and
        its median ``real_time`` over ``rounds`` calls, the models in turns, after a fifth as many warm-up calls."""
        config = {**openvino_config(options), "PERF_COUNT": True}
        compiled = [self.compiled(model, 1, options, config)[0][0] for model in models]
        requests = [each.create_infer_request() for each in compiled]
        inputs = [[feeds[name] for name in graph_input_names(model)] for model in models]
        times: list[dict[str, list[float]]] = [{} for _ in models]
        warm = max(rounds // 5, 1)
        for index in range(rounds + warm):
            for request, arrays, found in zip(requests, inputs, times, strict=True):
                request.infer(arrays)
                for entry in request.get_profiling_info() if index >= warm else ():
                    found.setdefault(entry.node_name, []).append(entry.real_time.total_seconds() * 1e3)
        return [layers(each, found) for each, found in zip(compiled, times, strict=True)]

    def compile_copies(self, model: onnx.ModelProto, count: int, options: RuntimeOptions = NATIVE,
                       name: str | None = None) -> list[OpenVinoRunner]:  # fmt: skip
        """``count`` compiled models from one reading of ``model`` (vgg19's 548 MB: about 5 s a reading, 0.4 s a
        compile, on the 2-core Zen 4 VM)."""
        return [OpenVinoRunner(compiled, graph_input_names(model), prepare_s)
                for compiled, prepare_s in self.compiled(model, count, options, openvino_config(options), name)]

    def compiled(self, model: onnx.ModelProto, count: int, options: RuntimeOptions, config: dict,
                 name: str | None = None) -> list[tuple[object, float]]:  # fmt: skip
        """``count`` OpenVINO compiled models of one reading of ``model`` under ``config``, each with the seconds its
        reading and compile took; one line (:class:`ModelError`) when OpenVINO cannot take it."""
        import openvino as ov

        self.check_precision(options)
        compiled, core = [], ov.Core()
        try:
            started = time.perf_counter()
            read = core.read_model(model.SerializeToString())
            read_s = time.perf_counter() - started
            for _ in range(count):
                started = time.perf_counter()
                compiled.append((core.compile_model(read, "CPU", config), read_s + time.perf_counter() - started))
        except RuntimeError as error:
            label = model_name(model, name, "segment")
            raise ModelError(f"OpenVINO cannot compile {label}: {first_line(error)}") from None
        return compiled
