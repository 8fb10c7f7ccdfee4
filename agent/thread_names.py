"""The kernel's name of the calling thread (``/proc/<pid>/task/<tid>/comm``), so that
``top -H``, ``pidstat -t`` and ``ps -L`` tell the project's threads from the training's.
Python names its threads for itself only; Linux keeps 15 bytes of a name."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

PR_SET_NAME = 15
KERNEL_NAME_BYTES = 15


def name_this_thread(name: str) -> None:
    """Best effort: where there is no ``prctl`` (not Linux), nothing happens."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_NAME, name.encode()[:KERNEL_NAME_BYTES], 0, 0, 0)
    except (OSError, AttributeError):
        pass
