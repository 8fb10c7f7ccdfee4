"""The query layer the dashboard calls: presentation-ready, JSON-ready, cheap.

Everything here takes a ``ReadStore`` and returns plain dicts, lists or small frozen
dataclasses with a ``to_dict()``; nothing returns SQL rows or numpy arrays. Missing data is
``None``, never zero.

``runs_summary(store)``
    One ``RunSummary`` per run, newest first: run_id, framework, model, gpus, hosts (count),
    host_names, images_per_second (every rank's events, see collector.analysis.scaling), state,
    start_ns, start (ISO UTC), end_ns.
``epoch_table(store, run_id)``
    The per-epoch report rows, host rows then the ``*`` row of each epoch: the columns
    of collector.analysis.epochs ``COLUMNS`` plus ``net_rx_mbps`` and ``net_tx_mbps``
    (``TABLE_COLUMNS``; what each means: ``COLUMN_HELP``).
``epoch_boundaries(store, run_id)``
    ``{host: [{"epoch", "start_ns", "end_ns", "complete", "state"}]}`` on each host's own
    clock, to shade epochs on that host's charts (``state``: collector.analysis.epochs.epoch_state).
``host_timeseries(store, run_id, host, max_points=500, since_ns=None, bucket_ns=None)``
    A ``HostSeries``: the host's metrics over the run's window, down-sampled server-side
    into at most ``max_points`` equal buckets. Counter rates are exact bucket averages
    (counter growth over the bucket / its length), gauges are time-weighted bucket means,
    images/s is the images the host's ranks processed in the bucket over its length, each
    step's images spread evenly over the step's own ``seconds`` (``[time - seconds, time]``;
    a step without a duration counts at its time). For live updates pass back
    ``next_since_ns`` and ``bucket_ns``: only buckets after it come back.
``run_timeseries(store, run_id, ...)``
    ``{host: HostSeries}`` for every host of the run, with one store read.
``scaling_table(store)``
    collector.analysis.scaling rows as dicts (one per run, grouped).
``findings(store, run_id)``
    collector.findings.engine as dicts, most severe first.

Series of a ``HostSeries`` (``SERIES_UNITS``):

======================  =========  ============================================
disk_read_mbps          MB/s       disks of kind ``disk``
nfs_server_read_mbps    MB/s       bytes fetched from NFS servers (duplicates once)
nfs_app_read_mbps       MB/s       bytes applications read from NFS (cache hits too)
ib_rcv_mbps             MB/s       all InfiniBand ports
ib_xmit_mbps            MB/s
net_rx_mbps             MB/s       physical interfaces only
net_tx_mbps             MB/s
page_cache_bytes        bytes      ``memory.cached_bytes``
cpu_util_percent        %          neither idle nor iowait, of all CPU time
iowait_percent          %          iowait, of all CPU time
gpu_util_percent        %          mean over the host's GPUs
images_per_second       images/s   the host's ranks, from ``step`` events
======================  =========  ============================================

Live runs
    A bucket of a live run comes back once it is complete: its samples are in, and every
    rank of the host that reports steps has reported one ending at or after the bucket's end
    (a later step spreads its images back over its duration, into buckets already sent), or
    ``LIVE_STEP_WAIT_NS`` has passed since (a rank that stopped reporting does not hold the
    charts back for longer).

Caching
    Finished and failed runs no longer change: their results are kept in the store's own
    ``RunCache`` (``run_cache(store)``), the one cache of finished runs (the dashboard
    keeps none beside it), which lives as long as the store object and is keyed by the run,
    its state and its end; ``clear_cache(store)`` drops it. The run's epoch events are
    decoded once, its steps read once as columns (``StepTable``) and its samples read once,
    all shared by every question about it: its per-epoch report is built once and shared
    by ``epoch_table`` and ``findings``, and its charts (``run_timeseries`` without
    ``since_ns``) are cut from the same samples and kept (``kept_timeseries`` asks without
    computing). The caches are safe to use from several threads, and two threads asking the
    same thing at once wait for one computation. Live runs are always computed afresh, and
    a run that ends gets a new key. Memory per store: the step tables of the 2 runs last
    asked about and the samples of the last one (for a run of 8 hosts x 3 h and 34,560
    steps, 1.9 MB of steps and 27 MB of samples), the charts of the 16 runs last drawn
    (~100 kB each at 500 points), besides small results of 256 questions.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import numpy as np

from collector.analysis import anatomy
from collector.analysis.counters import NS_PER_SECOND
from collector.analysis.epochs import (
    BYTES_PER_MB,
    COLUMNS,
    COUNTER,
    CPU_ALL_FIELDS,
    CPU_BUSY_FIELDS,
    EPOCH_KINDS,
    GAUGE_MEAN,
    GPU_UTIL,
    HOST_TOTALS,
    EpochAmounts,
    EpochReport,
    EpochRow,
    HostTotal,
    build_report,
    epoch_windows,
    iso_utc,
    read_host_series,
    report_events,
    run_events,
    run_is_live,
    series_to_read,
    window_amounts,
)
from collector.analysis.scaling import scaling_rows, stored_run_throughput
from collector.findings.engine import run_findings
from collector.store.api import (
    ReadStore,
    RunInfo,
    SeriesData,
    SeriesInfo,
    StepTable,
    WorkloadEvent,
)
from contract import columns
from contract.schema import Event, Memory, RunState, Workload

DEFAULT_MAX_POINTS = 500
MIN_BUCKET_NS = NS_PER_SECOND  # the agent samples at 1 Hz: finer buckets add nothing
LATEST_NS = 2**63 - 1
LIVE_STEP_WAIT_NS = 60 * NS_PER_SECOND

SERIES_UNITS: dict[str, str] = {
    "disk_read_mbps": "MB/s",
    "nfs_server_read_mbps": "MB/s",
    "nfs_app_read_mbps": "MB/s",
    "ib_rcv_mbps": "MB/s",
    "ib_xmit_mbps": "MB/s",
    "net_rx_mbps": "MB/s",
    "net_tx_mbps": "MB/s",
    "page_cache_bytes": "bytes",
    "cpu_util_percent": "%",
    "iowait_percent": "%",
    "gpu_util_percent": "%",
    "images_per_second": "images/s",
}

# series name -> the HostTotal key (collector.analysis.epochs) whose growth per second it is
_RATE_OF = {
    "disk_read_mbps": "disk_read",
    "nfs_server_read_mbps": "nfs_server_read",
    "nfs_app_read_mbps": "nfs_app_read",
    "ib_rcv_mbps": "ib_rcv",
    "ib_xmit_mbps": "ib_xmit",
    "net_rx_mbps": "net_rx",
    "net_tx_mbps": "net_tx",
}
_PAGE_CACHE = HostTotal("page_cache", Memory.NAME, Memory.CACHED_BYTES, GAUGE_MEAN)
_GPU = GPU_UTIL
_SERIES_TOTALS: tuple[HostTotal, ...] = (
    *(t for t in HOST_TOTALS if t.key in _RATE_OF.values() or t.key.startswith("cpu_")),
    _PAGE_CACHE,
    _GPU,
)
_RUN_TOTALS = (*HOST_TOTALS, _PAGE_CACHE)  # what the report and the charts read

# --------------------------------------------------------------------------------------
# what the per-epoch table's columns mean (the dashboard's tooltips come from here)
# --------------------------------------------------------------------------------------

# rates the table adds to the report's columns: column -> the report amount (bytes) behind it
_TABLE_RATES = {"net_rx_mbps": "net_rx", "net_tx_mbps": "net_tx"}
TABLE_COLUMNS: tuple[str, ...] = (*COLUMNS, *_TABLE_RATES)

COLUMN_HELP: dict[str, str] = columns.COLUMN_HELP  # worded once, in contract.columns


# --------------------------------------------------------------------------------------
# caches for runs that no longer change
# --------------------------------------------------------------------------------------

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


class RunCache:
    """What is kept about one store's finished runs: small results (summaries, tables,
    reports, findings), the down-sampled charts of the 16 runs last drawn, the steps of the
    2 runs last asked about (56 bytes a step) and the samples of the last one (as much
    again). Owned by its store: ``run_cache(store)``; the only cache of finished runs (the
    dashboard keeps none of its own)."""

    def __init__(self) -> None:
        self.results = _Cache(256)
        self.charts = _Cache(FINISHED_CHARTS_KEPT)
        self.steps = _Cache(2)
        self.samples = _Cache(1)

    def clear(self) -> None:
        for cache in (self.results, self.charts, self.steps, self.samples):
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


class _KeptRun:
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


# --------------------------------------------------------------------------------------
# runs, epochs, scaling, findings
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    framework: str
    model: str
    gpus: int
    hosts: int
    host_names: tuple[str, ...]
    images_per_second: float | None
    startup_seconds: float | None
    state: str
    start_ns: int
    start: str
    end_ns: int | None
    precision: str | None = None
    batch_size: int | None = None  # per rank
    data_set: str | None = None  # "tfrecord, 1,281,167 images" / "synthetic"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["host_names"] = list(self.host_names)
        return data


def run_setup(config: dict[str, Any]) -> dict[str, Any]:
    """What tells runs of one model apart, from rank 0's ``run_start``: precision, batch
    per rank and the data set (its format and training images)."""
    batch = config.get(Workload.BATCH_SIZE)
    data_format = config.get(Workload.DATA_FORMAT) or None
    images = config.get(Workload.DATASET_IMAGES)
    data_set = data_format
    if data_format and isinstance(images, int | float) and images > 0:
        data_set = f"{data_format}, {int(images):,} images"
    return {
        "precision": config.get(Workload.PRECISION) or None,
        "batch_size": int(batch) if isinstance(batch, int | float) else None,
        "data_set": data_set,
    }


def runs_summary(store: ReadStore) -> list[RunSummary]:
    """Every run, newest first, with its aggregate throughput."""
    out = []
    for run in sorted(store.runs(), key=lambda r: r.start_ns, reverse=True):

        def summarise(run: RunInfo = run) -> RunSummary:
            source = _KeptRun(store, run)
            events = run_events(source, run.run_id, EPOCH_KINDS)
            ranks = {(e.host, e.rank) for e in events}
            throughput = stored_run_throughput(source, run, events)
            return RunSummary(
                run_id=run.run_id,
                framework=run.framework,
                model=run.model,
                gpus=run.world_size or len(ranks),
                hosts=len(run.hosts),
                host_names=tuple(run.hosts),
                images_per_second=throughput.images_per_second,
                startup_seconds=throughput.startup_seconds,
                state=run.state,
                start_ns=run.start_ns,
                start=iso_utc(run.start_ns),
                end_ns=run.end_ns,
                **run_setup(run.config),
            )

        out.append(_cached(store, run, "summary", summarise))
    return out


def _report(store: ReadStore, run: RunInfo) -> EpochReport:
    """The run's per-epoch report, built once for a finished run."""
    return _cached(store, run, "report", lambda: build_report(_KeptRun(store, run), run.run_id))


def _report_of(store: ReadStore, run_id: str) -> EpochReport:
    """Another run's report (for findings that compare runs): kept when it is finished."""
    run = _run(store, run_id)
    if run is None:
        raise KeyError(run_id)
    return _report(store, run)


def epoch_table(store: ReadStore, run_id: str) -> list[dict[str, Any]]:
    """The report's rows as dicts with ``TABLE_COLUMNS`` as keys."""
    run = _run(store, run_id)
    if run is None:
        return [table_row(r, a) for r, a in _rows_and_amounts(build_report(store, run_id))]
    return _cached(
        store,
        run,
        "epochs",
        lambda: [table_row(r, a) for r, a in _rows_and_amounts(_report(store, run))],
    )


def _rows_and_amounts(report: EpochReport) -> list[tuple[EpochRow, EpochAmounts]]:
    return list(zip(report.rows, report.amounts, strict=True))


def table_row(row: EpochRow, amounts: EpochAmounts) -> dict[str, Any]:
    """One report row as a dict, with the NICs' receive and send in MB/s (made as the
    report makes its InfiniBand rates: bytes over the window's seconds, 3 decimals)."""
    out = row.to_dict()
    for column, key in _TABLE_RATES.items():
        out[column] = _rate_mbps(amounts.values.get(key, math.nan), amounts.seconds)
    return out


def _rate_mbps(amount: float, seconds: float) -> float | None:
    if not seconds > 0 or amount != amount:  # no window, or no data (NaN)
        return None
    return float(np.round(amount * (1.0 / seconds) / BYTES_PER_MB, 3))


def epoch_boundaries(store: ReadStore, run_id: str) -> dict[str, list[dict[str, Any]]]:
    run = _run(store, run_id)

    def compute() -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        live = run_is_live(run)
        for window in epoch_windows(report_events(_KeptRun(store, run), run_id), live):
            out[window.host].append(
                {
                    "epoch": window.epoch,
                    "start_ns": window.start_ns,
                    "end_ns": window.end_ns,
                    "complete": window.complete,
                    "state": window.state,
                }
            )
        return dict(out)

    return _cached(store, run, "boundaries", compute)


def scaling_table(store: ReadStore) -> list[dict[str, Any]]:
    return scaling_rows(store)


def rank_step_parts(store: ReadStore, run_id: str) -> list[dict[str, Any]]:
    """Each rank's mean milliseconds per step in each part, per epoch
    (``collector.analysis.anatomy``): what the run page shows per rank when a host's bar is
    hovered."""
    run = _run(store, run_id)

    def compute() -> list[dict[str, Any]]:
        events = report_events(_KeptRun(store, run) if run else store, run_id)
        return [
            {
                "host": r.host,
                "rank": r.rank,
                "epoch": r.epoch,
                **{
                    f"{part}_ms": 1000 * getattr(r, part) / r.steps
                    for part in ("input_wait", "compute", "communication", "other")
                },
            }
            for r in anatomy.rank_epochs(events)
            if r.steps > 0
        ]

    return _cached(store, run, "rank_parts", compute)


def step_shares(
    store: ReadStore, run_id: str, max_points: int = DEFAULT_MAX_POINTS
) -> dict[str, list[dict[str, Any]]]:
    """The three shares of each sampled step per host, pooled over its ranks, with each
    rank's own (``collector.analysis.anatomy.step_shares``; at most ``max_points`` per host): the
    run page's shares over time."""
    run = _run(store, run_id)

    def compute() -> dict[str, list[dict[str, Any]]]:
        return anatomy.step_shares(_KeptRun(store, run).steps(run_id), max_points)

    return _cached(store, run, f"step_shares/{max_points}", compute)


def findings(store: ReadStore, run_id: str) -> list[dict[str, Any]]:
    """The run's findings; a finished run's share its per-epoch report with
    ``epoch_table``."""
    run = _run(store, run_id)
    if run is None:
        return []

    def compute() -> list[dict[str, Any]]:
        found = run_findings(
            _KeptRun(store, run),
            run_id,
            _report(store, run),
            lambda other: _report_of(store, other),
        )
        return [f.to_dict() for f in found]

    return _cached(store, run, "findings", compute)


# --------------------------------------------------------------------------------------
# time series
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostSeries:
    """Down-sampled metrics of one host over a run's window (times on the host's clock).

    ``times_ns[i]`` is the start of bucket i; buckets are ``bucket_ns`` long (the last one
    of a finished run may be shorter). ``series[name][i]`` is None where there is no data.
    """

    run_id: str
    host: str
    bucket_ns: int
    times_ns: list[int]
    series: dict[str, list[float | None]]
    next_since_ns: int  # pass back as since_ns (with bucket_ns) for the next update
    units: dict[str, str] = field(default_factory=lambda: dict(SERIES_UNITS))

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict, sharing (not copying) the lists: a finished run's series
        are kept and shared, so treat them as read-only."""
        return {
            "run_id": self.run_id,
            "host": self.host,
            "bucket_ns": self.bucket_ns,
            "times_ns": self.times_ns,
            "series": self.series,
            "next_since_ns": self.next_since_ns,
            "units": self.units,
        }


def _host_spans(events: list[WorkloadEvent]) -> dict[str, tuple[int, int, bool]]:
    """(first event, last event, ended) of the run on each host."""
    spans: dict[str, list[int]] = {}
    ended: set[str] = set()
    for event in events:
        span = spans.setdefault(event.host, [event.time_ns, event.time_ns])
        span[0] = min(span[0], event.time_ns)
        span[1] = max(span[1], event.time_ns)
        if event.event == Event.RUN_END:
            ended.add(event.host)
    return {host: (s, e, host in ended) for host, (s, e) in spans.items()}


def _steps_known_until(events: list[WorkloadEvent], steps: StepTable, window_end: int) -> int:
    """On a live host (``events``: its epoch events; ``steps``: its steps read), the time up
    to which the images of every rank that reports steps are in: the earliest of those
    ranks' latest events, but at most ``LIVE_STEP_WAIT_NS`` before ``window_end``."""
    latest: dict[int, int] = {}
    ended: set[int] = set()
    for event in events:
        latest[event.rank] = max(latest.get(event.rank, event.time_ns), event.time_ns)
        if event.event == Event.RUN_END:
            ended.add(event.rank)
    step_ranks = set(steps.rank.tolist())
    for rank in step_ranks:
        newest = int(steps.time_ns[steps.rank == rank].max())
        latest[rank] = max(latest.get(rank, newest), newest)
    waiting = [latest[rank] for rank in step_ranks - ended]
    known = min(waiting, default=window_end)
    return min(window_end, max(known, window_end - LIVE_STEP_WAIT_NS))


def choose_bucket_ns(span_ns: int, max_points: int) -> int:
    """The smallest whole-second bucket that fits the span into ``max_points`` buckets."""
    max_points = max(1, int(max_points))
    bucket = max(MIN_BUCKET_NS, -(-span_ns // max_points))
    return -(-bucket // NS_PER_SECOND) * NS_PER_SECOND


def run_timeseries(
    store: ReadStore,
    run_id: str,
    hosts: list[str] | None = None,
    max_points: int = DEFAULT_MAX_POINTS,
    since_ns: dict[str, int] | None = None,
    bucket_ns: int | None = None,
) -> dict[str, HostSeries]:
    """``HostSeries`` for each host of the run (or the given hosts), one store read.

    Pass ``since_ns`` (per host, from ``next_since_ns``) and the ``bucket_ns`` of the
    first answer to get only the buckets completed since. A finished run's whole series are
    kept (``RunCache.charts``): treat them as read-only.
    """
    run = _run(store, run_id)
    cache = run_cache(store) if _kept(run) else None
    if cache is None or since_ns or bucket_ns is not None:
        return _run_timeseries(store, run, run_id, hosts, max_points, since_ns, bucket_ns)
    return cache.charts.get(
        _charts_key(run, hosts, max_points),
        lambda: _run_timeseries(store, run, run_id, hosts, max_points, None, None),
    )


def kept_timeseries(
    store: ReadStore,
    run_id: str,
    hosts: list[str] | None = None,
    max_points: int = DEFAULT_MAX_POINTS,
) -> dict[str, HostSeries] | None:
    """A finished run's ``run_timeseries`` if it is computed and kept already, else None
    (reads nothing but the run's record)."""
    run = _run(store, run_id)
    cache = run_cache(store) if _kept(run) else None
    if cache is None:
        return None
    return cache.charts.peek(_charts_key(run, hosts, max_points))


def _charts_key(run: RunInfo, hosts: list[str] | None, max_points: int) -> tuple:
    return (*_key(run, "charts"), tuple(hosts) if hosts is not None else None, max_points)


def _run_timeseries(
    store: ReadStore,
    run: RunInfo | None,
    run_id: str,
    hosts: list[str] | None,
    max_points: int,
    since_ns: dict[str, int] | None,
    bucket_ns: int | None,
) -> dict[str, HostSeries]:
    source = _KeptRun(store, run)
    events = run_events(source, run_id, EPOCH_KINDS)
    spans = _host_spans(events)
    wanted = [h for h in (hosts if hosts is not None else sorted(spans)) if h in spans]
    if not wanted:
        return {}
    since_ns = since_ns or {}
    first = min(since_ns.get(h, spans[h][0]) for h in wanted)
    read_until = max(spans[h][1] if spans[h][2] else LATEST_NS for h in wanted)
    data = read_host_series(source, _SERIES_TOTALS, set(wanted), first, read_until)
    all_steps = source.steps(run_id, since_ns=first - 1)
    steps = {host: all_steps.for_host(host) for host in wanted}

    out = {}
    for host in wanted:
        run_start, last_event, ended = spans[host]
        if ended:
            window_end = complete_until = last_event
        else:  # live: up to the newest sample or event seen from this host
            newest = [
                int(s.times_ns[-1])
                for key, series in data.items()
                if key[1] == host
                for s in series
                if len(s.times_ns)
            ]
            window_end = max([last_event, *newest])
            host_events = [e for e in events if e.host == host]
            complete_until = _steps_known_until(host_events, steps[host], window_end)
        bucket = bucket_ns or choose_bucket_ns(window_end - run_start, max_points)
        start = since_ns.get(host, run_start)
        out[host] = _bucketed(
            run_id,
            host,
            data,
            steps[host],
            start,
            window_end,
            bucket,
            complete_until=None if ended else complete_until,
        )
    return out


def host_timeseries(
    store: ReadStore,
    run_id: str,
    host: str,
    max_points: int = DEFAULT_MAX_POINTS,
    since_ns: int | None = None,
    bucket_ns: int | None = None,
) -> HostSeries | None:
    """One host's down-sampled metrics over the run (None if the host is not in it)."""
    result = run_timeseries(
        store,
        run_id,
        hosts=[host],
        max_points=max_points,
        since_ns={host: since_ns} if since_ns is not None else None,
        bucket_ns=bucket_ns,
    )
    return result.get(host)


def _bucketed(
    run_id: str,
    host: str,
    data: dict,
    steps: StepTable,
    start: int,
    end: int,
    bucket: int,
    complete_until: int | None,
) -> HostSeries:
    """Buckets from ``start`` to ``end``; with ``complete_until`` (a live host), only the
    whole buckets that end by then."""
    if complete_until is None:
        count = -(-(end - start) // bucket)
    else:
        count = (complete_until - start) // bucket
    count = max(0, int(count))
    starts = start + bucket * np.arange(count, dtype=np.int64)
    ends = np.minimum(starts + bucket, end)
    seconds = (ends - starts) / NS_PER_SECOND

    def amounts(key: str, how: str) -> tuple[np.ndarray, np.ndarray]:
        return window_amounts(how, data.get((key, host), []), starts, ends)

    series: dict[str, np.ndarray] = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for name, key in _RATE_OF.items():
            growth, _ = amounts(key, COUNTER)
            series[name] = growth / seconds / BYTES_PER_MB
        cache_sum, cache_count = amounts(_PAGE_CACHE.key, GAUGE_MEAN)
        series["page_cache_bytes"] = np.where(cache_count > 0, cache_sum / cache_count, np.nan)
        cpu = {f: amounts(f"cpu_{f}", COUNTER)[0] for f in CPU_ALL_FIELDS}
        total = _nansum([cpu[f] for f in CPU_ALL_FIELDS])
        busy = _nansum([cpu[f] for f in CPU_BUSY_FIELDS])
        series["cpu_util_percent"] = 100.0 * busy / total
        series["iowait_percent"] = 100.0 * cpu["iowait_seconds"] / total
        gpu_sum, gpu_count = amounts(_GPU.key, GAUGE_MEAN)
        series["gpu_util_percent"] = np.where(gpu_count > 0, gpu_sum / gpu_count, np.nan)
        series["images_per_second"] = (
            step_images(steps, starts, ends, closed_last=complete_until is None) / seconds
        )

    return HostSeries(
        run_id=run_id,
        host=host,
        bucket_ns=bucket,
        times_ns=starts.tolist(),
        series={name: _json_list(values) for name, values in series.items()},
        next_since_ns=int(start + bucket * count),
    )


def _nansum(arrays: list[np.ndarray]) -> np.ndarray:
    stacked = np.vstack(arrays)
    return np.where(np.isnan(stacked).all(axis=0), np.nan, np.nansum(stacked, axis=0))


def step_images(
    steps: StepTable, starts: np.ndarray, ends: np.ndarray, closed_last: bool
) -> np.ndarray:
    """Images processed in each bucket ``[start, end)``; NaN without step events.

    A step event at ``t`` with ``seconds`` = s > 0 processed its images evenly over
    ``[t - s, t]``: a bucket gets the share of them that falls in it. A step without a
    positive duration counts at ``t`` (``closed_last``: the last bucket of a finished run
    also takes a step at its very end).
    """
    if not len(steps) or not starts.size:
        return np.full(starts.shape, np.nan)
    times = steps.time_ns
    images = np.nan_to_num(steps.images, nan=0.0)  # a step without a number adds nothing
    seconds = steps.seconds
    with np.errstate(invalid="ignore"):
        spread = seconds > 0
    # buckets follow each other: their edges are the starts and the last end; times as
    # float nanoseconds from the first bucket are exact (far below 2**53)
    origin = int(starts[0])
    edges = np.concatenate((starts, ends[-1:])) - origin
    out = _ramp_amounts(
        (times[spread] - origin).astype(np.float64),
        seconds[spread] * NS_PER_SECOND,
        images[spread],
        edges.astype(np.float64),
    )
    instant = ~spread
    if instant.any():
        out += _instant_amounts(times[instant], images[instant], starts, ends, closed_last)
    return out


def _ramp_amounts(
    ends: np.ndarray, durations: np.ndarray, images: np.ndarray, edges: np.ndarray
) -> np.ndarray:
    """Images between consecutive ``edges`` of steps each spreading ``images`` evenly over
    ``[end - duration, end]``.

    Images done by time x: F(x) = sum of images * clip((x - begin) / duration, 0, 1), a
    piecewise-linear function whose slope rises by images/duration at each step's begin and
    falls by as much at its end; so F(x) = x * (R_b - R_e) - (Q_b - Q_e), where R sums the
    slopes of the begins (ends) up to x and Q the slopes times those times.
    """
    if not ends.size:
        return np.zeros(edges.size - 1)
    begins = ends - durations
    rates = images / durations

    def reached(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(points, kind="stable")
        at, rate = points[order], rates[order]
        slope = np.concatenate(([0.0], np.cumsum(rate)))
        offset = np.concatenate(([0.0], np.cumsum(rate * at)))
        index = np.searchsorted(at, edges, side="right")
        return slope[index], offset[index]

    slope_b, offset_b = reached(begins)
    slope_e, offset_e = reached(ends)
    done = edges * (slope_b - slope_e) - (offset_b - offset_e)
    return np.diff(done)


def _instant_amounts(
    times: np.ndarray, images: np.ndarray, starts: np.ndarray, ends: np.ndarray, closed_last: bool
) -> np.ndarray:
    order = np.argsort(times, kind="stable")
    times, images = times[order], images[order]
    cumulative = np.concatenate(([0.0], np.cumsum(images)))
    lo = np.searchsorted(times, starts, side="left")
    hi = np.searchsorted(times, ends, side="left")
    if closed_last:
        hi[-1] = np.searchsorted(times, ends[-1], side="right")
    return cumulative[hi] - cumulative[lo]


def _json_list(values: np.ndarray) -> list[float | None]:
    return [round(v, 4) if math.isfinite(v) else None for v in values.tolist()]
