"""Per-epoch, per-host view (collector.analysis.epochs) over stored runs, values worked out
by hand."""

from __future__ import annotations

import numpy as np
import pytest

from collector.analysis.epochs import COLUMNS, build_report, epoch_rows, epoch_windows
from collector.analysis.run import run_model
from contract.point import Point
from contract.schema import Cpu, Event, Infiniband, InterfaceKind, Memory, RunState, Tag, Workload
from tests.support.memory_store import MemoryStore
from tests.support.run_builder import NS, T0_NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

GB = 1e9
MB = 1e6


def two_host_run() -> RunBuilder:
    """2 hosts x 2 ranks; n2's clock is 3.3 s ahead. Epoch 1 reads storage, epoch 2 is
    served from the page cache."""
    run = RunBuilder("r-two", hosts=("n1", "n2"), ranks_per_host=2, skew_s={"n2": 3.3}, cpus=8)
    run.epoch(
        100,
        6400,
        disk_read=300 * MB,
        disk_write=2 * MB,
        nfs_server_read=100 * MB,
        nfs_app_read=400 * MB,
        ib_rcv={"n1": 500 * MB, "n2": 400 * MB},
        ib_xmit=200 * MB,
        net_rx=10 * MB,
        net_tx=5 * MB,
        cache_growth=250 * MB,
        major_faults=10,
        cpu_busy=0.5,
        cpu_iowait=0.1,
        gpu_util=90,
    )
    run.epoch(50, 6400, nfs_app_read=400 * MB, ib_rcv=200 * MB, ib_xmit=200 * MB, cpu_busy=0.6)
    return run


def test_rows_per_host_and_epoch_with_exact_columns(make_store):
    store = make_store(two_host_run().points())
    rows = epoch_rows(store, "r-two")
    assert [(r["host"], r["epoch"]) for r in rows] == [
        ("n1", 1),
        ("n2", 1),
        ("*", 1),
        ("n1", 2),
        ("n2", 2),
        ("*", 2),
    ]
    assert all(list(r) == list(COLUMNS) for r in rows)
    n1 = rows[0]
    assert n1["start"] == "2023-11-14T22:13:20.000Z"
    assert n1["end"] == "2023-11-14T22:15:00.000Z"
    assert n1["seconds"] == 100.0
    assert n1["images"] == 12800  # 2 ranks x 6400
    assert n1["images_per_second"] == 128.0  # 12800 / 100 s
    # sda only (its partition sda1 and loop0 carry the same bytes and are not added)
    assert n1["disk_read_bytes"] == 30_000_000_000  # 300 MB/s x 100 s
    assert n1["disk_read_mbps"] == 300.0
    assert n1["disk_write_bytes"] == 200_000_000  # 2 MB/s x 100 s
    # /data only (/data-again is duplicate_of /data)
    assert n1["nfs_server_read_bytes"] == 10_000_000_000
    assert n1["nfs_server_read_mbps"] == 100.0
    assert n1["nfs_app_read_bytes"] == 40_000_000_000
    assert n1["nfs_cache_hit_ratio"] == 0.75  # 1 - 100/400
    assert n1["ib_rcv_bytes"] == 50_000_000_000
    assert n1["ib_xmit_bytes"] == 20_000_000_000
    assert (n1["ib_rcv_mbps"], n1["ib_xmit_mbps"]) == (500.0, 200.0)
    # eth0 only: lo's 1 GB/s is left out
    assert (n1["net_rx_bytes"], n1["net_tx_bytes"]) == (1_000_000_000, 500_000_000)
    assert n1["rx_minus_tx_mbps"] == 300.0  # IB: 500 - 200
    assert n1["page_cache_delta_bytes"] == 25_000_000_000  # 250 MB/s x 100 s
    assert n1["major_faults"] == 1000  # 10/s x 100 s
    assert n1["cpu_util_percent"] == 50.0
    assert n1["iowait_percent"] == 10.0
    # the gauge ramps from 90 to epoch 2's idle 0 between the samples at 99 s and 100 s;
    # that ramp is outside the window [0, 100]: the sample at 100 s already reads 0, so
    # the last second averages (90 + 0) / 2: (99 x 90 + 45) / 100
    assert n1["gpu_util_percent"] == pytest.approx(89.55)

    n2 = rows[1]
    # n2's window is on its own clock, 3.3 s ahead: same 100 s
    assert n2["start"] == "2023-11-14T22:13:23.300Z"
    assert n2["seconds"] == 100.0
    assert n2["ib_rcv_bytes"] == 40_000_000_000
    assert n2["rx_minus_tx_mbps"] == 200.0  # 400 - 200

    everyone = rows[2]
    assert everyone["host"] == "*"
    assert everyone["start"] == "2023-11-14T22:13:20.000Z"  # earliest host start
    assert everyone["end"] == "2023-11-14T22:15:03.300Z"  # latest host end (n2's clock)
    assert everyone["seconds"] == 100.0  # longest per-host span, not end - start (103.3)
    assert everyone["images"] == 25600
    assert everyone["images_per_second"] == 256.0
    assert everyone["disk_read_bytes"] == 60_000_000_000
    assert everyone["disk_read_mbps"] == 600.0
    assert everyone["ib_rcv_mbps"] == 900.0
    assert everyone["rx_minus_tx_mbps"] == 500.0  # 300 + 200
    assert everyone["nfs_cache_hit_ratio"] == 0.75
    assert everyone["cpu_util_percent"] == 50.0
    assert everyone["major_faults"] == 2000

    epoch2 = rows[3]
    assert epoch2["seconds"] == 50.0
    assert epoch2["images_per_second"] == 256.0  # 12800 / 50
    assert epoch2["disk_read_bytes"] == 0 and epoch2["nfs_server_read_bytes"] == 0
    assert epoch2["nfs_cache_hit_ratio"] == 1.0  # everything from the page cache
    assert epoch2["rx_minus_tx_mbps"] == 0.0
    assert epoch2["cpu_util_percent"] == 60.0
    assert rows[5]["images_per_second"] == 512.0  # 25600 / 50


def test_window_shorter_than_the_sampling_interval_gets_its_bytes(make_store):
    run = RunBuilder("r-short", sample_interval_s=10.0, pad_s=8.0)
    run.epoch(3, 300, disk_read=100 * MB)  # 3 s epoch, samples every 10 s
    run.epoch(4, 400, disk_read=50 * MB)
    rows = epoch_rows(make_store(run.points()), "r-short")
    # Samples at -8, 2 and 12 s. The disk reads 300 MB in 0..3 s and 200 MB in 3..7 s, so
    # the counter reads +0, +200 MB (2 s x 100) and +500 MB: interpolation sees 20 MB/s
    # over -8..2 and 30 MB/s over 2..12. C(0) = 160, C(3) = 230, C(7) = 350 MB:
    #   epoch 1 [0, 3]: 70 MB; epoch 2 [3, 7]: 120 MB. A window shorter than the sampling
    # interval gets the interpolated share, never zero; the exact split needs 1 s samples.
    assert rows[0]["disk_read_bytes"] == 70_000_000
    assert rows[2]["disk_read_bytes"] == 120_000_000
    assert rows[2]["disk_read_mbps"] == 30.0  # 120 MB / 4 s


def test_counter_reset_inside_an_epoch_counts_growth_from_zero(make_store):
    run = RunBuilder("r-reset")
    run.epoch(10, 100)
    points = run.event_points()
    host_tags = {Tag.HOST: "node1", Tag.DEVICE: "mlx5_0", Tag.PORT: "1"}
    # rcv counter: 1000, 2000, then the driver reloads: 500, 1500, ... every 5 s
    for t, value in [(0, 1000), (5, 2000), (6, 500), (10, 4500)]:
        points.append(
            Point(Infiniband.NAME, host_tags, {Infiniband.RCV_BYTES: value}, T0_NS + t * NS)
        )
    rows = epoch_rows(make_store(points), "r-reset")
    # 1000 (0..5) + 500 (reset: new value is growth) + 4000 (6..10)
    assert rows[0]["ib_rcv_bytes"] == 5500
    assert rows[0]["ib_xmit_bytes"] is None  # never sampled: no data, not zero


def test_without_infiniband_traffic_rx_minus_tx_uses_the_nics(make_store):
    run = RunBuilder("r-nic")
    run.epoch(20, 1000, net_rx=30 * MB, net_tx=10 * MB)
    rows = epoch_rows(make_store(run.points()), "r-nic")
    assert rows[0]["ib_rcv_bytes"] is None
    assert rows[0]["rx_minus_tx_mbps"] == 20.0


def test_a_host_whose_only_interface_is_virtual_counts_it(make_store):
    # a container or a network namespace: its uplink is a veth, not a physical NIC;
    # its traffic must not read as zero (hosts with a physical NIC count only those)
    run = RunBuilder("ns", nic="veth-h1", nic_kind=InterfaceKind.VIRTUAL)
    run.epoch(10, 1000, net_rx=3e6, net_tx=1e6)
    host_row = build_report(make_store(run.points()), "ns").rows[0]
    assert (host_row.net_rx_bytes, host_row.net_tx_bytes) == (30_000_000, 10_000_000)
    assert host_row.rx_minus_tx_mbps == 2.0


def test_missing_devices_are_none_not_zero(make_store):
    run = RunBuilder("r-bare", write_samples=False)
    run.epoch(10, 500)
    points = run.event_points()
    for t in (0, 10):
        fields = {Cpu.IDLE_SECONDS: 100.0 + 8 * t, Cpu.USER_SECONDS: 50.0}
        fields |= {f: 0.0 for f in (Cpu.NICE_SECONDS, Cpu.SYSTEM_SECONDS, Cpu.IOWAIT_SECONDS)}
        points.append(Point(Cpu.NAME, {Tag.HOST: "node1"}, fields, T0_NS + t * NS))
    row = epoch_rows(make_store(points), "r-bare")[0]
    assert row["images_per_second"] == 50.0
    assert row["cpu_util_percent"] == 0.0 and row["iowait_percent"] == 0.0
    for column in (
        "disk_read_bytes",
        "disk_read_mbps",
        "nfs_server_read_bytes",
        "nfs_cache_hit_ratio",
        "ib_rcv_mbps",
        "net_rx_bytes",
        "rx_minus_tx_mbps",
        "page_cache_delta_bytes",
        "gpu_util_percent",
    ):
        assert row[column] is None, column


def event(host: str, rank: int, t: float, kind: str, **fields) -> Point:
    tags = {Tag.HOST: host, Tag.RUN_ID: "r-hand", Tag.RANK: str(rank), Tag.FRAMEWORK: "mxnet"}
    return Point(Workload.NAME, tags, {Workload.EVENT: kind, **fields}, T0_NS + round(t * NS))


def test_window_is_earliest_start_to_latest_end_of_the_hosts_ranks(make_store):
    points = [
        event("a", 0, 0.0, Event.RUN_START, world_size=3, model="resnet50"),
        event("a", 0, 1.0, Event.EPOCH_START, epoch=1),
        event("a", 1, 1.5, Event.EPOCH_START, epoch=1),
        # images/s is the ranks' timed steps (contract.throughput), not images / window
        event("a", 0, 11.0, Event.EPOCH_END, epoch=1, images=500, timed_images=450,
              timed_seconds=9.0),  # 50 img/s
        event("a", 1, 12.0, Event.EPOCH_END, epoch=1, images=480, timed_images=480,
              timed_seconds=12.0),  # 40 img/s
        # host b: one rank, a 20 s span on its clock (far ahead of a's)
        event("b", 2, 100.0, Event.EPOCH_START, epoch=1),
        event("b", 2, 120.0, Event.EPOCH_END, epoch=1, images=700, timed_images=700,
              timed_seconds=20.0),  # 35 img/s
    ]  # fmt: skip
    report = build_report(make_store(points), "r-hand")
    a, b, everyone = report.rows
    assert (a.seconds, a.images, a.images_per_second) == (11.0, 980, 90.0)  # 50 + 40
    assert (b.seconds, b.images_per_second) == (20.0, 35.0)
    # all hosts: the longest host span, 20 s; images/s summed over the three ranks
    assert (everyone.seconds, everyone.images, everyone.images_per_second) == (20.0, 1680, 125.0)


def test_live_epoch_ends_at_the_latest_step_and_counts_step_images(make_store):
    points = [
        event("a", 0, 0.0, Event.EPOCH_START, epoch=1),
        event("a", 1, 0.0, Event.EPOCH_START, epoch=1),
        event("a", 0, 2.0, Event.STEP, epoch=1, step=1, images=64, seconds=2.0),
        event("a", 1, 2.5, Event.STEP, epoch=1, step=1, images=64, seconds=2.5),
        # a step without an epoch field belongs to its rank's latest epoch_start
        event("a", 0, 4.0, Event.STEP, step=2, images=64, seconds=2.0),
    ]
    windows = epoch_windows(run_model(make_store(points).events("r-hand")))
    assert len(windows) == 1
    window = windows[0]
    assert (window.complete, window.seconds, window.images) == (False, 4.0, 192.0)


def test_report_is_empty_for_an_unknown_run(make_store):
    store = make_store(two_host_run().points())
    assert epoch_rows(store, "no-such-run") == []


def test_memory_store_reads_boundary_samples(make_store):
    """The ReadStore contract the arithmetic relies on: one sample either side."""
    store = make_store(
        [
            Point(Memory.NAME, {Tag.HOST: "h"}, {Memory.CACHED_BYTES: float(t)}, t * NS)
            for t in range(10)
        ]
    )
    (info,) = store.list_series(Memory.NAME, Memory.CACHED_BYTES)
    (data,) = store.read_series([info], 3 * NS + 1, 5 * NS + 1)
    assert np.asarray(data.values).tolist() == [3.0, 4.0, 5.0, 6.0]


class KindsRecordingStore(MemoryStore):
    """Records which event kinds were asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[str, ...] | None] = []

    def events(self, run_id, since_ns=None, kinds=None):
        self.asked.append(kinds)
        return super().events(run_id, since_ns, kinds)


def test_a_finished_run_report_never_reads_step_events():
    store = KindsRecordingStore()
    store.write(two_host_run().points())
    build_report(store, "r-two")
    assert Event.STEP not in {kind for kinds in store.asked for kind in kinds or ("all",)}
    assert None not in store.asked


def test_an_open_epoch_reads_the_steps_since_it_started():
    run = RunBuilder("r-open", state=RunState.LIVE)
    run.epoch(10, 400)
    run.epoch(10, 400)
    store = KindsRecordingStore()
    # epoch 2 is still running: its epoch_end has not arrived
    store.write([p for p in run.points() if p.time_ns < T0_NS + 20 * NS])
    rows = epoch_rows(store, "r-open")
    assert (Event.STEP,) in store.asked
    # epoch 2: steps at 12.5, 15, 17.5 s (100 images each) so far; ends at the last one
    assert (rows[2]["epoch"], rows[2]["images"], rows[2]["seconds"]) == (2, 300, 7.5)
