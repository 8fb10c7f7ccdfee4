"""The jobs sampler's CPU per job per sample, before and after a change, side by side.

The "before" sampler is ``agent/samplers/jobs.py`` as it was at a git revision (``--before``,
default the commit before the kept-open files and the cached scan), loaded from git into
this process as a module of its own; "after" is the working tree's. Both sample the same N
live job cgroups (``jobs_cgroups.BenchJobs``: root and cgroup v1, removed at the end),
interleaved tick by tick, each tick's ``sample()`` and line-protocol encoding timed with
``time.thread_time``. The two must give the same points (measurements, tags and field
names) or the bench stops: nothing sampled may be dropped for speed. Prints and writes
(``--out``) the median CPU ms per sample and per job per sample of each, and the load
average at the start and the end.

    python bench/agent_overhead/jobs_before_after.py --jobs 50 --ticks 100
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from jobs_cgroups import BenchJobs, tick  # noqa: E402

from agent.samplers.base import Roots  # noqa: E402
from agent.samplers.jobs import JobsSampler  # noqa: E402

BEFORE = "2d5b165"  # the per-job sampler reading every file anew and scanning every tick


def sampler_at(revision: str) -> type:
    """``JobsSampler`` of ``agent/samplers/jobs.py`` at ``revision``."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{revision}:agent/samplers/jobs.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as file:
        file.write(source)
    spec = importlib.util.spec_from_file_location(f"jobs_at_{revision}", file.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    os.unlink(file.name)
    return module.JobsSampler


def shape(points: list) -> list:
    return sorted((p.measurement, sorted(p.tags.items()), sorted(p.fields)) for p in points)


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
    try:
        bench.open()
        samplers = {"before": sampler_at(args.before)(Roots()), "after": JobsSampler(Roots())}
        first = {name: tick([sampler])[2] for name, sampler in samplers.items()}
        if shape(first["before"]) != shape(first["after"]):
            raise SystemExit("before and after sample different points: not comparable")
        reported = {p.tags["job_id"] for p in first["after"]} & set(bench.job_ids)
        if len(reported) != args.jobs:
            raise SystemExit(f"{len(reported)} of the {args.jobs} bench jobs reported")
        cpus: dict[str, list[float]] = {name: [] for name in samplers}
        for round_number in range(args.ticks):
            order = list(samplers) if round_number % 2 == 0 else list(reversed(samplers))
            for name in order:
                cpus[name].append(tick([samplers[name]])[0])
    finally:
        bench.close()
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
        "cpus": os.cpu_count(),
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
