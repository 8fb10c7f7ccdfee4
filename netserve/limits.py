"""The collector server's connection limits and timeouts (``collector serve`` options).

Apart from ``collector.ingest.connections`` so that the command line can show their defaults
without importing the server's event loop (asyncio: ~70 ms on every ``collector report``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    max_connections: int = 10_000
    header_timeout: float = 10.0
    idle_timeout: float = 75.0
    body_timeout: float = 30.0
    write_timeout: float = 30.0
    workers: int = 16
