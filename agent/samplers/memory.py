"""Memory levels from ``<proc>/meminfo`` and paging counters from ``<proc>/vmstat``.

Measurement ``memory``, no tags beyond ``host``. Fields (see ``contract.schema.Memory``):

===================  =======  =========  ==============================================
field                kind     unit       source
===================  =======  =========  ==============================================
total_bytes          gauge    bytes      meminfo ``MemTotal`` x 1024
free_bytes           gauge    bytes      ``MemFree`` x 1024
available_bytes      gauge    bytes      ``MemAvailable`` x 1024 (Linux 3.14+)
cached_bytes         gauge    bytes      ``Cached`` x 1024: the page cache (includes shmem)
buffers_bytes        gauge    bytes      ``Buffers`` x 1024
dirty_bytes          gauge    bytes      ``Dirty`` x 1024
writeback_bytes      gauge    bytes      ``Writeback`` x 1024
active_file_bytes    gauge    bytes      ``Active(file)`` x 1024 (2.6.28+)
inactive_file_bytes  gauge    bytes      ``Inactive(file)`` x 1024 (2.6.28+)
shmem_bytes          gauge    bytes      ``Shmem`` x 1024 (2.6.32+)
pgpgin_bytes         counter  bytes      vmstat ``pgpgin`` x 1024
pgpgout_bytes        counter  bytes      vmstat ``pgpgout`` x 1024
pgfault              counter  count      vmstat ``pgfault``
pgmajfault           counter  count      vmstat ``pgmajfault``
page_cache_drops     counter  count      vmstat ``drop_pagecache``
file_refault_bytes   counter  bytes      vmstat ``workingset_refault_file`` (5.9+; before,
                                         ``workingset_refault``) x the page size
===================  =======  =========  ==============================================

meminfo says "kB" but means KiB, hence x 1024; vmstat's ``pgpgin``/``pgpgout`` are KiB
too (the kernel counts 512-byte sectors and halves them when it prints). A key the
kernel does not print (an old kernel has no ``MemAvailable``) gives no field, never a
zero. ``Cached`` includes
``Shmem`` (tmpfs, shared memory), which cannot be dropped like file cache; the data set
of a training run shows up in ``Cached`` and in ``Active(file)``/``Inactive(file)``.
Without a readable vmstat the point carries the meminfo fields only.

The last two tell how a file's pages left the page cache. ``drop_pagecache`` counts
each ``echo 1`` or ``3 > /proc/sys/vm/drop_caches``. A refault is a page read back in
while the kernel still remembers evicting it by reclaim (kswapd, direct or a memory
cgroup's limit, DAMON's pageout): pages invalidated instead (``posix_fadvise``
DONTNEED, ``vmtouch -e``, drop_caches) are read back without one. Both count the whole
host, every job's files.
"""

from __future__ import annotations

import logging
import re

from agent.samplers.base import PAGE_BYTES, ProcFile, Roots
from agent.samplers.host_common import ProblemLog
from contract.point import Point
from contract.schema import FieldName, Memory

log = logging.getLogger(__name__)

_INTEGER = re.compile(r"-?[0-9]+")

MEMINFO_FIELDS: dict[str, FieldName] = {
    "MemTotal": Memory.TOTAL_BYTES,
    "MemFree": Memory.FREE_BYTES,
    "MemAvailable": Memory.AVAILABLE_BYTES,
    "Cached": Memory.CACHED_BYTES,
    "Buffers": Memory.BUFFERS_BYTES,
    "Dirty": Memory.DIRTY_BYTES,
    "Writeback": Memory.WRITEBACK_BYTES,
    "Active(file)": Memory.ACTIVE_FILE_BYTES,
    "Inactive(file)": Memory.INACTIVE_FILE_BYTES,
    "Shmem": Memory.SHMEM_BYTES,
}
# vmstat key -> (field, multiplier to base units)
VMSTAT_FIELDS: dict[str, tuple[FieldName, int]] = {
    "pgpgin": (Memory.PGPGIN_BYTES, 1024),
    "pgpgout": (Memory.PGPGOUT_BYTES, 1024),
    "pgfault": (Memory.PGFAULT, 1),
    "pgmajfault": (Memory.PGMAJFAULT, 1),
    "drop_pagecache": (Memory.PAGE_CACHE_DROPS, 1),
    # 5.9 split the refaults into _anon and _file; before, only file pages were tracked
    "workingset_refault_file": (Memory.FILE_REFAULT_BYTES, PAGE_BYTES),
    "workingset_refault": (Memory.FILE_REFAULT_BYTES, PAGE_BYTES),
}


# The kernel's vmstat, every line "name value": checked in one regex pass, after which
# only the keys the sampler reports are pulled out (a line-by-line parse of ~180 lines
# was a fifth of the agent's sampling time). Anything else takes the careful path.
_VMSTAT_WELL_FORMED = re.compile(r"(?:[A-Za-z0-9_]+ -?[0-9]+\n)*")
_VMSTAT_WANTED = re.compile(
    "^(" + "|".join(map(re.escape, VMSTAT_FIELDS)) + r") (-?[0-9]+)$", re.MULTILINE
)


# meminfo in the kernel's own form ("Key:   value[ kB]" lines): checked in one regex pass
# and only the keys the sampler reports pulled out (this runs every tick); anything else
# goes through parse_meminfo, which names each line it skips.
_MEMINFO_WELL_FORMED = re.compile(r"(?:[A-Za-z0-9_()]+: +[0-9]+(?: kB)?\n)*")
_MEMINFO_WANTED = re.compile(
    "^(" + "|".join(map(re.escape, MEMINFO_FIELDS)) + r"): +([0-9]+)( kB)?$", re.MULTILINE
)


def wanted_meminfo(text: str) -> dict[str, int] | None:
    """The reported keys of a well-formed ``/proc/meminfo`` (bytes, as ``parse_meminfo``
    gives them), or None when the text is not in the kernel's form or has no MemTotal."""
    if not _MEMINFO_WELL_FORMED.fullmatch(text):
        return None
    values = {
        key: int(value) * 1024 if kilobytes else int(value)
        for key, value, kilobytes in _MEMINFO_WANTED.findall(text)
    }
    return values if "MemTotal" in values else None


def parse_meminfo(text: str, problems: list[str] | None = None) -> dict[str, int]:
    """``/proc/meminfo`` as {key: value}, "kB" values converted to bytes.

    Keys without a unit (``HugePages_Total``) are counts and stay as they are. Raises
    ValueError when there is no ``MemTotal``: then this is not a meminfo file.
    """
    values: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        key, colon, rest = line.partition(":")
        words = rest.split()
        if not colon or not words or not (words[0].isascii() and words[0].isdigit()):
            if line.strip() and problems is not None:
                problems.append(f"line {number}: expected 'Key: value [kB]', skipped")
            continue
        value = int(words[0])
        if len(words) > 1 and words[1] == "kB":
            value *= 1024
        values[key.strip()] = value
    if "MemTotal" not in values:
        raise ValueError("no MemTotal line")
    return values


def parse_vmstat(text: str, problems: list[str] | None = None) -> dict[str, int]:
    """``/proc/vmstat`` as {name: value}."""
    values: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        # The kernel's own form, "name value": checked without a regex (this runs on
        # ~180 lines a second); anything else goes through the careful path.
        name, space, value = line.partition(" ")
        if space and name.isidentifier() and value.isascii() and value.isdigit():
            values[name] = int(value)
            continue
        words = line.split()
        if not words:
            continue
        # A few nr_* gauges can dip below zero transiently on some kernels: accept a
        # sign, the counters we use are never negative.
        if len(words) != 2 or not _INTEGER.fullmatch(words[1]):
            if problems is not None:
                problems.append(f"line {number}: expected 'name value', skipped")
            continue
        values[words[0]] = int(words[1])
    return values


class MemorySampler:
    name = Memory.NAME

    def __init__(self, roots: Roots) -> None:
        self._meminfo_path = roots.proc / "meminfo"
        self._vmstat_path = roots.proc / "vmstat"
        self._meminfo_file = ProcFile(self._meminfo_path)
        self._vmstat_file = ProcFile(self._vmstat_path)
        self._meminfo_problems = ProblemLog(log, self._meminfo_path)
        self._vmstat_problems = ProblemLog(log, self._vmstat_path)

    def available(self) -> bool:
        return self._read_meminfo() is not None

    def sample(self, now_ns: int) -> list[Point]:
        meminfo = self._read_meminfo()
        if meminfo is None:
            return []
        fields: dict[str, int | float] = {
            field: float(meminfo[key]) for key, field in MEMINFO_FIELDS.items() if key in meminfo
        }
        vmstat = self._read_vmstat()
        fields.update(
            {
                field: vmstat[key] * scale
                for key, (field, scale) in VMSTAT_FIELDS.items()
                if key in vmstat
            }
        )
        return [Point(Memory.NAME, {}, fields, now_ns)]

    def _read_meminfo(self) -> dict[str, int] | None:
        text = self._meminfo_file.read()
        if text is None:
            return None
        wanted = wanted_meminfo(text)
        if wanted is not None:
            return wanted
        problems: list[str] = []
        try:
            meminfo = parse_meminfo(text, problems)
        except ValueError as error:
            problems.append(str(error))
            meminfo = None
        self._meminfo_problems.report(problems)
        return meminfo

    def _read_vmstat(self) -> dict[str, int]:
        text = self._vmstat_file.read()
        if text is None:
            return {}
        if _VMSTAT_WELL_FORMED.fullmatch(text):
            return {name: int(value) for name, value in _VMSTAT_WANTED.findall(text)}
        problems: list[str] = []
        vmstat = parse_vmstat(text, problems)
        self._vmstat_problems.report(problems)
        return vmstat


SAMPLER = MemorySampler
