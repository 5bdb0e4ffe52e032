"""ONNX Runtime on the CPU (execution provider ``CPUExecutionProvider``), at a chosen optimisation level.

Natively (``exclusive``) the session keeps ONNX Runtime's own idle-thread policy, as a user runs it; as
one segment of a plan its workers stop spinning once a run is over (``session.force_spinning_stop``),
so the next segment's library gets the cores, and are pinned to the CPUs after the first, so that each
segment runs at one speed (:mod:`rlcompile.threads`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from rlcompile.errors import ModelError, UnsupportedOperatorError, first_line
from rlcompile.machine import host_cores
from rlcompile.runtimes.base import NATIVE, Feeds, Runner, Runtime, RuntimeOptions, model_name
from rlcompile.threads import ort_session_config, ort_wind_down_s

OPT_LEVELS: Mapping[str, ort.GraphOptimizationLevel] = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
#: ORT error fragments that mean "this operator (or this version of it) is not implemented".
UNSUPPORTED_MARKERS = ("NOT_IMPLEMENTED", "Could not find an implementation", "is not a registered function/op")


def session_options(opt_level: str = "all", threads: int | None = None) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.graph_optimization_level = OPT_LEVELS[opt_level]
    options.intra_op_num_threads = threads or host_cores()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return options


def create_session(model_bytes: bytes, options: ort.SessionOptions, name: str) -> ort.InferenceSession:
    """An InferenceSession, with ORT's multi-page failures turned into one-line errors."""
    try:
        return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    except Exception as error:
        message = first_line(error)
        if any(marker in str(error) for marker in UNSUPPORTED_MARKERS):
            raise UnsupportedOperatorError(f"ONNX Runtime cannot run {name}: {message}") from None
        raise ModelError(f"ONNX Runtime cannot load {name}: {message}") from None


def run_proto(proto: onnx.ModelProto, feeds: Feeds) -> list[np.ndarray]:
    """Run a model once with basic optimisations: the reference every result is verified against."""
    return run_proto_on_each(proto, [feeds])[0]


def run_proto_on_each(proto: onnx.ModelProto, samples: Sequence[Feeds]) -> list[list[np.ndarray]]:
    """:func:`run_proto` on each of ``samples``, with one session (a session per sample compiled the model again
    for every held-out sample)."""
    session = create_session(proto.SerializeToString(), session_options("basic"), proto.graph.name or "model")
    return [list(session.run(None, dict(feeds))) for feeds in samples]


class OrtRunner(Runner):
    def __init__(self, session: ort.InferenceSession, prepare_seconds: float = 0.0, wind_down_s: float = 0.0) -> None:
        self.session = session
        self.input_names = [value.name for value in session.get_inputs()]
        self.prepare_seconds = prepare_seconds
        self.wind_down_s = wind_down_s

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self.session.run(None, dict(zip(self.input_names, inputs, strict=True)))

    def caller(self, names: Sequence[str]) -> Callable[[Feeds], list[np.ndarray]]:
        general = super().caller(names)
        if list(names) != self.input_names:
            return general
        run, count = self.session.run, len(self.input_names)
        # the caller's mapping as it is, as a native user calls ONNX Runtime; one with other keys too goes by name
        return lambda feeds: run(None, feeds) if len(feeds) == count else general(feeds)

    def run(self, feeds: Feeds) -> list[np.ndarray]:
        return [np.asarray(output) for output in self.session.run(None, dict(feeds))]

    def timer(self, feeds: Feeds) -> Callable[[], object]:
        session, feeds = self.session, dict(feeds)
        return lambda: session.run(None, feeds)


class OrtRuntime(Runtime):
    """ONNX Runtime with a graph optimisation level (``all`` unless asked otherwise)."""

    name = "ort"

    def __init__(self, opt_level: str = "all") -> None:
        if opt_level not in OPT_LEVELS:
            raise ModelError(f"unknown ONNX Runtime optimisation level {opt_level!r}; choose from {list(OPT_LEVELS)}")
        self.opt_level = opt_level

    def session_options(self, options: RuntimeOptions) -> ort.SessionOptions:
        session = session_options(self.opt_level, options.thread_count)
        for key, value in self.session_config(options).items():
            session.add_session_config_entry(key, value)
        return session

    def session_config(self, options: RuntimeOptions) -> dict[str, str]:
        """The session config entries under ``options``: none natively, a plan segment's otherwise."""
        return {} if options.exclusive else ort_session_config(options.thread_count)

    def compile(self, model: onnx.ModelProto, options: RuntimeOptions = NATIVE, name: str | None = None) -> OrtRunner:
        return self.compile_copies(model, 1, options, name)[0]

    def compile_copies(self, model: onnx.ModelProto, count: int, options: RuntimeOptions = NATIVE,
                       name: str | None = None) -> list[OrtRunner]:  # fmt: skip
        """``count`` sessions of ``model``, serialized once."""
        self.check_precision(options)
        started = time.perf_counter()
        serialized, label = model.SerializeToString(), model_name(model, name, "segment")
        serialize_s, runners = time.perf_counter() - started, []
        pause = ort_wind_down_s(options.exclusive, options.thread_count)
        for _ in range(count):
            started = time.perf_counter()
            session = create_session(serialized, self.session_options(options), label)
            runners.append(OrtRunner(session, serialize_s + time.perf_counter() - started, pause))
        return runners

    def describe(self, options: RuntimeOptions = NATIVE) -> str:
        return f"ort ({self.opt_level}, {self.threads(options)} threads)"
