"""What a runtime is: something that compiles an ONNX model into a runner, with stated options.

Every level runs graphs the same way: the graph level times rewrites in ONNX Runtime, the layer level
compiles each segment of a plan in the library chosen for it, ``compare`` and ``run`` time whole
models, the kernel level runs what TVM built with its tuning records. A :class:`Runtime` takes an
``onnx.ModelProto`` and :class:`RuntimeOptions` and returns a :class:`Runner`; it says which nodes it
can run (:meth:`Runtime.supports`), why it cannot be used in this process at all
(:meth:`Runtime.unavailable`), and can save what it compiled beside the model's ONNX file so that a
plan directory runs again without recompiling the slow ones (:meth:`Runtime.save`, :meth:`Runtime.load`).

Runtimes import nothing from :mod:`rlcompile.models`: they see ONNX protos and numpy arrays only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx

from rlcompile.errors import RlcompileError, check_choice
from rlcompile.machine import host_cores
from rlcompile.measure.contest import Timer

Feeds = Mapping[str, np.ndarray]
#: The float precisions a runtime may be asked for: ``fp32`` (exact as the model says) and ``bf16`` (float
#: arithmetic in bfloat16, on CPUs with AVX512-BF16 or AMX). int8 is not an option but part of the model:
#: QDQ nodes that every runtime honours per node.
PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class RuntimeOptions:
    """How a model is compiled: the same for every runtime.

    ``threads``: intra-op threads (``None``: every core this process may use).
    ``exclusive``: the model runs alone (a native run, or a plan of one segment), so the runtime keeps
    its own idle-thread policy (spinning between runs is then free latency) instead of yielding the
    cores after each call to the next segment's library.
    ``precision``: how exactly to compute float arithmetic; ``fp32`` is exact as the model says, ``bf16``
    only where the runtime offers it (:meth:`Runtime.precisions`).
    """

    threads: int | None = None
    exclusive: bool = False
    precision: str = "fp32"

    def __post_init__(self) -> None:
        check_choice("precision", self.precision, PRECISIONS)
        if self.threads is not None and self.threads < 1:
            raise RlcompileError(f"threads must be at least 1, not {self.threads}")

    @property
    def thread_count(self) -> int:
        return self.threads or host_cores()


NATIVE = RuntimeOptions(exclusive=True)


class Runner(ABC):
    """A compiled model: positional inputs in, positional outputs out (numpy, the ONNX layout).

    ``input_names`` are the model's inputs in the order :meth:`__call__` takes them.
    """

    input_names: list[str]
    #: seconds :meth:`Runtime.compile` spent (import, compile, session creation)
    prepare_seconds: float = 0.0
    #: seconds its library's idle threads keep a core busy after a call (what a contest waits after its turn;
    #: ONNX Runtime's: :func:`~rlcompile.threads.ort_wind_down_s`)
    wind_down_s: float = 0.0

    @abstractmethod
    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]: ...

    def run(self, feeds: Feeds) -> list[np.ndarray]:
        """Run once on ``feeds`` (by input name) and return every output as a numpy array."""
        return [np.asarray(output) for output in self.caller(self.input_names)(feeds)]

    def caller(self, names: Sequence[str]) -> Callable[[Feeds], list[np.ndarray]]:
        """A call on ``feeds`` by input name (``names`` in this runner's input order), bound once: a saved plan's
        ``run`` is this callable, so each layer of Python between the user and the runtime is paid per call (on
        LeNet-5, 25 us a run, three such layers made ``load().run`` 1.4% slower than the session's own call).
        Runtimes that take a mapping or positions themselves override it to skip the copy into a list."""
        names = list(names)
        return lambda feeds: self([feeds[name] for name in names])

    def timer(self, feeds: Feeds) -> Callable[[], object]:
        """A callable that runs once on inputs placed where the runtime wants them, and blocks until the
        result is ready: timing it measures inference and nothing else."""
        arrays = [feeds[name] for name in self.input_names]
        return lambda: self(arrays)

    def timed(self, feeds: Feeds) -> Timer:
        """:meth:`timer` with this runner's wind-down: what a contest times it as."""
        return Timer(self.timer(feeds), self.wind_down_s)


class Runtime(ABC):
    """One inference library; ``name`` is what plans, tables and the CLI call it."""

    name: ClassVar[str]
    #: whether the model must have constant shapes (no shape computation at run time) to be compiled
    needs_static_shapes: ClassVar[bool] = False

    def unavailable(self) -> str | None:
        """Why this runtime cannot be used in this process (``None`` when it can)."""
        return None

    def supports(self, nodes: Sequence[onnx.NodeProto]) -> bool:
        """Whether this runtime can run all of ``nodes`` (the default runs any operator)."""
        return True

    def precisions(self) -> dict[str, str | None]:
        """{precision: why it cannot be used here (``None`` when it can)} for each of :data:`PRECISIONS`."""
        return {"fp32": None, "bf16": f"{self.name} computes float arithmetic in fp32 only"}

    def check_precision(self, options: RuntimeOptions) -> None:
        """Refuse (one line) options whose precision this runtime cannot give on this machine."""
        why = self.precisions().get(options.precision)
        if why is not None:
            raise RlcompileError(f"{options.precision} with {self.name}: {why}")

    def layer_times(self, models: Sequence[onnx.ModelProto], feeds: Feeds, options: RuntimeOptions = NATIVE,
                    rounds: int = 15) -> list[list[tuple[frozenset[str], float]]] | None:  # fmt: skip
        """Where the time of one call of each of ``models`` goes (the models called in turns, so that a slow spell
        of the machine falls on all of them): per executed kernel, the names of the model's nodes it runs (fused
        ones together) and its median time in ms over ``rounds`` calls on ``feeds``, from the library's own
        counters; ``None`` where the library keeps none (the default)."""
        return None

    @abstractmethod
    def compile(self, model: onnx.ModelProto, options: RuntimeOptions = NATIVE, name: str | None = None) -> Runner:
        """Compile ``model``; ``name`` is what a one-line error calls it (default: the graph's name).

        Raises :class:`~rlcompile.errors.RlcompileError` (one line) when the runtime cannot take the model.
        """

    def compile_copies(self, model: onnx.ModelProto, count: int, options: RuntimeOptions = NATIVE,
                       name: str | None = None) -> list[Runner]:  # fmt: skip
        """``count`` independent compiles of one model (a native run and its identical twin): each its own session,
        the model read once where the library allows (a large model's reading can take seconds)."""
        return [self.compile(model, options, name) for _ in range(count)]

    def save(self, runner: Runner, stem: Path) -> list[str]:
        """Write what ``runner`` compiled next to ``stem`` (the model's ``.onnx`` path without suffix).

        Returns the file names written; the default writes nothing, the ONNX file being enough.
        """
        return []

    def load(self, model: onnx.ModelProto, stem: Path, files: Sequence[str], options: RuntimeOptions = NATIVE,
             ) -> Runner:  # fmt: skip
        """The runner :meth:`save` wrote, or a fresh compile of ``model``."""
        return self.compile(model, options)

    def describe(self, options: RuntimeOptions = NATIVE) -> str:
        """A short label with the settings that matter, e.g. ``ort (all, 2 threads)``."""
        return f"{self.name} ({self.threads(options)} threads)"

    def threads(self, options: RuntimeOptions = NATIVE) -> int:
        """Threads the runtime runs inference with under ``options`` (recorded with every measurement)."""
        return options.thread_count

    def __repr__(self) -> str:
        return f"<runtime {self.name}>"


def model_name(model: onnx.ModelProto, name: str | None, default: str = "model") -> str:
    return name or model.graph.name or default


def graph_input_names(model: onnx.ModelProto) -> list[str]:
    """The inputs a caller feeds (graph inputs that are not initializers), in order."""
    initializers = {init.name for init in model.graph.initializer}
    return [value.name for value in model.graph.input if value.name not in initializers]
