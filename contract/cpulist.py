"""The cpulist format of ``Workload.CPUS_ALLOWED`` (as the kernel writes ``Cpus_allowed_list``:
``0-3,8``), written by the ranks and read by the findings, and a process's cgroup v1 CPU
quota (``Workload.CPU_QUOTA_CPUS``, and what ``agent ceilings`` states it measured under)."""

from __future__ import annotations

from pathlib import Path


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


def cgroup_quota(
    proc: Path = Path("/proc"), sys_root: Path = Path("/sys/fs/cgroup")
) -> float | None:
    """This process's cgroup v1 CPU quota in CPUs, or None (no quota, or not readable)."""
    try:
        path = cgroup_v1_cpu_path((proc / "self" / "cgroup").read_text())
        if path is None:
            return None
        for mount in ("cpu", "cpu,cpuacct"):
            folder = sys_root / mount / path.lstrip("/")
            if (folder / "cpu.cfs_quota_us").exists():
                return quota_cpus(
                    (folder / "cpu.cfs_quota_us").read_text(),
                    (folder / "cpu.cfs_period_us").read_text(),
                )
    except (OSError, ValueError):
        return None
    return None
