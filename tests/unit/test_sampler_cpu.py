"""The cpu sampler against captured /proc/stat files and this machine's live /proc."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import psutil
import pytest

from agent.samplers import make_sampler
from agent.samplers.base import Roots
from agent.samplers.cpu import CpuSampler, parse_stat
from contract.point import encode_line
from contract.schema import Cpu, Kind
from tests.conftest import FIXTURE_ROOTS, fixture_root

# The captured hosts are x86 Linux, where USER_HZ (what /proc/stat counts in) is 100.
TICKS = 100

# Expected fields per captured tree: the aggregate "cpu" line's columns / 100.
EXPECTED = {
    # cpu  785450 9692 480221 115360903 29666 0 1842 0 0 0  (8 cpuN lines)
    "pcp-meminfo-001": {
        "user_seconds": 7854.5,  # 785450 / 100
        "nice_seconds": 96.92,  # 9692 / 100
        "system_seconds": 4802.21,  # 480221 / 100
        "idle_seconds": 1153609.03,  # 115360903 / 100
        "iowait_seconds": 296.66,  # 29666 / 100
        "irq_seconds": 0.0,
        "softirq_seconds": 18.42,  # 1842 / 100
        "steal_seconds": 0.0,
        "cpus_online": 8.0,  # cpu0..cpu7
    },
    # cpu  2310228 16093 1906373 7249304504 265412 0 1843 0 797809 0  (32 cpuN lines);
    # the 9th column is guest time (797809), already inside user: not reported.
    "pcp-meminfo-002": {
        "user_seconds": 23102.28,  # 2310228 / 100
        "nice_seconds": 160.93,  # 16093 / 100
        "system_seconds": 19063.73,  # 1906373 / 100
        "idle_seconds": 72493045.04,  # 7249304504 / 100
        "iowait_seconds": 2654.12,  # 265412 / 100
        "irq_seconds": 0.0,
        "softirq_seconds": 18.43,  # 1843 / 100
        "steal_seconds": 0.0,
        "cpus_online": 32.0,  # cpu0..cpu31
    },
    # cpu  301854 612 111922 8979004 3552 2 3944 0 0 0  (8 cpuN lines)
    "procfs-mlx-hfi": {
        "user_seconds": 3018.54,  # 301854 / 100
        "nice_seconds": 6.12,  # 612 / 100
        "system_seconds": 1119.22,  # 111922 / 100
        "idle_seconds": 89790.04,  # 8979004 / 100
        "iowait_seconds": 35.52,  # 3552 / 100
        "irq_seconds": 0.02,  # 2 / 100
        "softirq_seconds": 39.44,  # 3944 / 100
        "steal_seconds": 0.0,
        "cpus_online": 8.0,
    },
    # cpu  17330 3269 120465 869208946 2311 1 1144 0 0  (9 columns: no guest_nice;
    # 480 cpuN lines)
    "pcp-bigsys-480cpu": {
        "user_seconds": 173.3,  # 17330 / 100
        "nice_seconds": 32.69,  # 3269 / 100
        "system_seconds": 1204.65,  # 120465 / 100
        "idle_seconds": 8692089.46,  # 869208946 / 100
        "iowait_seconds": 23.11,  # 2311 / 100
        "irq_seconds": 0.01,  # 1 / 100
        "softirq_seconds": 11.44,  # 1144 / 100
        "steal_seconds": 0.0,
        "cpus_online": 480.0,  # cpu0..cpu479
    },
}


def assert_schema_types(fields: dict) -> None:
    """Every field is a Cpu field; counters are float seconds here, gauges floats."""
    specs = Cpu.fields()
    for name, value in fields.items():
        assert name in specs, name
        assert isinstance(value, float), (name, value)
        assert value >= 0
        expected_kind = Kind.GAUGE if name == Cpu.CPUS_ONLINE else Kind.COUNTER
        assert specs[name].kind is expected_kind


def proc_tree(tmp_path: Path, stat_text: str) -> Roots:
    (tmp_path / "proc").mkdir(exist_ok=True)
    (tmp_path / "proc" / "stat").write_text(stat_text)
    return Roots(proc=tmp_path / "proc", sys=tmp_path / "sys")


def captured_stat(name: str) -> str:
    return (fixture_root(name) / "proc" / "stat").read_text()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_captured_stat(name):
    root = fixture_root(name)
    sampler = CpuSampler(Roots(proc=root / "proc", sys=root / "sys"), clock_ticks=TICKS)
    assert sampler.available()
    [point] = sampler.sample(1_700_000_000_000_000_000)
    assert point.measurement == "cpu"
    assert point.tags == {}
    assert point.time_ns == 1_700_000_000_000_000_000
    assert point.fields == EXPECTED[name]
    assert_schema_types(point.fields)
    assert encode_line(point).startswith("cpu user_seconds=")


def test_parse_stat_keeps_every_column_and_counts_cpu_lines():
    times = parse_stat(captured_stat("pcp-meminfo-002"))
    assert times.ticks == (2310228, 16093, 1906373, 7249304504, 265412, 0, 1843, 0, 797809, 0)
    assert times.cpus_online == 32


def test_default_clock_ticks_come_from_sysconf(tmp_path):
    roots = proc_tree(tmp_path, captured_stat("procfs-mlx-hfi"))
    [point] = CpuSampler(roots).sample(0)
    # user column 301854 ticks / SC_CLK_TCK
    assert point.fields["user_seconds"] == 301854 / os.sysconf("SC_CLK_TCK")


def test_backwards_iowait_and_an_offlined_cpu_never_decrease_the_output(tmp_path):
    original = captured_stat("pcp-meminfo-001")
    roots = proc_tree(tmp_path, original)
    sampler = CpuSampler(roots, clock_ticks=TICKS)
    first = sampler.sample(1)[0].fields
    # A second reading: iowait stepped back 100 ticks (29666 -> 29566), user advanced
    # 50 (785450 -> 785500), and cpu3 went offline (its line vanished).
    later = original.replace(
        "cpu  785450 9692 480221 115360903 29666 ", "cpu  785500 9692 480221 115360903 29566 "
    )
    later = "\n".join(line for line in later.splitlines() if not line.startswith("cpu3 "))
    (tmp_path / "proc" / "stat").write_text(later)
    second = sampler.sample(2)[0].fields
    assert second["iowait_seconds"] == first["iowait_seconds"] == 296.66  # kept at 29666
    assert second["user_seconds"] == 7855.0  # 785500 / 100
    assert second["cpus_online"] == 7.0  # cpu0..cpu7 without cpu3
    for name in first:
        if name != "cpus_online":
            assert second[name] >= first[name], name
    # Once iowait passes its old high again, it moves with the file.
    (tmp_path / "proc" / "stat").write_text(later.replace(" 29566 ", " 29700 ", 1))
    assert sampler.sample(3)[0].fields["iowait_seconds"] == 297.0  # 29700 / 100


def test_gaps_in_cpu_numbering(tmp_path):
    # Only the cpuN lines of online CPUs are printed; numbering may have holes.
    text = captured_stat("procfs-mlx-hfi")
    text = "\n".join(line for line in text.splitlines() if line[:4] not in ("cpu1", "cpu5"))
    [point] = CpuSampler(proc_tree(tmp_path, text), clock_ticks=TICKS).sample(0)
    assert point.fields["cpus_online"] == 6.0  # cpu0, 2, 3, 4, 6, 7
    assert point.fields["user_seconds"] == 3018.54  # the aggregate line is untouched


def test_older_kernel_with_four_columns_gives_four_fields(tmp_path):
    # Linux 2.4 printed user, nice, system and idle only (proc(5)); no zeros invented.
    text = "cpu  1000 20 300 40000\ncpu0 1000 20 300 40000\nintr 5\n"
    [point] = CpuSampler(proc_tree(tmp_path, text), clock_ticks=TICKS).sample(0)
    assert point.fields == {
        "user_seconds": 10.0,  # 1000 / 100
        "nice_seconds": 0.2,  # 20 / 100
        "system_seconds": 3.0,  # 300 / 100
        "idle_seconds": 400.0,  # 40000 / 100
        "cpus_online": 1.0,
    }


def test_malformed_lines(tmp_path, caplog):
    # A garbled per-CPU line still says the CPU is online; its numbers are not used.
    text = captured_stat("pcp-meminfo-001").replace("cpu2 123696 ", "cpu2 12x696 ")
    [point] = CpuSampler(proc_tree(tmp_path, text), clock_ticks=TICKS).sample(0)
    assert point.fields["cpus_online"] == 8.0
    assert point.fields["user_seconds"] == 7854.5
    # A garbled aggregate line: no point, one log line naming line 1, however often.
    text = captured_stat("pcp-meminfo-001").replace("cpu  785450 ", "cpu  78545O ")
    sampler = CpuSampler(proc_tree(tmp_path, text), clock_ticks=TICKS)
    with caplog.at_level(logging.WARNING, logger="agent.samplers.cpu"):
        assert [sampler.sample(now) for now in range(3)] == [[], [], []]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "stat: line 1: the cpu line is not all numbers" in warnings[0]


def test_missing_or_unusable_file_disables_the_sampler(tmp_path):
    missing = CpuSampler(Roots(proc=tmp_path / "nowhere", sys=tmp_path), clock_ticks=TICKS)
    assert not missing.available()
    assert missing.sample(0) == []
    no_aggregate = CpuSampler(proc_tree(tmp_path, "intr 1\nctxt 2\n"), clock_ticks=TICKS)
    assert not no_aggregate.available()
    assert no_aggregate.sample(0) == []


def test_file_that_goes_away_gives_no_points_then_recovers(tmp_path):
    roots = proc_tree(tmp_path, captured_stat("procfs-mlx-hfi"))
    sampler = CpuSampler(roots, clock_ticks=TICKS)
    assert sampler.sample(0)
    shutil.rmtree(tmp_path / "proc")
    assert sampler.sample(1) == []
    proc_tree(tmp_path, captured_stat("procfs-mlx-hfi"))
    assert sampler.sample(2)[0].fields["idle_seconds"] == 89790.04


def test_live_proc_stat_is_plausible_and_never_decreases():
    sampler = make_sampler("cpu", Roots())
    assert sampler.available()
    before = psutil.cpu_times()
    [first] = sampler.sample(1)
    after = psutil.cpu_times()
    fields = first.fields
    assert_schema_types(fields)
    assert set(fields) == set(Cpu.fields())  # a modern kernel has every column
    assert fields["cpus_online"] == psutil.cpu_count(logical=True)
    # psutil reads the same aggregate line; idle and iowait may step back, so only the
    # busy columns are bracketed.
    for ours, theirs in [
        ("user_seconds", "user"),
        ("nice_seconds", "nice"),
        ("system_seconds", "system"),
        ("softirq_seconds", "softirq"),
        ("steal_seconds", "steal"),
    ]:
        assert getattr(before, theirs) <= fields[ours] <= getattr(after, theirs), ours
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    busy_and_idle = sum(v for k, v in fields.items() if k != "cpus_online")
    assert busy_and_idle <= uptime * fields["cpus_online"] * 1.05
    [second] = sampler.sample(2)
    for name, value in first.fields.items():
        if name != "cpus_online":
            assert second.fields[name] >= value, name


CAPTURED_TREES = sorted(p.name for p in FIXTURE_ROOTS.glob("*") if p.is_dir())


@pytest.mark.parametrize("tree", CAPTURED_TREES)
def test_every_captured_tree_with_a_stat_parses_cleanly(tree):
    root = fixture_root(tree)
    stat = root / "proc" / "stat"
    sampler = CpuSampler(Roots(proc=root / "proc", sys=root / "sys"), clock_ticks=TICKS)
    assert sampler.available() == stat.exists()
    if stat.exists():
        parse_stat(stat.read_text())  # raises on a bad aggregate line
        assert tree in EXPECTED  # a new capture needs its hand-computed values above
