"""The store's SQLite file: its tables, their migrations, and the connections to it.

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
             NaN marks "no value at that time". A block never spans two ``CHUNK_NS``
             windows; a window may hold several blocks (one per fold) until it is merged.
             ``id`` is the write order: of two blocks, the one with the larger id holds the
             newer writes.
``unmerged_windows``  tagset_id, window_no (time // ``CHUNK_NS``), last_fold_ns: the
             windows that got a block since they were last merged, and when (the
             collector's clock).
``events``   workload points: run_id, host, rank, framework, event, time_ns, fields (JSON);
             key (run_id, time_ns, host, rank, event)
``runs``     run_id, framework, first_ns, last_ns; ``run_hosts`` (run_id, host)

Versions (``PRAGMA user_version``): 1 wrote a row per block before batches existed; 2
rewrote a window's block on every fold and is read as version 3 (it only lacks
``unmerged_windows``, which the upgrade adds); 3 is this layout.

Connections: one writer, shared by threads behind a lock and used only inside
:meth:`Database.transaction`; one reader per thread, so the dashboard and ``collector
report`` read while ``collector serve`` writes (WAL: readers never block the writer). With
WAL and ``synchronous=NORMAL`` a committed transaction survives the process being killed (a
power cut may lose the last transactions: see ``SYNCHRONOUS``).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3
# the file `collector serve`, `collector report` and `dashboard serve` use without --db
DEFAULT_DB = os.environ.get("EPOCHSCOPE_DB", "runs/epochscope.sqlite")
SYNCHRONOUS = "NORMAL"  # WAL: durable across process crashes; FULL adds power-cut safety
MMAP_BYTES = 1 << 32  # address space for reads (not memory): the whole file when it fits
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

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


class StoreError(RuntimeError):
    """A store file that cannot be used as it is; the message is one line that says why
    and what to do."""


class StoreBusy(StoreError):
    """A write could not take the store's write lock in its bounded wait (another process
    holds it): nothing of it was stored; the writer may send it again later."""

    RETRY_AFTER_SECONDS = 5


# how long an ordinary write waits for another process's write lock before it is refused
# (StoreBusy); maintenance keeps SQLite's 30 s (BUSY_TIMEOUT_MS)
WRITE_BUSY_SECONDS = 3.0
BUSY_TIMEOUT_MS = 30_000


def clamp(value: int) -> int:
    """An int SQLite can hold (int64)."""
    return min(max(value, INT64_MIN), INT64_MAX)


class Database:
    """One SQLite store file, created or upgraded to ``SCHEMA_VERSION`` when opened.

    Raises :class:`StoreError` for a file that is not a store: empty (0 bytes: SQLite would
    quietly make it a new database, hiding whatever emptied it), not SQLite, or of a schema
    this code does not know.
    """

    def __init__(self, path: str | os.PathLike[str], background_checkpoints: bool = False) -> None:
        """``background_checkpoints``: the writer's commits never checkpoint the WAL (SQLite's
        default does, once it passes 1,000 pages: an fsync and a copy of the WAL inside
        whichever write commits then, all writers waiting); the owner calls
        :meth:`checkpoint` instead, from a thread of its own (``collector serve`` does)."""
        self.path = Path(path)
        self.background_checkpoints = background_checkpoints
        self._write_lock = threading.RLock()
        self._writer: sqlite3.Connection | None = None
        self._writer_busy_ms = BUSY_TIMEOUT_MS  # the writer's busy_timeout now
        self._checkpointer: sqlite3.Connection | None = None
        self._checkpoint_lock = threading.Lock()
        self._local = threading.local()
        self._readers: list[tuple[sqlite3.Connection, threading.Thread]] = []  # (reader, owner)
        self._readers_lock = threading.Lock()
        self._closed = False
        self._create()

    def _connect(self) -> sqlite3.Connection:
        # the writer moves between request threads behind _write_lock; readers stay in
        # their thread but close() may run in another
        conn = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        return conn

    def _create(self) -> None:
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a directory: give the path of a store file")
        if self.path.is_file() and self.path.stat().st_size == 0:
            raise StoreError(
                f"{self.path} is empty (0 bytes), not a store: restore it from a backup,"
                " or delete it to start a new store"
            )
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = self._connect()
        except sqlite3.Error as error:
            raise StoreError(f"{self.path} cannot be opened: {error}") from None
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
                raise StoreError(
                    f"{self.path} has store schema {version}, this collector knows"
                    f" {SCHEMA_VERSION} (and upgrades 2): "
                    + (
                        "it was written by a newer collector"
                        if version > SCHEMA_VERSION
                        else "no upgrade from so old a file; start a new database"
                    )
                )
        except sqlite3.DatabaseError as error:
            raise StoreError(
                f"{self.path} is not a readable store ({error}): restore it from a backup,"
                " or move it aside to start a new store"
            ) from None
        finally:
            conn.close()

    def check_integrity(self) -> None:
        """``PRAGMA quick_check`` of the whole file (it reads every page: seconds per GB);
        raises :class:`StoreError` naming the first problem found."""
        conn = self._connect()
        try:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check(20)")]
        except sqlite3.DatabaseError as error:
            problems = [str(error)]
        finally:
            conn.close()
        if problems != ["ok"]:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            first = " ".join(problems[0].replace("*** in database main ***", "").split())
            raise StoreError(
                f"{self.path} is damaged (PRAGMA quick_check: {first}{more}): restore it"
                " from a backup, or move it aside to start a new store"
            )

    def read_conn(self) -> sqlite3.Connection:
        """This thread's reader."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise RuntimeError("store is closed")
            conn = self._connect()
            # reads copy BLOBs straight from the mapped file: 2-3x faster than via the cache
            conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append((conn, threading.current_thread()))
        return conn

    @contextmanager
    def read_snapshot(self) -> Iterator[sqlite3.Connection]:
        """One consistent view across several SELECTs."""
        conn = self.read_conn()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def write_conn(self) -> sqlite3.Connection:
        """The writer, for :meth:`transaction` (tests take it to hold a write open)."""
        if self._writer is None:
            if self._closed:
                raise RuntimeError("store is closed")
            conn = self._connect()
            conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
            if self.background_checkpoints:
                conn.execute("PRAGMA wal_autocheckpoint = 0")
            self._writer = conn
        return self._writer

    def _set_writer_busy(self, conn: sqlite3.Connection, milliseconds: int) -> None:
        if self._writer_busy_ms != milliseconds:  # a PRAGMA only when the bound changes
            conn.execute(f"PRAGMA busy_timeout = {milliseconds}")
            self._writer_busy_ms = milliseconds

    @contextmanager
    def transaction(self, busy_seconds: float | None = None) -> Iterator[sqlite3.Connection]:
        """The writer in a ``BEGIN IMMEDIATE`` transaction, committed when the block ends
        and rolled back when it raises (the write lock is held throughout).

        ``busy_seconds``: how long to wait for another process's write lock before raising
        :class:`StoreBusy` (nothing done); None: SQLite's 30 s, then its error."""
        with self._write_lock:
            conn = self.write_conn()
            bound_ms = BUSY_TIMEOUT_MS if busy_seconds is None else int(busy_seconds * 1000)
            self._set_writer_busy(conn, bound_ms)
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as error:
                if busy_seconds is None or "locked" not in str(error):
                    raise
                raise StoreBusy(
                    f"the store's write lock ({self.path.name}) could not be taken in "
                    f"{busy_seconds:g} s: another process holds it; nothing of this write "
                    f"was stored, send it again in {StoreBusy.RETRY_AFTER_SECONDS} s"
                ) from None
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                # some errors (a full disk) end the transaction themselves
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def write_lock_wait(self, seconds: float) -> str | None:
        """Can a write take the store's write lock within ``seconds``? None if it can (the
        lock is taken and let go at once, nothing written), else why not: another
        process, or a write of this one, holds it."""
        if not self._write_lock.acquire(timeout=seconds):
            return f"a write of this collector has held the write lock for over {seconds:g} s"
        try:
            conn = self.write_conn()
            self._set_writer_busy(conn, int(seconds * 1000))
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
            except sqlite3.OperationalError as error:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                return (
                    f"a write cannot take the write lock of {self.path} in {seconds:g} s "
                    f"({error}): another process holds it"
                )
            finally:
                self._set_writer_busy(conn, BUSY_TIMEOUT_MS)
        finally:
            self._write_lock.release()
        return None

    def checkpoint(self) -> tuple[int, int]:
        """Copy the WAL's committed pages into the file (``PRAGMA wal_checkpoint(PASSIVE)``,
        on a connection of its own: writers go on meanwhile, readers are not waited for);
        (pages in the WAL, pages copied)."""
        with self._checkpoint_lock:
            if self._closed:
                raise RuntimeError("store is closed")
            if self._checkpointer is None:
                self._checkpointer = self._connect()
                self._checkpointer.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
            _, pages, copied = self._checkpointer.execute(
                "PRAGMA wal_checkpoint(PASSIVE)"
            ).fetchone()
            return pages, copied

    def close(self) -> None:
        self._closed = True
        with self._checkpoint_lock:
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None
        with self._write_lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        with self._readers_lock:
            for conn, owner in self._readers:
                # Closing a connection while another thread runs a statement on it crashes
                # the interpreter (a dashboard's background thread, or a request in flight,
                # at shutdown): a live thread's reader is closed when that thread lets go
                # of it (nothing refers to it once this store's thread-locals are dropped).
                if owner is threading.current_thread() or not owner.is_alive():
                    conn.close()
            self._readers.clear()
        self._local = threading.local()
