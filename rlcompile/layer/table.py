"""The lookup table both layer-level paths fill and every solver reads: measured milliseconds per
layer (or fusion group) and option, and per boundary and tensor shape.

The per-operator path (QS-DNN's own, :mod:`rlcompile.layer.per_operator`) fills it with primitives
and layout conversions; the fusion-group path (:mod:`rlcompile.layer.group_table`) with runtimes and
the cost of crossing between them. :class:`Edge` is one activation passed from a producer to a
consumer; what a plan pays between options is paid on edges.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlcompile import atomic
from rlcompile.errors import first_line
from rlcompile.events import Event, Listener, ignore
from rlcompile.measure import MeasureConfig, measure_latency
from rlcompile.verify import compare_outputs

#: Pseudo-layers: the one that produces the model's inputs and the one that consumes its outputs, both
#: in NCHW (as the user gives and expects them).
SOURCE = "<input>"
SINK = "<output>"


@dataclass(frozen=True)
class Edge:
    producer: str
    consumer: str
    value: str
    shape: tuple[int, ...]



#: Per-layer timing: the seed averages 50 runs; we take the median of at least 10 after warm-up.
LAYER_TIMING = MeasureConfig(warmup=3, min_repeats=10, min_time_s=0.05, max_time_s=3.0, floor_repeats=3)
TABLE_VERSION = 1


def shape_key(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape)


def switch_key(before: str, after: str) -> str:
    """The key of a switch from domain ``before`` to ``after``: ordered, because what entering costs depends on what
    ran just before (on the 2-core VM an ORT segment after an OpenVINO one ran 0.7-1.7 ms over its prices, after a
    PyTorch one within them: hf:yolos)."""
    return f"{before}->{after}"


def pair_key(source: str, target: str) -> str:
    """Two domains as one key, whichever way a tensor crosses between them: ``openvino|ort``."""
    return "|".join(sorted((source, target)))


@dataclass
class LookupTable:
    """Measured milliseconds: per layer and primitive, and per conversion and tensor shape."""

    model: str
    layers: list[str]
    options: dict[str, dict[str, float]]
    layouts: dict[str, str]
    edges: list[Edge]
    conversions: dict[str, dict[str, float]]
    rejected: dict[str, dict[str, str]] = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    #: the domain (layout, or library) the model's inputs arrive in and its outputs leave in
    host: str = "nchw"
    #: the option every layer has (the fallback a restricted plan uses)
    default: str = "ort:basic"
    #: how the table was made (calibration, raw measurements), for reports
    notes: dict = field(default_factory=dict)
    #: factors on the cost of crossing between two non-host domains, per pair (:func:`pair_key`; 1 when absent),
    #: learned from measured plans
    boundary_scales: dict[str, float] = field(default_factory=dict)
    #: what switching from one domain to another costs where a plan does, whatever crosses: milliseconds per switch
    #: (:func:`switch_key`; 0 when absent), learned from segments timed in their plans
    #: (:mod:`rlcompile.layer.in_context`)
    segment_entry_ms: dict[str, float] = field(default_factory=dict)

    def entry_ms(self, before: str, after: str) -> float:
        """What a segment in ``after`` costs to enter right after one in ``before`` (:attr:`segment_entry_ms`)."""
        return self.segment_entry_ms.get(switch_key(before, after), 0.0)

    def conversion_ms(self, shape: tuple[int, ...], source: str, target: str, scaled: bool = True) -> float:
        """What crossing from ``source`` to ``target`` costs for a tensor of ``shape`` (0 when not measured);
        ``scaled=False``: as measured, before the learned factor of a library-to-library crossing."""
        if source == target:
            return 0.0
        cost = self.conversions.get(shape_key(shape), {}).get(f"{source}->{target}", 0.0)
        if not scaled or self.host in (source, target):
            return cost
        return cost * self.boundary_scale(pair_key(source, target))

    def boundary_scale(self, pair: str) -> float:
        """The learned factor on crossings between the two domains of ``pair`` (:func:`pair_key`), either way."""
        return self.boundary_scales.get(pair, 1.0)

    def to_json(self) -> dict:
        return asdict(self) | {"version": TABLE_VERSION, "edges": [asdict(edge) for edge in self.edges]}

    @classmethod
    def from_json(cls, data: dict) -> LookupTable:
        # "boundary_scale" (one factor for every pair) was written before the per-pair factors: not carried over,
        # the next measured plans fit the pairs again
        data = {k: v for k, v in data.items() if k not in ("version", "boundary_scale")}
        data["edges"] = [Edge(e["producer"], e["consumer"], e["value"], tuple(e["shape"])) for e in data["edges"]]
        return cls(**data)

    def libraries(self) -> list[str]:
        return sorted({name.split(":")[0] for name in self.layouts})


Progress = Callable[[str], None]


def read_table(path: Path, progress: Listener = ignore) -> LookupTable | None:
    """The table stored at ``path``; ``None`` when there is none or it cannot be read (said, then profiled again)."""
    if not path.exists():
        return None
    try:
        return LookupTable.from_json(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError):
        progress(Event("layer", f"ignoring unreadable table {path}"))
        return None


def save_table(table: LookupTable, path: Path) -> bool:
    """Write ``table`` to ``path``; returns whether it was written. A table whose profile a deadline cut short
    (``notes["cut_short"]``: groups profiled on the default library only; ``notes["boundaries_estimated"]``:
    boundary shapes priced by a fit) is never written: a later run would reuse it as complete instead of finishing
    it."""
    if table.notes.get("cut_short") or table.notes.get("boundaries_estimated"):
        return False
    atomic.write_json(path, table.to_json(), indent=1)
    return True


def time_if_agrees(prepare: Callable[[], tuple[Callable[[], object], list]], reference: list, timing: MeasureConfig,
                   reference_name: str) -> tuple[float, str | None]:  # fmt: skip
    """(median ms, None) when ``prepare()`` -> (call, outputs) works and its outputs agree with ``reference``;
    (nan, why not) otherwise. A library refusing a layer is data, not a crash."""
    try:
        call, outputs = prepare()
    except Exception as error:
        return float("nan"), f"failed: {first_line(error)}"
    try:
        agreement = compare_outputs(reference, outputs)
    except ValueError as error:  # another output count or shape: the library computed something else
        return float("nan"), f"disagrees with {reference_name}: {error}"
    if not agreement.within():
        return float("nan"), f"disagrees with {reference_name} (max rel err {agreement.max_rel:.1e})"
    return measure_latency(call, timing).median_ms, None
