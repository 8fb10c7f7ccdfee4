"""The CPU seconds a rank uses: the rank process and every process below it (its data
loaders), from ``/proc/<pid>/stat``.

Per process: ``utime + stime`` (its threads) plus ``cutime + cstime`` (its children it has
already reaped, with theirs): so a loader worker that exits and is reaped moves from the
live descendants' sum into its parent's, and the total keeps growing. A child that exited
and is not reaped yet is missed until it is. The difference of two readings is the CPU
time the rank's processes used in between, which ``epoch_end`` carries
(``Workload.CPU_SECONDS``).
"""

from __future__ import annotations

import os
from pathlib import Path

from contract import procfs
from workloads.record.anatomy import descendants


class ProcessTreeCpu:
    """CPU seconds so far of a process and its live descendants; None where
    ``/proc/<pid>/stat`` cannot be read."""

    def __init__(self, pid: int | None = None, proc: Path = Path("/proc")) -> None:
        self.pid = os.getpid() if pid is None else pid
        self.proc = proc
        self.ticks_per_second = os.sysconf("SC_CLK_TCK")

    def _ticks(self, pid: int) -> int:
        # utime + stime + cutime + cstime: a reaped child's time is its parent's
        stat = procfs.parse_stat((self.proc / str(pid) / "stat").read_text())
        return stat.ticks + stat.children_ticks

    def __call__(self) -> float | None:
        try:
            total = self._ticks(self.pid)
        except (OSError, ValueError):
            return None
        for child in descendants(self.pid, self.proc):
            try:
                total += self._ticks(child)
            except (OSError, ValueError):  # exited: its time is its parent's once reaped
                continue
        return total / self.ticks_per_second
