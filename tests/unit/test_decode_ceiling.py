"""The decode ceiling (issue 29): a JPEG run's images/s as a share of the host's measured
decode rate per core times the cores its ranks may use, in the per-epoch report and in the
input_wait finding, on scenario runs stored through the write path. The rate per core
measured for real under a cgroup CPU quota is tests/integration/test_ceilings_cgroups.py."""

from __future__ import annotations

import json

import pytest

from collector.analysis.decode import host_cores
from collector.analysis.epochs import build_report
from collector.arguments import build_parser
from collector.findings.engine import run_findings
from collector.findings.input import decode_verdict
from collector.views.printers import render
from contract.point import Point
from contract.schema import Ceiling, Tag, Workload
from tests.support.run_builder import NS, T0_NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture


def decode_points(hosts, per_core: float) -> list[Point]:
    """The ``ceiling`` sampler's point of a host with a measured decode rate per core."""
    return [
        Point(
            Ceiling.NAME,
            {Tag.HOST: host, Tag.DEVICE: "cpu", Tag.KIND: "cpu", Tag.METHOD: "pillow"},
            {str(Ceiling.JPEG_DECODE): per_core, str(Ceiling.MEASURED_AT): 1.0},
            T0_NS + second * NS,
        )
        for host in hosts
        for second in range(-5, 400, 5)
    ]


def jpeg_run(run_id: str, wait: float, cpus: str = "0-3", quota: float | None = None,
             data_format: str = "jpeg", cpu_busy: float = 0.3) -> RunBuilder:  # fmt: skip
    start: dict[str, object] = {Workload.CPUS_ALLOWED: cpus}
    if quota is not None:
        start[Workload.CPU_QUOTA_CPUS] = quota
    run = RunBuilder(run_id, steps_per_epoch=5, data_format=data_format, run_start_fields=start)
    for _ in range(3):
        run.epoch(100, 6400, shares=(wait, 0.9 - wait, 0.0), cpu_busy=cpu_busy)
    return run


def test_cores_are_the_allowed_cpus_capped_by_the_quota():
    assert host_cores(["0-3", "2-5"], [None, None]) == (
        6.0,
        "CPUs 0-3,2-5 allowed (sched_getaffinity)",
    )
    assert host_cores(["0-3"], [2.0]) == (2.0, "a cgroup CPU quota of 2 CPUs")
    assert host_cores(["0-1"], [4.0])[0] == 2.0  # a quota above the CPUs caps nothing
    assert host_cores(["0-3", None], [1.0, 1.0]) is None


def test_the_report_states_images_per_second_against_the_decode_ceiling(make_store):
    run = jpeg_run("jpg", 0.3, cpus="0-3", quota=2.0)  # 4 CPUs allowed, a quota of 2
    store = make_store([*run.points(), *decode_points(run.hosts, 40.0)])
    rows = build_report(store, "jpg").rows
    for row in rows:
        # a ceiling of 40 pictures/s per core x 2 cores
        assert row.images_per_second is not None
        assert row.decode_ceiling_percent == pytest.approx(
            100 * row.images_per_second / 80.0, abs=0.05
        )
    table = render(build_parser().parse_args(["report", "jpg", "--format", "json"]), store)
    assert json.loads(table)["rows"][0]["decode_ceiling_percent"] == rows[0].decode_ceiling_percent


@pytest.mark.parametrize(
    ("data_format", "cpus", "ceiling"),
    [("tfrecord", "0-3", True), ("jpeg", None, True), ("jpeg", "0-3", False)],
    ids=["records decode elsewhere", "cpus not sent", "no decode rate measured"],
)
def test_no_decode_share_without_its_parts(make_store, data_format, cpus, ceiling):
    run = RunBuilder("bare", steps_per_epoch=5, data_format=data_format)
    if cpus is not None:
        run.run_start_fields[Workload.CPUS_ALLOWED] = cpus
    run.epoch(100, 6400, shares=(0.3, 0.6, 0.0))
    points = [*run.points(), *(decode_points(run.hosts, 40.0) if ceiling else [])]
    assert all(
        r.decode_ceiling_percent is None for r in build_report(make_store(points), "bare").rows
    )


def input_wait_of(store, run_id: str):
    (finding,) = [f for f in run_findings(store, run_id) if f.rule == "input_wait"]
    return finding


def test_input_decoding_at_the_ceiling_of_a_quota_is_cpu_bound_input(make_store):
    """A quota of 2 of the host's 8 CPUs: the host's CPUs are 30% busy, which alone reads
    "undetermined"; the pictures/s at 95% of what 2 cores decode read CPU-bound input."""
    run = jpeg_run("quota", 0.45, cpus="0-7", quota=2.0)
    rate = build_report(make_store(run.points()), "quota").rows[-1].images_per_second
    per_core = rate / 0.95 / 2
    store = make_store([*run.points(), *decode_points(run.hosts, per_core)])
    finding = input_wait_of(store, "quota")
    assert finding.evidence["cause"] == "decode"
    assert finding.evidence["decode_ceiling_percent"] == pytest.approx(95.0, abs=0.2)
    assert finding.evidence["decode_cores"] == 2.0
    assert "Input decoding at 95% of the measured decode rate of 2 cores: CPU-bound input." in (
        finding.explanation
    )


def test_input_decoding_far_under_the_ceiling_is_not_called_decode_bound(make_store):
    run = jpeg_run("slow", 0.45, cpus="0-7", quota=2.0)
    rate = build_report(make_store(run.points()), "slow").rows[-1].images_per_second
    store = make_store([*run.points(), *decode_points(run.hosts, rate / 0.30 / 2)])
    finding = input_wait_of(store, "slow")
    assert finding.evidence["cause"] == "undetermined"  # CPUs 30% busy, decoding at 30%
    assert "Input decoding at 30% of the measured decode rate of 2 cores, under the 60%" in (
        finding.explanation
    )


def test_input_past_twice_the_decode_ceiling_was_not_decoded_there(make_store):
    """Pictures/s at 4x what the quota's 2 cores decode: decoded beforehand (as the
    scenario's pre-decoded tensors), never CPU-bound input."""
    run = jpeg_run("cached", 0.45, cpus="0-7", quota=2.0)
    rate = build_report(make_store(run.points()), "cached").rows[-1].images_per_second
    store = make_store([*run.points(), *decode_points(run.hosts, rate / 4.0 / 2)])
    finding = input_wait_of(store, "cached")
    assert finding.evidence["cause"] == "undetermined"  # CPUs 30% busy, not decoding
    assert "CPU-bound input" not in finding.explanation
    assert "Input at 400% of the measured decode rate of 2 cores, past 200%: the pictures" in (
        finding.explanation
    )


@pytest.mark.parametrize(
    ("percent", "verdict"), [(59.9, "under"), (60.0, "bound"), (199.9, "bound"), (200.0, "past")]
)
def test_the_decode_verdict_bounds(percent, verdict):
    assert decode_verdict(percent) == verdict


def throttled(share: float, holds: str = "loaders") -> dict[str, object]:
    """An epoch_end's quota group fields (workloads.record.cputime.throttling_fields)."""
    return {
        Workload.CPU_THROTTLED_SHARE: share,
        Workload.THROTTLED_QUOTA_CPUS: 0.25,
        Workload.THROTTLED_GROUP_HOLDS: holds,
    }


def quota_run(run_id: str, share: float, data_format: str = "jpeg") -> RunBuilder:
    """A JPEG run whose loaders' quota group was throttled ``share`` of its periods, on a
    host whose CPUs were 30% busy and without a measured decode rate: as the findings
    bench's decode-quota case (its loader workers in a 0.25-CPU group of their own)."""
    run = RunBuilder(run_id, steps_per_epoch=5, data_format=data_format,
                     run_start_fields={Workload.CPUS_ALLOWED: "0-1"})  # fmt: skip
    for _ in range(3):
        run.epoch(100, 6400, shares=(0.7, 0.2, 0.0), cpu_busy=0.3, end_fields=throttled(share))
    return run


def test_loaders_held_to_their_quota_are_decode_bound(make_store):
    finding = input_wait_of(make_store(quota_run("held", 0.93).points()), "held")
    assert finding.evidence["cause"] == "decode"
    assert finding.evidence["cpu_throttled_share"] == 0.93
    assert finding.evidence["throttled_quota_cpus"] == 0.25
    assert finding.evidence["throttled_group_holds"] == "loaders"
    assert (
        "The loader workers' cgroup CPU quota of 0.25 CPUs ran out in 93% of its scheduling"
        " periods (cpu.stat): they wanted more CPU than the quota gives" in finding.explanation
    )


def test_a_quota_seldom_reached_or_data_not_decoded_is_not_decode_bound(make_store):
    seldom = input_wait_of(make_store(quota_run("seldom", 0.1).points()), "seldom")
    assert seldom.evidence["cause"] == "undetermined"
    assert "ran out in 10% of its scheduling periods (cpu.stat), under the 50% of a limit" in (
        seldom.explanation
    )
    tensors = input_wait_of(make_store(quota_run("tensors", 0.93, "synthetic").points()), "tensors")
    assert tensors.evidence["cause"] == "undetermined"
