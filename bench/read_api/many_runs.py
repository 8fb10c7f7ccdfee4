"""The read API's runs table over many runs in a real SQLite file: how long
``collector runs`` (and ``GET /api/v1/runs``) takes, cold and warm.

    python bench/read_api/many_runs.py --runs 20000 [--db PATH]

Each run: one host, one rank, two epochs of four steps, finished (the builder's
synthetic events, no samples; seven variants copied to 20,000 run ids). Prints the build
time, then the runs table's time cold (a
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
from contract.point import Point
from tests.support.run_builder import RunBuilder

HOUR_NS = 3600 * 10**9


VARIANTS = 7  # run i is a copy of variant i % 7, moved to its own hour


def variant(number: int) -> RunBuilder:
    """One host, one rank, two epochs of 640 images (4 steps) in 10 + ``number`` s each,
    finished."""
    run = RunBuilder(f"variant{number}", hosts=("node00",), write_samples=False)
    for _ in range(2):
        run.epoch(seconds=10 + number, images_per_rank=640)
    return run


def many_runs(path: Path, count: int) -> None:
    """``count`` finished runs ``run00000`` .. into ``path``, an hour apart, each a copy of
    ``variant(i % VARIANTS)``'s events (host node<i % 16>)."""
    templates = [variant(number).event_points() for number in range(VARIANTS)]
    with SqliteStore(path) as store:
        batch: list[Point] = []
        for i in range(count):
            shift = i * HOUR_NS
            for point in templates[i % VARIANTS]:
                tags = dict(point.tags, run_id=f"run{i:05d}", host=f"node{i % 16:02d}")
                batch.append(Point(point.measurement, tags, point.fields, point.time_ns + shift))
            if len(batch) > 50_000:
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
