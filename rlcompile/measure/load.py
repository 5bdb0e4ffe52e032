"""What else used the machine while something was measured: the hypervisor and the other programs.

Two identical sessions timed in turns (a contest's twins) say how noisy a measurement was, not why. On a shared
machine two causes are visible from inside: the hypervisor running other guests on this guest's CPUs (Linux's
``steal`` time in ``/proc/stat``) and other programs of this machine (its busy time less this process's own). Both
are shares of all the CPUs' time over the measurement. Measured with ``benchmarks/shared_cpu.py`` on the 2-core
Emerald Rapids VM: another program busy for a quarter of one CPU slowed ONNX Runtime and OpenVINO 1.2x and PyTorch
1.7x; 13.8% stolen while ``select`` ran on hf:deit came with its twins 13.9% apart (``benchmarks/real_world.py``).
Neighbours that share a CPU's core without being scheduled on it (another guest's hyperthread) show in neither.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

#: Shares of the machine's time below this, stolen or used by others, are not worth a word.
NOTICEABLE = 0.02


@dataclass(frozen=True)
class CpuTicks:
    """A reading of the machine's CPU time, all CPUs together: clock ticks stolen by the hypervisor, busy and in all
    (``/proc/stat``), and this process's own CPU seconds (or its children's, for a benchmark that runs commands)."""

    steal: int
    busy: int
    total: int
    own_cpu_s: float


@dataclass(frozen=True)
class MachineLoad:
    """Shares of every CPU's time while something was measured: ``steal``, given by the hypervisor to other guests,
    and ``others``, spent by programs other than this one."""

    steal: float
    others: float

    @property
    def noticeable(self) -> bool:
        return self.steal >= NOTICEABLE or self.others >= NOTICEABLE

    def describe(self) -> str:
        return (f"the hypervisor gave {100 * self.steal:.1f}% of the CPUs' time to other guests and other programs "
                f"used {100 * self.others:.1f}%")  # fmt: skip

    def to_dict(self) -> dict[str, float]:
        return {"steal": self.steal, "others": self.others}

    @classmethod
    def from_dict(cls, data: dict | None) -> MachineLoad | None:
        return cls(data["steal"], data["others"]) if data else None


def load_words(load: MachineLoad | None, lead: str = "meanwhile") -> str:
    """``"; <lead> <what else used the machine>"`` when that was noticeable, else nothing: what a line reporting a
    contest's noise appends."""
    return f"; {lead} {load.describe()}" if load is not None and load.noticeable else ""


def cpu_ticks(own_cpu_s: float | None = None, stat: Path = Path("/proc/stat")) -> CpuTicks | None:
    """The machine's CPU time now (``None`` where ``/proc/stat`` cannot be read); ``own_cpu_s``: the CPU seconds
    of what is measured (default: this process's, every thread)."""
    try:
        fields = [int(value) for value in stat.read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 4:
        return None
    idle = sum(fields[3:5])  # idle, iowait
    steal = fields[7] if len(fields) > 7 else 0
    total = sum(fields[:8])  # guest time is counted in user time already
    own = time.process_time() if own_cpu_s is None else own_cpu_s
    return CpuTicks(steal, total - idle - steal, total, own)


def machine_load(before: CpuTicks | None, after: CpuTicks | None,
                 ticks_per_second: float | None = None) -> MachineLoad | None:  # fmt: skip
    """What else used the machine between two readings (``None`` without both, or when no tick passed)."""
    if before is None or after is None or after.total <= before.total:
        return None
    hertz = ticks_per_second or os.sysconf("SC_CLK_TCK")
    total = after.total - before.total
    others = (after.busy - before.busy) - (after.own_cpu_s - before.own_cpu_s) * hertz
    return MachineLoad(steal=(after.steal - before.steal) / total, others=min(max(others / total, 0.0), 1.0))
