"""The lookup table over fusion groups and libraries, measured the way the segment engine runs them.

For every fusion group and every library that claims it, the group is compiled alone as a segment,
checked against ONNX Runtime's values of the same activations (taken from one run of the whole model
on random inputs), and timed with the engine's thread count: its *standalone* time, which includes
the library's call overhead and the layout changes at the group's edges.

Inside a segment a library pays neither between groups, so standalone times overestimate. Each
library's *single-library plan* (that library wherever it can, ONNX Runtime elsewhere) is therefore
run end to end, and the library's in-context estimates are scaled by one factor so that the table
predicts that measurement (``notes["context_factor"]``; near 1 when the boundary model is right), fitted together
with the crossings that plan makes where it falls back to the default library (:mod:`rlcompile.layer.fit`).

A *boundary* (a value crossing from library A to library B) costs half of what splitting an A segment
at a tensor of that shape costs, half of B's, and the hand-off penalty of B running right after A (see
:func:`time_boundaries`); entering from or leaving to the caller costs half a split. A group's
in-context time is its standalone time less half a split per boundary tensor; then the calibration
factor absorbs what this model still misses.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from rlcompile import atomic, runtimes
from rlcompile.errors import ModelError, first_line
from rlcompile.events import Event, Listener, Phase, Reuse, Step, ignore
from rlcompile.graph.cleanup import clean_model
from rlcompile.layer.boundaries import libraries_meeting, time_boundaries
from rlcompile.layer.fit import apply_fit, fit_plans
from rlcompile.layer.groups import FusionGroup, fusion_groups, group_kind, name_nodes
from rlcompile.layer.problem import SelectionProblem
from rlcompile.layer.segments import (
    Segment,
    SegmentEngine,
    SegmentExtractor,
    boundary_values,
    cut_segments,
)
from rlcompile.layer.table import (
    LAYER_TIMING,
    SINK,
    SOURCE,
    Edge,
    LookupTable,
    read_table,
    save_table,
    shape_key,
    time_if_agrees,
)
from rlcompile.machine import cpu_identity, environment, package_versions
from rlcompile.measure import (
    DECISION_ROUNDS,
    MIN_ROUNDS,
    Contender,
    MeasureConfig,
    Settle,
    Timer,
    contest,
    run_contest,
)
from rlcompile.models import tables_home
from rlcompile.models.onnx_model import LoadedModel
from rlcompile.names import REFERENCE_RUNTIME
from rlcompile.runtimes import Runtime, RuntimeOptions
from rlcompile.threads import spinning_allowed

#: The tables' format and the thread settings they were measured under (ORT segments pin their workers, PyTorch's
#: OpenMP workers spin 10000 iterations, TVM's pool 1000 yields): a table of another version is measured again.
GROUP_TABLE_VERSION = 10
#: Timing of a whole single-library plan during calibration.
PLAN_TIMING = MeasureConfig(warmup=2, min_repeats=5, min_time_s=0.3, max_time_s=6.0, floor_repeats=3)
#: Past the profile's deadline (the groups left on the default library, then the calibration): shorter timing, so
#: the stage's final contest keeps its time; the table is not saved, and a later run profiles it fully.
CUT_TIMING = MeasureConfig(warmup=1, min_repeats=3, min_time_s=0.02, max_time_s=1.0, floor_repeats=1)
CUT_PLAN_TIMING = MeasureConfig(warmup=1, min_repeats=1, min_time_s=0.1, max_time_s=0.3, floor_repeats=1)
#: Groups of one kind measured at most (their median prices every member: :func:`time_groups`).
MEASURED_PER_KIND = 3
#: The contender that runs the user's model natively in ONNX Runtime during calibration.
NATIVE = "ort native"


@dataclass
class GroupedModel:
    """A model ready for the layer level: BN folded, nodes named, fusion groups, example activations."""

    name: str
    proto: onnx.ModelProto
    groups: list[FusionGroup]
    inputs: list[str]
    outputs: list[str]
    #: the model's random inputs and every value that crosses a group boundary, from one ORT run
    examples: dict[str, np.ndarray]
    #: the model as loaded (before folding), what ONNX Runtime native runs
    original: LoadedModel | None = field(default=None, repr=False)
    #: engines compiled for a plan, by plan and runtimes: the calibration's single-library plans are the
    #: candidates' too, and a whole-model TVM build takes seconds
    engines: dict = field(default_factory=dict, repr=False)

    @property
    def feeds(self) -> dict[str, np.ndarray]:
        return {name: self.examples[name] for name in self.inputs}

    def segments(self, assignment: Sequence[str]) -> list[Segment]:
        """The plan's segments, each with its ONNX model.

        A plan of one segment runs the model as loaded: that library run natively, by construction.
        """
        segments = cut_segments(self.groups, assignment, self.outputs)
        if len(segments) == 1 and self.original is not None and self.runs_original(segments[0].library):
            whole = segments[0]
            whole.inputs, whole.outputs = list(self.inputs), list(self.outputs)
            whole.proto = self.original.proto_for(runtimes.create(whole.library))
            return segments
        self.extractor.attach(segments, stem=f"{self.name}_segment")
        return segments

    @functools.cached_property
    def extractor(self) -> SegmentExtractor:
        """Extracts this model's segments; built once (it copies the whole model)."""
        return SegmentExtractor(self.proto, self.examples)

    def engine(self, assignment: Sequence[str], threads: int, created: Mapping[str, Runtime],
               ) -> SegmentEngine:  # fmt: skip
        """The plan's engine, compiled once per plan, thread count and set of runtimes."""
        key = (tuple(assignment), threads, tuple((name, id(runtime)) for name, runtime in sorted(created.items())))
        if key not in self.engines:
            self.engines[key] = self.compile_engine(assignment, threads, created)
        return self.engines[key]

    def compile_engine(self, assignment: Sequence[str], threads: int, created: Mapping[str, Runtime],
                       ) -> SegmentEngine:  # fmt: skip
        """A new engine of the plan, compiled whether or not :meth:`engine` holds one (a plan's identical twin)."""
        return SegmentEngine.compile(self.segments(assignment), self.inputs, self.outputs, threads, created)

    @functools.cached_property
    def kinds(self) -> dict[str, str]:
        """Each group's kind (:func:`~rlcompile.layer.groups.group_kind`), by group name."""
        return {group.name: group_kind(self.group_proto(index), [self.examples[name] for name in group.inputs])
                for index, group in enumerate(self.groups)}  # fmt: skip

    def group_proto(self, index: int) -> onnx.ModelProto:
        """Group ``index`` alone, as a model."""
        group = self.groups[index]
        return self.extractor.extract(Segment("", [index], group.inputs, group.outputs), f"group{index:03d}")

    def runs_original(self, library: str) -> bool:
        """Whether ``library`` claims every node of the model it would run whole (before BatchNorm folding):
        :meth:`~rlcompile.models.onnx_model.LoadedModel.proto_for`, what :meth:`segments` hands it."""
        runtime = runtimes.create(library)
        return runtime.supports(list(self.original.proto_for(runtime).graph.node))


def group_model(model: LoadedModel, seed: int = 0) -> GroupedModel:
    proto = name_nodes(clean_model(model).proto)
    groups = fusion_groups(proto)
    feeds = model.random_inputs(seed)
    examples = dict(feeds) | boundary_values(proto, feeds, [name for group in groups for name in group.outputs])
    outputs = [value.name for value in proto.graph.output]
    return GroupedModel(model.name, proto, groups, list(feeds), outputs, examples, model)


def group_edges(grouped: GroupedModel) -> list[Edge]:
    producer = {name: group.name for group in grouped.groups for name in group.outputs}
    edges = [Edge(producer.get(name, SOURCE), group.name, name, tuple(grouped.examples[name].shape))
             for group in grouped.groups for name in group.inputs]  # fmt: skip
    edges += [Edge(producer[name], SINK, name, tuple(grouped.examples[name].shape)) for name in grouped.outputs]
    return edges


def table_file(model: LoadedModel, names: Sequence[str], threads: int, directory: Path | None,
               tuning_db: Path | None = None) -> Path:  # fmt: skip
    """Named by the model's content and everything that changes the times (CPU, threads, versions)."""
    versions = [f"{package}={version}" for package, version in package_versions().items()]
    identity = "|".join([cpu_identity(), str(threads), *names, *versions, f"spin={spinning_allowed()}",
                         str(tuning_db.resolve()) if tuning_db else "", f"v{GROUP_TABLE_VERSION}"])  # fmt: skip
    machine = hashlib.sha1(identity.encode()).hexdigest()[:10]
    content = hashlib.sha1(model.serialized).hexdigest()[:10]
    if directory is None:
        directory = tables_home(model)
    return directory / f"{model.name}.groups-{content}-{machine}.json"


def load_or_profile_groups(grouped: GroupedModel, created: Mapping[str, Runtime], threads: int, path: Path,
                           progress: Listener = ignore, deadline: float | None = None,
                           calibrate_by: float | None = None,
                           gauges: Mapping[str, Timer] | None = None,
                           ) -> tuple[LookupTable, bool]:  # fmt: skip
    """The stored table when there is one, else a fresh profile (saved). Returns (table, reused).

    ``deadline`` (``time.monotonic()``): past it, the groups left are profiled on the default library only
    (the others are then no option for them); such a cut-short table is used but not saved as complete, so
    the next run resumes the profile from its checkpoint. ``calibrate_by``: when the calibration's contest ends.
    ``gauges``: the native runs the calibration times beside the plans (see :func:`calibrate`).
    """
    if (stored := read_table(path, progress)) is not None:
        return stored, True
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    table = profile_groups(grouped, created, threads, progress, checkpoint=partial, deadline=deadline,
                           calibrate_by=calibrate_by, gauges=gauges)  # fmt: skip
    if save_table(table, path):
        partial.unlink(missing_ok=True)
    return table, False


def profile_groups(grouped: GroupedModel, created: Mapping[str, Runtime], threads: int,
                   progress: Listener = ignore, timing: MeasureConfig = LAYER_TIMING,
                   checkpoint: Path | None = None, deadline: float | None = None,
                   calibrate_by: float | None = None,
                   gauges: Mapping[str, Timer] | None = None) -> LookupTable:  # fmt: skip
    """Standalone group times, boundary costs, then the calibration on single-library plans (its contest
    ending by ``calibrate_by``, the ``gauges`` timed beside them).

    With ``checkpoint``, every profiled group is saved there at once and reused by the next run, so an
    interrupted profile resumes at the group where it stopped.
    """
    standalone, rejected = time_groups(grouped, created, threads, progress, timing, checkpoint, deadline)
    cut = [group.name for group in grouped.groups if set(standalone[group.name]) | set(rejected.get(group.name, {}))
           < set(created)]  # fmt: skip
    edges = group_edges(grouped)
    meeting = libraries_meeting(edges, standalone)
    crossings = sum(len(names) > 1 for names in meeting.values())
    progress(Phase("layer", f"measuring boundary costs between {', '.join(created)} ({crossings} of {len(meeting)} "
                            "tensor shapes can cross libraries)", "boundaries"))  # fmt: skip
    conversions, estimated = time_boundaries(meeting, created, threads, deadline)
    if estimated:
        progress(Event("layer", f"the profiling time is spent: {estimated} of {len(meeting)} boundary shapes are "
                       f"priced by a line fitted to the {len(meeting) - estimated} measured (cost against size)"))
    names = [group.name for group in grouped.groups]
    table = LookupTable(grouped.name, names, standalone, {name: name for name in created}, edges, conversions,
                        rejected, environment(threads), host="host", default=REFERENCE_RUNTIME)  # fmt: skip
    late = bool(cut or estimated)
    calibrate(table, grouped, created, threads, progress, CUT_PLAN_TIMING if late else PLAN_TIMING, late=late,
              deadline=calibrate_by, gauges=gauges)  # fmt: skip
    table.notes["group_kinds"] = grouped.kinds
    if late:
        table.notes["cut_short"] = len(cut)
        table.notes["boundaries_estimated"] = estimated
    return table


def read_checkpoint(path: Path | None) -> tuple[dict, dict]:
    try:
        saved = json.loads(path.read_text()) if path is not None and path.exists() else {}
        return saved.get("standalone", {}), saved.get("rejected", {})
    except (OSError, ValueError, AttributeError):
        return {}, {}


def write_checkpoint(path: Path | None, standalone: dict, rejected: dict) -> None:
    if path is not None:
        atomic.write_json(path, {"standalone": standalone, "rejected": rejected})


def time_groups(grouped, created, threads, progress, timing, checkpoint: Path | None = None,
                deadline: float | None = None) -> tuple[dict, dict]:  # fmt: skip
    """{group: {library: standalone ms}} and {group: {library: why not}}; past ``deadline``, the default
    library only (the checkpoint keeps what was measured, so a later run completes the profile).

    Groups of one kind (:func:`~rlcompile.layer.groups.group_kind`: a transformer's repeated layers) are measured
    up to :data:`MEASURED_PER_KIND` times and each member takes their median (:func:`pool_kinds`): the profile takes
    less time, and the solver cannot pick a library for one layer and another for its twin on measurement noise
    (hf:albert's six identical feed-forward groups were priced 0.21-1.01 ms on ONNX Runtime, one each).
    """
    cut_at = None
    standalone, rejected = read_checkpoint(checkpoint)
    if standalone:
        progress(Reuse("layer", f"resuming the profile: {len(standalone)} of {len(grouped.groups)} groups already "
                       "measured", "profile", len(standalone), len(grouped.groups)))  # fmt: skip
    kinds = grouped.kinds
    for index, group in enumerate(grouped.groups):
        if group.name in standalone and set(standalone[group.name]) | set(rejected.get(group.name, {})) >= set(created):
            continue
        if measured_of_kind(kinds, kinds[group.name], standalone, rejected, set(created)) >= MEASURED_PER_KIND:
            continue
        progress(Step("layer", f"profiling group {index + 1}/{len(grouped.groups)}: {group.name} ({group.describe()})",
                      index, len(grouped.groups), "groups profiled", group.name))  # fmt: skip
        proto = grouped.group_proto(index)
        members = set(group.nodes)
        nodes = [node for node in proto.graph.node if node.name in members]
        inputs = [grouped.examples[name] for name in group.inputs]
        expected = [grouped.examples[name] for name in group.outputs]
        if cut_at is None and deadline is not None and time.monotonic() > deadline:
            cut_at = index
            progress(Event("layer", f"the layer stage's profiling time is spent: groups {index + 1}-"
                           f"{len(grouped.groups)} are profiled on {REFERENCE_RUNTIME} only"))  # fmt: skip
        standalone[group.name] = {}
        libraries = created if cut_at is None else {REFERENCE_RUNTIME: created[REFERENCE_RUNTIME]}
        for name, library in libraries.items():
            ms, reason = time_group(library, proto, nodes, inputs, expected, threads,
                                    timing if cut_at is None else CUT_TIMING)  # fmt: skip
            if reason is None:
                standalone[group.name][name] = ms
            else:
                rejected.setdefault(group.name, {})[name] = reason
        if REFERENCE_RUNTIME not in standalone[group.name]:
            why = rejected.get(group.name, {}).get(REFERENCE_RUNTIME, "?")
            raise ModelError(f"ONNX Runtime cannot run group {group.name} on its own: {why}")
        if cut_at is None:
            write_checkpoint(checkpoint, standalone, rejected)
    count = len(grouped.groups)
    standalone, rejected = pool_kinds(kinds, standalone, rejected)
    shared = count - len(set(kinds.values()))
    progress(Step("layer", f"profiled {count} groups ({len(set(kinds.values()))} kinds: {shared} priced by their "
                           "kind's measurements)" if shared else f"profiled {count} groups",
                  count, count, "groups profiled"))  # fmt: skip
    return standalone, rejected


def measured_of_kind(kinds: Mapping[str, str], kind: str, standalone: Mapping[str, Mapping[str, float]],
                     rejected: Mapping[str, Mapping[str, str]], libraries: set[str]) -> int:  # fmt: skip
    """How many groups of ``kind`` were measured on every one of ``libraries`` (or rejected by it)."""
    return sum(kinds.get(name) == kind and set(times) | set(rejected.get(name, {})) >= libraries
               for name, times in standalone.items())  # fmt: skip


def pool_kinds(kinds: Mapping[str, str], standalone: Mapping[str, Mapping[str, float]],
               rejected: Mapping[str, Mapping[str, str]]) -> tuple[dict, dict]:  # fmt: skip
    """Every group's times as the median of its kind's measurements, per library; a library every measured member
    of the kind rejected is rejected for each member, with the first reason."""
    by_kind: dict[str, list[str]] = {}
    for name in standalone:
        if name in kinds:
            by_kind.setdefault(kinds[name], []).append(name)
    pooled, refused = {}, {}
    for name, kind in kinds.items():
        measured = by_kind.get(kind)
        if not measured:
            continue
        libraries = dict.fromkeys(library for member in measured for library in standalone[member])
        pooled[name] = {library: float(np.median([standalone[member][library] for member in measured
                                                  if library in standalone[member]]))
                        for library in libraries}  # fmt: skip
        reasons = {library: why for member in reversed(measured) for library, why in rejected.get(member, {}).items()
                   if library not in libraries}  # fmt: skip
        if reasons:
            refused[name] = reasons
    return pooled, refused


def time_group(library, proto, nodes, inputs, expected, threads, timing) -> tuple[float, str | None]:
    """(median ms, None) when the library runs the group and agrees with ORT; (nan, why not) otherwise."""
    if not library.supports(nodes):
        return float("nan"), "unsupported operator"

    def prepare():
        runner = library.compile(proto, RuntimeOptions(threads))
        return (lambda: runner(inputs)), runner(inputs)

    return time_if_agrees(prepare, expected, timing, "ONNX Runtime")


def in_context(table: LookupTable, grouped: GroupedModel) -> dict[str, dict[str, float]]:
    """Standalone group times less half a split per boundary tensor: what the group costs inside a segment."""
    shapes = {name: tuple(array.shape) for name, array in grouped.examples.items()}
    result = {}
    for group in grouped.groups:
        result[group.name] = {}
        edges = [shapes[name] for name in [*group.inputs, *group.outputs]]
        for library, ms in table.options[group.name].items():
            split = sum(table.conversions.get(shape_key(shape), {}).get(f"split:{library}", 0.0)
                        for shape in edges) / 2  # fmt: skip
            result[group.name][library] = max(ms - split, 0.1 * ms)
    return result


def single_library_plan(table: LookupTable, library: str) -> list[str]:
    """``library`` for every group it runs, the default library for the rest."""
    return [library if library in table.options[name] else table.default for name in table.layers]


def merge_twins(plans: dict[str, float], natives: dict[str, float], twins: Sequence[str]) -> dict[str, float]:
    """For each library in ``twins`` (its single-library plan is the model run whole by that library: its native run,
    compiled twice), set its plan's and its native run's time (ms, by library) to their geometric mean: two
    measurements of one thing, taken in one contest. Either alone carries the contest's noise into every prediction
    judged by the other; on the slowed 2-core VM calibration twins differed by up to 38.8% (hf:yolos: ORT's plan
    24.4 ms, ORT native about 40 ms), and the plan was then predicted at 0.59x its final measurement.

    Returns how far each merged pair was apart (|plan / native - 1|, by library): the calibration's timing noise."""
    apart = {}
    for library in twins:
        if plans.get(library) and natives.get(library):
            apart[library] = abs(plans[library] / natives[library] - 1)
            plans[library] = natives[library] = float(np.sqrt(plans[library] * natives[library]))
    return apart


def calibrate(table: LookupTable, grouped: GroupedModel, created, threads: int, progress: Listener,
              timing: MeasureConfig = PLAN_TIMING, late: bool = False, deadline: float | None = None,
              gauges: Mapping[str, Timer] | None = None) -> None:  # fmt: skip
    """Scale each library's in-context estimates, and the crossings between libraries its plan makes where it falls
    back to the default library, so the table predicts its measured single-library plan (:func:`fit_plans`).

    ``gauges``: the native runs (``"ort native"``, ``"openvino native"``) the final contest times too; timed in
    this contest, their medians (``notes["native_ms"]``, by library) are each library's speed at calibration, so
    the final contest can judge a single-library plan's prediction against a run other than the plan itself.
    Without them, ORT native is compiled from ``grouped.original`` (when there is one).

    The single-library plans are timed in turns (five rounds), so a slow spell of a shared machine
    does not land on one library's factor; ``late`` (past the profile's deadline): two rounds. ``deadline``
    (``time.monotonic()``): the contest is shortened to end by it, down to its floor
    (:func:`~rlcompile.measure.contest.floor_seconds`, which whoever sets the deadline reserves).
    """
    raw = {name: dict(options) for name, options in table.options.items()}
    table.options = in_context(table, grouped)
    estimated = {name: dict(options) for name, options in table.options.items()}
    ordered = sorted(created, key=lambda name: name != table.default)  # the default first: others lean on it
    plans = {name: single_library_plan(table, name) for name in ordered}
    plans = {name: plan for name, plan in plans.items() if name == table.default or name in plan}
    progress(Phase("layer", f"calibrating: {', '.join(plans)} each wherever it can run, end to end, in turns with "
                   "the native runs", "calibrate"))  # fmt: skip
    feeds = grouped.feeds
    engines = {}
    for name, plan in plans.items():
        try:
            engines[name] = grouped.engine(plan, threads, created)
        except Exception as error:  # that library keeps its uncalibrated estimates, reported
            progress(Event("layer", f"calibration: {name}'s single-library plan does not compile "
                           f"({first_line(error)})"))  # fmt: skip
    plans = {name: plans[name] for name in engines}
    contenders = [Contender(name, lambda engine=engine: engine.run(feeds), wind_down_s=engine.wind_down_s)
                  for name, engine in engines.items()]  # fmt: skip
    if gauges is None and grouped.original is not None:
        native = grouped.original.compile(runtimes.create(REFERENCE_RUNTIME), RuntimeOptions(threads, exclusive=True))
        gauges = {NATIVE: native.timed(feeds)}
    gauges = gauges or {}
    contenders += [Contender.from_timer(label, timer) for label, timer in gauges.items()]
    rounds = MIN_ROUNDS if late else DECISION_ROUNDS
    settle = None
    if deadline is not None:  # unspread rounds take about rounds/2 of what fit_within counts for a contest
        timing = contest.fit_within(timing, len(contenders), max(0.0, deadline - time.monotonic()) * 2 / rounds)
        settle = Settle(max_batches=1, deadline=deadline)
    standings = run_contest(contenders, timing, rounds, settle)
    measured = {name: standings.median(name) for name in plans}
    natives = {label.split()[0]: standings.median(label) for label in gauges}
    twins = [name for name, engine in engines.items()
             if grouped.original is not None and engine.runs_whole(grouped.original.proto)]  # fmt: skip
    apart = merge_twins(measured, natives, twins)
    table.notes = {"standalone_ms": raw, "in_context_estimate_ms": estimated, "context_factor": {},
                   "single_library_ms": measured, "ort_native_ms": natives.get(REFERENCE_RUNTIME),
                   "native_ms": natives, "twin_noise": apart}  # fmt: skip
    problem = SelectionProblem(table)
    apply_fit(table, fit_plans(table, [(problem, plans[name], measured[name]) for name in plans]))
