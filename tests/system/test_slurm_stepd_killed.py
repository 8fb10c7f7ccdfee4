"""A job whose slurmstepd is killed with SIGKILL (a crash, an OOM kill of the daemon) is
not reported once Slurm has let it go: the hardest of the issue's three ends of a job,
next to scancel (tests/system/test_slurm_real.py) and a failed epilog. A real one-node Slurm
(tests/support/slurm_cluster.py); skipped only when it cannot start here."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.samplers.base import Roots
from agent.samplers.jobs import JobsSampler
from contract.schema import Job
from tests.support.slurm_cluster import (
    SlurmCluster,
    running_cluster,
)
from tests.system.test_slurm_real import BURN, INTERVAL, by_job, wait_running

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    with running_cluster() as started:
        yield started


def stepd_pids(job_id: str) -> list[int]:
    """The slurmstepd processes of ``job_id`` (their command line names the job)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].startswith(b"slurmstepd") and f"[{job_id}.".encode() in argv[0]:
            found.append(int(entry.name))
    return found


def process_states(cgroup: Path) -> dict[int, str]:
    """Each process left in a cgroup (and below it) with its state letter and parent."""
    states = {}
    for procs in cgroup.rglob("cgroup.procs") if cgroup.exists() else ():
        for pid in procs.read_text().split():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{pid}/stat").read_text()
                state, parent = stat.rsplit(")", 1)[1].split()[:2]
                states[int(pid)] = f"{state} (parent {parent})"
    return states


def remove_stale_cgroups(cluster: SlurmCluster, job_id: str, timeout: float = 30) -> None:
    """What Slurm leaves behind when its slurmstepd was killed: the job's cgroup in every
    controller, removed once its processes are gone (deepest first), so that the machine
    is left as it was found."""
    deadline = time.monotonic() + timeout
    for controller in ("cpuacct", "memory", "cpuset", "freezer", "cpu", "devices"):
        top = cluster.job_cgroup(controller, job_id)
        while top.exists() and time.monotonic() < deadline:
            for directory in [*sorted(top.rglob("*"), key=lambda p: -len(p.parts)), top]:
                if directory.is_dir():
                    with contextlib.suppress(OSError):  # busy until its processes end
                        directory.rmdir()
            time.sleep(0.2)


def test_a_job_whose_slurmstepd_is_killed_is_not_reported_after_slurm_lets_it_go(
    cluster: SlurmCluster,
):
    script = cluster.base / "jobs" / "burn-killed.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(BURN.replace("time.time() + 10", "time.time() + 60"))
    script.chmod(0o755)
    job = cluster.sbatch(script, "--ntasks=1", "--mem=256M")
    wait_running(cluster, [job])
    sampler = JobsSampler(Roots())
    assert job in by_job(sampler.sample(time.time_ns()), Job.NAME)
    pids = stepd_pids(job)
    assert pids, f"no slurmstepd for job {job}"
    killed_at = time.monotonic()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    absent_at = None
    try:
        while time.monotonic() - killed_at < 120 and absent_at is None:
            existed = cluster.job_cgroup("cpuacct", job).exists()
            if job not in by_job(sampler.sample(time.time_ns()), Job.NAME):
                absent_at = time.monotonic()
            else:
                assert existed, "reported after its cgroup was gone"
            time.sleep(INTERVAL)
    finally:
        left = process_states(cluster.job_cgroup("cpuacct", job))
        with contextlib.suppress(Exception):  # Slurm may have let the job go already
            cluster.run("scancel", "--signal=KILL", job)
        remove_stale_cgroups(cluster, job)
    assert absent_at is not None, (
        f"still reported 120 s after kill -9; its cgroup's processes: {left}\n{cluster.logs()}"
    )
    print(
        f"slurmstepd killed: unreported after {absent_at - killed_at:.2f} s; "
        f"Slurm says {cluster.job_states().get(job, 'gone')}"
    )
