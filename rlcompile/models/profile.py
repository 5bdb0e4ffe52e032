"""Shape profiles: the input shapes a deployment sends, as ranges and sets per dimension.

``--input-shape input_ids=1-8,16-256`` says that dimension 0 takes any size from 1 to 8 and dimension 1
any from 16 to 256; ``1|4|8`` is a set of sizes; a plain number is a fixed size (a profile of fixed
sizes only is one shape, as before). Dimensions that the model names alike (``batch``, ``sequence``)
are one **axis**: every input that has it must be given the same range, and one value of it serves
them all. A profile is judged at a few **buckets**: per axis, both ends of its range and points
between them on a log scale, at most :data:`MAX_STEP` apart (rounded to powers of two where one
lies near); a set's members are its points. The buckets are every combination of the axes' points,
each with a weight: uniform over the points without data, the share of the samples nearest each
point when samples are given (only for an axis whose size differs between samples).

Each point also owns a **region** of its axis, cut at the geometric mean of neighbouring points, so
that every size in the range belongs to one bucket's region: a plan dispatches a shape to the
variant that serves the region it falls in.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from rlcompile.errors import ModelError

#: Largest ratio between neighbouring points of an axis: 16-256 is judged at 16, 64 and 256, 1-8 at 1, 4, 8.
MAX_STEP = 4.0
RANGE = re.compile(r"^(\d+)\s*(?:-|\.\.)\s*(\d+)$")
SET = re.compile(r"^\d+(\s*\|\s*\d+)+$")


@dataclass(frozen=True)
class DimRange:
    """The sizes a dimension takes: ``low..high`` (every size between), or ``members`` only when a set."""

    low: int
    high: int
    members: tuple[int, ...] = ()

    @property
    def fixed(self) -> bool:
        return self.low == self.high

    def contains(self, size: int) -> bool:
        return size in self.members if self.members else self.low <= size <= self.high

    def points(self) -> tuple[int, ...]:
        """The sizes this range is judged at (see the module's docstring)."""
        if self.members:
            return self.members
        if self.fixed:
            return (self.low,)
        steps = max(1, math.ceil(math.log(self.high / self.low) / math.log(MAX_STEP) - 1e-9))
        inner = [round_point(self.low * (self.high / self.low) ** (k / steps)) for k in range(1, steps)]
        return tuple(sorted({self.low, *(p for p in inner if self.low < p < self.high), self.high}))

    def describe(self) -> str:
        if self.members:
            return "|".join(map(str, self.members))
        return str(self.low) if self.fixed else f"{self.low}-{self.high}"

    def to_json(self) -> list:
        return list(self.members) if self.members else [self.low, self.high]


def round_point(value: float) -> int:
    """``value`` as the nearest power of two when one lies within a factor 1.5, else as the nearest integer."""
    power = 2 ** round(math.log2(value)) if value >= 1 else 1
    return int(power) if max(power / value, value / power) <= 1.5 else max(1, round(value))


def parse_dim(text: str, spec: str) -> DimRange:
    """One dimension of ``--input-shape``: ``N``, ``LOW-HIGH`` (or ``LOW..HIGH``) or ``A|B|C``."""
    text = text.strip()
    if text.isdigit() and int(text) > 0:
        return DimRange(int(text), int(text))
    if (match := RANGE.match(text)) and 0 < int(match[1]) <= int(match[2]):
        return DimRange(int(match[1]), int(match[2]))
    if SET.match(text):
        members = tuple(sorted({int(part) for part in text.split("|")}))
        if members[0] > 0:
            return DimRange(members[0], members[-1], members if len(members) > 1 else ())
    raise ModelError(f"bad --input-shape {spec!r}: each dim is N, LOW-HIGH (LOW <= HIGH) or A|B|C, all positive "
                     f"integers, e.g. input_ids=1-8,16-512")  # fmt: skip


def parse_profile_entry(text: str) -> tuple[str, tuple[DimRange, ...]]:
    """``NAME=D1,D2,...`` (also ``NAME:D1xD2``) with each dim as :func:`parse_dim` takes it."""
    separator = "=" if "=" in text else ":"
    name, _, dims = text.rpartition(separator)
    pieces = re.split(r"[,x]", dims) if dims.strip() else []
    if not name or not pieces:
        raise ModelError(f"bad --input-shape {text!r}: expected NAME=D1,D2,... (a dim: N, LOW-HIGH or A|B|C)")
    return name, tuple(parse_dim(piece, text) for piece in pieces)


@dataclass(frozen=True)
class Axis:
    """One dynamic size of the profile: the model's name for it (or ``input[index]``) and its range."""

    name: str
    range: DimRange
    #: (input, dimension index) of every input dimension it sets
    places: tuple[tuple[str, int], ...]

    def regions(self) -> list[tuple[int, int]]:
        """Each point's region ``(low, high)``: the range cut at the geometric means of neighbouring points."""
        points = self.range.points()
        if self.range.members:
            return [(p, p) for p in points]
        cuts = [math.floor(math.sqrt(a * b)) for a, b in itertools.pairwise(points)]
        lows = [self.range.low, *(cut + 1 for cut in cuts)]
        highs = [*cuts, self.range.high]
        return list(zip(lows, highs, strict=True))


@dataclass(frozen=True)
class Bucket:
    """One shape of the profile: every input's shape, the axes' values, its weight and its region."""

    shapes: dict[str, tuple[int, ...]]
    values: dict[str, int]
    weight: float
    #: per axis, the sizes whose shapes this bucket stands for
    region: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return "x".join(f"{value}" for value in self.values.values()) or "fixed"

    def to_json(self) -> dict:
        return {"label": self.label, "shapes": {k: list(v) for k, v in self.shapes.items()}, "values": self.values,
                "weight": self.weight, "region": {k: list(v) for k, v in self.region.items()}}  # fmt: skip


@dataclass(frozen=True)
class ShapeProfile:
    """Every input's dims as ranges (fixed dims as one-size ranges), and the axes they form."""

    dims: dict[str, tuple[DimRange, ...]]
    axes: tuple[Axis, ...]

    @property
    def dynamic(self) -> bool:
        return bool(self.axes)

    def shape(self, values: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
        """Every input's shape with the axes set to ``values``."""
        shapes = {name: [d.low for d in dims] for name, dims in self.dims.items()}
        for axis in self.axes:
            for name, index in axis.places:
                shapes[name][index] = values[axis.name]
        return {name: tuple(shape) for name, shape in shapes.items()}

    def axis_values(self, shapes: Mapping[str, Sequence[int]]) -> dict[str, int] | None:
        """The axes' values of actual input shapes; ``None`` when a fixed dim differs, an input's rank is wrong or
        two inputs disagree on an axis."""
        values: dict[str, int] = {}
        for name, dims in self.dims.items():
            shape = tuple(shapes[name]) if name in shapes else None
            if shape is None or len(shape) != len(dims):
                return None
            for index, (dim, size) in enumerate(zip(dims, shape, strict=True)):
                axis = self.axis_of(name, index)
                if axis is None:
                    if size != dim.low:
                        return None
                elif values.setdefault(axis, int(size)) != size:
                    return None
        return values

    def axis_of(self, name: str, index: int) -> str | None:
        return next((axis.name for axis in self.axes if (name, index) in axis.places), None)

    def contains(self, shapes: Mapping[str, Sequence[int]]) -> bool:
        values = self.axis_values(shapes)
        return values is not None and all(axis.range.contains(values[axis.name]) for axis in self.axes)

    def buckets(self, samples: Iterable[Mapping[str, np.ndarray]] = ()) -> list[Bucket]:
        """The shapes the profile is judged at, weighted (see the module's docstring)."""
        weights = {axis.name: self.axis_weights(axis, samples) for axis in self.axes}
        buckets = []
        for combination in itertools.product(*(range(len(axis.range.points())) for axis in self.axes)):
            values = {axis.name: axis.range.points()[k] for axis, k in zip(self.axes, combination, strict=True)}
            region = {axis.name: axis.regions()[k] for axis, k in zip(self.axes, combination, strict=True)}
            weight = math.prod(weights[axis.name][k] for axis, k in zip(self.axes, combination, strict=True))
            buckets.append(Bucket(self.shape(values), values, weight, region))
        return buckets

    def axis_weights(self, axis: Axis, samples: Iterable[Mapping[str, np.ndarray]]) -> list[float]:
        """The share of ``samples`` in each point's region when their sizes on ``axis`` differ; else uniform."""
        name, index = axis.places[0]
        sizes = [int(np.shape(sample[name])[index]) for sample in samples if name in sample]
        regions = axis.regions()
        counts = [sum(low <= size <= high for size in sizes) for low, high in regions]
        if len(set(sizes)) < 2 or not sum(counts):
            return [1.0 / len(regions)] * len(regions)
        return [count / sum(counts) for count in counts]

    def describe(self) -> str:
        return "; ".join(f"{name}={','.join(d.describe() for d in dims)}" for name, dims in self.dims.items())

    def ranges_text(self) -> str:
        """The axes' ranges, as a one-line error names them."""
        return ", ".join(f"{axis.name} {axis.range.describe()}" for axis in self.axes) or "one fixed shape"

    def to_json(self) -> dict:
        return {"inputs": {name: [d.to_json() for d in dims] for name, dims in self.dims.items()},
                "axes": [{"name": a.name, "range": a.range.to_json(), "points": list(a.range.points()),
                          "places": [list(p) for p in a.places]} for a in self.axes]}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping) -> ShapeProfile:
        dims = {name: tuple(range_from_json(d) for d in entry) for name, entry in data["inputs"].items()}
        axes = tuple(Axis(a["name"], range_from_json(a["range"]), tuple((p[0], int(p[1])) for p in a["places"]))
                     for a in data["axes"])  # fmt: skip
        return cls(dims, axes)


def range_from_json(entry: Sequence[int]) -> DimRange:
    if len(entry) == 2 and entry[0] < entry[1]:
        return DimRange(int(entry[0]), int(entry[1]))
    if len(entry) == 2 and entry[0] == entry[1]:
        return DimRange(int(entry[0]), int(entry[0]))
    return DimRange(int(entry[0]), int(entry[-1]), tuple(int(e) for e in entry))


def is_profile_text(texts: Sequence[str] | None) -> bool:
    """Whether some ``--input-shape`` value gives a range or a set (the fixed-shape form is parsed as before)."""
    return any(re.search(r"\d\s*(-|\.\.|\|)\s*\d", text.rpartition("=")[2] or text) for text in texts or ())


def build_profile(texts: Sequence[str], inputs: Sequence) -> ShapeProfile:
    """The profile of ``--input-shape`` values on a model with ``inputs`` (:class:`TensorSpec`): unknown names,
    rank mismatches, ranges over a dim the model fixes, dynamic dims left unset and one named axis given two
    ranges are each refused in one line."""
    given: dict[str, tuple[DimRange, ...]] = {}
    for text in texts:
        name, dims = parse_profile_entry(text)
        if name in given:
            raise ModelError(f"--input-shape given twice for input {name!r}")
        given[name] = dims
    known = {spec.name: spec for spec in inputs}
    for name in given:
        if name not in known:
            listed = ", ".join(spec.describe() for spec in inputs)
            raise ModelError(f"--input-shape names {name!r}, but the model has inputs: {listed}")
    dims: dict[str, tuple[DimRange, ...]] = {}
    places: dict[str, list[tuple[str, int]]] = {}
    ranges: dict[str, DimRange] = {}
    for spec in inputs:
        wanted = given.get(spec.name)
        if wanted is None:
            if not spec.is_static:
                raise ModelError(f"input {spec.describe()} has dynamic dims; give its sizes or ranges with "
                                 f"--input-shape {spec.name}=... (e.g. 1-8,16-256)")  # fmt: skip
            wanted = tuple(DimRange(int(d), int(d)) for d in spec.shape)
        if len(wanted) != len(spec.shape):
            raise ModelError(f"--input-shape {spec.name} has {len(wanted)} dims, but input {spec.describe()} has "
                             f"{len(spec.shape)}")  # fmt: skip
        for index, (dim, model_dim) in enumerate(zip(spec.shape, wanted, strict=True)):
            if isinstance(dim, int) and dim > 0 and not (model_dim.fixed and model_dim.low == dim):
                raise ModelError(f"--input-shape {spec.name} sets dim {index} to {model_dim.describe()}, but the "
                                 f"model fixes it to {dim}")  # fmt: skip
            if model_dim.fixed:
                continue
            axis = dim if isinstance(dim, str) and dim else f"{spec.name}[{index}]"
            if ranges.setdefault(axis, model_dim) != model_dim:
                raise ModelError(f"--input-shape gives the model's axis {axis!r} two ranges "
                                 f"({ranges[axis].describe()} and {model_dim.describe()}); give it one")  # fmt: skip
            places.setdefault(axis, []).append((spec.name, index))
        dims[spec.name] = wanted
    axes = tuple(Axis(name, ranges[name], tuple(where)) for name, where in places.items())
    return ShapeProfile(dims, axes)


def fit_sample(sample: Mapping[str, np.ndarray], shapes: Mapping[str, tuple[int, ...]],
               others: Sequence[Mapping[str, np.ndarray]] = ()) -> dict[str, np.ndarray]:  # fmt: skip
    """A sample's inputs brought to ``shapes``: cut or zero-padded at the end of each dim, the first dim filled
    with the rows of ``others`` (then of the sample again) where the shape asks for more rows than it has."""
    fitted = {}
    pool = [sample, *others]
    for name, shape in shapes.items():
        rows = [np.asarray(each[name]) for each in pool if name in each]
        stacked = np.concatenate([fit_array(row, (row.shape[0], *shape[1:])) for row in rows], axis=0)
        while stacked.shape[0] < shape[0]:
            stacked = np.concatenate([stacked, stacked], axis=0)
        fitted[name] = np.ascontiguousarray(stacked[: shape[0]])
    return fitted


def fit_array(array: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """``array`` cut or zero-padded at the end of each dim to ``shape`` (same rank)."""
    array = array[tuple(slice(0, size) for size in shape)]
    padding = [(0, size - have) for size, have in zip(shape, array.shape, strict=True)]
    return np.pad(array, padding) if any(after for _, after in padding) else array
