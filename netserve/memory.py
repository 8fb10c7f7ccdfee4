"""Giving memory back to the system after large request bodies (glibc only; elsewhere a
no-op).

Python frees a body when its request is answered, but glibc keeps freed memory in its
arenas: after 40 connections each sent 63 MiB, the collector still held 3.5 GiB once they
had closed. Two knobs return it:

- a fixed ``M_MMAP_THRESHOLD``: allocations from ``MMAP_THRESHOLD_BYTES`` up (a body's
  buffer, a joined body) get their own mapping, unmapped when freed. Left alone, glibc
  raises the threshold to the size of each mapping freed (up to 32 MiB), and the next
  bodies land in the heap, where free pages stay resident;
- ``malloc_trim(0)`` once large bodies have been let go (the collector's front runs one
  ``TRIM_INTERVAL_SECONDS`` after a body of ``TRIM_AFTER_BYTES`` or more, one at a time):
  it returns the free pages of every arena (the worker threads each have one).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("netserve.memory")

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MMAP_THRESHOLD_BYTES = 256 * 1024
TRIM_AFTER_BYTES = 1 << 20  # a body at least this large asks for a trim
TRIM_INTERVAL_SECONDS = 1.0


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim, libc.mallopt  # noqa: B018 (glibc has both; musl has neither)
    except (OSError, AttributeError):
        return None
    return libc


class MemoryReturner:
    """Sets the mmap threshold once; ``trim`` hands free pages back."""

    def __init__(self) -> None:
        self._libc = _libc()
        self.trims = 0
        if self._libc is not None and not self._libc.mallopt(
            M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES
        ):
            log.debug("mallopt(M_MMAP_THRESHOLD) refused")

    @property
    def available(self) -> bool:
        return self._libc is not None

    def trim(self) -> None:
        """``malloc_trim(0)`` (ctypes lets the GIL go meanwhile: call it off the loop)."""
        if self._libc is not None:
            self._libc.malloc_trim(0)
            self.trims += 1
