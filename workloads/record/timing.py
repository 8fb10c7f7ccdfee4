"""Throughput the tf_cnn_benchmarks way, and the events that carry it.

A training loop calls ``epoch_start``, then ``step_done`` after every step (the step's
wall time is the time since the previous mark, so waiting for input counts), then
``epoch_end`` (after validation, whose time is in no figure). ``epoch_end`` carries:

- ``images``/``seconds``: every image this rank trained on in the epoch and the wall time
  of those steps;
- ``timed_images``/``timed_seconds``: the same for the steps after the run's first
  ``warmup_steps`` steps. timed_images / timed_seconds is the epoch's images/s on this
  rank as tf_cnn_benchmarks reports it; the sum over ranks is the run's aggregate.

A ``step`` event goes out every ``step_every`` timed steps with that one step's images,
seconds (so images/seconds is the per-step images/s) and loss.

The anatomy (``workloads.record.anatomy``): a trainer marks ``input_ready``, ``compute_done`` and
``communication_done`` during a step (and may add all-reduce intervals); ``step_done`` splits
the step's wall time into input wait, compute, communication and the rest, the ``step``
event carries that step's parts and ``epoch_end`` their sums over every step of the epoch,
with the rank's own reads (``/proc/<pid>/io`` of the rank and its data loaders) and CPU
seconds (``workloads.record.cputime``) over the epoch. A trainer that marks nothing
writes no anatomy fields.

Given ``dataset_residency`` (a host's local rank 0 with a data set), ``run_start`` and
every ``epoch_end`` also carry how much of the data set sat in the page cache then
(``residency_fields``), measured outside the timed steps.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from contract.schema import Event, RunState, Workload
from contract.throughput import TimedWork, rank_images_per_second
from workloads.record.anatomy import (
    ZERO,
    ProcessIo,
    ProcessTreeIo,
    StepAnatomy,
    StepMarks,
    add,
    split_step,
)
from workloads.record.cputime import (
    GroupThrottling,
    ProcessTreeCpu,
    TreeThrottling,
    throttling_fields,
)
from workloads.record.events import EventWriter


@dataclass
class EpochStats:
    epoch: int
    steps: int = 0
    images: int = 0
    seconds: float = 0.0  # wall time of the steps
    timed_steps: int = 0  # after warm-up
    timed_images: int = 0
    timed_seconds: float = 0.0
    loss: float | None = None
    top1: float | None = None
    top5: float | None = None
    anatomy: StepAnatomy | None = None  # sums over the epoch's steps that had one
    timed_anatomy: StepAnatomy | None = None  # the same over its timed steps only
    io: ProcessIo | None = None  # the rank's own reads over the epoch
    cpu_seconds: float | None = None  # CPU time of the rank and its loaders over the epoch

    @property
    def images_per_second(self) -> float | None:
        """Warm-up excluded (``contract.throughput``)."""
        return rank_images_per_second(TimedWork(self.timed_images, self.timed_seconds))


@dataclass
class Recorder:
    writer: EventWriter
    batch_size: int
    warmup_steps: int = 10
    step_every: int = 10
    verbose: bool = False  # print tf_cnn_benchmarks-like progress lines (rank 0)
    clock: Callable[[], float] = time.perf_counter
    global_step: int = 0
    epochs: list[EpochStats] = field(default_factory=list)
    step_rates: list[float] = field(default_factory=list)  # timed per-step images/s
    read_io: Callable[[], ProcessIo | None] = field(default_factory=ProcessTreeIo)
    # (cached bytes, data set bytes) now; None: this rank does not measure it
    dataset_residency: Callable[[], tuple[int, int]] | None = None
    _mark: float = 0.0
    _marks: StepMarks = field(default_factory=StepMarks)
    _io_at_start: ProcessIo | None = None
    read_cpu: Callable[[], float | None] = field(default_factory=ProcessTreeCpu)
    _cpu_at_start: float | None = None
    read_throttling: Callable[[], dict[Path, GroupThrottling]] = field(
        default_factory=TreeThrottling
    )
    _throttling_at_start: dict[Path, GroupThrottling] | None = None

    def run_start(self, config: dict[str, object]) -> None:
        self.writer.emit(Event.RUN_START, {**config, **self.residency_fields()})
        if self.verbose:
            print("Step\tImg/sec\ttotal_loss", flush=True)

    def epoch_start(self, epoch: int) -> None:
        self.epochs.append(EpochStats(epoch))
        self.writer.emit(Event.EPOCH_START, {Workload.EPOCH: epoch})
        self._io_at_start = self.read_io()
        self._cpu_at_start = self.read_cpu()
        self._throttling_at_start = self.read_throttling()
        self._mark = self.clock()
        self._marks = StepMarks()

    def restart_clock(self) -> None:
        """Start the next step's time now (after work that is not training, e.g. a hook)."""
        self._mark = self.clock()
        self._marks = StepMarks()

    def now(self) -> float:
        return self.clock()

    def input_requested(self, at: float | None = None) -> None:
        """The step began asking for its batch (default: the step's start)."""
        self._marks.input_requested = self.clock() if at is None else at

    def input_ready(self, at: float | None = None) -> None:
        """The step's batch arrived (now, or ``at`` on this recorder's clock)."""
        self._marks.input_ready = self.clock() if at is None else at

    def compute_done(self, at: float | None = None) -> None:
        """Forward and backward are over: every local gradient is ready."""
        self._marks.compute_done = self.clock() if at is None else at

    def communication_done(self, at: float | None = None) -> None:
        """The gradient all-reduce is over."""
        self._marks.communication_done = self.clock() if at is None else at

    def add_communication(self, start: float, end: float) -> None:
        """One all-reduce ran from ``start`` to ``end`` (for the overlap with backward)."""
        self._marks.communication.append((start, end))

    def step_done(self, loss: Callable[[], float] | float | None = None) -> None:
        """One training step ended now. ``loss`` may be a callable, read only when needed."""
        now = self.clock()
        anatomy = split_step(self._mark, now, self._marks)
        seconds, self._mark = now - self._mark, now
        self._marks = StepMarks()
        self.global_step += 1
        stats = self.epochs[-1]
        stats.steps += 1
        stats.images += self.batch_size
        stats.seconds += seconds
        if anatomy is not None:
            stats.anatomy = add(stats.anatomy or ZERO, anatomy)
        if self.global_step <= self.warmup_steps:
            return
        stats.timed_steps += 1
        stats.timed_images += self.batch_size
        stats.timed_seconds += seconds
        if anatomy is not None:
            stats.timed_anatomy = add(stats.timed_anatomy or ZERO, anatomy)
        if seconds > 0:
            self.step_rates.append(self.batch_size / seconds)
        if stats.timed_steps % self.step_every == 0:
            value = loss() if callable(loss) else loss
            self.writer.emit(
                Event.STEP,
                {
                    Workload.EPOCH: stats.epoch,
                    Workload.STEP: self.global_step,
                    Workload.IMAGES: self.batch_size,
                    Workload.SECONDS: seconds,
                    Workload.LOSS: value,
                    **anatomy_fields(anatomy),
                },
            )
            if self.verbose:
                rate = self.batch_size / seconds if seconds > 0 else float("nan")
                loss_text = f"{value:.3f}" if value is not None else "-"
                print(f"{self.global_step}\t{rate:.1f}\t{loss_text}", flush=True)

    def epoch_end(
        self, loss: float | None = None, top1: float | None = None, top5: float | None = None
    ) -> EpochStats:
        stats = self.epochs[-1]
        stats.loss, stats.top1, stats.top5 = loss, top1, top5
        io_now = self.read_io()
        if io_now is not None and self._io_at_start is not None:
            stats.io = io_now - self._io_at_start
        cpu_now = self.read_cpu()
        if cpu_now is not None and self._cpu_at_start is not None:
            stats.cpu_seconds = cpu_now - self._cpu_at_start
        throttling = throttling_fields(self._throttling_at_start, self.read_throttling())
        self.writer.emit(
            Event.EPOCH_END,
            {
                Workload.EPOCH: stats.epoch,
                Workload.STEP: self.global_step,
                Workload.IMAGES: stats.images,
                Workload.SECONDS: stats.seconds,
                Workload.TIMED_IMAGES: stats.timed_images,
                Workload.TIMED_SECONDS: stats.timed_seconds,
                **loss_fields(loss),
                Workload.TOP1: top1,
                Workload.TOP5: top5,
                **anatomy_fields(stats.anatomy),
                **timed_anatomy_fields(stats.timed_anatomy),
                **io_fields(stats.io),
                **self.residency_fields(),
                Workload.CPU_SECONDS: stats.cpu_seconds,
                **throttling,
            },
        )
        if self.verbose:
            rate = stats.images_per_second
            rate_text = f"{rate:.1f} images/s" if rate else "all warm-up"
            accuracy = f", top-1 {top1:.3f}" if top1 is not None else ""
            print(f"epoch {stats.epoch}: {rate_text} on this rank{accuracy}", flush=True)
        return stats

    def residency_fields(self) -> dict[str, object]:
        if self.dataset_residency is None:
            return {}
        cached, total = self.dataset_residency()
        return {Workload.DATASET_CACHED_BYTES: cached, Workload.DATASET_FILES_BYTES: total}

    def run_end(self, state: str = RunState.FINISHED) -> None:
        fields: dict[str, object] = {Workload.STATE: state, Workload.STEP: self.global_step}
        self.writer.emit(Event.RUN_END, fields)

    def summary(self) -> str:
        """tf_cnn_benchmarks' closing line for this rank: mean +/- std of step images/s."""
        if not self.step_rates:
            return "no timed steps (all warm-up)"
        mean = statistics.fmean(self.step_rates)
        spread = statistics.pstdev(self.step_rates)
        timed = TimedWork(
            sum(epoch.timed_images for epoch in self.epochs),
            sum(epoch.timed_seconds for epoch in self.epochs),
        )
        overall = rank_images_per_second(timed) or float("nan")
        return (
            f"images/sec: {overall:.1f} over {len(self.step_rates)} timed steps "
            f"(per step {mean:.1f} +/- {spread:.1f})"
        )


def timed_anatomy_fields(anatomy: StepAnatomy | None) -> dict[str, object]:
    """The input wait of the timed steps (none when no timed step had an anatomy)."""
    if anatomy is None:
        return {}
    return {Workload.TIMED_INPUT_WAIT_SECONDS: anatomy.input_wait}


def anatomy_fields(anatomy: StepAnatomy | None) -> dict[str, object]:
    if anatomy is None:
        return {}
    return {
        Workload.INPUT_WAIT_SECONDS: anatomy.input_wait,
        Workload.COMPUTE_SECONDS: anatomy.compute,
        Workload.COMMUNICATION_SECONDS: anatomy.communication,
        Workload.OTHER_STEP_SECONDS: anatomy.other,
        Workload.OVERLAP_SECONDS: anatomy.overlap,  # None (not written) when not timed
    }


def loss_fields(loss: float | None) -> dict[str, object]:
    """An epoch's mean training loss and whether it was NaN or Inf: line protocol drops
    both, so without ``loss_not_finite`` a diverged epoch would read as one without a loss."""
    if loss is None:
        return {}
    value = float(loss)
    return {Workload.LOSS: value, Workload.LOSS_NOT_FINITE: 0 if math.isfinite(value) else 1}


def io_fields(io: ProcessIo | None) -> dict[str, object]:
    if io is None:
        return {}
    return {Workload.PROCESS_READ_BYTES: io.read_bytes, Workload.PROCESS_RCHAR_BYTES: io.rchar}
