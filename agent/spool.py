"""A bounded on-disk queue of line-protocol segments, oldest first.

Each submitted batch becomes one segment file ``<seq>.<points>.lp`` in the spool
directory (``seq``: 20 digits, increasing; ``points``: lines in the file). A segment is
written to a temporary file, fsync'd, renamed into place and the directory fsync'd, so
once ``append`` returns the batch survives a crash of the agent or of the machine. A
leftover temporary file (a write cut short) is removed at start.

The spool is reread at start, so a restarted agent sends what the last one could not.
When adding a segment would pass ``max_bytes``, the oldest segments not being sent right
now are deleted and their points counted in ``points_dropped``.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_SEGMENT_NAME = re.compile(r"^(\d{20})\.(\d+)\.lp$")
_TEMP_PREFIX = ".incoming-"


@dataclass(frozen=True)
class Segment:
    seq: int
    points: int
    size: int
    path: Path

    def read(self) -> bytes:
        return self.path.read_bytes()


def segment_name(seq: int, points: int) -> str:
    return f"{seq:020d}.{points}.lp"


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """``(seq, points)`` of a segment file name, None for any other file."""
    match = _SEGMENT_NAME.match(name)
    return (int(match[1]), int(match[2])) if match else None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    """Thread-safe: the sampling loop appends, the sender peeks and removes."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._segments: deque[Segment] = deque()
        self._in_flight: set[int] = set()
        self.bytes = 0
        self.points = 0
        self.points_dropped = 0
        self._full_episode = False
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._load()
        self._next_seq = self._segments[-1].seq + 1 if self._segments else 1

    def _load(self) -> None:
        found = []
        for entry in os.scandir(self.directory):
            if entry.name.startswith(_TEMP_PREFIX):
                log.info("spool: removing %s, a write cut short by a stop", entry.name)
                Path(entry.path).unlink(missing_ok=True)
                continue
            parsed = parse_segment_name(entry.name)
            if parsed is None or not entry.is_file():
                continue
            seq, points = parsed
            found.append(Segment(seq, points, entry.stat().st_size, Path(entry.path)))
        found.sort(key=lambda segment: segment.seq)
        self._segments.extend(found)
        self.bytes = sum(segment.size for segment in found)
        self.points = sum(segment.points for segment in found)
        if found:
            log.info(
                "spool %s: %d points (%d bytes) left by the last run will be sent first",
                self.directory,
                self.points,
                self.bytes,
            )

    def append(self, body: bytes, points: int) -> Segment | None:
        """Write one batch durably; None when the batch alone is larger than the spool."""
        if len(body) > self.max_bytes:
            with self._lock:
                self.points_dropped += points
            log.error(
                "spool: a batch of %d bytes is larger than spool_max_bytes (%d): dropped %d points",
                len(body),
                self.max_bytes,
                points,
            )
            return None
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            self._make_room(len(body))
        path = self.directory / segment_name(seq, points)
        temp = self.directory / f"{_TEMP_PREFIX}{seq}"
        with temp.open("wb") as file:
            file.write(body)
            file.flush()
            os.fdatasync(file.fileno())
        os.rename(temp, path)
        _fsync_dir(self.directory)
        segment = Segment(seq, points, len(body), path)
        with self._lock:
            self._segments.append(segment)
            self.bytes += segment.size
            self.points += points
        return segment

    def _make_room(self, incoming: int) -> None:
        """Drop the oldest idle segments until ``incoming`` more bytes fit (lock held)."""
        if self.bytes + incoming <= self.max_bytes:
            self._full_episode = False
            return
        dropped_points = 0
        for segment in list(self._segments):
            if self.bytes + incoming <= self.max_bytes:
                break
            if segment.seq in self._in_flight:
                continue
            self._segments.remove(segment)
            segment.path.unlink(missing_ok=True)
            self.bytes -= segment.size
            self.points -= segment.points
            dropped_points += segment.points
        self.points_dropped += dropped_points
        if not self._full_episode:
            self._full_episode = True
            log.warning(
                "spool %s is full (spool_max_bytes=%d): dropping the oldest points "
                "(%d so far); logged once until it has room again",
                self.directory,
                self.max_bytes,
                dropped_points,
            )

    def oldest(self) -> Segment | None:
        with self._lock:
            return self._segments[0] if self._segments else None

    def count_dropped(self, points: int) -> None:
        """Points lost before they reached the spool (it could not be written)."""
        with self._lock:
            self.points_dropped += points

    def peek(self, max_bytes: int, max_segments: int) -> list[Segment]:
        """The oldest segments, at least one, at most ``max_bytes`` together; marked in flight."""
        with self._lock:
            batch: list[Segment] = []
            total = 0
            for segment in self._segments:
                if batch and (total + segment.size > max_bytes or len(batch) >= max_segments):
                    break
                batch.append(segment)
                total += segment.size
            self._in_flight.update(segment.seq for segment in batch)
            return batch

    def release(self, batch: list[Segment]) -> None:
        """The batch was not sent: it stays, no longer in flight."""
        with self._lock:
            self._in_flight.difference_update(segment.seq for segment in batch)

    def remove(self, batch: list[Segment], dropped: bool = False) -> None:
        """Delete segments that were delivered (or rejected: ``dropped`` counts them)."""
        with self._lock:
            for segment in batch:
                self._in_flight.discard(segment.seq)
                try:
                    self._segments.remove(segment)
                except ValueError:
                    continue  # already dropped to make room
                segment.path.unlink(missing_ok=True)
                self.bytes -= segment.size
                self.points -= segment.points
                if dropped:
                    self.points_dropped += segment.points

    def __len__(self) -> int:
        with self._lock:
            return len(self._segments)
