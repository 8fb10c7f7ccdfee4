"""``workloads.infer.measure``: pure functions over a ``predict``, timed here with a fake
clock that a fake ``predict`` moves on, so every count is exact.

A measurement times at least ``min_batches`` batches and at least ``min_seconds`` of them,
whichever takes longer, going round the pictures; the spread is p90 / p10 of the batches.
"""

from __future__ import annotations

import numpy as np
import pytest

from workloads.infer import measure


class FakeClock:
    """Seconds that move only when the fake model runs: ``seconds[i]`` for call ``i``."""

    def __init__(self, seconds):
        self.now = 0.0
        self.seconds = list(seconds)
        self.seen: list[np.ndarray] = []

    def __call__(self) -> float:
        return self.now

    def predict(self, batch: np.ndarray) -> np.ndarray:
        self.seen.append(batch)
        self.now += self.seconds[(len(self.seen) - 1) % len(self.seconds)]
        return np.zeros((len(batch), 2))


PIXELS = np.arange(5, dtype=np.float32).reshape(5, 1)  # five one-number pictures


def timing(clock, **kwargs):
    return measure.time_batches(clock.predict, PIXELS, 2, warmup=kwargs.pop("warmup", 0),
                                clock=clock, **kwargs)  # fmt: skip


def test_the_least_batches_when_they_take_longer_than_the_least_time():
    clock = FakeClock([0.25])
    result = timing(clock, min_batches=50, min_seconds=3.0)  # 50 batches: 12.5 s
    assert result.timed_batches == 50 and result.latencies == (0.25,) * 50
    assert (result.timed.images, result.timed.seconds) == (100.0, 12.5)
    assert result.images_per_second == 8.0


def test_the_least_time_when_it_takes_more_batches():
    clock = FakeClock([0.25])
    result = timing(clock, warmup=3, min_batches=5, min_seconds=3.0)
    assert result.timed_batches == 12  # 12 x 0.25 s = 3 s, not 5 batches
    assert len(clock.seen) == 3 + 12  # the warm-up is run, not timed
    assert result.timed.seconds == 3.0 and result.warmup_batches == 3


def test_timing_goes_round_the_pictures():
    clock = FakeClock([0.5])
    timing(clock, min_batches=7, min_seconds=0.0)
    # batches of 2 over 5 pictures: [0 1] [2 3] [4 0], then round again
    assert [batch.ravel().tolist() for batch in clock.seen] == [
        [0, 1], [2, 3], [4, 0], [0, 1], [2, 3], [4, 0], [0, 1]
    ]  # fmt: skip
    assert all(batch.flags["C_CONTIGUOUS"] for batch in clock.seen)
    assert measure.cycle_length(5, 2) == 3 and measure.cycle_length(1, 32) == 1


def test_percentiles_and_spread():
    # ten batches: 1, 2, ..., 10 s; numpy's linear interpolation
    clock = FakeClock([float(s) for s in range(1, 11)])
    result = timing(clock, min_batches=10, min_seconds=0.0)
    assert result.latency_percentile(10) == pytest.approx(1.9)
    assert result.latency_percentile(90) == pytest.approx(9.1)
    assert result.spread == pytest.approx(9.1 / 1.9)
    steady = timing(FakeClock([0.5]), min_batches=4, min_seconds=0.0)
    assert steady.spread == 1.0


def test_no_pictures_or_no_batches_are_refused():
    with pytest.raises(ValueError, match="no pictures"):
        measure.time_batches(FakeClock([1.0]).predict, PIXELS[:0], 2, 0, 1, 0.0)
    with pytest.raises(ValueError, match="min_batches"):
        timing(FakeClock([1.0]), min_batches=0, min_seconds=1.0)
