"""Timing and accuracy of one model at one batch size: pure functions over a ``predict``.

A measurement is ``warmup`` untimed batches (first-run allocation, kernel selection, the
thread pool waking) then ``timed`` batches, each timed on its own with
``time.perf_counter``. Images/s follows the training rule (``contract.throughput``): the
timed images over the timed seconds (the sum of the timed batches' latencies), warm-up out.
Latency percentiles are over the timed batches (numpy's linear interpolation).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from contract.throughput import TimedWork, rank_images_per_second

Predict = Callable[[np.ndarray], np.ndarray]
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Timing:
    batch_size: int
    warmup_batches: int
    timed: TimedWork  # images and seconds of the timed batches
    latencies: tuple[float, ...]  # seconds, one per timed batch

    @property
    def images_per_second(self) -> float | None:
        return rank_images_per_second(self.timed)

    def latency_percentile(self, percentile: float) -> float:
        return float(np.percentile(np.asarray(self.latencies), percentile))


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


def time_batches(
    predict: Predict, pixels: np.ndarray, batch_size: int, warmup: int, timed: int
) -> Timing:
    batches = batches_of(pixels, batch_size, warmup + timed)
    for batch in batches[:warmup]:
        predict(batch)
    latencies = []
    for batch in batches[warmup:]:
        start = time.perf_counter()
        predict(batch)
        latencies.append(time.perf_counter() - start)
    work = TimedWork(float(batch_size * timed), math.fsum(latencies))
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
