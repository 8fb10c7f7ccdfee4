"""Timing and accuracy of one model at one batch size: pure functions over a ``predict``.

A measurement is ``warmup`` untimed batches (first-run allocation, kernel selection, the
thread pool waking) then timed batches, each timed on its own with a clock
(``time.perf_counter``), until at least ``min_batches`` were timed AND their latencies add
up to at least ``min_seconds``, whichever takes longer, going round the pictures as often
as needed. Twenty batches of one picture are 0.07 s on a CPU: a speed-up over so little
time moves by 15 % between two runs; a few seconds and some fifty batches hold it still.

Images/s follows the training rule (``contract.throughput``): the timed images over the
timed seconds (the sum of the timed batches' latencies), warm-up out. Latency percentiles
are over the timed batches (numpy's linear interpolation); the spread is p90 / p10 of them
(1.0: every batch took as long).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from contract.throughput import TimedWork, rank_images_per_second

Predict = Callable[[np.ndarray], np.ndarray]
PERCENTILES = (10, 50, 90, 99)
DEFAULT_MIN_BATCHES = 50
DEFAULT_MIN_SECONDS = 3.0


@dataclass(frozen=True)
class Timing:
    batch_size: int
    warmup_batches: int
    timed: TimedWork  # images and seconds of the timed batches
    latencies: tuple[float, ...]  # seconds, one per timed batch

    @property
    def images_per_second(self) -> float | None:
        return rank_images_per_second(self.timed)

    @property
    def timed_batches(self) -> int:
        return len(self.latencies)

    def latency_percentile(self, percentile: float) -> float:
        return float(np.percentile(np.asarray(self.latencies), percentile))

    @property
    def spread(self) -> float | None:
        """p90 / p10 of the batches' latencies; None when p10 is not above zero."""
        p10 = self.latency_percentile(10)
        return self.latency_percentile(90) / p10 if p10 > 0 else None


def batches_of(pixels: np.ndarray, batch_size: int, count: int) -> list[np.ndarray]:
    """``count`` batches of ``batch_size`` pictures, going round ``pixels`` as needed, each
    contiguous (made before timing starts, so no copy is timed)."""
    if len(pixels) == 0:
        raise ValueError("no pictures to time")
    batches = []
    for index in range(count):
        rows = np.arange(index * batch_size, (index + 1) * batch_size) % len(pixels)
        batches.append(np.ascontiguousarray(pixels[rows]))
    return batches


def cycle_length(pictures: int, batch_size: int) -> int:
    """The distinct batches made before timing: enough to use every picture once (so the
    batches hold about as much memory as the pictures do); timing goes round them."""
    return max(1, -(-pictures // batch_size))


def time_batches(
    predict: Predict,
    pixels: np.ndarray,
    batch_size: int,
    warmup: int,
    min_batches: int = DEFAULT_MIN_BATCHES,
    min_seconds: float = DEFAULT_MIN_SECONDS,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Warm up, then time batches until ``min_batches`` are timed and their latencies add
    up to ``min_seconds`` (both: whichever takes longer)."""
    if min_batches < 1:
        raise ValueError("min_batches must be >= 1")
    batches = batches_of(pixels, batch_size, cycle_length(len(pixels), batch_size))
    for index in range(warmup):
        predict(batches[index % len(batches)])
    latencies: list[float] = []
    timed_seconds = 0.0
    while len(latencies) < min_batches or timed_seconds < min_seconds:
        batch = batches[(warmup + len(latencies)) % len(batches)]
        start = clock()
        predict(batch)
        latencies.append(clock() - start)
        timed_seconds += latencies[-1]
    work = TimedWork(float(batch_size * len(latencies)), math.fsum(latencies))
    return Timing(batch_size, warmup, work, tuple(latencies))


def top1(predict: Predict, pixels: np.ndarray, labels: np.ndarray, batch_size: int) -> float:
    """The fraction of pictures whose highest logit is their label (untimed)."""
    if len(labels) == 0:
        return math.nan
    correct = 0
    for start in range(0, len(labels), batch_size):
        logits = predict(np.ascontiguousarray(pixels[start : start + batch_size]))
        correct += int((logits.argmax(axis=1) == labels[start : start + batch_size]).sum())
    return correct / len(labels)
