"""A stored run's throughput, per rank, epoch, host and run, by the one definition in
``contract.throughput`` (timed steps' images over their seconds, summed over ranks).

What each rank's timed work in an epoch is read from, in this order:

1. its ``epoch_end``: ``timed_images`` / ``timed_seconds`` (the steps after the run's warm-up);
   an ``epoch_end`` written without them (older events) counts its ``images`` / ``seconds``;
2. while the epoch is still open (no ``epoch_end`` yet, a live run): its ``step`` events in
   that epoch. Ranks send a step event for timed steps only (one every ``step_every``),
   each with that step's ``images`` and ``seconds``, so they are a sample of the same steps.
   A step without ``seconds`` is not timed and counts nothing.

The run's start-up (``startup_seconds``) is the wall time of the slowest rank's warm-up
steps: graph building, compilation and the first reads, shown beside the rate instead of
being averaged into it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from collector.store.api import WorkloadEvent, event_number
from contract.schema import Event, Workload
from contract.throughput import TimedWork, images_per_second, startup_seconds

EPOCH_END_SOURCE = "epoch_end"
STEPS_SOURCE = "steps"


@dataclass(frozen=True)
class RankEpochWork:
    """One rank's timed work in one epoch, and where it was read from."""

    host: str
    rank: int
    epoch: int
    work: TimedWork
    step_seconds: float | None  # every step's wall time (warm-up included), from epoch_end
    source: str  # EPOCH_END_SOURCE | STEPS_SOURCE


def _from_epoch_end(event: WorkloadEvent) -> tuple[TimedWork, float | None] | None:
    seconds = event_number(event, Workload.SECONDS)
    timed_images = event_number(event, Workload.TIMED_IMAGES)
    timed_seconds = event_number(event, Workload.TIMED_SECONDS)
    if timed_images is not None and timed_seconds is not None:
        return TimedWork(timed_images, timed_seconds), seconds
    images = event_number(event, Workload.IMAGES)
    if images is not None and seconds is not None:
        return TimedWork(images, seconds), seconds
    return None


def rank_epoch_work(assigned: Iterable[tuple[WorkloadEvent, int]]) -> list[RankEpochWork]:
    """Every rank's timed work per epoch (see the module docstring), by epoch, host, rank,
    from events paired with their epoch (``collector.analysis.epochs.assign_epochs``)."""
    ended: dict[tuple[str, int, int], RankEpochWork] = {}
    from_steps: dict[tuple[str, int, int], TimedWork] = defaultdict(lambda: TimedWork(0.0, 0.0))
    for event, epoch in assigned:
        key = (event.host, event.rank, epoch)
        if event.event == Event.EPOCH_END:
            found = _from_epoch_end(event)
            if found is not None:
                work, step_seconds = found
                ended[key] = RankEpochWork(*key, work, step_seconds, EPOCH_END_SOURCE)
        elif event.event == Event.STEP:
            images = event_number(event, Workload.IMAGES)
            seconds = event_number(event, Workload.SECONDS)
            if images is not None and seconds is not None:
                from_steps[key] = from_steps[key] + TimedWork(images, seconds)
    out = list(ended.values())
    out += [
        RankEpochWork(*key, work, None, STEPS_SOURCE)
        for key, work in from_steps.items()
        if key not in ended
    ]
    out.sort(key=lambda w: (w.epoch, w.host, w.rank))
    return out


@dataclass(frozen=True)
class RunThroughput:
    images_per_second: float | None  # full precision; views round
    source: str  # EPOCH_END_SOURCE, STEPS_SOURCE (some epoch still open) or "" (no data)
    startup_seconds: float | None


def run_throughput(works: list[RankEpochWork]) -> RunThroughput:
    """The run's images/s over every epoch so far, and its start-up."""
    rate = images_per_second(((w.host, w.rank), w.work) for w in works)
    if rate is None:
        return RunThroughput(None, "", None)
    source = STEPS_SOURCE if any(w.source == STEPS_SOURCE for w in works) else EPOCH_END_SOURCE
    startup = startup_seconds(
        ((w.host, w.rank), w.step_seconds, w.work.seconds)
        for w in works
        if w.step_seconds is not None
    )
    return RunThroughput(rate, source, startup)


def epoch_rates(
    works: list[RankEpochWork],
) -> tuple[dict[tuple[str, int], float], dict[int, float]]:
    """images/s per (host, epoch) and per epoch (all hosts): the host's or all ranks' rates
    in that epoch, summed. Epochs in which no rank timed a step are left out."""
    by_host: dict[tuple[str, int], list[RankEpochWork]] = defaultdict(list)
    by_epoch: dict[int, list[RankEpochWork]] = defaultdict(list)
    for work in works:
        by_host[(work.host, work.epoch)].append(work)
        by_epoch[work.epoch].append(work)
    return _rates(by_host), _rates(by_epoch)


def _rates(groups: dict) -> dict:
    out = {}
    for key, works in groups.items():
        rate = images_per_second(((w.host, w.rank), w.work) for w in works)
        if rate is not None:
            out[key] = rate
    return out
