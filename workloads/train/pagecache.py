"""How much of a data set sits in the page cache, and how to push it out.

``resident_bytes`` maps each file and asks the kernel with mincore(2) which of its pages
are in memory (what ``fincore`` prints). ``drop`` evicts the data set only, with
posix_fadvise(POSIX_FADV_DONTNEED) on every file of it (clean pages of those files, for any
user): the rest of the node's page cache (libraries, other jobs' files) stays, so epoch 1
reads the data set and not the framework's shared objects, and a shared node is not
disturbed. ``drop(paths, node=True)`` empties the whole node's page cache (``sync`` then
``3`` into /proc/sys/vm/drop_caches, root only; a container usually refuses it, and then
the data set is evicted instead).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

DROP_CACHES = Path("/proc/sys/vm/drop_caches")
DROP_METHOD_ENV = "EPOCHSCOPE_DROP_METHOD"
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
MAP_FAILED = ctypes.c_void_p(-1).value


@dataclass(frozen=True)
class Residency:
    files: int
    total_bytes: int
    resident_bytes: int

    @property
    def fraction(self) -> float:
        return self.resident_bytes / self.total_bytes if self.total_bytes else 0.0

    def describe(self) -> str:
        gib = 2**30
        return (
            f"{self.resident_bytes / gib:.3f} of {self.total_bytes / gib:.3f} GiB "
            f"({self.fraction:.1%}) of {self.files} files in the page cache"
        )


def file_resident_bytes(path: Path) -> int:
    """Bytes of ``path`` in the page cache (whole pages, capped at the file size)."""
    size = path.stat().st_size
    if size == 0:
        return 0
    pages = (size + PAGE_SIZE - 1) // PAGE_SIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            vector = (ctypes.c_ubyte * pages)()
            if _libc.mincore(address, size, vector) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            vector_bytes = bytes(vector)
        finally:
            _libc.munmap(address, size)
    finally:
        os.close(fd)
    return resident_bytes_of(vector_bytes, size)


# mincore(2) sets only the lowest bit of each page's byte; the others are reserved
_LOWEST_BIT = bytes(value & 1 for value in range(256))


def resident_bytes_of(vector: bytes, size: int, page_size: int = PAGE_SIZE) -> int:
    """Bytes of a ``size``-byte file in the page cache, from its mincore vector (one byte
    per page): resident pages x page size, the last page counted only as far as the file
    goes."""
    resident_pages = vector.translate(_LOWEST_BIT).count(1)
    return min(resident_pages * page_size, size)


def residency(paths: list[Path]) -> Residency:
    total = resident = 0
    for path in paths:
        total += path.stat().st_size
        resident += file_resident_bytes(path)
    return Residency(len(paths), total, resident)


RESIDENCY_SAMPLE_FILES = 2000  # more files than this: an evenly spread sample is measured


class DatasetResidency:
    """A data set's page-cache residency, cheap enough for every epoch edge: every file
    when there are at most ``sample_files`` (TFRecord and RecordIO shards, small JPEG
    sets), else an evenly spread sample of that many, its share applied to the whole data
    set's bytes (ImageNet's 1.3 M JPEGs would take ~40 s each time; a loader reads them in
    random order, so a spread sample fills as the whole does). Files that vanished count
    as not cached."""

    def __init__(
        self,
        paths: list[Path],
        sample_files: int = RESIDENCY_SAMPLE_FILES,
        total_bytes: int | None = None,
    ) -> None:
        """``total_bytes``: the files' bytes when known (a manifest's), else summed here once
        for a sampled set (a second or more for a million files)."""
        step = -(-len(paths) // sample_files) if paths else 1
        self.files = len(paths)
        self.sample = paths[::step]
        self.total_bytes = None
        if step > 1:
            self.total_bytes = total_bytes if total_bytes else sum(map(_size, paths))

    def measure(self) -> Residency:
        measured = resident = 0
        for path in self.sample:
            try:
                size = path.stat().st_size
                cached = file_resident_bytes(path)
            except OSError:
                size = cached = 0
            measured += size
            resident += cached
        if self.total_bytes is None:
            return Residency(self.files, measured, resident)
        share = resident / measured if measured else 0.0
        return Residency(self.files, self.total_bytes, round(share * self.total_bytes))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def evict(paths: list[Path]) -> None:
    """posix_fadvise(DONTNEED) over each whole file: clean pages leave the cache."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)  # dirty pages are not evicted
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def drop_node_caches() -> str | None:
    """sync + drop_caches=3; None on success, else why it could not be done."""
    if os.geteuid() != 0:
        return "not root"
    os.sync()
    try:
        DROP_CACHES.write_text("3\n")
    except OSError as error:
        return f"{DROP_CACHES}: {error.strerror or error}"
    return None


def drop(paths: list[Path], node: bool = False) -> str:
    """Push these files out of the page cache (and, with ``node``, everything else too);
    returns what was done, for the user.

    ``EPOCHSCOPE_DROP_METHOD=fadvise`` never drops the node's cache (a shared machine).
    """
    evicted = f"data set evicted (posix_fadvise DONTNEED on {len(paths)} files, the rest "
    evicted += "of the page cache untouched)"
    if not node or os.environ.get(DROP_METHOD_ENV) == "fadvise":
        evict(paths)
        return evicted
    refused = drop_node_caches()
    if refused is None:
        return "the whole node's page cache dropped (sync; drop_caches=3)"
    evict(paths)
    return f"{evicted}; the node-wide drop was refused: {refused}"
