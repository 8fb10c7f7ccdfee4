"""The embedded store: one SQLite file (WAL) holding samples as column blocks, and events.

Why blocks. The analysis reads whole series ranges (a 3-hour run of 8 hosts x ~300 series at
1 Hz is ~26M values) and the ingest must keep up with bursts of hundreds of thousands of
samples per second. A row per sample costs microseconds to insert and to read back into
Python, 26M times over; a block holds many samples of one tag set as numpy arrays in BLOBs,
so a read is a few thousand ``numpy.frombuffer`` calls. The layout follows Prometheus' TSDB
(a head of recent writes, then per-series chunks by time window), with the tag set rather
than the series as the unit: an agent line carries all fields of a tag set at one
timestamp, so they share one time vector.

Tables (times are ns since the epoch, int64; arrays are little-endian BLOBs):

``tagsets``  id, measurement, host (the ``host`` tag, '' when absent), tags (JSON object of
             the other tags, keys sorted)
``series``   id, tagset_id, field: one numeric field of one tag set (``SeriesInfo``)
``batches``  the head: one row per write request, as it came. ``groups`` int64[g, 3] (tag
             set id, points n, series k of each group), ``series_ids`` int64[sum k],
             ``times`` int64[sum n] (ascending, unique within a group), ``vals``
             float64[sum n*k] (each group n rows of k: a row per point, as lines come).
             One INSERT per request, whatever it holds: this is what makes ingest cheap.
``blocks``   the compacted samples: tagset_id, min_ns, max_ns, n, ``series_ids``
             int64[k], ``times`` int64[n] ascending and unique, ``vals`` float64[k, n].
             NaN marks "no value at that time" (line protocol cannot carry NaN, so it is
             never a real sample). A block never spans two ``CHUNK_NS`` windows; a window
             may hold several blocks (one per fold) until it is merged. ``id`` is the write
             order: of two blocks, the one with the larger id holds the newer writes.
``unmerged_windows``  tagset_id, window_no (time // ``CHUNK_NS``), last_fold_ns: the
             windows that got a block since they were last merged, and when (the
             collector's clock).
``events``   workload points: run_id, host, rank, framework, event, time_ns, fields (JSON);
             key (run_id, time_ns, host, rank, event)
``runs``     run_id, framework, first_ns, last_ns; ``run_hosts`` (run_id, host)

Writes: a request's groups go into one ``batches`` row in one transaction, committed before
:meth:`SqliteStore.write` returns. With WAL and ``synchronous=NORMAL`` a committed write
survives the process being killed (a power cut may lose the last transactions: see
``SYNCHRONOUS``).

Compaction (:meth:`SqliteStore.compact`, which the server runs every 30 s) is append-only, so
its cost follows what was written since the last pass, never what a window already holds:

1. **fold**: batches, oldest first, become NEW blocks, one per tag set per window holding
   only the folded points; the batches are deleted in the same transaction. Existing blocks
   are neither read nor rewritten (at 1 Hz and one pass every 30 s an open window collects
   about 20 blocks of 30 samples per tag set).
2. **merge**: once a window is over (its end ``MERGE_AFTER_NS`` ago) and nothing was folded
   into it for ``MERGE_QUIET_NS``, its blocks are merged into one. Each point is rewritten
   once this way, in steps of at most ``MERGE_STEP_SAMPLES`` values per transaction; late
   data for a merged window adds a block, and the window is merged again once quiet.

Both read outside the write lock (only compaction and retention change ``blocks``, under
one maintenance lock) and hold it only to commit what they computed.

Reads merge a tag set's blocks with its parts of every batch. Re-sending a point stores it
once in effect: duplicates (same series, same time) are merged by every read and by the
window merge, last written wins (as in InfluxDB); batches always count as newer than
blocks, which holds because compaction takes them oldest first, and a block with a larger
id as newer than one with a smaller id.

Reads go through their own connection per thread, so the dashboard and ``collector report``
read while ``collector serve`` writes (WAL: readers never block the writer).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sqlite3
import threading
import time
from array import array
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.point import Point, encode_lines
from agent.schema import Event, RunState, Tag, Workload
from collector.lineprotocol import ParsedBody, SampleGroup, parse_body
from collector.store_api import RunInfo, SeriesData, SeriesInfo, StepTable, WorkloadEvent

log = logging.getLogger(__name__)

# 1: a row per block written, before batches; 2: each fold rewrote its window's block
# (readable as version 3: it only lacks unmerged_windows, which the upgrade adds)
SCHEMA_VERSION = 3
CHUNK_NS = 10 * 60 * 10**9  # compaction windows: 600 samples per series at 1 Hz
SYNCHRONOUS = "NORMAL"  # WAL: durable across process crashes; FULL adds power-cut safety
MMAP_BYTES = 1 << 32  # address space for reads (not memory): the whole file when it fits
FOLD_STEP_BYTES = 32 << 20  # values a fold step takes from batches at most (its memory)
MERGE_AFTER_NS = 60 * 10**9  # a window is merged once it ended this long ago ...
MERGE_QUIET_NS = 60 * 10**9  # ... and nothing was folded into it for this long
MERGE_STEP_SAMPLES = 1 << 20  # values read and rewritten per merge transaction (8 MiB)
MERGE_CALL_SAMPLES = 32 << 20  # values merged per compact() call at most; the rest waits
# how far back (or on) to look for the sample beyond a range: an open window holds a block
# per fold (about 20), a merged window one
_NEIGHBOUR_BLOCKS = 64

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tagsets (
    id INTEGER PRIMARY KEY,
    measurement TEXT NOT NULL,
    host TEXT NOT NULL,
    tags TEXT NOT NULL,
    UNIQUE (measurement, host, tags)
);
CREATE TABLE IF NOT EXISTS series (
    id INTEGER PRIMARY KEY,
    tagset_id INTEGER NOT NULL REFERENCES tagsets (id),
    field TEXT NOT NULL,
    UNIQUE (tagset_id, field)
);
CREATE INDEX IF NOT EXISTS series_by_field ON series (field);
CREATE TABLE IF NOT EXISTS blocks (
    id INTEGER PRIMARY KEY,
    tagset_id INTEGER NOT NULL,
    min_ns INTEGER NOT NULL,
    max_ns INTEGER NOT NULL,
    n INTEGER NOT NULL,
    holes INTEGER NOT NULL,
    series_ids BLOB NOT NULL,
    times BLOB NOT NULL,
    vals BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS blocks_by_end ON blocks (tagset_id, max_ns);
CREATE TABLE IF NOT EXISTS unmerged_windows (
    tagset_id INTEGER NOT NULL,
    window_no INTEGER NOT NULL,
    last_fold_ns INTEGER NOT NULL,
    PRIMARY KEY (tagset_id, window_no)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (
    id INTEGER PRIMARY KEY,
    min_ns INTEGER NOT NULL,
    max_ns INTEGER NOT NULL,
    groups BLOB NOT NULL,
    series_ids BLOB NOT NULL,
    times BLOB NOT NULL,
    vals BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    time_ns INTEGER NOT NULL,
    host TEXT NOT NULL,
    rank INTEGER NOT NULL,
    event TEXT NOT NULL,
    framework TEXT NOT NULL,
    fields TEXT NOT NULL,
    PRIMARY KEY (run_id, time_ns, host, rank, event)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS events_by_kind ON events (event, run_id);
CREATE INDEX IF NOT EXISTS events_by_run_kind ON events (run_id, event, time_ns);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    framework TEXT NOT NULL,
    first_ns INTEGER NOT NULL,
    last_ns INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS run_hosts (
    run_id TEXT NOT NULL,
    host TEXT NOT NULL,
    PRIMARY KEY (run_id, host)
) WITHOUT ROWID;
"""


@dataclass
class WriteResult:
    points: int
    samples: int
    events: int


@dataclass(slots=True)
class _Block:
    """Columns of one tag set: a ``blocks`` row, or one group of a ``batches`` row."""

    block_id: int  # write order (batches: _BATCH_ORDER + batch id)
    min_ns: int
    max_ns: int
    ids: bytes  # the series ids as stored (compared as bytes: same field set?)
    times: np.ndarray  # int64 (n,)
    vals: np.ndarray  # float64 (k, n), possibly a transposed view
    holes: bool = True  # may hold NaN (no value); False lets reads skip looking

    @property
    def series_ids(self) -> np.ndarray:
        return np.frombuffer(self.ids, dtype=np.int64)

    @classmethod
    def from_row(cls, row: tuple) -> _Block:
        block_id, min_ns, max_ns, holes, ids, times, vals = row
        times_ns = np.frombuffer(times, dtype=np.int64)
        values = np.frombuffer(vals, dtype=np.float64).reshape(len(ids) // 8, times_ns.size)
        return cls(block_id, min_ns, max_ns, ids, times_ns, values, bool(holes))


_BLOCK_COLUMNS = "id, min_ns, max_ns, holes, series_ids, times, vals"
_BATCH_COLUMNS = "id, groups, series_ids, times, vals"
_BATCH_ORDER = 1 << 62  # batches sort after every block: they hold the newest writes
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _tags_key(tags: dict[str, str]) -> tuple[str, str]:
    """(host, JSON of the other tags with sorted keys)."""
    others = {key: tags[key] for key in sorted(tags) if key != Tag.HOST}
    return tags.get(Tag.HOST, ""), json.dumps(others, separators=(",", ":"))


class SqliteStore:
    """Samples and workload events in one SQLite file; implements ``ReadStore``.

    One instance may be shared by threads: writes are serialised on one writer connection,
    reads use one connection per thread.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._write_lock = threading.RLock()
        # compaction and retention: the only changes to blocks, so they read them unlocked
        self._maintenance_lock = threading.Lock()
        self._writer: sqlite3.Connection | None = None
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        # (measurement, tags as written, field names) -> (tagset id, series ids as bytes)
        self._group_ids: dict[tuple, tuple[int, bytes]] = {}
        self._series_tagset: dict[int, int] = {}
        self._closed = False
        self._create()

    # ---------------------------------------------------------------- connections

    def _connect(self) -> sqlite3.Connection:
        # the writer moves between request threads behind _write_lock; readers stay in
        # their thread but close() may run in another
        conn = sqlite3.connect(
            self.path, timeout=30.0, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA busy_timeout = 30000")
        return conn

    def _create(self) -> None:
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = self._connect()
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                conn.executescript(_SCHEMA)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif version == 2:
                # a version 2 file is a version 3 file whose windows are all merged
                conn.executescript(
                    f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
                )
                log.info("%s: store schema upgraded from 2 to %d", self.path, SCHEMA_VERSION)
            elif version != SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path} has store schema {version}, this collector knows"
                    f" {SCHEMA_VERSION} (and upgrades 2): "
                    + (
                        "it was written by a newer collector"
                        if version > SCHEMA_VERSION
                        else "no upgrade from so old a file; start a new database"
                    )
                )
        finally:
            conn.close()

    def _write_conn(self) -> sqlite3.Connection:
        if self._writer is None:
            conn = self._connect()
            conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
            self._writer = conn
        return self._writer

    def _read_conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise RuntimeError("store is closed")
            conn = self._connect()
            # reads copy BLOBs straight from the mapped file: 2-3x faster than via the cache
            conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    @contextmanager
    def _read_snapshot(self) -> Iterator[sqlite3.Connection]:
        """One consistent view across several SELECTs."""
        conn = self._read_conn()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def close(self) -> None:
        self._closed = True
        with self._write_lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        self._local = threading.local()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------- writes

    def write(self, parsed: ParsedBody) -> WriteResult:
        """Store a parsed body in one transaction; committed when this returns."""
        with self._write_lock:
            conn = self._write_conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                if parsed.groups:
                    conn.execute(
                        "INSERT INTO batches (min_ns, max_ns, groups, series_ids, times, vals)"
                        " VALUES (?, ?, ?, ?, ?, ?)",
                        self._batch_row(conn, parsed.groups),
                    )
                if parsed.events:
                    self._write_events(conn, parsed.events)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                # ids created in the rolled-back transaction are gone
                self._group_ids.clear()
                raise
        return WriteResult(parsed.points, parsed.samples, len(parsed.events))

    def write_lines(self, text: str, precision: str = "ns") -> ParsedBody:
        """Parse line protocol and store its valid lines; the parse result says what was bad."""
        parsed = parse_body(text, precision)
        self.write(parsed)
        return parsed

    def write_points(self, points: Iterable[Point]) -> ParsedBody:
        return self.write_lines(encode_lines(points))

    def _batch_row(self, conn: sqlite3.Connection, groups: list[SampleGroup]) -> tuple:
        """One ``batches`` row holding every group of a body (see the module docstring)."""
        index = array("q")
        series_parts, time_parts, value_parts = [], [], []
        known = self._group_ids
        for group in groups:
            ids = known.get(group.key)
            if ids is None:
                ids = known[group.key] = self._create_ids(conn, group)
            index.extend((ids[0], group.n, len(group.fields)))
            series_parts.append(ids[1])
            time_parts.append(group.times)
            value_parts.append(group.vals)
        return (
            min(group.min_ns for group in groups),
            max(group.max_ns for group in groups),
            index.tobytes(),
            b"".join(series_parts),
            b"".join(time_parts),
            b"".join(value_parts),
        )

    def _create_ids(self, conn: sqlite3.Connection, group: SampleGroup) -> tuple[int, bytes]:
        host, tags_json = _tags_key(group.tags)
        conn.execute(
            "INSERT OR IGNORE INTO tagsets (measurement, host, tags) VALUES (?, ?, ?)",
            (group.measurement, host, tags_json),
        )
        (tagset_id,) = conn.execute(
            "SELECT id FROM tagsets WHERE measurement = ? AND host = ? AND tags = ?",
            (group.measurement, host, tags_json),
        ).fetchone()
        series_ids = []
        for name in group.fields:
            conn.execute(
                "INSERT OR IGNORE INTO series (tagset_id, field) VALUES (?, ?)", (tagset_id, name)
            )
            (series_id,) = conn.execute(
                "SELECT id FROM series WHERE tagset_id = ? AND field = ?", (tagset_id, name)
            ).fetchone()
            series_ids.append(series_id)
        return tagset_id, np.array(series_ids, dtype=np.int64).tobytes()

    def _write_events(self, conn: sqlite3.Connection, events: list[Point]) -> None:
        rows = []
        spans: dict[str, list] = {}  # run_id -> [framework, first, last]
        hosts: set[tuple[str, str]] = set()
        for point in events:
            tags = point.tags
            run_id = tags.get(Tag.RUN_ID, "")
            host = tags.get(Tag.HOST, "")
            framework = tags.get(Tag.FRAMEWORK, "")
            fields = dict(point.fields)
            event = str(fields.pop(Workload.EVENT, ""))
            rows.append(
                (
                    run_id,
                    point.time_ns,
                    host,
                    _rank(tags.get(Tag.RANK)),
                    event,
                    framework,
                    json.dumps(fields, separators=(",", ":")),
                )
            )
            span = spans.get(run_id)
            if span is None:
                spans[run_id] = [framework, point.time_ns, point.time_ns]
            else:
                span[0] = span[0] or framework
                span[1] = min(span[1], point.time_ns)
                span[2] = max(span[2], point.time_ns)
            hosts.add((run_id, host))
        conn.executemany(
            "INSERT OR REPLACE INTO events (run_id, time_ns, host, rank, event, framework,"
            " fields) VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.executemany(
            "INSERT INTO runs (run_id, framework, first_ns, last_ns) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (run_id) DO UPDATE SET"
            " framework = CASE WHEN framework = '' THEN excluded.framework ELSE framework END,"
            " first_ns = min(first_ns, excluded.first_ns),"
            " last_ns = max(last_ns, excluded.last_ns)",
            [(run_id, *span) for run_id, span in spans.items()],
        )
        conn.executemany("INSERT OR IGNORE INTO run_hosts (run_id, host) VALUES (?, ?)", hosts)

    # ---------------------------------------------------------------- maintenance

    def compact(self, batches_per_step: int = 4096, now_ns: int | None = None) -> int:
        """Fold the written batches, oldest first, into new blocks, then merge the windows
        that are over (see the module docstring). Returns the number of batches folded.

        Folds what was written before the call, in steps of at most ``batches_per_step``
        batches (and ``FOLD_STEP_BYTES`` of values), one transaction each, so writes go on
        in between. ``now_ns`` (default: the clock) decides which windows are over.
        """
        now_ns = time.time_ns() if now_ns is None else now_ns
        folded = 0
        with self._maintenance_lock:
            started = time.perf_counter()
            (last_id,) = self._read_conn().execute("SELECT max(id) FROM batches").fetchone()
            while last_id is not None:
                count, more = self._fold_step(last_id, batches_per_step, now_ns)
                folded += count
                if not more:
                    break
            fold_s = time.perf_counter() - started
            merged = self._merge_windows(now_ns, MERGE_QUIET_NS, MERGE_CALL_SAMPLES)
            took_s = time.perf_counter() - started
            log.log(
                logging.INFO if took_s >= 1.0 else logging.DEBUG,
                "compaction: %d batches folded in %.2f s, %d windows merged in %.2f s",
                folded,
                fold_s,
                merged,
                took_s - fold_s,
            )
        return folded

    def merge_windows(
        self,
        now_ns: int | None = None,
        quiet_ns: int = MERGE_QUIET_NS,
        max_samples: int = MERGE_CALL_SAMPLES,
    ) -> int:
        """Merge the blocks of each window that ended ``MERGE_AFTER_NS`` before ``now_ns``
        and got no block for ``quiet_ns`` into one block (``compact`` does this with the
        defaults). Stops after about ``max_samples`` values. Returns the windows merged."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        with self._maintenance_lock:
            return self._merge_windows(now_ns, quiet_ns, max_samples)

    def _fold_step(self, last_id: int, limit: int, now_ns: int) -> tuple[int, bool]:
        """Fold the oldest batches (ids up to ``last_id``) into new blocks: (batches folded,
        whether more are left)."""
        rows: list[tuple] = []
        size = 0
        with self._read_snapshot() as conn:
            cursor = conn.execute(
                f"SELECT {_BATCH_COLUMNS} FROM batches WHERE id <= ? ORDER BY id LIMIT ?",
                (last_id, limit),
            )
            try:
                for row in cursor:
                    rows.append(row)
                    size += len(row[4])
                    if size >= FOLD_STEP_BYTES:
                        break
            finally:
                cursor.close()
        if not rows:
            return 0, False
        read, last_read = len(rows), rows[-1][0]
        gathered = _gather_batches(rows)
        del rows  # (copied by the gather: the step's peak memory is a few times its values)
        inserts = []
        for tagset_id, new_blocks in gathered.items():
            inserts.extend(_window_rows(tagset_id, *_merge_blocks(new_blocks)))
        del gathered
        windows = {(row[0], row[1] // CHUNK_NS) for row in inserts}
        with self._write_lock:
            conn = self._write_conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT INTO blocks (tagset_id, min_ns, max_ns, n, holes, series_ids, times,"
                    " vals) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    inserts,
                )
                conn.executemany(
                    "INSERT INTO unmerged_windows (tagset_id, window_no, last_fold_ns)"
                    " VALUES (?, ?, ?) ON CONFLICT (tagset_id, window_no) DO UPDATE SET"
                    " last_fold_ns = max(last_fold_ns, excluded.last_fold_ns)",
                    [(tagset_id, window, now_ns) for tagset_id, window in windows],
                )
                # every batch up to this id was read: a batch written since has a larger id
                # (SQLite gives max(id) + 1, and those read are still there)
                conn.execute("DELETE FROM batches WHERE id <= ?", (last_read,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        more = read == limit or size >= FOLD_STEP_BYTES
        return read, more

    def _merge_windows(self, now_ns: int, quiet_ns: int, max_samples: int) -> int:
        over_before = (now_ns - MERGE_AFTER_NS) // CHUNK_NS  # windows before this one ended
        candidates = (
            self._read_conn()
            .execute(
                "SELECT tagset_id, window_no FROM unmerged_windows"
                " WHERE window_no < ? AND last_fold_ns <= ? ORDER BY window_no, tagset_id",
                (_clamp(over_before), _clamp(now_ns - quiet_ns)),
            )
            .fetchall()
        )
        merged = 0
        budget = max_samples
        position = 0
        while position < len(candidates) and budget > 0:
            # read a step's windows in one snapshot, merge outside it, commit under the lock
            windows: list[tuple[int, int]] = []
            to_merge: list[tuple[int, list[_Block]]] = []
            step_samples = 0
            with self._read_snapshot() as conn:
                while position < len(candidates) and step_samples < MERGE_STEP_SAMPLES:
                    tagset_id, window = candidates[position]
                    position += 1
                    windows.append((tagset_id, window))
                    low = _clamp(window * CHUNK_NS)
                    high = _clamp((window + 1) * CHUNK_NS - 1)
                    blocks = [
                        _Block.from_row(row)
                        for row in conn.execute(
                            f"SELECT {_BLOCK_COLUMNS} FROM blocks WHERE tagset_id = ?"
                            " AND max_ns >= ? AND max_ns <= ? ORDER BY id",
                            (tagset_id, low, high),
                        )
                    ]
                    if len(blocks) > 1:  # one block (or none, after retention) is merged
                        to_merge.append((tagset_id, blocks))
                        step_samples += sum(block.vals.size for block in blocks)
            deletes, inserts = [], []
            for tagset_id, blocks in to_merge:
                deletes.extend((block.block_id,) for block in blocks)
                inserts.extend(_window_rows(tagset_id, *_merge_blocks(blocks)))
            with self._write_lock:
                conn = self._write_conn()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany("DELETE FROM blocks WHERE id = ?", deletes)
                    conn.executemany(
                        "INSERT INTO blocks (tagset_id, min_ns, max_ns, n, holes, series_ids,"
                        " times, vals) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        inserts,
                    )
                    conn.executemany(
                        "DELETE FROM unmerged_windows WHERE tagset_id = ? AND window_no = ?",
                        windows,
                    )
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            merged += len(to_merge)
            budget -= step_samples
        return merged

    def delete_before(self, cutoff_ns: int) -> int:
        """Retention: drop blocks (and batches) whose newest sample is older than
        ``cutoff_ns``. Events and runs are kept (they are small and name the runs). Returns
        the rows dropped.
        """
        with self._maintenance_lock, self._write_lock:
            conn = self._write_conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                dropped = conn.execute("DELETE FROM blocks WHERE max_ns < ?", (cutoff_ns,))
                dropped_batches = conn.execute("DELETE FROM batches WHERE max_ns < ?", (cutoff_ns,))
                # windows that ended by the cutoff have no block left
                conn.execute(
                    "DELETE FROM unmerged_windows WHERE window_no < ?", (cutoff_ns // CHUNK_NS,)
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return dropped.rowcount + dropped_batches.rowcount

    # ---------------------------------------------------------------- ReadStore

    def list_series(
        self, measurement: str, field: str, host: str | None = None
    ) -> list[SeriesInfo]:
        sql = (
            "SELECT series.id, tagsets.id, tagsets.host, tagsets.tags FROM series"
            " JOIN tagsets ON tagsets.id = series.tagset_id"
            " WHERE tagsets.measurement = ? AND series.field = ?"
        )
        args: list = [measurement, field]
        if host is not None:
            sql += " AND tagsets.host = ?"
            args.append(host)
        sql += " ORDER BY tagsets.host, tagsets.tags"
        found = []
        for series_id, tagset_id, series_host, tags in self._read_conn().execute(sql, args):
            self._series_tagset[series_id] = tagset_id
            found.append(SeriesInfo(series_id, measurement, series_host, field, json.loads(tags)))
        return found

    def read_series(self, series: list[SeriesInfo], start_ns: int, end_ns: int) -> list[SeriesData]:
        if not series:
            return []
        start_ns = min(max(start_ns, _INT64_MIN), _INT64_MAX)  # SQLite integers are int64
        end_ns = min(max(end_ns, _INT64_MIN), _INT64_MAX)
        with self._read_snapshot() as conn:
            batch_blocks: dict[int, list[_Block]] = {}
            for row in conn.execute(f"SELECT {_BATCH_COLUMNS} FROM batches ORDER BY id"):
                for tagset_id, block in _batch_blocks(row):
                    batch_blocks.setdefault(tagset_id, []).append(block)
            by_tagset: dict[int, list[SeriesInfo]] = {}
            for info, tagset_id in zip(series, self._tagsets_of(conn, series), strict=True):
                by_tagset.setdefault(tagset_id, []).append(info)
            found: dict[int, SeriesData] = {}
            for tagset_id, infos in by_tagset.items():
                for info, (times, values) in zip(
                    infos,
                    _read_tagset(
                        conn,
                        tagset_id,
                        [info.series_id for info in infos],
                        start_ns,
                        end_ns,
                        batch_blocks.get(tagset_id, []),
                    ),
                    strict=True,
                ):
                    found[info.series_id] = SeriesData(info, times, values)
        return [found[info.series_id] for info in series]

    def _tagsets_of(self, conn: sqlite3.Connection, series: list[SeriesInfo]) -> list[int]:
        missing = [info.series_id for info in series if info.series_id not in self._series_tagset]
        for offset in range(0, len(missing), 500):
            chunk = missing[offset : offset + 500]
            marks = ",".join("?" * len(chunk))
            for series_id, tagset_id in conn.execute(
                f"SELECT id, tagset_id FROM series WHERE id IN ({marks})", chunk
            ):
                self._series_tagset[series_id] = tagset_id
        # an unknown id reads as an empty series (tag set -1 has no blocks)
        return [self._series_tagset.get(info.series_id, -1) for info in series]

    def hosts(self) -> list[str]:
        rows = self._read_conn().execute(
            "SELECT host FROM tagsets UNION SELECT host FROM run_hosts ORDER BY 1"
        )
        return [host for (host,) in rows if host]

    def runs(self) -> list[RunInfo]:
        with self._read_snapshot() as conn:
            spans = conn.execute(
                "SELECT run_id, framework, first_ns, last_ns FROM runs WHERE run_id != ''"
            ).fetchall()
            hosts: dict[str, list[str]] = {}
            for run_id, host in conn.execute("SELECT run_id, host FROM run_hosts ORDER BY 1, 2"):
                hosts.setdefault(run_id, []).append(host)
            marks: dict[str, list[tuple]] = {}
            for row in conn.execute(
                "SELECT run_id, event, time_ns, rank, fields FROM events"
                " WHERE event IN (?, ?) ORDER BY time_ns",
                (Event.RUN_START, Event.RUN_END),
            ):
                marks.setdefault(row[0], []).append(row[1:])
        found = [
            _run_info(run_id, framework, first, last, hosts.get(run_id, []), marks.get(run_id, []))
            for run_id, framework, first, last in spans
        ]
        found.sort(key=lambda run: (run.start_ns, run.run_id), reverse=True)
        return found

    def events(
        self, run_id: str, since_ns: int | None = None, kinds: tuple[str, ...] | None = None
    ) -> list[WorkloadEvent]:
        sql = (
            "SELECT run_id, host, rank, framework, event, time_ns, fields FROM events"
            " WHERE run_id = ?"
        )
        args: list = [run_id]
        if since_ns is not None:
            sql += " AND time_ns > ?"
            args.append(since_ns)
        if kinds is not None:
            # by (run, kind): a run's few epoch events without walking its many steps
            sql = sql.replace("FROM events", "FROM events INDEXED BY events_by_run_kind")
            sql += f" AND event IN ({','.join('?' * len(kinds))})"
            args.extend(kinds)
        sql += " ORDER BY time_ns, rank, host"
        return [
            WorkloadEvent(run, host, rank, framework, event, time_ns, json.loads(fields))
            for run, host, rank, framework, event, time_ns, fields in self._read_conn().execute(
                sql, args
            )
        ]

    def steps(self, run_id: str, since_ns: int | None = None) -> StepTable:
        """The run's steps as columns, picked out of the JSON by SQLite (``_STEPS_SQL``):
        no event is decoded in Python."""
        sql = _STEPS_SQL
        args: list = [run_id, Event.STEP]
        if since_ns is not None:
            sql += " AND time_ns > ?"
            args.append(since_ns)
        sql += " ORDER BY time_ns, rank, host"
        try:
            rows = self._read_conn().execute(sql, args).fetchall()
        except sqlite3.OperationalError as error:  # fields SQLite's JSON cannot read (NaN)
            if "JSON" not in str(error):
                raise
            return StepTable.from_events(self.events(run_id, since_ns, kinds=(Event.STEP,)))
        if not rows:
            return StepTable.empty()
        host, rank, time_ns, images, seconds, epoch = zip(*rows, strict=True)
        return StepTable.from_columns(host, rank, time_ns, images, seconds, epoch)


def _json_number(name: str) -> str:
    """SQL for the field ``name`` of an event's JSON fields as a REAL, NULL unless it is a
    JSON number (``json_extract`` gives 1 for ``true`` and the text of a string)."""
    path = f"'$.\"{name}\"'"  # a quoted key: any name the schema spells
    return (
        f"CASE json_type(fields, {path}) WHEN 'integer' THEN json_extract(fields, {path}) * 1.0"
        f" WHEN 'real' THEN json_extract(fields, {path}) END"
    )


_STEPS_SQL = (
    "SELECT host, rank, time_ns, "
    + ", ".join(_json_number(name) for name in (Workload.IMAGES, Workload.SECONDS, Workload.EPOCH))
    + " FROM events INDEXED BY events_by_run_kind WHERE run_id = ? AND event = ?"
)


def _clamp(value: int) -> int:
    """An int SQLite can hold (int64)."""
    return min(max(value, _INT64_MIN), _INT64_MAX)


def _rank(text: str | None) -> int:
    try:
        return int(text) if text is not None else -1
    except ValueError:
        return -1


def _run_info(
    run_id: str,
    framework: str,
    first_ns: int,
    last_ns: int,
    hosts: list[str],
    marks: list[tuple[str, int, int, str]],
) -> RunInfo:
    """A run from its run_start and run_end events (``marks``: event, time, rank, fields).

    Rank 0's run_start is the configuration. The run failed if any rank says so; it
    finished when rank 0 (or, without a rank 0, every rank that started) ended.
    """
    starts: dict[int, tuple[int, dict]] = {}
    ends: dict[int, tuple[int, dict]] = {}
    for event, time_ns, rank, fields in marks:
        if event in (Event.RUN_START, Event.RUN_END):
            (starts if event == Event.RUN_START else ends)[rank] = (time_ns, json.loads(fields))
    config: dict = {}
    if starts:
        config = starts[0][1] if 0 in starts else starts[min(starts)][1]
    start_ns = min((t for t, _ in starts.values()), default=first_ns)
    failed = [t for t, f in ends.values() if f.get(Workload.STATE) == RunState.FAILED]
    if failed:
        state, end_ns = RunState.FAILED, max(t for t, _ in ends.values())
    elif ends and (0 in ends or (starts and set(starts) <= set(ends))):
        state, end_ns = RunState.FINISHED, max(t for t, _ in ends.values())
    else:
        state, end_ns = RunState.LIVE, None
    world_size = config.get(Workload.WORLD_SIZE)
    if not isinstance(world_size, int | float) or isinstance(world_size, bool):
        world_size = len(starts)
    model = config.get(Workload.MODEL, "")
    return RunInfo(
        run_id=run_id,
        framework=framework,
        model=str(model),
        hosts=tuple(hosts),
        world_size=int(world_size),
        start_ns=start_ns,
        end_ns=end_ns,
        state=state,
        config=config,
    )


def _batch_blocks(row: tuple) -> Iterator[tuple[int, _Block]]:
    """(tag set id, block) of each group in a ``batches`` row, as views of its BLOBs."""
    batch_id, groups, ids, times, vals = row
    index = np.frombuffer(groups, dtype=np.int64).reshape(-1, 3)
    all_times = np.frombuffer(times, dtype=np.int64)
    all_vals = np.frombuffer(vals, dtype=np.float64)
    time_stops = np.cumsum(index[:, 1])
    firsts = all_times[time_stops - index[:, 1]].tolist()
    lasts = all_times[time_stops - 1].tolist()
    order = _BATCH_ORDER + batch_id
    id_at = time_at = value_at = 0
    for group, (tagset_id, n, k) in enumerate(index.tolist()):
        block_vals = all_vals[value_at : value_at + n * k].reshape(n, k).T
        block = _Block(
            order,
            firsts[group],
            lasts[group],
            ids[id_at * 8 : (id_at + k) * 8],
            all_times[time_at : time_at + n],
            block_vals,
        )
        yield tagset_id, block
        id_at += k
        time_at += n
        value_at += n * k


def _gather_batches(rows: list[tuple]) -> dict[int, list[_Block]]:
    """Each tag set's samples in ``batches`` rows (in id order), as one block per tag set
    when its groups share one field set and follow each other in time (the usual case),
    else as one block per group. Vectorised over all groups: per-group Python work is one
    bytes slice."""
    indexes, times_parts, vals_parts, ids_parts, batch_of_group = [], [], [], [], []
    for batch_id, groups, ids, times, vals in rows:
        index = np.frombuffer(groups, dtype=np.int64).reshape(-1, 3)
        indexes.append(index)
        batch_of_group.append(np.full(len(index), batch_id, dtype=np.int64))
        times_parts.append(np.frombuffer(times, dtype=np.int64))
        vals_parts.append(np.frombuffer(vals, dtype=np.float64))
        ids_parts.append(ids)
    index = np.concatenate(indexes)
    batch_ids = np.concatenate(batch_of_group)
    all_times = np.concatenate(times_parts)
    all_vals = np.concatenate(vals_parts)
    all_ids = b"".join(ids_parts)
    tagsets, counts, widths = index[:, 0], index[:, 1], index[:, 2]
    time_starts = np.cumsum(counts) - counts
    value_counts = counts * widths
    value_starts = np.cumsum(value_counts) - value_counts
    id_stops = np.cumsum(widths).tolist()
    id_starts = (np.cumsum(widths) - widths).tolist()
    ids_of = [all_ids[a * 8 : b * 8] for a, b in zip(id_starts, id_stops, strict=True)]
    firsts = all_times[time_starts]
    lasts = all_times[time_starts + counts - 1]

    # by tag set, then by time: concurrent requests commit in any order, but groups that
    # do not overlap in time hold no duplicate to settle, so their write order is moot
    order = np.lexsort((firsts, tagsets))
    sorted_tagsets = tagsets[order]
    starts = np.flatnonzero(np.r_[True, sorted_tagsets[1:] != sorted_tagsets[:-1]]).tolist()
    stops = [*starts[1:], len(order)]
    follows = np.r_[False, firsts[order][1:] > lasts[order][:-1]].tolist()
    out_time_stops = np.cumsum(counts[order]).tolist()
    out_value_stops = np.cumsum(value_counts[order]).tolist()
    times_sorted = all_times[_ranges(time_starts[order], counts[order])]
    vals_sorted = all_vals[_ranges(value_starts[order], value_counts[order])]
    order_list = order.tolist()
    firsts_list, lasts_list = firsts.tolist(), lasts.tolist()
    found: dict[int, list[_Block]] = {}
    for start, stop in zip(starts, stops, strict=True):
        members = order_list[start:stop]
        tagset_id = int(sorted_tagsets[start])
        first = members[0]
        width = int(widths[first])
        if all(ids_of[g] == ids_of[first] for g in members) and all(follows[start + 1 : stop]):
            t_from = out_time_stops[start - 1] if start else 0
            v_from = out_value_stops[start - 1] if start else 0
            times = times_sorted[t_from : out_time_stops[stop - 1]]
            vals = vals_sorted[v_from : out_value_stops[stop - 1]].reshape(-1, width).T
            block = _Block(
                _BATCH_ORDER + int(batch_ids[members[-1]]),
                firsts_list[first],
                lasts_list[members[-1]],
                ids_of[first],
                times,
                vals,
            )
            found[tagset_id] = [block]
            continue
        blocks = []
        for g in sorted(members):  # field sets changed or writes overlap: write order
            n, k = int(counts[g]), int(widths[g])
            times = all_times[time_starts[g] : time_starts[g] + n]
            vals = all_vals[value_starts[g] : value_starts[g] + n * k].reshape(n, k).T
            order_g = _BATCH_ORDER + int(batch_ids[g])
            blocks.append(_Block(order_g, firsts_list[g], lasts_list[g], ids_of[g], times, vals))
        found[tagset_id] = blocks
    return found


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(start, start + length)`` for each pair, vectorised."""
    if lengths.size == 0:
        return np.empty(0, dtype=np.int64)
    out_starts = np.cumsum(lengths) - lengths
    return np.repeat(starts - out_starts, lengths) + np.arange(int(lengths.sum()))


def _merge_blocks(blocks: list[_Block]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One (series_ids, times, vals (k, n)) from blocks in write order; later writes win."""
    first = blocks[0]
    by_time = sorted(blocks, key=lambda block: block.min_ns)
    if all(block.ids == first.ids for block in blocks) and all(
        block.min_ns > previous.max_ns for previous, block in itertools.pairwise(by_time)
    ):  # the usual case: one field set, no two blocks at the same time
        if len(blocks) == 1:
            return first.series_ids, first.times, first.vals
        times = np.concatenate([block.times for block in by_time])
        return first.series_ids, times, np.concatenate([block.vals for block in by_time], axis=1)
    # Exact: every (series, time, value) in write order, the last of each (series, time) kept
    series_ids = np.unique(np.concatenate([block.series_ids for block in blocks]))
    times = np.unique(np.concatenate([block.times for block in blocks]))
    cells, values = [], []
    for block in blocks:
        rows = np.searchsorted(series_ids, block.series_ids)
        cols = np.searchsorted(times, block.times)
        cells.append((rows[:, None] * times.size + cols[None, :]).ravel())
        values.append(np.ascontiguousarray(block.vals).ravel())
    cell, value = np.concatenate(cells), np.concatenate(values)
    written = ~np.isnan(value)  # NaN: that write had no such field
    cell, value = cell[written], value[written]
    _, last_from_end = np.unique(cell[::-1], return_index=True)
    last = cell.size - 1 - last_from_end
    vals = np.full((series_ids.size, times.size), np.nan)
    vals.flat[cell[last]] = value[last]
    return series_ids, times, vals


def _window_rows(
    tagset_id: int, series_ids: np.ndarray, times: np.ndarray, vals: np.ndarray
) -> list[tuple]:
    """``blocks`` rows of merged columns cut at ``CHUNK_NS`` windows (a series with no
    value in a window is left out of that window's block)."""
    first_window, last_window = int(times[0]) // CHUNK_NS, int(times[-1]) // CHUNK_NS
    if first_window == last_window:
        bounds = [(0, int(times.size))]
    else:
        edges = (np.flatnonzero(np.diff(times // CHUNK_NS)) + 1).tolist()
        bounds = list(zip([0, *edges], [*edges, int(times.size)], strict=True))
    holes = bool(np.isnan(vals).any())  # one pass here saves one on every read
    rows = []
    for start, stop in bounds:
        window_vals = vals[:, start:stop]
        window_ids = series_ids
        window_holes = False
        if holes:
            present = ~np.all(np.isnan(window_vals), axis=1)
            window_vals, window_ids = window_vals[present], series_ids[present]
            window_holes = bool(np.isnan(window_vals).any())
        rows.append(
            (
                tagset_id,
                int(times[start]),
                int(times[stop - 1]),
                stop - start,
                int(window_holes),
                window_ids.tobytes(),
                times[start:stop].tobytes(),
                np.ascontiguousarray(window_vals).tobytes(),
            )
        )
    return rows


def _read_tagset(
    conn: sqlite3.Connection,
    tagset_id: int,
    series_ids: list[int],
    start_ns: int,
    end_ns: int,
    batch_blocks: list[_Block],
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(times, values) of each wanted series of one tag set in [start, end], plus the
    nearest sample on either side. ``batch_blocks``: the tag set's not yet compacted
    writes, all of them."""
    blocks = [
        _Block.from_row(row)
        for row in conn.execute(
            f"SELECT {_BLOCK_COLUMNS} FROM blocks"
            " WHERE tagset_id = ? AND max_ns >= ? AND min_ns <= ?",
            (tagset_id, start_ns, end_ns),
        )
    ]
    blocks.extend(batch_blocks)
    results = _cut_blocks(blocks, series_ids, start_ns, end_ns)
    # The nearest sample before the range may sit in a block that ends before it (and the
    # one after in a block that starts after it): walk those blocks nearest first while one
    # could hold a nearer sample than the one found.
    beyond = (
        ("max_ns < :bound ORDER BY max_ns DESC", start_ns, _before_improvable),
        # (max_ns > bound lets the (tagset_id, max_ns) index narrow the search)
        ("max_ns > :bound AND min_ns > :bound ORDER BY min_ns", end_ns, _after_improvable),
    )
    for condition, bound, improvable in beyond:
        rows = conn.execute(
            f"SELECT {_BLOCK_COLUMNS} FROM blocks WHERE tagset_id = :tagset AND {condition}"
            f" LIMIT {_NEIGHBOUR_BLOCKS}",
            {"tagset": tagset_id, "bound": bound},
        )
        for row in rows:
            block = _Block.from_row(row)
            pending = [
                i
                for i, (times, _) in enumerate(results)
                if improvable(times, block, start_ns, end_ns)
            ]
            if not pending:
                break
            blocks.append(block)
            present = set(block.series_ids.tolist())
            hits = [i for i in pending if series_ids[i] in present]
            if hits:
                cut = _cut_blocks(blocks, [series_ids[i] for i in hits], start_ns, end_ns)
                for i, result in zip(hits, cut, strict=True):
                    results[i] = result
    return results


def _before_improvable(times: np.ndarray, block: _Block, start_ns: int, end_ns: int) -> bool:
    """Could ``block`` (ending before the range) hold a later sample before start, or a
    newer write of the one found (blocks of one window may overlap: late writes)?"""
    return times.size == 0 or times[0] >= start_ns or times[0] <= block.max_ns


def _after_improvable(times: np.ndarray, block: _Block, start_ns: int, end_ns: int) -> bool:
    return times.size == 0 or times[-1] <= end_ns or times[-1] >= block.min_ns


def _cut_blocks(
    blocks: list[_Block], series_ids: list[int], start_ns: int, end_ns: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each series over the blocks, duplicates merged (later writes win), cut to
    [start, end] plus one sample either side."""
    by_time = sorted(blocks, key=lambda b: (b.min_ns, b.block_id))
    disjoint = all(b.min_ns > a.max_ns for a, b in itertools.pairwise(by_time))
    ordered = by_time if disjoint else sorted(blocks, key=lambda b: b.block_id)
    rows_of = [{sid: row for row, sid in enumerate(b.series_ids.tolist())} for b in ordered]
    has_nan = [b.holes for b in ordered]
    shared_times: np.ndarray | None = None  # all blocks' times, for series in every block
    results = []
    for series_id in series_ids:
        rows = [rows_of_block.get(series_id) for rows_of_block in rows_of]
        if disjoint and None not in rows and not any(has_nan):
            if shared_times is None:
                shared_times = _concat([b.times for b in ordered], np.int64)
            times = shared_times
            pieces = [block.vals[row] for block, row in zip(ordered, rows, strict=True)]
            values = _concat(pieces, np.float64)
        else:
            times_parts, value_parts = [], []
            for block, row, nan in zip(ordered, rows, has_nan, strict=True):
                if row is None:
                    continue
                block_times, block_values = block.times, block.vals[row]
                if nan:
                    keep = ~np.isnan(block_values)
                    block_times, block_values = block_times[keep], block_values[keep]
                times_parts.append(block_times)
                value_parts.append(block_values)
            times = _concat(times_parts, np.int64)
            values = _concat(value_parts, np.float64)
            if not disjoint and times.size > 1 and not bool(np.all(times[1:] > times[:-1])):
                order = np.argsort(times, kind="stable")
                times, values = times[order], values[order]
                last_of_run = np.append(times[1:] != times[:-1], True)
                times, values = times[last_of_run], values[last_of_run]
        first = max(int(np.searchsorted(times, start_ns, "left")) - 1, 0)
        stop = int(np.searchsorted(times, end_ns, "right")) + 1
        results.append((times[first:stop], values[first:stop]))
    return results


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    if not parts:
        return np.empty(0, dtype=dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
