"""Reads against a ceiling compared like with like (issue 42, item 3): the report's
``disk_read_ceiling_percent`` sets the reads of the devices with a measured ceiling against
the sum of those ceilings (matched on the device tag), and a data device at its ceiling
while the ranks wait for input is storage-bound however steady its reads."""

from __future__ import annotations

import pytest

from collector.analysis.epochs import build_report
from collector.findings.engine import run_findings
from contract.point import Point
from contract.schema import Ceiling, Disk, DiskKind, Tag
from tests.support.run_builder import NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

MIB = 1 << 20


def disk_points(run: RunBuilder, device: str, kind: str, bytes_per_second: list[float]) -> list:
    """A device's cumulative read bytes each second, at ``bytes_per_second[i]`` in epoch i."""
    points, total = [], 0.0
    bounds = run.epoch_bounds_true_ns()
    start, end = bounds[0][0] - 5 * NS, bounds[-1][1] + 5 * NS
    for time_ns in range(start, end + 1, NS):
        rate = next((r for (s, e), r in zip(bounds, bytes_per_second, strict=True)
                     if s <= time_ns - NS < e), 0.0)  # fmt: skip
        total += rate if time_ns > start else 0.0
        for host in run.hosts:
            tags = {Tag.HOST: host, Tag.DEVICE: device, Tag.KIND: kind}
            points.append(Point(Disk.NAME, tags, {str(Disk.READ_BYTES): total}, time_ns))
    return points


def ceiling_points(run: RunBuilder, device: str, bytes_per_second: float) -> list[Point]:
    start = run.epoch_bounds_true_ns()[0][0]
    return [
        Point(
            Ceiling.NAME,
            {Tag.HOST: host, Tag.DEVICE: device, Tag.KIND: "disk", Tag.METHOD: "o_direct"},
            {str(Ceiling.DISK_SEQUENTIAL_READ): bytes_per_second, str(Ceiling.MEASURED_AT): 1.0},
            start + second * NS,
        )
        for host in run.hosts
        for second in range(-5, 200, 5)
    ]


def test_only_the_disk_with_a_ceiling_counts_against_it(make_store):
    """The root disk sda reads 40 MB/s without a measured ceiling; the data disk sdb reads
    1 MB/s against its own 2 MB/s ceiling: 50%, not (40 + 1) / 2 = 2,050%."""
    run = RunBuilder("two-disks", nfs=False)
    run.epoch(20, 400, disk_read=40e6)
    run.epoch(20, 400, disk_read=40e6)
    points = [*run.points(), *disk_points(run, "sdb", DiskKind.DISK, [1e6, 0.0])]
    store = make_store([*points, *ceiling_points(run, "sdb", 2e6)])
    rows = {(r.host, r.epoch): r for r in build_report(store, "two-disks").rows}
    host = run.hosts[0]
    assert rows[(host, 1)].disk_read_mbps == pytest.approx(41.0, rel=0.02)  # both disks
    assert rows[(host, 1)].disk_read_ceiling_percent == pytest.approx(50.0, rel=0.02)
    assert rows[(host, 2)].disk_read_ceiling_percent == 0.0
    assert rows[("*", 1)].disk_read_ceiling_percent == pytest.approx(50.0, rel=0.02)


def test_a_ceiling_of_a_device_never_sampled_gives_no_share(make_store):
    """A ceiling measured on a device the disk sampler does not show (an overlay's
    major:minor) has no reads to set against it: no share rather than another disk's."""
    run = RunBuilder("overlay", nfs=False)
    run.epoch(20, 400, disk_read=40e6)
    store = make_store([*run.points(), *ceiling_points(run, "0:45", 2e6)])
    (row, *_) = build_report(store, "overlay").rows
    assert row.disk_read_ceiling_percent is None


def test_a_loop_device_with_a_ceiling_is_judged_by_its_own_reads(make_store):
    """The data set on a loop device (kind virtual, left out of the host's disk reads as
    its I/O lands on the disk below): measured by agent ceilings, its own reads count."""
    run = RunBuilder("loop", nfs=False)
    run.epoch(20, 400, disk_read=40e6)  # sda and the builder's loop0 alike
    store = make_store([*run.points(), *ceiling_points(run, "loop0", 80e6)])
    (row, *_) = build_report(store, "loop").rows
    assert row.disk_read_ceiling_percent == pytest.approx(50.0, rel=0.02)


def throttled_run(run_id: str, data_disk_rate: float) -> list[Point]:
    """The issue's case: the data set on its own disk, read-throttled to 1 MiB/s (measured
    at 1.05 MB/s by agent ceilings); epoch 1 reads it at the throttle with steady steps
    (input wait 38%, iowait 29%), epoch 2 from the page cache."""
    run = RunBuilder(run_id, nfs=False, steps_per_epoch=6)
    run.epoch(100, 6_000, shares=(0.38, 0.52, 0.0), disk_read=0.0, cpu_busy=0.3,
              cpu_iowait=0.29)  # fmt: skip
    run.epoch(60, 6_000, shares=(0.02, 0.88, 0.0), disk_read=0.0, cpu_busy=0.6)
    disk = disk_points(run, "sdb", DiskKind.DISK, [data_disk_rate, 0.0])
    return [*run.points(), *disk, *ceiling_points(run, "sdb", 1.05e6)]


def test_a_data_disk_at_its_ceiling_while_the_ranks_wait_is_storage_bound(make_store):
    store = make_store(throttled_run("throttled", MIB))
    (finding,) = [f for f in run_findings(store, "throttled") if f.rule == "storage_bound"]
    (host_epoch,) = finding.evidence["host_epochs"]
    assert host_epoch["epoch"] == 1
    assert host_epoch["at_ceiling"] is True
    assert host_epoch["disk_read_ceiling_percent"] == pytest.approx(99.9, abs=0.5)
    assert host_epoch["input_wait_percent"] == pytest.approx(38.0, abs=0.5)
    assert "data device read at its measured ceiling while CPUs waited on I/O (29% iowait)" in (
        finding.explanation
    )
    assert "the disk was at its limit" in finding.explanation
    assert "unstable" not in finding.explanation


def test_a_data_disk_well_under_its_ceiling_with_steady_steps_is_not(make_store):
    store = make_store(throttled_run("under", 0.3 * MIB))  # 30% of the ceiling, 0.3 MB/s
    assert [f for f in run_findings(store, "under") if f.rule == "storage_bound"] == []
