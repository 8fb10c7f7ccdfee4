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
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def timed_process(argv: list[str], repeat: int) -> list[float]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
        times.append(time.perf_counter() - started)
    return times


def in_process(db: Path, run_id: str, repeat: int) -> dict[str, list[float]]:
    """Each repeat on a fresh store handle: events, the one series read, the whole report."""
    from collector.store import SqliteStore

    from collector.epochs import HOST_TOTALS, build_report, epoch_windows, read_host_series

    out: dict[str, list[float]] = {"events": [], "series": [], "report": [], "samples": []}
    for _ in range(repeat):
        with SqliteStore(db) as store:
            started = time.perf_counter()
            windows = epoch_windows(store.events(run_id))
            out["events"].append(time.perf_counter() - started)
            started = time.perf_counter()
            data = read_host_series(
                store,
                HOST_TOTALS,
                {w.host for w in windows},
                min(w.start_ns for w in windows),
                max(w.end_ns for w in windows),
            )
            out["series"].append(time.perf_counter() - started)
            out["samples"].append(sum(len(s.times_ns) for ss in data.values() for s in ss))
        with SqliteStore(db) as store:
            started = time.perf_counter()
            build_report(store, run_id)
            out["report"].append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=REPO / "runs" / "bench-report.sqlite")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import generate  # bench/report/generate.py, beside this file

    if not args.db.exists():
        print(generate.generate(args.db))
    run_id = generate.RUN_ID

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
    imports = timed_process(
        [sys.executable, "-c", "import collector.reports_cli, collector.store, rich.table"],
        args.repeat,
    )
    inside = in_process(args.db, run_id, args.repeat)

    def row(name: str, values: list[float]) -> str:
        return (
            f"| {name} | {statistics.median(values):.3f} | {min(values):.3f} | {max(values):.3f} |"
        )

    print(f"\nstore: {args.db} ({args.db.stat().st_size / 1e6:.0f} MB), repeat {args.repeat}")
    print(f"samples read by the report: {int(inside['samples'][0]):,}\n")
    print("| step | median s | min s | max s |")
    print("| --- | ---: | ---: | ---: |")
    print(row("`collector report` process, JSON to /dev/null", cli))
    print(row("process start + imports only", imports))
    print(row("in process: build_report (all of the below)", inside["report"]))
    print(row("in process: events -> epoch windows", inside["events"]))
    print(row("in process: list_series + read_series", inside["series"]))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
