"""The agent's cost per sample with per-job sampling on N live job cgroups, against without.

Makes N (default 50) real cgroup v1 job directories the way Slurm's cgroup/v1 plugin lays
them out, under a bench-owned ``slurm_bench<pid>`` directory of the live hierarchies:
``/sys/fs/cgroup/{cpuacct,memory,cpuset}/slurm_bench<pid>/uid_0/job_<id>/step_0/task_0``,
each holding one sleeping process started with the job's ``SLURM_JOB_ID``,
``SLURM_JOB_USER``, ``SLURM_JOB_PARTITION`` and ``SLURM_JOB_ACCOUNT`` (what the jobs
sampler reads from ``/proc/<pid>/environ``), and a ``memory.limit_in_bytes``. Needs root
and cgroup v1; everything it made is removed at the end, whatever happens.

Then, in this process, interleaved tick by tick (``--ticks``, default 60):

- ``without``: the node samplers the agent runs by default here (every one of ``cpu``,
  ``memory``, ``disk``, ``net``, ``infiniband``, ``nfs`` that finds its data);
- ``with jobs``: the same plus the ``jobs`` sampler;
- ``jobs alone``.

Each tick of a variant is its samplers' ``sample()`` and the encoding of their points as
line protocol (what the agent then spools and pushes), timed with ``time.thread_time``
(CPU) and ``perf_counter`` (wall). Before the job cgroups exist, ``jobs alone`` is also
timed on the node as it is (``no bench jobs``). Prints a table and writes JSON (``--out``).

    python bench/agent_overhead/jobs_cgroups.py --jobs 50 --ticks 60
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from agent.samplers import make_sampler  # noqa: E402
from agent.samplers.base import Roots  # noqa: E402
from contract.point import encode_lines  # noqa: E402
from contract.schema import Job, JobInfo  # noqa: E402

CGROUP = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpuacct", "memory", "cpuset")
NODE_SAMPLERS = ("cpu", "memory", "disk", "net", "infiniband", "nfs")
FIRST_JOB_ID = 990001


class BenchJobs:
    """N job cgroups with one sleeping process each; ``close()`` removes them."""

    def __init__(self, count: int) -> None:
        self.top = f"slurm_bench{os.getpid()}"
        self.made: list[Path] = []  # directories, in creation order
        self.sleepers: list[subprocess.Popen[bytes]] = []
        self.job_ids = [str(FIRST_JOB_ID + n) for n in range(count)]

    def _mkdir(self, path: Path, controller: str) -> None:
        path.mkdir()
        self.made.append(path)
        if controller == "cpuset":  # a cpuset cgroup takes no task before cpus and mems
            for name in ("cpuset.cpus", "cpuset.mems"):
                (path / name).write_text((path.parent / name).read_text())

    def open(self) -> None:
        for controller in CONTROLLERS:
            if not (CGROUP / controller / "cgroup.procs").exists():
                raise SystemExit(f"no cgroup v1 {controller} hierarchy at {CGROUP}")
        for controller in CONTROLLERS:
            self._mkdir(CGROUP / controller / self.top, controller)
            self._mkdir(CGROUP / controller / self.top / "uid_0", controller)
        for job_id in self.job_ids:
            tasks = []
            for controller in CONTROLLERS:
                job = CGROUP / controller / self.top / "uid_0" / f"job_{job_id}"
                for path in (job, job / "step_0", job / "step_0" / "task_0"):
                    self._mkdir(path, controller)
                if controller == "memory":
                    (job / "memory.limit_in_bytes").write_text(str(256 * 1024 * 1024))
                tasks.append(job / "step_0" / "task_0" / "cgroup.procs")
            env = {
                "PATH": "/usr/bin:/bin",
                "SLURM_JOB_ID": job_id,
                "SLURM_JOB_USER": "root",
                "SLURM_JOB_PARTITION": "bench",
                "SLURM_JOB_ACCOUNT": "bench",
                "SLURM_STEP_ID": "0",
            }
            sleeper = subprocess.Popen(["sleep", "3600"], env=env)
            self.sleepers.append(sleeper)
            for procs in tasks:
                procs.write_text(str(sleeper.pid))

    def close(self) -> None:
        for sleeper in self.sleepers:
            if sleeper.poll() is None:
                sleeper.send_signal(signal.SIGKILL)
            sleeper.wait(timeout=30)
        for path in reversed(self.made):  # children first
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # a killed task may take a moment to leave
                    time.sleep(0.1)


def samplers(names: tuple[str, ...]) -> list:
    made = [make_sampler(name, Roots()) for name in names]
    return [sampler for sampler in made if sampler.available()]


def tick(chosen: list) -> tuple[float, float, list]:
    cpu, wall = time.thread_time(), time.perf_counter()
    points = []
    now = time.time_ns()
    for sampler in chosen:
        points.extend(sampler.sample(now))
    encode_lines(points)
    return time.thread_time() - cpu, time.perf_counter() - wall, points


def stats(cpus: list[float], walls: list[float], points: int) -> dict:
    return {
        "ticks": len(cpus),
        "cpu_ms_per_sample_median": round(statistics.median(cpus) * 1e3, 3),
        "cpu_ms_per_sample_mean": round(statistics.fmean(cpus) * 1e3, 3),
        "wall_ms_per_sample_median": round(statistics.median(walls) * 1e3, 3),
        "points_per_sample": points,
    }


def measure(variants: dict[str, list], ticks: int) -> dict[str, dict]:
    for chosen in variants.values():  # the first tick reads environments, builds state
        tick(chosen)
    got: dict[str, tuple[list[float], list[float], int]] = {n: ([], [], 0) for n in variants}
    for _ in range(ticks):
        for name, chosen in variants.items():
            cpu, wall, points = tick(chosen)
            cpus, walls, _ = got[name]
            cpus.append(cpu)
            walls.append(wall)
            got[name] = (cpus, walls, len(points))
    return {name: stats(*values) for name, values in got.items()}


def series_per_job(points: list, job_ids: set[str]) -> dict[str, float]:
    """Fields (each one a Prometheus series) of the bench's jobs, per job."""
    mine = [p for p in points if p.tags.get("job_id") in job_ids]
    usage = [len(p.fields) for p in mine if p.measurement == Job.NAME]
    info = [len(p.fields) for p in mine if p.measurement == JobInfo.NAME]
    return {
        "jobs_reported": len(usage),
        "job_series_per_job": statistics.fmean(usage) if usage else 0,
        "slurm_job_series_per_job": statistics.fmean(info) if info else 0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--ticks", type=int, default=60)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results-jobs-cgroups.json"
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: it makes cgroups and reads other processes' environments")
    node = samplers(NODE_SAMPLERS)
    before = measure({"jobs alone, no bench jobs": [make_sampler("jobs", Roots())]}, args.ticks)
    bench = BenchJobs(args.jobs)
    try:
        bench.open()
        jobs = make_sampler("jobs", Roots())
        variants = {
            "without (node samplers)": node,
            "with jobs (node + jobs)": [*node, jobs],
            "jobs alone": [make_sampler("jobs", Roots())],
        }
        results = measure(variants, args.ticks)
        _, _, points = tick([jobs])
        per_job = series_per_job(points, set(bench.job_ids))
    finally:
        bench.close()
    results = {**before, **results}
    without = results["without (node samplers)"]["cpu_ms_per_sample_median"]
    with_jobs = results["with jobs (node + jobs)"]["cpu_ms_per_sample_median"]
    out = {
        "jobs": args.jobs,
        "node_samplers": [sampler.name for sampler in node],
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "variants": results,
        "added_cpu_ms_per_sample": round(with_jobs - without, 3),
        "added_cpu_ms_per_job_per_sample": round((with_jobs - without) / args.jobs, 4),
        **per_job,
    }
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"{args.jobs} job cgroups, node samplers: {', '.join(out['node_samplers'])}")
    print(f"{'variant':30} {'CPU ms/sample':>14} {'mean':>7} {'wall ms':>8} {'points':>7}")
    for name, row in results.items():
        print(f"{name:30} {row['cpu_ms_per_sample_median']:14.2f} "
              f"{row['cpu_ms_per_sample_mean']:7.2f} {row['wall_ms_per_sample_median']:8.2f} "
              f"{row['points_per_sample']:7d}")  # fmt: skip
    print(f"added by per-job sampling: {out['added_cpu_ms_per_sample']:.2f} ms CPU per sample, "
          f"{out['added_cpu_ms_per_job_per_sample']:.3f} ms per job; series per job: "
          f"{per_job['job_series_per_job']:g} job + {per_job['slurm_job_series_per_job']:g} "
          f"slurm_job ({per_job['jobs_reported']} jobs reported)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
