"""Execution backends behind one interface, created by name: ``backends.create("ort")``."""

from __future__ import annotations

from rlcompile.backends.base import Backend, Session
from rlcompile.errors import RlcompileError

__all__ = ["BACKEND_NAMES", "Backend", "Session", "create"]

BACKEND_NAMES = ("ort", "tvm")


def create(name: str, **options: object) -> Backend:
    """Instantiate a backend by name; options go to its constructor (``opt_level``, ``target``)."""
    if name == "ort":
        from rlcompile.backends.ort import OrtBackend

        return OrtBackend(**options)  # type: ignore[arg-type]
    if name == "tvm":
        from rlcompile.backends.tvm import TvmBackend

        return TvmBackend(**options)  # type: ignore[arg-type]
    raise RlcompileError(f"unknown backend {name!r}; choose from {', '.join(BACKEND_NAMES)}")
