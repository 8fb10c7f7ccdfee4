"""The memory sampler against captured meminfo/vmstat files and this machine's live /proc."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import psutil
import pytest

from agent.samplers import make_sampler
from agent.samplers.base import PAGE_BYTES, Roots
from agent.samplers.memory import (
    VMSTAT_FIELDS,
    MemorySampler,
    parse_meminfo,
    parse_vmstat,
)
from contract.point import encode_line
from contract.schema import Kind, Memory
from tests.conftest import FIXTURE_ROOTS, fixture_root

EXPECTED = {
    "pcp-meminfo-001": {
        "total_bytes": 16406671360.0,  # MemTotal 16022140 kB x 1024
        "free_bytes": 4762480640.0,  # MemFree 4650860 kB x 1024
        "available_bytes": 13190205440.0,  # MemAvailable 12881060 kB x 1024
        "cached_bytes": 7811305472.0,  # Cached 7628228 kB x 1024
        "buffers_bytes": 4608000.0,  # Buffers 4500 kB x 1024
        "dirty_bytes": 176128.0,  # Dirty 172 kB x 1024
        "writeback_bytes": 0.0,  # Writeback 0 kB
        "active_file_bytes": 4063469568.0,  # Active(file) 3968232 kB x 1024
        "inactive_file_bytes": 3336404992.0,  # Inactive(file) 3258208 kB x 1024
        "shmem_bytes": 416038912.0,  # Shmem 406288 kB x 1024
        # vmstat: pgpgin/pgpgout are KiB, x 1024; the rest as printed
        "pgpgin_bytes": 5282454 * 1024,
        "pgpgout_bytes": 20759330 * 1024,
        "pgfault": 414185127,
        "pgmajfault": 9578,
        "page_cache_drops": 0,  # drop_pagecache 0
        "file_refault_bytes": 0,  # workingset_refault 0 (a kernel before 5.9's split)
    },
    "pcp-meminfo-002": {
        "total_bytes": 134994997248.0,  # MemTotal 131831052 kB x 1024
        "free_bytes": 89381900288.0,  # MemFree 87287012 kB x 1024
        "available_bytes": 121267757056.0,  # MemAvailable 118425544 kB x 1024
        "cached_bytes": 31978475520.0,  # Cached 31228980 kB x 1024
        "buffers_bytes": 15433728.0,  # Buffers 15072 kB x 1024
        "dirty_bytes": 8192.0,  # Dirty 8 kB x 1024
        "writeback_bytes": 0.0,
        "active_file_bytes": 13623865344.0,  # Active(file) 13304556 kB x 1024
        "inactive_file_bytes": 17335271424.0,  # Inactive(file) 16928976 kB x 1024
        "shmem_bytes": 1025310720.0,  # Shmem 1001280 kB x 1024
        "pgpgin_bytes": 6503076 * 1024,
        "pgpgout_bytes": 39010237 * 1024,
        "pgfault": 1891461678,
        "pgmajfault": 1209,
        "page_cache_drops": 0,
        "file_refault_bytes": 0,
    },
    # An older kernel: no MemAvailable line, and no vmstat captured.
    "procfs-mlx-hfi": {
        "total_bytes": 16042172416.0,  # MemTotal 15666184 kB x 1024
        "free_bytes": 450891776.0,  # MemFree 440324 kB x 1024
        "cached_bytes": 12295823360.0,  # Cached 12007640 kB x 1024
        "buffers_bytes": 1044611072.0,  # Buffers 1020128 kB x 1024
        "dirty_bytes": 786432.0,  # Dirty 768 kB x 1024
        "writeback_bytes": 0.0,
        "active_file_bytes": 6649876480.0,  # Active(file) 6494020 kB x 1024
        "inactive_file_bytes": 6689218560.0,  # Inactive(file) 6532440 kB x 1024
        "shmem_bytes": 1339392.0,  # Shmem 1308 kB x 1024
    },
}


def assert_schema_types(fields: dict) -> None:
    specs = Memory.fields()
    for name, value in fields.items():
        assert name in specs, name
        if specs[name].kind is Kind.COUNTER:
            assert type(value) is int, (name, value)
        else:
            assert type(value) is float, (name, value)
        assert value >= 0


def roots_of(root: Path) -> Roots:
    return Roots(proc=root / "proc", sys=root / "sys")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_captured_meminfo_and_vmstat(name):
    sampler = MemorySampler(roots_of(fixture_root(name)))
    assert sampler.available()
    [point] = sampler.sample(42)
    assert (point.measurement, point.tags, point.time_ns) == ("memory", {}, 42)
    assert point.fields == EXPECTED[name]
    assert_schema_types(point.fields)
    line = encode_line(point)
    assert f"total_bytes={EXPECTED[name]['total_bytes']!r}" in line  # a gauge: a float
    if "pgfault" in EXPECTED[name]:
        assert f"pgfault={EXPECTED[name]['pgfault']}i" in line  # a counter: an integer


def test_parse_meminfo_keeps_unitless_counts_and_converts_kb():
    text = (fixture_root("pcp-meminfo-001") / "proc" / "meminfo").read_text()
    values = parse_meminfo(text)
    assert values["HugePages_Total"] == 0  # no unit: a count, left as is
    assert values["Hugepagesize"] == 2097152  # 2048 kB x 1024
    assert values["VmallocTotal"] == 35184372087808  # 34359738367 kB x 1024
    assert len(values) == 46  # every line of the file


def test_parse_vmstat_reads_every_line():
    text = (fixture_root("pcp-meminfo-002") / "proc" / "vmstat").read_text()
    values = parse_vmstat(text)
    assert len(values) == 119  # wc -l
    assert values["pgmajfault"] == 1209


def test_missing_vmstat_gives_meminfo_fields_only(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    shutil.copy(fixture_root("pcp-meminfo-001") / "proc" / "meminfo", proc / "meminfo")
    [point] = MemorySampler(Roots(proc=proc, sys=tmp_path)).sample(0)
    vmstat_fields = {field for field, _ in VMSTAT_FIELDS.values()}
    expected = {k: v for k, v in EXPECTED["pcp-meminfo-001"].items() if k not in vmstat_fields}
    assert point.fields == expected


def test_malformed_lines_are_skipped_and_logged_once(tmp_path, caplog):
    proc = tmp_path / "proc"
    proc.mkdir()
    meminfo = (fixture_root("pcp-meminfo-002") / "proc" / "meminfo").read_text()
    (proc / "meminfo").write_text(meminfo.replace("Dirty:                 8 kB", "Dirty: lots"))
    vmstat = (fixture_root("pcp-meminfo-002") / "proc" / "vmstat").read_text()
    (proc / "vmstat").write_text("garbage line here\n" + vmstat)
    sampler = MemorySampler(Roots(proc=proc, sys=tmp_path))
    with caplog.at_level(logging.WARNING, logger="agent.samplers.memory"):
        sampler.sample(0)
        [point] = sampler.sample(1)
    assert "dirty_bytes" not in point.fields
    assert point.fields["cached_bytes"] == 31978475520.0
    assert point.fields["pgmajfault"] == 1209
    messages = sorted(record.getMessage() for record in caplog.records)
    assert len(messages) == 2
    assert "meminfo: line 17:" in messages[0]  # Dirty is line 17 of that meminfo
    assert "vmstat: line 1:" in messages[1]


def test_missing_or_foreign_meminfo_disables_the_sampler(tmp_path):
    assert not MemorySampler(Roots(proc=tmp_path / "none", sys=tmp_path)).available()
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text("Something: 1 kB\n")
    sampler = MemorySampler(Roots(proc=proc, sys=tmp_path))
    assert not sampler.available()
    assert sampler.sample(0) == []


def test_live_meminfo_is_plausible():
    sampler = make_sampler("memory", Roots())
    assert sampler.available()
    vm_before = Path("/proc/vmstat").read_text()
    [point] = sampler.sample(1)
    fields = point.fields
    assert_schema_types(fields)
    assert set(fields) == set(Memory.fields())  # a modern kernel has all of them
    assert fields["total_bytes"] == psutil.virtual_memory().total
    for name in ("free_bytes", "available_bytes", "cached_bytes", "buffers_bytes"):
        assert 0 <= fields[name] <= fields["total_bytes"], name
    assert fields["active_file_bytes"] + fields["inactive_file_bytes"] <= fields["total_bytes"]
    before = parse_vmstat(vm_before)
    for key, field, scale in (
        ("pgpgin", "pgpgin_bytes", 1024),
        ("pgpgout", "pgpgout_bytes", 1024),
        ("pgfault", "pgfault", 1),
        ("pgmajfault", "pgmajfault", 1),
        ("drop_pagecache", "page_cache_drops", 1),
        ("workingset_refault_file", "file_refault_bytes", PAGE_BYTES),
    ):
        assert fields[field] >= before[key] * scale, key


def test_the_kernels_split_refault_counter_is_the_files_one(tmp_path):
    text = "workingset_refault_anon 7\nworkingset_refault_file 11\nworkingset_nodes 3\n"
    proc = tmp_path / "proc"
    proc.mkdir()
    shutil.copy(fixture_root("pcp-meminfo-001") / "proc" / "meminfo", proc / "meminfo")
    (proc / "vmstat").write_text(text)
    [point] = MemorySampler(Roots(proc=proc, sys=proc)).sample(0)
    assert point.fields["file_refault_bytes"] == 11 * PAGE_BYTES  # not the anon 7


# Each way a file's pages leave the page cache, produced for real on this machine and read
# through the sampler: how ``dataset_evicted`` names the cause rests on these.
ROOT = os.geteuid() == 0
MEMORY_CGROUP = Path("/sys/fs/cgroup/memory")
FILE_MB = 96


def live_fields() -> dict:
    [point] = MemorySampler(Roots()).sample(0)
    return point.fields


def read(path: Path, times: int = 1) -> None:
    for _ in range(times):
        with path.open("rb") as file:
            while file.read(1 << 20):
                pass


def invalidate(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.fixture
def big_file(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(os.urandom(FILE_MB << 20))
    os.sync()
    return path


@pytest.mark.skipif(not ROOT, reason="drop_caches needs root")
def test_drop_caches_is_counted_and_leaves_no_refaults(big_file):
    read(big_file)
    before = live_fields()
    Path("/proc/sys/vm/drop_caches").write_text("1\n")
    read(big_file)
    after = live_fields()
    assert after["page_cache_drops"] - before["page_cache_drops"] >= 1
    # every page came back from disk, yet none counts as a refault: dropped, not reclaimed
    assert after["file_refault_bytes"] - before["file_refault_bytes"] < (FILE_MB << 20) / 10


def test_invalidated_pages_read_again_are_no_refaults(big_file):
    read(big_file)
    before = live_fields()
    invalidate(big_file)  # what vmtouch -e does
    read(big_file)
    after = live_fields()
    assert after["file_refault_bytes"] - before["file_refault_bytes"] < (FILE_MB << 20) / 10


@pytest.mark.skipif(
    not (ROOT and (MEMORY_CGROUP / "memory.limit_in_bytes").exists()),
    reason="needs root and the cgroup v1 memory controller",
)
def test_pages_reclaimed_by_a_memory_limit_and_read_again_are_refaults(big_file):
    """A reader in a 48 MB memory cgroup reads a 96 MB file twice: its limit reclaims the
    file's pages as it reads (they count against it), and the second pass reads them back
    as refaults."""
    invalidate(big_file)
    group = MEMORY_CGROUP / f"epochscope-refault-{os.getpid()}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(48 << 20))
        before = live_fields()
        subprocess.run(
            ["cat", str(big_file), str(big_file)],  # cat: a reader that needs no memory
            check=True,
            stdout=subprocess.DEVNULL,
            preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())),
        )
        after = live_fields()
    finally:
        group.rmdir()
    refaulted = after["file_refault_bytes"] - before["file_refault_bytes"]
    # the second pass found (nearly) every page evicted by the limit; 157 MB of 150 here
    assert refaulted >= 0.4 * (FILE_MB << 20)


CAPTURED_TREES = sorted(p.name for p in FIXTURE_ROOTS.glob("*") if p.is_dir())


@pytest.mark.parametrize("tree", CAPTURED_TREES)
def test_every_captured_tree_with_a_meminfo_parses_cleanly(tree):
    root = fixture_root(tree)
    meminfo, vmstat = root / "proc" / "meminfo", root / "proc" / "vmstat"
    assert MemorySampler(roots_of(root)).available() == meminfo.exists()
    problems: list[str] = []
    if meminfo.exists():
        parse_meminfo(meminfo.read_text(), problems)
        assert tree in EXPECTED  # a new capture needs its hand-computed values above
    if vmstat.exists():
        parse_vmstat(vmstat.read_text(), problems)
    assert problems == []
