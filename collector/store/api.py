"""What the analysis (per-epoch views, scaling, findings) and the dashboard read from a store.

Three stores implement it: the embedded SQLite store, and the VictoriaMetrics and
Prometheus backends (their runs and events come from the SQLite file's event store).
Everything above this line works on numpy arrays of (time_ns, value) per series and on
workload events, never on SQL.

A run's ``step`` events are many (a run of 8 hosts x 3 h has ~35,000) and the analysis needs
only a few numbers of each, so ``steps()`` returns them as columns (``StepTable``) rather
than as ``WorkloadEvent`` objects with their decoded fields.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from contract.schema import Event, Workload


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
    """One ``workload`` point, as written by a rank (see contract.schema.Workload)."""

    run_id: str
    host: str
    rank: int
    framework: str
    event: str
    time_ns: int
    fields: dict[str, float | int | str | bool]


def event_number(event: WorkloadEvent, name: str) -> float | None:
    """A numeric field of an event; None when it is missing, text, a boolean or NaN (the
    rule ``StepTable`` applies to steps, for every other event)."""
    value = event.fields.get(name)
    if value is None or isinstance(value, str | bool):
        return None
    number = float(value)
    return None if math.isnan(number) else number


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    framework: str
    model: str
    hosts: tuple[str, ...]
    world_size: int
    start_ns: int
    end_ns: int | None  # None while live
    state: str  # contract.schema.RunState
    config: dict[str, float | int | str | bool]  # rank 0's run_start fields


def step_number(value: Any) -> float:
    """A step field as ``StepTable`` holds it: a JSON number as float, anything else NaN
    (missing, text, and bools, which are no numbers here although Python's ``True`` is an
    ``int``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def _column(values: Any, dtype: type) -> np.ndarray:
    return read_only(np.array(values, dtype=dtype))


def read_only(array: np.ndarray) -> np.ndarray:
    """``array``, no longer writable: tables are shared by caches."""
    array.flags.writeable = False
    return array


@dataclass(frozen=True, eq=False)
class StepTable:
    """A run's ``step`` events as columns, one row per step, in the store's event order
    (time_ns, rank, host).

    ``hosts``       the distinct host names of the rows, sorted
    ``host_index``  int64: each row's host, an index into ``hosts``
    ``rank``        int64: the writing rank (-1 when the event had none)
    ``time_ns``     int64: the step's end on its host's clock
    ``images``      float64: ``Workload.IMAGES``, the images the rank processed in the step
    ``seconds``     float64: ``Workload.SECONDS``, the step's duration
    ``epoch``       float64: ``Workload.EPOCH``
    ``step``        float64: ``Workload.STEP``, the rank's global step number
    ``input_wait``, ``compute``, ``communication``, ``other``
                    float64: the step's anatomy (``Workload.INPUT_WAIT_SECONDS`` ...), the
                    four parts its ``seconds`` split into (``workloads/record/anatomy.py``)

    The float columns are NaN where the step lacks the field or its value is not a number
    (text, a bool). Arrays are read-only; selections make new tables.
    """

    hosts: tuple[str, ...]
    host_index: np.ndarray
    rank: np.ndarray
    time_ns: np.ndarray
    images: np.ndarray
    seconds: np.ndarray
    epoch: np.ndarray
    step: np.ndarray
    input_wait: np.ndarray
    compute: np.ndarray
    communication: np.ndarray
    other: np.ndarray

    # the number columns and the event field each is read from
    FIELDS: ClassVar[dict[str, str]] = {
        "images": Workload.IMAGES,
        "seconds": Workload.SECONDS,
        "epoch": Workload.EPOCH,
        "step": Workload.STEP,
        "input_wait": Workload.INPUT_WAIT_SECONDS,
        "compute": Workload.COMPUTE_SECONDS,
        "communication": Workload.COMMUNICATION_SECONDS,
        "other": Workload.OTHER_STEP_SECONDS,
    }
    COLUMNS = ("host_index", "rank", "time_ns", *FIELDS)

    @classmethod
    def empty(cls) -> StepTable:
        return cls.from_columns([], [], [], [], [], [])

    @classmethod
    def from_columns(
        cls,
        host: Sequence[str],
        rank: Sequence[int] | np.ndarray,
        time_ns: Sequence[int] | np.ndarray,
        images: Sequence[float | None] | np.ndarray,
        seconds: Sequence[float | None] | np.ndarray,
        epoch: Sequence[float | None] | np.ndarray,
        **numbers: Sequence[float | None] | np.ndarray,
    ) -> StepTable:
        """A table from one value per row in each column (host names rather than indices;
        None reads as NaN). ``numbers``: the other ``FIELDS`` columns, NaN where not given."""
        unknown = set(numbers) - set(cls.FIELDS)
        if unknown:
            raise TypeError(f"no such step columns: {sorted(unknown)}")
        hosts, index = np.unique(np.array(host, dtype=str), return_inverse=True)
        rows = len(index)
        given = {"images": images, "seconds": seconds, "epoch": epoch, **numbers}
        return cls(
            hosts=tuple(hosts.tolist()),
            host_index=_column(index, np.int64),
            rank=_column(rank, np.int64),
            time_ns=_column(time_ns, np.int64),
            **{
                name: _column(given[name] if name in given else [math.nan] * rows, np.float64)
                for name in cls.FIELDS
            },
        )

    @classmethod
    def from_events(cls, events: Iterable[WorkloadEvent]) -> StepTable:
        """The ``step`` events among ``events``, in their order (the reference for what a
        store's ``steps()`` returns)."""
        steps = [e for e in events if e.event == Event.STEP]
        numbers = {
            name: [step_number(e.fields.get(field_name)) for e in steps]
            for name, field_name in cls.FIELDS.items()
        }
        return cls.from_columns(
            [e.host for e in steps],
            [e.rank for e in steps],
            [e.time_ns for e in steps],
            **numbers,
        )

    def __len__(self) -> int:
        return int(self.time_ns.size)

    def host_names(self) -> np.ndarray:
        """Each row's host name."""
        return np.array(self.hosts, dtype=str)[self.host_index]

    def take(self, rows: np.ndarray) -> StepTable:
        """The rows selected by a boolean mask or indices, in that order."""
        index = self.host_index[rows]
        used, index = np.unique(index, return_inverse=True)
        return StepTable(
            hosts=tuple(self.hosts[i] for i in used.tolist()),
            host_index=_column(index, np.int64),
            **{
                name: _column(getattr(self, name)[rows], getattr(self, name).dtype)
                for name in self.COLUMNS[1:]
            },
        )

    def for_host(self, host: str) -> StepTable:
        if host not in self.hosts:
            return StepTable.empty()
        return self.take(self.host_index == self.hosts.index(host))

    def after(self, since_ns: int | None) -> StepTable:
        """The steps after ``since_ns`` (all of them for None), as ``steps()`` filters."""
        if since_ns is None:
            return self
        return self.take(self.time_ns > since_ns)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StepTable):
            return NotImplemented
        return self.hosts == other.hosts and all(
            np.array_equal(
                getattr(self, name),
                getattr(other, name),
                equal_nan=name in self.FIELDS,
            )
            for name in self.COLUMNS
        )

    __hash__ = None  # type: ignore[assignment]


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

    def run(self, run_id: str) -> RunInfo | None:
        """The run ``run_id`` (None when there is no such run): what ``runs()`` holds for
        it, without reading the others."""
        ...

    def events(
        self, run_id: str, since_ns: int | None = None, kinds: tuple[str, ...] | None = None
    ) -> list[WorkloadEvent]:
        """A run's events in time order (only those after ``since_ns`` when given, and only
        those whose ``event`` is one of ``kinds`` when given: the per-epoch report reads
        the few epoch events of a run without decoding its many ``step`` events)."""
        ...

    def steps(self, run_id: str, since_ns: int | None = None) -> StepTable:
        """The run's ``step`` events (after ``since_ns`` when given) as columns: what
        ``StepTable.from_events(self.events(run_id, since_ns, kinds=(Event.STEP,)))`` gives,
        without decoding each event."""
        ...


def time_resolution_ns(store: object) -> int:
    """The precision of the sample times ``store`` keeps, in ns: 1 for SQLite, 1,000,000
    for VictoriaMetrics and Prometheus (whole ms). A store in front of another (the
    dashboard's caches, ``.store``) has its inner store's."""
    for _ in range(8):  # wrappers nest a few deep at most
        resolution = getattr(store, "time_resolution_ns", None)
        if isinstance(resolution, int) and resolution > 0:
            return resolution
        inner = getattr(store, "store", None)
        if inner is None:
            return 1
        store = inner
    return 1
