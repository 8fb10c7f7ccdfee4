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
  a body must arrive within ``body_timeout``, extended by one second for every
  ``body_min_rate`` bytes received (Apache's mod_reqtimeout rule: a large body on a slow
  link is fine, one trickled a byte at a time is cut); ``408`` and close.
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

BODY_MIN_RATE = 1024  # bytes/s; each such amount received adds a second to a body's deadline


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = 10_000
    header_timeout: float = 10.0
    idle_timeout: float = 75.0
    body_timeout: float = 30.0
    body_min_rate: int = BODY_MIN_RATE
    write_timeout: float = 30.0
    workers: int = 16

    def problem(self) -> str | None:
        """Why these limits cannot be used, or None."""
        for name in ("max_connections", "body_min_rate", "workers"):
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
