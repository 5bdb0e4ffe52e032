"""The libraries that compete at the layer level, by name: ``libraries.create("openvino")``."""

from __future__ import annotations

from pathlib import Path

from rlcompile.errors import RlcompileError
from rlcompile.layer.libraries.base import Library, Runner

#: Libraries used when the user names none: the ones a CPU user would deploy with. TVM joins when
#: asked for or when a tuning database is given (untuned TVM never wins on CPU).
DEFAULT_LIBRARIES = ("ort", "openvino", "torch")
NAMES = ("ort", "openvino", "torch", "tvm")
#: The library every group can fall back to, and the reference every segment is checked against.
REFERENCE = "ort"


def create(name: str, tuning_db: Path | None = None) -> Library:
    if name == "ort":
        from rlcompile.layer.libraries.ort import OrtLibrary

        return OrtLibrary()
    if name == "openvino":
        from rlcompile.layer.libraries.openvino import OpenVinoLibrary

        return OpenVinoLibrary()
    if name == "torch":
        from rlcompile.layer.libraries.torch_jit import TorchLibrary

        return TorchLibrary()
    if name == "tvm":
        from rlcompile.layer.libraries.tvm import TvmLibrary

        return TvmLibrary(tuning_db)
    raise RlcompileError(f"unknown library {name!r}; choose from {', '.join(NAMES)}")


def parse(text: str | None, tuning_db: Path | None = None) -> list[str]:
    """Library names from ``--libraries a,b`` (default: :data:`DEFAULT_LIBRARIES`, + tvm with a database).

    ONNX Runtime is always included: it is the reference and runs any group.
    """
    names = [name.strip() for name in text.split(",") if name.strip()] if text else list(DEFAULT_LIBRARIES)
    if not text and tuning_db is not None:
        names.append("tvm")
    for name in names:
        if name not in NAMES:
            raise RlcompileError(f"unknown library {name!r}; choose from {', '.join(NAMES)}")
    return [REFERENCE, *[name for name in dict.fromkeys(names) if name != REFERENCE]]


__all__ = ["DEFAULT_LIBRARIES", "NAMES", "REFERENCE", "Library", "Runner", "create", "parse"]
