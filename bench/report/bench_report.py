"""Time ``collector report`` on the benchmark store (target: under 1 s).

    python bench/report/bench_report.py [--db runs/bench-report.sqlite] [--repeat 5]

Generates the store first when it is missing (bench/report/generate.py). Measures, in one
run and side by side:

- ``collector report RUN --format json`` as a fresh process (what a user waits for),
  and a fresh process that only imports the same modules (the fixed start-up cost);
- in-process: the store reads (events, series) and the arithmetic, separately.

Prints a Markdown table for docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


Timing = tuple[float, float]  # (wall seconds, CPU seconds)


def timed_process(argv: list[str], repeat: int) -> list[Timing]:
    """Wall and CPU (user + system, from the children's rusage) of a fresh process."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    times = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        times.append((wall, cpu))
    return times


class Clock:
    """Wall and process CPU time of a block."""

    def __enter__(self) -> Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.timing = (time.perf_counter() - self.wall, time.process_time() - self.cpu)


def in_process(db: Path, run_id: str, repeat: int) -> tuple[dict[str, list[Timing]], int]:
    """Each repeat on a fresh store handle: events, the one series read, the whole report."""
    from collector.analysis.epochs import (
        HOST_TOTALS,
        build_report,
        epoch_windows,
        read_host_series,
    )
    from collector.analysis.run import read_run
    from collector.store import SqliteStore

    out: dict[str, list[Timing]] = {"events": [], "series": [], "report": []}
    samples = 0
    for _ in range(repeat):
        with SqliteStore(db) as store:
            with Clock() as clock:
                windows = epoch_windows(read_run(store, run_id))
            out["events"].append(clock.timing)
            with Clock() as clock:
                data = read_host_series(
                    store,
                    HOST_TOTALS,
                    {w.host for w in windows},
                    min(w.start_ns for w in windows),
                    max(w.end_ns for w in windows),
                )
            out["series"].append(clock.timing)
            samples = sum(len(s.times_ns) for ss in data.values() for s in ss)
        with SqliteStore(db) as store, Clock() as clock:
            build_report(store, run_id)
        out["report"].append(clock.timing)
    return out, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=REPO / "runs" / "bench-report.sqlite")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import generate  # bench/report/generate.py, beside this file

    if not args.db.exists():
        print(generate.generate(args.db))
    run_id = generate.RUN_ID

    load_before = os.getloadavg()[0]
    cli = timed_process(
        [
            sys.executable,
            "-m",
            "collector",
            "report",
            run_id,
            "--db",
            str(args.db),
            "--format",
            "json",
        ],
        args.repeat,
    )
    table = timed_process(
        [sys.executable, "-m", "collector", "report", run_id, "--db", str(args.db)],
        args.repeat,
    )
    imports = timed_process(
        [sys.executable, "-c", "import collector.views.reports, collector.store"],
        args.repeat,
    )
    inside, samples = in_process(args.db, run_id, args.repeat)
    load_after = os.getloadavg()[0]

    def row(name: str, values: list[Timing]) -> str:
        walls = [wall for wall, _ in values]
        cpus = [cpu for _, cpu in values]
        return (
            f"| {name} | {statistics.median(walls):.3f} | {min(walls):.3f} | "
            f"{statistics.median(cpus):.3f} |"
        )

    print(f"\nstore: {args.db} ({args.db.stat().st_size / 1e6:.0f} MB), repeat {args.repeat}")
    print(f"samples read by the report: {samples:,}")
    print(
        f"load average (1 min) before/after: {load_before:.1f} / {load_after:.1f} "
        f"on {os.cpu_count()} CPUs\n"
    )
    print("| step | wall median s | wall min s | CPU median s |")
    print("| --- | ---: | ---: | ---: |")
    print(row("`collector report` process, JSON to /dev/null", cli))
    print(row("`collector report` process, table to /dev/null", table))
    print(row("process start + imports only", imports))
    print(row("in process: build_report (all of the below)", inside["report"]))
    print(row("in process: events -> epoch windows", inside["events"]))
    print(row("in process: list_series + read_series", inside["series"]))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
