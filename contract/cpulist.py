"""The cpulist format of ``Workload.CPUS_ALLOWED`` (as the kernel writes ``Cpus_allowed_list``:
``0-3,8``), written by the ranks and read by the findings, and a process's cgroup v1 CPU
quota (``Workload.CPU_QUOTA_CPUS``, and what ``agent ceilings`` states it measured under),
and a CPU cgroup's throttling counters (``cpu.stat``: what a quota held its processes back).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from contract.procfs import parse_cgroup


def parse_cpu_list(text: str) -> set[int]:
    """A cpulist (``0-3,8``) as CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part.strip():
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def format_cpu_list(cpus: set[int]) -> str:
    """CPU numbers as a cpulist: ``{0, 1, 2, 3, 8}`` -> ``0-3,8``."""
    ranges: list[str] = []
    ordered = sorted(cpus)
    index = 0
    while index < len(ordered):
        end = index
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        low, high = ordered[index], ordered[end]
        ranges.append(str(low) if low == high else f"{low}-{high}")
        index = end + 1
    return ",".join(ranges)


def cgroup_v1_cpu_path(proc_cgroup: str) -> str | None:
    """The rank's cgroup v1 ``cpu`` controller path from ``/proc/<pid>/cgroup``
    (``4:cpu,cpuacct:/slurm/job_1``); None under cgroup v2 only."""
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "cpu" in parts[1].split(","):
            return parts[2]
    return None


def quota_cpus(quota_us: str, period_us: str) -> float | None:
    """``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` in CPUs; None when unlimited (-1)."""
    quota, period = int(quota_us.strip()), int(period_us.strip())
    return quota / period if quota > 0 and period > 0 else None


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 ``cpu.max`` (``25000 100000``: quota and period, microseconds) in CPUs;
    None when unlimited (``max 100000``)."""
    quota, _, period = text.strip().partition(" ")
    if quota == "max":
        return None
    return quota_cpus(quota, period or "100000")


class CpuThrottling(NamedTuple):
    """A CPU cgroup's ``cpu.stat`` counters since it was made (cgroup v1 and v2 alike)."""

    periods: int  # nr_periods: scheduling periods (100 ms by default) with runnable tasks
    throttled: int  # nr_throttled: of those, the periods whose quota ran out
    throttled_seconds: float  # time its tasks were held back (v1 ns, v2 usec, as seconds)


def parse_cpu_stat(text: str) -> CpuThrottling:
    """``cpu.stat``: v1's ``throttled_time`` (ns) or v2's ``throttled_usec``; ValueError when
    the file has no ``nr_periods`` (a v2 group without the cpu controller)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if value.strip().isdigit():
            values[name] = int(value)
    if "nr_periods" not in values:
        raise ValueError("cpu.stat without nr_periods: the group's cpu controller is off")
    if "throttled_usec" in values:
        seconds = values["throttled_usec"] / 1e6
    else:
        seconds = values.get("throttled_time", 0) / 1e9
    return CpuThrottling(values["nr_periods"], values.get("nr_throttled", 0), seconds)


def cpu_cgroup_folder(proc_cgroup: str, sys_root: Path = Path("/sys/fs/cgroup")) -> Path | None:
    """The folder of a process's CPU cgroup (its ``/proc/<pid>/cgroup`` text): in v1's
    ``cpu`` hierarchy (``<root>/cpu,cpuacct``, ``<root>/cpu`` or ``<root>/cpuacct``), else
    the v2 group (``<root>`` or ``<root>/unified``) with a ``cpu.max``; None otherwise."""
    lines = parse_cgroup(proc_cgroup)
    for line in lines:
        if "cpu" in line.controllers:
            # mounted as the controllers joined, with a link per controller (cpu, cpuacct)
            for mount in (",".join(line.controllers), *line.controllers):
                folder = sys_root / mount / line.path.lstrip("/")
                if (folder / "cpu.cfs_quota_us").exists():
                    return folder
    for line in lines:
        if not line.controllers:
            for base in (sys_root, sys_root / "unified"):
                folder = base / line.path.lstrip("/")
                if (folder / "cpu.max").exists():
                    return folder
    return None


def folder_quota_cpus(folder: Path) -> float | None:
    """A CPU cgroup folder's own quota in CPUs (v1 ``cpu.cfs_quota_us`` over
    ``cpu.cfs_period_us``, v2 ``cpu.max``); None when unlimited."""
    if (folder / "cpu.max").exists():
        return parse_cpu_max((folder / "cpu.max").read_text())
    return quota_cpus(
        (folder / "cpu.cfs_quota_us").read_text(), (folder / "cpu.cfs_period_us").read_text()
    )


def cgroup_quota(
    proc: Path = Path("/proc"), sys_root: Path = Path("/sys/fs/cgroup")
) -> float | None:
    """This process's cgroup CPU quota in CPUs (v1 or v2), or None (no quota, or not
    readable)."""
    try:
        folder = cpu_cgroup_folder((proc / "self" / "cgroup").read_text(), sys_root)
        return None if folder is None else folder_quota_cpus(folder)
    except (OSError, ValueError):
        return None
