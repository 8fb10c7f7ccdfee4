"""The disk sampler against captured diskstats files, sysfs trees and the live host."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import psutil
import pytest

from agent.samplers import make_sampler
from agent.samplers.base import Roots
from agent.samplers.disk import (
    DiskRow,
    DiskSampler,
    kind_from_name,
    kind_from_sysfs,
    node_totals,
    parse_diskstats,
)
from contract.point import encode_line
from contract.schema import Disk, Kind
from tests.conftest import FIXTURE_ROOTS, fixture_root


def assert_schema_types(fields: dict) -> None:
    specs = Disk.fields()
    for name, value in fields.items():
        assert name in specs, name
        # Counts and bytes are integers; seconds (ms / 1000) and gauges are floats.
        integer = specs[name].kind is Kind.COUNTER and specs[name].unit != "seconds"
        assert type(value) is (int if integer else float), (name, value)
        assert value >= 0


def exact_and_seconds(fields: dict) -> tuple[dict, dict]:
    """Integer fields (compared exactly) and seconds (compared to the nanosecond)."""
    seconds = {name: value for name, value in fields.items() if name.endswith("_seconds")}
    rest = {name: value for name, value in fields.items() if name not in seconds}
    return rest, seconds


def assert_fields(fields: dict, expected: dict) -> None:
    got_exact, got_seconds = exact_and_seconds(fields)
    want_exact, want_seconds = exact_and_seconds(expected)
    assert got_exact == want_exact
    assert got_seconds == pytest.approx(want_seconds, abs=1e-9)


def sample_tree(name: str) -> dict[str, tuple[dict, dict]]:
    root = fixture_root(name)
    sampler = DiskSampler(Roots(proc=root / "proc", sys=root / "sys"))
    assert sampler.available()
    points = sampler.sample(7)
    by_device = {point.tags["device"]: (point.tags, point.fields) for point in points}
    assert len(by_device) == len(points)  # one point per device
    for point in points:
        assert point.measurement == "disk" and point.time_ns == 7
        assert_schema_types(point.fields)
    return by_device


# --- procfs-mlx-hfi: 52 rows of 14, 18 and 20 fields, no sys/class/block captured --------

MLX_DISKS = ["sda", "mmcblk0", "fd0", "vda", "sr0", "nvme0n1", "sdb", "sdc"]
MLX_PARTITIONS = [
    "sda1",
    "sda2",
    "sda3",
    "sda4",
    "mmcblk0p1",
    "mmcblk0p2",
    "vda1",
    "vda2",
    "nvme0n1p1",
    "nvme0n1p2",
    "sdb1",
    "sdb2",
    "sdc1",
    "sdc2",
]
MLX_VIRTUAL = [f"ram{n}" for n in range(16)] + [f"loop{n}" for n in range(8)]
MLX_VIRTUAL += [f"dm-{n}" for n in range(6)]


def test_mlx_every_device_and_its_kind():
    by_device = sample_tree("procfs-mlx-hfi")
    kinds = {device: tags["kind"] for device, (tags, _) in by_device.items()}
    expected = {d: "disk" for d in MLX_DISKS}
    expected |= {d: "partition" for d in MLX_PARTITIONS}
    expected |= {d: "virtual" for d in MLX_VIRTUAL}
    assert kinds == expected  # 8 + 14 + 30 = 52 rows


def test_mlx_rows_of_each_width():
    by_device = sample_tree("procfs-mlx-hfi")
    # 14 fields: 8 0 sda 25354637 34367663 1003346126 18492372 28444756 11134226
    #            505697032 63877960 0 9653880 82621804
    assert_fields(
        by_device["sda"][1],
        {
            "reads": 25354637,
            "reads_merged": 34367663,
            "read_bytes": 513713216512,  # 1003346126 sectors x 512
            "read_time_seconds": 18492.372,  # ms / 1000
            "writes": 28444756,
            "writes_merged": 11134226,
            "write_bytes": 258916880384,  # 505697032 sectors x 512
            "write_time_seconds": 63877.960,
            "in_flight": 0.0,
            "io_time_seconds": 9653.880,
            "io_time_weighted_seconds": 82621.804,
        },
    )
    # 18 fields (discards): 8 0 sdb 326552 841 9657779 84 41822 2895 1972905 5007 0
    #                       60730 67070 68851 0 1925173784 11130
    assert_fields(
        by_device["sdb"][1],
        {
            "reads": 326552,
            "reads_merged": 841,
            "read_bytes": 4944782848,  # 9657779 x 512
            "read_time_seconds": 0.084,
            "writes": 41822,
            "writes_merged": 2895,
            "write_bytes": 1010127360,  # 1972905 x 512
            "write_time_seconds": 5.007,
            "in_flight": 0.0,
            "io_time_seconds": 60.730,
            "io_time_weighted_seconds": 67.070,
            "discards": 68851,
            "discards_merged": 0,
            "discard_bytes": 985688977408,  # 1925173784 sectors x 512
            "discard_time_seconds": 11.130,
        },
    )
    # 20 fields (flushes): 8 0 sdc 14202 71 579164 21861 2995 1589 180500 40875 0 11628
    #                      55200 0 0 0 0 127 182
    assert_fields(
        by_device["sdc"][1],
        {
            "reads": 14202,
            "reads_merged": 71,
            "read_bytes": 296531968,  # 579164 x 512
            "read_time_seconds": 21.861,
            "writes": 2995,
            "writes_merged": 1589,
            "write_bytes": 92416000,  # 180500 x 512
            "write_time_seconds": 40.875,
            "in_flight": 0.0,
            "io_time_seconds": 11.628,
            "io_time_weighted_seconds": 55.200,
            "discards": 0,
            "discards_merged": 0,
            "discard_bytes": 0,
            "discard_time_seconds": 0.0,
            "flushes": 127,
            "flush_time_seconds": 0.182,
        },
    )
    # 259 1 nvme0n1p1 1140 0 9370 16 1 0 1 0 0 16 16
    assert by_device["nvme0n1p1"][0] == {"device": "nvme0n1p1", "kind": "partition"}
    assert_fields(
        by_device["nvme0n1p1"][1],
        {
            "reads": 1140,
            "reads_merged": 0,
            "read_bytes": 4797440,  # 9370 x 512
            "read_time_seconds": 0.016,
            "writes": 1,
            "writes_merged": 0,
            "write_bytes": 512,  # 1 x 512
            "write_time_seconds": 0.0,
            "in_flight": 0.0,
            "io_time_seconds": 0.016,
            "io_time_weighted_seconds": 0.016,
        },
    )
    # 252 0 dm-0 59910002 0 1003337218 ...: LVM on sda4, virtual
    assert by_device["dm-0"][0]["kind"] == "virtual"
    assert by_device["dm-0"][1]["reads"] == 59910002


def test_mlx_node_totals_count_disks_only():
    text = (fixture_root("procfs-mlx-hfi") / "proc" / "diskstats").read_text()
    rows = parse_diskstats(text)
    assert len(rows) == 52
    # The 8 disks, in file order: sda, mmcblk0, fd0, vda, sr0, nvme0n1, sdb, sdc.
    assert_fields(
        node_totals(rows),
        {
            # 25354637 + 192 + 2 + 1775784 + 0 + 47114 + 326552 + 14202
            "reads": 27518483,
            "reads_merged": 34383968,
            # (1003346126 + 1560 + 16 + 32670882 + 0 + 4643973 + 9657779 + 579164) x 512
            # = 1050899500 x 512
            "read_bytes": 538060544000,
            # (18492372 + 156 + 80 + 8655768 + 0 + 21650 + 84 + 21861) ms
            "read_time_seconds": 27191.971,
            # 28444756 + 0 + 0 + 6038856 + 0 + 1078320 + 41822 + 2995
            "writes": 35606749,
            "writes_merged": 31894516,
            # (505697032 + 0 + 0 + 213637440 + 0 + 39451633 + 1972905 + 180500) x 512
            # = 760939510 x 512
            "write_bytes": 389601029120,
            # (63877960 + 0 + 0 + 2069221364 + 0 + 1011053 + 5007 + 40875) ms
            "write_time_seconds": 2134156.259,
            # (9653880 + 136 + 80 + 41614592 + 0 + 222766 + 60730 + 11628) ms
            "io_time_seconds": 51563.812,
            "io_time_weighted_seconds": 2161649.084,
            "in_flight": 0.0,
            # Only sdb (18 fields) and sdc (20) have discards; only sdc has flushes.
            "discards": 68851,
            "discards_merged": 0,
            "discard_bytes": 1925173784 * 512,
            "discard_time_seconds": 11.130,
            "flushes": 127,
            "flush_time_seconds": 0.182,
        },
    )


# --- pcp-bigsys-480cpu: 107 devices, 14-field rows -----------------------------------------

BIGSYS_SD = (
    ["sda"]
    + [f"sd{c}" for c in "bcdefghijklmnopqrstuvwxyz"]
    + [f"sda{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    + [f"sdb{c}" for c in "abcdefghijklmnopqr"]
)


def test_bigsys_every_one_of_107_names_is_classified_right():
    by_device = sample_tree("pcp-bigsys-480cpu")
    expected = {f"ram{n}": "virtual" for n in range(16)}  # RAM disks
    expected |= {f"loop{n}": "virtual" for n in range(8)}  # loop devices
    expected |= {f"dm-{n}": "virtual" for n in range(13)}  # device mapper (multipath)
    expected |= {name: "disk" for name in BIGSYS_SD}  # sda..sdz, sdaa..sdaz, sdba..sdbr
    assert len(BIGSYS_SD) == 70 and len(expected) == 107
    assert {device: tags["kind"] for device, (tags, _) in by_device.items()} == expected
    # "sdaa" and "sdba" are whole disks, not partitions of "sda"/"sdb".
    assert kind_from_name("sdaa") == kind_from_name("sdbr") == "disk"


def test_bigsys_node_totals():
    text = (fixture_root("pcp-bigsys-480cpu") / "proc" / "diskstats").read_text()
    rows = parse_diskstats(text)
    assert len(rows) == 107
    # Summed independently of this code over the 70 sd* rows:
    #   awk '$3 ~ /^sd[a-z]+$/ {r+=$4; rs+=$6; rt+=$7; w+=$8; ws+=$10; wt+=$11;
    #        f+=$12; io+=$13}' diskstats
    assert_fields(
        node_totals(rows),
        {
            "reads": 119620,
            "reads_merged": 70,
            "read_bytes": 829596672,  # 1620306 sectors x 512
            "read_time_seconds": 49.642,
            "writes": 9814,
            "writes_merged": 0,
            "write_bytes": 386127872,  # 754156 sectors x 512
            "write_time_seconds": 28.058,
            "io_time_seconds": 50.167,
            "io_time_weighted_seconds": 77.657,
            "in_flight": 0.0,
        },
    )
    # The multipath dm devices carry the same I/O again: dm-0 alone read 39567 times.
    dm0 = next(row for row in rows if row.device == "dm-0")
    assert dm0.reads == 39567


def test_bigsys_single_rows():
    by_device = sample_tree("pcp-bigsys-480cpu")
    # 8 16 sdb 25964 1 807513 19646 9777 0 753466 28050 0 20388 47691
    assert_fields(
        by_device["sdb"][1],
        {
            "reads": 25964,
            "reads_merged": 1,
            "read_bytes": 413446656,  # 807513 x 512
            "read_time_seconds": 19.646,
            "writes": 9777,
            "writes_merged": 0,
            "write_bytes": 385774592,  # 753466 x 512
            "write_time_seconds": 28.050,
            "in_flight": 0.0,
            "io_time_seconds": 20.388,
            "io_time_weighted_seconds": 47.691,
        },
    )
    # 68 80 sdbr 1088 1 8712 423 0 0 0 0 0 423 423
    assert by_device["sdbr"][1]["read_bytes"] == 4460544  # 8712 x 512


# --- parsing details ----------------------------------------------------------------------


def test_every_column_lands_in_its_field():
    # Distinct numbers in every column pin the field positions of iostats.rst.
    [row] = parse_diskstats(
        "   8       0 sdz 1000 2 3 4000 5 6 7 8000 9 10000 11000 12 13 14 15000 16 17000\n"
    )
    assert_fields(
        row.fields(),
        {
            "reads": 1000,  # field 1
            "reads_merged": 2,  # field 2
            "read_bytes": 1536,  # field 3: 3 sectors x 512
            "read_time_seconds": 4.0,  # field 4: ms / 1000
            "writes": 5,  # field 5
            "writes_merged": 6,  # field 6
            "write_bytes": 3584,  # field 7: 7 x 512
            "write_time_seconds": 8.0,  # field 8
            "in_flight": 9.0,  # field 9
            "io_time_seconds": 10.0,  # field 10
            "io_time_weighted_seconds": 11.0,  # field 11
            "discards": 12,  # field 12
            "discards_merged": 13,  # field 13
            "discard_bytes": 7168,  # field 14: 14 x 512
            "discard_time_seconds": 15.0,  # field 15
            "flushes": 16,  # field 16
            "flush_time_seconds": 17.0,  # field 17
        },
    )


@pytest.mark.parametrize(
    ("counters", "present"),
    [
        (11, "classic"),
        (12, "classic"),  # a tool's row with one number more than 14 fields
        (14, "classic"),
        (15, "discards"),
        (16, "discards"),
        (17, "flushes"),
        (18, "flushes"),  # a future kernel appending a field: nothing we know is lost
        (21, "flushes"),
    ],
)
def test_rows_with_at_least_the_classic_counters_use_what_is_there(counters, present):
    # As sysstat and procfs do: 11 counters or more is a row; the known ones are read.
    numbers = " ".join(str(n) for n in range(1, counters + 1))
    problems: list[str] = []
    [row] = parse_diskstats(f"8 0 sda {numbers}\n", problems)
    assert problems == []
    fields = row.fields()
    assert fields["reads"] == 1 and fields["io_time_weighted_seconds"] == 0.011
    assert ("discards" in fields) == (present in ("discards", "flushes"))
    assert ("flushes" in fields) == (present == "flushes")
    if present == "flushes":
        assert fields["flush_time_seconds"] == 0.017  # field 17, whatever follows it


@pytest.mark.parametrize("counters", [1, 3, 5, 8, 10])
def test_rows_with_too_few_counters_are_skipped_with_their_line_number(counters):
    numbers = " ".join(str(n) for n in range(1, counters + 1))
    problems: list[str] = []
    rows = parse_diskstats(f"8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n8 1 sdb {numbers}\n", problems)
    assert [row.device for row in rows] == ["sda"]
    assert len(problems) == 1 and problems[0].startswith("line 2:")


def test_old_seven_field_partition_rows():
    # Before 2.6.25 partitions had 4 numbers: reads, sectors read, writes, sectors
    # written. The first row is iostats.rst's own example; the second pins positions.
    rows = parse_diskstats("   3    1   hda1 35486    38030    38030    38030\n3 2 hda2 1 2 3 4\n")
    assert rows[0] == DiskRow("hda1", 35486, read_sectors=38030, writes=38030, write_sectors=38030)
    assert rows[0].fields() == {
        "reads": 35486,
        "read_bytes": 19471360,  # 38030 x 512
        "writes": 38030,
        "write_bytes": 19471360,
    }
    # reads 1, 2 sectors x 512 read, writes 3, 4 sectors x 512 written; no times
    assert rows[1].fields() == {"reads": 1, "read_bytes": 1024, "writes": 3, "write_bytes": 2048}


def test_malformed_rows_are_skipped_and_logged_once_with_line_numbers(tmp_path, caplog):
    text = (fixture_root("procfs-mlx-hfi") / "proc" / "diskstats").read_text().splitlines()
    text[2] = "   1       2 ram2 0 0 0"  # line 3: truncated
    text[24] = text[24].replace("25354637", "-1")  # line 25 (sda, after 16 ram, 8 loop)
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "diskstats").write_text("\n".join(text) + "\n")
    sampler = DiskSampler(Roots(proc=proc, sys=tmp_path / "sys"))
    with caplog.at_level(logging.WARNING, logger="agent.samplers.disk"):
        sampler.sample(0)
        points = sampler.sample(1)
    assert len(points) == 50  # 52 rows less the two bad ones
    assert {p.tags["device"] for p in points}.isdisjoint({"ram2", "sda"})
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert "line 3:" in messages[0] and "line 25:" in messages[1]


def test_missing_or_empty_diskstats_disables_the_sampler(tmp_path):
    assert not DiskSampler(Roots(proc=tmp_path, sys=tmp_path)).available()
    (tmp_path / "diskstats").write_text("")
    sampler = DiskSampler(Roots(proc=tmp_path, sys=tmp_path))
    assert not sampler.available()
    assert sampler.sample(0) == []


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("sda", "disk"),
        ("sda1", "partition"),
        ("sdaa", "disk"),
        ("sdaa12", "partition"),
        ("hdb3", "partition"),
        ("vdc", "disk"),
        ("vdc1", "partition"),
        ("xvda", "disk"),
        ("xvda1", "partition"),
        ("nvme0n1", "disk"),
        ("nvme10n2p3", "partition"),
        ("mmcblk0", "disk"),
        ("mmcblk0p1", "partition"),
        ("mmcblk0boot0", "disk"),
        ("cciss/c0d0", "disk"),
        ("cciss/c0d0p1", "partition"),
        ("sr0", "disk"),
        ("fd0", "disk"),
        ("rbd0", "disk"),  # Ceph: sysfs lists it under its bus; the only copy of its I/O
        ("loop0", "virtual"),
        ("loop0p1", "partition"),
        ("ram15", "virtual"),
        ("zram0", "virtual"),
        ("dm-12", "virtual"),
        ("md127", "virtual"),
        ("md0p1", "partition"),
        ("nbd3", "virtual"),
        ("drbd1", "virtual"),
        ("zd16", "virtual"),
        ("bcache0", "virtual"),
        ("emcpowera", "virtual"),
        ("emcpowera1", "partition"),
    ],
)
def test_name_rules(name, kind):
    assert kind_from_name(name) == kind


# --- sysfs ----------------------------------------------------------------------------------


def fake_sysfs(tmp_path: Path) -> Path:
    """A sysfs tree laid out as the kernel does: class/block links into devices/."""
    sys_root = tmp_path / "sys"
    pci = sys_root / "devices" / "pci0000:00" / "0000:00:1f.2"
    virtual = sys_root / "devices" / "virtual" / "block"
    places = {
        "sda": pci / "ata1" / "block" / "sda",
        "sda1": pci / "ata1" / "block" / "sda" / "sda1",
        "cciss!c0d0": pci / "cciss0" / "block" / "cciss!c0d0",
        "cciss!c0d0p1": pci / "cciss0" / "block" / "cciss!c0d0" / "cciss!c0d0p1",
        "dm-0": virtual / "dm-0",
        "loop0": virtual / "loop0",
        "loop0p1": virtual / "loop0" / "loop0p1",
        # A driver the name rules do not know, registered as virtual: sysfs wins.
        "newthing0": virtual / "newthing0",
    }
    (sys_root / "class" / "block").mkdir(parents=True)
    for name, place in places.items():
        place.mkdir(parents=True, exist_ok=True)
        if name[-2:] == "p1" or name == "sda1":
            (place / "partition").write_text("1\n")
        (sys_root / "class" / "block" / name).symlink_to(
            os.path.relpath(place, sys_root / "class" / "block")
        )
    return sys_root


def test_kinds_from_sysfs(tmp_path):
    sys_root = fake_sysfs(tmp_path)
    assert kind_from_sysfs(sys_root, "sda") == "disk"
    assert kind_from_sysfs(sys_root, "sda1") == "partition"
    assert kind_from_sysfs(sys_root, "cciss/c0d0") == "disk"  # spelled cciss!c0d0 there
    assert kind_from_sysfs(sys_root, "cciss/c0d0p1") == "partition"
    assert kind_from_sysfs(sys_root, "dm-0") == "virtual"
    assert kind_from_sysfs(sys_root, "loop0p1") == "partition"
    assert kind_from_sysfs(sys_root, "newthing0") == "virtual"
    assert kind_from_sysfs(sys_root, "sdb") is None


def test_sampler_prefers_sysfs_and_falls_back_to_names(tmp_path):
    sys_root = fake_sysfs(tmp_path)
    proc = tmp_path / "proc"
    proc.mkdir()
    rows = ["sda", "sda1", "cciss/c0d0", "cciss/c0d0p1", "dm-0", "newthing0", "sdb", "sdb1"]
    (proc / "diskstats").write_text(
        "".join(f"   8 {n} {name} 1 0 2 3 4 0 5 6 0 7 8\n" for n, name in enumerate(rows))
    )
    sampler = DiskSampler(Roots(proc=proc, sys=sys_root))
    kinds = {p.tags["device"]: p.tags["kind"] for p in sampler.sample(0)}
    assert kinds == {
        "sda": "disk",
        "sda1": "partition",
        "cciss/c0d0": "disk",
        "cciss/c0d0p1": "partition",
        "dm-0": "virtual",
        "newthing0": "virtual",  # sysfs; the name alone would say disk
        "sdb": "disk",  # not in sysfs: by name
        "sdb1": "partition",
    }
    assert kind_from_name("newthing0") == "disk"
    line = encode_line(sampler.sample(1)[2])
    assert line == (
        "disk,device=cciss/c0d0,kind=disk reads=1i,reads_merged=0i,read_bytes=1024i,"
        "read_time_seconds=0.003,writes=4i,writes_merged=0i,write_bytes=2560i,"
        "write_time_seconds=0.006,in_flight=0.0,io_time_seconds=0.007,"
        "io_time_weighted_seconds=0.008 1"
    )


# --- live -----------------------------------------------------------------------------------


def test_live_diskstats_is_plausible_and_sysfs_agrees_with_the_name_rules():
    sampler = make_sampler("disk", Roots())
    if not sampler.available():
        pytest.skip("this host has no block devices in /proc/diskstats")
    before = psutil.disk_io_counters(perdisk=True)
    points = sampler.sample(1)
    after = psutil.disk_io_counters(perdisk=True)
    assert points
    for point in points:
        device = point.tags["device"]
        assert_schema_types(point.fields)
        assert set(point.fields) == set(Disk.fields())  # a modern kernel: every field
        # On a real host the kernel's answer and the name rules must agree.
        assert point.tags["kind"] == kind_from_name(device), device
        if device in before and device in after:
            for ours, theirs in [
                ("reads", "read_count"),
                ("writes", "write_count"),
                ("read_bytes", "read_bytes"),
                ("write_bytes", "write_bytes"),
            ]:
                low, high = getattr(before[device], theirs), getattr(after[device], theirs)
                assert low <= point.fields[ours] <= high, (device, ours)
    assert any(point.tags["kind"] == "disk" for point in points)


CAPTURED_TREES = sorted(p.name for p in FIXTURE_ROOTS.glob("*") if p.is_dir())


@pytest.mark.parametrize("tree", CAPTURED_TREES)
def test_every_captured_tree_with_diskstats_parses_cleanly(tree):
    root = fixture_root(tree)
    diskstats = root / "proc" / "diskstats"
    assert DiskSampler(Roots(proc=root / "proc", sys=root / "sys")).available() == (
        diskstats.exists()
    )
    if diskstats.exists():
        problems: list[str] = []
        rows = parse_diskstats(diskstats.read_text(), problems)
        assert problems == []
        assert len(rows) == len(diskstats.read_text().splitlines())


def test_an_unchanged_line_gives_the_same_fields_and_a_changed_one_its_new_values(tmp_path):
    """Issue 46: a row whose line did not change since the last tick is not parsed again;
    the 107-disk captured host sampled twice gives the same points as a fresh parse, and
    one line changed in between gives that disk's new counters."""
    text = (FIXTURE_ROOTS / "pcp-bigsys-480cpu" / "proc" / "diskstats").read_text()
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "diskstats").write_text(text)
    sampler = DiskSampler(Roots(proc=proc, sys=tmp_path / "sys"))
    first = [encode_line(point) for point in sampler.sample(1)]
    again = [encode_line(point) for point in sampler.sample(1)]
    fresh = [encode_line(p) for p in DiskSampler(Roots(proc=proc, sys=tmp_path / "sys")).sample(1)]
    assert first == again == fresh and len(first) == len(parse_diskstats(text))
    lines = text.splitlines()
    words = lines[0].split()
    words[3] = str(int(words[3]) + 1000)  # one disk read 1,000 more times
    (proc / "diskstats").write_text("\n".join([" ".join(words), *lines[1:]]) + "\n")
    changed = {p.tags["device"]: p for p in sampler.sample(2)}
    assert changed[words[2]].fields[Disk.READS] == int(words[3])
    assert len(changed) == len(first)
