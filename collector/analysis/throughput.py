"""A stored run's throughput, per rank, epoch, host and run, by the one definition in
``contract.throughput`` (timed steps' images over their seconds, summed over ranks).

What each rank's timed work in an epoch is read from (its record in the run model,
``collector.analysis.run``), in this order:

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
from dataclasses import dataclass

from collector.analysis.run import RankEpochRecord, RunModel
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


def _from_epoch_end(record: RankEpochRecord) -> TimedWork | None:
    """The rank's timed work as its ``epoch_end`` states it (see the module docstring);
    None when it has no ``epoch_end``, or one without the figures."""
    if record.timed_images is not None and record.timed_seconds is not None:
        return TimedWork(record.timed_images, record.timed_seconds)
    if record.images is not None and record.seconds is not None:
        return TimedWork(record.images, record.seconds)
    return None


def rank_epoch_work(model: RunModel) -> list[RankEpochWork]:
    """Every rank's timed work per epoch (see the module docstring), by epoch, host, rank,
    from the run's records (``collector.analysis.run``)."""
    out = []
    for record in model.records:
        key = (record.host, record.rank, record.epoch)
        work = _from_epoch_end(record)
        if work is not None:
            out.append(RankEpochWork(*key, work, record.seconds, EPOCH_END_SOURCE))
        elif record.timed_step_work is not None:
            out.append(RankEpochWork(*key, record.timed_step_work, None, STEPS_SOURCE))
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
