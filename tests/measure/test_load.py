"""What else used the machine while a contest ran: the hypervisor's steal and other programs' CPU time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlcompile.events import Noise
from rlcompile.layer.selection.timing import report_noise
from rlcompile.manifest import LatencyRecord
from rlcompile.measure import Contender, MeasureConfig, contest, run_contest
from rlcompile.measure.load import CpuTicks, MachineLoad, cpu_ticks, load_words, machine_load

TURNS = MeasureConfig(warmup=1, min_repeats=3, min_time_s=0.05, max_time_s=1.0)
HAS_PROC_STAT = Path("/proc/stat").exists()


def test_the_load_is_the_share_stolen_and_the_share_busy_beyond_what_was_measured():
    before = CpuTicks(steal=10, busy=100, total=1000, own_cpu_s=1.0)
    after = CpuTicks(steal=30, busy=400, total=1200, own_cpu_s=2.0)  # 100 ticks of this process at 100 Hz
    load = machine_load(before, after, ticks_per_second=100)
    assert load == MachineLoad(steal=pytest.approx(0.1), others=pytest.approx(1.0))
    mine_alone = machine_load(before, CpuTicks(10, 200, 1200, 2.0), ticks_per_second=100)
    assert mine_alone == MachineLoad(steal=0.0, others=0.0) and not mine_alone.noticeable
    assert machine_load(before, before) is None and machine_load(None, after) is None


def test_a_load_is_said_only_when_noticeable_and_survives_the_manifest():
    shared = MachineLoad(steal=0.138, others=0.0)
    assert shared.noticeable and load_words(shared) and not load_words(MachineLoad(0.01, 0.01)) and not load_words(None)
    record = LatencyRecord({"ort native": 2.0}, 2.0, 2.0, 2.0, 1.0, 2.0, 0.01, machine_load=shared.to_dict())
    assert MachineLoad.from_dict(LatencyRecord.from_json(record.to_json()).machine_load) == shared
    assert MachineLoad.from_dict(None) is None


def test_a_machine_without_proc_stat_has_no_load(tmp_path):
    assert cpu_ticks(stat=tmp_path / "absent") is None
    (tmp_path / "stat").write_text("cpu  not numbers\n")
    assert cpu_ticks(stat=tmp_path / "stat") is None


@pytest.mark.skipif(not HAS_PROC_STAT, reason="the machine's CPU time is read from Linux's /proc/stat")
def test_a_contest_beside_a_busy_program_says_that_program_took_the_cpus():
    contenders = [Contender("a", lambda: time.sleep(0.002)), Contender("a twin", lambda: time.sleep(0.002), "a")]
    quiet = run_contest(contenders, TURNS, rounds=2)
    assert quiet.load is not None and 0.0 <= quiet.load.steal <= 1.0 and 0.0 <= quiet.load.others <= 1.0
    spin = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"
    busy = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.3)  # the interpreter has started and spins
        beside = run_contest(contenders, TURNS, rounds=4)
    finally:
        busy.kill()
        busy.wait()
    # one of the machine's CPUs (two on CI) kept busy by another program while this process sleeps
    assert beside.load is not None and beside.load.others > max(0.5 / (os.cpu_count() or 1), quiet.load.others)
    events = []
    report_noise(beside, events.append)
    [event] = events
    assert isinstance(event, Noise) and event.rounds == beside.rounds and event.others == beside.load.others


class StolenTicks:
    """Readings of ``/proc/stat`` (the one fault no test can cause: a hypervisor running other guests): each reading
    100 ticks after the last, with the listed share of them stolen (none once the list is spent)."""

    def __init__(self, stolen: list[float]) -> None:
        self.stolen, self.total, self.steal = list(stolen), 0, 0

    def __call__(self) -> CpuTicks:
        self.total += 100
        self.steal += round(100 * (self.stolen.pop(0) if self.stolen else 0.0))
        return CpuTicks(self.steal, 0, self.total, 0.0)


def per_block(stolen: list[float]) -> list[float]:
    """:class:`StolenTicks`' shares for blocks read before and after each (nothing stolen before a block)."""
    return [share for block in stolen for share in (0.0, block)]


@pytest.mark.parametrize(("stolen", "retimed"), [([0.2], 1), ([0.2, 0.3, 0.4, 0.5], contest.RETIMES),
                                                 ([0.05], 0), ([], 0)])  # fmt: skip
def test_a_block_the_hypervisor_took_time_from_is_timed_again_up_to_a_limit(monkeypatch, stolen, retimed):
    calls = []
    monkeypatch.setattr(contest, "cpu_ticks", StolenTicks(per_block(stolen)))
    block, again = contest.undisturbed_block(lambda: calls.append(1), TURNS)
    assert again == retimed and block.repeats >= TURNS.min_repeats
    assert len(calls) >= (retimed + 1) * (TURNS.warmup + TURNS.min_repeats)  # every timing ran the calls again


def test_no_block_is_timed_again_past_the_deadline_and_a_contest_counts_those_it_timed_again(monkeypatch):
    monkeypatch.setattr(contest, "cpu_ticks", StolenTicks(per_block([0.5])))
    assert contest.undisturbed_block(lambda: None, TURNS, deadline=time.monotonic() - 1)[1] == 0
    # the contest reads the machine once before its first block: then its first block, timed again, and its third
    monkeypatch.setattr(contest, "cpu_ticks", StolenTicks([0.0, *per_block([0.5, 0.0, 0.0, 0.3])]))
    contenders = [Contender("a", lambda: None), Contender("a twin", lambda: None, "a")]
    standings = run_contest(contenders, TURNS, rounds=2)
    assert standings.retimed == 2 and standings.rounds == 2
    events = []
    report_noise(standings, events.append)
    assert events and events[0].retimed == 2
