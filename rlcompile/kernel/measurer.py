"""Building and timing candidate schedules on the hardware: the expensive step every strategy shares.

MetaSchedule's ``LocalBuilder`` with a lean build function (its default imports TVM's tensor
intrinsics in every fresh worker pool, ~30 s per batch here: DESIGN.md section 7), and its
``LocalRunner`` or, for remote devices, ``RPCRunner`` through a TVM RPC tracker. Every candidate comes
back as a :class:`Measurement` with a status; failures are data, never exceptions.

This module is imported by the builder's worker processes (the build function is pickled by
reference), so it must stay light: TVM only, no torch.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rlcompile.errors import RlcompileError
from rlcompile.tvm_bridge import tvm

BUILD_TIMEOUT_S = 20.0
#: Status of a candidate whose remote device went away during every attempt: not recorded, measured later.
DEVICE_LOST = "device_lost"
#: Status of a candidate the run's deadline left no time to run (or cut short): not recorded, measured later.
NOT_RUN = "not_run"
#: Statuses that say nothing about the candidate: never journaled, the candidate may be proposed again.
UNMEASURED = (DEVICE_LOST, NOT_RUN)
RUN_TIMEOUT_S = 30.0
#: Under a deadline, a candidate's run may be stopped this early (rather than at :data:`RUN_TIMEOUT_S`).
MIN_RUN_TIMEOUT_S = 2.0


def lean_build(mod: tvm.IRModule, target: tvm.target.Target, _params: dict | None) -> tvm.runtime.Module:
    """Build a scheduled PrimFunc without importing tensor intrinsics (our LLVM schedules never tensorize)."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm.tirx.build(mod, target=target)


#: Builds a worker process serves before it is replaced (TVM restarts its pool every batch for a memory leak
#: in long-lived workers; replacing each worker after this many builds bounds the leak at a fraction of the cost).
BUILDS_PER_WORKER = 256


def die_with_parent() -> None:
    """Run first in every build and run worker: ask Linux to kill it when the tuning process dies.

    Without it, a worker compiling a pathological candidate when the tuner is killed (Ctrl-C, kill -9, a
    deadline) goes on compiling, orphaned, with no timeout left to stop it: measured here, one kept a core
    busy for over ten minutes and halved every timing taken meanwhile.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # the parent died before the request was in place
        os._exit(1)


class PersistentBuilder:
    """MetaSchedule's ``LocalBuilder`` contract (``build(inputs) -> results``) on worker processes that live
    as long as the builder, instead of a pool started and torn down for every batch (~3 s each here).

    Workers start with the first batch (starting them earlier, during task extraction, made the first
    measurement later on 2 cores: they compete with the extraction for the CPU). A worker that times out
    is killed and replaced by the pool; every worker is replaced after :data:`BUILDS_PER_WORKER` builds.
    """

    def __init__(self, max_workers: int, timeout_s: float, f_build=None) -> None:
        from tvm.support.popen_pool import PopenPoolExecutor

        self.max_workers = max_workers
        self.timeout_s = timeout_s
        self.f_build = f_build or lean_build
        self.pool = PopenPoolExecutor(max_workers=max_workers, timeout=timeout_s, initializer=die_with_parent,
                                      maximum_process_uses=BUILDS_PER_WORKER)  # fmt: skip

    def build(self, build_inputs: list) -> list:
        from tvm.s_tir.meta_schedule.builder import BuilderResult
        from tvm.s_tir.meta_schedule.builder.local_builder import _serialize_params, _worker_func
        from tvm.support.popen_pool import StatusKind

        arguments = [(self.f_build, None, b.mod, b.target, _serialize_params(b.params)) for b in build_inputs]
        results = []
        for outcome in self.pool.map_with_error_catching(lambda x: _worker_func(*x), arguments):
            if outcome.status == StatusKind.COMPLETE:
                results.append(BuilderResult(outcome.value, None))
            elif outcome.status == StatusKind.TIMEOUT:
                results.append(BuilderResult(None, f"LocalBuilder: Timeout, killed after {self.timeout_s} seconds"))
            else:
                results.append(BuilderResult(None, f"LocalBuilder: An exception occurred\n{outcome.value}"))
        return results

    def close(self) -> None:
        self.pool.shutdown(wait=True)


@dataclass(frozen=True)
class RpcSpec:
    """Where remote measurements go: a TVM RPC tracker and the device key registered with it."""

    host: str
    port: int
    key: str

    @classmethod
    def parse(cls, tracker: str, key: str | None) -> RpcSpec:
        host, _, port = tracker.rpartition(":")
        if not host or not port.isdigit():
            raise RlcompileError(f"bad --rpc-tracker {tracker!r}: expected HOST:PORT")
        if not key:
            raise RlcompileError("--rpc-tracker needs --rpc-key (the key the device's rpc_server registered)")
        return cls(host, int(port), key)


@dataclass(frozen=True)
class MeasureSettings:
    """How each candidate is timed (MetaSchedule's evaluator: 1 warm-up, then ``number`` x ``repeat``)."""

    number: int = 3
    repeat: int = 1
    min_repeat_ms: int = 100
    build_timeout_s: float = BUILD_TIMEOUT_S
    run_timeout_s: float = RUN_TIMEOUT_S
    max_build_workers: int | None = None
    #: "persistent": one pool of build workers for the measurer's life; "per-batch": TVM's ``LocalBuilder``,
    #: which starts a fresh pool for every batch (kept to measure the difference)
    build_pool: str = "persistent"


@dataclass(frozen=True)
class Measurement:
    """The outcome of measuring one candidate. ``seconds`` is the median run time when ``ok``."""

    status: str  # "ok" | "build_error" | "run_error" | "timeout" | "device_lost" | "not_run" (never journaled)
    seconds: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


#: Parts of a runner error that mean the remote device or the link to it failed, not the candidate.
DEVICE_FAILURE_MARKERS = ("RPCCode", "RPCSession", "rpc session", "Connection", "connection", "Socket", "socket",
                          "Broken pipe", "tracker")  # fmt: skip
#: How many more times a candidate whose device was lost is sent to the tracker (another server).
DEVICE_RETRIES = 2


def is_device_failure(message: str) -> bool:
    """Whether a remote run failed because its device went away (the candidate is not to blame)."""
    return any(marker in message for marker in DEVICE_FAILURE_MARKERS)


def classify_error(message: str, stage: str) -> Measurement:
    """Turn a builder/runner error message into a :class:`Measurement` with a one-line summary."""
    status = "timeout" if "Timeout" in message or "timeout" in message else f"{stage}_error"
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    meaningful = [line for line in lines if not line.startswith(("File ", "Traceback", "LocalBuilder", "LocalRunner"))]
    return Measurement(status=status, error=(meaningful or lines or [status])[-1][:300])


def set_run_timeout(runner, seconds: float) -> None:
    """Change a ``LocalRunner``'s timeout for the runs submitted next. TVM 0.27 reads it from its worker pool's
    ``_timeout`` at each submission (``support/popen_pool.py``) and names it in its message (``timeout_sec``)."""
    runner.timeout_sec = seconds
    runner.pool._timeout = seconds


class Measurer:
    """Builds and runs batches of MetaSchedule measure candidates for one target."""

    def __init__(self, target: tvm.target.Target, settings: MeasureSettings = MeasureSettings(),
                 rpc: RpcSpec | None = None) -> None:  # fmt: skip
        from tvm.s_tir.meta_schedule.builder import LocalBuilder
        from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, LocalRunner, RPCConfig, RPCRunner

        self.target = target
        self.settings = settings
        self.rpc = rpc
        workers = settings.max_build_workers or max(1, os.cpu_count() or 1)
        if settings.build_pool == "persistent":
            self.builder = PersistentBuilder(workers, settings.build_timeout_s)
        elif settings.build_pool == "per-batch":
            self.builder = LocalBuilder(max_workers=workers, timeout_sec=settings.build_timeout_s, f_build=lean_build,
                                        initializer=die_with_parent)  # fmt: skip
        else:
            raise RlcompileError(f"unknown build pool {settings.build_pool!r}: use persistent or per-batch")
        evaluator = EvaluatorConfig(
            number=settings.number, repeat=settings.repeat, min_repeat_ms=settings.min_repeat_ms,
            enable_cpu_cache_flush=False,
        )  # fmt: skip
        if rpc is None:
            self.runner = LocalRunner(timeout_sec=settings.run_timeout_s, evaluator_config=evaluator,
                                      initializer=die_with_parent)  # fmt: skip
        else:
            config = RPCConfig(tracker_host=rpc.host, tracker_port=rpc.port, tracker_key=rpc.key,
                               session_timeout_sec=int(settings.run_timeout_s))  # fmt: skip
            try:
                self.runner = RPCRunner(rpc_config=config, evaluator_config=evaluator)
            except Exception as error:
                raise RlcompileError(f"cannot use RPC tracker {rpc.host}:{rpc.port} key {rpc.key}: "
                                     f"{str(error).strip().splitlines()[-1]}") from None  # fmt: skip

    def close(self) -> None:
        """Stop the build workers (also done when the measurer is garbage-collected)."""
        if isinstance(self.builder, PersistentBuilder):
            self.builder.close()

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def measure(self, candidates: Sequence, deadline: float | None = None) -> list[Measurement]:
        """Build every candidate, run those that built, and return one measurement per candidate.

        ``deadline`` (``time.monotonic()``): locally, no candidate starts running past it and none runs beyond
        it (down to :data:`MIN_RUN_TIMEOUT_S`); those are :data:`NOT_RUN`, not timeouts: the budget, not the
        candidate, stopped them. A batch with a pathological candidate then ends near the deadline instead of
        up to :data:`RUN_TIMEOUT_S` per candidate after it."""
        from tvm.s_tir.meta_schedule.builder import BuilderInput
        from tvm.s_tir.meta_schedule.runner import RunnerInput

        if not candidates:
            return []
        built = self.builder.build([BuilderInput(c.sch.mod, self.target) for c in candidates])
        measurements: list[Measurement | None] = [None] * len(candidates)
        runnable = []
        for index, result in enumerate(built):
            if result.error_msg:
                measurements[index] = classify_error(result.error_msg, "build")
            else:
                runnable.append(index)
        device_type = "cuda" if self.target.kind.name == "cuda" else "cpu"
        inputs = {i: RunnerInput(built[i].artifact_path, device_type, candidates[i].args_info) for i in runnable}
        for _ in range(1 + (DEVICE_RETRIES if self.rpc is not None else 0)):
            pending = [i for i in runnable if measurements[i] is None or measurements[i].status == DEVICE_LOST]
            if not pending:
                break
            for index, measurement in zip(pending, self.run([inputs[i] for i in pending], deadline), strict=True):
                measurements[index] = measurement
        for result in built:
            if result.artifact_path:
                shutil.rmtree(os.path.dirname(result.artifact_path), ignore_errors=True)
        return [m for m in measurements if m is not None]

    def run(self, inputs: list, deadline: float | None) -> list[Measurement]:
        """Run built candidates: all at once (remotely, or without a deadline), else one at a time, each with at
        most the time left to ``deadline`` as its timeout."""
        if deadline is None or self.rpc is not None:
            return [self.outcome(future.result(), remote=self.rpc is not None) for future in self.runner.run(inputs)]
        results = []
        try:
            for runner_input in inputs:
                left = deadline - time.monotonic()
                if left <= 0:
                    results.append(Measurement(status=NOT_RUN, error="the run's deadline passed before it ran"))
                    continue
                timeout = min(self.settings.run_timeout_s, max(left, MIN_RUN_TIMEOUT_S))
                set_run_timeout(self.runner, timeout)
                measurement = self.outcome(self.runner.run([runner_input])[0].result(), remote=False)
                if measurement.status == "timeout" and timeout < self.settings.run_timeout_s:
                    measurement = Measurement(status=NOT_RUN, error=f"stopped at the run's deadline ({timeout:.1f} s)")
                results.append(measurement)
        finally:
            set_run_timeout(self.runner, self.settings.run_timeout_s)
        return results

    @staticmethod
    def outcome(result, remote: bool) -> Measurement:
        """A runner result as a :class:`Measurement`; a remote device lost mid-run is ``device_lost``."""
        if not result.error_msg:
            return Measurement(status="ok", seconds=float(np.median([float(s) for s in result.run_secs])))
        if remote and is_device_failure(result.error_msg):
            return Measurement(status=DEVICE_LOST, error=classify_error(result.error_msg, "run").error)
        return classify_error(result.error_msg, "run")
