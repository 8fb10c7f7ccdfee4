"""One cache of finished runs, owned by the store (collector.queries.query.RunCache): the
dashboard's charts, per-epoch table, boundaries and findings of a finished run come from one
read of its events, steps and samples, counted here on a real SQLite store; a live run is
read afresh on every question and never served stale, also once it ends.
"""

from __future__ import annotations

from collections import Counter

import pytest

from collector.queries import query
from contract.schema import RunState
from dashboard.source import DataSource
from tests.support.analysis_stores import sqlite_store_with
from tests.support.run_builder import NS, RunBuilder

MB = 1e6


class CountingStore:
    """A real store, counting what is read from it: epoch-event reads and steps per run,
    and sample reads (``read_series``: calls and series)."""

    def __init__(self, store) -> None:
        self.store = store
        self.reads: Counter[tuple[str, str]] = Counter()

    def events(self, run_id, since_ns=None, kinds=None):
        self.reads[("events", run_id)] += 1
        return self.store.events(run_id, since_ns, kinds)

    def steps(self, run_id, since_ns=None):
        self.reads[("steps", run_id)] += 1
        return self.store.steps(run_id, since_ns)

    def read_series(self, series, start_ns, end_ns):
        self.reads[("read_series", "")] += 1
        self.reads[("series", "")] += len(series)
        return self.store.read_series(series, start_ns, end_ns)

    def __getattr__(self, name):
        return getattr(self.store, name)


def cached_run(run_id: str = "done", **settings) -> RunBuilder:
    """The demo's shape on two hosts: epoch 1 reads the 45 MB data set, later ones nothing."""
    run = RunBuilder(
        run_id,
        hosts=("node1", "node2"),
        ranks_per_host=2,
        dataset_bytes=45_000_000,
        dataset_images=256,
        host_memory_bytes=24 * 10**9,
        **settings,
    )
    run.epoch(20, 256, disk_read=2 * MB, cache_growth=2 * MB)
    run.epoch(20, 256)
    run.epoch(20, 256)
    return run


def page(source: DataSource, run_id: str) -> dict:
    """What the run page and its callbacks ask for."""
    with source.request():
        return {
            "summary": source.run(run_id),
            "charts": source.timeseries(run_id, live=False),
            "boundaries": source.boundaries(run_id),
            "epochs": source.epochs(run_id),
            "rank_parts": source.rank_parts(run_id),
            "findings": source.findings(run_id),
        }


@pytest.fixture
def sqlite_path(tmp_path):
    return tmp_path / "epochscope.sqlite"


def test_a_finished_run_is_read_once_for_charts_table_and_findings(sqlite_path):
    store = sqlite_store_with(cached_run().points(), sqlite_path)
    try:
        counting = CountingStore(store)
        source = DataSource(counting, complete_ahead=False)
        assert source.kept_findings("done") is None  # nothing computed yet
        first = page(source, "done")
        assert "cache_warmup" in {f["rule"] for f in first["findings"]}
        assert first["epochs"] and first["charts"].points > 0
        # the run's epoch events decoded once, its steps read once, its samples read once
        # (every series its report and its charts use, in one read)
        assert counting.reads[("events", "done")] == 1
        assert counting.reads[("steps", "done")] == 1
        assert counting.reads[("read_series", "")] == 1
        reads = Counter(counting.reads)
        # opened again, in another request and by the kept charts: nothing is read again,
        # and every answer is the same
        assert page(source, "done") == first
        assert source.kept_findings("done") == first["findings"]
        assert counting.reads == reads
        # the one owner: dropping the store's cache drops everything kept, charts included
        query.clear_cache(source.store)
        assert source.kept_findings("done") is None
        assert page(source, "done") == first
        assert counting.reads[("read_series", "")] == 2
    finally:
        store.close()


def test_a_live_run_is_never_served_stale_and_is_kept_once_it_ends(sqlite_path):
    run = cached_run("growing")
    points = run.points()
    end_of_epoch_1 = run.epoch_bounds_true_ns()[0][1]
    cut = end_of_epoch_1 + 3 * NS  # epoch 1 over, epoch 2 just started
    store = sqlite_store_with([p for p in points if p.time_ns <= cut], sqlite_path)
    try:
        counting = CountingStore(store)
        source = DataSource(counting, complete_ahead=False)
        assert source.run_state("growing") == RunState.LIVE
        early = page(source, "growing")
        assert {r["epoch"] for r in early["epochs"]} == {1, 2}
        assert "cache_warmup" not in {f["rule"] for f in early["findings"]}  # one epoch
        assert source.kept_findings("growing") is None  # a live run's findings are not kept
        before = counting.reads[("events", "growing")]
        again = page(source, "growing")
        assert counting.reads[("events", "growing")] > before  # asked again, read again
        assert again["epochs"] == early["epochs"]
        # the rest of the run arrives, its end included: the same source sees all of it
        store.write_points([p for p in points if p.time_ns > cut])
        assert source.run_state("growing") == RunState.FINISHED
        done = page(source, "growing")
        assert {r["epoch"] for r in done["epochs"]} == {1, 2, 3}
        assert "cache_warmup" in {f["rule"] for f in done["findings"]}
        assert done["charts"].points > early["charts"].points
        # what the finished run shows is what a fresh source computes from the full store
        fresh = DataSource(store, complete_ahead=False)
        assert page(fresh, "growing") == done
        # and now it is kept: opened again, nothing is read
        reads = Counter(counting.reads)
        assert page(source, "growing") == done
        assert counting.reads == reads
    finally:
        store.close()
