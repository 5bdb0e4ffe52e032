"""The interface every execution backend implements.

``Backend.prepare(model)`` compiles or loads the model once and returns a :class:`Session`;
``Session.run(inputs)`` returns the outputs as NumPy arrays, and ``Session.timer(inputs)`` returns a
zero-argument callable that runs the model on inputs already placed where the backend wants them, so
that timing measures inference and nothing else.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping

import numpy as np

from rlcompile.models import LoadedModel

Inputs = Mapping[str, np.ndarray]


class Session(ABC):
    """A prepared model, ready to run."""

    #: Seconds ``prepare`` spent (import, compile, session creation).
    prepare_seconds: float = 0.0

    @abstractmethod
    def run(self, inputs: Inputs) -> list[np.ndarray]:
        """Run once and return every output as a NumPy array."""

    @abstractmethod
    def timer(self, inputs: Inputs) -> Callable[[], None]:
        """A callable that runs once on pre-placed inputs and blocks until the result is ready."""


class Backend(ABC):
    """Turns a :class:`LoadedModel` into a :class:`Session`."""

    name: str = ""

    @abstractmethod
    def prepare(self, model: LoadedModel) -> Session:
        """Compile or load ``model``; raise :class:`~rlcompile.errors.RlcompileError` on bad input."""

    @abstractmethod
    def describe(self) -> str:
        """A short label with the settings that matter, e.g. ``ort (all, 2 threads)``."""

    @abstractmethod
    def threads(self) -> int:
        """Threads the backend runs inference with (recorded with every measurement)."""
