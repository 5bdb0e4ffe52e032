"""Apache TVM: the Relax ONNX frontend, built for a target, run by the Relax VM.

Untuned, TVM's default schedules are tens of times slower than the libraries on CPU. With tuning
records (``tuning``: the kernel level's :class:`~rlcompile.kernel.artifact.TuningRecords`, handed in by
whoever holds a work directory), every kernel gets its best measured schedule and a model with an
untuned kernel is refused (:class:`UntunedError`), so nothing untuned reaches a plan. What TVM
compiled is saved as a shared library beside the model's ONNX file and loaded back without rebuilding.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import onnx

from rlcompile.errors import ModelError, first_line
from rlcompile.runtimes.base import NATIVE, Feeds, Runner, Runtime, RuntimeOptions, graph_input_names, model_name
from rlcompile.tvm_bridge import import_onnx, resolve_target, target_device, tvm, tvm_threads


class UntunedError(RuntimeError):
    """A model has kernels without a tuning record."""


class TuningRecords(Protocol):
    """Builds a model with the best tuned schedule of every kernel (raises :class:`UntunedError` when one
    has no record)."""

    def build(self, model: onnx.ModelProto, name: str, target: tvm.target.Target): ...


def to_numpy(value) -> list[np.ndarray]:
    """Flatten a VM result (a tensor or a nested tuple of tensors) into NumPy arrays."""
    if hasattr(value, "numpy"):
        return [value.numpy()]
    return [array for item in value for array in to_numpy(item)]


class TvmRunner(Runner):
    """A Relax VM executable (built now, or a loaded shared library) on its device."""

    def __init__(self, executable, device, input_names: list[str], prepare_seconds: float = 0.0) -> None:
        self.executable = executable
        self.device = device
        self.main = tvm.relax.VirtualMachine(executable, device)["main"]
        self.input_names = input_names
        self.prepare_seconds = prepare_seconds

    def place(self, inputs: Sequence[np.ndarray]) -> list:
        return [tvm.runtime.tensor(np.ascontiguousarray(array), self.device) for array in inputs]

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return to_numpy(self.main(*self.place(inputs)))

    def timer(self, feeds: Feeds) -> Callable[[], object]:
        arguments, main, device = self.place([feeds[name] for name in self.input_names]), self.main, self.device

        def run_once() -> None:
            main(*arguments)
            device.sync()

        return run_once


class TvmRuntime(Runtime):
    """TVM for ``llvm`` (this CPU) or ``cuda``; default schedules, or tuned ones with ``tuning``."""

    name = "tvm"
    needs_static_shapes = True

    def __init__(self, target: str = "llvm", tuning: TuningRecords | None = None) -> None:
        self.target_text = target
        self.target = resolve_target(target)
        self.tuning = tuning

    def build(self, model: onnx.ModelProto, name: str | None = None):
        """The executable for ``model``: tuned when there are records, the target's default pipeline otherwise."""
        name = model_name(model, name, "segment")
        if self.tuning is not None:
            return self.tuning.build(model, name, self.target)
        module = import_onnx(model, name)
        try:
            with self.target:
                return tvm.compile(module, target=self.target)
        except Exception as error:
            raise ModelError(f"TVM cannot build {name} for {self.target_text}: {first_line(error)}") from None

    def compile(self, model: onnx.ModelProto, options: RuntimeOptions = NATIVE, name: str | None = None) -> TvmRunner:
        self.check_precision(options)
        started = time.perf_counter()
        executable = self.build(model, name)
        return self.runner(executable, graph_input_names(model), time.perf_counter() - started)

    def runner(self, executable, input_names: list[str], prepare_seconds: float = 0.0) -> TvmRunner:
        """Run an executable built here or elsewhere (a kernel artefact's library) through this runtime."""
        return TvmRunner(executable, target_device(self.target), input_names, prepare_seconds)

    def save(self, runner: Runner, stem: Path) -> list[str]:
        path = stem.with_suffix(".so")
        runner.executable.export_library(str(path))
        return [path.name]

    def load(self, model: onnx.ModelProto, stem: Path, files: Sequence[str], options: RuntimeOptions = NATIVE,
             ) -> Runner:  # fmt: skip
        library = [name for name in files if name.endswith(".so")]
        if not library:
            return self.compile(model, options)
        return self.runner(tvm.runtime.load_module(str(stem.parent / library[0])), graph_input_names(model))

    def describe(self, options: RuntimeOptions = NATIVE) -> str:
        return f"tvm ({self.target_text}, {'tuned' if self.tuning else 'untuned'}, {self.threads(options)} threads)"

    def threads(self, options: RuntimeOptions = NATIVE) -> int:
        return tvm_threads()
