"""SqliteStore on real SQLite files: the ReadStore contract, idempotent writes, compaction,
runs and events, retention, and reading from another process while a write is open."""

from __future__ import annotations

import inspect
import json
import sqlite3
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.store import SqliteStore
from collector.store import samples as store_samples
from collector.store.api import ReadStore
from contract.point import Point

S = 1_000_000_000  # ns per second


@pytest.fixture
def store(tmp_path):
    with SqliteStore(tmp_path / "runs" / "epochscope.sqlite") as opened:
        yield opened


def cpu_lines(host: str, seconds: range, field: str = "user_seconds", scale: int = 2) -> str:
    return "\n".join(f"cpu,host={host} {field}={t * scale}i {t * S}" for t in seconds)


def read_one(store, measurement, field, host, start, end):
    (info,) = store.list_series(measurement, field, host)
    (data,) = store.read_series([info], start, end)
    return (data.times_ns // S).tolist(), data.values.tolist()


def assert_implements_read_store(cls) -> None:
    """Every ReadStore method, with the protocol's exact parameters."""
    for name in ("list_series", "read_series", "hosts", "runs", "events"):
        expected = inspect.signature(getattr(ReadStore, name))
        actual = inspect.signature(getattr(cls, name))
        assert list(actual.parameters) == list(expected.parameters), name
        for param in expected.parameters.values():
            assert actual.parameters[param.name].default == param.default, (name, param)


def test_is_a_read_store_and_creates_the_file_in_wal_mode(store):
    assert_implements_read_store(SqliteStore)
    assert store.path.exists()
    conn = sqlite3.connect(store.path)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    conn.close()


def test_series_are_keyed_by_measurement_host_field_and_other_tags(store):
    store.write_lines(
        "disk,host=n1,device=sda,kind=disk reads=1i,read_bytes=512i 1\n"
        "disk,host=n1,device=sdb,kind=disk reads=2i,read_bytes=1024i 1\n"
        "disk,host=n2,device=sda,kind=disk reads=3i 1\n"
        "disk,device=sda,kind=disk reads=4i 1"  # no host tag: host ''
    )
    infos = store.list_series("disk", "reads")
    assert [(i.host, i.tags) for i in infos] == [
        ("", {"device": "sda", "kind": "disk"}),
        ("n1", {"device": "sda", "kind": "disk"}),
        ("n1", {"device": "sdb", "kind": "disk"}),
        ("n2", {"device": "sda", "kind": "disk"}),
    ]
    assert len({i.series_id for i in infos}) == 4
    assert [i.tags["device"] for i in store.list_series("disk", "read_bytes", "n1")] == [
        "sda",
        "sdb",
    ]
    assert store.list_series("disk", "writes") == []
    assert store.hosts() == ["n1", "n2"]


def test_read_range_includes_one_sample_beyond_each_end(store):
    store.write_lines(cpu_lines("a", range(0, 100)))
    times, values = read_one(store, "cpu", "user_seconds", "a", 10 * S, 20 * S)
    assert times == list(range(9, 22))
    assert values == [2.0 * t for t in range(9, 22)]
    # range between samples: only the neighbours
    times, _ = read_one(store, "cpu", "user_seconds", "a", 10 * S + 1, 11 * S - 1)
    assert times == [10, 11]
    # before all data and after all data
    assert read_one(store, "cpu", "user_seconds", "a", -5 * S, -S) == ([0], [0.0])
    assert read_one(store, "cpu", "user_seconds", "a", 200 * S, 300 * S) == ([99], [198.0])


def test_neighbours_found_in_other_blocks_and_across_a_field_set_change(store):
    # one write per second, like the agent: 30 small blocks
    for t in range(30):
        store.write_lines(f"cpu,host=a user_seconds={t}i,idle_seconds={t}i {t * S}")
    # then user_seconds disappears for a while (idle_seconds alone)
    for t in range(30, 40):
        store.write_lines(f"cpu,host=a idle_seconds={t}i {t * S}")
    store.write_lines(f"cpu,host=a user_seconds=50i,idle_seconds=50i {50 * S}")
    # [35 s, 45 s] holds no user_seconds sample: the neighbours are 29 s and 50 s
    assert read_one(store, "cpu", "user_seconds", "a", 35 * S, 45 * S) == (
        [29, 50],
        [29.0, 50.0],
    )
    assert read_one(store, "cpu", "idle_seconds", "a", 35 * S, 45 * S)[0] == [
        34,
        35,
        36,
        37,
        38,
        39,
        50,
    ]
    before = store.read_series(store.list_series("cpu", "user_seconds"), 0, 60 * S)
    store.compact()
    after = store.read_series(store.list_series("cpu", "user_seconds"), 0, 60 * S)
    assert before[0].times_ns.tolist() == after[0].times_ns.tolist()
    assert before[0].values.tolist() == after[0].values.tolist()
    assert read_one(store, "cpu", "user_seconds", "a", 35 * S, 45 * S) == (
        [29, 50],
        [29.0, 50.0],
    )


def test_replayed_batch_is_stored_once_and_last_write_wins(store):
    body = cpu_lines("a", range(10))
    store.write_lines(body)
    store.write_lines(body)  # the agent's spool replays after a crash
    store.write_lines(f"cpu,host=a user_seconds=1000i {5 * S}")  # same time, new value
    times, values = read_one(store, "cpu", "user_seconds", "a", 0, 9 * S)
    assert times == list(range(10))
    assert values == [0.0, 2.0, 4.0, 6.0, 8.0, 1000.0, 12.0, 14.0, 16.0, 18.0]
    store.compact()
    assert read_one(store, "cpu", "user_seconds", "a", 0, 9 * S) == (times, values)
    (blocks,) = store.db.read_conn().execute("SELECT count(*) FROM blocks").fetchone()
    assert blocks == 1  # one 10-minute window


def test_compaction_appends_blocks_and_merges_a_window_once_it_is_over(store):
    window_s = store_samples.CHUNK_NS // S  # 600
    after_s = store_samples.MERGE_AFTER_NS // S  # 60: a window is merged 60 s after its end
    quiet_s = store_samples.MERGE_QUIET_NS // S  # 60: ... and 60 s after its last fold
    for t in range(0, 2 * window_s, 10):  # 120 agent writes, 10 s apart, two windows
        store.write_lines(f"mem,host=a free_bytes={t}.5 {t * S}")
    conn = store.db.read_conn()
    assert conn.execute("SELECT count(*) FROM batches").fetchone() == (120,)
    assert conn.execute("SELECT count(*) FROM blocks").fetchone() == (0,)
    before = read_one(store, "mem", "free_bytes", "a", 0, 3 * window_s * S)

    def blocks():
        return conn.execute("SELECT min_ns / ?, max_ns / ?, n FROM blocks ORDER BY id", (S, S))

    # in steps of 50 batches (0..490 s, 500..990 s, 1000..1190 s), each step's points of a
    # window become a new block; nothing is merged while the windows were just written to
    now = 1195
    assert store.compact(batches_per_step=50, now_ns=now * S) == 120
    assert conn.execute("SELECT count(*) FROM batches").fetchone() == (0,)
    assert blocks().fetchall() == [(0, 490, 50), (500, 590, 10), (600, 990, 40), (1000, 1190, 20)]
    assert read_one(store, "mem", "free_bytes", "a", 0, 3 * window_s * S) == before
    # 60 s later: window 0 (ended at 600 s) is over and quiet, so it is merged; window 1
    # ended at 1200 s, less than 60 s ago
    assert store.compact(now_ns=(now + quiet_s) * S) == 0
    assert (window_s + after_s) <= now + quiet_s < 2 * window_s + after_s
    assert blocks().fetchall() == [(600, 990, 40), (1000, 1190, 20), (0, 590, 60)]
    assert read_one(store, "mem", "free_bytes", "a", 0, 3 * window_s * S) == before
    # late data for window 1 and the first point of window 2: a block each, appended
    store.write_lines(
        f"mem,host=a free_bytes=7.5 {(2 * window_s - 5) * S}\n"
        f"mem,host=a free_bytes=1.5 {2 * window_s * S}"
    )
    assert store.compact(now_ns=1260 * S) == 1
    assert blocks().fetchall()[-2:] == [(1195, 1195, 1), (1200, 1200, 1)]
    # much later every window is over and quiet: window 1's three blocks become one
    # (window 2's single block stays as it is)
    assert store.compact(now_ns=4000 * S) == 0
    rows = conn.execute("SELECT n FROM blocks ORDER BY min_ns").fetchall()
    assert rows == [(60,), (61,), (1,)]
    assert conn.execute("SELECT count(*) FROM unmerged_windows").fetchone() == (0,)
    times, values = read_one(store, "mem", "free_bytes", "a", 0, 3 * window_s * S)
    assert times == sorted([*range(0, 2 * window_s, 10), 2 * window_s - 5, 2 * window_s])
    assert values[:3] == [0.5, 10.5, 20.5]
    assert values[-3:] == [1190.5, 7.5, 1.5]


def test_reads_merge_blocks_with_newer_batches(store):
    store.write_lines(cpu_lines("a", range(0, 10)))
    store.compact()
    store.write_lines(f"cpu,host=a user_seconds=99i {3 * S}")  # rewrite one compacted point
    store.write_lines(cpu_lines("a", range(10, 12)))
    times, values = read_one(store, "cpu", "user_seconds", "a", 2 * S, 10 * S)
    assert times == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    assert values == [2.0, 4.0, 99.0, 8.0, 10.0, 12.0, 14.0, 16.0, 18.0, 20.0, 22.0]
    store.compact()
    assert read_one(store, "cpu", "user_seconds", "a", 2 * S, 10 * S) == (times, values)


def test_read_many_series_at_once_in_request_order(store):
    lines = []
    for host in ("b", "a"):
        for t in range(5):
            lines.append(f"net,host={host},interface=eth0 rx_bytes={t}i,tx_bytes={10 * t}i {t * S}")
    store.write_lines("\n".join(lines))
    infos = store.list_series("net", "tx_bytes") + store.list_series("net", "rx_bytes", "a")
    data = store.read_series(infos, S, 3 * S)
    assert [(d.info.host, d.info.field) for d in data] == [
        ("a", "tx_bytes"),
        ("b", "tx_bytes"),
        ("a", "rx_bytes"),
    ]
    assert data[1].values.tolist() == [0.0, 10.0, 20.0, 30.0, 40.0]
    assert data[2].times_ns.dtype == np.int64 and data[2].values.dtype == np.float64
    assert store.read_series([], 0, 1) == []


def test_overlapping_late_data_reads_sorted_and_merged(store):
    store.write_lines(cpu_lines("a", range(0, 100, 2)))  # sealed, even seconds
    store.write_lines(cpu_lines("a", range(1, 100, 2), scale=3))  # late, odd seconds
    times, values = read_one(store, "cpu", "user_seconds", "a", 0, 10 * S)
    assert times == list(range(12))
    assert values == [0.0, 3.0, 4.0, 9.0, 8.0, 15.0, 12.0, 21.0, 16.0, 27.0, 20.0, 33.0]


def run_events(run_id: str, ranks: int, end_state: str | None, start_s: int) -> list[Point]:
    points = []
    for rank in range(ranks):
        tags = {
            "host": f"node{rank // 2}",
            "run_id": run_id,
            "rank": str(rank),
            "framework": "horovod-tf",
        }
        points.append(
            Point(
                "workload",
                tags,
                {
                    "event": "run_start",
                    "model": "resnet50",
                    "world_size": ranks,
                    "batch_size": 256,
                    "precision": "fp16",
                },
                (start_s + rank) * S,
            )
        )
        for epoch in (1, 2):
            points.append(
                Point(
                    "workload",
                    tags,
                    {"event": "epoch_end", "epoch": epoch, "images": 1000, "seconds": 10.5},
                    (start_s + 100 * epoch) * S,
                )
            )
        if end_state is not None:
            state = end_state if rank == ranks - 1 else "finished"
            points.append(
                Point("workload", tags, {"event": "run_end", "state": state}, (start_s + 300) * S)
            )
    return points


def test_runs_and_events_from_workload_points(store):
    store.write_points(run_events("r-old", 2, "finished", 1000))
    store.write_points(run_events("r-failed", 4, "failed", 5000))
    store.write_points(run_events("r-live", 4, None, 9000))
    runs = store.runs()
    assert [run.run_id for run in runs] == ["r-live", "r-failed", "r-old"]  # newest first
    live, failed, old = runs
    assert live.state == "live" and live.end_ns is None
    assert failed.state == "failed" and failed.end_ns == 5300 * S
    assert old.state == "finished" and old.end_ns == 1300 * S
    assert failed.hosts == ("node0", "node1")
    assert failed.world_size == 4
    assert failed.framework == "horovod-tf"
    assert failed.model == "resnet50"
    assert failed.start_ns == 5000 * S  # rank 0's run_start; rank 3 started at 5003 s
    assert failed.config == {
        "model": "resnet50",
        "world_size": 4,
        "batch_size": 256,
        "precision": "fp16",
    }
    events = store.events("r-old")
    assert [(e.event, e.rank, e.time_ns // S) for e in events] == [
        ("run_start", 0, 1000),
        ("run_start", 1, 1001),
        ("epoch_end", 0, 1100),
        ("epoch_end", 1, 1100),
        ("epoch_end", 0, 1200),
        ("epoch_end", 1, 1200),
        ("run_end", 0, 1300),
        ("run_end", 1, 1300),
    ]
    assert events[2].fields == {"epoch": 2 - 1, "images": 1000, "seconds": 10.5}
    assert events[2].host == "node0" and events[2].framework == "horovod-tf"
    assert [(e.event, e.rank) for e in store.events("r-old", kinds=("run_start", "run_end"))] == [
        ("run_start", 0),
        ("run_start", 1),
        ("run_end", 0),
        ("run_end", 1),
    ]
    assert store.events("r-old", since_ns=1200 * S, kinds=("epoch_end",)) == []
    assert [e.time_ns // S for e in store.events("r-old", since_ns=1100 * S)] == [
        1200,
        1200,
        1300,
        1300,
    ]
    # one run by id, read alone: what runs() holds for it
    assert [store.run(run.run_id) for run in runs] == runs
    assert store.run("r-none") is None and store.run("") is None
    # replaying events changes nothing
    store.write_points(run_events("r-old", 2, "finished", 1000))
    assert len(store.events("r-old")) == 8
    assert store.hosts() == ["node0", "node1"]


def test_run_finishes_with_rank_zero_and_counts_ranks_without_world_size(store):
    tags = {"host": "h", "run_id": "solo", "rank": "0", "framework": "mxnet"}
    store.write_points([Point("workload", tags, {"event": "run_start"}, 10 * S)])
    (run,) = store.runs()
    assert (run.state, run.world_size, run.model, run.end_ns) == ("live", 1, "", None)
    store.write_points([Point("workload", tags, {"event": "run_end", "state": "finished"}, 20 * S)])
    (run,) = store.runs()
    assert (run.state, run.end_ns) == ("finished", 20 * S)


def test_retention_drops_old_blocks_and_batches(store):
    store.write_lines(cpu_lines("a", range(0, 100)))
    store.compact()  # one block 0..99 s
    store.write_lines(cpu_lines("a", range(100, 110)))  # a batch 100..109 s
    store.write_lines(cpu_lines("a", range(200, 203)))
    assert store.delete_before(150 * S) == 2
    times, _ = read_one(store, "cpu", "user_seconds", "a", 0, 300 * S)
    assert times == [200, 201, 202]


def test_another_process_reads_while_a_write_transaction_is_open(store):
    store.write_lines(cpu_lines("a", range(10)))
    writer = store.db.write_conn()
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("DELETE FROM blocks")  # uncommitted
    code = (
        "import sys; from collector.store import SqliteStore\n"
        "s = SqliteStore(sys.argv[1]); (i,) = s.list_series('cpu', 'user_seconds')\n"
        "(d,) = s.read_series([i], 0, 10**12); print(d.values.size)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(store.path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    writer.execute("ROLLBACK")
    assert out.stdout.strip() == "10"


def test_events_keep_their_types(store):
    tags = {"host": "h", "run_id": "r", "rank": "3", "framework": "pytorch"}
    fields = {"event": "step", "step": 7, "loss": 2.5, "images": 256, "note": "warm"}
    store.write_points([Point("workload", tags, fields, 5)])
    (event,) = store.events("r")
    assert event.rank == 3 and event.event == "step" and event.time_ns == 5
    assert event.fields == {"step": 7, "loss": 2.5, "images": 256, "note": "warm"}
    assert type(event.fields["step"]) is int
    stored = store.db.read_conn().execute("SELECT fields FROM events").fetchone()[0]
    assert json.loads(stored) == event.fields


# ---- any sequence of writes, compactions and merges reads back as "the last write wins"

HOSTS = ["a", "b"]
FIELDS = ["x", "y", "z"]


@st.composite
def write_sequences(draw):
    steps = []
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.booleans()) and steps:
            # the clock decides which windows are over (and merged): early, late, real
            now_s = draw(st.sampled_from([None, 650, 1300, 4000, 10**6]))
            if draw(st.integers(0, 4)) == 0:
                steps.append(("merge", now_s))
            else:
                steps.append(("compact", (draw(st.sampled_from([1, 2, 32])), now_s)))
            continue
        lines = []
        for _ in range(draw(st.integers(1, 12))):
            host = draw(st.sampled_from(HOSTS))
            fields = draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=3, unique=True))
            # times across two compaction windows, with repeats and disorder
            t = draw(st.sampled_from([0, 1, 2, 5, 599, 600, 601, 1300]))
            values = {f: draw(st.integers(-5, 5)) for f in fields}
            lines.append((host, values, t))
        steps.append(("write", lines))
    return steps


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(write_sequences(), st.sampled_from([(0, 2000), (1, 1), (2, 600), (599, 601), (3, 4)]))
def test_reads_equal_last_write_wins_model(tmp_path_factory, steps, window):
    path = tmp_path_factory.mktemp("model") / "m.sqlite"
    model: dict[tuple[str, str], dict[int, float]] = {}
    with SqliteStore(path) as store:
        for kind, payload in steps:
            if kind == "compact":
                per_step, now_s = payload
                store.compact(per_step, now_ns=None if now_s is None else now_s * S)
                continue
            if kind == "merge":  # whatever is over, quiet or not
                store.merge_windows(None if payload is None else payload * S, quiet_ns=0)
                continue
            body = "\n".join(
                f"m,host={host} " + ",".join(f"{f}={v}" for f, v in values.items()) + f" {t * S}"
                for host, values, t in payload
            )
            parsed = store.write_lines(body)
            assert parsed.errors == []
            for host, values, t in payload:
                for f, v in values.items():
                    model.setdefault((host, f), {})[t * S] = float(v)
        start, end = window[0] * S, window[1] * S
        for field in FIELDS:
            infos = store.list_series("m", field)
            for data in store.read_series(infos, start, end):
                points = sorted(model[(data.info.host, field)].items())
                times = [t for t, _ in points]
                inside = [i for i, t in enumerate(times) if start <= t <= end]
                before = [i for i, t in enumerate(times) if t < start][-1:]
                after = [i for i, t in enumerate(times) if t > end][:1]
                expected = [points[i] for i in before + inside + after]
                got = list(zip(data.times_ns.tolist(), data.values.tolist(), strict=True))
                assert got == expected, (data.info.host, field)


def test_times_at_the_ends_of_the_range_compact_and_read(store):
    # the largest and smallest times line protocol allows (InfluxDB's range)
    store.write_lines(
        "cpu,host=edge user_seconds=1i -9223372036854775806\n"
        "cpu,host=edge user_seconds=2i 0\n"
        "cpu,host=edge user_seconds=3i 9223372036854775806"
    )
    before = read_one(store, "cpu", "user_seconds", "edge", -(2**63), 2**63)
    store.compact()
    after = read_one(store, "cpu", "user_seconds", "edge", -(2**64), 2**64)
    assert before == after
    assert after[1] == [1.0, 2.0, 3.0]


def test_a_run_the_user_stopped_is_interrupted_unless_a_rank_failed_first():
    """collector.store.events.run_info: ``interrupted`` when a rank says so and no rank
    failed before that (a rank the stop took down may say failed), else failed."""
    from collector.store.events import run_info
    from contract.schema import RunState

    def state(*ends: tuple[int, int, str]) -> str:
        marks = [("run_start", 1, rank, "{}") for rank in (0, 1)]
        marks += [("run_end", t, rank, json.dumps({"state": s})) for t, rank, s in ends]
        return run_info("r", "pytorch", 1, 9, ["h"], marks).state

    stopped, failed = RunState.INTERRUPTED, RunState.FAILED
    assert state((5, 0, stopped), (5, 1, stopped)) == stopped
    assert state((5, 0, stopped), (6, 1, failed)) == stopped  # failed in the stop's wake
    assert state((4, 1, failed), (5, 0, stopped)) == failed  # a rank failed first
    assert state((5, 0, failed), (5, 1, RunState.FINISHED)) == failed


def test_background_checkpoints_leave_the_wal_to_checkpoint(tmp_path):
    # collector serve's store: no commit copies the WAL into the file (SQLite's default
    # does past 1,000 pages, an fsync inside a write), checkpoint() does, writes going on
    path = tmp_path / "bg.sqlite"
    lines = "\n".join(
        f"disk,host=h{h},device=sda reads={t}i,busy={t * 0.5} {t * 10**9}"
        for t in range(1200)
        for h in range(8)
    )
    with SqliteStore(path, background_checkpoints=True) as store:
        for _ in range(24):  # each ~240 kB of batches: the WAL passes 1,000 pages
            store.write_lines(lines)
        wal = tmp_path / "bg.sqlite-wal"
        assert wal.stat().st_size > 1000 * 4096
        pages, copied = store.checkpoint()
        assert pages > 1000 and copied == pages
        (data,) = store.read_series(store.list_series("disk", "reads", "h3"), 0, 1200 * 10**9)
        assert data.values.tolist() == [float(t) for t in range(1200)]
    with SqliteStore(path) as store:  # default: commits checkpoint as SQLite does
        store.write_lines(lines)
        assert store.checkpoint()[0] < 1000
