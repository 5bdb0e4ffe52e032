"""How a model serves concurrent requests: the runtimes' own serving knobs, as configurations to measure.

* ONNX Runtime: ``sessions`` sessions of the model, each with ``threads`` intra-op threads, the requests in flight
  spread over them in turn (one session serves several requests at once; its thread pool is then shared). Several
  sessions of fewer threads let requests run side by side instead of splitting each over every core. ``spinning``:
  whether a session's workers spin between runs (its default) or sleep, leaving the cores to the other requests.
* OpenVINO: a compiled model with a performance ``hint`` (``LATENCY``: one stream using every core; ``THROUGHPUT``:
  several streams, requests side by side), optionally ``streams`` fixed, and one infer request per request in
  flight, as OpenVINO's ``benchmark_app`` and its async queue serve.

:func:`serving_candidates` is the small search: the runtime's default and the configurations that split the cores
between requests, not a grid over every knob. :func:`servers` makes the callers that
:func:`~rlcompile.measure.throughput.throughput_contest` measures; :func:`distinct_servers` those of the candidates
that differ once the runtime has resolved them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

import numpy as np
import onnx

from rlcompile.errors import RlcompileError
from rlcompile.machine import host_cores
from rlcompile.runtimes.base import RuntimeOptions

#: OpenVINO's performance hints.
HINTS = ("LATENCY", "THROUGHPUT")


@dataclass(frozen=True)
class Serving:
    """One serving configuration of ``runtime`` (see the module's docstring)."""

    runtime: str
    sessions: int = 1
    threads: int | None = None
    hint: str = "LATENCY"
    streams: int | None = None
    precision: str = "fp32"
    spinning: bool = True

    def __post_init__(self) -> None:
        if self.runtime not in ("ort", "openvino"):
            raise RlcompileError(f"serving configurations exist for ort and openvino, not {self.runtime}")
        if self.hint not in HINTS or self.sessions < 1 or (self.threads is not None and self.threads < 1):
            raise RlcompileError(f"bad serving configuration {self}")

    @property
    def label(self) -> str:
        if self.runtime == "ort":
            threads = self.threads or host_cores()
            return (f"ort {self.sessions} session{'s' if self.sessions > 1 else ''} x {threads} "
                    f"thread{'s' if threads > 1 else ''}{'' if self.spinning else ', no spinning'}")
        streams = f", {self.streams} streams" if self.streams else ""
        precision = f", {self.precision}" if self.precision != "fp32" else ""
        return f"openvino {self.hint.lower()}{streams}{precision}"

    def openvino_config(self) -> dict:
        """OpenVINO's compile configuration for this serving."""
        from rlcompile.runtimes.openvino import PRECISION_HINTS

        config: dict = {"PERFORMANCE_HINT": self.hint, "INFERENCE_PRECISION_HINT": PRECISION_HINTS[self.precision]}
        if self.threads:
            config["INFERENCE_NUM_THREADS"] = self.threads
        if self.streams:
            config["NUM_STREAMS"] = self.streams
        return config

    def session_config(self) -> dict[str, str]:
        """ONNX Runtime's session config entries for this serving."""
        return {} if self.spinning else {"session.intra_op.allow_spinning": "0"}

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping) -> Serving:
        return cls(**dict(data))


def serving_candidates(runtime: str, concurrency: int, cores: int | None = None,
                       precision: str = "fp32") -> list[Serving]:  # fmt: skip
    """The configurations worth measuring for ``concurrency`` requests in flight on ``cores`` cores: the default
    (first), one session or stream per request up to the cores, and halfway between; for ONNX Runtime with several
    callers, the sessions of several threads also without spinning (a spinning pool takes the cores a request beside
    it would use)."""
    cores = cores or host_cores()
    side_by_side = max(1, min(concurrency, cores))
    if runtime == "ort":
        counts = sorted({1, side_by_side, max(1, side_by_side // 2)})
        found = [Serving("ort", count, max(1, cores // count)) for count in counts]
        return found + [Serving("ort", s.sessions, s.threads, spinning=False) for s in found
                        if s.threads > 1 and concurrency > s.sessions]  # fmt: skip
    found = [Serving("openvino", precision=precision), Serving("openvino", hint="THROUGHPUT", precision=precision)]
    found += [Serving("openvino", hint="THROUGHPUT", streams=side_by_side, precision=precision)] * (side_by_side > 1)
    return found


def ort_sessions(serving: Serving, model: onnx.ModelProto) -> list:
    """ONNX Runtime's ``serving.sessions`` sessions of ``model``, each with its threads."""
    from rlcompile.runtimes.ort import create_session, session_options

    serialized = model.SerializeToString()
    threads = RuntimeOptions(serving.threads, exclusive=True).thread_count
    sessions = []
    for _ in range(serving.sessions):
        options = session_options("all", threads)
        for key, value in serving.session_config().items():
            options.add_session_config_entry(key, value)
        sessions.append(create_session(serialized, options, "the model"))
    return sessions


def openvino_compiled(serving: Serving, model: onnx.ModelProto):
    """``model`` compiled by OpenVINO with ``serving``'s configuration."""
    import openvino as ov

    core = ov.Core()
    return core.compile_model(core.read_model(model=model.SerializeToString()), "CPU", serving.openvino_config())


def servers(serving: Serving, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
            concurrency: int) -> list[Callable[[], object]]:  # fmt: skip
    """One caller per request in flight, serving ``feeds`` with ``model`` as ``serving`` says."""
    if serving.runtime == "ort":
        sessions = ort_sessions(serving, model)
        inputs, count = dict(feeds), len(sessions)
        return [lambda session=sessions[index % count]: session.run(None, inputs)
                for index in range(concurrency)]  # fmt: skip
    return openvino_callers(openvino_compiled(serving, model), feeds, concurrency)


def openvino_callers(compiled, feeds: Mapping[str, np.ndarray], concurrency: int) -> list[Callable[[], object]]:
    """One infer request of ``compiled`` per request in flight, each serving ``feeds``."""
    requests = [compiled.create_infer_request() for _ in range(concurrency)]
    inputs = dict(feeds)
    return [lambda request=request: request.infer(inputs, share_inputs=True) for request in requests]


def distinct_servers(candidates: list[Serving], model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
                     concurrency: int) -> list[tuple[Serving, list[Callable[[], object]]]]:  # fmt: skip
    """Each of ``candidates`` with its callers (:func:`servers`), leaving out an OpenVINO configuration that the
    runtime resolves to the hint, streams and threads of an earlier one (THROUGHPUT's own stream count is often one
    per request in flight): served twice, one configuration only adds a second draw of the same rate, and the best
    of several draws is biased upwards."""
    kept, seen = [], set()
    for serving in candidates:
        if serving.runtime != "openvino":
            kept.append((serving, servers(serving, model, feeds, concurrency)))
            continue
        compiled = openvino_compiled(serving, model)
        resolved = (serving.hint, serving.precision, int(compiled.get_property("NUM_STREAMS")),
                    int(compiled.get_property("INFERENCE_NUM_THREADS")))  # fmt: skip
        if resolved not in seen:
            seen.add(resolved)
            kept.append((serving, openvino_callers(compiled, feeds, concurrency)))
    return kept


class Pool:
    """``model`` served as ``serving`` says, for up to ``concurrency`` requests in flight: :meth:`run` may be called
    from several threads at once (ONNX Runtime: the sessions taken in turn; OpenVINO: one infer request per
    thread)."""

    def __init__(self, serving: Serving, model: onnx.ModelProto, concurrency: int) -> None:
        import itertools
        import threading

        self.serving, self.concurrency = serving, concurrency
        self.turn = itertools.count()
        self.local = threading.local()
        if serving.runtime == "ort":
            self.sessions = ort_sessions(serving, model)
            self.input_names = [value.name for value in self.sessions[0].get_inputs()]
        else:
            self.compiled = openvino_compiled(serving, model)
            self.input_names = [port.any_name for port in self.compiled.inputs]

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The model's outputs for ``feeds`` (by input name), from whichever thread calls."""
        inputs = {name: feeds[name] for name in self.input_names}
        if self.serving.runtime == "ort":
            session = self.sessions[next(self.turn) % len(self.sessions)]
            return [np.asarray(output) for output in session.run(None, inputs)]
        request = getattr(self.local, "request", None)
        if request is None:
            request = self.local.request = self.compiled.create_infer_request()
        return list(request.infer(inputs, share_inputs=True).to_tuple())  # the inputs read in place, not copied
