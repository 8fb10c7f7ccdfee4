"""A store of many Slurm jobs' samples for timing `collector jobs` and `collector job`.

``--jobs`` jobs (default 120) on ``--hosts`` hosts (default 4), each job on one host (every
fifth on two), one after another per host with two at a time, each ``--minutes`` long
(default 30) sampled at 1 Hz: the jobs sampler's ``job`` (7 fields) and ``slurm_job`` (4)
series, and one GPU process per job GPU (``gpu_process``, tagged with the job). Written
through ``SqliteStore.write_points`` (the store's own write path) and compacted.

    python bench/jobs/generate.py --db runs/bench-jobs.sqlite
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from collector.store import SqliteStore
from tests.support.run_builder import RunBuilder


def builder(jobs: int, hosts: int, minutes: float) -> RunBuilder:
    names = tuple(f"node{n:02d}" for n in range(1, hosts + 1))
    run = RunBuilder("bench-jobs", hosts=names, write_samples=False)
    seconds = minutes * 60
    for n in range(jobs):
        host = n % hosts
        slot = n // hosts  # two at a time on a host, each starting half a job after
        on = (names[host],) if n % 5 else (names[host], names[(host + 1) % hosts])
        run.job(str(100_000 + n), hosts=on, start_s=slot * seconds / 2, seconds=seconds,
                cpus=8, cpus_busy=3.0 + n % 4, gpus=("0", "1"), gpu_processes=("0",),
                user=f"user{n % 7}", read_bytes_per_s=1e6)  # fmt: skip
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=Path("runs/bench-jobs.sqlite"))
    parser.add_argument("--jobs", type=int, default=120)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--minutes", type=float, default=30.0)
    args = parser.parse_args()
    if args.db.exists():
        raise SystemExit(f"{args.db} exists: remove it first")
    args.db.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    run = builder(args.jobs, args.hosts, args.minutes)
    store = SqliteStore(args.db)
    samples = 0
    for spec in run.jobs:  # one job at a time: the points of all would not fit in memory
        single = RunBuilder("bench-jobs", hosts=run.hosts, write_samples=False)
        single.jobs = [spec]
        points = single.job_points()
        samples += sum(len(p.fields) for p in points)
        store.write_points(points)
    store.compact()
    store.close()
    took = time.perf_counter() - started
    megabytes = args.db.stat().st_size / 1e6
    print(
        f"{args.db}: {len(run.jobs)} jobs, {samples:,} samples, {megabytes:.0f} MB in {took:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
