"""The one cache of finished runs: results kept per store, keyed by the run, its state and
its end, and ``KeptRun``, a ``ReadStore`` in front of a store that reads each finished
run's events, steps and samples once (see ``collector.queries.query``, Caching)."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from collector.analysis.epochs import series_to_read
from collector.analysis.run import EPOCH_KINDS
from collector.queries.timeseries import _RUN_TOTALS, _host_spans
from collector.store.api import (
    ReadStore,
    RunInfo,
    SeriesData,
    SeriesInfo,
    StepTable,
    WorkloadEvent,
)
from contract.schema import RunState

T = TypeVar("T")


class _Slot:
    """One cached value; its lock is held while it is computed, so that a second caller
    waits for that computation instead of doing its own."""

    __slots__ = ("done", "lock", "value")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = False
        self.value: Any = None


class _Cache:
    """A thread-safe LRU of computed values, computing each key once."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._slots: OrderedDict[tuple, _Slot] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple, compute: Callable[[], T]) -> T:
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = _Slot()
                while len(self._slots) > self.size:
                    self._slots.popitem(last=False)  # a waiter keeps its own reference
            else:
                self._slots.move_to_end(key)
        with slot.lock:
            if not slot.done:  # (a failed computation leaves it to the next caller)
                slot.value = compute()
                slot.done = True
            return slot.value

    def peek(self, key: tuple) -> Any:
        """The value kept for ``key`` if it is computed already, else None (computes
        nothing, waits for nothing)."""
        with self._lock:
            slot = self._slots.get(key)
        return slot.value if slot is not None and slot.done else None

    def clear(self) -> None:
        with self._lock:
            self._slots.clear()


FINISHED_CHARTS_KEPT = 16  # runs' down-sampled charts, ~100 kB each at 500 points
SUMMARIES_KEPT = 50_000  # runs' summaries (the runs table), ~1.5 kB each


class RunCache:
    """What is kept about one store's finished runs: small results (tables, reports,
    findings; 256), the summaries of up to 50,000 runs (the runs table), the down-sampled
    charts of the 16 runs last drawn, the steps of the 2 runs last asked about (56 bytes a
    step) and the samples of the last one (as much again). Owned by its store:
    ``run_cache(store)``; the only cache of finished runs (the dashboard keeps none of its
    own)."""

    def __init__(self) -> None:
        self.results = _Cache(256)
        self.summaries = _Cache(SUMMARIES_KEPT)
        self.charts = _Cache(FINISHED_CHARTS_KEPT)
        self.steps = _Cache(2)
        self.samples = _Cache(1)

    def clear(self) -> None:
        for cache in (self.results, self.summaries, self.charts, self.steps, self.samples):
            cache.clear()


# Each store's cache lives exactly as long as the store object: keyed on the object itself
# (weakly), never on id(), which a store opened later may reuse.
_BY_STORE: weakref.WeakKeyDictionary[ReadStore, RunCache] = weakref.WeakKeyDictionary()
_BY_STORE_LOCK = threading.Lock()


def run_cache(store: ReadStore) -> RunCache | None:
    """The store's cache, made on first use; None for a store that cannot be weakly
    referenced (its runs are then always computed afresh)."""
    with _BY_STORE_LOCK:
        try:
            cache = _BY_STORE.get(store)
            if cache is None:
                cache = _BY_STORE[store] = RunCache()
        except TypeError:
            return None
        return cache


def _key(run: RunInfo, kind: str) -> tuple:
    return (run.run_id, run.state, run.end_ns, kind)


def _kept(run: RunInfo | None) -> bool:
    return run is not None and run.state != RunState.LIVE


def _cached(store: ReadStore, run: RunInfo | None, kind: str, compute: Callable[[], T]) -> T:
    cache = run_cache(store) if _kept(run) else None
    if run is None or cache is None:
        return compute()
    return cache.results.get(_key(run, kind), compute)


def clear_cache(store: ReadStore | None = None) -> None:
    """Drop what is kept about ``store``'s runs, or about every store's."""
    with _BY_STORE_LOCK:
        caches = list(_BY_STORE.values()) if store is None else [_BY_STORE.get(store)]
    for cache in caches:
        if cache is not None:
            cache.clear()


def _run(store: ReadStore, run_id: str) -> RunInfo | None:
    return store.run(run_id)


@dataclass(frozen=True)
class _RunSamples:
    """Every series a finished run's charts and report read, over the whole run."""

    start_ns: int
    end_ns: int
    series: dict[int, SeriesData]  # by series_id


class KeptRun:
    """A ``ReadStore`` in front of ``store`` that reads each finished run once.

    ``events()`` of a finished run's epoch events come from those events decoded once and
    kept, ``steps()`` from its ``StepTable`` read once and kept; answers are filtered
    copies, in the store's order (other events go to the store: only a failed run's open
    epoch or a short run's throughput needs them). ``read_series()`` for ``run`` (when it is
    finished) is cut from one read of every series its charts and its report use, over the
    whole run, exactly as the store would cut it (samples in the range plus the nearest on
    either side). Everything else goes to ``store``.
    """

    def __init__(self, store: ReadStore, run: RunInfo | None = None) -> None:
        self.store = store
        self.kept = run
        self._runs: dict[str, RunInfo | None] = {run.run_id: run} if run else {}

    def _run(self, run_id: str) -> RunInfo | None:
        if run_id not in self._runs:
            self._runs[run_id] = _run(self.store, run_id)
        return self._runs[run_id]

    def events(
        self, run_id: str, since_ns: int | None = None, kinds: tuple[str, ...] | None = None
    ) -> list[WorkloadEvent]:
        run = self._run(run_id)
        if run is None or not _kept(run):
            return self.store.events(run_id, since_ns, kinds)
        if kinds is None or not set(kinds) <= set(EPOCH_KINDS):
            return self.store.events(run_id, since_ns, kinds)
        pool = _cached(
            self.store, run, "epoch_events", lambda: self.store.events(run_id, kinds=EPOCH_KINDS)
        )
        return [e for e in pool if (since_ns is None or e.time_ns > since_ns) and e.event in kinds]

    def steps(self, run_id: str, since_ns: int | None = None) -> StepTable:
        run = self._run(run_id)
        cache = run_cache(self.store) if _kept(run) else None
        if run is None or cache is None:
            return self.store.steps(run_id, since_ns)
        table = cache.steps.get(_key(run, "steps"), lambda: self.store.steps(run_id))
        return table.after(since_ns)

    def read_series(self, series: list[SeriesInfo], start_ns: int, end_ns: int) -> list[SeriesData]:
        run = self.kept
        cache = run_cache(self.store) if _kept(run) else None
        if run is None or cache is None:
            return self.store.read_series(series, start_ns, end_ns)
        kept = cache.samples.get(_key(run, "samples"), lambda: self._read_run(run))
        if not (
            kept.start_ns <= start_ns
            and end_ns <= kept.end_ns
            and all(info.series_id in kept.series for info in series)
        ):
            return self.store.read_series(series, start_ns, end_ns)
        return [_cut(info, kept.series[info.series_id], start_ns, end_ns) for info in series]

    def _read_run(self, run: RunInfo) -> _RunSamples:
        spans = _host_spans(self.events(run.run_id, kinds=EPOCH_KINDS))
        if not spans:
            return _RunSamples(0, -1, {})
        start = min(first for first, _, _ in spans.values())
        end = max(last for _, last, _ in spans.values())
        wanted: dict[int, SeriesInfo] = {}
        for _, info in series_to_read(self.store, _RUN_TOTALS, spans):
            wanted.setdefault(info.series_id, info)
        infos = list(wanted.values())
        data = self.store.read_series(infos, start, end) if infos else []
        return _RunSamples(start, end, {d.info.series_id: d for d in data})

    def runs(self) -> list[RunInfo]:
        return self.store.runs()

    def run(self, run_id: str) -> RunInfo | None:
        return self._run(run_id)

    def hosts(self) -> list[str]:
        return self.store.hosts()

    def list_series(
        self, measurement: str, field: str, host: str | None = None
    ) -> list[SeriesInfo]:
        return self.store.list_series(measurement, field, host)


def _cut(info: SeriesInfo, data: SeriesData, start_ns: int, end_ns: int) -> SeriesData:
    """``data`` cut to [start, end] plus the nearest sample on either side (``ReadStore``)."""
    times = data.times_ns
    first = max(int(np.searchsorted(times, start_ns, "left")) - 1, 0)
    stop = int(np.searchsorted(times, end_ns, "right")) + 1
    return SeriesData(info, times[first:stop], data.values[first:stop])
