"""The CPU seconds a rank uses: the rank process and every process below it (its data
loaders), from ``/proc/<pid>/stat``.

Per process: ``utime + stime`` (its threads) plus ``cutime + cstime`` (its children it has
already reaped, with theirs): so a loader worker that exits and is reaped moves from the
live descendants' sum into its parent's, and the total keeps growing. A child that exited
and is not reaped yet is missed until it is. The difference of two readings is the CPU
time the rank's processes used in between, which ``epoch_end`` carries
(``Workload.CPU_SECONDS``).

What held those processes back is read beside it (``TreeThrottling``): the ``cpu.stat``
counters of every CPU cgroup with a quota that holds the rank or one of its loaders. A
container's quota holds the rank and its loaders together; a loader pool can be put in a
group of its own (the findings bench's decode-quota case does). A group is remembered once
seen, so loaders started after an epoch began are read at its next boundary.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from contract import procfs
from contract.cpulist import CpuThrottling, cpu_cgroup_folder, folder_quota_cpus, parse_cpu_stat
from contract.schema import Workload
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


class GroupThrottling(NamedTuple):
    """One CPU cgroup with a quota, as read at one instant."""

    quota_cpus: float
    holds_rank: bool  # the rank itself is in it (else only loaders below it)
    counters: CpuThrottling


class TreeThrottling:
    """The throttling counters, now, of the quota-limited CPU cgroups holding a process or
    its live descendants (``{folder: GroupThrottling}``); groups seen before are read too."""

    def __init__(
        self, pid: int | None = None, proc: Path = Path("/proc"),
        sys_root: Path = Path("/sys/fs/cgroup"),
    ) -> None:  # fmt: skip
        self.pid = os.getpid() if pid is None else pid
        self.proc = proc
        self.sys_root = sys_root
        self.groups: dict[Path, tuple[float, bool]] = {}  # folder: (quota, holds the rank)

    def _find(self, pid: int, is_rank: bool) -> None:
        try:
            folder = cpu_cgroup_folder((self.proc / str(pid) / "cgroup").read_text(), self.sys_root)
            quota = None if folder is None else folder_quota_cpus(folder)
        except (OSError, ValueError):  # exited meanwhile
            return
        if folder is not None and quota is not None:
            known = self.groups.get(folder)
            self.groups[folder] = (quota, is_rank or (known is not None and known[1]))

    def __call__(self) -> dict[Path, GroupThrottling]:
        self._find(self.pid, True)
        for child in descendants(self.pid, self.proc):
            self._find(child, False)
        now = {}
        for folder, (quota, holds_rank) in self.groups.items():
            try:
                counters = parse_cpu_stat((folder / "cpu.stat").read_text())
            except (OSError, ValueError):  # the group was removed
                continue
            now[folder] = GroupThrottling(quota, holds_rank, counters)
        return now


THROTTLED_HOLDS_RANK = "rank"
THROTTLED_HOLDS_LOADERS = "loaders"


def throttling_fields(
    start: dict[Path, GroupThrottling] | None, end: dict[Path, GroupThrottling] | None
) -> dict[str, object]:
    """The ``epoch_end`` fields of the most throttled quota group over an epoch (read at its
    start and end): the share of its scheduling periods whose quota ran out, its quota, and
    whether it holds the rank or only loaders; empty when no group had a period in both."""
    best: tuple[float, GroupThrottling] | None = None
    for folder, now in (end or {}).items():
        before = (start or {}).get(folder)
        if before is None:
            continue
        periods = now.counters.periods - before.counters.periods
        if periods <= 0:
            continue
        share = (now.counters.throttled - before.counters.throttled) / periods
        if best is None or share > best[0]:
            best = (share, now)
    if best is None:
        return {}
    share, group = best
    holds = THROTTLED_HOLDS_RANK if group.holds_rank else THROTTLED_HOLDS_LOADERS
    return {
        Workload.CPU_THROTTLED_SHARE: round(share, 4),
        Workload.THROTTLED_QUOTA_CPUS: group.quota_cpus,
        Workload.THROTTLED_GROUP_HOLDS: holds,
    }
