"""Building and timing candidates; every failure kind is caused for real and comes back as data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from rlcompile.errors import RlcompileError
from rlcompile.kernel.measurer import Measurer, MeasureSettings, RpcSpec, classify_error
from rlcompile.kernel.space import KnobSpace
from rlcompile.kernel.strategies.base import Proposal
from tests.kernel.conftest import SMALL_CONV, make_task, tune_context


@pytest.fixture(scope="module")
def candidates(target):
    from rlcompile.kernel.tasks import ConvShape

    def candidate(shape, seed):
        space = KnobSpace.for_task(tune_context(make_task(shape, target)))
        return Proposal(space.to_schedule(space.random_config(np.random.default_rng(seed))), None).candidate()

    other = ConvShape(1, 4, 6, 6, 4, (3, 3), (1, 1), (1, 1, 1, 1))
    return [candidate(SMALL_CONV, 0), candidate(SMALL_CONV, 1), candidate(other, 0)]


def test_valid_candidates_are_timed(measurer, candidates) -> None:
    results = measurer.measure(candidates[:2])
    assert [r.status for r in results] == ["ok", "ok"]
    assert all(0 < r.seconds < 0.1 for r in results)


def test_failures_are_classified_per_candidate(measurer, candidates) -> None:
    from tvm.s_tir import meta_schedule as ms

    good, _, other = candidates
    mismatched = ms.MeasureCandidate(good.sch, other.args_info)  # arguments of another shape
    results = measurer.measure([good, mismatched])
    assert results[0].ok
    assert results[1].status == "run_error" and results[1].error and "\n" not in results[1].error


@pytest.mark.parametrize(("stage", "settings"), [("build", MeasureSettings(build_timeout_s=0.001)),
                                                 ("run", MeasureSettings(run_timeout_s=0.001))])  # fmt: skip
def test_timeouts_are_reported(target, candidates, stage, settings) -> None:
    result = Measurer(target, settings).measure(candidates[:1])[0]
    assert result.status == "timeout" and not result.ok


def test_past_the_deadline_candidates_are_not_run_and_not_blamed(measurer, candidates) -> None:
    from rlcompile.kernel.measurer import NOT_RUN, RUN_TIMEOUT_S

    late = measurer.measure(candidates[:2], deadline=time.monotonic())
    assert [r.status for r in late] == [NOT_RUN, NOT_RUN] and not any(r.ok for r in late)
    in_time = measurer.measure(candidates[:2], deadline=time.monotonic() + 60)
    assert [r.status for r in in_time] == ["ok", "ok"]
    assert measurer.runner.pool._timeout == RUN_TIMEOUT_S  # each run's shortened timeout is not left behind


def test_error_summary_is_the_meaningful_last_line() -> None:
    message = 'LocalRunner: An exception occurred\nTraceback (most recent call last):\n  File "x"\nValueError: bad'
    assert classify_error(message, "run").error == "ValueError: bad"
    assert classify_error("LocalBuilder: Timeout, killed after 1 seconds", "build").status == "timeout"


def test_rpc_spec_parsing() -> None:
    assert RpcSpec.parse("127.0.0.1:9190", "x86") == RpcSpec("127.0.0.1", 9190, "x86")
    with pytest.raises(RlcompileError, match="HOST:PORT"):
        RpcSpec.parse("localhost", "x86")
    with pytest.raises(RlcompileError, match="--rpc-key"):
        RpcSpec.parse("localhost:9190", None)


ORPHAN_SCRIPT = """
import os, time
from rlcompile.kernel.measurer import PersistentBuilder
builder = PersistentBuilder(1, 300)
builder.pool.submit(time.sleep, 120)
time.sleep(3)
print(next(iter(builder.pool._worker_map.values()))._proc.pid, flush=True)
os._exit(0)  # dies like a killed tuner: no shutdown of the pool
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux's")
def test_build_workers_die_with_a_killed_tuner() -> None:
    worker = int(subprocess.run([sys.executable, "-c", ORPHAN_SCRIPT], capture_output=True, text=True,
                                check=True).stdout.split()[-1])  # fmt: skip
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and os.path.exists(f"/proc/{worker}"):
        time.sleep(0.2)
    alive = os.path.exists(f"/proc/{worker}")
    if alive:
        os.kill(worker, signal.SIGKILL)
    assert not alive, "the build worker outlived its tuner"
