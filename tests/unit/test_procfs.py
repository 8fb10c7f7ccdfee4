"""contract.procfs: one parser per /proc file, on this machine's own files and the captured
Slurm node (shared/fixtures/cgroups/cgroup-exporter-slurm: a v1 job 10/11 and a v2 job 4)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from contract import procfs

TREE = Path("/work/shared/fixtures/cgroups/cgroup-exporter-slurm")


def test_stat_of_this_process_and_a_name_with_parentheses():
    own = procfs.parse_stat(Path("/proc/self/stat").read_text())
    assert own.ppid == os.getppid() and own.threads >= 1 and own.start > 0
    assert own.command == Path("/proc/self/comm").read_text().strip()
    line = "4242 (a) b (c)) R 17 4242 4242 0 -1 4194560 1 0 0 0 300 40 25 5 20 0 3 0 987654 0 0"
    stat = procfs.parse_stat(line)
    assert stat == procfs.ProcStat("a) b (c)", "R", 17, 340, 30, 3, 987654)
    with pytest.raises(ValueError, match="short stat line"):
        procfs.parse_stat("4242 (cut short) R 1 2")
    with pytest.raises(ValueError, match="no \\(comm\\)"):
        procfs.parse_stat("")


def test_io_and_environ():
    text = "rchar: 4096\nwchar: 10\nsyscr: 3\nread_bytes: 512\nwrite_bytes: 8\n"
    assert procfs.parse_io(text) == procfs.ProcIo(4096, 512, 8)
    assert procfs.parse_io(Path("/proc/self/io").read_text()).rchar > 0
    assert procfs.parse_environ(b"A=1\0B=x=y\0junk\0=nameless\0") == {"A": "1", "B": "x=y"}


def test_slurm_job_only_at_slurms_places():
    assert procfs.slurm_job_of_path("/slurm/uid_20821/job_11/step_0/task_0") == ("11", 20821)
    assert procfs.slurm_job_of_path("/slurm_node7/uid_5/job_118/step_0") == ("118", 5)
    assert procfs.slurm_job_of_path("/system.slice/slurmstepd.scope/job_4/step_0/user") == (
        "4",
        None,
    )
    assert procfs.slurm_job_of_path("/system.slice/n1_slurmstepd.scope/job_7") == ("7", None)
    # a user's own cgroup named job_4242 (issue 44, item 6: a hog was blamed on it)
    assert procfs.slurm_job_of_path("/user.slice/user-1000.slice/job_4242/x") is None
    assert procfs.slurm_job_of_path("/docker/abc/job_4242") is None
    assert procfs.slurm_job_of_path("/system.slice/job_runner.service") is None
    assert procfs.slurm_job_of_path("/slurm/job_3/step_0") is None  # no uid_ level


def test_slurm_job_of_the_captured_processes():
    jobs = {p.parent.name: procfs.slurm_job(p.read_text()) for p in TREE.glob("proc/*/cgroup")}
    assert jobs == {"49276": ("4", None), "67998": None, "43310": None}
    v1 = "11:memory:/slurm/uid_20821/job_11/step_0/task_0\n4:cpuacct:/user.slice\n"
    assert procfs.slurm_job(v1) == ("11", 20821)
    assert procfs.parse_cgroup("bad\n0::/a\n") == [procfs.CgroupLine(0, (), "/a")]


def test_memory_limit_of_the_captured_v2_job():
    # job_4 sets 1835008000 (1.75 GiB); its task's own memory.max is "max"
    cgroup = (TREE / "proc/49276/cgroup").read_text()
    assert procfs.memory_limit_bytes(cgroup, TREE) == 1835008000
    assert procfs.memory_limit_bytes((TREE / "proc/43310/cgroup").read_text(), TREE) is None


def test_memory_limit_of_the_captured_v1_job():
    # v1 job 11: step_0 at 191092490240 bytes, its task and the root unlimited (~2^63)
    cgroup = "9:memory:/slurm/uid_20821/job_11/step_0/task_1\n"
    assert procfs.memory_limit_bytes(cgroup, TREE) == 191092490240
    assert procfs.memory_limit_bytes("9:cpuacct:/slurm/uid_20821/job_11\n", TREE) is None


def test_memory_limit_values():
    assert procfs.parse_memory_limit("max\n") is None
    assert procfs.parse_memory_limit("9223372036854771712\n") is None
    assert procfs.parse_memory_limit("1073741824\n") == 1 << 30


def test_the_bytes_fast_path_agrees_with_parse_stat():
    data = Path("/proc/self/stat").read_bytes()
    stat = procfs.parse_stat(data.decode())
    assert procfs.pid_stat_counters(data) == (stat.ppid, stat.ticks, stat.start)
    assert procfs.pid_stat_ticks_threads(data) == (stat.ticks, stat.threads)
    assert procfs.stat_name(data) == stat.command.encode()
    with pytest.raises(ValueError):
        procfs.pid_stat_counters(b"42 (cut) R 1 2")


def test_the_io_bytes_fast_path_agrees_with_parse_io():
    data = Path("/proc/self/io").read_bytes()
    io = procfs.parse_io(data.decode())
    assert procfs.pid_io_counters(data) == (io.read_bytes, io.write_bytes)
    # cancelled_write_bytes is not write_bytes, wherever the lines are
    text = b"read_bytes: 5\ncancelled_write_bytes: 99\nwrite_bytes: 7"
    assert procfs.pid_io_counters(text) == (5, 7)
    with pytest.raises(ValueError, match="no read_bytes"):
        procfs.pid_io_counters(b"rchar: 1\nwchar: 2\n")  # no task I/O accounting
