"""What else used the machine while a contest ran: the hypervisor's steal and other programs' CPU time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlcompile.events import Noise
from rlcompile.layer.selection import report_noise
from rlcompile.manifest import LatencyRecord
from rlcompile.measure import Contender, MeasureConfig, run_contest
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
