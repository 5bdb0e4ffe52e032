"""Runtimes by name: ``runtimes.create("openvino")``, ``runtimes.create("ort", opt_level="basic")``.

Each runtime's module (and the library behind it) is imported only when that runtime is created.
"""

from __future__ import annotations

from rlcompile.errors import check_choice
from rlcompile.names import DEFAULT_RUNTIMES, REFERENCE_RUNTIME, RUNTIMES
from rlcompile.runtimes.base import NATIVE, PRECISIONS, Runner, Runtime, RuntimeOptions

__all__ = ["DEFAULT_RUNTIMES", "NATIVE", "PRECISIONS", "REFERENCE_RUNTIME", "RUNTIMES", "Runner", "Runtime",
           "RuntimeOptions", "create", "parse"]  # fmt: skip


def create(name: str, **options: object) -> Runtime:
    """Instantiate a runtime by name; options go to its constructor (``opt_level``; ``target``, ``tuning``)."""
    if name == "ort":
        from rlcompile.runtimes.ort import OrtRuntime

        return OrtRuntime(**options)  # type: ignore[arg-type]
    if name == "openvino":
        from rlcompile.runtimes.openvino import OpenVinoRuntime

        return OpenVinoRuntime(**options)
    if name == "torch":
        from rlcompile.runtimes.torch_jit import TorchRuntime

        return TorchRuntime(**options)
    if name == "tvm":
        from rlcompile.runtimes.tvm import TvmRuntime

        return TvmRuntime(**options)  # type: ignore[arg-type]
    check_choice("runtime", name, RUNTIMES)
    raise AssertionError(f"runtime {name!r} is listed but not created")


def parse(text: str | None, with_tvm: bool = False) -> list[str]:
    """Runtime names from ``--libraries a,b`` (default: :data:`DEFAULT_RUNTIMES`, + tvm when ``with_tvm``).

    ONNX Runtime is always included, first: it is the reference and runs any group.
    """
    names = [name.strip() for name in text.split(",") if name.strip()] if text else list(DEFAULT_RUNTIMES)
    if not text and with_tvm:
        names.append("tvm")
    for name in names:
        check_choice("library", name, RUNTIMES)
    return [REFERENCE_RUNTIME, *[name for name in dict.fromkeys(names) if name != REFERENCE_RUNTIME]]
