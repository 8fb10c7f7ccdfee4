"""Counter and gauge arithmetic (collector.analysis.counters), values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.analysis.counters import (
    counter_increase,
    counter_increases,
    gauge_deltas,
    gauge_means,
    nanmean_or_nan,
    nansum_or_nan,
    reset_corrected,
)

S = 1_000_000_000
T0 = 1_700_000_000 * S  # realistic epoch nanoseconds: beyond float64's exact integers


def secs(*values: float) -> np.ndarray:
    return np.array([T0 + round(v * S) for v in values], dtype=np.int64)


def test_increase_interpolates_inside_sampling_intervals():
    times = secs(0, 10, 20)
    values = np.array([0.0, 100.0, 300.0])
    # C(5) = 50 (half of 0..100), C(15) = 200 (half of 100..300): 200 - 50
    assert counter_increase(times, values, T0 + 5 * S, T0 + 15 * S) == 150.0
    # a window shorter than one interval still gets its bytes: 20/s x 2 s
    assert counter_increase(times, values, T0 + 12 * S, T0 + 14 * S) == 40.0
    # whole span
    assert counter_increase(times, values, T0, T0 + 20 * S) == 300.0


def test_increase_keeps_nanosecond_precision_at_epoch_scale():
    times = secs(0, 1)
    values = np.array([0.0, 1e9])  # 1 byte per ns
    assert counter_increase(times, values, T0 + 123, T0 + 456) == 333.0


def test_many_windows_in_one_call():
    times = secs(0, 10, 20)
    values = np.array([0.0, 100.0, 300.0])
    starts = [T0, T0 + 10 * S, T0 + 5 * S]
    ends = [T0 + 10 * S, T0 + 20 * S, T0 + 5 * S]
    assert counter_increases(times, values, starts, ends).tolist() == [100.0, 200.0, 0.0]


def test_reset_counts_the_new_value_as_growth_from_zero():
    assert reset_corrected(np.array([10.0, 20.0, 5.0, 8.0])).tolist() == [10, 20, 25, 28]
    times = secs(0, 10, 20, 30)
    values = np.array([100.0, 200.0, 50.0, 80.0])  # reset between t=10 and t=20
    # corrected: 100, 200, 250, 280
    assert counter_increase(times, values, T0, T0 + 30 * S) == 180.0
    assert counter_increase(times, values, T0 + 10 * S, T0 + 20 * S) == 50.0
    # C(15) = 225, C(25) = 265
    assert counter_increase(times, values, T0 + 15 * S, T0 + 25 * S) == 40.0


def test_missing_samples_are_a_gap_not_a_zero():
    # A saturated InfiniBand counter gives no field: NaN here, or no row at all.
    times = secs(0, 10, 20)
    with_nan = np.array([0.0, math.nan, 200.0])
    # interpolated across the gap between the real samples: 10/s over 10 s
    assert counter_increase(times, with_nan, T0, T0 + 10 * S) == 100.0
    assert counter_increase(secs(0, 20), np.array([0.0, 200.0]), T0, T0 + 10 * S) == 100.0
    # a zero in place of the gap would have looked like a reset: 200 counted as new growth
    assert counter_increase(times, np.array([0.0, 0.0, 200.0]), T0, T0 + 20 * S) == 200.0


def test_windows_are_clipped_to_the_samples_and_nan_without_data():
    times = secs(10, 20)
    values = np.array([0.0, 100.0])
    # only [10, 20] is observed of [0, 30]
    assert counter_increase(times, values, T0, T0 + 30 * S) == 100.0
    assert math.isnan(counter_increase(times, values, T0 + 21 * S, T0 + 30 * S))
    assert math.isnan(counter_increase(times, values, T0, T0 + 9 * S))
    assert math.isnan(counter_increase(secs(10), np.array([5.0]), T0, T0 + 30 * S))
    assert math.isnan(counter_increase(secs(), np.array([]), T0, T0 + 30 * S))
    all_nan = np.array([math.nan, math.nan])
    assert math.isnan(counter_increase(times, all_nan, T0 + 10 * S, T0 + 20 * S))


def test_gauge_mean_is_time_weighted_over_the_interpolated_signal():
    times = secs(0, 10, 30)
    values = np.array([0.0, 10.0, 10.0])
    # 0..10: ramp 0->10, mean 5; 10..30: flat 10. Over 0..30: (5*10 + 10*20) / 30
    assert gauge_means(times, values, [T0], [T0 + 30 * S])[0] == pytest.approx(250 / 30)
    # 2..4 on the ramp: mean of 2 and 4
    assert gauge_means(times, values, [T0 + 2 * S], [T0 + 4 * S])[0] == pytest.approx(3.0)
    # zero-length window: the interpolated value
    assert gauge_means(times, values, [T0 + 5 * S], [T0 + 5 * S])[0] == 5.0
    # unevenly spaced samples are weighted by time, not by count
    times = secs(0, 1, 2, 10)
    values = np.array([100.0, 100.0, 0.0, 0.0])
    # area: 100 (0..1) + 50 (1..2 ramp) + 0 = 150 over 10 s
    assert gauge_means(times, values, [T0], [T0 + 10 * S])[0] == pytest.approx(15.0)


def test_gauge_mean_nan_outside_the_samples():
    times = secs(0, 10)
    values = np.array([4.0, 4.0])
    result = gauge_means(times, values, [T0 + 20 * S, T0 + 5 * S], [T0 + 30 * S, T0 + 40 * S])
    assert math.isnan(result[0])
    assert result[1] == 4.0  # clipped to 5..10


def test_gauge_delta_for_page_cache_growth():
    times = secs(0, 10, 20)
    cached = np.array([1e9, 2e9, 2e9])
    # C(5) = 1.5e9, C(15) = 2e9
    deltas = gauge_deltas(times, cached, [T0 + 5 * S, T0], [T0 + 15 * S, T0 + 20 * S])
    assert deltas.tolist() == [0.5e9, 1e9]


def test_sums_and_means_across_series_ignore_gaps_but_not_all_gaps():
    a = np.array([1.0, math.nan, math.nan])
    b = np.array([2.0, 5.0, math.nan])
    total = nansum_or_nan([a, b], 3)
    assert total[:2].tolist() == [3.0, 5.0] and math.isnan(total[2])
    mean = nanmean_or_nan([a, b], 3)
    assert mean[:2].tolist() == [1.5, 5.0] and math.isnan(mean[2])
    assert math.isnan(nansum_or_nan([], 2)[1])


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.integers(min_value=-1000, max_value=1000), min_size=2, max_size=30),
    cuts=st.lists(st.floats(min_value=0, max_value=1), min_size=3, max_size=3),
)
def test_increase_is_additive_and_never_negative(steps, cuts):
    values = np.cumsum(np.abs(steps)).astype(float)
    values[len(values) // 2 :] -= values[len(values) // 2]  # one reset in the middle
    values = np.maximum(values, 0)
    times = secs(*range(len(values)))
    span = (len(values) - 1) * S
    a, b, c = sorted(T0 + int(x * span) for x in cuts)
    whole = counter_increase(times, values, a, c)
    parts = counter_increase(times, values, a, b) + counter_increase(times, values, b, c)
    assert whole >= 0
    assert whole == pytest.approx(parts, abs=1e-6)
