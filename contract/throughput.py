"""Training throughput: the one definition every view of epochscope shows.

tf_cnn_benchmarks' rule, as the published studies report it:

- a rank's images/s is the images of its *timed* steps (every step after the run's first
  ``warmup_steps``) over the wall time of those steps. Graph building, compilation and the
  first reads happen in the warm-up steps, so they are left out here and shown on their own
  as the run's start-up (``startup_seconds``);
- a host's, an epoch's and a run's images/s is the **sum over ranks** of the ranks' rates,
  never rank 0 times N.

Every rank's ``epoch_end`` carries ``timed_images`` and ``timed_seconds`` (its timed steps
in that epoch), so a run's figure is the sum over ranks of (their timed images over all
epochs / their timed seconds over all epochs), and an epoch's figure is the same over that
epoch only. The ranks' own printed summary, the collector's runs, scaling and per-epoch
tables (CLI and JSON) and the dashboard all call the functions below.

This module lives beside ``contract.schema`` because it is part of the contract between what
the ranks send and what the collector shows; it depends on nothing but the standard library.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class TimedWork:
    """One rank's timed steps (over one epoch, or summed over several)."""

    images: float
    seconds: float

    def __add__(self, other: TimedWork) -> TimedWork:
        return TimedWork(self.images + other.images, self.seconds + other.seconds)


def rank_images_per_second(work: TimedWork) -> float | None:
    """A rank's images/s: None when it timed no step (all its steps were warm-up)."""
    if work.seconds > 0 and math.isfinite(work.seconds) and math.isfinite(work.images):
        return work.images / work.seconds
    return None


def images_per_second(ranks: Iterable[tuple[Hashable, TimedWork]]) -> float | None:
    """The aggregate images/s of (rank key, timed work) pairs: each rank's timed images over
    its timed seconds (a rank listed several times, e.g. once per epoch, is added up
    first), summed over ranks. None when no rank timed a step."""
    per_rank: dict[Hashable, TimedWork] = defaultdict(lambda: TimedWork(0.0, 0.0))
    for rank, work in ranks:
        per_rank[rank] = per_rank[rank] + work
    rates = [r for work in per_rank.values() if (r := rank_images_per_second(work)) is not None]
    return math.fsum(rates) if rates else None


def startup_seconds(ranks: Iterable[tuple[Hashable, float, float]]) -> float | None:
    """The run's start-up: the wall time of the warm-up steps (graph build, compilation,
    first reads), from (rank key, step seconds, timed seconds) per rank and epoch; the
    slowest rank's, since every rank waits for it. None when no rank reported its steps."""
    per_rank: dict[Hashable, float] = defaultdict(float)
    for rank, step_seconds, timed_seconds in ranks:
        per_rank[rank] += max(step_seconds - timed_seconds, 0.0)
    return max(per_rank.values()) if per_rank else None
