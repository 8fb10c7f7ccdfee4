"""The embedded store: one SQLite file (WAL) holding samples in column blocks, and events.

Why blocks. The analysis reads whole series ranges (a 3-hour run of 8 hosts x ~300 series at
1 Hz is ~26M values) and the ingest must keep up with bursts of hundreds of thousands of
samples per second. A row per sample costs ~1 µs to insert and ~0.3 µs to read back into
Python; a block is one row per tag set per write holding numpy arrays as BLOBs, so a write of
5,000 lines is a few dozen INSERTs and a read is ``numpy.frombuffer`` over large BLOBs. The
same layout as Prometheus' head block and chunks, with the tag set (not the series) as the
unit because an agent line carries all fields of a tag set at one timestamp: they share one
time vector.

Tables (times are ns since the epoch, int64):

``tagsets``  id, measurement, host (the ``host`` tag, '' when absent), tags (JSON object of
             the other tags, keys sorted)
``series``   id, tagset_id, field: one numeric field of one tag set (``SeriesInfo``)
``blocks``   tagset_id, min_ns, max_ns, n (points), sealed, and three BLOBs:
             ``series_ids`` int64[k], ``times`` int64[n] ascending and unique, ``vals``
             float64[k, n] row-major (one row per series). NaN marks "no value at that
             time" (line protocol cannot carry NaN, so it is never a real sample).
``events``   workload points: run_id, host, rank, framework, event, time_ns, fields (JSON);
             key (run_id, time_ns, host, rank, event)
``runs``     run_id, framework, first_ns, last_ns; ``run_hosts`` (run_id, host)

Writes: each ingested body becomes one block per (tag set, field names). Small blocks (an
agent's one-second batch) are written unsealed; :meth:`SqliteStore.compact` merges a tag
set's unsealed blocks into one block per ``CHUNK_NS`` window (sealed once the window is
over), so a live store holds few, large blocks. Re-sending a point stores it once in effect:
duplicates (same series, same time) are merged by compaction and by every read, last
written wins, as in InfluxDB. A write commits before :meth:`SqliteStore.write` returns; with
WAL and ``synchronous=NORMAL`` a committed write survives the process being killed (a power
cut may lose the last transactions: see ``SYNCHRONOUS``).

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
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.point import Point, encode_lines
from agent.schema import Event, RunState, Tag, Workload
from collector.lineprotocol import ParsedBody, SampleGroup, parse_body
from collector.store_api import RunInfo, SeriesData, SeriesInfo, WorkloadEvent

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
CHUNK_NS = 10 * 60 * 10**9  # compaction windows: 600 samples per series at 1 Hz
SEAL_POINTS = 64  # a block written with at least this many points is final as it is
SYNCHRONOUS = "NORMAL"  # WAL: durable across process crashes; FULL adds power-cut safety
MMAP_BYTES = 1 << 32  # address space for reads (not memory): the whole file when it fits
_NEIGHBOUR_BLOCKS = 16  # how far back (or on) to look for the sample beyond a range

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
    sealed INTEGER NOT NULL,
    series_ids BLOB NOT NULL,
    times BLOB NOT NULL,
    vals BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS blocks_by_end ON blocks (tagset_id, max_ns);
CREATE INDEX IF NOT EXISTS blocks_by_start ON blocks (tagset_id, min_ns);
CREATE INDEX IF NOT EXISTS blocks_unsealed ON blocks (tagset_id) WHERE sealed = 0;
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


@dataclass
class _Block:
    block_id: int
    min_ns: int
    max_ns: int
    series_ids: np.ndarray  # int64 (k,)
    times: np.ndarray  # int64 (n,)
    vals: np.ndarray  # float64 (k, n)

    @classmethod
    def from_row(cls, row: tuple) -> _Block:
        block_id, min_ns, max_ns, ids, times, vals = row
        series_ids = np.frombuffer(ids, dtype=np.int64)
        times_ns = np.frombuffer(times, dtype=np.int64)
        values = np.frombuffer(vals, dtype=np.float64).reshape(series_ids.size, times_ns.size)
        return cls(block_id, min_ns, max_ns, series_ids, times_ns, values)


_BLOCK_COLUMNS = "id, min_ns, max_ns, series_ids, times, vals"


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
            elif version != SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path} has store schema {version}, this collector knows {SCHEMA_VERSION}"
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
                rows = [self._block_row(conn, group) for group in parsed.groups]
                conn.executemany(
                    "INSERT INTO blocks (tagset_id, min_ns, max_ns, n, sealed, series_ids,"
                    " times, vals) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
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

    def _block_row(self, conn: sqlite3.Connection, group: SampleGroup) -> tuple:
        key = (group.measurement, tuple(group.tags.items()), group.fields)
        ids = self._group_ids.get(key)
        if ids is None:
            ids = self._group_ids[key] = self._create_ids(conn, group)
        times = group.times_ns
        sealed = int(times.size >= SEAL_POINTS)
        return (
            ids[0],
            int(times[0]),
            int(times[-1]),
            int(times.size),
            sealed,
            ids[1],
            times.tobytes(),
            group.values.tobytes(),
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

    def compact(self, now_ns: int | None = None, max_tagsets: int | None = None) -> int:
        """Merge each tag set's unsealed blocks into one block per ``CHUNK_NS`` window.

        A window's block is sealed once the window is over (``now_ns`` past its end). Returns
        the number of tag sets compacted. Each tag set is its own short transaction, so
        writes go on in between.
        """
        if now_ns is None:
            now_ns = time.time_ns()
        conn = self._read_conn()
        candidates = conn.execute(
            "SELECT tagset_id, count(*), min(min_ns) FROM blocks WHERE sealed = 0"
            " GROUP BY tagset_id"
        ).fetchall()
        done = 0
        for tagset_id, count, first_ns in candidates:
            window_over = first_ns // CHUNK_NS * CHUNK_NS + CHUNK_NS <= now_ns
            if count < 2 and not window_over:
                continue
            with self._write_lock:
                writer = self._write_conn()
                writer.execute("BEGIN IMMEDIATE")
                try:
                    self._compact_tagset(writer, tagset_id, now_ns)
                    writer.execute("COMMIT")
                except BaseException:
                    writer.execute("ROLLBACK")
                    raise
            done += 1
            if max_tagsets is not None and done >= max_tagsets:
                break
        return done

    def _compact_tagset(self, conn: sqlite3.Connection, tagset_id: int, now_ns: int) -> None:
        blocks = [
            _Block.from_row(row)
            for row in conn.execute(
                f"SELECT {_BLOCK_COLUMNS} FROM blocks WHERE tagset_id = ? AND sealed = 0"
                " ORDER BY id",
                (tagset_id,),
            )
        ]
        if not blocks:
            return
        series_ids, times, vals = _merge_blocks(blocks)
        rows = []
        windows = times // CHUNK_NS
        edges = np.flatnonzero(np.diff(windows)) + 1
        for start, stop in zip(
            np.concatenate(([0], edges)), np.concatenate((edges, [times.size])), strict=True
        ):
            window_vals = vals[:, start:stop]
            present = ~np.all(np.isnan(window_vals), axis=1)
            window_end = int(windows[start]) * CHUNK_NS + CHUNK_NS
            rows.append(
                (
                    tagset_id,
                    int(times[start]),
                    int(times[stop - 1]),
                    int(stop - start),
                    int(window_end <= now_ns),
                    series_ids[present].tobytes(),
                    times[start:stop].tobytes(),
                    np.ascontiguousarray(window_vals[present]).tobytes(),
                )
            )
        conn.executemany("DELETE FROM blocks WHERE id = ?", [(block.block_id,) for block in blocks])
        conn.executemany(
            "INSERT INTO blocks (tagset_id, min_ns, max_ns, n, sealed, series_ids, times,"
            " vals) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )

    def delete_before(self, cutoff_ns: int) -> int:
        """Retention: drop blocks whose newest sample is older than ``cutoff_ns``.

        Events and runs are kept (they are small and name the runs). Returns blocks dropped.
        """
        with self._write_lock:
            conn = self._write_conn()
            cursor = conn.execute("DELETE FROM blocks WHERE max_ns < ?", (cutoff_ns,))
            return cursor.rowcount

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
        with self._read_snapshot() as conn:
            by_tagset: dict[int, list[SeriesInfo]] = {}
            for info, tagset_id in zip(series, self._tagsets_of(conn, series), strict=True):
                by_tagset.setdefault(tagset_id, []).append(info)
            found: dict[int, SeriesData] = {}
            for tagset_id, infos in by_tagset.items():
                for info, (times, values) in zip(
                    infos,
                    _read_tagset(conn, tagset_id, [i.series_id for i in infos], start_ns, end_ns),
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
            sql += f" AND event IN ({','.join('?' * len(kinds))})"
            args.extend(kinds)
        sql += " ORDER BY time_ns, rank, host"
        return [
            WorkloadEvent(run, host, rank, framework, event, time_ns, json.loads(fields))
            for run, host, rank, framework, event, time_ns, fields in self._read_conn().execute(
                sql, args
            )
        ]


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


def _merge_blocks(blocks: list[_Block]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One (series_ids, times, vals) from blocks in write order; later writes win."""
    series_ids = np.unique(np.concatenate([block.series_ids for block in blocks]))
    times = np.unique(np.concatenate([block.times for block in blocks]))
    vals = np.full((series_ids.size, times.size), np.nan)
    for block in blocks:
        rows = np.searchsorted(series_ids, block.series_ids)
        cols = np.searchsorted(times, block.times)
        target = vals[np.ix_(rows, cols)]
        written = ~np.isnan(block.vals)
        target[written] = block.vals[written]
        vals[np.ix_(rows, cols)] = target
    return series_ids, times, vals


def _read_tagset(
    conn: sqlite3.Connection, tagset_id: int, series_ids: list[int], start_ns: int, end_ns: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(times, values) of each wanted series of one tag set in [start, end], plus the
    nearest sample on either side."""
    blocks = [
        _Block.from_row(row)
        for row in conn.execute(
            f"SELECT {_BLOCK_COLUMNS} FROM blocks"
            " WHERE tagset_id = ? AND max_ns >= ? AND min_ns <= ?",
            (tagset_id, start_ns, end_ns),
        )
    ]
    results = _cut_blocks(blocks, series_ids, start_ns, end_ns)
    # The nearest sample before the range may sit in a block that ends before it (and the
    # one after in a block that starts after it): walk those blocks nearest first while one
    # could hold a nearer sample than the one found.
    beyond = (
        ("max_ns < ? ORDER BY max_ns DESC", start_ns, _before_improvable),
        ("min_ns > ? ORDER BY min_ns", end_ns, _after_improvable),
    )
    for condition, bound, improvable in beyond:
        rows = conn.execute(
            f"SELECT {_BLOCK_COLUMNS} FROM blocks WHERE tagset_id = ? AND {condition}"
            f" LIMIT {_NEIGHBOUR_BLOCKS}",
            (tagset_id, bound),
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
    """Could ``block`` (ending before the range) hold a later sample before start?"""
    return times.size == 0 or times[0] >= start_ns or times[0] < block.max_ns


def _after_improvable(times: np.ndarray, block: _Block, start_ns: int, end_ns: int) -> bool:
    return times.size == 0 or times[-1] <= end_ns or times[-1] > block.min_ns


def _cut_blocks(
    blocks: list[_Block], series_ids: list[int], start_ns: int, end_ns: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each series over the blocks, duplicates merged (later writes win), cut to
    [start, end] plus one sample either side."""
    by_time = sorted(blocks, key=lambda b: (b.min_ns, b.block_id))
    disjoint = all(b.min_ns > a.max_ns for a, b in itertools.pairwise(by_time))
    ordered = by_time if disjoint else sorted(blocks, key=lambda b: b.block_id)
    rows_of = [{int(sid): row for row, sid in enumerate(b.series_ids)} for b in ordered]
    has_nan = [bool(np.isnan(b.vals).any()) for b in ordered]
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
