"""The jobs sampler against the captured Slurm cgroup trees and this machine's live /proc.

The trees (``../shared/fixtures/cgroups/cgroup-exporter-slurm``) are real: cgroup v1
jobs 10 and 11 (``<controller>/slurm/uid_20821/job_<id>``) and cgroup v2 job 4
(``system.slice/slurmstepd.scope/job_4``); every expected value below is the number in
the file named beside it. The real Slurm end to end is ``tests/system/test_slurm_real.py``.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.samplers import SAMPLER_NAMES, make_sampler
from agent.samplers.base import Roots
from agent.samplers.jobs import (
    JobsSampler,
    ProcessIo,
    exited_io,
    find_jobs,
    gpus_from_environment,
    parse_blkio,
    parse_io_stat,
    trusted_user,
)
from contract.cpulist import parse_cpu_list
from contract.procfs import parse_environ, parse_io, parse_stat
from contract.procfs import parse_memory_limit as parse_limit
from contract.schema import Job, JobInfo, Kind
from tests.conftest import SHARED

TREE = SHARED / "fixtures" / "cgroups" / "cgroup-exporter-slurm"


def no_users(uid: int) -> str | None:
    return None


def tree_roots(tree: Path) -> Roots:
    return Roots(proc=tree / "proc", sys=tree / "sys", cgroup=tree)


def by_job(points, measurement: str) -> dict[str, object]:
    return {p.tags["job_id"]: p for p in points if p.measurement == measurement}


@pytest.fixture
def tree() -> Path:
    if not TREE.is_dir():
        pytest.fail(f"captured cgroup tree {TREE} is missing: ../shared must sit beside the repo")
    return TREE


def test_the_registry_knows_the_jobs_sampler(tree):
    assert "jobs" in SAMPLER_NAMES
    assert isinstance(make_sampler("jobs", tree_roots(tree)), JobsSampler)


def test_finds_v1_and_v2_jobs_in_the_captured_tree(tree):
    jobs = find_jobs(tree)
    assert sorted(jobs) == ["10", "11", "4"]
    assert jobs["10"].version == 1 and jobs["10"].uid == 20821  # slurm/uid_20821/job_10
    assert set(jobs["10"].dirs) == {"cpuacct", "memory", "cpuset"}  # no blkio captured
    assert jobs["4"].version == 2 and jobs["4"].uid is None  # v2 paths carry no uid
    assert jobs["4"].dirs[""] == tree / "system.slice" / "slurmstepd.scope" / "job_4"
    # torque/<id> and user.slice are not Slurm jobs
    assert all(job.job_id.isdigit() for job in jobs.values())


def test_v1_job_values_are_the_files_values(tree):
    points = JobsSampler(tree_roots(tree), users=no_users).sample(123)
    usage, info = by_job(points, Job.NAME), by_job(points, JobInfo.NAME)
    assert usage["10"].fields == {
        "cpu_seconds": 7710215 / 1e9,  # cpuacct/.../job_10/cpuacct.usage (ns)
        "memory_bytes": 356352.0,  # memory/.../job_10/memory.usage_in_bytes
        "memory_peak_bytes": 552960.0,  # memory.max_usage_in_bytes
        "cache_bytes": 4096.0,  # memory.stat total_cache (its own "cache" is 0)
        "processes": 2.0,  # cpuacct task_0 cgroup.procs: 95521, 95525
    }
    assert usage["11"].fields == {
        "cpu_seconds": 33146523011972 / 1e9,
        "memory_bytes": 6126714880.0,
        "memory_peak_bytes": 8346267648.0,
        "cache_bytes": 74915840.0,  # total_cache 74915840
        "processes": 6.0,  # step_0 (2 tasks), step_batch, step_extern
    }
    assert info["10"].tags == {"job_id": "10", "uid": "20821"}
    assert info["10"].fields == {
        "info": 1.0,
        "allocated_cpus": 2.0,  # cpuset/.../job_10/cpuset.cpus "0-1"
        "allocated_memory_bytes": 2147483648.0,  # memory.limit_in_bytes
    }
    assert info["11"].fields["allocated_cpus"] == 40.0  # "0-39"
    assert info["11"].fields["allocated_memory_bytes"] == 191092490240.0


def test_v2_job_values_are_the_files_values(tree):
    points = JobsSampler(tree_roots(tree), users=no_users).sample(123)
    usage, info = by_job(points, Job.NAME)["4"], by_job(points, JobInfo.NAME)["4"]
    assert usage.fields == {
        "cpu_seconds": 126686 / 1e6,  # job_4/cpu.stat usage_usec
        "memory_bytes": 5660672.0,  # memory.current
        "memory_peak_bytes": 7229440.0,  # memory.peak
        "cache_bytes": 516096.0,  # memory.stat file
        "file_refault_bytes": 0,  # memory.stat workingset_refault_file 0 (pages)
        # 49249 49253 49256 49276 49334: slurmstepd's step_*/slurm included, as in cpu.stat
        "processes": 5.0,
    }
    # The uid: /proc/49276/status (a task_0 process) says Uid 20821.
    assert info.tags == {"job_id": "4", "uid": "20821"}
    assert info.fields == {
        "info": 1.0,
        "allocated_cpus": 1.0,  # cpuset.cpus.effective "0"
        "allocated_memory_bytes": 1835008000.0,  # memory.max
    }


def test_job_series_carry_only_job_id_and_types_follow_the_schema(tree):
    points = JobsSampler(tree_roots(tree), users=no_users).sample(123)
    for point in points:
        spec = Job if point.measurement == Job.NAME else JobInfo
        assert set(point.tags) <= set(spec.TAGS)
        if spec is Job:
            assert set(point.tags) == {"job_id"}
        for name, value in point.fields.items():
            field = spec.fields()[name]
            if field.kind is Kind.COUNTER and field.unit != "seconds":
                assert type(value) is int, name
            else:
                assert type(value) is float, name


def test_user_name_resolves_through_the_lookup(tree):
    names = {20821: "alice"}
    points = JobsSampler(tree_roots(tree), users=names.get).sample(1)
    assert {p.tags.get("user") for p in points if p.measurement == JobInfo.NAME} == {"alice"}


def test_a_job_whose_cgroup_is_gone_is_not_reported(tree, tmp_path):
    copy = tmp_path / "cgroup"
    shutil.copytree(tree, copy, symlinks=True)
    sampler = JobsSampler(tree_roots(copy), users=no_users)
    assert sorted(by_job(sampler.sample(1), Job.NAME)) == ["10", "11", "4"]
    for controller in ("cpuacct", "memory", "cpuset"):
        shutil.rmtree(copy / controller / "slurm" / "uid_20821" / "job_10")
    shutil.rmtree(copy / "system.slice" / "slurmstepd.scope" / "job_4")
    points = sampler.sample(2)
    assert sorted(by_job(points, Job.NAME)) == ["11"]
    assert sorted(by_job(points, JobInfo.NAME)) == ["11"]
    assert set(sampler._jobs) == {"11"}  # nothing kept about the ended jobs


def test_without_slurm_the_sampler_is_off_with_one_log_line(tmp_path, caplog):
    (tmp_path / "cgroup" / "memory").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    sampler = JobsSampler(Roots(tmp_path / "proc", tmp_path / "sys", tmp_path / "cgroup"))
    with caplog.at_level(logging.INFO, logger="agent.samplers.jobs"):
        assert sampler.available() is False
    assert len(caplog.records) == 1
    assert "no Slurm cgroups" in caplog.records[0].getMessage()
    assert sampler.sample(1) == []


def test_slurm_cgroups_without_jobs_make_it_available(tmp_path):
    (tmp_path / "cpuacct" / "slurm_node7").mkdir(parents=True)
    sampler = JobsSampler(Roots(tmp_path / "proc", tmp_path / "sys", tmp_path))
    assert sampler.available() is True
    assert sampler.sample(1) == []


def test_combined_v1_mounts_and_sluid_names_are_found(tmp_path):
    # cpu,cpuacct mounted together; a node-named slurm dir; a SLUID-style job name
    job = tmp_path / "cpu,cpuacct" / "slurm_n01" / "uid_1000" / "job_s1A2B3C4D5E6F"
    job.mkdir(parents=True)
    (job / "cpuacct.usage").write_text("2500000000\n")
    v2 = tmp_path / "unified" / "system.slice" / "n02_slurmstepd.scope" / "job_77"
    v2.mkdir(parents=True)
    (v2 / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\n")
    jobs = find_jobs(tmp_path)
    assert sorted(jobs) == ["77", "s1A2B3C4D5E6F"]
    points = JobsSampler(Roots(tmp_path / "proc", tmp_path, tmp_path), users=no_users).sample(1)
    usage = by_job(points, Job.NAME)
    assert usage["s1A2B3C4D5E6F"].fields["cpu_seconds"] == 2.5
    assert usage["77"].fields["cpu_seconds"] == 1.5


# ---------------------------------------------------------------- parse functions


def test_parse_cpu_list_and_limit():
    assert parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpu_list("\n") == set()
    assert parse_limit("max\n") is None
    assert parse_limit("9223372036854771712\n") is None  # v1's "no limit"
    assert parse_limit("268435456\n") == 268435456


def test_parse_blkio_sums_read_and_write_of_every_device():
    # The layout of blkio.throttle.io_service_bytes_recursive (kernel blkio-controller
    # docs); this machine's kernel counts nothing there, so the numbers are typed.
    text = (
        "8:16 Read 4223325184\n8:16 Write 3207528448\n8:16 Sync 5387592704\n"
        "8:16 Async 2043260928\n8:16 Discard 0\n8:16 Total 7430853632\n"
        "8:0 Read 5246572032\n8:0 Write 2361737216\n8:0 Sync 5575892480\n"
        "8:0 Async 2032416768\n8:0 Discard 0\n8:0 Total 7608309248\nTotal 15039162880\n"
    )
    assert parse_blkio(text) == (4223325184 + 5246572032, 3207528448 + 2361737216)
    assert parse_blkio("Total 0\n") == (0, 0)  # this machine's root blkio cgroup


def test_parse_io_stat_sums_devices():
    text = (
        "259:0 rbytes=1000 wbytes=2000 rios=3 wios=4 dbytes=0 dios=0\n"
        "8:0 rbytes=10 wbytes=20 rios=1 wios=2 dbytes=0 dios=0\n"
    )
    assert parse_io_stat(text) == (1010, 2020)


def test_parse_proc_stat_with_parentheses_in_the_name():
    text = "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 0 0\n"
    stat = parse_stat(text)
    assert (stat.command, stat.ppid, stat.start) == ("a) b (c)", 17, 987654)
    own = parse_stat(Path(f"/proc/{os.getpid()}/stat").read_text())
    assert own.ppid == os.getppid() and own.start > 0


def test_parse_proc_io_of_this_process():
    io = parse_io(Path("/proc/self/io").read_text())
    assert io.rchar > 0 and io.read_bytes >= 0 and io.write_bytes >= 0
    with pytest.raises(KeyError):
        parse_io("rchar: 1\n")


def test_environment_and_gpus():
    env = parse_environ(b"SLURM_JOB_ID=7\0SLURM_JOB_GPUS=0,2\0CUDA_VISIBLE_DEVICES=0,1\0X\0")
    assert env == {"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "0,2", "CUDA_VISIBLE_DEVICES": "0,1"}
    # SLURM_JOB_GPUS holds the node's indices; CUDA_VISIBLE_DEVICES is renumbered from 0
    assert gpus_from_environment(env) == ["0", "2"]
    uuids = "GPU-3f2a1b4c-0000-1111-2222-333344445555,GPU-9e8d7c6b-aaaa-bbbb-cccc-ddddeeeeffff"
    assert gpus_from_environment({"CUDA_VISIBLE_DEVICES": uuids}) == uuids.split(",")
    assert gpus_from_environment({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}) == []
    assert gpus_from_environment({"SLURM_JOB_ID": "7"}) is None


def test_exited_processes_are_kept_unless_their_parent_in_the_job_reaped_them():
    parent, child, loner = (100, 1), (101, 2), (102, 3)
    before = {
        parent: ProcessIo(1, 1000, 10),
        child: ProcessIo(100, 500, 5),
        loner: ProcessIo(1, 70, 7),
    }
    # child reaped by parent (its bytes now in the parent's), loner gone with its own
    after = {parent: ProcessIo(1, 1500, 15)}
    assert exited_io(before, after) == (70, 7)
    # a reused pid is another process: the old one's bytes are kept
    assert exited_io({(5, 1): ProcessIo(1, 9, 9)}, {(5, 2): ProcessIo(1, 0, 0)}) == (9, 9)


# ---------------------------------------------------------------- live processes


READER = """
import os, sys, time
path = sys.argv[1]
with open(path, "wb") as f:
    f.write(os.urandom(1 << 20))
    f.flush()
    os.fsync(f.fileno())
print("ready", flush=True)
time.sleep(60)
"""


def test_process_io_and_environment_of_live_processes(tmp_path):
    """Real processes of this machine in a made cgroup tree (only Slurm makes real ones;
    tests/system/test_slurm_real.py has those). No GPU here: the GPU list is the environment
    Slurm would give a job with two GPUs, set by hand."""
    env = {
        **os.environ,
        "SLURM_JOB_ID": "31",
        "SLURM_JOB_ACCOUNT": "physics",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_GPUS": "1,3",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    children = [
        subprocess.Popen(
            [sys.executable, "-c", READER, str(tmp_path / f"data{i}")],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
        task = tmp_path / "cg" / "cpuacct" / "slurm" / f"uid_{os.getuid()}" / "job_31"
        task = task / "step_batch" / "task_0"
        task.mkdir(parents=True)
        (task / "cgroup.procs").write_text("".join(f"{c.pid}\n" for c in children))
        sampler = JobsSampler(Roots(Path("/proc"), Path("/sys"), tmp_path / "cg"))
        first = sampler.sample(1)
        ios = [parse_io(Path(f"/proc/{c.pid}/io").read_text()) for c in children]
        usage = by_job(first, Job.NAME)["31"].fields
        assert usage[Job.PROCESS_WRITE_BYTES] == sum(io.write_bytes for io in ios)
        assert usage[Job.PROCESS_WRITE_BYTES] >= 2 << 20  # 1 MiB each, fsynced
        assert usage[Job.PROCESS_READ_BYTES] == sum(io.read_bytes for io in ios)
        assert usage[Job.PROCESSES] == 2.0
        info = by_job(first, JobInfo.NAME)["31"]
        assert info.tags == {
            "job_id": "31",
            "uid": str(os.getuid()),
            # the environment says alice; the cgroup's uid is this user's: the uid wins
            "user": pwd.getpwuid(os.getuid()).pw_name,
            "account": "physics",
            "partition": "gpu",
            "gpus": "1,3",
        }
        assert info.fields[JobInfo.ALLOCATED_GPUS] == 2.0
        # One process leaves the job (its parent, pytest, is not in it): its bytes stay.
        children[0].kill()
        children[0].wait()
        (task / "cgroup.procs").write_text(f"{children[1].pid}\n")
        second = by_job(sampler.sample(2), Job.NAME)["31"].fields
        still = parse_io(Path(f"/proc/{children[1].pid}/io").read_text())
        assert second[Job.PROCESS_WRITE_BYTES] == ios[0].write_bytes + still.write_bytes
        assert second[Job.PROCESS_READ_BYTES] == ios[0].read_bytes + still.read_bytes
        assert second[Job.PROCESSES] == 1.0
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_a_stale_job_cgroup_with_no_process_left_is_not_reported(tmp_path):
    """A slurmstepd killed with SIGKILL leaves its job's cgroup behind, empty once the
    job's processes are gone (tests/system/test_slurm_stepd_killed.py on a real Slurm): no
    process listed, no job reported, nothing kept about it."""
    job = tmp_path / "cpuacct" / "slurm" / "uid_1000" / "job_5"
    task = job / "step_batch" / "task_0"
    task.mkdir(parents=True)
    (job / "cpuacct.usage").write_text("2500000000\n")
    for directory in (job, job / "step_batch", task):
        (directory / "cgroup.procs").write_text("")
    sampler = JobsSampler(Roots(tmp_path / "proc", tmp_path, tmp_path), users=no_users)
    assert by_job(sampler.sample(1), Job.NAME) == {}
    assert sampler._jobs == {}
    (task / "cgroup.procs").write_text(f"{os.getpid()}\n")  # a process in it: reported
    assert by_job(sampler.sample(2), Job.NAME)["5"].fields["processes"] == 1.0


# reads a file whole twice in 1 MiB chunks, says so, then waits to be killed (a job with no
# process left is not reported)
TWICE_READER = """
import sys, time
for _ in range(2):
    with open(sys.argv[1], 'rb') as f:
        while f.read(1 << 20):
            pass
print('read', flush=True)
time.sleep(600)
"""
MEMORY_V1 = Path("/sys/fs/cgroup/memory")


@pytest.mark.skipif(
    not (os.geteuid() == 0 and (MEMORY_V1 / "memory.limit_in_bytes").exists()),
    reason="needs root and the cgroup v1 memory controller",
)
def test_a_jobs_pages_reclaimed_by_its_memory_limit_and_read_again_are_its_refaults(tmp_path):
    """A real memory cgroup laid out as Slurm lays a job's out, limited to 64 MB: its process
    reads a 96 MB file twice, so the limit reclaims the file's pages and the second pass
    reads them back as the job's own refaults (memory.stat, not only the host's vmstat)."""
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(96 << 20))
    os.sync()
    fd = os.open(data, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    slurm = MEMORY_V1 / f"slurm_epochscope{os.getpid()}"
    job = slurm / f"uid_{os.getuid()}" / "job_41"
    job.mkdir(parents=True)
    reader = None
    try:
        (job / "memory.limit_in_bytes").write_text(str(64 << 20))
        reader = subprocess.Popen(
            [sys.executable, "-c", TWICE_READER, str(data)],
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: (job / "cgroup.procs").write_text(str(os.getpid())),
        )
        assert reader.stdout is not None and reader.stdout.readline() == "read\n"
        sampler = JobsSampler(Roots(Path("/proc"), Path("/sys"), MEMORY_V1.parent))
        usage = by_job(sampler.sample(1), Job.NAME)["41"].fields
        # the second pass found (nearly) every page evicted by the limit
        assert usage[Job.FILE_REFAULT_BYTES] >= 0.4 * (96 << 20)
    finally:
        if reader is not None:
            reader.kill()
            reader.wait()
        for directory in (job, job.parent, slurm):
            directory.rmdir()


def test_the_user_name_is_the_uids_not_the_environments():
    names = {0: "root", 1000: "alice"}.get
    assert trusted_user(1000, "alice", names) == "alice"
    assert trusted_user(1000, "root", names) == "alice"  # disagrees: the uid's name
    assert trusted_user(1000, None, names) == "alice"
    assert trusted_user(4242, "mallory", names) is None  # unresolved uid: not confirmed
    assert trusted_user(None, "bob", names) == "bob"  # no uid known: the only source
