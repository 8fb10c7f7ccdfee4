"""The node's measured ceilings (``agent ceilings``, ``agent/ceilings.py``), reported at
every tick from the file that command keeps, so that they sit beside the node's samples
in whatever store receives them (the collector's, VictoriaMetrics, Prometheus).

Measurement ``ceiling``, tags ``device``, ``kind`` and ``method``; one point per such
device with each ceiling measured there (``contract.schema.Ceiling``) and the latest
``measured_at_seconds``. The file (``$EPOCHSCOPE_CEILINGS_FILE``,
default ``/var/lib/epochscope/ceilings.json``) is read again when its modification time
changes, so ceilings measured while the agent runs are reported from its next tick; a
damaged file is logged once and its last good ceilings are kept.
"""

from __future__ import annotations

import logging
from pathlib import Path

from agent.ceilings import Measured, ceilings_file, from_json, points
from agent.samplers.base import Roots
from contract.point import Point

log = logging.getLogger(__name__)


class CeilingsSampler:
    name = "ceilings"

    def __init__(self, roots: Roots, path: Path | None = None) -> None:
        self.path = path if path is not None else ceilings_file()
        self._mtime_ns: int | None = None
        self._ceilings: list[Measured] = []

    def available(self) -> bool:
        """Always: the file may come later (``agent ceilings`` while the agent runs); until
        then a tick costs one failed ``stat``."""
        if not self.path.is_file():
            log.info("ceilings: none measured yet (%s; agent ceilings measures them)", self.path)
        return True

    def _reload(self) -> None:
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError:
            return
        if mtime == self._mtime_ns:
            return
        self._mtime_ns = mtime
        try:
            self._ceilings = from_json(self.path.read_text())
        except (OSError, ValueError) as error:
            log.warning("ceilings: %s: %s (the last good ceilings are kept)", self.path, error)

    def sample(self, now_ns: int) -> list[Point]:
        self._reload()
        return points(self._ceilings, now_ns)


SAMPLER = CeilingsSampler
