"""The budget rule and the flag parsers of ``optimize``."""

from __future__ import annotations

import pytest

from rlcompile.errors import RlcompileError
from rlcompile.optimize.budget import LEVELS, Budget, parse_duration, parse_levels


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("10m", 600), ("1.5h", 5400), ("600", 600), ("2M", 120)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5m", "ten minutes", "5d"])
def test_bad_durations_are_refused(text):
    with pytest.raises(RlcompileError):
        parse_duration(text)


def test_levels_keep_pipeline_order_and_refuse_unknown_names():
    assert parse_levels(None) == list(LEVELS)
    assert parse_levels("layer,graph") == ["graph", "layer"]
    with pytest.raises(RlcompileError):
        parse_levels("graph,kernels")


@pytest.mark.parametrize("lowered", [False, True])
@pytest.mark.parametrize("levels", [LEVELS, ("graph", "layer"), ("kernel",), ("layer",)])
def test_shares_split_the_usable_budget_over_the_chosen_levels(levels, lowered):
    budget = Budget(600.0, tuple(levels), lowered)
    assert 0.9 * 600 < budget.usable_s < 600  # the rest is for writing the plan
    assert sum(budget.share_s(level) for level in LEVELS) == pytest.approx(budget.usable_s)
    assert all(budget.share_s(level) == 0 for level in LEVELS if level not in levels)
    favoured = "layer" if lowered else "kernel"  # lowering precision is searched at the layer level
    if favoured in levels and len(levels) > 1:
        assert budget.share_s(favoured) == max(budget.share_s(level) for level in levels)


def test_a_budget_run_as_a_program_counts_from_the_process_start():
    """``rlcompile optimize --budget`` run as a program counts the interpreter's start and the imports (process_age_s:
    ~19 s on the slowed 2-core VM before the first stage)."""
    import subprocess
    import sys

    script = "import time; time.sleep(1.0); from rlcompile.machine import process_age_s; print(process_age_s())"
    age = float(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)
    assert 1.0 <= age < 60.0
