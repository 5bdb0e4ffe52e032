"""How ``optimize`` spends its wall-time budget across the levels.

The rule, stated once: each level chosen gets its share of the budget (:data:`SHARES`, or :data:`LOWERED_SHARES`
when precision below fp32 is allowed; renormalised over the levels asked for). The graph level's search gets
:data:`GRAPH_SEARCH_SHARE` of the graph share; checking and judging its rewrite take the rest. Time the graph level
did not use passes to the kernel level, which always has more to tune, and time it overran is taken from it, as is
whatever ran late before it (the process's start-up included), so that the layer level keeps its share; the kernel
level starts no batch past its deadline, and none of a batch's runs past it or beyond it. The layer level's share is
its deadline (less the least time its final contest can take and the whole-model compiles that follow its profile):
its profile adds libraries per fusion group until the time for it is spent (the default library profiles the rest,
and the profile resumes in a later run), the refining probe runs only when it leaves the final contest its time, and
the final contest always runs, shortened to fit down to a floor per contender.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlcompile.errors import RlcompileError

LEVELS = ("graph", "kernel", "layer")
SHARES = {"graph": 0.15, "kernel": 0.50, "layer": 0.35}
#: The shares when the accuracy contract allows a precision below fp32: the layer level, where the precision
#: searches run, takes most of the kernel level's. Each plan they try is quantized, compiled and checked on
#: every held-out sample (about 3 s on PaddleOCR's recogniser on 2 cores), NNCF's ranking alone tries one
#: per group (47 there), while the tuned kernels gain little over libraries already near the FMA peak.
LOWERED_SHARES = {"graph": 0.15, "kernel": 0.20, "layer": 0.65}
#: The least time the kernel level is started with when the layer level follows (it then gets the time instead):
#: extracting the tasks, timing each in the libraries and one batch of trials take about that, so a shorter share
#: tunes next to nothing (PaddleOCR's recogniser, 59 tasks, 2-core Zen 3: a 34 s share went on extracting the
#: tasks, 7 s, timing them in ONNX Runtime, 17 s, and a first batch the deadline cut; 38-46 s shares tuned 1-5 tasks).
KERNEL_FLOOR_S = 60.0
#: Kept aside for writing the plan directory and its report after the stages.
WRITE_SHARE = 0.03
#: The graph search's part of the graph share (verifying and judging the rewrite take the rest).
GRAPH_SEARCH_SHARE = 0.5
#: The graph judge's contest's part of the graph share (it settles within it; verifying takes the rest).
JUDGE_SHARE = 0.3
#: ``--quick``: a few minutes on a zoo CNN on 2 cores.
QUICK_BUDGET_S = 240.0
DEFAULT_BUDGET_S = 1200.0
UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in ``"90s"``, ``"10m"``, ``"1.5h"`` or ``"600"`` (seconds)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([smh]?)\s*", str(text).lower())
    if not match or float(match.group(1)) <= 0:
        raise RlcompileError(f"--budget {text!r}: give a positive duration such as 90s, 10m or 1h")
    return float(match.group(1)) * UNITS[match.group(2)]


def parse_levels(text: str | None) -> list[str]:
    """``--levels graph,kernel,layer`` in pipeline order; unknown names are refused."""
    names = [name.strip() for name in (text or ",".join(LEVELS)).split(",") if name.strip()]
    unknown = [name for name in names if name not in LEVELS]
    if unknown or not names:
        raise RlcompileError(f"--levels {text!r}: choose from {', '.join(LEVELS)}")
    return [level for level in LEVELS if level in names]


@dataclass(frozen=True)
class Budget:
    """A wall-time budget split over the chosen levels."""

    total_s: float
    levels: tuple[str, ...]
    #: whether the accuracy contract allows a precision below fp32 (:data:`LOWERED_SHARES` then)
    lowered: bool = False

    @property
    def usable_s(self) -> float:
        """The seconds the stages may use: the budget less what writing the plan and its report takes."""
        return self.total_s * (1 - WRITE_SHARE)

    def share_s(self, level: str) -> float:
        """The seconds ``level`` is given (0 when it is not chosen)."""
        if level not in self.levels:
            return 0.0
        shares = LOWERED_SHARES if self.lowered else SHARES
        return self.usable_s * shares[level] / sum(shares[name] for name in self.levels)

    def to_dict(self) -> dict:
        return {"total_s": self.total_s, "shares_s": {level: self.share_s(level) for level in self.levels},
                "lowered": self.lowered}  # fmt: skip
