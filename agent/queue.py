"""The points waiting to be sent: the disk spool, and memory while the spool fails.

One object owns both, as VictoriaMetrics' vmagent ``fastqueue`` does: ``put`` appends a
batch to the spool (``agent.spool``: durable before it returns); when the spool cannot
take it (any ``OSError``: a full disk, a read-only or vanished directory), the batch is
kept in memory instead, bounded by ``memory_max_bytes`` (the oldest dropped and counted
first), and moves back into the spool, oldest first, as soon as it takes writes again.
The sender (``agent.shipper``) sends the spool oldest-first and, while the spool holds
nothing older, what memory holds; it never decides where a batch is kept.

A spool directory removed while the agent runs is made again by the next write
(``Spool.append``); the segments that were in it are lost and counted as dropped.

Each failing spool operation (``write``, ``read``, ``delete``) is logged once until it
works again, and its recovery once. Counts are mirrored into the ``AgentStats`` the self
sampler reports: ``spool_bytes``, ``spool_points``, ``points_dropped``, ``spool_error``
(1 while an operation on the spool fails) and ``memory_points``.

The spool directory is checked before it is used (``check_spool_directory``, issue 44 item
10): a symlink (never followed, by root least of all: it could point the agent's writes
and deletes into any directory), a directory owned by another user, or one that group or
others may write (they could plant segments that the agent would send as this node's, or
swap them) is refused with ``UnsafeSpoolDirectory``, an ``OSError`` whose one line names
the directory and the reason; ``agent run`` stops with it (a bad configuration, exit 2)
rather than falling back to memory, which would lose the points at the first restart
without anyone being told twice. Made by the agent, the directory is 0700 and its
segments 0600 (``agent.spool``).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from agent.spool import DEFAULT_SEGMENT_MAX_BYTES, Segment, Spool

if TYPE_CHECKING:
    from agent.samplers.agent import AgentStats

log = logging.getLogger(__name__)

MEMORY_MAX_BYTES = 16 << 20  # points held in memory while the spool cannot take them
SPOOL_LOG_REPEAT_SECONDS = 300.0

# One batch held in memory: (line protocol without a final newline, points in it).
MemoryEntry = tuple[bytes, int]


class UnsafeSpoolDirectory(OSError):
    """A spool directory the agent must not use; ``strerror`` says why."""


def check_spool_directory(directory: Path) -> None:
    """Refuse a spool directory that is a symlink, not owned by the agent's user, or
    writable by group or others. A directory not there yet passes (the spool makes it
    0700). Raises ``UnsafeSpoolDirectory``."""
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        return
    reason = unsafe_reason(info.st_mode, info.st_uid, os.geteuid())
    if reason is not None:
        raise UnsafeSpoolDirectory(0, reason, str(directory))


def unsafe_reason(mode: int, owner: int, agent_uid: int) -> str | None:
    """Why a directory with this ``lstat`` mode and owner may not be the spool, or None."""
    if stat.S_ISLNK(mode):
        return "it is a symlink (not followed; give the directory itself)"
    if not stat.S_ISDIR(mode):
        return "it is not a directory"
    if owner != agent_uid:
        return f"it is owned by uid {owner}, not by the agent's uid {agent_uid}"
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"group or others may write it (mode {stat.S_IMODE(mode):04o}; chmod go-w)"
    return None


class PointQueue:
    """Thread-safe: the sampling loop puts, the sender takes, removes or releases."""

    def __init__(
        self,
        directory: Path,
        max_bytes: int,
        segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES,
        stats: AgentStats | None = None,
        sync_each_batch: bool = False,
    ) -> None:
        check_spool_directory(directory)
        self.spool = Spool(directory, max_bytes, segment_max_bytes, sync_each_batch)
        check_spool_directory(directory)  # made now, or swapped meanwhile
        self.stats = stats
        self.memory_max_bytes = max(1, min(MEMORY_MAX_BYTES, max_bytes))
        self._memory: deque[MemoryEntry] = deque()
        self._memory_bytes = 0
        self._memory_lock = threading.Lock()
        self._failing: dict[str, str] = {}  # operation -> error, while it fails
        self._logged_at: dict[tuple[str, str], float] = {}
        self._recovery_to_log: set[str] = set()
        self.update_stats()

    @property
    def directory(self) -> Path:
        return self.spool.directory

    # The sampling side.

    def put(self, body: bytes, points: int) -> None:
        """Keep one batch (lines without a final newline): in the spool, or in memory
        when the spool cannot take it. Never raises for a failing spool."""
        with self._memory_lock:
            self._memory.append((body, points))
            self._memory_bytes += len(body)
            self._drain_memory()
        self.update_stats()

    def move_memory_to_spool(self) -> None:
        """Retry the spool with what memory holds (the sender does, between sends)."""
        if self._memory:
            with self._memory_lock:
                self._drain_memory()

    def _drain_memory(self) -> None:
        """Move memory into the spool, oldest first; what the spool cannot take stays,
        the oldest dropped beyond ``memory_max_bytes`` (memory lock held)."""
        while self._memory:
            body, points = self._memory[0]
            try:
                self.spool.append(body, points)
            except OSError as error:
                self.fails("write", error)
                break
            self._memory.popleft()
            self._memory_bytes -= len(body)
            self.works("write")
        while self._memory_bytes > self.memory_max_bytes and len(self._memory) > 1:
            body, points = self._memory.popleft()
            self._memory_bytes -= len(body)
            self.spool.count_dropped(points)

    # The sending side: the spool.

    def oldest(self) -> Segment | None:
        return self.spool.oldest()

    def take(self, max_bytes: int, max_segments: int) -> tuple[list[Segment], bool]:
        return self.spool.take(max_bytes, max_segments)

    def release(self, batch: list[Segment]) -> None:
        self.spool.release(batch)

    def remove(self, batch: list[Segment], dropped: bool = False) -> None:
        """Delete sent (or rejected: ``dropped``) segments; a failing delete is logged,
        not raised (the files are retried at the next remove)."""
        try:
            self.spool.remove(batch, dropped)
        except OSError as error:
            self.fails("delete", error)
        else:
            self.works("delete")
        self.update_stats()

    def retry_deletes(self) -> None:
        """Delete the files of segments sent earlier that could not be deleted then."""
        if self.spool.undeleted:
            self.remove([])

    def count_dropped(self, points: int) -> None:
        self.spool.count_dropped(points)

    # The sending side: memory, sent directly while the spool has nothing older.

    def memory_batch(self, max_bytes: int) -> list[MemoryEntry]:
        """The oldest batches held in memory, at least one, at most ``max_bytes``."""
        with self._memory_lock:
            batch: list[MemoryEntry] = []
            size = 0
            for entry in self._memory:
                if batch and size + len(entry[0]) > max_bytes:
                    break
                batch.append(entry)
                size += len(entry[0])
            return batch

    def forget_memory(self, batch: list[MemoryEntry]) -> None:
        """Drop a memory batch that was sent (or rejected)."""
        with self._memory_lock:
            for entry in batch:  # still the oldest, unless dropped meanwhile for room
                if self._memory and self._memory[0] is entry:
                    self._memory.popleft()
                    self._memory_bytes -= len(entry[0])
        self.update_stats()

    @property
    def has_memory(self) -> bool:
        return bool(self._memory)

    @property
    def memory_points(self) -> int:
        with self._memory_lock:
            return sum(points for _, points in self._memory)

    def __len__(self) -> int:
        """Segments in the spool."""
        return len(self.spool)

    @property
    def empty(self) -> bool:
        return not len(self.spool) and not self._memory

    # Failures of the spool.

    @property
    def failing(self) -> bool:
        """Whether some operation on the spool fails now."""
        return bool(self._failing)

    def write_failing(self) -> bool:
        return "write" in self._failing

    def failing_beyond_write(self) -> bool:
        """Whether an operation other than the spool's write fails: a failing write is
        retried by the next ``put`` itself, the others only by the sender's backoff."""
        return bool(self._failing.keys() - {"write"})

    def fails(self, operation: str, error: OSError) -> None:
        """Log a failing spool operation once until it works again.

        A nearly full disk flaps (each delivered segment deleted frees room for the next
        write): the same failure is logged again only ``SPOOL_LOG_REPEAT_SECONDS`` after
        it was last logged, and its recovery once per logged failure.
        """
        if operation in self._failing:
            return
        reason = error.strerror or str(error)
        self._failing[operation] = reason
        key = (operation, reason)
        now = time.monotonic()
        last = self._logged_at.get(key)
        if last is not None and now - last < SPOOL_LOG_REPEAT_SECONDS:
            return
        self._logged_at[key] = now
        self._recovery_to_log.add(operation)
        consequence = {
            "write": f"keeping new points in memory (at most {self.memory_max_bytes} bytes) "
            "and sending them from there",
            "delete": "delivered segments are not sent again by this process",
            "read": "retrying",
        }.get(operation, "retrying")
        log.error(
            "spool %s: cannot %s (%s): %s; retrying with backoff, logged once until it works",
            self.spool.directory,
            operation,
            reason,
            consequence,
        )

    def works(self, operation: str) -> None:
        if self._failing.pop(operation, None) is None:
            return
        if operation in self._recovery_to_log:
            self._recovery_to_log.discard(operation)
            log.info("spool %s: %s works again", self.spool.directory, operation)

    def close(self) -> None:
        self.spool.close()
        self.update_stats()

    def update_stats(self) -> None:
        if self.stats is None:
            return
        self.stats.spool_bytes = self.spool.bytes
        self.stats.spool_points = self.spool.points
        self.stats.points_dropped = self.spool.points_dropped
        self.stats.spool_error = int(bool(self._failing))
        self.stats.memory_points = sum(points for _, points in self._memory)
