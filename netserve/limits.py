"""One policy for slow and many clients, taken by every server of the project: the
collector (``collector/ingest/connections.py``, an event loop) and the servers with a thread
per connection (``netserve/http_guard.py``: the agent's /metrics, the dashboard).

``ConnectionLimits`` holds the numbers (``collector serve`` options, the agent's
``[metrics]`` keys, ``dashboard serve`` options):

- ``max_connections``: connections open at once. At the cap a new connection makes room
  by closing the one that has waited longest without a request (idle: closed, as its idle
  timeout would; part of a head sent: ``503`` with ``Retry-After``); only when every
  connection has a request in hand is the new one refused: ``503``, ``Retry-After`` and a
  one-line reason, then closed. ``ConnectionCap`` keeps that order and those counts.
- ``header_timeout``: a request's whole head must arrive within it, counted from the
  accept for a connection's first request and from the first byte for later ones. Nothing
  sent: closed; part of a head: ``408`` and closed.
- ``idle_timeout``: a kept-alive connection with no new request is closed.
- ``body_timeout`` and ``body_min_rate`` (the collector, which reads bodies on its loop):
  a minimum transfer rate. Every ``body_timeout`` seconds of a body must bring at least
  ``body_min_rate`` bytes a second (``BodyRate``); a body that falls below is cut, ``408``
  and close. A large body on a slow link passes; one that sends fast, then stalls, is cut
  one window later. (Before: a deadline that grew one second per KiB received, so 63 MiB
  sent and a stall held the connection, and its 63 MiB, for 18 hours.)
- ``body_memory_bytes`` (the collector): one budget for the bodies of every connection,
  from their first byte until their answer is written (``BodyBudget``). A body whose next
  bytes would pass it is refused, ``503`` with ``Retry-After``, and its connection closed.
- ``write_timeout``: writing an answer (and, in a thread-per-connection server, reading a
  body) may block this long.
- ``workers`` (the collector): threads that handle complete requests. A
  thread-per-connection server's worker is the connection's own thread.

Apart from the servers so that a command line can show the defaults without importing an
event loop (asyncio: ~70 ms on every ``collector report``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

BODY_MIN_RATE = 4096  # bytes/s a body must average over each body_timeout window
BODY_MEMORY_BYTES = 256 * 1024 * 1024  # the bodies of all connections together


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = 10_000
    header_timeout: float = 10.0
    idle_timeout: float = 75.0
    body_timeout: float = 30.0
    body_min_rate: int = BODY_MIN_RATE
    body_memory_bytes: int = BODY_MEMORY_BYTES
    write_timeout: float = 30.0
    workers: int = 16

    def problem(self) -> str | None:
        """Why these limits cannot be used, or None."""
        for name in ("max_connections", "body_min_rate", "body_memory_bytes", "workers"):
            if getattr(self, name) < 1:
                return f"{name} must be at least 1 (got {getattr(self, name)})"
        for name in ("header_timeout", "idle_timeout", "body_timeout", "write_timeout"):
            if not getattr(self, name) > 0:
                return f"{name} must be > 0 (got {getattr(self, name)})"
        return None


Key = TypeVar("Key")


class ConnectionCap(Generic[Key]):
    """The cap of one server: which of its connections wait without a request in hand
    (longest first) and, when a new one would pass ``max_connections``, which is closed to
    make room, or that the newcomer is refused. Not locked: a thread-per-connection server
    calls it under its own lock, the collector from its event loop."""

    def __init__(self, max_connections: int) -> None:
        self.max_connections = max_connections
        self.waiting: dict[Key, None] = {}  # insertion order: the longest-waiting first
        self.refused = 0  # new connections refused at the cap
        self.evicted = 0  # waiting connections closed to make room

    def full(self, held: int) -> bool:
        """Whether a new connection beside ``held`` others would pass the cap."""
        return held >= self.max_connections

    def waits(self, key: Key) -> None:
        """``key`` has no request in hand (accepted, or kept alive after an answer): the
        newest waiting connection."""
        self.waiting.pop(key, None)
        self.waiting[key] = None

    def busy(self, key: Key) -> None:
        """``key`` has a request in hand (never evicted until it waits again), or is gone."""
        self.waiting.pop(key, None)

    def make_room(self) -> Key | None:
        """At the cap: the connection to close for the newcomer (the one waiting longest,
        counted as evicted), or None when every connection has a request in hand (the
        newcomer is refused, counted)."""
        if not self.waiting:
            self.refused += 1
            return None
        victim = next(iter(self.waiting))
        del self.waiting[victim]
        self.evicted += 1
        return victim


class BodyRate:
    """The minimum transfer rate of one body: each window of ``body_timeout`` seconds must
    bring ``body_min_rate x body_timeout`` bytes. ``deadline`` is when the current window
    ends; ``received`` counts bytes and, once a window has brought its due, opens the next
    one at once (so a body that keeps the rate never waits on a window's end)."""

    def __init__(self, limits: ConnectionLimits, now: float) -> None:
        self.window = limits.body_timeout
        self.due = max(1, int(limits.body_min_rate * limits.body_timeout))
        self.deadline = now + self.window
        self.in_window = 0

    def received(self, count: int, now: float) -> None:
        self.in_window += count
        if self.in_window >= self.due:
            self.in_window = 0
            self.deadline = now + self.window


class BodyBudget:
    """One memory budget for the request bodies of all connections: ``take`` before bytes
    are held, ``give`` once they are let go (the answer written). Not locked: the collector
    calls it from its event loop only."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.peak = 0
        self.refused = 0  # bodies refused because the budget was spent

    def take(self, count: int) -> bool:
        """Hold ``count`` more bytes, or False (counted) when that would pass the budget."""
        if self.held + count > self.limit:
            self.refused += 1
            return False
        self.held += count
        self.peak = max(self.peak, self.held)
        return True

    def give(self, count: int) -> None:
        self.held -= count
