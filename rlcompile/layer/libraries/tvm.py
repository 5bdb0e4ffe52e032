"""TVM: one Relax module per segment, with a kernel-level tuning database when one is given.

Untuned TVM schedules are tens of times slower than the libraries on CPU, so TVM takes part only
when asked (``--libraries ...,tvm`` or ``--tuning-db WORK_DIR``). With a tuning database TVM compiles
only segments whose every kernel has a tuning record (a segment with an untuned kernel is refused,
so nothing untuned reaches a plan); a tuned kernel that is still slower than a library loses the
comparison and is not chosen.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from rlcompile.layer.libraries.base import Library, Runner
from rlcompile.models.onnx_model import LoadedModel, graph_inputs


class UntunedError(RuntimeError):
    """A segment has kernels without a tuning record."""


def require_tuned(model: LoadedModel, work_dir, target) -> None:
    from rlcompile.kernel.artifact import tuned_coverage

    tuned, total = tuned_coverage(model, work_dir, target)
    if tuned < total:
        raise UntunedError(f"{total - tuned} of {total} TVM kernels have no tuning record")


class TvmRunner(Runner):
    def __init__(self, executable) -> None:
        from rlcompile.backends.tvm import to_numpy
        from rlcompile.tvm_bridge import tvm

        self.executable = executable
        self.device = tvm.cpu(0)
        self.main = tvm.relax.VirtualMachine(executable, self.device)["main"]
        self.to_numpy = to_numpy
        self.tensor = tvm.runtime.tensor

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        arguments = [self.tensor(np.ascontiguousarray(array), self.device) for array in inputs]
        return self.to_numpy(self.main(*arguments))


class TvmLibrary(Library):
    name = "tvm"

    def __init__(self, tuning_db: Path | None = None, target: str = "llvm") -> None:
        self.tuning_db = tuning_db
        self.target = target

    def compile(self, segment: onnx.ModelProto, threads: int, exclusive: bool = False) -> Runner:
        from rlcompile.backends.tvm import TvmBackend
        from rlcompile.kernel.artifact import build_executable
        from rlcompile.kernel.workdir import WorkDir
        from rlcompile.tvm_bridge import resolve_target

        model = LoadedModel(segment.graph.name or "segment", segment, graph_inputs(segment), "segment")
        if self.tuning_db is None:
            return TvmRunner(TvmBackend(self.target).build(model))
        work_dir, target = WorkDir(self.tuning_db, self.target), resolve_target(self.target)
        require_tuned(model, work_dir, target)
        return TvmRunner(build_executable(model, work_dir, target))

    def save(self, runner: Runner, stem: Path) -> list[str]:
        path = stem.with_suffix(".so")
        runner.executable.export_library(str(path))
        return [path.name]

    def load(self, segment: onnx.ModelProto, stem: Path, files: Sequence[str], threads: int,
             exclusive: bool = False) -> Runner:  # fmt: skip
        from rlcompile.tvm_bridge import tvm

        library = [name for name in files if name.endswith(".so")]
        if not library:
            return self.compile(segment, threads, exclusive)
        return TvmRunner(tvm.runtime.load_module(str(stem.parent / library[0])))
