"""A plan directory: what ``select`` and ``optimize`` return, saved so it runs again without profiling.

It is the one deployable output of every level that produces a runnable model::

    DIR/manifest.json    model (name, source, fingerprint), inputs, outputs, threads, machine and
                         versions, the segments in order (library, ONNX file, extra compiled files,
                         boundary values), the selection report (candidates, predicted and measured
                         latencies) and, from ``optimize``, every stage's decision and timings
    DIR/segments/        one ONNX model per segment, plus what a library compiled that is slow to redo
                         (a TVM shared library)
    DIR/reference.npz    random inputs and ONNX Runtime's outputs for them, to check the plan anywhere
                         (a plan below fp32: its own outputs, to check it runs as it did)
    DIR/validation.npz   a plan below fp32 only: the held-out samples and their fp32 outputs, on which
                         ``rlcompile run`` measures the plan's error again (the manifest's ``accuracy``)

``manifest.json`` is written last and removed first when a plan is replaced, so a directory that has
one is complete; other files in ``DIR`` (``optimize``'s ``work/`` folder, its report) are left alone.
:func:`load_plan` reads it back (refusing another CPU or other library versions, whose timings and
compiled code the plan does not describe), compiles the segments and returns a :class:`LoadedPlan`
whose ``run(feeds)`` runs the model.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from rlcompile import runtimes
from rlcompile.errors import RlcompileError, first_line
from rlcompile.layer.segments import CompiledSegment, Segment, SegmentEngine
from rlcompile.machine import check_machine, environment
from rlcompile.manifest import MANIFEST, Manifest, OptimizeRecord
from rlcompile.measure import Timer
from rlcompile.models.onnx_model import LoadedModel, TensorSpec
from rlcompile.precision.contract import VALIDATION
from rlcompile.runtimes import RuntimeOptions

if TYPE_CHECKING:
    from rlcompile.runtimes.serving import Pool
    from rlcompile.shapes.saved import ShapedPlan

REFERENCE = "reference.npz"
SEGMENTS = "segments"


def is_plan_dir(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def fingerprint(model: LoadedModel) -> str:
    """The model's content hash (its serialized ONNX), to recognise the same model again."""
    return hashlib.sha256(model.serialized).hexdigest()[:16]


def model_entry(model: LoadedModel) -> dict:
    return {"model": model.name, "source": model.source, "fingerprint": fingerprint(model),
            "inputs": [{"name": s.name, "shape": [int(d) for d in s.shape], "dtype": str(s.dtype)}
                       for s in model.inputs]}  # fmt: skip


def save_plan(selection, output: Path, serving: dict | None = None) -> Path:
    """Write ``selection``'s chosen plan to ``output`` (see :func:`write_plan`), with how it serves concurrent
    requests when chosen for throughput; returns ``output``."""
    write_plan(selection, output, serving=serving)
    return Path(output)


def write_plan(selection, output: Path, optimize: OptimizeRecord | None = None, serving: dict | None = None,
               ) -> Manifest:  # fmt: skip
    """Write ``selection``'s chosen plan to ``output`` and return its manifest (``optimize``'s record joins it, and
    under a throughput objective how the plan serves concurrent requests).

    The manifest is written last (and the old one removed first), so a directory with a manifest is complete.
    """
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    (output / MANIFEST).unlink(missing_ok=True)
    scratch = output / ".incoming"
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / SEGMENTS).mkdir(parents=True)
    entries = [save_segment(item, scratch / SEGMENTS, index,
                            item.threads if item.threads not in (None, selection.threads) else None)
               for index, item in enumerate(selection.chosen.engine.compiled)]  # fmt: skip
    model, chosen = selection.model, selection.chosen
    feeds = selection.grouped.feeds
    # a plan below fp32 is checked to run as it did (its own outputs); an fp32 plan against ONNX Runtime's, as the
    # selection ran it (compiling a 100 MB model again took 2 s of a 60 s budget)
    reference = chosen.engine.run(feeds) if chosen.accuracy else selection.reference_outputs()
    arrays = {f"input:{name}": value for name, value in feeds.items()}
    arrays |= {f"output:{index}": value for index, value in enumerate(reference)}
    np.savez(scratch / REFERENCE, **arrays)
    if chosen.validation is not None:
        np.savez(scratch / VALIDATION, **chosen.validation)
    shutil.rmtree(output / SEGMENTS, ignore_errors=True)
    (scratch / SEGMENTS).rename(output / SEGMENTS)
    (scratch / REFERENCE).replace(output / REFERENCE)
    (output / VALIDATION).unlink(missing_ok=True)
    if chosen.validation is not None:
        (scratch / VALIDATION).replace(output / VALIDATION)
    shutil.rmtree(scratch, ignore_errors=True)
    manifest = Manifest(**model_entry(model), outputs=list(selection.grouped.outputs), threads=selection.threads,
                        environment=environment(selection.threads), segments=entries, selection=selection.to_dict(),
                        optimize=optimize, accuracy=chosen.accuracy, serving=serving)  # fmt: skip
    return manifest.save(output)


def save_segment(item: CompiledSegment, folder: Path, index: int, threads: int | None = None) -> dict:
    """Write segment ``index`` into ``folder``; its manifest entry. ``threads``: recorded where the segment runs at
    other than the plan's threads (:meth:`~rlcompile.manifest.Manifest.segment_threads`)."""
    segment = item.segment
    stem = folder / f"{index:02d}_{segment.library}"
    onnx.save(segment.proto, str(stem.with_suffix(".onnx")))
    files = runtimes.create(segment.library).save(item.runner, stem)
    entry = {"library": segment.library, "onnx": f"segments/{stem.name}.onnx", "files": files,
             "groups": segment.groups, "inputs": segment.inputs, "outputs": segment.outputs,
             "precision": segment.precision}  # fmt: skip
    return entry | ({"threads": threads} if threads else {})


@dataclass
class LoadedPlan:
    """A plan directory, compiled and ready: ``run(feeds)`` returns the model's outputs."""

    path: Path
    manifest: Manifest = field(repr=False)
    engine: SegmentEngine = field(repr=False)
    reference_inputs: dict[str, np.ndarray] = field(repr=False)
    reference_outputs: list[np.ndarray] = field(repr=False)
    #: ``run(feeds)``: the model's outputs for ``feeds`` (by input name); the engine's own callable, bound once, so no
    #: method layer stands between the user and the runtime (:meth:`SegmentEngine.caller`)
    run: Callable[[Mapping[str, np.ndarray]], list[np.ndarray]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.run = self.engine.caller()

    @property
    def inputs(self) -> list[TensorSpec]:
        return [TensorSpec(i["name"], tuple(i["shape"]), np.dtype(i["dtype"])) for i in self.manifest.inputs]

    @property
    def libraries(self) -> list[str]:
        return self.engine.libraries

    @property
    def record(self) -> Manifest:
        """The manifest (what :mod:`rlcompile.saved` reads of any saved result)."""
        return self.manifest

    def timer(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        """One call of the plan on ``feeds``, as a user calls :meth:`run`."""
        run = self.run
        return lambda: run(feeds)

    def timed(self, feeds: Mapping[str, np.ndarray]) -> Timer:
        """:meth:`timer` with the wind-down of its segments' libraries: what a contest times it as."""
        return Timer(self.timer(feeds), self.engine.wind_down_s)

    def serve(self, concurrency: int | None = None) -> Pool:
        """The plan for concurrent callers: a :class:`~rlcompile.runtimes.serving.Pool` whose ``run(feeds)`` several
        threads may call at once, configured as ``--objective throughput`` measured it (else the runtime's default),
        for ``concurrency`` requests in flight (default: as measured, else the plan's threads). A plan of several
        segments, or on another runtime, is served by latency only: refused in one line."""
        from rlcompile.runtimes.serving import Pool, Serving

        segments = self.manifest.segments
        if len(segments) != 1 or segments[0]["library"] not in ("ort", "openvino"):
            raise RlcompileError(f"{self.path} runs {' -> '.join(self.libraries)}: only a plan of one ONNX Runtime or "
                                 "OpenVINO segment serves concurrent callers; call run() from one thread")  # fmt: skip
        recorded = self.manifest.serving or {}
        serving = (Serving.from_json(recorded["serving"]) if "serving" in recorded
                   else Serving(segments[0]["library"], threads=self.manifest.segment_threads(0),
                                precision=segments[0].get("precision", "fp32")))  # fmt: skip
        proto = onnx.load(str(self.path / segments[0]["onnx"]))
        return Pool(serving, proto, concurrency or recorded.get("concurrency") or self.manifest.threads)

    def describe(self) -> str:
        count = len(self.libraries)
        counts = sorted({item.threads or self.manifest.threads for item in self.engine.compiled})
        threads = "/".join(map(str, counts))
        return (f"{self.manifest.model}, {count} segment{'s' if count > 1 else ''}: {' -> '.join(self.libraries)}, "
                f"{threads} thread{'' if threads == '1' else 's'}")  # fmt: skip


def load_plan(path: str | Path, threads: int | None = None) -> LoadedPlan | ShapedPlan:
    """Read and compile a plan directory written by :func:`save_plan`."""
    path = Path(path)
    try:
        manifest = Manifest.load(path)
        with np.load(path / REFERENCE) as arrays:
            inputs = {key.split(":", 1)[1]: arrays[key] for key in arrays.files if key.startswith("input:")}
            outputs = [arrays[f"output:{i}"] for i in range(sum(k.startswith("output:") for k in arrays.files))]
    except (OSError, KeyError, ValueError, json.JSONDecodeError) as error:
        raise RlcompileError(f"{path} is not an rlcompile plan directory: {first_line(error)}") from None
    if manifest.shapes is not None:
        from rlcompile.shapes.saved import load_shaped_plan

        return load_shaped_plan(path, manifest, inputs, outputs, threads)
    check_machine(manifest, path)
    compiled = []
    for index, entry in enumerate(manifest.segments):
        onnx_path = path / entry["onnx"]
        proto = onnx.load(str(onnx_path))
        precision = entry.get("precision", "fp32")
        segment = Segment(entry["library"], entry["groups"], entry["inputs"], entry["outputs"], proto, precision)
        count = threads or manifest.segment_threads(index)
        options = RuntimeOptions(count, exclusive=len(manifest.segments) == 1, precision=precision)
        runtime = runtimes.create(entry["library"])
        runner = runtime.load(proto, onnx_path.with_suffix(""), entry["files"], options)
        compiled.append(CompiledSegment(segment, runner, 0.0, count))
    engine = SegmentEngine(compiled, [spec["name"] for spec in manifest.inputs], manifest.outputs)
    return LoadedPlan(path, manifest, engine, inputs, outputs)
