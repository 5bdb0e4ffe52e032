"""The selection's time under a deadline: what each step may take so that what must follow it (compiles, the final
contest's floor) still fits."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from rlcompile.layer.selection.candidates import Candidate
from rlcompile.layer.selection.fewer_threads import screen_seconds
from rlcompile.layer.selection.timing import ROUNDS
from rlcompile.measure import (
    contest,
)

#: With a deadline, the share of the time left after grouping kept for compiling, checking and timing the
#: candidates (the final contest settles in what is left); the profile gets the rest.
FINAL_SHARE = 0.7
#: At most this many refining probes, each timing the plans the previous one's corrections led the solvers to; the last
#: one solves no more, so every mixed plan the final contest times was probed first when time allowed (plans solved
#: after the last probe came within 15% of their prediction 6 times in 22, and never won).
REFINE_ROUNDS = 2
#: The plans a refining probe leads to, each compiled after it: the agent's and the exact optimum's on the corrected
#: table.
REFINED_PLANS = 2
#: With a deadline, the refining probe gets this share of the time left beyond the final contest's floor, and
#: runs only when twice its own floor fits there.
PROBE_SHARE = 0.3
#: With a deadline, this share of the selection's time is kept for the final contest to settle in, beyond its floor:
#: neither the profile nor a probe may use it. With only what they left, ``optimize --quick`` on hf:albert (2-core
#: Zen 4) ran its final contest for 2 rounds, its twins 7.3% apart; on mobilenet_v2 (80 s) the profile ends 5 s sooner.
SETTLE_SHARE = 0.2
#: With a deadline, a search (Q-learning, random) fits its episodes into this share of the time left: on the 2-core
#: VM in a slow spell, Q-learning's 1,620 episodes over convnext's 81 groups took 12 s of a 60 s budget.
SOLVE_SHARE = 0.05


def solve_seconds(deadline: float | None) -> float | None:
    """The time a solve may take before ``deadline`` (:data:`SOLVE_SHARE` of what is left; none without one)."""
    return None if deadline is None else max(0.0, SOLVE_SHARE * (deadline - time.monotonic()))


def settle_seconds(deadline: float | None) -> float:
    """The seconds kept for the final contest's settling (:data:`SETTLE_SHARE` of the time left; none without a
    deadline)."""
    return 0.0 if deadline is None else SETTLE_SHARE * max(0.0, deadline - time.monotonic())


def later_compiles(libraries: int) -> int:
    """How many whole-model compiles follow the profile at most: the calibration's single-library plans, then the
    agent's plan, the exact optimum and the single-library plans, and OpenVINO native whole. Each
    is priced at what compiling a native session took (a 500 MB VGG: 5 s each)."""
    return 2 * libraries + 2


def call_seconds(native: Callable[[], object]) -> float:
    """One call of ``native``, timed after one warm call."""
    native()
    started = time.monotonic()
    native()
    return time.monotonic() - started


def plan_seconds(candidates: list[Candidate], call_s: float) -> list[float]:
    """A call of each runnable candidate, in seconds: the table's prediction (a native call's without one)."""
    return [c.predicted_ms / 1e3 if math.isfinite(c.predicted_ms) else call_s for c in candidates
            if c.engine is not None and c.error is None]  # fmt: skip


@dataclass(frozen=True)
class FinalReserve:
    """What must follow the refining probes before a deadline: the compiles of the plans they find and of the model
    run whole by each native runtime, then the final contest's floor (:func:`~rlcompile.measure.contest.floor_seconds`).

    ``call_s``: one native call (a contender without a prediction is priced at it); ``natives``: the native runs the
    final contest times (twins included); ``runtimes``: the native runtimes, each of which also runs the model whole as
    a candidate, compiled in ``whole_s`` (what a native session took). Pricing every compile at the slowest plan
    compile so far reserved 3.8 s more than followed on hf:convnext (60 s), and its second probe did not run."""

    call_s: float
    natives: int
    runtimes: int
    whole_s: float
    #: the plan twins compiled before the final contest (:data:`PLAN_TWIN`), each in ``whole_s``, and timed in it
    twins: int = 0
    #: the seconds kept for the final contest's settling beyond its floor (:data:`SETTLE_SHARE`)
    settle_s: float = 0.0
    #: the native runs at fewer threads (:func:`~rlcompile.layer.selection.fewer_threads.first_screens`), each
    #: compiled in ``whole_s``, screened, and timed in the final contest
    fewer: int = 0

    def final_floor_s(self, candidates: list[Candidate], refined: int = REFINED_PLANS) -> float:
        """The final contest's least time: the runnable candidates at their predictions, and at a native call's each
        the ``refined`` plans refining probes add yet, the native runs, the plan twins and the model run whole by each
        runtime."""
        extra = refined + self.natives + self.twins + self.runtimes + self.fewer
        return contest.floor_seconds(plan_seconds(candidates, self.call_s) + [self.call_s] * extra, ROUNDS)

    def after_probe_s(self, candidates: list[Candidate], compile_s: float, compiles: int,
                      refined: int | None = None) -> float:  # fmt: skip
        """What must follow a refining probe: the compiles of the ``compiles`` plans it finds (``compile_s`` each) and
        of the whole models, then the final contest's floor with ``refined`` plans not found yet (``compiles`` by
        default). The last probe finds none: reserving two compiles and two contenders for it anyway had stopped
        hf:convnext's second probe (57 ms a call, 60 s), so its refined plans reached the final contest unprobed and
        measured 1.16-1.26x their prediction."""
        refined = compiles if refined is None else refined
        whole = (self.runtimes + self.twins + self.fewer) * self.whole_s + self.fewer * screen_seconds(self.call_s)
        return self.final_floor_s(candidates, refined) + compiles * compile_s + whole + self.settle_s


def plans_found(round_index: int) -> int:
    """How many plans the refining probe of ``round_index`` (from 1) leads to: :data:`REFINED_PLANS`, none from the
    last one (:data:`REFINE_ROUNDS`), which solves no more."""
    return 0 if round_index >= REFINE_ROUNDS else REFINED_PLANS


def native_runtimes(natives: Collection[str]) -> int:
    """How many runtimes the native runs (labelled ``"<runtime> native ..."``) run natively."""
    return len({label.split()[0] for label in natives})


def probe_deadline(deadline: float | None, after_s: float, probe_floor_s: float,
                   start: float | None = None) -> tuple[bool, float | None]:  # fmt: skip
    """Whether the refining probe runs, and when it must end: always, unlimited, without a deadline; with one, only
    when twice its floor fits beside ``after_s`` (what must follow it: the compiles of the plans it finds and the
    final contest's floor), and within :data:`PROBE_SHARE` of the time beyond that. ``start``: when the probe
    starts (``time.monotonic()``; now by default)."""
    if deadline is None:
        return True, None
    start = time.monotonic() if start is None else start
    spare = deadline - start - after_s
    if spare < 2 * probe_floor_s:
        return False, None
    return True, start + max(probe_floor_s, PROBE_SHARE * spare)


def another_probe_fits(deadline: float | None, ready: float | None, after_s: float, probe_floor_s: float) -> bool:
    """Whether one more probe fits once the plans this one finds are compiled (at ``ready``) and solved for
    (:data:`SOLVE_SHARE`): :func:`probe_deadline`'s rule, this probe's floor for the next one's, ``after_s`` what
    must follow the next probe. Only then are plans solved after this one, for the next probe to measure. A plan
    solved after the last probe reaches the final contest unseen: hf:convnext's refined plans, where one call takes
    57 ms and a 60 s budget fits one probe, came 1.46x and 1.85x their prediction."""
    if deadline is None or ready is None:
        return True
    return probe_deadline(deadline, after_s, probe_floor_s, start=ready + SOLVE_SHARE * (deadline - ready))[0]
