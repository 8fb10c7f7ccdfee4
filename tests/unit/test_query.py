"""The dashboard's query layer (collector.queries.query) over stored runs."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from collector.analysis.epochs import EpochAmounts, rows_from_amounts
from collector.queries import query, run_cache, timeseries
from collector.store.api import StepTable, WorkloadEvent
from contract.schema import RunState
from tests.support.memory_store import MemoryStore
from tests.support.run_builder import NS, T0_NS, RunBuilder

pytest_plugins = ["tests.support.analysis_stores"]  # the make_store fixture

MB = 1e6


@pytest.fixture(autouse=True)
def fresh_cache():
    query.clear_cache()
    yield
    query.clear_cache()


def storage_run(run_id: str = "ts", **kw) -> RunBuilder:
    run = RunBuilder(run_id, ranks_per_host=2, steps_per_epoch=4, **kw)
    # epoch 1: 100 s reading 300 MB/s; epoch 2: 50 s from cache
    run.epoch(100, 4000, disk_read=300 * MB, cache_growth=100 * MB, cpu_busy=0.5, gpu_util=80)
    run.epoch(50, 4000, cpu_busy=0.5, gpu_util=80)
    return run


def test_runs_summary_newest_first_with_aggregate_throughput(make_store):
    older = storage_run("older")
    newer = RunBuilder("newer", hosts=("a", "b"), ranks_per_host=4, t0_ns=T0_NS + 10**12)
    newer.epoch(10, 1000)
    store = make_store(older.points() + newer.points())
    summary = query.runs_summary(store)
    assert [s.run_id for s in summary] == ["newer", "older"]
    first = summary[0].to_dict()
    assert first["gpus"] == 8 and first["hosts"] == 2 and first["host_names"] == ["a", "b"]
    # 8 ranks x 1000 images / 10 s
    assert first["images_per_second"] == 800.0
    assert first["start"] == "2023-11-14T22:30:00.000Z"
    assert first["state"] == RunState.FINISHED
    # older, two complete epochs: 2 ranks x 8000 images over 150 s
    assert summary[1].images_per_second == pytest.approx(320 / 3)  # full precision
    json.dumps([s.to_dict() for s in summary])


def test_host_timeseries_buckets_are_exact_averages(make_store):
    store = make_store(storage_run().points())
    series = query.host_timeseries(store, "ts", "node1", max_points=15)
    # 150 s window in at most 15 buckets: 10 s buckets from run_start
    assert series.bucket_ns == 10 * NS
    assert series.times_ns[:2] == [T0_NS, T0_NS + 10 * NS]
    assert len(series.times_ns) == 15
    values = series.series
    assert values["disk_read_mbps"] == [300.0] * 10 + [0.0] * 5
    assert values["ib_rcv_mbps"] == [None] * 15  # no InfiniBand on this host
    assert values["cpu_util_percent"][:3] == [50.0, 50.0, 50.0]
    assert values["gpu_util_percent"][3] == 80.0
    # page cache: 2 GB + 100 MB/s; the bucket 10..20 s averages 2 GB + 1.5 GB
    assert values["page_cache_bytes"][1] == 3.5e9
    # steps: 4 per epoch and rank, 1000 images each, 2 ranks; each step's images spread
    # over its own seconds: epoch 1 (0..100 s) steps of 25 s -> 2 x 1000 / 25 = 80/s in
    # every bucket; epoch 2 (100..150 s) steps of 12.5 s -> 2 x 1000 / 12.5 = 160/s
    assert values["images_per_second"] == [80.0] * 10 + [160.0] * 5
    # total images over the run survive the down-sampling: 2 ranks x 8000
    assert sum(v * 10 for v in values["images_per_second"]) == 16_000
    assert series.next_since_ns == T0_NS + 150 * NS
    assert series.units["disk_read_mbps"] == "MB/s"
    json.dumps(series.to_dict())


def test_long_runs_are_down_sampled_to_max_points(make_store):
    run = RunBuilder("long", sample_interval_s=10.0, write_samples=True)
    run.epoch(3 * 3600, 100_000, disk_read=10 * MB)
    series = query.host_timeseries(make_store(run.points()), "long", "node1", max_points=500)
    # 10800 s / 500 = 21.6 s -> 22 s buckets: 490 full ones and a last short one
    assert series.bucket_ns == 22 * NS
    assert len(series.times_ns) == 491 <= 500
    assert series.series["disk_read_mbps"][100] == pytest.approx(10.0)


def test_live_updates_return_only_new_buckets_on_the_same_grid():
    run = storage_run("live", state=RunState.LIVE)
    points = run.points()
    cut = T0_NS + 72 * NS
    store = MemoryStore()
    store.write([p for p in points if p.time_ns <= cut])
    first = query.host_timeseries(store, "live", "node1", bucket_ns=10 * NS)
    # only complete buckets: samples reach 72 s, but both ranks' latest step ended at 50 s
    # and the next one (at 75 s, 25 s long) spreads its images back to 50 s: 0..50 s
    assert len(first.times_ns) == 5 and first.next_since_ns == T0_NS + 50 * NS
    store.write([p for p in points if p.time_ns > cut])
    update = query.host_timeseries(
        store, "live", "node1", since_ns=first.next_since_ns, bucket_ns=first.bucket_ns
    )
    # the agent keeps sampling 5 s past the last event (155 s); the ranks' last event is
    # epoch 2's end at 150 s: buckets 50..150 s
    assert update.times_ns[0] == T0_NS + 50 * NS and len(update.times_ns) == 10
    whole = query.host_timeseries(store, "live", "node1", bucket_ns=10 * NS)
    assert first.times_ns + update.times_ns == whole.times_ns
    for name, values in whole.series.items():
        assert first.series[name] + update.series[name] == values, name
    nothing_new = query.host_timeseries(
        store, "live", "node1", since_ns=update.next_since_ns, bucket_ns=update.bucket_ns
    )
    assert nothing_new.times_ns == [] and nothing_new.next_since_ns == update.next_since_ns


def test_run_timeseries_and_epoch_boundaries_per_host_clock(make_store):
    run = RunBuilder("two", hosts=("a", "b"), skew_s={"b": -2.0})
    run.epoch(30, 100)
    run.epoch(20, 100)
    store = make_store(run.points())
    both = query.run_timeseries(store, "two", max_points=50)
    assert sorted(both) == ["a", "b"]
    assert both["b"].times_ns[0] == T0_NS - 2 * NS
    boundaries = query.epoch_boundaries(store, "two")
    done = {"complete": True, "state": "complete"}
    assert boundaries["b"] == [
        {"epoch": 1, "start_ns": T0_NS - 2 * NS, "end_ns": T0_NS + 28 * NS, **done},
        {"epoch": 2, "start_ns": T0_NS + 28 * NS, "end_ns": T0_NS + 48 * NS, **done},
    ]
    assert query.host_timeseries(store, "two", "nowhere") is None


def test_epoch_table_findings_and_scaling_are_plain_dicts(make_store):
    store = make_store(storage_run().points())
    rows = query.epoch_table(store, "ts")
    assert [(r["host"], r["epoch"]) for r in rows] == [
        ("node1", 1),
        ("*", 1),
        ("node1", 2),
        ("*", 2),
    ]
    assert rows[0]["disk_read_mbps"] == 300.0
    assert {f["rule"] for f in query.findings(store, "ts")} >= {"dataset_fits_in_memory"}
    assert query.findings(store, "missing") == []
    (scaling,) = query.scaling_table(store)
    assert scaling["run_id"] == "ts" and scaling["gpus"] == 2
    json.dumps([rows, query.findings(store, "ts"), query.scaling_table(store)])


def test_finished_runs_are_cached_live_runs_recomputed():
    store = MemoryStore()
    store.write(storage_run().points())
    assert query.epoch_table(store, "ts") is query.epoch_table(store, "ts")
    live = MemoryStore()
    live.write(storage_run("l", state=RunState.LIVE).points())
    assert query.epoch_table(live, "l") is not query.epoch_table(live, "l")


# --------------------------------------------------------------------------------------
# images/s: each step's images spread over its own duration
# --------------------------------------------------------------------------------------


def step(time_s: float, seconds: float | None, images: int, host: str = "node1") -> WorkloadEvent:
    fields: dict[str, object] = {"images": images}
    if seconds is not None:
        fields["seconds"] = seconds
    return WorkloadEvent("r", host, 0, "tensorflow", "step", T0_NS + round(time_s * NS), fields)


def test_step_images_are_spread_over_each_steps_duration():
    starts = T0_NS + NS * np.array([0, 10, 20], dtype=np.int64)
    ends = starts + 10 * NS
    steps = [
        step(15, 10.0, 100),  # [5, 15] s: half in bucket 0..10, half in 10..20
        step(30, 5.0, 40),  # [25, 30]: all in 20..30
        step(22, None, 7),  # no duration: counted at 22 s, in 20..30
        step(2, 4.0, 80),  # [-2, 2]: half before the first bucket, which is not counted
    ]
    images = timeseries.step_images(StepTable.from_events(steps), starts, ends, closed_last=True)
    assert images.tolist() == pytest.approx([50 + 40, 50, 40 + 7], abs=1e-9)
    assert np.isnan(timeseries.step_images(StepTable.empty(), starts, ends, closed_last=True)).all()


def test_images_per_second_follows_uneven_steps_without_a_saw_tooth(make_store):
    # one rank, one 60-s epoch of 3 steps lasting 10, 20 and 30 s (pattern 1:2:3), 600
    # images each: 60, 30 and 20 images/s, in 5-s buckets
    run = RunBuilder("uneven", steps_per_epoch=3)
    run.epoch(60, 1800, step_pattern=(1.0, 2.0, 3.0))
    series = query.host_timeseries(make_store(run.points()), "uneven", "node1", max_points=12)
    assert series.bucket_ns == 5 * NS
    assert series.series["images_per_second"] == [60.0] * 2 + [30.0] * 4 + [20.0] * 6


def test_live_buckets_wait_for_steps_but_not_for_a_rank_that_stopped():
    run = RunBuilder("stalls", ranks_per_host=2, steps_per_epoch=20, state=RunState.LIVE)
    run.epoch(200, 2000)  # a step every 10 s per rank
    cut = T0_NS + 150 * NS
    store = MemoryStore()
    store.write(
        [
            p
            for p in run.points()
            if p.time_ns <= cut
            # rank 1 stops reporting after its step at 50 s
            and not (p.tags.get("rank") == "1" and p.time_ns > T0_NS + 50 * NS)
        ]
    )
    series = query.host_timeseries(store, "stalls", "node1", bucket_ns=10 * NS)
    # samples reach 150 s; rank 0 reported up to 150 s, rank 1 only up to 50 s: buckets
    # wait for rank 1 at most LIVE_STEP_WAIT_NS = 60 s, so they are complete up to 90 s
    assert series.next_since_ns == T0_NS + 90 * NS and len(series.times_ns) == 9
    # rank 0: 100 images every 10 s; rank 1 until 50 s
    assert series.series["images_per_second"] == [20.0] * 5 + [10.0] * 4


# --------------------------------------------------------------------------------------
# the per-epoch table: NIC rates, column help
# --------------------------------------------------------------------------------------


def test_epoch_table_has_nic_rates_in_mb_per_second(make_store):
    run = RunBuilder("nics", hosts=("a", "b"))
    run.epoch(100, 1000, net_rx={"a": 25e6, "b": 5e6}, net_tx=2e6)
    run.epoch(50, 1000, net_rx=1e6)  # (tx back to idle: 0)
    rows = {(r["host"], r["epoch"]): r for r in query.epoch_table(make_store(run.points()), "nics")}
    # eth0 only (loopback moves 1 GB/s and is left out): 25 MB/s x 100 s / 100 s
    assert (rows[("a", 1)]["net_rx_mbps"], rows[("a", 1)]["net_tx_mbps"]) == (25.0, 2.0)
    assert (rows[("b", 1)]["net_rx_mbps"], rows[("b", 1)]["net_tx_mbps"]) == (5.0, 2.0)
    # all hosts: (25 + 5) MB/s x 100 s over the longest window, 100 s
    assert (rows[("*", 1)]["net_rx_mbps"], rows[("*", 1)]["net_tx_mbps"]) == (30.0, 4.0)
    assert (rows[("*", 2)]["net_rx_mbps"], rows[("*", 2)]["net_tx_mbps"]) == (2.0, 0.0)
    # the rates agree with the byte columns: 2.5e9 bytes / 100 s
    assert rows[("a", 1)]["net_rx_bytes"] == 2_500_000_000
    assert list(rows[("a", 1)]) == list(query.TABLE_COLUMNS)


def test_nic_rates_are_missing_without_nics():
    amounts = EpochAmounts("a", 1, T0_NS, T0_NS + 10 * NS, 10.0, 100.0, values={})
    row = rows_from_amounts([amounts])[0]
    assert query.table_row(row, amounts)["net_rx_mbps"] is None  # no data, never 0


def test_every_table_column_is_explained_once():
    from dashboard.columns import EPOCH_COLUMNS

    assert set(query.COLUMN_HELP) == set(query.TABLE_COLUMNS)
    assert all(text and text[0].isupper() for text in query.COLUMN_HELP.values())
    # the dashboard's tooltips are these texts
    for column in EPOCH_COLUMNS:
        assert column.help.startswith(query.COLUMN_HELP[column.key])
    assert {"net_rx_mbps", "net_tx_mbps"} <= {c.key for c in EPOCH_COLUMNS}


# --------------------------------------------------------------------------------------
# one computation per finished run, shared, thread-safe
# --------------------------------------------------------------------------------------


class SlowCountingStore:
    """A store whose event reads take a while (so concurrent callers overlap), counted."""

    def __init__(self, store) -> None:
        self.store = store
        self.event_reads = 0
        self.step_reads = 0
        self.series_reads = 0
        self._lock = threading.Lock()

    def events(self, run_id, since_ns=None, kinds=None):
        with self._lock:
            self.event_reads += 1
        time.sleep(0.2)
        return self.store.events(run_id, since_ns, kinds)

    def steps(self, run_id, since_ns=None):
        with self._lock:
            self.step_reads += 1
        return self.store.steps(run_id, since_ns)

    def read_series(self, series, start_ns, end_ns):
        with self._lock:
            self.series_reads += 1
        return self.store.read_series(series, start_ns, end_ns)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_callers_at_once_wait_for_one_computation():
    memory = MemoryStore()
    memory.write(storage_run().points())
    store = SlowCountingStore(memory)
    results: list = []
    threads = [
        threading.Thread(target=lambda: results.append(query.epoch_table(store, "ts")))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == 4 and all(r is results[0] for r in results)
    assert store.event_reads == 1  # the run's epoch events, once


def test_findings_share_the_report_and_events_of_the_epoch_table():
    memory = MemoryStore()
    memory.write(storage_run().points())
    store = SlowCountingStore(memory)
    query.run_timeseries(store, "ts")
    query.epoch_table(store, "ts")
    # the epoch events, the steps and the run's samples: one read each
    assert (store.event_reads, store.step_reads, store.series_reads) == (1, 1, 1)
    found = query.findings(store, "ts")
    assert (store.event_reads, store.step_reads, store.series_reads) == (1, 1, 1)
    query.clear_cache()
    assert query.findings(store, "ts") == found  # the same when computed on their own
    assert query.epoch_table(store, "ts") == query.epoch_table(memory, "ts")


def test_a_kept_run_reads_series_as_the_store_cuts_them(make_store):
    """Series cut from one read of the whole run equal the store's own reads."""
    store = make_store(storage_run().points())
    run = query._run(store, "ts")
    kept = run_cache.KeptRun(store, run)
    infos = [i for t in timeseries._RUN_TOTALS for i in store.list_series(t.measurement, t.field)]
    for start_s, end_s in ((0, 150), (0, 100), (30.5, 31.2), (100, 150), (149, 150)):
        start, end = T0_NS + round(start_s * NS), T0_NS + round(end_s * NS)
        for mine, theirs in zip(
            kept.read_series(infos, start, end), store.read_series(infos, start, end), strict=True
        ):
            assert mine.info == theirs.info
            assert mine.times_ns.tolist() == theirs.times_ns.tolist()
            assert mine.values.tolist() == theirs.values.tolist()


def _memory_store_with(run: RunBuilder) -> MemoryStore:
    store = MemoryStore()
    store.write(run.points())
    return store


def test_a_new_store_never_gets_a_gone_stores_results():
    """Results are kept per store object: a store opened after another was dropped (which
    CPython often places at the same address, the same ``id()``) gets its own answers."""
    for images in (1000, 2000, 3000, 4000, 5000, 6000):
        run = RunBuilder("same-id", ranks_per_host=1, steps_per_epoch=4)
        run.epoch(10, images)
        store = _memory_store_with(run)
        [summary] = query.runs_summary(store)
        assert summary.images_per_second == images / 10
        assert query.epoch_table(store, "same-id")[0]["images"] == images
        del store, summary


def test_a_dropped_store_takes_its_kept_results_with_it():
    import gc
    import weakref

    run = RunBuilder("gone", ranks_per_host=1, steps_per_epoch=4)
    run.epoch(10, 1000)
    store = _memory_store_with(run)
    query.epoch_table(store, "gone")
    assert query.run_cache(store) is query.run_cache(store)  # one owner per store
    gone, its_cache = weakref.ref(store), weakref.ref(query.run_cache(store))
    del store
    gc.collect()
    assert gone() is None  # the cache held no strong reference to the store
    # its cache went with it (stores of earlier tests may still be alive, with theirs: a
    # Dash app the browser tests started keeps its DataSource's store)
    assert its_cache() is None


def test_findings_compare_with_the_other_runs_kept_reports(make_store, monkeypatch):
    """The scaling rule reads the 1-rank run's report: the one the query layer already
    keeps for it, never a second build."""
    from collector.findings import context as findings_module
    from tests.integration.test_findings_scenarios import scaling_pair, stored

    runs = scaling_pair(1, 4, 20_000, net_rx=30 * MB, net_tx=30 * MB, disk_read=6 * MB)
    store = stored(make_store, *runs)
    query.epoch_table(store, "one")  # the reference run's report, now kept
    query.epoch_table(store, "many")

    def no_second_build(*args, **kwargs):
        raise AssertionError("a report built again beside the kept one")

    monkeypatch.setattr(findings_module, "build_report", no_second_build)
    rules = [f["rule"] for f in query.findings(store, "many")]
    assert "scaling_loss" in rules
