"""The query layer the dashboard calls: presentation-ready, JSON-ready, cheap.

Everything here takes a ``ReadStore`` and returns plain dicts, lists or small frozen
dataclasses with a ``to_dict()``; nothing returns SQL rows or numpy arrays. Missing data is
``None``, never zero. Results for finished and failed runs are cached (they no longer
change); live runs are always recomputed.

``runs_summary(store)``
    One ``RunSummary`` per run, newest first: run_id, framework, model, gpus, hosts (count),
    host_names, images_per_second (every rank's events, see collector.scaling), state,
    start_ns, start (ISO UTC), end_ns.
``epoch_table(store, run_id)``
    The per-epoch report rows (collector.epochs ``COLUMNS``), host rows then the ``*`` row
    of each epoch.
``epoch_boundaries(store, run_id)``
    ``{host: [{"epoch", "start_ns", "end_ns", "complete"}]}`` on each host's own clock, to
    shade epochs on that host's charts.
``host_timeseries(store, run_id, host, max_points=500, since_ns=None, bucket_ns=None)``
    A ``HostSeries``: the host's metrics over the run's window, down-sampled server-side
    into at most ``max_points`` equal buckets. Counter rates are exact bucket averages
    (counter growth over the bucket / its length), gauges are time-weighted bucket means,
    images/s is the host's step images ending in the bucket over its length. For live
    updates pass back ``next_since_ns`` and ``bucket_ns``: only buckets after it come back.
``run_timeseries(store, run_id, ...)``
    ``{host: HostSeries}`` for every host of the run, with one store read.
``scaling_table(store)``
    collector.scaling rows as dicts (one per run, grouped).
``findings(store, run_id)``
    collector.findings as dicts, most severe first.

Series of a ``HostSeries`` (``SERIES_UNITS``):

======================  =========  ============================================
disk_read_mbps          MB/s       disks of kind ``disk``
nfs_server_read_mbps    MB/s       bytes fetched from NFS servers (duplicates once)
nfs_app_read_mbps       MB/s       bytes applications read from NFS (cache hits too)
ib_rcv_mbps             MB/s       all InfiniBand ports
ib_xmit_mbps            MB/s
net_rx_mbps             MB/s       all interfaces but loopback
net_tx_mbps             MB/s
page_cache_bytes        bytes      ``memory.cached_bytes``
cpu_util_percent        %          neither idle nor iowait, of all CPU time
iowait_percent          %          iowait, of all CPU time
gpu_util_percent        %          mean over the host's GPUs
images_per_second       images/s   the host's ranks, from ``step`` events
======================  =========  ============================================
"""

from __future__ import annotations

import math
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import numpy as np

from agent.schema import Event, Gpu, Memory, RunState, Workload
from collector.counters import NS_PER_SECOND
from collector.epochs import (
    BYTES_PER_MB,
    COUNTER,
    CPU_ALL_FIELDS,
    CPU_BUSY_FIELDS,
    EPOCH_KINDS,
    GAUGE_MEAN,
    HOST_TOTALS,
    HostTotal,
    build_report,
    epoch_windows,
    iso_utc,
    read_host_series,
    report_events,
    run_events,
    window_amounts,
)
from collector.findings import run_findings
from collector.scaling import scaling_rows, stored_run_throughput
from collector.store_api import ReadStore, RunInfo, WorkloadEvent

DEFAULT_MAX_POINTS = 500
MIN_BUCKET_NS = NS_PER_SECOND  # the agent samples at 1 Hz: finer buckets add nothing
LATEST_NS = 2**63 - 1

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

# series name -> the HostTotal key (collector.epochs) whose growth per second it is
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
_GPU = HostTotal("gpu_util", Gpu.NAME, Gpu.UTILIZATION_PERCENT, GAUGE_MEAN)
_SERIES_TOTALS: tuple[HostTotal, ...] = (
    *(t for t in HOST_TOTALS if t.key in _RATE_OF.values() or t.key.startswith("cpu_")),
    _PAGE_CACHE,
    _GPU,
)


# --------------------------------------------------------------------------------------
# cache for runs that no longer change
# --------------------------------------------------------------------------------------

_CACHE: OrderedDict[tuple, Any] = OrderedDict()
_CACHE_SIZE = 128
T = TypeVar("T")


def _cached(store: ReadStore, run: RunInfo | None, kind: str, compute: Callable[[], T]) -> T:
    if run is None or run.state == RunState.LIVE:
        return compute()
    key = (id(store), run.run_id, run.end_ns, kind)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    value = compute()
    _CACHE[key] = value
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return value


def clear_cache() -> None:
    _CACHE.clear()


def _run(store: ReadStore, run_id: str) -> RunInfo | None:
    return next((r for r in store.runs() if r.run_id == run_id), None)


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
    state: str
    start_ns: int
    start: str
    end_ns: int | None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["host_names"] = list(self.host_names)
        return data


def runs_summary(store: ReadStore) -> list[RunSummary]:
    """Every run, newest first, with its aggregate throughput."""
    out = []
    for run in sorted(store.runs(), key=lambda r: r.start_ns, reverse=True):

        def summarise(run: RunInfo = run) -> RunSummary:
            events = run_events(store, run.run_id, EPOCH_KINDS)
            ranks = {(e.host, e.rank) for e in events}
            throughput = stored_run_throughput(store, run, events)
            return RunSummary(
                run_id=run.run_id,
                framework=run.framework,
                model=run.model,
                gpus=run.world_size or len(ranks),
                hosts=len(run.hosts),
                host_names=tuple(run.hosts),
                images_per_second=throughput.images_per_second,
                state=run.state,
                start_ns=run.start_ns,
                start=iso_utc(run.start_ns),
                end_ns=run.end_ns,
            )

        out.append(_cached(store, run, "summary", summarise))
    return out


def epoch_table(store: ReadStore, run_id: str) -> list[dict[str, Any]]:
    run = _run(store, run_id)
    return _cached(
        store,
        run,
        "epochs",
        lambda: [row.to_dict() for row in build_report(store, run_id).rows],
    )


def epoch_boundaries(store: ReadStore, run_id: str) -> dict[str, list[dict[str, Any]]]:
    def compute() -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for window in epoch_windows(report_events(store, run_id)):
            out[window.host].append(
                {
                    "epoch": window.epoch,
                    "start_ns": window.start_ns,
                    "end_ns": window.end_ns,
                    "complete": window.complete,
                }
            )
        return dict(out)

    return _cached(store, _run(store, run_id), "boundaries", compute)


def scaling_table(store: ReadStore) -> list[dict[str, Any]]:
    return scaling_rows(store)


def findings(store: ReadStore, run_id: str) -> list[dict[str, Any]]:
    run = _run(store, run_id)
    if run is None:
        return []
    return _cached(
        store, run, "findings", lambda: [f.to_dict() for f in run_findings(store, run_id)]
    )


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
        return asdict(self)


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
    first answer to get only the buckets completed since.
    """
    events = run_events(store, run_id, EPOCH_KINDS)
    spans = _host_spans(events)
    wanted = [h for h in (hosts if hosts is not None else sorted(spans)) if h in spans]
    if not wanted:
        return {}
    since_ns = since_ns or {}
    first = min(since_ns.get(h, spans[h][0]) for h in wanted)
    read_until = max(spans[h][1] if spans[h][2] else LATEST_NS for h in wanted)
    data = read_host_series(store, _SERIES_TOTALS, set(wanted), first, read_until)
    steps: dict[str, list[WorkloadEvent]] = defaultdict(list)
    for event in run_events(store, run_id, (Event.STEP,), since_ns=first - 1):
        if event.host in wanted:
            steps[event.host].append(event)

    out = {}
    for host in wanted:
        run_start, last_event, ended = spans[host]
        if ended:
            window_end = last_event
        else:  # live: up to the newest sample or event seen from this host
            newest = [
                int(s.times_ns[-1])
                for key, series in data.items()
                if key[1] == host
                for s in series
                if len(s.times_ns)
            ]
            window_end = max([last_event, *newest])
        bucket = bucket_ns or choose_bucket_ns(window_end - run_start, max_points)
        start = since_ns.get(host, run_start)
        out[host] = _bucketed(
            run_id, host, data, steps[host], start, window_end, bucket, complete_only=not ended
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
    steps: list[WorkloadEvent],
    start: int,
    end: int,
    bucket: int,
    complete_only: bool,
) -> HostSeries:
    count = (end - start) // bucket if complete_only else -(-(end - start) // bucket)
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
            _step_images(steps, starts, ends, closed_last=not complete_only) / seconds
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


def _step_images(
    steps: list[WorkloadEvent], starts: np.ndarray, ends: np.ndarray, closed_last: bool
) -> np.ndarray:
    """Images of the steps ending in each bucket [start, end); NaN without step events.

    ``closed_last``: the last bucket of a finished run also takes a step at its very end.
    """
    if not steps or not starts.size:
        return np.full(starts.shape, np.nan)
    times = np.array([s.time_ns for s in steps], dtype=np.int64)
    images = np.array([_images(s) for s in steps], dtype=np.float64)
    order = np.argsort(times, kind="stable")
    times, images = times[order], images[order]
    cumulative = np.concatenate(([0.0], np.cumsum(images)))
    lo = np.searchsorted(times, starts, side="left")
    hi = np.searchsorted(times, ends, side="left")
    if closed_last:
        hi[-1] = np.searchsorted(times, ends[-1], side="right")
    return cumulative[hi] - cumulative[lo]


def _images(step: WorkloadEvent) -> float:
    value = step.fields.get(Workload.IMAGES)
    return float(value) if isinstance(value, int | float) else 0.0


def _json_list(values: np.ndarray) -> list[float | None]:
    return [None if math.isnan(v) or math.isinf(v) else round(float(v), 4) for v in values]
