"""Deployable artefacts: a whole model compiled with the tuned records of a work directory.

``model.tar`` holds ``model.so`` (the Relax VM executable, loadable with ``tvm.runtime.load_module``),
``metadata.json`` (model, inputs, outputs, target, how many tasks were tuned, environment) and
``reference.npz`` (inputs and ONNX Runtime's outputs for them), so ``rlcompile run model.tar`` can check
the compiled model without the original file. Tasks without a tuning record keep TVM's default schedule.
"""

from __future__ import annotations

import functools
import json
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from rlcompile.errors import ModelError, RlcompileError, first_line
from rlcompile.kernel.tasks import extract_tasks, prepare_relax
from rlcompile.kernel.workdir import WorkDir
from rlcompile.machine import check_machine, environment
from rlcompile.measure import Timer
from rlcompile.models import LoadedModel, TensorSpec
from rlcompile.models.onnx_model import graph_inputs
from rlcompile.runtimes import Runner
from rlcompile.runtimes.ort import run_proto
from rlcompile.tvm_bridge import load_tensor_intrinsics, tvm

LIBRARY = "model.so"
METADATA = "metadata.json"
REFERENCE = "reference.npz"


def tuned_coverage(model: LoadedModel, work_dir: WorkDir, target: tvm.target.Target) -> tuple[int, int]:
    """How many of the model's tasks have at least one valid record in the database."""
    database = work_dir.database
    tasks = extract_tasks(model, target, work_dir.layout)
    tuned = sum(1 for task in tasks if database.has_workload(task.mod)
                and database.get_top_k(database.commit_workload(task.mod), 1))  # fmt: skip
    return tuned, len(tasks)


def build_executable(model: LoadedModel, work_dir: WorkDir, target: tvm.target.Target):
    """Compile the whole model in the work directory's layout, applying the best record of every tuned task."""
    from tvm.s_tir.meta_schedule.relax_integration import compile_relax

    load_tensor_intrinsics(target)
    try:
        return compile_relax(work_dir.database, prepare_relax(model, work_dir.layout, target), target, params=None)
    except Exception as error:
        raise ModelError(f"TVM cannot build {model.name} with the tuned records: {first_line(error)}") from None


@dataclass(frozen=True)
class TuningRecords:
    """A work directory's tuning records, as the TVM runtime builds with them
    (:class:`rlcompile.runtimes.tvm.TuningRecords`): a model with a kernel that has no record is refused."""

    work_dir: Path
    target_text: str = "llvm"

    def build(self, model: onnx.ModelProto, name: str, target: tvm.target.Target):
        from rlcompile.runtimes.tvm import UntunedError

        loaded = LoadedModel(name, model, graph_inputs(model), "segment")
        work_dir = WorkDir(self.work_dir, self.target_text)
        tuned, total = tuned_coverage(loaded, work_dir, target)
        if tuned < total:
            raise UntunedError(f"{total - tuned} of {total} TVM kernels have no tuning record")
        return build_executable(loaded, work_dir, target)


def export_artifact(model: LoadedModel, executable, target_text: str, output: Path, tuned: tuple[int, int],
                    seed: int = 0) -> Path:  # fmt: skip
    """Write ``model.tar`` with the library, metadata and ONNX Runtime reference outputs."""
    inputs = model.random_inputs(seed)
    reference = run_proto(model.proto, inputs)
    metadata = {
        "model": model.name,
        "source": model.source,
        "inputs": [{"name": s.name, "shape": [int(d) for d in s.shape], "dtype": str(s.dtype)} for s in model.inputs],
        "outputs": model.output_names,
        "target": target_text,
        "tuned_tasks": tuned[0],
        "total_tasks": tuned[1],
        "environment": environment(),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        executable.export_library(str(folder / LIBRARY))
        (folder / METADATA).write_text(json.dumps(metadata, indent=1))
        arrays = {f"input:{name}": value for name, value in inputs.items()}
        arrays |= {f"output:{index}": value for index, value in enumerate(reference)}
        np.savez(folder / REFERENCE, **arrays)
        with tarfile.open(output, "w") as archive:
            for name in (LIBRARY, METADATA, REFERENCE):
                archive.add(folder / name, arcname=name)
    return output


@dataclass
class Artifact:
    """A loaded ``model.tar``: the runtime module, its metadata and reference inputs/outputs."""

    path: Path
    library: object
    metadata: dict
    reference_inputs: dict[str, np.ndarray]
    reference_outputs: list[np.ndarray]

    @property
    def inputs(self) -> list[TensorSpec]:
        return [TensorSpec(i["name"], tuple(i["shape"]), np.dtype(i["dtype"])) for i in self.metadata["inputs"]]

    @property
    def record(self) -> dict:
        """The metadata (what :mod:`rlcompile.saved` reads of any saved result)."""
        return self.metadata

    @functools.cached_property
    def runner(self) -> Runner:
        """The library run by the TVM runtime for the artefact's target."""
        from rlcompile.runtimes.tvm import TvmRuntime

        return TvmRuntime(self.metadata["target"]).runner(self.library, [spec.name for spec in self.inputs])

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return self.runner.run(feeds)

    def timer(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        return self.runner.timer(feeds)

    def timed(self, feeds: Mapping[str, np.ndarray]) -> Timer:
        return self.runner.timed(feeds)

    def describe(self) -> str:
        meta = self.metadata
        return f"{meta['model']}, TVM {meta['target']}, {meta['tuned_tasks']}/{meta['total_tasks']} tasks tuned"


def load_artifact(path: Path) -> Artifact:
    """Unpack and load a ``model.tar`` written by :func:`export_artifact`; one from another CPU or TVM is refused."""
    try:
        with tempfile.TemporaryDirectory(prefix="rlcompile-artifact-") as scratch, tarfile.open(path) as archive:
            folder = Path(scratch)
            archive.extractall(folder, filter="data")
            metadata = json.loads((folder / METADATA).read_text())
            check_machine(metadata, path, ("apache-tvm",))
            library = tvm.runtime.load_module(str(folder / LIBRARY))  # dlopen'ed: the file may go afterwards
            with np.load(folder / REFERENCE) as stored:
                arrays = dict(stored)
    except (OSError, KeyError, RuntimeError, tarfile.TarError, ValueError) as error:
        raise RlcompileError(f"{path} is not an rlcompile artefact: {first_line(error)}") from None
    inputs = {key.split(":", 1)[1]: value for key, value in arrays.items() if key.startswith("input:")}
    outputs = [arrays[f"output:{i}"] for i in range(sum(key.startswith("output:") for key in arrays))]
    return Artifact(path, library, metadata, inputs, outputs)
