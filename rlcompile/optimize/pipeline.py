"""``rlcompile optimize``: graph -> kernel -> layer, composed into one verified plan directory.

The output directory is a plan directory (see :mod:`rlcompile.plan`) whose manifest also records every
stage's decision and the measured latencies, plus ``report.md`` and ``report.png``. Its ``work/``
folder holds what the stages finished (``state.json``, the kept graph, the tuning journal and
database, the layer's lookup table), so the same command run again continues where it stopped: a
finished stage whose inputs did not change is reused, the kernel level resumes its journal with the
time it has left, the layer level resumes its profile at the group where it stopped.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlcompile.errors import RlcompileError
from rlcompile.events import Event, Listener, Reuse, ignore
from rlcompile.layer.selection.record import Selection
from rlcompile.locks import exclusive
from rlcompile.manifest import LatencyRecord, Manifest, OptimizeRecord
from rlcompile.models import Shape, load_model
from rlcompile.models.onnx_model import LoadedModel
from rlcompile.optimize.budget import DEFAULT_BUDGET_S, LEVELS, Budget
from rlcompile.optimize.serving import SERVING_SHARE
from rlcompile.optimize.stages import RunState, StageContext, StageSettings, run_stage, stages_for
from rlcompile.plan import fingerprint, is_plan_dir, write_plan

WORK = "work"
STATE = "state.json"
#: every event of every run into this output, one JSON line each with its time since the run began
EVENTS = "events.jsonl"


class EventJournal:
    """A listener that passes events on and appends each to a JSON-lines file, with the seconds since the run
    began: where the time of a run went, read after it ended (appended to, so a resumed run adds its own)."""

    def __init__(self, path: Path, started: float, listener: Listener) -> None:
        self.path, self.started, self.listener = path, started, listener
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = self.path.open("a", encoding="utf-8")
        self.file.write(json.dumps({"t": 0.0, "kind": "Start", "stage": "optimize", "text": "run started"}) + "\n")

    def __call__(self, event: Event) -> None:
        entry = {"t": round(time.monotonic() - self.started, 3), "kind": type(event).__name__,
                 **{key: value for key, value in asdict(event).items() if value not in (None, "", 0)}}  # fmt: skip
        self.file.write(json.dumps(entry, default=str) + "\n")
        self.file.flush()
        self.listener(event)

    def close(self) -> None:
        self.file.close()


@dataclass
class OptimizeRequest:
    """Everything ``rlcompile optimize`` takes."""

    model: str
    output: Path
    input_shapes: dict[str, Shape] = field(default_factory=dict)
    budget_s: float = DEFAULT_BUDGET_S
    levels: tuple[str, ...] = LEVELS
    settings: StageSettings = field(default_factory=StageSettings)
    #: when the user's command began (``time.monotonic()``): the budget counts from it (default: from the call)
    started: float | None = None
    #: ``--input-shape`` values with ranges or sets: the model is optimised for that shape profile
    #: (:mod:`rlcompile.shapes`) instead of at one static shape
    profile: tuple[str, ...] = ()

    @property
    def budget(self) -> Budget:
        return Budget(self.budget_s, tuple(self.levels), lowered=not self.settings.exact)


@dataclass
class OptimizeResult:
    """The plan directory written, its manifest, and the selection (``None`` when reused as it was)."""

    output: Path
    manifest: Manifest
    selection: Selection | None = None

    @property
    def reused(self) -> bool:
        return self.selection is None


def optimize(request: OptimizeRequest, progress: Listener = ignore) -> OptimizeResult:
    """Run the chosen levels in order on the model and write the fastest verified plan to ``request.output``."""
    started = time.monotonic() if request.started is None else request.started
    if request.profile:
        return optimize_profile(request, started, progress)
    model = load_model(request.model, request.input_shapes)
    output = Path(request.output)
    progress(Event("optimize", f"optimizing {model.name}: levels {', '.join(request.levels)}, budget "
                               f"{request.budget.total_s:.0f} s, {request.settings.threads} threads, "
                               f"output {output}/"))  # fmt: skip
    if output.exists() and not output.is_dir():
        raise RlcompileError(f"-o {output} exists and is not a directory")
    key = run_key(request, model)
    done = finished_manifest(output, key)
    if done is not None:
        progress(Reuse("optimize", f"{output} already holds this optimisation (same model, levels, agents and "
                                   "budget): reusing it", "output"))  # fmt: skip
        return OptimizeResult(output, done)
    with exclusive(output, "output directory"):
        return run_stages(request, model, key, started, progress)


def optimize_profile(request: OptimizeRequest, started: float, progress: Listener) -> OptimizeResult:
    """:func:`optimize` for a shape profile (:mod:`rlcompile.shapes`): the levels that need one static shape do not
    run; the runtimes and precisions are judged at every bucket."""
    import hashlib

    from rlcompile.models.onnx_model import graph_inputs
    from rlcompile.models.profile import build_profile
    from rlcompile.shapes.api import ShapesRequest, finished, load_dynamic
    from rlcompile.shapes.api import optimize_profile as run_profile

    output = Path(request.output)
    if output.exists() and not output.is_dir():
        raise RlcompileError(f"-o {output} exists and is not a directory")
    loaded = load_dynamic(request.model)
    proto, name, _ = loaded
    build_profile(request.profile, graph_inputs(proto))  # a bad profile is refused before anything is said or written
    key = {"fingerprint": hashlib.sha256(proto.SerializeToString()).hexdigest()[:16], "profile": list(request.profile),
           "budget_s": request.budget_s, **request.settings.describe()}  # fmt: skip
    progress(Event("optimize", f"optimizing {name} for the shapes {'; '.join(request.profile)}: budget "
                               f"{request.budget_s:.0f} s, {request.settings.threads} threads, output {output}/"))
    done = finished(output, key)
    if done is not None:
        progress(Reuse("optimize", f"{output} already holds this optimisation: reusing it", "output"))
        return OptimizeResult(output, done)
    settings = request.settings
    libraries = tuple(settings.libraries.split(",")) if settings.libraries else ("ort", "openvino")
    shapes = ShapesRequest(request.model, output, request.profile, request.budget_s - (time.monotonic() - started),
                           settings.contract, settings.timing, settings.threads, settings.seed, libraries)  # fmt: skip
    with exclusive(output, "output directory"):
        manifest = run_profile(shapes, key, progress, loaded)
        from rlcompile.report.shapes import write_shapes_report

        write_shapes_report(output, manifest)
    return OptimizeResult(output, manifest)


def run_stages(request: OptimizeRequest, model: LoadedModel, key: dict, started: float,
               progress: Listener) -> OptimizeResult:  # fmt: skip
    """The stages of :func:`optimize`, with the output directory locked against a second process."""
    output, work = Path(request.output), Path(request.output) / WORK
    work.mkdir(parents=True, exist_ok=True)
    journal = EventJournal(work / EVENTS, started, progress)
    throughput = request.settings.objective == "throughput"
    serving_s = request.budget.usable_s * SERVING_SHARE if throughput else 0.0
    context = StageContext(model, request.settings, request.budget, work, RunState(work / STATE), journal,
                           tuple(request.levels), deadline=started + request.budget.usable_s - serving_s)  # fmt: skip
    serving = None
    try:
        records = {stage.name: run_stage(stage, context) for stage in stages_for(tuple(request.levels))}
        if throughput:
            from rlcompile.optimize.serving import choose_serving

            concurrency = request.settings.concurrency or request.settings.threads
            choice = choose_serving(context.selection, concurrency, started + request.budget.usable_s, journal)
            if choice is not None:
                context.selection.chosen = choice.candidate
                serving = choice.to_json()
    finally:
        journal.close()
    selection = context.selection
    record = OptimizeRecord(key, describe(request), request.budget.to_dict(), records,
                            stage_latencies(selection, records), time.monotonic() - started)  # fmt: skip
    manifest = write_plan(selection, output, record, serving)
    from rlcompile.report.optimize import write_report

    write_report(output, manifest)
    return OptimizeResult(output, manifest, selection)


def run_key(request: OptimizeRequest, model: LoadedModel) -> dict:
    """What makes two runs the same optimisation (the output directory is reused only for the same key)."""
    return {"fingerprint": fingerprint(model), "levels": list(request.levels), "budget_s": request.budget_s,
            **request.settings.describe()}  # fmt: skip


def describe(request: OptimizeRequest) -> dict:
    return {"model": request.model, "input_shapes": {k: list(v) for k, v in request.input_shapes.items()},
            "levels": list(request.levels), "budget_s": request.budget_s, **request.settings.describe()}  # fmt: skip


def finished_manifest(output: Path, key: dict) -> Manifest | None:
    """The manifest already in ``output`` when it came from this same optimisation."""
    if not is_plan_dir(output):
        return None
    try:
        manifest = Manifest.load(output)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return manifest if manifest.optimize is not None and manifest.optimize.key == key else None


def stage_latencies(selection: Selection, records: dict) -> LatencyRecord:
    """Latency after each stage, all from the layer stage's one contest.

    ``original``: the faster of ONNX Runtime and OpenVINO run natively on the user's model;
    ``graph``: the faster of the two on the graph that went on (the original when no rewrite was kept);
    ``kernel``: that or the whole graph in TVM with the tuned kernels, if it ran; ``layer``: the plan kept, at the
    native run's own time when the plan is a native run (the user's model whole in that library: two measurements
    of one program differ only by the machine's noise, reported beside them; a resnet50 run on the slowed VM
    reported OpenVINO native's twin as 1.107x the faster native, 11.2% noise, OpenVINO native itself being slower).
    """
    from rlcompile.layer.selection.candidates import native_twin

    natives = {name: stats.median_ms for name, stats in selection.natives.items() if "identical" not in name}
    original = min(natives.values())
    graph = original
    if "graph" in records and records["graph"].kept:
        graph = min([ms for ms in selection.single_library_ms(("ort", "openvino"))] or [original])
    kernel = min([graph, *selection.single_library_ms(("tvm",))])
    chosen = selection.chosen
    twin = native_twin(chosen, selection.model.native_proto, natives) if chosen.engine is not None else None
    final = natives[twin] if twin is not None else chosen.measured.median_ms
    agreement = chosen.agreement.to_dict() if chosen.agreement else None
    untouched = chosen.engine.libraries[0] if chosen.untouched and chosen.engine is not None else None
    return LatencyRecord(natives, original, graph, kernel, final, original / final, selection.noise, agreement,
                         selection.rounds, selection.load.to_dict() if selection.load else None,
                         untouched, selection.paired_noise)  # fmt: skip
