"""A host's metrics over a run, down-sampled into equal buckets: counter rates as exact
bucket averages, gauges as time-weighted means, images/s from the ranks' steps (what
``collector.queries.query.host_timeseries`` documents)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collector.analysis.counters import NS_PER_SECOND
from collector.analysis.epochs import (
    BYTES_PER_MB,
    COUNTER,
    CPU_ALL_FIELDS,
    CPU_BUSY_FIELDS,
    GAUGE_MEAN,
    GPU_UTIL,
    HOST_TOTALS,
    HostTotal,
    window_amounts,
)
from collector.store.api import (
    StepTable,
    WorkloadEvent,
)
from contract.schema import Event, Memory

DEFAULT_MAX_POINTS = 500
MIN_BUCKET_NS = NS_PER_SECOND  # the agent samples at 1 Hz: finer buckets add nothing
# buckets per host and series one answer may hold: a chart is at most a few thousand pixels
# wide, and each bucket is ~30 series of 8-byte values per host (a bucket_ns of 1 over a
# long span, or a ``since`` years before the run, asked numpy for 80 GiB: issue 44, item 3)
MAX_BUCKETS = 20_000


class TooManyBuckets(ValueError):
    """A time-series question whose span and bucket would make more than ``MAX_BUCKETS``."""


def check_buckets(start_ns: int, end_ns: int, bucket_ns: int) -> None:
    """``TooManyBuckets`` (with what to ask instead) when ``[start_ns, end_ns]`` cut into
    ``bucket_ns`` would make more than ``MAX_BUCKETS`` buckets."""
    if bucket_ns < MIN_BUCKET_NS:
        raise TooManyBuckets(f"bucket_ns {bucket_ns} is under the {MIN_BUCKET_NS} ns of a sample")
    buckets = -(-(end_ns - start_ns) // bucket_ns)
    if buckets > MAX_BUCKETS:
        least = choose_bucket_ns(end_ns - start_ns, MAX_BUCKETS)
        raise TooManyBuckets(
            f"bucket_ns {bucket_ns} cuts {(end_ns - start_ns) / NS_PER_SECOND:.0f} s into "
            f"{buckets} buckets, over the {MAX_BUCKETS} an answer may hold: ask for "
            f"bucket_ns >= {least}, or a later since"
        )


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

    Each step event stands for the steps since its rank's previous one and the span they
    took (``contract.throughput.sampled_step_spans``: ranks send every ``step_every``-th
    step), whose images are spread evenly over that span: a bucket gets the share of them
    that falls in it. An event without a positive duration counts at its time
    (``closed_last``: the last bucket of a finished run also takes one at its very end).
    """
    if not len(steps) or not starts.size:
        return np.full(starts.shape, np.nan)
    # buckets follow each other: their edges are the starts and the last end; times as
    # float nanoseconds from the first bucket are exact (far below 2**53)
    origin = int(starts[0])
    edges = np.concatenate((starts, ends[-1:])) - origin
    begins, times, images = _sampled_spans(steps, origin)
    spread = times > begins
    out = _ramp_amounts(
        times[spread],
        times[spread] - begins[spread],
        images[spread],
        edges.astype(np.float64),
    )
    instant = ~spread
    if instant.any():
        out += _instant_amounts(
            times[instant].astype(np.int64) + origin, images[instant], starts, ends, closed_last
        )
    return out


def _sampled_spans(steps: StepTable, origin: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(begin, end, images) of every step event, each rank's in time order; begin and end
    in nanoseconds from ``origin``."""
    order = np.lexsort((steps.time_ns, steps.rank, steps.host_index))
    rank_key = np.stack((steps.host_index[order], steps.rank[order]), axis=1)
    cuts = np.flatnonzero(np.any(rank_key[1:] != rank_key[:-1], axis=1)) + 1
    spans = [
        rank_step_spans(
            (steps.time_ns[rows] - origin).astype(np.float64),
            steps.images[rows].astype(np.float64),
            steps.seconds[rows].astype(np.float64),
            steps.epoch[rows].astype(np.float64),
            steps.step[rows].astype(np.float64),
        )
        for rows in np.split(order, cuts)
    ]
    if not spans:
        empty = np.zeros(0)
        return empty, empty, empty
    return tuple(np.concatenate(parts) for parts in zip(*spans, strict=True))  # type: ignore[return-value]


def rank_step_spans(
    time_ns: np.ndarray,
    images: np.ndarray,
    seconds: np.ndarray,
    epoch: np.ndarray,
    step: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``contract.throughput.sampled_step_spans`` over one rank's step events (in time
    order) as arrays: (begin_ns, end_ns, images) per event, the same floats, computed by
    the same operations in the same order (tests/unit/test_sampled_step_throughput.py holds
    the two equal). The rule stays in ``contract`` (the standard library only); this twin
    spares the run page a Python loop over every step event of a cold run (~0.1 s of CPU
    for the benchmark's 34,560)."""
    count = time_ns.size
    if count == 0:
        empty = np.zeros(0)
        return empty, empty, empty
    with np.errstate(invalid="ignore"):
        later = (epoch[1:] == epoch[:-1]) & (step[1:] > step[:-1])
        gaps = (step[1:] - step[:-1])[later]
        usual_gap = float(np.median(gaps)) if gaps.size else 1.0
        images = np.where(np.isfinite(images), images, 0.0)
        own = np.where(seconds > 0, seconds * 1e9, 0.0)  # NaN > 0 is False
        finite_step = np.isfinite(step)
        previous_finite = np.concatenate(([True], finite_step[:-1]))
        numbered = finite_step & previous_finite
        previous_time = np.concatenate(([np.nan], time_ns[:-1]))
        previous_step = np.concatenate(([np.nan], step[:-1]))
        has_previous = np.arange(count) > 0
        # after an event of the same epoch: the steps since it, over [its time, time]
        continues = numbered & np.concatenate(([False], later))
        # the first of an epoch (or of the rank): the usual gap, at most the steps since
        since_previous = np.where(has_previous, step - previous_step, step)
        first_stands = np.maximum(1.0, np.minimum(usual_gap, since_previous))
        first_begin = time_ns - own * first_stands
        first_begin = np.where(has_previous, np.maximum(first_begin, previous_time), first_begin)
        begin = np.where(
            ~numbered,
            time_ns - own,
            np.where(continues, np.where(own > 0, previous_time, time_ns), first_begin),
        )
        stands_for = np.where(
            ~numbered, 1.0, np.where(continues, step - previous_step, first_stands)
        )
        done = np.where(~numbered, images, images * stands_for)
    return begin, time_ns.copy(), done


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
