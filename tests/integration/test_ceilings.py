"""A node's ceilings (``agent ceilings``): link rates parsed from the captured sysfs trees,
a real disk measured with direct I/O, a real JPEG decode rate, the file the ``ceilings``
sampler reports at every tick, and the per-epoch share of the disk's ceiling the report
computes from those samples."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from agent import ceilings
from agent.samplers.ceilings import CeilingsSampler
from collector.analysis.epochs import build_report
from contract.point import Point
from contract.schema import Ceiling, Tag
from tests.conftest import REPO_ROOT
from tests.support.run_builder import NS, T0_NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

FIXTURES = REPO_ROOT.parent / "shared" / "fixtures" / "roots"
GBIT = 1e9 / 8


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100 Gb/sec (4X EDR)\n", 100 * GBIT),
        ("40 Gb/sec (4X QDR)\n", 40 * GBIT),
        ("25 Gb/sec (1X EDR)", 25 * GBIT),
        ("0 Gb/sec (4X SDR)", None),  # a port with no link
        ("garbage", None),
    ],
)
def test_parse_ib_rate(text, expected):
    assert ceilings.parse_ib_rate(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"), [("10000\n", 1.25e9), ("-1\n", None), ("", None), ("25000", 3.125e9)]
)
def test_parse_net_speed(text, expected):
    assert ceilings.parse_net_speed(text) == expected


def test_infiniband_ports_of_a_captured_host():
    root = FIXTURES / "procfs-mlx-hfi" / "sys"
    if not root.is_dir():
        pytest.skip("the shared fixtures are not beside this checkout")
    found = {m.device: m.value for m in ceilings.link_ceilings(root, 0.0)}
    assert found == {
        "hfi1_0/1": 100 * GBIT,
        "mlx4_0/1": 40 * GBIT,
        "mlx4_0/2": 40 * GBIT,
        "mlx5_0/1": 25 * GBIT,
    }


def test_pcie_rate_per_direction():
    assert ceilings.pcie_bytes_per_second(3, 16) == pytest.approx(15.75e9, rel=1e-3)
    assert ceilings.pcie_bytes_per_second(4, 16) == pytest.approx(31.5e9, rel=1e-3)
    assert ceilings.pcie_bytes_per_second(9, 16) is None


def test_a_real_disk_and_a_real_decoder_measured(tmp_path):
    found = ceilings.disk_ceilings(tmp_path, 16, 2.0, 123.0)
    sequential, scattered = found
    assert sequential.field == str(Ceiling.DISK_SEQUENTIAL_READ)
    assert scattered.field == str(Ceiling.DISK_RANDOM_READ)
    assert sequential.device == ceilings.block_device_of(tmp_path)
    assert sequential.method in ("o_direct", "fadvise") and sequential.value > 1e6
    assert scattered.value > 1e5
    assert list(tmp_path.iterdir()) == []  # the scratch file is gone
    decode = ceilings.jpeg_decode_ceiling(0.3, 123.0)
    assert decode is not None and decode.value > 1 and decode.device == "cpu"


def test_the_command_keeps_a_file_the_sampler_reports(tmp_path, repo_env):
    kept = tmp_path / "state" / "ceilings.json"
    result = subprocess.run(
        [sys.executable, "-m", "agent", "ceilings", "--data-dir", str(tmp_path),
         "--disk-mib", "8", "--disk-seconds", "1", "--cpu-seconds", "0.2", "--out", str(kept)],
        capture_output=True, text=True, env=repo_env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "disk_sequential_read_bytes_per_second" in result.stdout
    measured = ceilings.from_json(kept.read_text())
    sampler = CeilingsSampler(None, kept)
    assert sampler.available()
    points = sampler.sample(5 * NS)
    disk = points[0]  # both disk ceilings on one point: one series per label set
    assert disk.measurement == Ceiling.NAME and disk.time_ns == 5 * NS
    assert disk.fields[str(Ceiling.DISK_SEQUENTIAL_READ)] == measured[0].value
    assert disk.fields[str(Ceiling.DISK_RANDOM_READ)] == measured[1].value
    assert disk.tags[Tag.METHOD] == measured[0].method
    assert len({tuple(sorted(p.tags.items())) for p in points}) == len(points)
    # a damaged file: logged, the last good ceilings kept
    kept.write_text("{not json")
    assert sampler.sample(6 * NS) == points[:0] + sampler.sample(6 * NS)
    assert len(sampler.sample(6 * NS)) == len(points)
    with pytest.raises(ValueError, match="ceiling 1"):
        ceilings.from_json(json.dumps({"ceilings": [{"field": "x"}]}))


def test_a_file_that_cannot_be_written_is_named_before_anything_is_measured(tmp_path, repo_env):
    """(issue 45, item 9) Its folder is a plain file here, as root cannot be refused a
    permission: the command stops at once, naming the path and the way out."""
    (tmp_path / "state").write_text("not a folder")
    out = tmp_path / "state" / "ceilings.json"
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "agent", "ceilings", "--data-dir", str(tmp_path), "--out", str(out)],
        capture_output=True, text=True, env=repo_env, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    reason = f"{tmp_path / 'state'} is not a folder."
    assert f"cannot write the ceilings file {out}: {reason}" in result.stderr
    assert "give --out FILE (or EPOCHSCOPE_CEILINGS_FILE=FILE)" in result.stderr
    assert "ceilings_file (agent.toml)" in result.stderr
    assert result.stdout == ""  # nothing measured
    assert time.monotonic() - started < 30
    with pytest.raises(OSError, match=f"cannot write the ceilings file {out}"):
        ceilings.keep([], out)


def test_a_file_measured_while_the_agent_runs_is_reported_from_the_next_tick(tmp_path):
    kept = tmp_path / "ceilings.json"
    sampler = CeilingsSampler(None, kept)
    assert sampler.available() and sampler.sample(1) == []
    measured = ceilings.link_ceilings(tmp_path, 7.0)  # (none here) and one of our own
    measured.append(ceilings.Measured(str(Ceiling.LINK), "ib0", "net", "sysfs", 1.25e9, 7.0))
    kept.write_text(ceilings.to_json(measured))
    (point,) = sampler.sample(2)
    assert point.fields == {"link_bytes_per_second": 1.25e9, "measured_at_seconds": 7.0}


def test_the_report_states_disk_reads_as_a_share_of_the_ceiling(make_store):
    run = RunBuilder("ceil", warmup_steps=2)
    run.epoch(20, 400, disk_read=40e6)  # 40 MB/s
    run.epoch(20, 400, disk_read=0.0)
    ceiling = [
        Point(
            Ceiling.NAME,
            {Tag.HOST: host, Tag.DEVICE: "sda", Tag.KIND: "disk", Tag.METHOD: "o_direct"},
            {str(Ceiling.DISK_SEQUENTIAL_READ): 160e6, str(Ceiling.MEASURED_AT): 1.0},
            T0_NS + second * NS,
        )
        for host in run.hosts
        for second in range(-5, 60)
    ]
    store = make_store([*run.points(), *ceiling])
    rows = {(r.host, r.epoch): r for r in build_report(store, "ceil").rows}
    host = run.hosts[0]
    assert rows[(host, 1)].disk_read_mbps == pytest.approx(40.0, rel=0.02)
    assert rows[(host, 1)].disk_read_ceiling_percent == pytest.approx(25.0, rel=0.02)
    assert rows[(host, 2)].disk_read_ceiling_percent == 0.0


def test_a_run_without_ceilings_has_no_share(make_store):
    run = RunBuilder("bare", warmup_steps=2)
    run.epoch(20, 400, disk_read=40e6)
    (row, *_) = build_report(make_store(run.points()), "bare").rows
    assert row.disk_read_ceiling_percent is None


def ceiling_points(hosts, bytes_per_second: float) -> list[Point]:
    return [
        Point(
            Ceiling.NAME,
            {Tag.HOST: host, Tag.DEVICE: "sda", Tag.KIND: "disk", Tag.METHOD: "o_direct"},
            {str(Ceiling.DISK_SEQUENTIAL_READ): bytes_per_second, str(Ceiling.MEASURED_AT): 1.0},
            T0_NS + second * NS,
        )
        for host in hosts
        for second in range(-5, 200, 5)
    ]


@pytest.mark.parametrize(
    ("ceiling", "share", "verdict"),
    [(200e6, 90, "the disk was at its limit"), (1000e6, 18, "under the 80% that would mean")],
)
def test_the_storage_bound_finding_states_reads_against_the_ceiling(
    make_store, ceiling, share, verdict
):
    from collector.findings.engine import run_findings

    run = RunBuilder("bound", steps_per_epoch=6)
    run.epoch(100, 6_000, step_pattern=(1, 3), disk_read=180e6, cpu_busy=0.3, cpu_iowait=0.2)
    run.epoch(60, 6_000, cpu_busy=0.6)
    store = make_store([*run.points(), *ceiling_points(run.hosts, ceiling)])
    (finding,) = [f for f in run_findings(store, "bound") if f.rule == "storage_bound"]
    assert finding.evidence["host_epochs"][0]["disk_read_ceiling_percent"] == share
    assert f"That is {share}% of {run.hosts[0]}'s measured disk read ceiling" in (
        finding.explanation
    )
    assert verdict in finding.explanation


def fabric_ceiling_points(hosts, device: str, kind: str, method: str, field, value: float):
    return [
        Point(
            Ceiling.NAME,
            {Tag.HOST: host, Tag.DEVICE: device, Tag.KIND: kind, Tag.METHOD: method},
            {str(field): value, str(Ceiling.MEASURED_AT): 1.0},
            T0_NS + second * NS,
        )
        for host in hosts
        for second in range(-5, 200, 5)
    ]


def test_the_report_states_the_fabric_against_the_peer_throughput_else_the_link(make_store):
    """eth0 moves 50 MB/s in and 20 MB/s out: the busier direction is judged. A measured
    peer throughput (what TCP gets over the path) is preferred to the link's sysfs rate;
    without one the link rate is the ceiling; with neither there is no share, and the host
    counts on neither side of the * row's."""
    run = RunBuilder("fab", hosts=("node1", "node2", "node3"), warmup_steps=2)
    run.epoch(20, 400, net_rx=50e6, net_tx=20e6)
    link = fabric_ceiling_points(("node1", "node2"), "eth0", "net", "sysfs", Ceiling.LINK, 1.25e9)
    measured_peer = fabric_ceiling_points(
        ("node1",), "node2:5291", "net", "tcp", Ceiling.PEER_THROUGHPUT, 100e6
    )
    # an InfiniBand port that moved nothing: the fabric is the NICs, its rate not used
    ib = fabric_ceiling_points(("node1",), "mlx5_0/1", "infiniband", "sysfs", Ceiling.LINK, 12.5e9)
    store = make_store([*run.points(), *link, *measured_peer, *ib])
    rows = {r.host: r for r in build_report(store, "fab").rows}
    assert rows["node1"].fabric_ceiling_mbps == pytest.approx(100.0)
    assert rows["node1"].fabric_ceiling_percent == pytest.approx(50.0, rel=0.02)
    assert rows["node2"].fabric_ceiling_mbps == pytest.approx(1250.0)
    assert rows["node2"].fabric_ceiling_percent == pytest.approx(4.0, rel=0.02)
    assert rows["node3"].fabric_ceiling_percent is None  # it measured none
    # the * row: the busier directions of the hosts with a ceiling over their sum
    assert rows["*"].fabric_ceiling_mbps == pytest.approx(1350.0)
    assert rows["*"].fabric_ceiling_percent == pytest.approx(100 * 100 / 1350, rel=0.02)
    (bare,) = build_report(make_store(run.points()), "fab").rows[:1]
    assert bare.fabric_ceiling_percent is None and bare.fabric_ceiling_mbps is None


def test_an_infiniband_fabric_is_judged_against_its_ports(make_store):
    run = RunBuilder("ibfab", warmup_steps=2)
    run.epoch(20, 400, ib_rcv=3e9, ib_xmit=1e9, net_rx=1e6, net_tx=1e6)
    ib = fabric_ceiling_points(run.hosts, "mlx5_0/1", "infiniband", "sysfs", Ceiling.LINK, 12.5e9)
    (row, *_) = build_report(make_store([*run.points(), *ib]), "ibfab").rows
    assert row.fabric_ceiling_mbps == pytest.approx(12_500.0)
    assert row.fabric_ceiling_percent == pytest.approx(24.0, rel=0.02)


def test_each_ceiling_share_prints_the_same_in_the_table_json_and_dashboard(make_store):
    """The fabric's and the decode ceiling's shares are computed once (the report's row);
    the CLI's table, its JSON (what the read API serves) and the dashboard's epoch table
    each write that value."""
    from contract.schema import Workload
    from tests.support.views import assert_views_agree
    from tests.unit.test_decode_ceiling import decode_points

    start = {Workload.CPUS_ALLOWED: "0-3", Workload.CPU_QUOTA_CPUS: 2.0}
    run = RunBuilder("views", data_format="jpeg", warmup_steps=2, run_start_fields=start)
    run.epoch(20, 400, net_rx=50e6, net_tx=20e6)
    link = fabric_ceiling_points(run.hosts, "eth0", "net", "sysfs", Ceiling.LINK, 1.25e9)
    store = make_store([*run.points(), *decode_points(run.hosts, 40.0), *link])
    assert_views_agree(store, "views", ["decode_ceiling_percent", "fabric_ceiling_percent"])
