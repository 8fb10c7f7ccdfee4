"""The read API's runs table over 20,000 runs in a real SQLite file.

Before (issue 30): 12.7 s in a request thread on every request, each run's epoch events
read by a query of its own, the 256-result cache cycled through, and 40,000 run_start and
run_end events decoded for the run records. Now the summaries are kept apart (room for
50,000 runs), the runs not summarised yet read 500 a query, and a run's record rebuilt
only when it changed. Timings are in docs/reliability.md (bench/read_api/many_runs.py),
not asserted here: this machine's load changes them several times over.

Seven runs are written through the store's write path; the test copies them to 20,000
run ids in the same file with SQL (writing 20,000 runs point by point takes minutes).
"""

from __future__ import annotations

import sqlite3

import pytest

from bench.read_api.many_runs import HOUR_NS, VARIANTS, variant
from collector.store import SqliteStore
from collector.views.reports import runs_rows

RUNS = 20_000


def copy_runs(path, count: int) -> None:
    """Run i := variant i % VARIANTS moved i hours later, as run<i> on host node<i % 16>."""
    with sqlite3.connect(path) as conn:
        for i in range(count):
            source, target, shift = f"variant{i % VARIANTS}", f"run{i:05d}", i * HOUR_NS
            host = f"node{i % 16:02d}"
            conn.execute(
                "INSERT INTO events SELECT ?, time_ns + ?, ?, rank, event, framework, fields"
                " FROM events WHERE run_id = ?",
                (target, shift, host, source),
            )
            conn.execute(
                "INSERT INTO runs SELECT ?, framework, first_ns + ?, last_ns + ? FROM runs"
                " WHERE run_id = ?",
                (target, shift, shift, source),
            )
            conn.execute("INSERT INTO run_hosts VALUES (?, ?)", (target, host))
        for number in range(VARIANTS):
            for table in ("events", "runs", "run_hosts"):
                conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (f"variant{number}",))


@pytest.mark.slow
def test_the_runs_table_over_20000_runs_has_every_run_with_its_own_values(tmp_path):
    path = tmp_path / "many-runs.sqlite"
    references = {}
    with SqliteStore(path) as store:
        for number in range(VARIANTS):
            store.write_points(variant(number).event_points())
        references = {row["run_id"]: row for row in runs_rows(store)}
    assert len(references) == VARIANTS
    copy_runs(path, RUNS)

    with SqliteStore(path) as store:
        rows = runs_rows(store)  # cold: nothing kept
        again = runs_rows(store)  # warm
        assert again == rows

    assert len(rows) == RUNS
    assert [row["run_id"] for row in rows] == [f"run{i:05d}" for i in reversed(range(RUNS))]
    for i, row in zip(reversed(range(RUNS)), rows, strict=True):
        reference = references[f"variant{i % VARIANTS}"]
        assert row["images_per_second"] == reference["images_per_second"], row
        assert row["startup_seconds"] == reference["startup_seconds"]
        assert row["world_size"] == 1 and row["state"] == "finished"
        assert row["hosts"] == [f"node{i % 16:02d}"]
    # the variants themselves: 1,280 images in two epochs of 10 + n seconds
    speeds = [references[f"variant{n}"]["images_per_second"] for n in range(VARIANTS)]
    assert speeds == sorted(speeds, reverse=True) and all(s > 0 for s in speeds)
    assert speeds[0] == pytest.approx(640 / 10, rel=0.05)
