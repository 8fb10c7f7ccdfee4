"""What the analysis (per-epoch views, scaling, findings) and the dashboard read from a store.

Two stores implement it: the embedded SQLite store and the VictoriaMetrics backend (range
queries). Everything above this line works on numpy arrays of (time_ns, value) per series
and on workload events, never on SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class SeriesInfo:
    """One stored series: one field of one measurement for one tag set on one host."""

    series_id: int
    measurement: str
    host: str
    field: str
    tags: dict[str, str] = field(hash=False, compare=False, default_factory=dict)  # all but host


@dataclass(frozen=True)
class SeriesData:
    info: SeriesInfo
    times_ns: np.ndarray  # int64, ascending
    values: np.ndarray  # float64, same length


@dataclass(frozen=True)
class WorkloadEvent:
    """One ``workload`` point, as written by a rank (see agent.schema.Workload)."""

    run_id: str
    host: str
    rank: int
    framework: str
    event: str
    time_ns: int
    fields: dict[str, float | int | str | bool]


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    framework: str
    model: str
    hosts: tuple[str, ...]
    world_size: int
    start_ns: int
    end_ns: int | None  # None while live
    state: str  # agent.schema.RunState
    config: dict[str, float | int | str | bool]  # rank 0's run_start fields


class ReadStore(Protocol):
    def list_series(
        self, measurement: str, field: str, host: str | None = None
    ) -> list[SeriesInfo]:
        """Every series of that measurement and field (on that host, if given)."""
        ...

    def read_series(self, series: list[SeriesInfo], start_ns: int, end_ns: int) -> list[SeriesData]:
        """Samples in [start_ns, end_ns], plus the last sample before start and the first
        after end when they exist (needed to interpolate at the boundaries)."""
        ...

    def hosts(self) -> list[str]: ...

    def runs(self) -> list[RunInfo]:
        """Newest first."""
        ...

    def events(
        self, run_id: str, since_ns: int | None = None, kinds: tuple[str, ...] | None = None
    ) -> list[WorkloadEvent]:
        """A run's events in time order (only those after ``since_ns`` when given, and only
        those whose ``event`` is one of ``kinds`` when given: the per-epoch report reads
        the few epoch events of a run without decoding its many ``step`` events)."""
        ...
