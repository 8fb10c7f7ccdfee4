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

import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
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


@dataclass(frozen=True)
class SampledStep:
    """One ``step`` event of a rank: the step ended at ``time_ns`` after ``seconds``, its
    global step number ``step`` (NaN when not sent) in ``epoch``."""

    time_ns: int
    images: float
    seconds: float
    epoch: float
    step: float


def sampled_step_spans(steps: Sequence[SampledStep]) -> list[tuple[float, float, float]]:
    """The images each of one rank's step events (in time order) stands for, and the
    wall-clock span they were processed in: ``(begin_ns, end_ns, images)`` per event.

    Ranks send one step event every ``step_every`` steps (``--step-every``; the profiler
    also each epoch's first), each with that one step's images and seconds; read alone, a
    rate drawn from them is ``step_every`` times too low. So a step event stands for the
    steps since the rank's previous event, numbered by ``step``:

    - after an event of the same epoch: ``step - previous step`` steps, processed between
      the two events (``[previous time, time]``, the steps not sent included);
    - the first event of an epoch (or of the rank): as many steps as the rank's events are
      usually apart (the median gap within its epochs), at most the steps since its previous
      event, each as long as the sent one and not before the previous event;
    - without a step number: the step itself, over ``[time - seconds, time]``.

    An event without a positive duration gets ``begin_ns == end_ns`` (counted at its time).
    """
    gaps = [
        later.step - earlier.step
        for earlier, later in itertools.pairwise(steps)
        if later.epoch == earlier.epoch and later.step > earlier.step
    ]
    usual_gap = statistics.median(gaps) if gaps else 1.0
    spans: list[tuple[float, float, float]] = []
    previous: SampledStep | None = None
    for sent in steps:
        images = sent.images if math.isfinite(sent.images) else 0.0
        own = sent.seconds * 1e9 if sent.seconds > 0 else 0.0  # NaN > 0 is False
        numbered = math.isfinite(sent.step) and (previous is None or math.isfinite(previous.step))
        if not numbered:
            spans.append((sent.time_ns - own, float(sent.time_ns), images))
        elif previous is not None and previous.epoch == sent.epoch and sent.step > previous.step:
            stands_for = sent.step - previous.step
            begin = float(previous.time_ns) if own > 0 else float(sent.time_ns)
            spans.append((begin, float(sent.time_ns), images * stands_for))
        else:
            since_previous = sent.step - previous.step if previous is not None else sent.step
            stands_for = max(1.0, min(usual_gap, since_previous))
            begin = sent.time_ns - own * stands_for
            if previous is not None:
                begin = max(begin, float(previous.time_ns))
            spans.append((begin, float(sent.time_ns), images * stands_for))
        previous = sent
    return spans
