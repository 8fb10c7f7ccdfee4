"""Block-device I/O from ``<proc>/diskstats``, one point per device.

Measurement ``disk``, tags ``device`` (the kernel's name, e.g. ``sda``, ``nvme0n1p1``,
``cciss/c0d0``) and ``kind`` (``disk`` | ``partition`` | ``virtual``). Fields (see
``agent.schema.Disk``; columns as numbered in the kernel's
Documentation/admin-guide/iostats.rst, after major, minor and name):

=============  =======  ============  ==================================================
field          kind     unit          source
=============  =======  ============  ==================================================
reads          counter  count         field 1, reads completed
read_bytes     counter  bytes         field 3, sectors read x 512
read_time_ms   counter  milliseconds  field 4, time spent reading
writes         counter  count         field 5, writes completed
write_bytes    counter  bytes         field 7, sectors written x 512
write_time_ms  counter  milliseconds  field 8, time spent writing
in_flight      gauge    count         field 9, I/Os in progress now
io_time_ms     counter  milliseconds  field 10, time with at least one I/O in progress
=============  =======  ============  ==================================================

Rows have 14 fields (11 counters), 18 (Linux 4.18+: discards) or 20 (5.5+: flushes); we
read the first 11 counters of all of them. Kernels before 2.6.25 print partitions with 7
fields (reads, sectors read, writes, sectors written): those give the four matching
fields only. A "sector" here is always 512 bytes, whatever the device's block size.
The counters are ``unsigned long`` in the kernel: on a 32-bit kernel they wrap at 2^32.

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

from agent.point import Point
from agent.samplers.base import Roots, read_text
from agent.samplers.host_common import ProblemLog, to_ints
from agent.schema import Disk, DiskKind, Tag

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


@dataclass(frozen=True)
class DiskRow:
    """One diskstats row; the time and in-flight fields are None on 7-field rows."""

    device: str
    reads: int
    read_sectors: int
    writes: int
    write_sectors: int
    read_time_ms: int | None = None
    write_time_ms: int | None = None
    in_flight: int | None = None
    io_time_ms: int | None = None

    def fields(self) -> dict[str, int]:
        """Schema field name -> value in base units (sectors turned into bytes)."""
        values: dict[str, int | None] = {
            Disk.READS: self.reads,
            Disk.READ_BYTES: self.read_sectors * SECTOR_BYTES,
            Disk.WRITES: self.writes,
            Disk.WRITE_BYTES: self.write_sectors * SECTOR_BYTES,
            Disk.READ_TIME_MS: self.read_time_ms,
            Disk.WRITE_TIME_MS: self.write_time_ms,
            Disk.IO_TIME_MS: self.io_time_ms,
            Disk.IN_FLIGHT: self.in_flight,
        }
        return {name: value for name, value in values.items() if value is not None}


def parse_diskstats(text: str, problems: list[str] | None = None) -> list[DiskRow]:
    """Every well-formed row of ``/proc/diskstats``; malformed rows are skipped."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split()
        if not words:
            continue
        numbers = to_ints(words[:2] + words[3:])
        if len(words) not in (7, 14, 18, 20) or numbers is None:
            if problems is not None:
                problems.append(
                    f"line {number}: expected major, minor, name and 4, 11, 15 or 17"
                    f" numbers, got {line.strip()!r}; skipped"
                )
            continue
        device, counters = words[2], numbers[2:]
        if len(counters) == 4:
            rows.append(DiskRow(device, counters[0], counters[1], counters[2], counters[3]))
            continue
        rows.append(
            DiskRow(
                device=device,
                reads=counters[0],
                read_sectors=counters[2],
                read_time_ms=counters[3],
                writes=counters[4],
                write_sectors=counters[6],
                write_time_ms=counters[7],
                in_flight=counters[8],
                io_time_ms=counters[9],
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
) -> dict[str, int]:
    """The node's disk I/O: every field summed over devices of kind ``disk`` only."""
    totals: dict[str, int] = {}
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
        self._sys_root = roots.sys
        self._sysfs_present = True
        self._kinds: dict[str, str] = {}  # what sysfs said; a device's kind never changes
        self._problems = ProblemLog(log, self._path)

    def available(self) -> bool:
        return bool(self._read())

    def kind(self, device: str) -> str:
        kind = self._kinds.get(device)
        if kind is not None:
            return kind
        kind = kind_from_sysfs(self._sys_root, device) if self._sysfs_present else None
        if kind is None:
            # Not (yet) in sysfs: judge by name, and ask sysfs again next time.
            return kind_from_name(device)
        self._kinds[device] = kind
        return kind

    def sample(self, now_ns: int) -> list[Point]:
        points = []
        # Without sysfs (a captured tree, an old kernel) skip a failed lookup per row.
        self._sysfs_present = (self._sys_root / "class" / "block").is_dir()
        rows = self._read()
        for row in rows:
            fields: dict[str, int | float] = dict(row.fields())
            if Disk.IN_FLIGHT in fields:
                fields[Disk.IN_FLIGHT] = float(fields[Disk.IN_FLIGHT])
            tags = {Tag.DEVICE: row.device, Tag.KIND: self.kind(row.device)}
            points.append(Point(Disk.NAME, tags, fields, now_ns))
        current = {row.device for row in rows}
        self._kinds = {name: kind for name, kind in self._kinds.items() if name in current}
        return points

    def _read(self) -> list[DiskRow]:
        text = read_text(self._path)
        if text is None:
            return []
        problems: list[str] = []
        rows = parse_diskstats(text, problems)
        self._problems.report(problems)
        return rows


SAMPLER = DiskSampler
