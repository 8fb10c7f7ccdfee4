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
    step event standing for the steps since its rank's previous one, their images spread
    evenly over the span they took (``contract.throughput.sampled_step_spans``; a step
    without a duration counts at its time). For live updates pass back
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
    decoded once into its model (``collector.analysis.run``), its steps read once as
    columns (``StepTable``) and its samples read once, all shared by every question about
    it: the model by its summary, report, epoch boundaries and per-rank step parts; its
    per-epoch report is built once and shared by ``epoch_table`` and ``findings``, and its
    charts (``run_timeseries`` without ``since_ns``) are cut from the same samples and kept
    (``kept_findings`` asks for the findings without computing them). The caches are safe
    to use from several threads, and two threads asking the same thing at once wait for one
    computation. Live runs are always computed afresh, and a run that ends gets a new key.
    Memory per store: the step tables of the 2 runs last asked about and the samples of the
    last one (for a run of 8 hosts x 3 h and 34,560 steps, 1.9 MB of steps and 27 MB of
    samples), the charts of the 16 runs last drawn (~100 kB each at 500 points), besides
    small results of 256 questions.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from collector.analysis import anatomy
from collector.analysis.epochs import (
    BYTES_PER_MB,
    COLUMNS,
    EpochAmounts,
    EpochReport,
    EpochRow,
    build_report,
    epoch_windows,
    iso_utc,
    read_host_series,
    report_of,
)
from collector.analysis.run import EPOCH_KINDS, RunModel, read_run, run_events, run_model
from collector.analysis.scaling import scaling_rows
from collector.analysis.throughput import rank_epoch_work, run_throughput
from collector.findings.engine import run_findings
from collector.queries.run_cache import KeptRun, _cached, _kept, _key, _run, run_cache
from collector.queries.run_cache import RunCache as RunCache  # re-exported: the facade
from collector.queries.run_cache import clear_cache as clear_cache  # re-exported
from collector.queries.timeseries import (
    _SERIES_TOTALS,
    DEFAULT_MAX_POINTS,
    LATEST_NS,
    HostSeries,
    _bucketed,
    _host_spans,
    _steps_known_until,
    check_buckets,
    choose_bucket_ns,
)
from collector.store.api import (
    ReadStore,
    RunInfo,
)
from contract import columns
from contract.schema import Workload

# --------------------------------------------------------------------------------------
# what the per-epoch table's columns mean (the dashboard's tooltips come from here)
# --------------------------------------------------------------------------------------

# rates the table adds to the report's columns: column -> the report amount (bytes) behind it
_TABLE_RATES = {"net_rx_mbps": "net_rx", "net_tx_mbps": "net_tx"}
TABLE_COLUMNS: tuple[str, ...] = (*COLUMNS, *_TABLE_RATES)

COLUMN_HELP: dict[str, str] = columns.COLUMN_HELP  # worded once, in contract.columns


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
    """Every run, newest first, with its aggregate throughput.

    A finished run's summary is kept in the store's cache of summaries (``RunCache.
    summaries``, room for every run of a large store), apart from the 256 results the
    other views keep: with 20,000 runs the table once recomputed every run on every
    request (12.7 s in a request thread), each computation pushing the dashboard's kept
    reports out. A run not summarised yet is read on its own (its model is not kept)."""
    cache = run_cache(store)
    runs = sorted(store.runs(), key=lambda r: r.start_ns, reverse=True)
    epochs = _epoch_events_in_bulk(store, cache, runs)
    out = []
    for run in runs:
        if cache is None or not _kept(run):
            out.append(_summary(store, run))
        else:
            out.append(
                cache.summaries.get(
                    _key(run, "summary"),
                    lambda run=run: _summary(store, run, epochs.get(run.run_id)),
                )
            )
    return out


BULK_RUNS = 500  # runs whose epoch events one query reads


def _epoch_events_in_bulk(
    store: ReadStore, cache: RunCache | None, runs: list[RunInfo]
) -> dict[str, list]:
    """The epoch events of the finished runs not summarised yet, read BULK_RUNS runs a query
    where the store can (SQLite): 20,000 runs were 20,000 queries."""
    read = getattr(store, "events_of_runs", None)
    if cache is None or read is None:
        return {}
    missing = [
        run.run_id
        for run in runs
        if _kept(run) and cache.summaries.peek(_key(run, "summary")) is None
    ]
    found: dict[str, list] = {}
    for start in range(0, len(missing), BULK_RUNS):
        found.update(read(missing[start : start + BULK_RUNS], EPOCH_KINDS))
    return found


def _summary(store: ReadStore, run: RunInfo, epoch_events: list | None = None) -> RunSummary:
    cache = run_cache(store)
    decoded = cache.results.peek(_key(run, "model")) if cache is not None else None
    if decoded is None and epoch_events is not None:
        decoded = run_model(epoch_events, (), run, run.run_id)
        if decoded.open_since_ns is not None:  # an open epoch: its steps are wanted too
            decoded = None
    if decoded is None:
        decoded = read_run(store, run) if _kept(run) else _model(store, run)
    throughput = run_throughput(rank_epoch_work(decoded))
    return RunSummary(
        run_id=run.run_id,
        framework=run.framework,
        model=run.model,
        gpus=run.world_size or len(decoded.ranks),
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


def _model(store: ReadStore, run: RunInfo | None, run_id: str = "") -> RunModel:
    """The run's events, read once (``collector.analysis.run``) and kept for a finished run:
    what its report, summary, epoch boundaries and per-rank step parts are made from.
    ``run_id`` names a run the store does not know (``run`` None)."""
    return _cached(
        store, run, "model", lambda: read_run(KeptRun(store, run), run if run else run_id)
    )


def _report(store: ReadStore, run: RunInfo) -> EpochReport:
    """The run's per-epoch report, built once for a finished run."""
    return _cached(store, run, "report", lambda: report_of(KeptRun(store, run), _model(store, run)))


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
        for window in epoch_windows(_model(store, run, run_id)):
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
        model = _model(store, run, run_id)
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
            for r in anatomy.rank_epochs(model)
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
        return anatomy.step_shares(KeptRun(store, run).steps(run_id), max_points)

    return _cached(store, run, f"step_shares/{max_points}", compute)


def findings(store: ReadStore, run_id: str) -> list[dict[str, Any]]:
    """The run's findings; a finished run's share its per-epoch report with
    ``epoch_table``."""
    run = _run(store, run_id)
    if run is None:
        return []

    def compute() -> list[dict[str, Any]]:
        found = run_findings(
            KeptRun(store, run),
            run_id,
            _report(store, run),
            lambda other: _report_of(store, other),
        )
        return [f.to_dict() for f in found]

    return _cached(store, run, "findings", compute)


def kept_findings(store: ReadStore, run_id: str) -> list[dict[str, Any]] | None:
    """A finished run's ``findings`` if they are computed and kept already, else None
    (reads nothing but the run's record)."""
    run = _run(store, run_id)
    cache = run_cache(store) if _kept(run) else None
    return None if run is None or cache is None else cache.results.peek(_key(run, "findings"))


# --------------------------------------------------------------------------------------
# time series
# --------------------------------------------------------------------------------------


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
    source = KeptRun(store, run)
    events = run_events(source, run_id, EPOCH_KINDS)
    spans = _host_spans(events)
    wanted = [h for h in (hosts if hosts is not None else sorted(spans)) if h in spans]
    if not wanted:
        return {}
    # a since before a host's start reads from its start (nothing of the run is earlier)
    since_ns = {h: max(ns, spans[h][0]) for h, ns in (since_ns or {}).items() if h in spans}
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
        check_buckets(start, window_end, bucket)
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
