"""A CPU cgroup's quota and throttling counters (``contract.cpulist``) read from the captured
Slurm host tree in ``../shared/fixtures/cgroups`` (cgroup v1 ``cpu,cpuacct`` and the v2
unified tree on one host), and the per-epoch fields ``workloads.record.cputime`` makes of
two readings."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.cpulist import (
    CpuThrottling,
    cpu_cgroup_folder,
    folder_quota_cpus,
    parse_cpu_max,
    parse_cpu_stat,
)
from contract.schema import Workload
from workloads.record.cputime import GroupThrottling, throttling_fields

TREE = Path(__file__).resolve().parents[2].parent / "shared/fixtures/cgroups/cgroup-exporter-slurm"


@pytest.fixture
def tree() -> Path:
    if not TREE.is_dir():
        pytest.skip(f"{TREE} is not here (../shared beside the checkout)")
    return TREE


def test_v1_cpu_stat_is_read_in_seconds(tree: Path) -> None:
    text = (tree / "cpuacct/slurm/uid_20821/job_11/cpu.stat").read_text()
    assert parse_cpu_stat(text) == CpuThrottling(0, 0, 0.0)
    assert parse_cpu_stat("nr_periods 40\nnr_throttled 30\nthrottled_time 2500000000\n") == (
        CpuThrottling(40, 30, 2.5)
    )


def test_v2_cpu_stat_and_cpu_max(tree: Path) -> None:
    scope = tree / "system.slice/slurmstepd.scope"
    assert parse_cpu_stat((scope / "cpu.stat").read_text()) == CpuThrottling(0, 0, 0.0)
    assert parse_cpu_stat(
        "usage_usec 9\nnr_periods 10\nnr_throttled 4\nthrottled_usec 1500000\n"
    ) == (CpuThrottling(10, 4, 1.5))
    assert (scope / "cpu.max").read_text().strip() == "max 100000"
    assert parse_cpu_max((scope / "cpu.max").read_text()) is None
    assert parse_cpu_max("25000 100000\n") == 0.25
    assert folder_quota_cpus(scope) is None


def test_a_cpu_stat_without_the_cpu_controller_is_an_error() -> None:
    with pytest.raises(ValueError, match="nr_periods"):
        parse_cpu_stat("usage_usec 503701\nuser_usec 185228\n")


def test_the_folder_of_a_v1_process_and_of_a_v2_one(tree: Path) -> None:
    v1 = "5:cpu,cpuacct:/slurm/uid_20821/job_11/step_0/task_0\n3:memory:/slurm/uid_20821/job_11\n"
    assert cpu_cgroup_folder(v1, tree) == tree / "cpuacct/slurm/uid_20821/job_11/step_0/task_0"
    assert folder_quota_cpus(tree / "cpuacct/slurm/uid_20821/job_11/step_0/task_0") is None
    v2 = "0::/system.slice/slurmstepd.scope\n"
    assert cpu_cgroup_folder(v2, tree) == tree / "system.slice/slurmstepd.scope"
    assert cpu_cgroup_folder("0::/nowhere\n", tree) is None


def _group(quota: float, holds_rank: bool, periods: int, throttled: int) -> GroupThrottling:
    return GroupThrottling(quota, holds_rank, CpuThrottling(periods, throttled, throttled * 0.05))


def test_the_most_throttled_group_over_the_epoch_is_sent() -> None:
    start = {Path("/a"): _group(4.0, True, 100, 0), Path("/b"): _group(0.25, False, 50, 40)}
    end = {Path("/a"): _group(4.0, True, 200, 10), Path("/b"): _group(0.25, False, 150, 135)}
    assert throttling_fields(start, end) == {
        Workload.CPU_THROTTLED_SHARE: 0.95,
        Workload.THROTTLED_QUOTA_CPUS: 0.25,
        Workload.THROTTLED_GROUP_HOLDS: "loaders",
    }


def test_a_group_seen_only_at_the_end_or_idle_sends_nothing() -> None:
    end = {Path("/b"): _group(0.25, False, 150, 135), Path("/a"): _group(1.0, True, 7, 0)}
    assert throttling_fields({}, end) == {}
    assert throttling_fields({Path("/a"): _group(1.0, True, 7, 0)}, end) == {}
    assert throttling_fields(None, None) == {}
