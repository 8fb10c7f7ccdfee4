"""The one small interface every sampler implements."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from contract.point import Point

# the kernel counts memory in pages of this host's size (4 KiB on x86-64, 64 KiB on some
# arm64 and ppc64 builds)
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Roots:
    """Where /proc and /sys are: the live host by default, a captured tree in tests.

    ``cgroup``: where the cgroup hierarchies are mounted; by default ``<sys>/fs/cgroup``.
    """

    proc: Path = Path("/proc")
    sys: Path = Path("/sys")
    cgroup: Path | None = None

    @property
    def cgroup_root(self) -> Path:
        return self.cgroup if self.cgroup is not None else self.sys / "fs" / "cgroup"


class Sampler(Protocol):
    name: str

    def __init__(self, roots: Roots) -> None: ...

    def available(self) -> bool:
        """Does this host have the data? (Checked once at start.)"""
        ...

    def sample(self, now_ns: int) -> list[Point]:
        """Read and parse; points carry no ``host`` tag (the agent adds it)."""
        ...


def read_text(path: Path) -> str | None:
    """A file's text, or None when it is missing or unreadable (a device went away)."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


class ProcFile:
    """A file read every tick, kept open and re-read with ``pread`` where that is safe.

    Kernel pseudo-files (procfs reports size 0 and regenerates the text at every read
    from offset 0) stay open: a tick costs one ``pread``, not open + read + close. A
    regular file (a captured tree in tests) is opened again each time, so a file that
    is replaced or removed is seen as such. ``read()`` gives the text, or None when the
    file is missing or unreadable (a device went away), like :func:`read_text`.
    """

    # grown (doubled) for a file that fills it, and kept at that size: a small first
    # buffer, since each read allocates one whole buffer before it is cut to the text
    _INITIAL_SIZE = 4096

    def __init__(self, path: Path, keep: bool = True) -> None:
        self.path = path
        self.keep = keep  # False: opened at every read whatever it is (an fd budget)
        self._fd: int | None = None
        self._size = self._INITIAL_SIZE

    def read(self) -> str | None:
        data = self.read_bytes()
        return None if data is None else data.decode(errors="replace")

    def read_bytes(self) -> bytes | None:
        """The file's bytes (what ``read`` decodes), or None, as ``read``."""
        fd = self._fd
        if fd is not None:  # kept open: one pread (the every-tick case, kept short)
            try:
                data = os.pread(fd, self._size, 0)
                return data if len(data) < self._size else self._read_all(fd)
            except OSError:
                self._fd = None
                os.close(fd)
                return None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            data = self._read_all(fd)
            if self.keep and data:
                info = os.fstat(fd)
                if stat.S_ISREG(info.st_mode) and info.st_size == 0:
                    self._fd, fd = fd, None  # a pseudo-file: keep it
        except OSError:
            return None
        finally:
            if fd is not None:
                os.close(fd)
        return data

    def _read_all(self, fd: int) -> bytes:
        while True:
            data = os.pread(fd, self._size, 0)
            if len(data) < self._size:
                return data
            self._size *= 2  # the file outgrew the buffer: read it again, whole

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
