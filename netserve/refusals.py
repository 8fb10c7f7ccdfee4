"""Refused requests in a server's log (the collector, the agent's /metrics, the dashboard):
one line per kind of refusal per minute.

A client with a wrong token retries every batch; logging each 401 would flood the log,
logging none left the operator blind (a run delivered nothing and the collector said
nothing). So the first refusal of a kind (status, client address, path) is logged at once
and the rest of that minute are counted into the next line. The request's query string and
headers are never logged: they can carry the token.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

INTERVAL_SECONDS = 60.0


class RefusalLog:
    def __init__(
        self,
        log: logging.Logger,
        interval: float = INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[tuple[int, str, str], float] = {}
        self._suppressed: dict[tuple[int, str, str], int] = {}

    def refused(self, status: int, client: str, path: str, reason: str) -> bool:
        """Note one refusal; True when it was logged (not only counted)."""
        key = (status, client, path)
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._interval:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return False
            self._last[key] = now
            more = self._suppressed.pop(key, 0)
        since = f" (and {more} more like it in the last {self._interval:.0f} s)" if more else ""
        self._log.warning("refused %s from %s: %d %s%s", path, client, status, reason, since)
        return True
