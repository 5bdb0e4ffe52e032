"""A plan for a shape profile, saved and loaded: its variants' model files and the shapes each serves.

::

    DIR/manifest.json    as every plan's, with ``shapes``: the profile, the variants (file, runtime, precision,
                         int8 recipe, the regions of shapes each serves), what every bucket measured
    DIR/variants/        one ONNX model per variant (a static one has its bucket's input shapes)
    DIR/reference.npz    the first bucket's inputs and outputs (a plan below fp32: its own outputs)
    DIR/buckets.npz      every bucket's inputs and outputs (``{k}:input:{name}``, ``{k}:output:{i}``)
    DIR/validation.npz   a plan below fp32: the held-out samples and their fp32 outputs

:class:`ShapedPlan`'s ``run(feeds)`` picks the variant that serves the feeds' shapes (static variants first,
then the dynamic variants' regions); a shape outside every region is refused in one line naming the ranges.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from rlcompile.errors import RlcompileError, first_line
from rlcompile.machine import check_machine
from rlcompile.manifest import MANIFEST, Manifest
from rlcompile.measure import Timer
from rlcompile.models.onnx_model import TensorSpec
from rlcompile.models.profile import ShapeProfile
from rlcompile.precision.contract import VALIDATION
from rlcompile.runtimes import Runner
from rlcompile.shapes.variants import Variant, compile_variant

VARIANTS = "variants"
REFERENCE = "reference.npz"
BUCKETS = "buckets.npz"


def variant_file(index: int, variant: Variant) -> str:
    return f"{VARIANTS}/{index:02d}_{variant.label.replace(' ', '_').replace('|', '-')}.onnx"


def write_arrays(path: Path, cases: Sequence[tuple[Mapping[str, np.ndarray], Sequence[np.ndarray]]]) -> None:
    """``reference.npz``'s layout for one case, ``buckets.npz``'s (``{k}:`` before each key) for several."""
    arrays = {}
    for index, (feeds, outputs) in enumerate(cases):
        prefix = "" if path.name == REFERENCE else f"{index}:"
        arrays |= {f"{prefix}input:{name}": value for name, value in feeds.items()}
        arrays |= {f"{prefix}output:{k}": value for k, value in enumerate(outputs)}
    np.savez(path, **arrays)


def read_cases(path: Path) -> list[tuple[dict[str, np.ndarray], list[np.ndarray]]]:
    """The (inputs, outputs) of every bucket in ``buckets.npz``."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    count = 1 + max((int(key.split(":", 1)[0]) for key in arrays), default=-1)
    cases = []
    for index in range(count):
        feeds = {key.split(":", 2)[2]: value for key, value in arrays.items() if key.startswith(f"{index}:input:")}
        outputs = [arrays[f"{index}:output:{k}"] for k in range(sum(key.startswith(f"{index}:output:")
                                                                    for key in arrays))]  # fmt: skip
        cases.append((feeds, outputs))
    return cases


def write_shaped_plan(output: Path, manifest: Manifest, models: Sequence[onnx.ModelProto],
                      cases: Sequence[tuple[Mapping[str, np.ndarray], Sequence[np.ndarray]]],
                      validation: Mapping[str, np.ndarray] | None) -> Manifest:  # fmt: skip
    """Write the plan: ``models[i]`` is ``manifest.shapes["variants"][i]``'s model; the manifest goes last."""
    output.mkdir(parents=True, exist_ok=True)
    (output / MANIFEST).unlink(missing_ok=True)
    shutil.rmtree(output / VARIANTS, ignore_errors=True)
    (output / VARIANTS).mkdir()
    for entry, proto in zip(manifest.shapes["variants"], models, strict=True):
        onnx.save(proto, str(output / entry["file"]))
    write_arrays(output / REFERENCE, cases[:1])
    write_arrays(output / BUCKETS, cases)
    (output / VALIDATION).unlink(missing_ok=True)
    if validation is not None:
        np.savez(output / VALIDATION, **validation)
    return manifest.save(output)


@dataclass
class LoadedVariant:
    variant: Variant
    regions: list[dict[str, tuple[int, int]]]
    runner: Runner

    def serves(self, values: Mapping[str, int]) -> bool:
        return any(all(low <= values[axis] <= high for axis, (low, high) in region.items())
                   for region in self.regions)  # fmt: skip


@dataclass
class ShapedPlan:
    """A shape profile's plan, compiled: ``run(feeds)`` dispatches on the feeds' shapes."""

    path: Path
    manifest: Manifest = field(repr=False)
    profile: ShapeProfile
    variants: list[LoadedVariant] = field(repr=False)
    reference_inputs: dict[str, np.ndarray] = field(repr=False)
    reference_outputs: list[np.ndarray] = field(repr=False)
    picked: dict[tuple, LoadedVariant] = field(default_factory=dict, repr=False)

    @property
    def inputs(self) -> list[TensorSpec]:
        return [TensorSpec(i["name"], tuple(i["shape"]), np.dtype(i["dtype"])) for i in self.manifest.inputs]

    @property
    def libraries(self) -> list[str]:
        return list(dict.fromkeys(item.variant.library for item in self.variants))

    @property
    def record(self) -> Manifest:
        return self.manifest

    def pick(self, feeds: Mapping[str, np.ndarray]) -> LoadedVariant:
        """The variant that serves the feeds' shapes (remembered per shape); one line naming the ranges when none
        does."""
        shapes = {name: np.shape(value) for name, value in feeds.items()}
        key = tuple(shapes.items())
        if key in self.picked:
            return self.picked[key]
        values = self.profile.axis_values(shapes)
        if values is not None:
            for item in self.variants:
                if item.serves(values):
                    self.picked[key] = item
                    return item
        described = ", ".join(f"{name} {list(shape)}" for name, shape in shapes.items())
        raise RlcompileError(f"no variant of {self.path} serves inputs of shapes {described}; the plan serves "
                             f"{self.profile.describe()} ({self.profile.ranges_text()})")  # fmt: skip

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs for ``feeds`` (by input name; other arrays, such as a sample's labels, are ignored)."""
        inputs = {name: feeds[name] for name in self.profile.dims}
        return self.pick(inputs).runner.run(inputs)

    def timer(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        """One call as a user calls :meth:`run` (the dispatch included)."""
        run = self.run
        return lambda: run(feeds)

    def timed(self, feeds: Mapping[str, np.ndarray]) -> Timer:
        return Timer(self.timer(feeds), self.pick(feeds).runner.wind_down_s)

    def bucket_cases(self) -> list[tuple[dict[str, np.ndarray], list[np.ndarray]]]:
        """Every bucket's saved inputs and outputs."""
        return read_cases(self.path / BUCKETS)

    def describe(self) -> str:
        count = len(self.variants)
        return (f"{self.manifest.model} for {self.profile.ranges_text()}: {count} variant{'s' if count > 1 else ''} "
                f"({'; '.join(item.variant.label for item in self.variants)}), {self.manifest.threads} threads")


def load_shaped_plan(path: Path, manifest: Manifest, inputs: dict[str, np.ndarray], outputs: list[np.ndarray],
                     threads: int | None = None) -> ShapedPlan:  # fmt: skip
    """Compile every variant of the shaped plan at ``path`` (its manifest and reference already read by
    :func:`~rlcompile.plan.load_plan`)."""
    check_machine(manifest, path)
    try:
        profile = ShapeProfile.from_json(manifest.shapes["profile"])
        loaded = []
        for entry in manifest.shapes["variants"]:
            variant = Variant.from_json(entry["variant"])
            proto = onnx.load(str(path / entry["file"]))
            runner = compile_variant(variant, proto, threads or manifest.threads)[0]
            regions = [{axis: (int(r[0]), int(r[1])) for axis, r in region.items()} for region in entry["regions"]]
            loaded.append(LoadedVariant(variant, regions, runner))
    except (OSError, KeyError, ValueError, json.JSONDecodeError) as error:
        raise RlcompileError(f"{path} is not a complete rlcompile plan directory: {first_line(error)}") from None
    return ShapedPlan(path, manifest, profile, loaded, inputs, outputs)
