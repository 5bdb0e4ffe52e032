"""TVM backend: Relax ONNX frontend, default (untuned) build for the target, Relax VM."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from rlcompile import tvm_bridge
from rlcompile.backends.base import Backend, Inputs, Session
from rlcompile.errors import ModelError
from rlcompile.models import LoadedModel
from rlcompile.models.onnx_model import first_line
from rlcompile.tvm_bridge import tvm


def to_numpy(value) -> list[np.ndarray]:
    """Flatten a VM result (a tensor or a nested tuple of tensors) into NumPy arrays."""
    if hasattr(value, "numpy"):
        return [value.numpy()]
    return [array for item in value for array in to_numpy(item)]


class TvmSession(Session):
    def __init__(self, executable, device, input_names: list[str], prepare_seconds: float) -> None:
        self.vm = tvm.relax.VirtualMachine(executable, device)
        self.device = device
        self.input_names = input_names
        self.prepare_seconds = prepare_seconds

    def place(self, inputs: Inputs) -> list:
        return [tvm.runtime.tensor(np.ascontiguousarray(inputs[name]), self.device) for name in self.input_names]

    def run(self, inputs: Inputs) -> list[np.ndarray]:
        return to_numpy(self.vm["main"](*self.place(inputs)))

    def timer(self, inputs: Inputs) -> Callable[[], None]:
        arguments = self.place(inputs)
        main = self.vm["main"]
        device = self.device

        def run_once() -> None:
            main(*arguments)
            device.sync()

        return run_once


class TvmBackend(Backend):
    """TVM's default build (no tuning) for ``llvm`` (this CPU) or ``cuda``.

    An executable built elsewhere (e.g. with tuned records by the kernel level) can be passed as
    ``executable`` to run it through the same interface.
    """

    name = "tvm"

    def __init__(self, target: str = "llvm") -> None:
        self.target_text = target
        self.target = tvm_bridge.resolve_target(target)

    def build(self, model: LoadedModel):
        """Import and compile with the target's default Relax pipeline."""
        module = tvm_bridge.import_onnx(model)
        try:
            with self.target:
                return tvm.compile(module, target=self.target)
        except Exception as error:
            raise ModelError(f"TVM cannot build {model.name} for {self.target_text}: {first_line(error)}") from None

    def prepare(self, model: LoadedModel) -> TvmSession:
        started = time.perf_counter()
        executable = self.build(model)
        return TvmSession(
            executable,
            tvm_bridge.target_device(self.target),
            [spec.name for spec in model.inputs],
            time.perf_counter() - started,
        )

    def describe(self) -> str:
        return f"tvm ({self.target_text}, untuned, {self.threads()} threads)"

    def threads(self) -> int:
        return tvm_bridge.tvm_threads()
