"""The user's model run natively at fewer threads than asked: a plan like any other, kept only where the final contest
measures it faster than both natives beyond the tie band and the noise.

A thread pool's hand-offs cost every operator some microseconds, and where a call is short they cost more than the
other threads gain: on the 2-core Zen 4 VM LeNet-5 ran 0.016 ms a call on ONNX Runtime at one thread against 0.028 at
two, and a small ``Loop`` model 0.068 ms on OpenVINO at one thread against 0.14-0.20 at two (ONNX Runtime: 0.15 at
either). For each native runtime the count is halved from the selection's while a short screen, beside that runtime's
native run, measures each halving faster than the last; the fewest threads that were join the final contest.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rlcompile.errors import first_line
from rlcompile.events import Decision, Event, Listener, Phase, ignore
from rlcompile.layer.group_table import GroupedModel
from rlcompile.layer.segments import SegmentEngine
from rlcompile.layer.selection.candidates import (
    NATIVE_RUNTIMES,
    Candidate,
    mark_disagreement,
    native_label,
    whole_segment,
)
from rlcompile.measure import Contender, MeasureConfig, Timer, run_contest
from rlcompile.models.onnx_model import LoadedModel
from rlcompile.runtimes import Runtime
from rlcompile.verify import compare_outputs

#: The screen: blocks of 50 ms (at least one call after a warm-up call), fewer threads and the native in turns.
SCREEN = MeasureConfig(warmup=1, min_repeats=1, min_time_s=0.05, max_time_s=0.05, floor_repeats=1)
#: ... over this many rounds: enough to tell 1.8x, not to judge 2% (the final contest does that, with its twins).
SCREEN_ROUNDS = 3


def fewer_thread_counts(threads: int) -> list[int]:
    """The counts tried below ``threads``, in order: halved down to one (none at one thread)."""
    counts, count = [], threads // 2
    while count >= 1:
        counts.append(count)
        count //= 2
    return counts


def first_screens(threads: int, runtimes: int) -> int:
    """How many runs at fewer threads are compiled and screened at least (the first halving, for each of
    ``runtimes`` native runtimes), each of which may join the final contest: what a deadline reserves for them."""
    return runtimes if fewer_thread_counts(threads) else 0


def screen_seconds(call_s: float) -> float:
    """About how long one screen takes when a native call takes ``call_s``: each round a turn of the native and of
    the run at fewer threads (up to twice as slow), each a warm-up call and a block of :data:`SCREEN`."""
    return SCREEN_ROUNDS * (2 * SCREEN.min_time_s + 6 * call_s)


def fewer_threads_candidates(original: LoadedModel, grouped: GroupedModel, created: Mapping[str, Runtime],
                             threads: int, reference: list[np.ndarray], natives: Mapping[str, Timer],
                             rewritten: bool = True, progress: Listener = ignore) -> list[Candidate]:  # fmt: skip
    """For each native runtime among ``created`` with a native run in ``natives``: the original model run whole at
    the fewest threads the screen (:func:`screen`) found faster, each halving faster than the last, as a candidate
    plan; none where no fewer count was faster."""
    found = []
    for name in NATIVE_RUNTIMES:
        native = natives.get(f"{name} native")
        if name not in created or native is None:
            continue
        best, best_ratio = None, 1.0
        for count in fewer_thread_counts(threads):
            candidate = compiled_candidate(original, grouped, created, name, count, reference, rewritten, progress)
            if candidate.engine is None:
                break
            ratio = screen(candidate, native, grouped.feeds)
            words = f"{name} at {thread_words(count)} ran {ratio:.2f}x its native run"
            kept = ratio < best_ratio
            progress(Decision("layer", f"{words} in a screen: {'a plan in the final contest' if kept else 'left out'}",
                              kept=kept, gain=1 - ratio))  # fmt: skip
            if not kept:
                break
            best, best_ratio = candidate, ratio
        if best is not None:
            found.append(best)
    return found


def compiled_candidate(original: LoadedModel, grouped: GroupedModel, created: Mapping[str, Runtime], name: str,
                       count: int, reference: list[np.ndarray], rewritten: bool,
                       progress: Listener) -> Candidate:  # fmt: skip
    """The original model run whole by ``name`` at ``count`` threads, compiled and checked against ``reference``
    (no engine, and the reason in :attr:`Candidate.error`, where it fails)."""
    label = native_label(name, rewritten, thread_words(count))
    progress(Phase("layer", f"compiling {label} to screen it beside the native run", "compile"))
    candidate = Candidate([label], [name] * len(grouped.groups), float("nan"), threads=count)
    segment = whole_segment(original, grouped, name)
    try:
        engine = SegmentEngine.compile([segment], grouped.inputs, grouped.outputs, count, created)
        candidate.agreement = compare_outputs(reference, engine.run(grouped.feeds))
    except Exception as error:  # a runtime that cannot run at that count: the count is not tried
        candidate.error = first_line(error)
        progress(Event("layer", f"{label} did not run ({candidate.error})"))
        return candidate
    mark_disagreement(candidate)
    if candidate.error is None:
        candidate.engine = engine
    return candidate


def thread_words(count: int) -> str:
    """``1 thread``, ``2 threads``: a count as labels and events say it."""
    return f"{count} thread{'s' if count > 1 else ''}"


def screen(candidate: Candidate, native: Timer, feeds: Mapping[str, np.ndarray]) -> float:
    """``candidate``'s median over ``native``'s, timed in turns (:data:`SCREEN`, :data:`SCREEN_ROUNDS`)."""
    engine = candidate.engine
    contenders = [Contender.from_timer("native", native),
                  Contender("fewer threads", lambda: engine.run(feeds), wind_down_s=engine.wind_down_s)]
    standings = run_contest(contenders, SCREEN, SCREEN_ROUNDS)
    return standings.median("fewer threads") / standings.median("native")
