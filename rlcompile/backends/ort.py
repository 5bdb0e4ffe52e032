"""ONNX Runtime backend (CPU execution provider; threads = cores)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import numpy as np
import onnx
import onnxruntime as ort

from rlcompile.backends.base import Backend, Inputs, Session
from rlcompile.errors import ModelError, UnsupportedOperatorError
from rlcompile.measure import host_cores
from rlcompile.models import LoadedModel
from rlcompile.models.onnx_model import first_line

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


def run_proto(proto: onnx.ModelProto, feeds: Inputs) -> list[np.ndarray]:
    """Run a model once with basic optimisations (for verification, not timing)."""
    session = create_session(proto.SerializeToString(), session_options("basic"), proto.graph.name or "model")
    return list(session.run(None, dict(feeds)))


class OrtSession(Session):
    def __init__(self, session: ort.InferenceSession, prepare_seconds: float) -> None:
        self.session = session
        self.prepare_seconds = prepare_seconds

    def run(self, inputs: Inputs) -> list[np.ndarray]:
        return [np.asarray(output) for output in self.session.run(None, dict(inputs))]

    def timer(self, inputs: Inputs) -> Callable[[], None]:
        feeds = dict(inputs)
        session = self.session

        def run_once() -> None:
            session.run(None, feeds)

        return run_once


class OrtBackend(Backend):
    """ONNX Runtime on the CPU with a chosen graph optimisation level."""

    name = "ort"

    def __init__(self, opt_level: str = "all", threads: int | None = None) -> None:
        if opt_level not in OPT_LEVELS:
            raise ModelError(f"unknown ONNX Runtime optimisation level {opt_level!r}; choose from {list(OPT_LEVELS)}")
        self.opt_level = opt_level
        self._threads = threads or host_cores()

    def prepare(self, model: LoadedModel) -> OrtSession:
        started = time.perf_counter()
        session = create_session(model.serialized, session_options(self.opt_level, self._threads), model.name)
        return OrtSession(session, time.perf_counter() - started)

    def describe(self) -> str:
        return f"ort ({self.opt_level}, {self._threads} threads)"

    def threads(self) -> int:
        return self._threads
