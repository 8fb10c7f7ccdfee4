"""The jobs sampler's CPU per job per sample, before and after a change, side by side.

Each side runs in a process of its own (``jobs_tick_worker.py``) from its own tree: "before"
from the repository as it was at a git revision (``--before``, unpacked with ``git
archive`` into a temporary directory), "after" from the working tree, so that everything
a tick runs counts (the sampler, ``agent/samplers/base.py``'s file reading, the
line-protocol encoding of ``contract/point.py``), not the sampler's module alone. Both
sample the same N live job cgroups (``jobs_cgroups.BenchJobs``: root and cgroup v1,
removed at the end), interleaved tick by tick (the order reversed every other tick), each
tick's ``sample()`` and line-protocol encoding timed with ``time.thread_time`` in its
process. The two must give the same points (measurements, tags and field names) or the
bench stops: nothing sampled may be dropped for speed. Prints and writes (``--out``) the
median CPU ms per sample and per job per sample of each, and the load average at the
start and the end.

    python bench/agent_overhead/jobs_before_after.py --jobs 50 --ticks 100
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from jobs_cgroups import BenchJobs  # noqa: E402

BEFORE = "01128b5"  # main before issue 46's per-job changes


def unpack(revision: str, into: Path) -> Path:
    """The repository's ``agent`` and ``contract`` at ``revision``, under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", revision, "agent", "contract", "netserve"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def machine() -> str:
    """The CPU model, its count and the OS, as every figure must name them."""
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.machine(),
    )
    return f"{os.cpu_count()} x {model}, {platform.platform()}"


class Worker:
    """A ``jobs_tick_worker.py`` process run from ``tree``."""

    def __init__(self, tree: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "jobs_tick_worker.py")],
            env=dict(os.environ, PYTHONPATH=str(tree)),
            cwd=str(tree),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def tick(self, shape: bool = False) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("tick shape\n" if shape else "tick\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.write("quit\n")
            self.process.stdin.close()
        self.process.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--ticks", type=int, default=100)
    parser.add_argument("--before", default=BEFORE, help="git revision of the 'before' sampler")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "jobs-before-after.json"
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: it makes cgroups and reads other processes' environments")
    load_start = os.getloadavg()
    bench = BenchJobs(args.jobs)
    before_tree = Path(tempfile.mkdtemp(prefix="jobs-before-"))
    workers: dict[str, Worker] = {}
    try:
        bench.open()
        workers["before"] = Worker(unpack(args.before, before_tree))
        workers["after"] = Worker(REPO)
        first = {name: worker.tick(shape=True)["shape"] for name, worker in workers.items()}
        if first["before"] != first["after"]:
            raise SystemExit("before and after sample different points: not comparable")
        reported = {dict(tags)["job_id"] for _, tags, _ in first["after"]} & set(bench.job_ids)
        if len(reported) != args.jobs:
            raise SystemExit(f"{len(reported)} of the {args.jobs} bench jobs reported")
        cpus: dict[str, list[float]] = {name: [] for name in workers}
        for round_number in range(args.ticks):
            order = list(workers) if round_number % 2 == 0 else list(reversed(workers))
            for name in order:
                cpus[name].append(workers[name].tick()["cpu"])
    finally:
        for worker in workers.values():
            worker.close()
        bench.close()
        shutil.rmtree(before_tree, ignore_errors=True)
    load_end = os.getloadavg()
    rows = {
        name: {
            "cpu_ms_per_sample_median": round(statistics.median(values) * 1e3, 3),
            "cpu_ms_per_job_per_sample": round(statistics.median(values) * 1e3 / args.jobs, 4),
        }
        for name, values in cpus.items()
    }
    out = {
        "jobs": args.jobs,
        "ticks": args.ticks,
        "before_revision": args.before,
        "machine": machine(),
        "python": platform.python_version(),
        "load_average_start": load_start,
        "load_average_end": load_end,
        "variants": rows,
        "speedup": round(
            rows["before"]["cpu_ms_per_sample_median"] / rows["after"]["cpu_ms_per_sample_median"],
            2,
        ),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"{args.jobs} job cgroups, {args.ticks} ticks each, interleaved; load average "
          f"{load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end")  # fmt: skip
    print(f"{'sampler':8} {'CPU ms/sample':>14} {'ms per job':>11}")
    for name, row in rows.items():
        print(f"{name:8} {row['cpu_ms_per_sample_median']:14.2f} "
              f"{row['cpu_ms_per_job_per_sample']:11.3f}")  # fmt: skip
    print(f"after is {out['speedup']}x cheaper")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
