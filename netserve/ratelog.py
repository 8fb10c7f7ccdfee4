"""A log line that repeats at the rate of its cause (a refused line every batch, a failed
write every request on a full disk) is logged once per interval per kind; the repeats in
between are counted and their number said on the next line of that kind.

The first occurrence of a kind is logged at once, so an operator sees a new problem as soon
as it starts; a traceback (``exc_info``) is kept for that first line only, since the
repeats' are the same one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable

DEFAULT_INTERVAL_SECONDS = 60.0


class RateLimitedLog:
    def __init__(
        self,
        log: logging.Logger,
        interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self.interval_seconds = interval_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[Hashable, float] = {}
        self._suppressed: dict[Hashable, int] = {}
        self._traced: set[Hashable] = set()

    def log(
        self, level: int, kind: Hashable, message: str, *args: object, exc_info: bool = False
    ) -> bool:
        """Log ``message % args`` unless a line of ``kind`` was logged within the interval
        (then count it); True when it was logged."""
        now = self._clock()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.interval_seconds:
                self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
                return False
            self._last[kind] = now
            more = self._suppressed.pop(kind, 0)
            trace = exc_info and kind not in self._traced
            if trace:
                self._traced.add(kind)
        if more:
            message += f" (and {more} more like it in the last {self.interval_seconds:.0f} s)"
        self._log.log(level, message, *args, exc_info=trace)
        return True
