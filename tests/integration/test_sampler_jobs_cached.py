"""The jobs sampler's cheap tick: the job scan kept until a listed directory changes, the
files kept open and re-read with pread, and nothing sampled lost for it.

On live cgroup v1 (root; ``/sys/fs/cgroup/{cpuacct,memory,cpuset}/slurm_es<pid>/uid_0/
job_<id>/step_0/task_0``, Slurm's own layout, with a sleeping process in each job), since
what makes the cache safe is how cgroupfs behaves: a directory's mtime does not change when
a child cgroup comes or goes, its link count does, and a removed cgroup's open files
answer ENODEV. The bench (bench/agent_overhead/jobs_before_after.py) has the timings.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import agent.samplers.jobs as jobs_module
from agent.samplers.base import Roots
from agent.samplers.jobs import FileBudget, JobsSampler, keyed_value, signature
from contract.schema import Job, JobInfo

CGROUP = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpuacct", "memory", "cpuset")


def by_job(points, measurement: str) -> dict[str, object]:
    return {p.tags["job_id"]: p for p in points if p.measurement == measurement}


def test_keyed_value_finds_whole_keys_only():
    text = "cache 4096\nrss 8192\ntotal_cache 12288\ntotal_rss 16384\n"
    assert keyed_value(text, "cache") == 4096
    assert keyed_value(text, "total_cache") == 12288
    assert keyed_value(text, "rss") == 8192
    assert keyed_value("file 5", "file") == 5  # no newline at the end
    assert keyed_value(text, "mapped_file") is None


class LiveJobs:
    """Job cgroups made in the live v1 hierarchies, each with one sleeping process."""

    def __init__(self) -> None:
        self.top = f"slurm_es{os.getpid()}"
        self.made: list[Path] = []
        self.sleepers: dict[str, subprocess.Popen] = {}

    def _mkdir(self, path: Path, controller: str) -> None:
        path.mkdir()
        self.made.append(path)
        if controller == "cpuset":  # a cpuset cgroup takes no task before cpus and mems
            for name in ("cpuset.cpus", "cpuset.mems"):
                (path / name).write_text((path.parent / name).read_text())

    def open(self) -> None:
        for controller in CONTROLLERS:
            self._mkdir(CGROUP / controller / self.top, controller)
            self._mkdir(CGROUP / controller / self.top / "uid_0", controller)

    def add(self, job_id: str) -> None:
        sleeper = subprocess.Popen(["sleep", "120"], env={"SLURM_JOB_ID": job_id})
        self.sleepers[job_id] = sleeper
        for controller in CONTROLLERS:
            job = CGROUP / controller / self.top / "uid_0" / f"job_{job_id}"
            for path in (job, job / "step_0", job / "step_0" / "task_0"):
                self._mkdir(path, controller)
            (job / "step_0" / "task_0" / "cgroup.procs").write_text(str(sleeper.pid))

    def end(self, job_id: str) -> None:
        """As slurmstepd ends a job: its processes killed, then its cgroups removed."""
        sleeper = self.sleepers.pop(job_id)
        sleeper.kill()
        sleeper.wait()
        for controller in CONTROLLERS:
            job = CGROUP / controller / self.top / "uid_0" / f"job_{job_id}"
            for path in (job / "step_0" / "task_0", job / "step_0", job):
                path.rmdir()
                self.made.remove(path)

    def close(self) -> None:
        for sleeper in self.sleepers.values():
            sleeper.kill()
            sleeper.wait()
        for path in reversed(self.made):
            if path.is_dir():
                path.rmdir()


@pytest.fixture
def live() -> Iterator[LiveJobs]:
    if not os.access(CGROUP / "cpuacct", os.W_OK):
        pytest.skip("needs root and cgroup v1")
    jobs = LiveJobs()
    try:
        jobs.open()
        yield jobs
    finally:
        jobs.close()


def mine(points, live: LiveJobs) -> list[str]:
    """The test's jobs among those reported (a real Slurm test beside may add its own)."""
    return sorted(job for job in by_job(points, Job.NAME) if job.startswith("9903"))


def test_cgroupfs_directories_change_their_link_count_not_their_mtime(live):
    uid_dir = str(CGROUP / "cpuacct" / live.top / "uid_0")
    before = signature(uid_dir)
    live.add("990301")
    after = signature(uid_dir)
    assert before is not None and after is not None
    assert after[1] == before[1] + 1  # one more subdirectory
    assert signature(str(CGROUP / "cpuacct" / live.top / "nothing")) is None


def test_the_scan_is_redone_only_when_a_job_comes_or_goes(live, monkeypatch):
    scans = []
    original = jobs_module.find_jobs

    def counted(root, seen=None):
        scans.append(root)
        return original(root, seen)

    monkeypatch.setattr(jobs_module, "find_jobs", counted)
    live.add("990301")
    sampler = JobsSampler(Roots())
    assert mine(sampler.sample(1), live) == ["990301"]
    first_scans = len(scans)
    for tick in range(2, 5):
        sampler.sample(tick)
    assert len(scans) - first_scans <= 1  # another Slurm's job may come or go meanwhile
    live.add("990302")
    assert mine(sampler.sample(5), live) == ["990301", "990302"]  # at the next tick
    live.end("990301")
    points = sampler.sample(6)
    assert mine(points, live) == ["990302"]
    assert "990301" not in by_job(points, JobInfo.NAME)
    assert "990301" not in sampler._jobs and "990301" not in sampler._cgroups
    # one removed and one made between two ticks, the count of jobs unchanged
    live.end("990302")
    live.add("990303")
    assert mine(sampler.sample(7), live) == ["990303"]


def test_kept_files_give_the_same_points_as_files_opened_each_time(live):
    for job_id in ("990311", "990312"):
        live.add(job_id)
    kept = JobsSampler(Roots(), budget=FileBudget())
    opened = JobsSampler(Roots(), budget=FileBudget(limit=0))
    few = JobsSampler(Roots(), budget=FileBudget(limit=5))
    for tick in (1, 2):
        shapes = [
            sorted(
                (p.measurement, sorted(p.tags.items()), sorted(p.fields))
                for p in sampler.sample(tick)
                if p.tags["job_id"] in ("990311", "990312")
            )
            for sampler in (kept, opened, few)
        ]
        assert shapes[0] == shapes[1] == shapes[2]
        assert len(shapes[0]) == 4  # job and slurm_job for each
    assert kept._budget.kept > few._budget.kept == 5  # at most the limit kept open
    assert opened._budget.kept == 0
    # the CPU time read through a kept file is the cgroup's own (the sleepers use none
    # that moves between the two reads)
    job = CGROUP / "cpuacct" / live.top / "uid_0" / "job_990311"
    fields = by_job(kept.sample(3), Job.NAME)["990311"].fields
    assert fields[Job.CPU_SECONDS] == int((job / "cpuacct.usage").read_text()) / 1e9
    assert fields[Job.PROCESSES] == 1.0


def test_a_job_whose_processes_all_ended_is_dropped_at_the_next_tick_however_soon(live):
    """cgroup v1 keeps the pid list a ``cgroup.procs`` reader saw, for the same open file,
    until a second passes with no read (kernel/cgroup/cgroup-v1.c, the pidlist's destroy
    delay): a file kept open and re-read every tick under a second would list a dead
    process for ever. A slurmstepd killed with SIGKILL leaves just such a cgroup."""
    live.add("990321")
    sampler = JobsSampler(Roots(), budget=FileBudget())
    assert mine(sampler.sample(1), live) == ["990321"]
    sleeper = live.sleepers.pop("990321")
    sleeper.kill()
    sleeper.wait()
    live.sleepers["990321"] = sleeper  # its cgroups stay, as a killed slurmstepd's do
    for tick in range(2, 6):
        time.sleep(0.3)
        assert mine(sampler.sample(tick), live) == [], f"tick {tick}: a dead process listed"


def test_a_controller_directory_made_later_keeps_the_jobs_state(tmp_path):
    """Slurm makes a job's cgroup in one controller after another: a job first seen in
    ``cpuacct`` alone gains its ``memory`` directory; its files are opened anew and what
    the sampler carried about it (its processes' I/O, its environment) stays."""
    job = tmp_path / "cpuacct" / "slurm" / "uid_0" / "job_8"
    task = job / "step_0" / "task_0"
    task.mkdir(parents=True)
    (job / "cpuacct.usage").write_text("1000000000\n")
    (task / "cgroup.procs").write_text(f"{os.getpid()}\n")
    sampler = JobsSampler(Roots(Path("/proc"), tmp_path, tmp_path), users=lambda uid: None)
    first = by_job(sampler.sample(1), Job.NAME)["8"].fields
    assert Job.MEMORY_BYTES not in first
    state = sampler._jobs["8"]
    memory = tmp_path / "memory" / "slurm" / "uid_0" / "job_8"
    memory.mkdir(parents=True)
    (memory / "memory.usage_in_bytes").write_text("4096\n")
    second = by_job(sampler.sample(2), Job.NAME)["8"].fields
    assert second[Job.MEMORY_BYTES] == 4096.0 and second[Job.CPU_SECONDS] == 1.0
    assert sampler._jobs["8"] is state


def test_a_step_made_and_removed_during_a_job_is_seen_through_the_kept_directories(live):
    """Issue 46: a job's directories stay open and its subtree is checked by ``fstat`` of
    them (cgroup.procs opened relative to them): a new step's process counts at the next
    tick, and no longer once its step cgroup is removed; the same with no descriptor kept
    (every path opened at each read)."""
    live.add("990331")
    kept = JobsSampler(Roots(), budget=FileBudget())
    by_path = JobsSampler(Roots(), budget=FileBudget(limit=0))
    for sampler in (kept, by_path):
        assert by_job(sampler.sample(1), Job.NAME)["990331"].fields[Job.PROCESSES] == 1.0
    assert kept._cgroups["990331"]._directory_fds  # the job's directories are kept open
    assert not by_path._cgroups["990331"]._directory_fds
    job = CGROUP / "cpuacct" / live.top / "uid_0" / "job_990331"
    step = job / "step_1"
    step.mkdir()
    live.made.append(step)
    second = subprocess.Popen(["sleep", "120"])
    try:
        (step / "cgroup.procs").write_text(str(second.pid))
        for sampler in (kept, by_path):
            assert by_job(sampler.sample(2), Job.NAME)["990331"].fields[Job.PROCESSES] == 2.0
        second.kill()
        second.wait()
        step.rmdir()
        live.made.remove(step)
        for sampler in (kept, by_path):
            assert by_job(sampler.sample(3), Job.NAME)["990331"].fields[Job.PROCESSES] == 1.0
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
