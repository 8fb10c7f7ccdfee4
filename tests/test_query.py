"""The dashboard's query layer (collector.query) over stored runs."""

from __future__ import annotations

import json

import pytest

from agent.schema import RunState
from collector import query
from tests.memory_store import MemoryStore
from tests.run_builder import NS, T0_NS, RunBuilder

pytest_plugins = ["tests.analysis_stores"]  # the make_store fixture

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
    assert summary[1].images_per_second == pytest.approx(106.67)
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
    # steps: every 25 s per rank in epoch 1 (1000 images each, 2 ranks), 12.5 s in epoch 2;
    # bucket 20..30 s holds the two steps at 25 s: 2000 images / 10 s
    assert values["images_per_second"][2] == 200.0
    assert values["images_per_second"][0] == 0.0
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
    # only complete buckets: 0..70 s
    assert len(first.times_ns) == 7 and first.next_since_ns == T0_NS + 70 * NS
    store.write([p for p in points if p.time_ns > cut])
    update = query.host_timeseries(
        store, "live", "node1", since_ns=first.next_since_ns, bucket_ns=first.bucket_ns
    )
    # the agent keeps sampling 5 s past the last event: 155 s -> buckets 70..150 s
    assert update.times_ns[0] == T0_NS + 70 * NS and len(update.times_ns) == 8
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
    assert boundaries["b"] == [
        {"epoch": 1, "start_ns": T0_NS - 2 * NS, "end_ns": T0_NS + 28 * NS, "complete": True},
        {"epoch": 2, "start_ns": T0_NS + 28 * NS, "end_ns": T0_NS + 48 * NS, "complete": True},
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
