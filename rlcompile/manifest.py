"""What a plan directory's ``manifest.json`` holds, typed: written one way, read one way.

:class:`Manifest` is the record of a plan (model, inputs, outputs, threads, machine and versions, the
segments in order, the selection report) and, from ``optimize``, :class:`OptimizeRecord`: every
stage's typed record (:class:`GraphRecord`, :class:`KernelRecord`, :class:`LayerRecord`), the latency
after each stage (:class:`LatencyRecord`), the budget and the run's key. :meth:`Manifest.save` writes
it (atomically), :meth:`Manifest.load` reads it back; the JSON keys are the fields' names, so the file
format is what ``to_json`` writes. ``manifest["key"]`` reads the JSON view, for scripts that read the file.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from rlcompile import atomic

MANIFEST = "manifest.json"
FORMAT = "rlcompile-plan"
VERSION = 2


class Record:
    """A typed record stored as a JSON object: fields that are ``None`` are left out, unknown keys ignored."""

    def to_json(self) -> dict:
        return {key: value for key, value in asdict(self).items() if value is not None}  # type: ignore[call-overload]

    @classmethod
    def from_json(cls, data: dict):
        names = {item.name for item in fields(cls)}  # type: ignore[arg-type]
        return cls(**{key: value for key, value in data.items() if key in names})

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_json().get(key, default)


@dataclass
class GraphRecord(Record):
    """The graph stage: the agent's rewrites, their verification and the contest that judged them."""

    agent: str
    rewrites: int
    cleanup: int
    nodes_before: int
    nodes_after: int
    agreement: dict
    search: dict
    kept: bool
    reason: str
    wall_s: float = 0.0
    ort_original_ms: float | None = None
    ort_rewritten_ms: float | None = None
    ort_identical_session_ms: float | None = None
    noise: float | None = None
    gain: float | None = None
    #: the stage was not run again: its record came from an earlier run on the same inputs
    reused: bool | None = None


@dataclass
class KernelRecord(Record):
    """The kernel stage: tasks tuned, trials spent, the best kernel per task (or why TVM was skipped)."""

    strategy: str
    tasks: int
    tuned_tasks: int
    trials: int
    resumed_trials: int
    failed_trials: int
    best_ms: dict[str, float]
    wall_s: float = 0.0
    skipped: str | None = None
    #: tasks whose design space TVM cannot build, with why (they keep TVM's default schedule)
    skipped_tasks: dict[str, str] | None = None
    #: what the tasks' cost model started from: "cold" or the pretrained model's name
    cost_model: str = "cold"
    #: where the libraries leave headroom (:class:`rlcompile.kernel.headroom.Headroom` as a dict): the FMA
    #: peak and, per task, its best library's time and fraction of the peak, and whether it was tuned
    headroom: dict | None = None
    #: the convolutions' layout the kernels were tuned and built in (``--layout``)
    layout: str = "nchw"


@dataclass
class LayerRecord(Record):
    """The layer stage: the runtimes that competed and the plan the contest kept."""

    agent: str
    libraries: list[str]
    unavailable: dict[str, str]
    chosen: list[str]
    segments: int
    library_mix: dict[str, int]
    wall_s: float = 0.0
    #: with a lowered precision allowed: what the precision searches measured (contract, searches, plans)
    precision: dict | None = None
    #: the libraries left out of the plans, by what the table's optimum would have gained with each
    left_out: dict[str, float] | None = None


STAGE_RECORDS: dict[str, type[Record]] = {"graph": GraphRecord, "kernel": KernelRecord, "layer": LayerRecord}


@dataclass
class LatencyRecord(Record):
    """Latency after each stage, all from the layer stage's one contest (ms)."""

    native_ms: dict[str, float]
    original_ms: float
    after_graph_ms: float
    after_kernel_ms: float
    final_ms: float
    speedup: float
    noise: float | None = None
    agreement: dict | None = None
    rounds: int | None = None  # how many rounds the contest took (it settles: more while the twins disagree)
    #: what else used the machine while that contest ran: {"steal": share, "others": share}
    machine_load: dict | None = None
    #: the library that runs the user's model untouched (whole, as given) when that is the plan kept: no other plan
    #: beat it beyond the tie band and the noise
    untouched: str | None = None
    #: the twins' spread judged round by round (:attr:`Selection.paired_noise`): small where :attr:`noise` is large
    #: when the machine's spells, not the sessions, set them apart
    paired_noise: float | None = None

    def to_json(self) -> dict:  # noise and agreement are written even when unknown (null)
        return asdict(self)


@dataclass
class AccuracyRecord(Record):
    """A plan that computes below fp32: the contract it was held to and its error on the held-out samples.

    ``reference.npz`` then holds this plan's own outputs (it is checked to run as it did) and
    ``validation.npz`` the held-out samples with the fp32 outputs, on which ``rlcompile run`` measures the
    error again.
    """

    precision: str
    metric: str
    tolerance: float
    data: str
    calibration_samples: int
    validation_samples: int
    fp32_error: float
    error: float
    excess: float
    plan: str
    mode: dict
    int8_groups: list[str]
    evaluations: int
    searches: dict
    #: ``False`` when the samples were random: then only output agreement was measured
    real_data: bool = True


@dataclass
class OptimizeRecord(Record):
    """What ``optimize`` adds to the manifest."""

    key: dict
    request: dict
    budget: dict
    stages: dict[str, Record]
    latency: LatencyRecord
    wall_s: float

    def to_json(self) -> dict:
        return {"key": self.key, "request": self.request, "budget": self.budget,
                "stages": {name: record.to_json() for name, record in self.stages.items()},
                "latency": self.latency.to_json(), "wall_s": self.wall_s}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict) -> OptimizeRecord:
        stages = {name: STAGE_RECORDS[name].from_json(record) for name, record in data["stages"].items()}
        return cls(data["key"], data["request"], data["budget"], stages, LatencyRecord.from_json(data["latency"]),
                   data["wall_s"])  # fmt: skip


@dataclass
class Manifest(Record):
    """A plan directory's manifest (see the module's docstring)."""

    model: str
    source: str
    fingerprint: str
    inputs: list[dict]
    outputs: list[str]
    threads: int
    environment: dict
    segments: list[dict]
    selection: dict
    optimize: OptimizeRecord | None = None
    accuracy: AccuracyRecord | None = None
    #: a plan for a shape profile: its variants (model file, runtime, precision, the shapes each serves) and the
    #: profile with what every bucket measured (:mod:`rlcompile.shapes`); ``segments`` is then empty
    shapes: dict | None = None
    #: ``--objective throughput``: the requests in flight, the serving configuration kept (runtime, sessions x
    #: threads or OpenVINO's hint and streams) and what every plan and configuration pair served
    #: (:mod:`rlcompile.optimize.serving`)
    serving: dict | None = None
    format: str = FORMAT
    version: int = VERSION
    #: the keys in the order the file has them
    ORDER: ClassVar[tuple[str, ...]] = ("format", "version", "model", "source", "fingerprint", "inputs", "outputs",
                                        "threads", "environment", "segments", "selection", "accuracy",
                                        "optimize", "shapes", "serving")  # fmt: skip

    def to_json(self) -> dict:
        values = {item.name: getattr(self, item.name) for item in fields(self)}
        values["optimize"] = self.optimize.to_json() if self.optimize is not None else None
        values["accuracy"] = self.accuracy.to_json() if self.accuracy is not None else None
        return {key: values[key] for key in self.ORDER if values[key] is not None}

    @classmethod
    def from_json(cls, data: dict) -> Manifest:
        if data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT}")
        optimize = OptimizeRecord.from_json(data["optimize"]) if data.get("optimize") else None
        accuracy = AccuracyRecord.from_json(data["accuracy"]) if data.get("accuracy") else None
        names = {item.name for item in fields(cls)} - {"optimize", "accuracy"}
        return cls(**{key: value for key, value in data.items() if key in names}, optimize=optimize,
                   accuracy=accuracy)  # fmt: skip

    @property
    def runtimes(self) -> list[str]:
        """The runtimes the plan's segments (a shape profile's plan: its variants) run on, in the order they first
        appear."""
        if self.shapes is not None:
            return list(dict.fromkeys(entry["variant"]["library"] for entry in self.shapes["variants"]))
        return list(dict.fromkeys(segment["library"] for segment in self.segments))

    def segment_threads(self, index: int) -> int:
        """The threads segment ``index`` runs at: its own count where the selection measured it faster at fewer than
        the plan's (:mod:`~rlcompile.layer.selection.fewer_threads`), else :attr:`threads` (the count the user asked
        for, at which the natives were timed)."""
        return self.segments[index].get("threads") or self.threads

    def save(self, directory: Path) -> Manifest:
        """Write ``directory/manifest.json`` in one step; returns this manifest, as the file holds it."""
        atomic.write_json(Path(directory) / MANIFEST, self.to_json(), indent=1)
        return self

    @classmethod
    def load(cls, directory: str | Path) -> Manifest:
        """Read ``directory/manifest.json`` (OSError, ValueError or KeyError when it is not one)."""
        return cls.from_json(json.loads((Path(directory) / MANIFEST).read_text()))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Manifest):
            return NotImplemented
        return json.loads(json.dumps(self.to_json())) == json.loads(json.dumps(other.to_json()))

    __hash__ = None  # type: ignore[assignment]


__all__ = ["FORMAT", "MANIFEST", "VERSION", "AccuracyRecord", "GraphRecord", "KernelRecord", "LatencyRecord",
           "LayerRecord", "Manifest", "OptimizeRecord", "Record"]  # fmt: skip
