"""``SqliteStore``: the embedded store, one SQLite file holding samples and events.

It puts the two halves of ``ReadStore`` together over one :class:`Database`: the samples
(:class:`SampleStore`) and the runs and events (:class:`EventStore`), and writes a request's
samples and events in one transaction.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from collector.lineprotocol import ParsedBody, parse_body
from collector.store.api import RunInfo, SeriesData, SeriesInfo, StepTable, WorkloadEvent
from collector.store.database import Database
from collector.store.events import EventStore
from collector.store.samples import MERGE_CALL_SAMPLES, MERGE_QUIET_NS, SampleStore
from contract.point import Point, encode_lines

T = TypeVar("T")

# /health fails below this much free space where the file is: a fold or a merge needs room
# for its new blocks before it frees the old ones, and a write for its batch
MIN_FREE_BYTES = 1 << 20
# /health fails when a write cannot take the write lock in this long (another process holds
# it: the agents' writes would wait 30 s and fail; their timeout is 10 s)
HEALTH_LOCK_SECONDS = 2.0


@dataclass
class WriteResult:
    points: int
    samples: int
    events: int
    refused: list[str] = field(default_factory=list)  # runs another identity owns, one line each


class SqliteStore:
    """Samples and workload events in one SQLite file; implements ``ReadStore``.

    One instance may be shared by threads: writes are serialised on one writer connection,
    reads use one connection per thread.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        check_integrity: bool = False,
        background_checkpoints: bool = False,
    ) -> None:
        """Open (or create) the store file at ``path``; ``check_integrity``: run
        ``PRAGMA quick_check`` first (``collector serve`` does); ``background_checkpoints``:
        writes leave the WAL to :meth:`checkpoint` (``Database``). Raises ``StoreError`` for
        a file that is not a usable store."""
        self.db = Database(path, background_checkpoints)
        self.path = self.db.path
        if check_integrity:
            try:
                self.db.check_integrity()
            except BaseException:
                self.db.close()
                raise
        self.samples = SampleStore(self.db)
        self.event_store = EventStore(self.db)
        # what failed last, by operation (write, compaction, retention), until it next works
        self._failures: dict[str, str] = {}

    def close(self) -> None:
        self.db.close()

    def checkpoint(self) -> tuple[int, int]:
        """The WAL into the file, writers going on (``Database.checkpoint``)."""
        return self.db.checkpoint()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def check_integrity(self) -> None:
        """``PRAGMA quick_check``; raises ``StoreError`` for a damaged file."""
        self.db.check_integrity()

    def health(self) -> list[str]:
        """What keeps the store from taking writes or compacting now, one line each
        (empty when nothing does): the last write, compaction or retention pass failed
        (until one succeeds again), the disk holding the file is full, the file
        cannot be read, or a write cannot take its write lock in ``HEALTH_LOCK_SECONDS``."""
        failures = dict(self._failures)  # (a copy: other threads update it)
        problems = [f"{what} failed: {message}" for what, message in failures.items()]
        try:
            free = shutil.disk_usage(self.path.parent).free
        except OSError as error:
            problems.append(f"cannot see the disk of {self.path}: {error}")
        else:
            if free < MIN_FREE_BYTES:
                problems.append(f"disk full: {free} bytes free for {self.path}")
        try:
            self.samples.hosts()
        except sqlite3.Error as error:
            problems.append(f"cannot read {self.path}: {error}")
        try:
            locked = self.db.write_lock_wait(HEALTH_LOCK_SECONDS)
        except (sqlite3.Error, RuntimeError) as error:
            locked = f"cannot take the write lock of {self.path}: {error}"
        if locked:
            problems.append(locked)
        return problems

    def _watched(self, what: str, operation: Callable[[], T]) -> T:
        """``operation()``, remembering an SQLite failure for ``health()`` until it works."""
        try:
            result = operation()
        except sqlite3.Error as error:
            stamp = time.strftime("%H:%M:%S", time.gmtime())
            self._failures[what] = f"{error} (at {stamp} UTC)"
            raise
        if self._failures:
            self._failures.pop(what, None)
        return result

    # ---------------------------------------------------------------- where samples live

    SAMPLES_BACKEND_KEY = "samples_backend"

    def set_samples_backend(self, label: str | None) -> None:
        """Record that ``collector serve`` keeps this file's samples in a backend
        (``victoriametrics=URL``, no credentials), or here (None), so that a reader of the
        file alone can say where the node columns are."""
        with self.db.transaction() as conn:
            if label is None:
                conn.execute("DELETE FROM meta WHERE key = ?", (self.SAMPLES_BACKEND_KEY,))
            else:
                conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                    (self.SAMPLES_BACKEND_KEY, label),
                )

    def samples_backend(self) -> str | None:
        """The backend ``collector serve`` last kept this file's samples in, or None."""
        row = (
            self.db.read_conn()
            .execute("SELECT value FROM meta WHERE key = ?", (self.SAMPLES_BACKEND_KEY,))
            .fetchone()
        )
        return row[0] if row else None

    # ---------------------------------------------------------------- writes

    def write(
        self,
        parsed: ParsedBody,
        writer: str | None = None,
        admin: bool = True,
        busy_seconds: float | None = None,
    ) -> WriteResult:
        """Store a parsed body in one transaction; committed when this returns.

        ``writer``: the identity writing (``netserve.tokens.Identity.name``): its events
        go only to runs it created or nobody has (it is stamped as their owner), unless
        it is an ``admin``; the events of other runs are left out and named in
        ``WriteResult.refused``. None: no ownership is looked at (local writes).

        ``busy_seconds``: how long to wait for another process's write lock before
        ``StoreBusy`` (nothing stored; ``collector serve`` answers 503); None: 30 s."""
        events, refused = self._watched(
            "write", lambda: self._write(parsed, writer, admin, busy_seconds)
        )
        points = parsed.points - (len(parsed.events) - events)
        return WriteResult(points, parsed.samples, events, refused)

    def _write(
        self, parsed: ParsedBody, writer: str | None, admin: bool, busy_seconds: float | None
    ) -> tuple[int, list[str]]:
        refused: list[str] = []
        try:
            with self.db.transaction(busy_seconds) as conn:
                if parsed.groups:
                    self.samples.insert_batch(conn, parsed.groups)
                events = parsed.events
                if events and writer is not None:
                    events, refused = self.event_store.claim_runs(conn, events, writer, admin)
                if events:
                    self.event_store.insert(conn, events)
        except BaseException:
            self.samples.forget_ids()
            raise
        return len(events), refused

    def run_owner(self, run_id: str) -> str | None:
        """Who created ``run_id`` through ``collector serve`` (its token's identity)."""
        return self.event_store.owner(run_id)

    def write_lines(self, text: str, precision: str = "ns") -> ParsedBody:
        """Parse line protocol and store its valid lines; the parse result says what was bad."""
        parsed = parse_body(text, precision)
        self.write(parsed)
        return parsed

    def write_points(self, points: Iterable[Point]) -> ParsedBody:
        return self.write_lines(encode_lines(points))

    # ---------------------------------------------------------------- maintenance

    def compact(self, batches_per_step: int = 4096, now_ns: int | None = None) -> int:
        """Fold the written batches into blocks and merge the windows that are over
        (``SampleStore.compact``). Returns the number of batches folded."""
        return self._watched("compaction", lambda: self.samples.compact(batches_per_step, now_ns))

    def merge_windows(
        self,
        now_ns: int | None = None,
        quiet_ns: int = MERGE_QUIET_NS,
        max_samples: int = MERGE_CALL_SAMPLES,
    ) -> int:
        return self.samples.merge_windows(now_ns, quiet_ns, max_samples)

    def delete_before(self, cutoff_ns: int) -> int:
        """Retention: drop samples older than ``cutoff_ns``; events and runs are kept."""
        return self._watched("retention", lambda: self.samples.delete_before(cutoff_ns))

    # ---------------------------------------------------------------- ReadStore

    def list_series(
        self, measurement: str, field: str, host: str | None = None
    ) -> list[SeriesInfo]:
        return self.samples.list_series(measurement, field, host)

    def read_series(self, series: list[SeriesInfo], start_ns: int, end_ns: int) -> list[SeriesData]:
        return self.samples.read_series(series, start_ns, end_ns)

    def hosts(self) -> list[str]:
        return sorted(set(self.samples.hosts()) | set(self.event_store.hosts()))

    def runs(self) -> list[RunInfo]:
        return self.event_store.runs()

    def run(self, run_id: str) -> RunInfo | None:
        return self.event_store.run(run_id)

    def events_of_runs(
        self, run_ids: list[str], kinds: tuple[str, ...]
    ) -> dict[str, list[WorkloadEvent]]:
        return self.event_store.events_of_runs(run_ids, kinds)

    def events(
        self, run_id: str, since_ns: int | None = None, kinds: tuple[str, ...] | None = None
    ) -> list[WorkloadEvent]:
        return self.event_store.events(run_id, since_ns, kinds)

    def steps(self, run_id: str, since_ns: int | None = None) -> StepTable:
        return self.event_store.steps(run_id, since_ns)
