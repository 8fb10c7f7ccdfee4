"""A bounded on-disk queue of line protocol, oldest first, in append-only segments.

The spool directory holds segment files ``<seq>.lp`` (``seq``: 20 digits, increasing):
newline-terminated line protocol. Each batch is appended to the newest, *open* segment
(written to the file before ``append`` returns), so a crash of the agent loses at most
the batch being written. A segment is *sealed* (no more appends) when the sender takes
it, when it reaches ``segment_max_bytes`` (64 KiB, so that a segment the server rejects
loses a few ticks rather than minutes), and at every start: the sender only ever reads
sealed segments, and a new segment's directory entry is fsync'd once.

A segment is fdatasync'd when it stops taking appends and is not delivered: sealed for
its size, at close, and when a send of it fails. A segment the sender takes and delivers
is deleted without ever being synced, as Prometheus's WAL syncs a segment when it is cut,
not at each append. A crash of the *machine* then loses at most the open segment (about
ten ticks of a node's points) and the batch in flight. ``sync_each_batch`` restores the
fdatasync of every batch (``[push] spool_sync = "batch"``), at about 0.2 ms of CPU a
tick here (bench/agent_overhead/README.md).

At start the spool is reread, oldest first; a segment whose last line was cut short by a
crash is truncated after its last complete line.

When adding a batch would pass ``max_bytes``, the oldest segments not being sent right
now are deleted and their points counted in ``points_dropped``.

A spool directory removed while the agent runs (or an open segment's file deleted) is
found at the next ``append``: the directory is made again, the batch goes into a new
segment, and the segments whose files went with it are forgotten, their points counted
in ``points_dropped`` (one warning). Without this, appends would go on into the deleted
open file, and every new segment would fail until a restart.

Each line is preceded by its CRC32 on a line of its own, ``#xxxxxxxx`` (``with_checksums``):
to any line-protocol reader that line is a comment, so an older agent replaying a newer
spool (or any reader that sends the file as it is) still delivers every point. (The first
checksummed spools put the checksum before the line on the same line, ``#xxxxxxxx <line>``:
that made every line a comment to an older agent, which sent them, had them answered
``204`` and stored nothing. Those spools are still read.) Reading a segment back
(``Segment.read``, ``verified_lines``) checks every line and removes the checksums: a
line whose bytes changed on disk (a bad sector, a stray write, random bytes that would
parse as line protocol) is reported with its number among the segment's line-protocol
lines and skipped; nothing else of the segment
is lost. Spools written before checksums (no line starts ``#``) replay as they are; in a
segment that has checksums, a line without one is damaged.

Appending to an open file costs about a third of the CPU of creating, fsyncing and
renaming a file per batch (bench/agent_overhead/README.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import zlib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger(__name__)

_SEGMENT_NAME = re.compile(r"^(\d{20})\.lp$")
DEFAULT_SEGMENT_MAX_BYTES = 64 << 10


_CHECKSUM_LINE = re.compile(rb"#([0-9a-f]{8})")  # a line of its own, before its line
_CHECKSUM_PREFIX = re.compile(rb"#([0-9a-f]{8}) ")  # the first checksummed spools' form
CHECKSUM_BYTES = 10  # "#xxxxxxxx\n" before each spooled line


def with_checksums(body: bytes) -> bytes:
    """Lines (newline-separated, no final newline) each preceded by a ``#<crc32>`` line;
    blank lines (nothing to line protocol) are left out."""
    return b"\n".join(b"#%08x\n%s" % (zlib.crc32(line), line) for line in body.split(b"\n") if line)


def _is_checksum_line(line: bytes) -> bool:
    return _CHECKSUM_LINE.fullmatch(line) is not None


def verified_lines(data: bytes) -> tuple[bytes, list[int]]:
    """The line protocol of a segment's bytes, checksums checked and removed, and the
    1-based numbers (among the segment's line-protocol lines) of the damaged lines left out.

    Two checksummed forms are read: ``#xxxxxxxx`` on a line of its own before its line
    (written now) and ``#xxxxxxxx <line>`` (the first checksummed spools). A segment
    without any checksum (written before them) is taken as it is.
    """
    if not data.startswith(b"#") and b"\n#" not in data:
        return data, []
    kept: list[bytes] = []
    damaged: list[int] = []
    number = 0  # line-protocol lines so far
    expected: int | None = None  # the checksum line just read, for the next line
    for line in data.split(b"\n"):
        if not line:
            continue
        if (checksum := _CHECKSUM_LINE.fullmatch(line)) is not None:
            if expected is not None:  # a checksum whose line is missing
                number += 1
                damaged.append(number)
            expected = int(checksum[1], 16)
            continue
        prefixed = _CHECKSUM_PREFIX.match(line) if expected is None else None
        if prefixed is None and line.startswith(b"#"):  # a damaged checksum line
            if expected is not None:
                number += 1
                damaged.append(number)
            expected = -1  # its line cannot be checked: damaged
            continue
        number += 1
        if prefixed is not None:
            expected, line = int(prefixed[1], 16), line[prefixed.end() :]
        if expected is None or expected != zlib.crc32(line):
            damaged.append(number)
        else:
            kept.append(line + b"\n")
        expected = None
    if expected is not None:
        damaged.append(number + 1)
    return b"".join(kept), damaged


@dataclass(eq=False)
class Segment:
    seq: int
    path: Path
    size: int = 0
    points: int = 0
    sealed: bool = False
    synced: bool = False  # fdatasync'd since its last append
    damaged: list[int] = field(default_factory=list)  # line numbers, as of the last read
    reported: bool = False  # its damaged lines have been logged

    def read(self) -> bytes:
        """The segment's line protocol, damaged lines left out (``damaged``)."""
        data, self.damaged = verified_lines(self.path.read_bytes())
        return data


def segment_name(seq: int) -> str:
    return f"{seq:020d}.lp"


def parse_segment_name(name: str) -> int | None:
    """The sequence number of a segment file name, None for any other file."""
    match = _SEGMENT_NAME.match(name)
    return int(match[1]) if match else None


def complete_lines(data: bytes) -> tuple[int, int]:
    """``(bytes, points)`` of the complete records at the start of data: newline-terminated
    lines, less a checksum line at the end whose line was cut off (a torn write); checksum
    lines are not points."""
    end = data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")[:-1]
    if lines and _is_checksum_line(lines[-1]):
        end -= len(lines.pop()) + 1
    return end, sum(1 for line in lines if line and not _is_checksum_line(line))


def open_segment_for_append(path: Path) -> BinaryIO:
    """A segment opened to append, made 0600, never through a symlink (O_NOFOLLOW)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.fdopen(os.open(path, flags, 0o600), "ab")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    """Thread-safe: the sampling loop appends, the sender takes, removes or releases."""

    def __init__(
        self,
        directory: Path,
        max_bytes: int,
        segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES,
        sync_each_batch: bool = False,
    ) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.sync_each_batch = sync_each_batch
        # At least four segments fit, so that a full spool drops its oldest quarter at most.
        self.segment_max_bytes = max(1, min(segment_max_bytes, max_bytes // 4))
        self._lock = threading.Lock()
        self._segments: deque[Segment] = deque()
        self._in_flight: set[int] = set()
        self._open_file: BinaryIO | None = None  # the newest segment, if open
        self.bytes = 0
        self.points = 0
        self.points_dropped = 0
        self._full_episode = False
        self._undeleted: list[Path] = []  # out of the queue, file not deleted yet
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._next_seq = self._load() + 1

    def _load(self) -> int:
        """Read the segments left by earlier runs; the highest sequence number seen."""
        found = []
        highest = 0
        for entry in os.scandir(self.directory):
            seq = parse_segment_name(entry.name)
            if seq is None or not entry.is_file():
                continue
            highest = max(highest, seq)
            path = Path(entry.path)
            data = path.read_bytes()
            size, lines = complete_lines(data)
            if size < len(data):
                log.warning(
                    "spool: %s ends in a line cut short by a crash; dropping its %d bytes",
                    entry.name,
                    len(data) - size,
                )
                os.truncate(path, size)
            if size == 0:
                path.unlink()
                continue
            found.append(Segment(seq, path, size, lines, sealed=True, synced=True))
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
        return highest

    # The sampling side.

    def append(self, body: bytes, points: int) -> bool:
        """Write one batch (lines without a final newline) durably; False if dropped.

        A batch larger than the whole spool is dropped and counted.
        """
        record = with_checksums(body) + b"\n"
        if len(record) > self.max_bytes:
            with self._lock:
                self.points_dropped += points
            log.error(
                "spool: a batch of %d bytes is larger than spool_max_bytes (%d): dropped %d points",
                len(record),
                self.max_bytes,
                points,
            )
            return False
        with self._lock:
            self._make_room(len(record))
            segment = self._writable_segment(len(record))
            assert self._open_file is not None
            try:
                self._open_file.write(record)
                self._open_file.flush()
                if self.sync_each_batch:
                    os.fdatasync(self._open_file.fileno())
            except OSError:
                self._abandon_open_segment(segment)
                raise
            segment.synced = self.sync_each_batch
            segment.size += len(record)
            segment.points += points
            self.bytes += len(record)
            self.points += points
        return True

    def _writable_segment(self, incoming: int) -> Segment:
        """The open segment, sealing it and opening a new one if needed (lock held)."""
        newest = self._segments[-1] if self._segments else None
        if newest is not None and not newest.sealed:
            if self._open_file_deleted():
                self._seal(newest)
                self._forget_missing_files()
            elif newest.size + incoming <= self.segment_max_bytes:
                return newest
            else:
                self._seal(newest, sync=True)
        if not os.path.lexists(self.directory):
            self._make_directory_again()
        segment = Segment(self._next_seq, self.directory / segment_name(self._next_seq))
        self._next_seq += 1
        self._open_file = open_segment_for_append(segment.path)
        self._segments.append(segment)
        try:
            _fsync_dir(self.directory)
        except OSError:
            self._abandon_open_segment(segment)
            raise
        return segment

    def _open_file_deleted(self) -> bool:
        """Whether the open segment's file lost its name (its directory removed)."""
        assert self._open_file is not None
        return os.fstat(self._open_file.fileno()).st_nlink == 0

    def _make_directory_again(self) -> None:
        """The spool directory was removed while the agent runs: make it again (lock held)."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        log.warning("spool %s was removed while the agent ran: made it again", self.directory)
        self._forget_missing_files()

    def _forget_missing_files(self) -> None:
        """Drop the segments not being sent whose files are gone, counting their points
        (lock held); one being sent is found out by the sender's read."""
        missing = [
            segment
            for segment in self._segments
            if segment.seq not in self._in_flight and not segment.path.exists()
        ]
        for segment in missing:
            self._delete(segment)
            self.points_dropped += segment.points
        if missing:
            log.warning(
                "spool %s: %d segment files were deleted behind the agent's back: %d points lost",
                self.directory,
                len(missing),
                sum(segment.points for segment in missing),
            )

    def _abandon_open_segment(self, segment: Segment) -> None:
        """A write to the open segment failed (disk full, I/O error): cut the file back to
        its last complete batch and seal it, so that no half-written line is ever sent
        and the next batch starts a new segment. Best effort: the disk is failing (lock
        held)."""
        file, self._open_file = self._open_file, None
        segment.sealed = True
        if file is not None:
            with contextlib.suppress(OSError):  # flushing may fail again; it closes anyway
                file.close()
        try:
            if segment.size:
                os.truncate(segment.path, segment.size)
            else:
                segment.path.unlink(missing_ok=True)
        except OSError:
            log.debug("spool: cannot cut %s back after a failed write", segment.path.name)
        if not segment.size and segment in self._segments:
            self._segments.remove(segment)

    def _seal(self, segment: Segment, sync: bool = False) -> None:
        """No more appends to ``segment``; ``sync``: fdatasync it first (lock held). A
        failing sync is logged: its bytes are in the page cache and are still sent."""
        segment.sealed = True
        if self._open_file is not None:
            if sync and not segment.synced:
                try:
                    os.fdatasync(self._open_file.fileno())
                    segment.synced = True
                except OSError as error:
                    log.warning("spool: cannot sync %s: %s", segment.path.name, error)
            with contextlib.suppress(OSError):
                self._open_file.close()
            self._open_file = None

    def _sync_sealed(self, segment: Segment) -> None:
        """fdatasync a sealed segment's file (lock held); see ``_seal``."""
        try:
            fd = os.open(segment.path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
            segment.synced = True
        except OSError as error:
            log.warning("spool: cannot sync %s: %s", segment.path.name, error)

    def _make_room(self, incoming: int) -> None:
        """Drop the oldest idle sealed segments until ``incoming`` bytes fit (lock held)."""
        if self.bytes + incoming <= self.max_bytes:
            self._full_episode = False
            return
        dropped_points = 0
        for segment in list(self._segments):
            if self.bytes + incoming <= self.max_bytes:
                break
            if segment.seq in self._in_flight:
                continue
            if not segment.sealed:
                self._seal(segment)  # the open one goes too: older points go first
            self._delete(segment)
            dropped_points += segment.points
        self.points_dropped += dropped_points
        with contextlib.suppress(OSError):  # the sender's next ``remove`` reports it
            self._retry_undeleted()
        if not self._full_episode:
            self._full_episode = True
            log.warning(
                "spool %s is full (spool_max_bytes=%d): dropping the oldest points "
                "(%d so far); logged once until it has room again",
                self.directory,
                self.max_bytes,
                dropped_points,
            )

    def count_dropped(self, points: int) -> None:
        """Points lost before they reached the spool (it could not be written)."""
        with self._lock:
            self.points_dropped += points

    # The sending side.

    def oldest(self) -> Segment | None:
        with self._lock:
            return self._segments[0] if self._segments else None

    def take(self, max_bytes: int, max_segments: int) -> tuple[list[Segment], bool]:
        """The oldest segments, at least one, at most ``max_bytes`` together, sealed and
        marked in flight (the open segment is sealed when taken); and whether they are
        all the spool holds."""
        with self._lock:
            batch: list[Segment] = []
            total = 0
            for segment in self._segments:
                if batch and (total + segment.size > max_bytes or len(batch) >= max_segments):
                    break
                if not segment.sealed:
                    self._seal(segment)
                batch.append(segment)
                total += segment.size
            self._in_flight.update(segment.seq for segment in batch)
            return batch, len(batch) == len(self._segments)

    def newer_than(self, segment: Segment) -> Segment | None:
        """The segment after ``segment`` in the queue, if any."""
        with self._lock:
            later = [other for other in self._segments if other.seq > segment.seq]
            return later[0] if later else None

    def release(self, batch: list[Segment]) -> None:
        """The batch was not sent: it stays, no longer in flight, synced to disk."""
        with self._lock:
            self._in_flight.difference_update(segment.seq for segment in batch)
            for segment in batch:
                if not segment.synced and segment in self._segments:  # not dropped meanwhile
                    self._sync_sealed(segment)

    def remove(self, batch: list[Segment], dropped: bool = False) -> None:
        """Delete segments that were delivered (or rejected: ``dropped`` counts them).

        They leave the queue even when their files cannot be deleted (a read-only or
        failing spool directory), so that nothing delivered is sent again by this
        process; those files are retried at every later ``remove`` and the first
        ``OSError`` is raised once the bookkeeping is done. A restart before they are
        deleted sends them again (delivery is at least once).
        """
        with self._lock:
            for segment in batch:
                self._in_flight.discard(segment.seq)
                if segment not in self._segments:
                    continue  # already dropped to make room
                self._delete(segment)
                if dropped:
                    self.points_dropped += segment.points
            self._retry_undeleted()

    def _delete(self, segment: Segment) -> None:
        self._segments.remove(segment)
        self.bytes -= segment.size
        self.points -= segment.points
        self._undeleted.append(segment.path)

    def _retry_undeleted(self) -> None:
        """Unlink the files of segments already out of the queue (lock held)."""
        failure: OSError | None = None
        still: list[Path] = []
        for path in self._undeleted:
            try:
                path.unlink(missing_ok=True)
            except OSError as error:
                failure = failure or error
                still.append(path)
        self._undeleted = still
        if failure is not None:
            raise failure

    @property
    def undeleted(self) -> int:
        """Files of delivered or dropped segments that could not be deleted yet."""
        with self._lock:
            return len(self._undeleted)

    def close(self) -> None:
        with self._lock:
            if self._segments and not self._segments[-1].sealed:
                self._seal(self._segments[-1], sync=True)

    def __len__(self) -> int:
        with self._lock:
            return len(self._segments)
