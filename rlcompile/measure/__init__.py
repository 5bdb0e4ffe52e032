"""Measurement shared by every level: timing one call (:mod:`.timing`) and contests between several
(:mod:`.contest`), the only place where contenders are timed in turns and a winner is kept."""

from rlcompile.measure import contest
from rlcompile.measure.contest import (
    DECISION_ROUNDS,
    MIN_ROUNDS,
    NOISY,
    PLAN_RULE,
    REPORT_ROUNDS,
    REWRITE_RULE,
    SETTLE,
    Contender,
    KeepRule,
    Settle,
    Standings,
    Timer,
    pair_ratio,
    round_ratio,
    run_contest,
    spread_over,
    time_in_turns,
)
from rlcompile.measure.load import MachineLoad, cpu_ticks, machine_load
from rlcompile.measure.throughput import Server, ServingStats, ThroughputStandings, throughput_contest
from rlcompile.measure.timing import (
    DEFAULT,
    QUICK,
    LatencyStats,
    MeasureConfig,
    measure_after,
    measure_latency,
    summarize,
)

__all__ = [
    "DECISION_ROUNDS",
    "DEFAULT",
    "MIN_ROUNDS",
    "NOISY",
    "PLAN_RULE",
    "QUICK",
    "REPORT_ROUNDS",
    "REWRITE_RULE",
    "SETTLE",
    "Contender",
    "KeepRule",
    "LatencyStats",
    "MachineLoad",
    "MeasureConfig",
    "Server",
    "ServingStats",
    "Settle",
    "Standings",
    "ThroughputStandings",
    "Timer",
    "contest",
    "cpu_ticks",
    "machine_load",
    "measure_after",
    "measure_latency",
    "pair_ratio",
    "round_ratio",
    "run_contest",
    "spread_over",
    "summarize",
    "throughput_contest",
    "time_in_turns",
]  # fmt: skip
