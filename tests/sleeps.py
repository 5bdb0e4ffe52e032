"""How often a library's worker threads go to sleep during a call, counted in a fresh process.

A fresh process, because a spin count is read when a library's pool starts, and because in a long test session
the idle pools other tests left behind add context switches of their own (stop 60: 7 a call in the full suite
against none alone).
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


def sleeps_per_call(setup: str, calls: int = 100) -> float:
    """Voluntary context switches a call of ``call``, which the Python code ``setup`` defines (after 20 warm-up
    calls), in a fresh interpreter with rlcompile's thread settings."""
    done = subprocess.run([sys.executable, "-c", COUNT.format(setup=setup, calls=calls)], capture_output=True,
                          text=True, check=True)  # fmt: skip
    return float(done.stdout.strip().splitlines()[-1])
