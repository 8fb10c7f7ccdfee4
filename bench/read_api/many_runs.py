"""The read API's runs table over many runs in a real SQLite file: how long
``collector runs`` (and ``GET /api/v1/runs``) takes, cold and warm.

    python bench/read_api/many_runs.py --runs 20000 [--db PATH]

Each run: one host, one rank, two epochs of four steps, finished (the builder's
synthetic events, no samples). Prints the build time, then the runs table's time cold (a
new store object: nothing kept) and warm (the same store again), and the load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from collector.store import SqliteStore
from collector.views.reports import runs_rows
from tests.support.run_builder import RunBuilder

HOUR_NS = 3600 * 10**9


def many_runs(path: Path, count: int) -> None:
    """``count`` finished runs ``run00000`` .. into ``path``, an hour apart; run i does
    2 epochs of 640 images (4 steps), in 10 + i % 7 seconds each."""
    with SqliteStore(path) as store:
        batch = []
        for i in range(count):
            run = RunBuilder(
                f"run{i:05d}",
                hosts=(f"node{i % 16:02d}",),
                t0_ns=1_700_000_000 * 10**9 + i * HOUR_NS,
                write_samples=False,
            )
            for _ in range(2):
                run.epoch(seconds=10 + i % 7, images_per_rank=640)
            batch += run.event_points()
            if len(batch) > 20_000:
                store.write_points(batch)
                batch = []
        store.write_points(batch)


def timed_rows(path: Path) -> tuple[float, float, list]:
    with SqliteStore(path) as store:
        started = time.perf_counter()
        rows = runs_rows(store)
        cold = time.perf_counter() - started
        started = time.perf_counter()
        runs_rows(store)
        warm = time.perf_counter() - started
    return cold, warm, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--db", type=Path, default=None)
    args = parser.parse_args()
    path = args.db or Path(tempfile.mkdtemp()) / "many-runs.sqlite"
    if not path.exists():
        started = time.perf_counter()
        many_runs(path, args.runs)
        print(f"built {args.runs} runs in {time.perf_counter() - started:.1f} s: {path}")
    cold, warm, rows = timed_rows(path)
    print(
        f"runs table of {len(rows)} runs: cold {cold:.2f} s, warm {warm:.2f} s "
        f"(load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
