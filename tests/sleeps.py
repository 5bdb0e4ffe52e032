"""How often a library's worker threads go to sleep during a call, counted in a fresh process.

A fresh process, because a spin count is read when a library's pool starts, and because in a long test session
the idle pools other tests left behind add context switches of their own (7 a call in the full suite against
none alone).
"""

from __future__ import annotations

import subprocess
import sys

COUNT = """
import resource
{setup}
for _ in range(20):
    call()
before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
for _ in range({calls}):
    call()
print((resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - before) / {calls})
"""


def sleeps_per_call(setup: str, below: float, calls: int = 100, attempts: int = 2) -> float:
    """Voluntary context switches a call of ``call``, which the Python code ``setup`` defines (after 20 warm-up
    calls), in a fresh interpreter with rlcompile's thread settings: the fewest of up to ``attempts`` counts, the
    first one ``below`` the limit ending them. Another process on a 2-core machine can only add sleeps (a worker
    whose caller it descheduled spins out and sleeps), never take them away: the CI's full suite once counted
    13.7 a call where the test alone counts under 2."""
    fewest = float("inf")
    for _ in range(attempts):
        done = subprocess.run([sys.executable, "-c", COUNT.format(setup=setup, calls=calls)], capture_output=True,
                              text=True, check=True)  # fmt: skip
        fewest = min(fewest, float(done.stdout.strip().splitlines()[-1]))
        if fewest < below:
            break
    return fewest
