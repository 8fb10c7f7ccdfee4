"""How every ``collector`` and ``workloads`` command line behaves, in one place.

- ``quiet_broken_pipe``: ``collector report ... | head`` ends quietly, as Unix tools do,
  where Python would print a ``BrokenPipeError`` traceback.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

# what a shell reports for a command that a closed pipe ended (128 + SIGPIPE)
BROKEN_PIPE_STATUS = 128 + signal.SIGPIPE


def quiet_broken_pipe(main: Callable[[], int]) -> int:
    """``main()``, or ``BROKEN_PIPE_STATUS`` without a word when its reader went away (the
    rest of the output goes nowhere, so that Python's last flush at exit is quiet too)."""
    try:
        status = main()
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
        return BROKEN_PIPE_STATUS
