"""Idle thread pools that do not spin: set before any library starts its pool.

Every library keeps its own thread pool, and by default the idle workers of each spin for a while
after a call, waiting for the next one. When the layer level runs ONNX Runtime, OpenVINO, PyTorch and
TVM one after the other on a 2-core machine, the spinning workers of the library that just finished
take the cores the next library needs (measured on resnet18 at 2 threads: an ORT + torch pair cost
~3.7 ms more than the two alone). The controls:

- ONNX Runtime: ``session.force_spinning_stop = 1`` per session (:func:`ort_session_config`): its workers
  spin between the operators of one run, as natively, and stop when the run ends. (``allow_spinning = 0``
  stops them spinning inside the run too, and cost ORT ~10% on resnet18 at 2 threads.) A plan segment's
  workers are also pinned, one to each CPU after the first this process may use
  (``session.intra_op_thread_affinities``, :func:`ort_worker_affinities`): unpinned, the workers woken at
  each segment ran its share of a plan at one of two speeds, kept for a whole block of calls (measured on
  the 16-core Xeon at 2 cores: hf:albert's 5-segment plan's two ORT segments 0.3-0.4 or 1.3-4.4 ms a call,
  block by block; pinned, 0.2-0.4 ms in each of 30 blocks);
- PyTorch's OpenMP (libgomp): ``GOMP_SPINCOUNT`` — 10000 iterations (2-3 ms of spinning after a call on a
  2-core Intel Xeon VM, Emerald Rapids without AMX; less where ``pause`` is shorter) then sleep, instead of
  libgomp's default 300000; libgomp reads it when it loads, i.e. at ``import torch``. At 1000 iterations
  the workers sleep between the operators of one call (~170 voluntary context switches a call on
  hf:mpnet) and PyTorch runs slower and unsteadily (``benchmarks/torch_spin.py``, that
  VM: hf:mpnet's PyTorch plan 1.75x and 2.18x ORT native in two runs at 1000, 1.09x and 1.04x at 10000;
  hf:deit's 12-segment plan's PyTorch segments 13.1-13.3 ms a call against 9.3-9.9). A contest waits
  :data:`TORCH_WIND_DOWN_S` after a PyTorch runner's turn;
- TVM's runtime pool: ``TVM_THREAD_POOL_SPIN_COUNT = 1000`` yields, read when the pool starts (~0.1-0.2 ms of CPU
  after a call). At 0 the worker sleeps after each parallel kernel and is woken at the next
  (2-4 sleeps a call on a tuned lenet5), and the build runs 1.7-4.5x slower and unsteadily
  (``benchmarks/tvm_spin.py``, the 2-core Emerald Rapids VM: block medians
  0.156 and 0.409 ms at 0, 0.090 and 0.091 ms at 1000);
- OpenVINO's TBB workers sleep soon after a call on their own (measured: ORT + OpenVINO adds up).

:func:`quiet_idle_threads` sets the environment variables the user has not set themselves; it runs when
``rlcompile`` is imported, so it must come before ``import torch`` to take effect for PyTorch.
``RLCOMPILE_SPIN=1`` keeps every library's own default (to measure what the setting is worth).
"""

from __future__ import annotations

import os

QUIET_ENVIRONMENT = {"GOMP_SPINCOUNT": "10000", "TVM_THREAD_POOL_SPIN_COUNT": "1000"}


def spinning_allowed() -> bool:
    return os.environ.get("RLCOMPILE_SPIN", "0") == "1"


def quiet_idle_threads() -> dict[str, str]:
    """Set the spin controls that are not set yet; returns what was set."""
    if spinning_allowed():
        return {}
    chosen = {name: value for name, value in QUIET_ENVIRONMENT.items() if name not in os.environ}
    os.environ.update(chosen)
    return chosen


def ort_session_config(threads: int) -> dict[str, str]:
    """Session config entries of a plan segment's ONNX Runtime session of ``threads`` intra-op threads: its
    workers stop spinning once a run is over, and are pinned (:func:`ort_worker_affinities`)."""
    config = {} if spinning_allowed() else {"session.force_spinning_stop": "1"}
    affinities = ort_worker_affinities(threads)
    return config | ({"session.intra_op_thread_affinities": affinities} if affinities else {})


def ort_worker_affinities(threads: int) -> str | None:
    """ONNX Runtime's ``intra_op_thread_affinities`` for ``threads`` intra-op threads: its ``threads - 1``
    workers (the calling thread is the first) each pinned to one of the CPUs this process may use after the
    first, in turn (1-based, ``;``-separated, as ORT reads them); ``None`` when there is no worker or no second
    CPU to pin it to, or the platform does not say which CPUs the process may use."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return None
    if threads < 2 or len(cpus) < 2:
        return None
    others = cpus[1:]
    return ";".join(str(others[index % len(others)] + 1) for index in range(threads - 1))


#: How long ONNX Runtime's workers keep spinning after a run of a session that keeps its own idle policy (an
#: ``exclusive`` one): measured on the 2-core Zen 4 VM, ocr-det's 15-segment plan run right after ORT native took
#: 1.4-2.2x its time at once, 1.3-1.5x 10 ms later and its own time 50 ms later (after a quiet session: its own time).
#: A contest expects about this long after such a contender's turn and waits until the process is idle, so that it
#: does not slow whoever runs next (:func:`rlcompile.measure.contest.wind_down`: 34-48 ms on an Emerald Rapids VM).
SPIN_WIND_DOWN_S = 0.05


#: How long PyTorch's OpenMP workers keep a core busy after a call at :data:`QUIET_ENVIRONMENT`'s spin count:
#: measured on a 2-core Intel Xeon VM (Emerald Rapids; the threads' CPU time in
#: ``/proc/self/task/*/schedstat`` while the caller slept): 2-3 ms, against 0.1 ms at 1000 iterations and 5-9 ms at
#: libgomp's default.
TORCH_WIND_DOWN_S = 0.01


def torch_wind_down_s(threads: int) -> float:
    """How long a contest waits after the turn of a PyTorch runner of ``threads`` threads: its OpenMP workers
    spin :data:`TORCH_WIND_DOWN_S` after a call (none on one thread: no worker)."""
    return TORCH_WIND_DOWN_S if threads > 1 else 0.0


def ort_wind_down_s(exclusive: bool, threads: int) -> float:
    """How long a contest waits after the turn of an ONNX Runtime session of ``threads`` intra-op threads:
    :data:`SPIN_WIND_DOWN_S` when its workers keep spinning after its runs (run exclusively: natively, or as a
    plan's only segment); none on one thread, where there is no worker to spin. (OpenVINO's and TVM's workers
    sleep soon after a call: their runners wait nothing; PyTorch's: :func:`torch_wind_down_s`.)"""
    spins = threads > 1 and (exclusive or spinning_allowed())
    return SPIN_WIND_DOWN_S if spins else 0.0
