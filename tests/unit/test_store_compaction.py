"""Append-only compaction of SqliteStore (real SQLite files): folds write new blocks and never
rewrite old ones, so a pass costs what was written since the last one; windows that are
over are merged once; reads give the same answer however the data was folded or merged."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

from collector.store import CHUNK_NS, SCHEMA_VERSION, SqliteStore
from collector.store import samples as store_samples

S = 1_000_000_000  # ns per second
WINDOW_S = CHUNK_NS // S  # 600


def agent_body(seconds: range, hosts: int = 3, value_of=None) -> str:
    """1 Hz lines of ``hosts`` hosts x 2 devices: floats a, b (b on even seconds only) and
    integer c, values that differ per series and per second."""
    value_of = value_of or (lambda h, d, t: t * 1.1 + h * 1000 + d / 3)
    lines = []
    for t in seconds:
        for h in range(hosts):
            for d in range(2):
                a = value_of(h, d, t)
                fields = f"a={a!r}" + (f",b={-a!r}" if t % 2 == 0 else "") + f",c={t * 7 + h}i"
                lines.append(f"m,host=h{h},dev=d{d} {fields} {t * S}")
    return "\n".join(lines)


def read_all(store: SqliteStore, start_ns: int, end_ns: int) -> dict:
    """{(host, tags, field): (times bytes, values bytes)}: bit-exact, -0.0 included."""
    found = {}
    for field in ("a", "b", "c"):
        for data in store.read_series(store.list_series("m", field), start_ns, end_ns):
            key = (data.info.host, tuple(sorted(data.info.tags.items())), field)
            found[key] = (data.times_ns.tobytes(), data.values.tobytes())
    return found


RANGES_S = [
    (0, 1300),  # everything
    (599.5, 600.5),  # across the first window edge: 599 and 600 plus one beyond each
    (600, 600),  # a window's first sample alone
    (1199, 1201),
    (300.2, 300.7),  # between two samples: only the neighbours
    (-50, -10),  # before all data: the first sample
    (5000, 6000),  # after all data: the last one
]


def read_ranges(store: SqliteStore) -> list[dict]:
    return [read_all(store, int(a * S), int(b * S)) for a, b in RANGES_S]


def block_rows(store: SqliteStore) -> dict[int, tuple]:
    return {
        row[0]: row[1:]
        for row in store.db.read_conn().execute(
            "SELECT id, tagset_id, min_ns, max_ns, series_ids, times, vals FROM blocks"
        )
    }


def test_many_compaction_passes_read_the_same_as_one_pass(tmp_path):
    # 1300 s (three windows) in 5 s requests, like agents; one store compacts every 30 s
    # (windows over and quiet are merged as the clock goes), one compacts once at the end,
    # one never
    stores = [SqliteStore(tmp_path / f"{name}.sqlite") for name in ("often", "once", "never")]
    often, once, never = stores
    try:
        for start in range(0, 1300, 5):
            body = agent_body(range(start, start + 5))
            for store in stores:
                store.write_lines(body)
            if start % 30 == 25:
                often.compact(now_ns=(start + 6) * S)
        # a replayed request and a field set change, into the open window
        for store in stores:
            store.write_lines(agent_body(range(1200, 1205)))
            store.write_lines("m,host=h0,dev=d0 a=0.25 1250000000000")
        often.compact(now_ns=1301 * S)
        once.compact(now_ns=1301 * S)
        blocks = often.db.read_conn().execute("SELECT count(*) FROM blocks").fetchone()[0]
        # merged: windows 0 and 1 (one block per tag set each); window 2 is open and holds
        # the folds at 1231, 1261, 1291 and 1301 s
        assert blocks == 6 * (1 + 1 + 4)
        expected = read_ranges(never)
        assert read_ranges(often) == expected
        assert read_ranges(once) == expected
        # and once every window is merged
        # (once folded each window's points in one pass: a block each, nothing to merge)
        for store, merged in ((often, 6), (once, 0)):
            assert store.merge_windows(now_ns=10**6 * S, quiet_ns=0) == merged
            assert store.db.read_conn().execute("SELECT count(*) FROM blocks").fetchone() == (18,)
            assert read_ranges(store) == expected
        (info, _) = never.list_series("m", "a", "h0")  # dev=d0, dev=d1
        (data,) = never.read_series([info], 1250 * S, 1250 * S)
        assert data.values.tolist() == [1249 * 1.1 + 0 / 3, 0.25, 1251 * 1.1]  # the rewrite
    finally:
        for store in stores:
            store.close()


def wal_bytes(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def test_a_pass_writes_only_the_new_points_however_full_the_window_is(tmp_path):
    """Structural, not timed: each pass folds 30 s of 4 tag sets x 50 fields into one
    window; the first pass finds it empty, the last one 19 passes' worth of blocks. Every
    pass must insert the same rows and bytes and leave every existing block as it was."""
    fields = ",".join(f"f{i}={i}.5" for i in range(50))
    store = SqliteStore(tmp_path / "w.sqlite")
    writer = store.db.write_conn()
    writer.execute("PRAGMA wal_autocheckpoint = 0")  # the WAL grows by what each pass writes
    passes = []
    try:
        for first in range(0, 600, 30):  # 20 passes, all into window 0 (still open)
            for start in range(first, first + 30, 5):
                store.write_lines(
                    "\n".join(
                        f"g,host=a,dev=d{d} {fields} {t * S}"
                        for t in range(start, start + 5)
                        for d in range(4)
                    )
                )
            before = block_rows(store)
            changes, wal = writer.total_changes, wal_bytes(store.path)
            assert store.compact(now_ns=(first + 31) * S) == 6
            after = block_rows(store)
            new = {i: row for i, row in after.items() if i not in before}
            assert {i: after.get(i) for i in before} == before  # nothing rewritten
            passes.append(
                {
                    "blocks": len(new),
                    "points": sum(len(row[4]) // 8 for row in new.values()),
                    "bytes": sum(len(row[3]) + len(row[4]) + len(row[5]) for row in new.values()),
                    "changes": writer.total_changes - changes,
                    "wal": wal_bytes(store.path) - wal,
                }
            )
        held = store.db.read_conn().execute("SELECT sum(n) FROM blocks").fetchone()[0]
        assert held == 600 * 4  # the window is full: 600 s x 4 tag sets
    finally:
        store.close()
    first, last = passes[0], passes[-1]
    # 4 blocks of 30 points; 30 x (8 + 50 x 8) + 50 x 8 = 12,640 bytes each
    assert first["blocks"] == last["blocks"] == 4
    assert first["points"] == last["points"] == 4 * 30
    assert first["bytes"] == last["bytes"] == 4 * (30 * (8 + 50 * 8) + 50 * 8)
    # rows changed: 4 blocks and 4 unmerged_windows rows inserted (or updated), 6 batches
    # deleted
    assert [p["changes"] for p in passes] == [4 + 4 + 6] * 20
    # pages written to the WAL (4 KiB each, with b-tree and free-list pages): the last pass
    # writes about what the first does, not 20 times as much as a rewrite would
    assert max(p["wal"] for p in passes[1:]) <= 1.5 * passes[1]["wal"]


def test_merging_a_window_that_is_over_keeps_every_value_bit_exact(tmp_path):
    odd_values = [-0.0, 0.0, 2.2250738585072014e-308, 1.7976931348623157e308, 0.1, 1 / 3, -7e-12]

    def value_of(h, d, t):
        return odd_values[(t + h + d) % len(odd_values)] * (1 if t % 3 else -1)

    with SqliteStore(tmp_path / "x.sqlite") as store:
        for first in range(0, 600, 30):  # 20 folds into window 0, b missing on odd seconds
            store.write_lines(agent_body(range(first, first + 30), value_of=value_of))
            store.compact(now_ns=(first + 31) * S)
        store.write_lines(agent_body(range(600, 610), value_of=value_of))
        store.compact(now_ns=611 * S)
        conn = store.db.read_conn()
        counts = "SELECT min_ns / ?, count(*) FROM blocks GROUP BY 1 ORDER BY 1"
        assert conn.execute(counts, (CHUNK_NS,)).fetchall() == [(0, 6 * 20), (1, 6)]
        before = read_ranges(store)
        # window 0 ended at 600 s; at 700 s it is over (60 s after its end) and quiet
        # (nothing folded into it since 600 s): merged; window 1 is not over
        assert store.compact(now_ns=700 * S) == 0
        assert conn.execute(counts, (CHUNK_NS,)).fetchall() == [(0, 6), (1, 6)]
        assert conn.execute("SELECT window_no FROM unmerged_windows").fetchall() == [(1,)] * 6
        assert read_ranges(store) == before
        holes = conn.execute(
            "SELECT holes, n FROM blocks WHERE min_ns < ? ORDER BY tagset_id", (CHUNK_NS,)
        ).fetchall()
        assert holes == [(1, 600)] * 6  # b has a value on even seconds only
        (info, _) = store.list_series("m", "b", "h1")  # dev=d0, dev=d1
        (data,) = store.read_series([info], 0, 10 * S)
        # 0..10 s and the sample after: b's times are the even seconds
        assert data.times_ns.tolist() == [t * S for t in range(0, 13, 2)]
        # b = -a at h=1, d=0: odd_values[(t + 1) % 7], negated where t % 3 == 0
        expected = [-value_of(1, 0, t) for t in range(0, 13, 2)]
        assert data.values.tobytes() == np.array(expected).tobytes()
        assert np.signbit(data.values).tolist() == np.signbit(expected).tolist()


def test_late_and_out_of_order_points_read_sorted_and_exact(tmp_path):
    model: dict[int, float] = {}

    def write(store, points):
        store.write_lines("\n".join(f"m,host=a a={v!r} {t * S}" for t, v in points))
        model.update(points)

    def check(store):
        (info,) = store.list_series("m", "a")
        (data,) = store.read_series([info], -(2**63), 2**63 - 1)
        assert data.times_ns.tolist() == [t * S for t in sorted(model)]
        assert data.values.tolist() == [model[t] for t in sorted(model)]
        for start in (0, 4, 5, 6, 25, 59, 599, 600):  # neighbours of one-second ranges
            (data,) = store.read_series([info], start * S, start * S)
            times = sorted(model)
            wanted = [t for t in times if t < start][-1:] + [t for t in times if t == start]
            wanted += [t for t in times if t > start][:1]
            assert data.times_ns.tolist() == [t * S for t in wanted], start
            assert data.values.tolist() == [model[t] for t in wanted], start

    with SqliteStore(tmp_path / "late.sqlite") as store:
        write(store, [(t, t + 0.5) for t in range(59, 49, -1)])  # newest first
        write(store, [(t, -t - 0.25) for t in (9, 3, 0, 7, 1, 8, 2, 6, 4, 5)])  # shuffled
        store.compact(now_ns=61 * S)
        write(store, [(t, t * 10.0) for t in range(39, 29, -1)])
        write(store, [(5, 555.0), (0, 1e9)])  # rewrites of folded points
        check(store)
        store.compact(now_ns=62 * S)
        check(store)
        assert store.merge_windows(now_ns=2000 * S, quiet_ns=0) == 1
        check(store)
        # late data for the merged window: a point between others, a rewrite, one past
        # the end of what it held, and one in the next window
        write(store, [(25, 25.25), (5, -5.5), (60, 60.5), (600, 6.0)])
        check(store)
        store.compact(now_ns=2001 * S)
        assert store.db.read_conn().execute("SELECT count(*) FROM blocks").fetchone() == (3,)
        check(store)
        assert store.merge_windows(now_ns=3000 * S, quiet_ns=0) == 1
        assert store.db.read_conn().execute("SELECT count(*) FROM blocks").fetchone() == (2,)
        check(store)


def test_readers_see_whole_snapshots_while_compaction_folds_and_merges(tmp_path, monkeypatch):
    # small steps, so that a fold and a merge are many transactions each
    monkeypatch.setattr(store_samples, "MERGE_STEP_SAMPLES", 500)
    with SqliteStore(tmp_path / "r.sqlite") as store:
        for start in range(0, 1250, 25):
            store.write_lines(agent_body(range(start, start + 25)))
        expected = read_all(store, 0, 1300 * S)
        done = threading.Event()
        reads, errors = [], []

        def reader():
            try:
                while not done.is_set() or not reads:
                    reads.append(read_all(store, 0, 1300 * S) == expected)
            except Exception as error:  # pragma: no cover - reported below
                errors.append(error)

        thread = threading.Thread(target=reader)
        thread.start()
        try:
            assert store.compact(batches_per_step=2, now_ns=1300 * S) == 50
            assert store.merge_windows(now_ns=10**6 * S, quiet_ns=0) == 2 * 6
        finally:
            done.set()
            thread.join(timeout=60)
        assert errors == []
        assert reads and all(reads), f"{reads.count(False)} of {len(reads)} reads differed"
        assert read_all(store, 0, 1300 * S) == expected


def test_retention_forgets_the_windows_it_dropped(tmp_path):
    with SqliteStore(tmp_path / "ret.sqlite") as store:
        store.write_lines(agent_body(range(0, 1300, 10), hosts=1))
        store.compact(now_ns=1300 * S)
        conn = store.db.read_conn()
        assert conn.execute("SELECT DISTINCT window_no FROM unmerged_windows").fetchall() == [
            (0,),
            (1,),
            (2,),
        ]
        # the cutoff 700 s drops the blocks that end before it: window 0's (0..590 s)
        assert store.delete_before(700 * S) == 2
        remaining = conn.execute("SELECT DISTINCT window_no FROM unmerged_windows").fetchall()
        assert remaining == [(1,), (2,)]
        assert store.merge_windows(now_ns=10**6 * S, quiet_ns=0) == 0  # a block each
        assert conn.execute("SELECT count(*) FROM unmerged_windows").fetchone() == (0,)
        (info, _) = store.list_series("m", "c", "h0")
        (data,) = store.read_series([info], 0, 10**4 * S)
        assert data.times_ns[0] == 600 * S


def make_version_2_file(path: Path) -> dict:
    """A store as the previous collector left it: one block per window, no
    unmerged_windows table, user_version 2. Returns what it reads back."""
    with SqliteStore(path) as store:
        store.write_lines(agent_body(range(0, 1300, 10), hosts=2))
        store.compact(now_ns=10**6 * S)
        store.merge_windows(now_ns=10**6 * S, quiet_ns=0)
        store.write_lines(agent_body(range(1300, 1310), hosts=2))  # a batch not yet folded
        expected = read_all(store, 0, 2000 * S)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE unmerged_windows")
    conn.execute("PRAGMA user_version = 2")
    conn.close()
    return expected


def test_a_version_2_file_is_upgraded_in_place(tmp_path):
    path = tmp_path / "v2.sqlite"
    expected = make_version_2_file(path)
    with SqliteStore(path) as store:
        assert store.db.read_conn().execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert read_all(store, 0, 2000 * S) == expected
        assert store.compact(now_ns=1400 * S) == 1
        assert read_all(store, 0, 2000 * S) == expected
    with SqliteStore(path) as store:  # and opens again as version 3
        assert read_all(store, 0, 2000 * S) == expected


@pytest.mark.parametrize(
    ("version", "message"),
    [(1, "schema 1.*start a new database"), (SCHEMA_VERSION + 1, "newer collector")],
)
def test_other_schema_versions_are_refused_clearly(tmp_path, version, message):
    path = tmp_path / f"v{version}.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE blocks (id INTEGER PRIMARY KEY)")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.close()
    with pytest.raises(RuntimeError, match=message):
        SqliteStore(path)
