"""Counter and gauge arithmetic over sampled series: pure numpy, no store, no I/O.

Every function takes one series as two arrays, ``times_ns`` (int64, ascending) and
``values`` (float64), and a batch of windows ``[starts_ns[i], ends_ns[i]]``, so one call
answers every epoch (or every dashboard bucket) of a series at once.

Edges
    A window's edge that has a real sample at it (the agent's edge sample taken at a run or
    epoch event and stamped with the same time) is read from that sample, since
    interpolation at a sample's own time is its value: the amount is the difference of two
    real readings. ``sampled_edges`` says which edges had
    one; the others are interpolated (next paragraph), which the report flags.

Cumulative counters (``Kind.COUNTER``)
    The amount in a window is ``C(end) - C(start)`` where ``C`` is the counter linearly
    interpolated between the samples around each boundary (exact at a sampled edge).
    Interpolation spreads a tick's activity evenly over the tick: right for steady I/O,
    wrong for a burst at an unsampled edge (a read starting at ``epoch_start``).

    A decrease between consecutive samples is a counter reset (reboot, driver reload,
    32-bit wrap): the new value counts as growth from zero, as Prometheus ``increase()``
    does. A missing sample (a saturated InfiniBand counter, an ``N/A`` file, an agent
    outage) is a gap, never a zero: NaN values are dropped and the counter is interpolated
    across the gap between the real samples on either side.

Gauges (``Kind.GAUGE``)
    ``gauge_means``: the time-weighted mean of the piecewise-linear signal over the window.
    ``gauge_deltas``: value at end minus value at start, both interpolated (page cache
    growth).

Coverage
    Windows are clipped to the span of the samples: a window reaching past the last sample
    of a live series counts what has been observed so far. A window with no sample span in
    common with the series (or a series with fewer than two samples) gives NaN, which the
    callers show as "no data", never as zero.
"""

from __future__ import annotations

import math

import numpy as np

NS_PER_SECOND = 1_000_000_000
# A sample this close to an edge counts as the reading at the edge. An agent's edge sample
# and the event it stamps share one timestamp (0 ns apart); a tick that happens to fall
# within a millisecond of an event is as good (the interpolation error is a thousandth of
# a tick's activity).
EDGE_TOLERANCE_NS = 1_000_000


def sampled_edges(
    times_ns: np.ndarray, edges_ns: np.ndarray | list[int], tolerance_ns: int = EDGE_TOLERANCE_NS
) -> np.ndarray:
    """True for each edge with a real sample within ``tolerance_ns`` of it; False where
    the value at the edge is interpolated between the samples around it."""
    times = np.asarray(times_ns, dtype=np.int64)
    edges = np.atleast_1d(np.asarray(edges_ns, dtype=np.int64))
    if times.size == 0:
        return np.zeros(edges.shape, dtype=bool)
    right = np.clip(np.searchsorted(times, edges), 0, times.size - 1)
    left = np.clip(right - 1, 0, times.size - 1)
    distance = np.minimum(np.abs(times[right] - edges), np.abs(times[left] - edges))
    return distance <= tolerance_ns


def _prepare(
    times_ns: np.ndarray,
    values: np.ndarray,
    starts_ns: np.ndarray | list[int],
    ends_ns: np.ndarray | list[int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Drop NaN samples (gaps); express times and windows in float64 nanoseconds from the
    first sample, so interpolation keeps nanosecond precision (epoch-based nanoseconds
    exceed float64's 53-bit mantissa)."""
    times = np.asarray(times_ns, dtype=np.int64)
    vals = np.asarray(values, dtype=np.float64)
    keep = ~np.isnan(vals)
    if not keep.all():
        times, vals = times[keep], vals[keep]
    starts = np.atleast_1d(np.asarray(starts_ns, dtype=np.int64))
    ends = np.atleast_1d(np.asarray(ends_ns, dtype=np.int64))
    if starts.shape != ends.shape:
        raise ValueError("starts and ends must have the same length")
    origin = times[0] if times.size else 0
    return (
        (times - origin).astype(np.float64),
        vals,
        (starts - origin).astype(np.float64),
        (ends - origin).astype(np.float64),
    )


def reset_corrected(values: np.ndarray) -> np.ndarray:
    """The counter as if it had never reset: after a drop the new value is new growth.

    ``[10, 20, 5, 8]`` (reset between 20 and 5) becomes ``[10, 20, 25, 28]``.
    """
    vals = np.asarray(values, dtype=np.float64)
    if vals.size < 2:
        return vals.copy()
    steps = np.diff(vals)
    resets = steps < 0
    if resets.any():
        steps = np.where(resets, vals[1:], steps)
    out = np.empty_like(vals)
    out[0] = vals[0]
    np.cumsum(steps, out=out[1:])
    out[1:] += vals[0]
    return out


def counter_total(values: np.ndarray) -> float:
    """A counter that started from zero (a job cgroup's CPU time, a job's I/O bytes): its
    last reading once resets are corrected, NaN readings dropped; NaN with none."""
    vals = np.asarray(values, dtype=np.float64)
    vals = vals[~np.isnan(vals)]
    return float(reset_corrected(vals)[-1]) if vals.size else math.nan


def _clip(
    times: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clip windows to the sampled span; ``covered`` is False where nothing is left."""
    if times.size < 2:
        covered = np.zeros(starts.shape, dtype=bool)
        return starts, ends, covered
    lo = np.clip(starts, times[0], times[-1])
    hi = np.clip(ends, times[0], times[-1])
    covered = (ends >= starts) & (starts <= times[-1]) & (ends >= times[0])
    return lo, hi, covered


def counter_increases(
    times_ns: np.ndarray,
    values: np.ndarray,
    starts_ns: np.ndarray | list[int],
    ends_ns: np.ndarray | list[int],
) -> np.ndarray:
    """Growth of a cumulative counter in each window (NaN where the series has no data)."""
    return _interpolated_deltas(times_ns, values, starts_ns, ends_ns, correct_resets=True)


def counter_increase(times_ns: np.ndarray, values: np.ndarray, start_ns: int, end_ns: int) -> float:
    """Growth of a cumulative counter in one window (NaN when there is no data)."""
    return float(counter_increases(times_ns, values, [start_ns], [end_ns])[0])


def _integral_at(
    times: np.ndarray, vals: np.ndarray, cumulative_area: np.ndarray, at: np.ndarray
) -> np.ndarray:
    """Integral of the piecewise-linear signal from ``times[0]`` to each ``at`` (clipped)."""
    index = np.clip(np.searchsorted(times, at, side="right") - 1, 0, times.size - 2)
    t0 = times[index]
    v0 = vals[index]
    v_at = np.interp(at, times, vals)
    return cumulative_area[index] + (at - t0) * (v0 + v_at) / 2.0


def gauge_means(
    times_ns: np.ndarray,
    values: np.ndarray,
    starts_ns: np.ndarray | list[int],
    ends_ns: np.ndarray | list[int],
) -> np.ndarray:
    """Time-weighted mean of a gauge over each window (NaN where there is no data).

    The gauge is linearly interpolated between samples; a zero-length window gets the
    interpolated value at that instant.
    """
    times, vals, starts, ends = _prepare(times_ns, values, starts_ns, ends_ns)
    lo, hi, covered = _clip(times, starts, ends)
    if not covered.any():
        return np.full(starts.shape, np.nan)
    segment_area = np.diff(times) * (vals[:-1] + vals[1:]) / 2.0
    cumulative_area = np.concatenate(([0.0], np.cumsum(segment_area)))
    area = _integral_at(times, vals, cumulative_area, hi) - _integral_at(
        times, vals, cumulative_area, lo
    )
    length = hi - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(length > 0, area / np.where(length > 0, length, 1.0), 0.0)
    instant = np.interp(lo, times, vals)
    mean = np.where(length > 0, mean, instant)
    return np.where(covered, mean, np.nan)


def gauge_deltas(
    times_ns: np.ndarray,
    values: np.ndarray,
    starts_ns: np.ndarray | list[int],
    ends_ns: np.ndarray | list[int],
) -> np.ndarray:
    """Interpolated value at each window's end minus at its start (NaN without data)."""
    return _interpolated_deltas(times_ns, values, starts_ns, ends_ns, correct_resets=False)


def _interpolated_deltas(
    times_ns: np.ndarray,
    values: np.ndarray,
    starts_ns: np.ndarray | list[int],
    ends_ns: np.ndarray | list[int],
    *,
    correct_resets: bool,
) -> np.ndarray:
    """``V(end) - V(start)`` per window, V interpolated (after reset correction for a
    counter); NaN where the window has no sample span in common with the series."""
    times, vals, starts, ends = _prepare(times_ns, values, starts_ns, ends_ns)
    lo, hi, covered = _clip(times, starts, ends)
    if not covered.any():
        return np.full(starts.shape, np.nan)
    if correct_resets:
        vals = reset_corrected(vals)
    delta = np.interp(hi, times, vals) - np.interp(lo, times, vals)
    return np.where(covered, delta, np.nan)


def nansum_or_nan(arrays: list[np.ndarray], length: int) -> np.ndarray:
    """Element-wise sum of several series' results, ignoring NaN; NaN where all are NaN.

    A host with two disks where one has no data still reports the other; a host with no
    disk at all reports NaN ("no data"), not zero.
    """
    if not arrays:
        return np.full(length, np.nan)
    stacked = np.vstack(arrays)
    total = np.nansum(stacked, axis=0)
    return np.where(np.isnan(stacked).all(axis=0), np.nan, total)


def nanmean_or_nan(arrays: list[np.ndarray], length: int) -> np.ndarray:
    """Element-wise mean ignoring NaN; NaN where every input is NaN."""
    if not arrays:
        return np.full(length, np.nan)
    stacked = np.vstack(arrays)
    valid = ~np.isnan(stacked)
    count = valid.sum(axis=0)
    total = np.where(valid, stacked, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)
