"""The sample store: write batches, compaction, retention and reads of samples, over the
tables ``tagsets``, ``series``, ``batches``, ``blocks`` and ``unmerged_windows``
(``collector.store.database``), with the block algebra of ``collector.store.blocks``.

Why blocks. The analysis reads whole series ranges (a 3-hour run of 8 hosts x ~300 series at
1 Hz is ~26M values) and the ingest must keep up with bursts of hundreds of thousands of
samples per second. A row per sample costs microseconds to insert and to read back into
Python, 26M times over; a block holds many samples of one tag set as numpy arrays in BLOBs,
so a read is a few thousand ``numpy.frombuffer`` calls. The layout follows Prometheus' TSDB
(a head of recent writes, then per-series chunks by time window), with the tag set rather
than the series as the unit: an agent line carries all fields of a tag set at one
timestamp, so they share one time vector.

Writes: a request's groups go into one ``batches`` row (:meth:`SampleStore.insert_batch`),
in the transaction of the whole request.

Compaction (:meth:`SampleStore.compact`, which the server runs every 30 s) is append-only, so
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
window merge, last written wins (as in InfluxDB).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from array import array

import numpy as np

from collector.lineprotocol import SampleGroup
from collector.store.api import SeriesData, SeriesInfo
from collector.store.blocks import (
    CHUNK_NS,
    Block,
    after_improvable,
    batch_row_blocks,
    before_improvable,
    cut_blocks,
    gather_batches,
    merge_blocks,
    window_rows,
)
from collector.store.database import INT64_MAX, INT64_MIN, Database, clamp
from contract.schema import Tag

log = logging.getLogger(__name__)

FOLD_STEP_BYTES = 32 << 20  # values a fold step takes from batches at most (its memory)
MERGE_AFTER_NS = 60 * 10**9  # a window is merged once it ended this long ago ...
MERGE_QUIET_NS = 60 * 10**9  # ... and nothing was folded into it for this long
MERGE_STEP_SAMPLES = 1 << 20  # values read and rewritten per merge transaction (8 MiB)
MERGE_CALL_SAMPLES = 32 << 20  # values merged per compact() call at most; the rest waits
# how far back (or on) to look for the sample beyond a range: an open window holds a block
# per fold (about 20), a merged window one
_NEIGHBOUR_BLOCKS = 64
_IDS_PER_QUERY = 500  # tag set ids in one IN (...) (SQLite takes 32,766 parameters)

BLOCK_COLUMNS = "id, min_ns, max_ns, holes, series_ids, times, vals"
BATCH_COLUMNS = "id, groups, series_ids, times, vals"
_INSERT_BLOCK = (
    "INSERT INTO blocks (tagset_id, min_ns, max_ns, n, holes, series_ids, times, vals)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


def _tags_key(tags: dict[str, str]) -> tuple[str, str]:
    """(host, JSON of the other tags with sorted keys)."""
    others = {key: tags[key] for key in sorted(tags) if key != Tag.HOST}
    return tags.get(Tag.HOST, ""), json.dumps(others, separators=(",", ":"))


class SampleStore:
    """The samples of one store file; the series half of ``ReadStore``."""

    def __init__(self, db: Database) -> None:
        self.db = db
        # compaction and retention: the only changes to blocks, so they read them unlocked
        self._maintenance_lock = threading.Lock()
        # (measurement, tags as written, field names) -> (tagset id, series ids as bytes)
        self._group_ids: dict[tuple, tuple[int, bytes]] = {}
        self._series_tagset: dict[int, int] = {}

    def insert_batch(self, conn: sqlite3.Connection, groups: list[SampleGroup]) -> None:
        """Add one ``batches`` row holding every group of a body, in the caller's
        transaction; after a rollback call :meth:`forget_ids`."""
        index = array("q")
        series_parts, time_parts, value_parts = [], [], []
        known = self._group_ids
        new = [group for group in groups if group.key not in known]
        if new:
            self._create_ids(conn, new)
        for group in groups:
            ids = known[group.key]
            index.extend((ids[0], group.n, len(group.fields)))
            series_parts.append(ids[1])
            time_parts.append(group.times)
            value_parts.append(group.vals)
        conn.execute(
            "INSERT INTO batches (min_ns, max_ns, groups, series_ids, times, vals)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                min(group.min_ns for group in groups),
                max(group.max_ns for group in groups),
                index.tobytes(),
                b"".join(series_parts),
                b"".join(time_parts),
                b"".join(value_parts),
            ),
        )

    def forget_ids(self) -> None:
        """Drop the cached tag set and series ids: those made in a rolled-back transaction
        are gone."""
        self._group_ids.clear()

    def _create_ids(self, conn: sqlite3.Connection, groups: list[SampleGroup]) -> None:
        """Find or make the tag set and series ids of ``groups`` (new to this process), in
        a few statements for all of them: a new node's ~25 tag sets and ~300 series were
        ~650 statements one by one, most of the time its first body took."""
        keys = [(group.measurement, *_tags_key(group.tags)) for group in groups]
        conn.executemany(
            "INSERT OR IGNORE INTO tagsets (measurement, host, tags) VALUES (?, ?, ?)",
            list(dict.fromkeys(keys)),
        )
        tagset_ids = []
        for key in keys:
            (tagset_id,) = conn.execute(
                "SELECT id FROM tagsets WHERE measurement = ? AND host = ? AND tags = ?", key
            ).fetchone()
            tagset_ids.append(tagset_id)
        conn.executemany(
            "INSERT OR IGNORE INTO series (tagset_id, field) VALUES (?, ?)",
            [
                (tagset_id, name)
                for tagset_id, group in zip(tagset_ids, groups, strict=True)
                for name in group.fields
            ],
        )
        series_of: dict[tuple[int, str], int] = {}
        distinct = list(dict.fromkeys(tagset_ids))
        for start in range(0, len(distinct), _IDS_PER_QUERY):
            chunk = distinct[start : start + _IDS_PER_QUERY]
            rows = conn.execute(
                "SELECT tagset_id, field, id FROM series"
                f" WHERE tagset_id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            for tagset_id, name, series_id in rows:
                series_of[(tagset_id, name)] = series_id
        for tagset_id, group in zip(tagset_ids, groups, strict=True):
            series_ids = [series_of[(tagset_id, name)] for name in group.fields]
            self._group_ids[group.key] = (tagset_id, array("q", series_ids).tobytes())

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
            (last_id,) = self.db.read_conn().execute("SELECT max(id) FROM batches").fetchone()
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
        with self.db.read_snapshot() as conn:
            cursor = conn.execute(
                f"SELECT {BATCH_COLUMNS} FROM batches WHERE id <= ? ORDER BY id LIMIT ?",
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
        gathered = gather_batches(rows)
        del rows  # (copied by the gather: the step's peak memory is a few times its values)
        inserts = []
        for tagset_id, new_blocks in gathered.items():
            inserts.extend(window_rows(tagset_id, *merge_blocks(new_blocks)))
        del gathered
        windows = {(row[0], row[1] // CHUNK_NS) for row in inserts}
        with self.db.transaction() as conn:
            conn.executemany(_INSERT_BLOCK, inserts)
            conn.executemany(
                "INSERT INTO unmerged_windows (tagset_id, window_no, last_fold_ns)"
                " VALUES (?, ?, ?) ON CONFLICT (tagset_id, window_no) DO UPDATE SET"
                " last_fold_ns = max(last_fold_ns, excluded.last_fold_ns)",
                [(tagset_id, window, now_ns) for tagset_id, window in windows],
            )
            # every batch up to this id was read: a batch written since has a larger id
            # (SQLite gives max(id) + 1, and those read are still there)
            conn.execute("DELETE FROM batches WHERE id <= ?", (last_read,))
        more = read == limit or size >= FOLD_STEP_BYTES
        return read, more

    def _merge_windows(self, now_ns: int, quiet_ns: int, max_samples: int) -> int:
        over_before = (now_ns - MERGE_AFTER_NS) // CHUNK_NS  # windows before this one ended
        candidates = (
            self.db.read_conn()
            .execute(
                "SELECT tagset_id, window_no FROM unmerged_windows"
                " WHERE window_no < ? AND last_fold_ns <= ? ORDER BY window_no, tagset_id",
                (clamp(over_before), clamp(now_ns - quiet_ns)),
            )
            .fetchall()
        )
        merged = 0
        budget = max_samples
        position = 0
        while position < len(candidates) and budget > 0:
            # read a step's windows in one snapshot, merge outside it, commit under the lock
            windows: list[tuple[int, int]] = []
            to_merge: list[tuple[int, list[Block]]] = []
            step_samples = 0
            with self.db.read_snapshot() as conn:
                while position < len(candidates) and step_samples < MERGE_STEP_SAMPLES:
                    tagset_id, window = candidates[position]
                    position += 1
                    windows.append((tagset_id, window))
                    low = clamp(window * CHUNK_NS)
                    high = clamp((window + 1) * CHUNK_NS - 1)
                    blocks = [
                        Block.from_row(row)
                        for row in conn.execute(
                            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE tagset_id = ?"
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
                inserts.extend(window_rows(tagset_id, *merge_blocks(blocks)))
            with self.db.transaction() as conn:
                conn.executemany("DELETE FROM blocks WHERE id = ?", deletes)
                conn.executemany(_INSERT_BLOCK, inserts)
                conn.executemany(
                    "DELETE FROM unmerged_windows WHERE tagset_id = ? AND window_no = ?", windows
                )
            merged += len(to_merge)
            budget -= step_samples
        return merged

    def delete_before(self, cutoff_ns: int) -> int:
        """Retention: drop blocks (and batches) whose newest sample is older than
        ``cutoff_ns``. Events and runs are kept (they are small and name the runs). Returns
        the rows dropped.
        """
        with self._maintenance_lock, self.db.transaction() as conn:
            dropped = conn.execute("DELETE FROM blocks WHERE max_ns < ?", (cutoff_ns,))
            dropped_batches = conn.execute("DELETE FROM batches WHERE max_ns < ?", (cutoff_ns,))
            # windows that ended by the cutoff have no block left
            conn.execute(
                "DELETE FROM unmerged_windows WHERE window_no < ?", (cutoff_ns // CHUNK_NS,)
            )
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
        for series_id, tagset_id, series_host, tags in self.db.read_conn().execute(sql, args):
            self._series_tagset[series_id] = tagset_id
            found.append(SeriesInfo(series_id, measurement, series_host, field, json.loads(tags)))
        return found

    def read_series(self, series: list[SeriesInfo], start_ns: int, end_ns: int) -> list[SeriesData]:
        if not series:
            return []
        start_ns = min(max(start_ns, INT64_MIN), INT64_MAX)  # SQLite integers are int64
        end_ns = min(max(end_ns, INT64_MIN), INT64_MAX)
        with self.db.read_snapshot() as conn:
            batch_blocks: dict[int, list[Block]] = {}
            for row in conn.execute(f"SELECT {BATCH_COLUMNS} FROM batches ORDER BY id"):
                for tagset_id, block in batch_row_blocks(row):
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
        """The hosts of stored series."""
        rows = self.db.read_conn().execute("SELECT DISTINCT host FROM tagsets ORDER BY 1")
        return [host for (host,) in rows if host]


def _read_tagset(
    conn: sqlite3.Connection,
    tagset_id: int,
    series_ids: list[int],
    start_ns: int,
    end_ns: int,
    batch_blocks: list[Block],
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(times, values) of each wanted series of one tag set in [start, end], plus the
    nearest sample on either side. ``batch_blocks``: the tag set's not yet compacted
    writes, all of them."""
    blocks = [
        Block.from_row(row)
        for row in conn.execute(
            f"SELECT {BLOCK_COLUMNS} FROM blocks"
            " WHERE tagset_id = ? AND max_ns >= ? AND min_ns <= ?",
            (tagset_id, start_ns, end_ns),
        )
    ]
    blocks.extend(batch_blocks)
    results = cut_blocks(blocks, series_ids, start_ns, end_ns)
    # The nearest sample before the range may sit in a block that ends before it (and the
    # one after in a block that starts after it): walk those blocks nearest first while one
    # could hold a nearer sample than the one found.
    beyond = (
        ("max_ns < :bound ORDER BY max_ns DESC", start_ns, before_improvable),
        # (max_ns > bound lets the (tagset_id, max_ns) index narrow the search)
        ("max_ns > :bound AND min_ns > :bound ORDER BY min_ns", end_ns, after_improvable),
    )
    for condition, bound, improvable in beyond:
        rows = conn.execute(
            f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE tagset_id = :tagset AND {condition}"
            f" LIMIT {_NEIGHBOUR_BLOCKS}",
            {"tagset": tagset_id, "bound": bound},
        )
        for row in rows:
            block = Block.from_row(row)
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
                cut = cut_blocks(blocks, [series_ids[i] for i in hits], start_ns, end_ns)
                for i, result in zip(hits, cut, strict=True):
                    results[i] = result
    return results
