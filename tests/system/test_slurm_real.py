"""The jobs sampler against a real Slurm: slurmctld and slurmd on this machine, real jobs.

``tests/support/slurm_cluster.py`` starts munged, slurmctld and slurmd as plain
processes (no systemd) with cgroup v1, proctrack/cgroup, task/cgroup and
jobacct_gather/cgroup. Two batch jobs, submitted at once as ``nobody``, each burn one
CPU for ~10 s holding 64 MiB. The sampler reads the live /sys/fs/cgroup and /proc and
must agree with the job cgroups' own files, and must stop reporting a job within one
sampling interval of its cgroup going away after ``scancel``.

Skipped, with the reason and the daemons' logs, only when the cluster cannot start here
(not root, no cgroup v1, slurm-wlm/munge not installed, a daemon that exits).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.samplers.base import Roots
from agent.samplers.jobs import JobsSampler, parse_int
from contract.schema import Job, JobInfo
from tests.support.slurm_cluster import (
    SlurmCluster,
    running_cluster,
)
from workloads.record.events import read_events_file

pytestmark = pytest.mark.slow

INTERVAL = 1.0  # the sampling interval the test runs the sampler at
BURN = """#!/usr/bin/python3
import time
held = bytearray(64 * 1024 * 1024)  # 64 MiB, touched: resident
for i in range(0, len(held), 4096):
    held[i] = 1
end = time.time() + 10
while time.time() < end:
    pass
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    with running_cluster() as started:
        yield started


def read_usage(cluster: SlurmCluster, job_id: str) -> tuple[float, float]:
    """The job cgroup's own cpuacct.usage (seconds) and memory.usage_in_bytes."""
    cpu = parse_int((cluster.job_cgroup("cpuacct", job_id) / "cpuacct.usage").read_text())
    memory = parse_int((cluster.job_cgroup("memory", job_id) / "memory.usage_in_bytes").read_text())
    return cpu / 1e9, float(memory)


def by_job(points, measurement: str) -> dict:
    return {p.tags["job_id"]: p for p in points if p.measurement == measurement}


def wait_running(cluster: SlurmCluster, jobs: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = cluster.job_states()
        if all(states.get(job) == "RUNNING" for job in jobs) and all(
            cluster.job_cgroup("cpuacct", job).is_dir() for job in jobs
        ):
            return
        time.sleep(0.2)
    raise AssertionError(f"jobs not running: {cluster.job_states()}\n{cluster.logs()}")


def test_two_jobs_seen_measured_and_gone_after_scancel(cluster: SlurmCluster):
    script = cluster.base / "jobs" / "burn.py"
    script.write_text(BURN)
    script.chmod(0o755)
    jobs = [cluster.sbatch(script, "--ntasks=1", "--mem=256M") for _ in range(2)]
    wait_running(cluster, jobs)
    time.sleep(5)  # let the CPU time grow (two cores, shared with other work)

    sampler = JobsSampler(Roots())  # the live /proc and /sys/fs/cgroup
    assert sampler.available()
    before = {job: read_usage(cluster, job) for job in jobs}
    points = sampler.sample(time.time_ns())
    own = {job: read_usage(cluster, job) for job in jobs}  # right after: the same moment
    usage, info = by_job(points, Job.NAME), by_job(points, JobInfo.NAME)
    for job in jobs:
        cpu, memory = own[job]
        fields = usage[job].fields
        assert cpu > 0.5, "the job burnt CPU"
        assert before[job][0] <= fields[Job.CPU_SECONDS] <= cpu  # read between the two
        assert fields[Job.CPU_SECONDS] == pytest.approx(cpu, rel=0.02)
        assert fields[Job.MEMORY_BYTES] == pytest.approx(memory, rel=0.02)
        assert fields[Job.MEMORY_BYTES] > 64 * 1024 * 1024  # the 64 MiB it holds
        assert fields[Job.MEMORY_PEAK_BYTES] >= fields[Job.MEMORY_BYTES]
        assert fields[Job.PROCESSES] >= 1
        assert Job.PROCESS_READ_BYTES in fields  # /proc/<pid>/io is readable as root
        tags = info[job].tags
        assert tags["uid"] == str(cluster.job_uid) and tags["user"] == "nobody"
        assert tags["partition"] == "debug"  # SLURM_JOB_PARTITION of the job's process
        assert "account" not in tags  # no accounting storage: Slurm sets no account
        assert info[job].fields[JobInfo.ALLOCATED_MEMORY_BYTES] == 256 * 1024 * 1024
        assert info[job].fields[JobInfo.ALLOCATED_CPUS] == 1.0  # one core, cpuset.cpus
        assert JobInfo.ALLOCATED_GPUS not in info[job].fields  # no GPU asked, none here

    # scancel one: sample every INTERVAL, watch its cgroup between samples.
    cancelled, other = jobs
    cancel_at = time.monotonic()
    cluster.run("scancel", cancelled)
    gone_at = None
    absent_at = None
    next_sample = time.monotonic()
    while time.monotonic() - cancel_at < 60 and absent_at is None:
        now = time.monotonic()
        if gone_at is None and not cluster.job_cgroup("cpuacct", cancelled).exists():
            gone_at = now
        if now >= next_sample:
            existed = cluster.job_cgroup("cpuacct", cancelled).exists()
            reported = by_job(sampler.sample(time.time_ns()), Job.NAME)
            if cancelled in reported:
                assert existed, "reported after its cgroup was gone"
            else:
                absent_at = time.monotonic()
                assert other in reported or not cluster.job_cgroup("cpuacct", other).exists()
            next_sample += INTERVAL
        time.sleep(0.05)
    assert absent_at is not None, cluster.logs()
    # unreported within an interval of its cgroup going away, or before it: once the
    # cgroup lists no process left (the job's processes killed, the directory not yet
    # removed) the job has ended
    assert gone_at is None or absent_at - gone_at <= INTERVAL + 0.2
    gone = "not yet" if gone_at is None else f"after {gone_at - cancel_at:.2f} s"
    print(f"scancel: cgroup gone {gone}, unreported after {absent_at - cancel_at:.2f} s")
    assert set(sampler._jobs) <= {other}  # nothing kept about the cancelled job


def test_the_agent_command_reports_a_running_job(cluster: SlurmCluster, repo_env):
    """The real CLI, ``agent sample --once --samplers jobs``, on the live host."""
    script = cluster.base / "jobs" / "burn.py"
    script.write_text(BURN)
    script.chmod(0o755)
    job = cluster.sbatch(script, "--ntasks=1", "--mem=128M")
    wait_running(cluster, [job])
    out = subprocess.run(
        [sys.executable, "-m", "agent", "sample", "--once", "--samplers", "jobs"],
        capture_output=True,
        text=True,
        env=repo_env,
        timeout=60,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout
    points = json.loads(out)
    info = [p for p in points if p["measurement"] == "slurm_job" and p["tags"]["job_id"] == job]
    assert len(info) == 1 and info[0]["tags"]["user"] == "nobody"
    assert info[0]["fields"]["allocated_memory_bytes"] == 128 * 1024 * 1024
    cluster.run("scancel", job)


RANK = """import sys, time
from pathlib import Path
from contract.schema import Event
from workloads.record.events import EventWriter, FileSink
writer = EventWriter(FileSink(Path(sys.argv[1])), "slurm-run", 0, "none")
writer.emit(Event.RUN_START, {})
writer.close()
time.sleep(4)
"""


def test_a_rank_started_by_srun_names_its_job_and_step(cluster: SlurmCluster):
    """A rank (srun step 0 of a batch job) writes run_start; its slurm_job_id is the
    job_id of the job series the agent's sampler reports for it."""
    repo = Path(__file__).resolve().parents[2]
    rank = cluster.base / "jobs" / "rank.py"
    rank.write_text(RANK)
    events = cluster.base / "jobs" / "rank-events.jsonl"
    batch = cluster.base / "jobs" / "batch.sh"
    # Constant text; the paths go in as arguments of srun, not through the shell.
    batch.write_text('#!/bin/sh\nexec srun /usr/bin/python3 "$1" "$2"\n')
    batch.chmod(0o755)
    env_option = f"--export=ALL,PYTHONPATH={repo}"
    job = cluster.run(
        "sbatch",
        "--parsable",
        "--ntasks=1",
        "--mem=128M",
        env_option,
        "--output",
        str(cluster.base / "jobs" / "%j.out"),
        str(batch),
        str(rank),
        str(events),
        user=cluster.job_uid,
    ).strip()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (events.exists() and events.read_text()):
        time.sleep(0.2)
    assert events.exists(), cluster.logs()
    (start,) = read_events_file(events)
    assert start.fields["event"] == "run_start"
    assert start.fields["slurm_job_id"] == job
    assert start.fields["slurm_step_id"] == "0"  # srun's first step in the batch job
    reported = by_job(JobsSampler(Roots()).sample(time.time_ns()), Job.NAME)
    assert job in reported  # the run's job is a job series of this node
    cluster.run("scancel", job)


def scontrol_job(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    """Slurm's own record of a job (``scontrol show job``), as its KEY=VALUE words."""
    out = cluster.run("scontrol", "show", "job", job_id)
    return dict(word.split("=", 1) for word in out.split() if "=" in word)


def slurm_seconds(text: str) -> int:
    """``RunTime``: [days-]HH:MM:SS."""
    days, _, clock = text.rpartition("-")
    hours, minutes, seconds = (int(part) for part in clock.split(":"))
    return (int(days or 0) * 24 + hours) * 3600 + minutes * 60 + seconds


def slurm_bytes(text: str) -> int:
    """``MinMemoryNode``: 256M (MiB), 2G (GiB)."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def test_collector_job_agrees_with_slurms_record_of_two_jobs_at_once(
    cluster: SlurmCluster, tmp_path, repo_env
):
    """The real agent (jobs sampler, 1 s) pushes to a real ``collector serve`` while two
    jobs run at once; ``collector job JOBID`` through the read API then agrees with
    ``scontrol show job``: elapsed within one sampling interval (plus Slurm's whole
    seconds), allocated CPUs and memory equal, and each job saw the other beside it."""
    from bench.reliability import harness

    _, token_file = harness.write_token_file(tmp_path)
    collector = harness.Collector(db=tmp_path / "c.sqlite", token_file=token_file,
                                  log=tmp_path / "collector.log")  # fmt: skip
    config = tmp_path / "agent.toml"
    config.write_text(
        f'host = "{cluster.node}"\ninterval_seconds = {INTERVAL}\nsamplers = ["jobs"]\n'
        f'[push]\nurl = "{{url}}"\ntoken_file = "{token_file}"\nbatch_seconds = 0\n'
        f'spool_dir = "{tmp_path / "spool"}"\n[metrics]\nlisten = ""\n'
    )
    collector.start()
    config.write_text(config.read_text().replace("{url}", collector.url))
    config.chmod(0o600)
    agent_log = (tmp_path / "agent.log").open("wb")
    agent = subprocess.Popen(
        [sys.executable, "-m", "agent", "run", "--config", str(config)],
        stdout=agent_log, stderr=subprocess.STDOUT, env=repo_env,
    )  # fmt: skip
    try:
        # the agent samples before the jobs start (it takes seconds to start on a busy host)
        deadline = time.monotonic() + 60
        while "agent started" not in (tmp_path / "agent.log").read_text():
            assert agent.poll() is None and time.monotonic() < deadline, "the agent did not start"
            time.sleep(0.2)
        assert "samplers=jobs" in (tmp_path / "agent.log").read_text()
        time.sleep(2 * INTERVAL)
        script = cluster.base / "jobs" / "burn.py"
        script.write_text(BURN)
        script.chmod(0o755)
        jobs = [
            cluster.sbatch(script, "--ntasks=1", "--mem=256M"),
            cluster.sbatch(script, "--ntasks=1", "--mem=192M"),
        ]
        wait_running(cluster, jobs)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and (
            set(cluster.job_states()) & set(jobs) or any(cluster._any_cgroup(j) for j in jobs)
        ):
            time.sleep(0.5)
        assert not set(cluster.job_states()) & set(jobs), cluster.logs()
        time.sleep(3 * INTERVAL)  # the agent's last ticks pushed (batch_seconds 0)

        def collector_cli(*argv: str) -> str:
            done = subprocess.run(
                [sys.executable, "-m", "collector", *argv, "--collector", collector.url,
                 "--token-file", str(token_file)],
                capture_output=True, text=True, env=repo_env, timeout=120,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr + (tmp_path / "agent.log").read_text()
            return done.stdout

        listed = {row["job_id"] for row in json.loads(collector_cli("jobs", "--format", "json"))}
        assert set(jobs) <= listed
        for job, other in (jobs, jobs[::-1]):
            view = json.loads(collector_cli("job", job, "--format", "json"))
            slurm = scontrol_job(cluster, job)
            mine = view["job"]
            print(
                f"job {job}: Slurm RunTime {slurm['RunTime']}, NumCPUs {slurm['NumCPUs']},",
                f"MinMemoryNode {slurm['MinMemoryNode']}; collector elapsed",
                f"{mine['elapsed_seconds']} s, CPUs {mine['allocated_cpus']}, memory",
                f"{mine['allocated_memory_bytes']}, CPU s {mine['cpu_seconds']}",
            )
            assert slurm["JobState"] == "COMPLETED"
            assert mine["nodes"] == [cluster.node] and mine["user"] == "nobody"
            assert mine["partition"] == slurm["Partition"]
            interval = view["nodes"][0]["interval_seconds"]
            assert interval == pytest.approx(INTERVAL, rel=0.2)
            # Slurm writes whole seconds: its RunTime is within 1 s of the true one
            assert abs(mine["elapsed_seconds"] - slurm_seconds(slurm["RunTime"])) <= interval + 1
            assert mine["allocated_cpus"] == int(slurm["NumCPUs"])
            assert mine["allocated_memory_bytes"] == slurm_bytes(slurm["MinMemoryNode"])
            # (the CPU time it got on a busy 2-core machine: no record of Slurm to match)
            assert 0.5 < mine["cpu_seconds"] <= mine["allocated_cpu_seconds"] * 1.05
            shared = [f for f in view["findings"] if f["rule"] == "job_shared_node"]
            assert shared and shared[0]["evidence"]["other_jobs"] == [other]
            summary = json.loads(collector_cli("job", job, "--summary"))
            assert summary["job_id"] == job and summary["cpus"] == mine["allocated_cpus"]
    finally:
        agent.terminate()
        agent.wait(30)
        agent_log.close()
        collector.stop()
