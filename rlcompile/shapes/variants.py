"""The variants a shape profile's plan is made of: one model file, run by one runtime at one float precision,
either dynamic (it serves every shape of the profile) or reshaped to one bucket's shape (it serves that shape).

A :class:`Variant` names what it runs: the runtime, the float precision (OpenVINO's bf16 hint), the int8 recipe
its model was quantized with (``None``: the user's fp32 model) and, for a static variant, the bucket it was
reshaped for. Reshaping sets the inputs' dims in the ONNX file, which both runtimes then specialise for (ONNX
Runtime folds the shape arithmetic; OpenVINO compiles as ``reshape`` would).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from rlcompile import runtimes
from rlcompile.models.onnx_model import input_values, set_static_shape
from rlcompile.runtimes import Runner, RuntimeOptions


@dataclass(frozen=True)
class Variant:
    """One way to run the model: ``library`` at ``precision``, on the model quantized by ``recipe`` (``None``:
    the fp32 model), dynamic or reshaped to the bucket labelled ``static``."""

    library: str
    precision: str = "fp32"
    recipe: str | None = None
    static: str | None = None

    @property
    def label(self) -> str:
        words = [self.library, self.precision if self.recipe is None else f"int8 {self.recipe}"]
        if self.recipe is not None and self.precision != "fp32":
            words.append(f"{self.precision} float")
        words.append(f"static {self.static}" if self.static else "dynamic")
        return " ".join(words)

    @property
    def native(self) -> bool:
        """The user's model run by the library as it comes (what the natives are)."""
        return self.recipe is None and self.precision == "fp32" and self.static is None

    @property
    def lowered(self) -> bool:
        return self.recipe is not None or self.precision != "fp32"

    def dynamic(self) -> Variant:
        return Variant(self.library, self.precision, self.recipe)

    def at(self, bucket: str) -> Variant:
        return Variant(self.library, self.precision, self.recipe, bucket)

    def to_json(self) -> dict:
        return {"library": self.library, "precision": self.precision, "recipe": self.recipe, "static": self.static}

    @classmethod
    def from_json(cls, data: Mapping) -> Variant:
        return cls(data["library"], data.get("precision", "fp32"), data.get("recipe"), data.get("static"))


def reshaped(proto: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> onnx.ModelProto:
    """A copy of ``proto`` whose inputs have the static ``shapes``."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    for value in input_values(model):
        if value.name in shapes:
            set_static_shape(value, tuple(shapes[value.name]))
    return model


def compile_variant(variant: Variant, proto: onnx.ModelProto, threads: int, copies: int = 1) -> list[Runner]:
    """``copies`` compiles of ``proto`` (the variant's model, already reshaped when static) by its runtime, run
    alone with ``threads`` threads at its precision."""
    options = RuntimeOptions(threads, exclusive=True, precision=variant.precision)
    return runtimes.create(variant.library).compile_copies(proto, copies, options, variant.label)
