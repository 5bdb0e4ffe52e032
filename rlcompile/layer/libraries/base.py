"""What a library is at the layer level: something that compiles an ONNX segment into a runner.

Each library compiles a whole segment (consecutive fusion groups) as one unit, so the fusions and
layouts it would use on the whole model apply inside the segment; values cross between libraries
only at segment boundaries, as numpy arrays in the ONNX (NCHW) layout. A :class:`Library` says which
nodes it can run (:meth:`Library.supports`), compiles a segment for a thread count
(:meth:`Library.compile`) and can save what it compiled beside the segment's ONNX file so that a plan
directory runs again without recompiling the slow ones (:meth:`Library.save`, :meth:`Library.load`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx


class Runner(ABC):
    """A compiled segment: positional inputs in, positional outputs out (numpy, NCHW)."""

    @abstractmethod
    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]: ...

    def run_named(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Run on ``feeds`` by input name (``names`` in this runner's input order); libraries that take a
        name -> array mapping themselves override it to skip the copy into a list."""
        return self([feeds[name] for name in names])


class Library(ABC):
    """One inference library; ``name`` is what plans, tables and the CLI call it."""

    name: ClassVar[str]

    def unavailable(self) -> str | None:
        """Why this library cannot be used in this process (``None`` when it can)."""
        return None

    def supports(self, nodes: Sequence[onnx.NodeProto]) -> bool:
        """Whether this library can run all of ``nodes`` (the default runs any operator)."""
        return True

    @abstractmethod
    def compile(self, segment: onnx.ModelProto, threads: int, exclusive: bool = False) -> Runner:
        """Compile ``segment`` for ``threads`` threads.

        ``exclusive``: the plan is this one segment, so the library keeps its own idle-thread policy
        (spinning between runs is then free latency) instead of yielding the cores after each call.
        """

    def save(self, runner: Runner, stem: Path) -> list[str]:
        """Write what ``runner`` compiled next to ``stem`` (the segment's ``.onnx`` path without suffix).

        Returns the file names written; the default writes nothing, the ONNX file being enough.
        """
        return []

    def load(self, segment: onnx.ModelProto, stem: Path, files: Sequence[str], threads: int,
             exclusive: bool = False) -> Runner:  # fmt: skip
        """The runner :meth:`save` wrote, or a fresh compile of ``segment``."""
        return self.compile(segment, threads, exclusive)

    def __repr__(self) -> str:
        return f"<library {self.name}>"
