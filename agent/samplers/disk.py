"""Block-device I/O from ``<proc>/diskstats``, one point per device.

Measurement ``disk``, tags ``device`` (the kernel's name, e.g. ``sda``, ``nvme0n1p1``,
``cciss/c0d0``) and ``kind`` (``disk`` | ``partition`` | ``virtual``). Fields (see
``contract.schema.Disk``; columns as numbered in the kernel's
Documentation/admin-guide/iostats.rst, after major, minor and name):

========================  =======  =======  ==========================================
field                     kind     unit     source
========================  =======  =======  ==========================================
reads                     counter  count    field 1, reads completed
reads_merged              counter  count    field 2, adjacent reads merged (iostat rrqm)
read_bytes                counter  bytes    field 3, sectors read x 512
read_time_seconds         counter  seconds  field 4 (ms) / 1000, time spent reading
writes                    counter  count    field 5, writes completed
writes_merged             counter  count    field 6, adjacent writes merged (wrqm)
write_bytes               counter  bytes    field 7, sectors written x 512
write_time_seconds        counter  seconds  field 8 / 1000, time spent writing
in_flight                 gauge    count    field 9, I/Os in progress now
io_time_seconds           counter  seconds  field 10 / 1000, time with I/O in progress
io_time_weighted_seconds  counter  seconds  field 11 / 1000; its rate is iostat's aqu-sz
discards                  counter  count    field 12 (Linux 4.18+)
discards_merged           counter  count    field 13
discard_bytes             counter  bytes    field 14, sectors discarded x 512
discard_time_seconds      counter  seconds  field 15 / 1000
flushes                   counter  count    field 16 (Linux 5.5+)
flush_time_seconds        counter  seconds  field 17 / 1000
========================  =======  =======  ==========================================

Times are in seconds, like node_exporter's ``node_disk_*_seconds_total``: floats, since
the kernel counts milliseconds. Rows have 14 fields (11 counters), 18 (Linux 4.18+:
discards) or 20 (5.5+: flushes). Like sysstat and procfs, a row with at least the 11
classic counters is read for the counters it has, so a kernel that appends more fields
(or a tool that writes 15-field rows) loses nothing we know. Kernels before 2.6.25 print
partitions with 7 fields (reads, sectors read, writes, sectors written): those give the
four matching fields only. Rows with 5 to 10 counters are skipped and logged. A
"sector" here is always 512 bytes, whatever the device's block size. The counters are
``unsigned long`` in the kernel: on a 32-bit kernel they wrap at 2^32.

``kind`` decides what a node total counts: only ``disk``. A partition's I/O is also
counted on its disk, and a virtual device's (device mapper, md RAID, loop...) lands on
real disks underneath, so adding either would count the same bytes twice. Where sysfs
is mounted the kernel says which is which (see :func:`kind_from_sysfs`); otherwise the
name decides (see :func:`kind_from_name`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from agent.samplers.base import ProcFile, Roots
from agent.samplers.host_common import ProblemLog, to_ints
from contract.point import Point
from contract.schema import Disk, DiskKind, Tag

log = logging.getLogger(__name__)

SECTOR_BYTES = 512  # the unit of diskstats' sector fields, fixed by the kernel ABI

# Families whose disk name ends in a letter: the kernel appends the partition number
# directly (sda -> sda1, xvdb -> xvdb2, sdaa -> sdaa3).
_LETTER_DISK_PARTITION = re.compile(r"(sd|hd|vd|xvd|emcpower)[a-z]+[0-9]+")
# Disks whose name ends in a digit get "p" before the partition number (nvme0n1p1,
# mmcblk0p1, cciss/c0d0p1, loop0p1, md0p1, nbd0p1): the kernel's own naming rule.
_DIGIT_DISK_PARTITION = re.compile(r".*[0-9]p[0-9]+")
# Block devices with no hardware of their own: sysfs puts them under
# /sys/devices/virtual/block. Their I/O is issued again to the disks underneath (dm-*
# LVM/crypt/multipath, md* software RAID, loop* files, zd* ZFS volumes, bcache*, drbd*
# replication, emcpower* PowerPath multipath over sd paths) or touches no local disk at
# all (ram*, zram* compressed RAM, nullb*, ublkb* served by a user process, nbd* served
# by another host).
_VIRTUAL_PREFIXES = (
    "loop",
    "ram",
    "zram",
    "dm-",
    "md",
    "nbd",
    "drbd",
    "zd",
    "nullb",
    "ublkb",
    "bcache",
    "emcpower",
)


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ is slow (a tick builds many)
class DiskRow:
    """One diskstats row in the kernel's units; None where the row has no such column
    (7-field rows have no times, 14-field rows no discards, 18-field rows no flushes)."""

    device: str
    reads: int
    read_sectors: int
    writes: int
    write_sectors: int
    reads_merged: int | None = None
    read_time_ms: int | None = None
    writes_merged: int | None = None
    write_time_ms: int | None = None
    in_flight: int | None = None
    io_time_ms: int | None = None
    io_time_weighted_ms: int | None = None
    discards: int | None = None
    discards_merged: int | None = None
    discard_sectors: int | None = None
    discard_time_ms: int | None = None
    flushes: int | None = None
    flush_time_ms: int | None = None

    def fields(self) -> dict[str, int | float]:
        """Schema field name -> value in base units (sectors to bytes, ms to seconds)."""
        values: dict[str, int | float | None] = {
            Disk.READS: self.reads,
            Disk.READS_MERGED: self.reads_merged,
            Disk.READ_BYTES: self.read_sectors * SECTOR_BYTES,
            Disk.READ_TIME_SECONDS: _seconds(self.read_time_ms),
            Disk.WRITES: self.writes,
            Disk.WRITES_MERGED: self.writes_merged,
            Disk.WRITE_BYTES: self.write_sectors * SECTOR_BYTES,
            Disk.WRITE_TIME_SECONDS: _seconds(self.write_time_ms),
            Disk.IN_FLIGHT: None if self.in_flight is None else float(self.in_flight),
            Disk.IO_TIME_SECONDS: _seconds(self.io_time_ms),
            Disk.IO_TIME_WEIGHTED_SECONDS: _seconds(self.io_time_weighted_ms),
            Disk.DISCARDS: self.discards,
            Disk.DISCARDS_MERGED: self.discards_merged,
            Disk.DISCARD_BYTES: _bytes(self.discard_sectors),
            Disk.DISCARD_TIME_SECONDS: _seconds(self.discard_time_ms),
            Disk.FLUSHES: self.flushes,
            Disk.FLUSH_TIME_SECONDS: _seconds(self.flush_time_ms),
        }
        return {name: value for name, value in values.items() if value is not None}


def _seconds(milliseconds: int | None) -> float | None:
    return None if milliseconds is None else milliseconds / 1000


def _bytes(sectors: int | None) -> int | None:
    return None if sectors is None else sectors * SECTOR_BYTES


CLASSIC_COUNTERS = 11  # fields 1-11: every kernel since 2.6.25 (and 2.4 whole disks)
DISCARD_COUNTERS = 15  # fields 12-15: Linux 4.18+
FLUSH_COUNTERS = 17  # fields 16-17: Linux 5.5+


def parse_diskstats(text: str, problems: list[str] | None = None) -> list[DiskRow]:
    """Every well-formed row of ``/proc/diskstats``; malformed rows are skipped.

    A row is major, minor, name and either 4 numbers (partitions before 2.6.25) or at
    least the 11 classic counters; counters past the 17 known are ignored.
    """
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split()
        if not words:
            continue
        numbers = to_ints(words[:2] + words[3:]) if len(words) >= 7 else None
        counters = numbers[2:] if numbers is not None else []
        if numbers is None or not (len(counters) == 4 or len(counters) >= CLASSIC_COUNTERS):
            if problems is not None:
                problems.append(
                    f"line {number}: expected major, minor, name and 4 or at least"
                    f" {CLASSIC_COUNTERS} numbers, got {line.strip()!r}; skipped"
                )
            continue
        device = words[2]
        if len(counters) == 4:
            rows.append(DiskRow(device, counters[0], counters[1], counters[2], counters[3]))
            continue
        discards = len(counters) >= DISCARD_COUNTERS
        flushes = len(counters) >= FLUSH_COUNTERS
        rows.append(
            DiskRow(
                device=device,
                reads=counters[0],
                reads_merged=counters[1],
                read_sectors=counters[2],
                read_time_ms=counters[3],
                writes=counters[4],
                writes_merged=counters[5],
                write_sectors=counters[6],
                write_time_ms=counters[7],
                in_flight=counters[8],
                io_time_ms=counters[9],
                io_time_weighted_ms=counters[10],
                discards=counters[11] if discards else None,
                discards_merged=counters[12] if discards else None,
                discard_sectors=counters[13] if discards else None,
                discard_time_ms=counters[14] if discards else None,
                flushes=counters[15] if flushes else None,
                flush_time_ms=counters[16] if flushes else None,
            )
        )
    return rows


def kind_from_name(device: str) -> str:
    """The kind of a device judged by its name alone (no sysfs at hand)."""
    if _LETTER_DISK_PARTITION.fullmatch(device) or _DIGIT_DISK_PARTITION.fullmatch(device):
        return DiskKind.PARTITION
    if device.startswith(_VIRTUAL_PREFIXES):
        return DiskKind.VIRTUAL
    return DiskKind.DISK


def kind_from_sysfs(sys_root: Path, device: str) -> str | None:
    """The kind sysfs gives a device, or None when sysfs does not list it.

    A ``partition`` file marks a partition; a device registered under
    ``devices/virtual/block`` has no hardware of its own. diskstats names with '/'
    (``cciss/c0d0``) are spelled with '!' in sysfs.
    """
    sysfs_name = device.replace("/", "!")
    entry = sys_root / "class" / "block" / sysfs_name
    if not entry.exists():
        return None
    if (entry / "partition").exists():
        return DiskKind.PARTITION
    if (sys_root / "devices" / "virtual" / "block" / sysfs_name).exists():
        return DiskKind.VIRTUAL
    return DiskKind.DISK


def node_totals(
    rows: Iterable[DiskRow], kind_of: Callable[[str], str] = kind_from_name
) -> dict[str, int | float]:
    """The node's disk I/O: every field summed over devices of kind ``disk`` only."""
    totals: dict[str, int | float] = {}
    for row in rows:
        if kind_of(row.device) != DiskKind.DISK:
            continue
        for name, value in row.fields().items():
            totals[name] = totals.get(name, 0) + value
    return totals


class DiskSampler:
    name = Disk.NAME

    def __init__(self, roots: Roots) -> None:
        self._path = roots.proc / "diskstats"
        self._file = ProcFile(self._path)
        self._sys_root = roots.sys
        self._sysfs_present: bool | None = None
        self._kinds: dict[str, str] = {}  # what sysfs said; a device's kind never changes
        self._problems = ProblemLog(log, self._path)
        # each row's line at the last tick and the fields it gave: an idle device's line
        # is the same every tick and is not parsed again
        self._fields_of_line: dict[str, tuple[str, dict[str, int | float]]] = {}

    def available(self) -> bool:
        return bool(self._read())

    def kind(self, device: str) -> str:
        kind = self._kinds.get(device)
        if kind is not None:
            return kind
        # Without sysfs (a captured tree, an old kernel) skip a failed lookup per row.
        if self._sysfs_present is None:
            self._sysfs_present = (self._sys_root / "class" / "block").is_dir()
        kind = kind_from_sysfs(self._sys_root, device) if self._sysfs_present else None
        if kind is None:
            # Not (yet) in sysfs: judge by name, and ask sysfs again next time.
            return kind_from_name(device)
        self._kinds[device] = kind
        return kind

    def sample(self, now_ns: int) -> list[Point]:
        points = []
        self._sysfs_present = None  # looked at again, once, if a device's kind is unknown
        for device, fields in self._rows_fields():
            tags = {Tag.DEVICE: device, Tag.KIND: self.kind(device)}
            points.append(Point(Disk.NAME, tags, fields, now_ns))
        current = {point.tags[Tag.DEVICE] for point in points}
        self._kinds = {name: kind for name, kind in self._kinds.items() if name in current}
        return points

    def _rows_fields(self) -> list[tuple[str, dict[str, int | float]]]:
        """(device, fields) of each row, in the file's order: a line the same as at the
        last tick gives the fields it gave then, the others are parsed (``_read``)."""
        text = self._file.read()
        if text is None:
            self._fields_of_line = {}
            return []
        lines = text.splitlines()
        known = self._fields_of_line
        changed = [line for line in lines if line not in known]
        parsed: dict[str, tuple[str, dict[str, int | float]]] = {}
        malformed = False
        for line in changed:  # one line at a time: each row keeps its own line
            rows = parse_diskstats(line)
            if rows:
                parsed[line] = (rows[0].device, rows[0].fields())
            elif line.strip():
                malformed = True
        problems: list[str] = []
        if malformed:  # the whole file again, for the problems with their line numbers
            parse_diskstats(text, problems)
        self._problems.report(problems)
        result = []
        fields_of_line = {}
        for line in lines:
            entry = known.get(line) or parsed.get(line)
            if entry is not None:
                fields_of_line[line] = entry
                result.append((entry[0], dict(entry[1])))
        self._fields_of_line = fields_of_line
        return result

    def _read(self) -> list[DiskRow]:
        text = self._file.read()
        if text is None:
            return []
        problems: list[str] = []
        rows = parse_diskstats(text, problems)
        self._problems.report(problems)
        return rows


SAMPLER = DiskSampler
