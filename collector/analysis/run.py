"""A run's events, read once into the one model every analysis of the run takes.

``read_run`` reads a run's record and its run and epoch events (the store filters by kind,
so a finished run's many ``step`` events are never decoded), plus the ``step`` events of
epochs still open: a live epoch ends at its latest step and counts its steps' images. It
then walks the events once (``assign_epochs``) and decodes every rank's ``epoch_end`` once,
into a ``RankEpochRecord`` per (host, rank, epoch). The per-epoch windows
(``collector.analysis.epochs``), the step-time split (``collector.analysis.anatomy``), the
throughput (``collector.analysis.throughput``), the scaling facts
(``collector.analysis.scaling``) and the findings all read those records; none of them
reads an ``epoch_end`` field itself.

One epoch assignment for every analysis: an event's epoch is its own ``epoch`` field, else
(a ``step`` or an ``epoch_end`` without one) the epoch of its rank's latest
``epoch_start``. A rank that sent two ``epoch_end`` events for one epoch is read from the
later one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from collector.store.api import ReadStore, RunInfo, WorkloadEvent, event_number
from contract.schema import Event, RunState, Workload
from contract.throughput import TimedWork

EPOCH_KINDS = (Event.RUN_START, Event.EPOCH_START, Event.EPOCH_END, Event.RUN_END)

RankEpochKey = tuple[str, int, int]  # (host, rank, epoch)


def run_events(
    store: ReadStore,
    run_id: str,
    kinds: tuple[str, ...] | None = None,
    since_ns: int | None = None,
) -> list[WorkloadEvent]:
    """A run's events of the given kinds, in time order, filtered by the store (so a run's
    many ``step`` events are not decoded when only its epochs are wanted)."""
    return store.events(run_id, since_ns, kinds=kinds)


def run_is_live(run: RunInfo | None) -> bool:
    """True while the run is still live (no run state says it ended): its open epochs are
    running, not interrupted. An unknown run counts as live."""
    return run is None or run.state == RunState.LIVE


def _epoch_of(event: WorkloadEvent) -> int | None:
    value = event.fields.get(Workload.EPOCH)
    if value is None or isinstance(value, str):
        return None
    return int(value)


def assign_epochs(events: Iterable[WorkloadEvent]) -> list[tuple[WorkloadEvent, int]]:
    """The ``epoch_start``, ``epoch_end`` and ``step`` events that belong to an epoch, each
    paired with it: its own ``epoch`` field, else (``epoch_end``, ``step``) its rank's latest
    ``epoch_start``'s. An ``epoch_start`` without an epoch, and anything before its rank's
    first ``epoch_start``, is left out."""
    current: dict[tuple[str, int], int] = {}
    out = []
    for event in events:
        key = (event.host, event.rank)
        if event.event == Event.EPOCH_START:
            epoch = _epoch_of(event)
            if epoch is not None:
                current[key] = epoch
                out.append((event, epoch))
        elif event.event in (Event.EPOCH_END, Event.STEP):
            epoch = _epoch_of(event)
            if epoch is None:
                epoch = current.get(key)
            if epoch is not None:
                out.append((event, epoch))
    return out


@dataclass(frozen=True, slots=True)
class RankEpochRecord:
    """One rank's epoch as its events tell it: when it started and ended it, what its
    ``epoch_end`` carries (each field None when not sent, or while the epoch has no
    ``epoch_end``), and its ``step`` events (read only while an epoch of the run is open)."""

    host: str
    rank: int
    epoch: int
    start_ns: int | None  # its earliest epoch_start; None: none seen
    end_ns: int | None  # its epoch_end's time; None: it has not ended the epoch
    images: float | None  # images it processed in the epoch
    seconds: float | None  # wall time of the epoch's steps, warm-up steps included
    timed_images: float | None  # images of its timed steps (after the run's warm-up)
    timed_seconds: float | None  # wall time of those steps
    global_step: float | None  # its step count at the epoch's end, over the whole run
    input_wait: float | None  # the step anatomy: seconds its steps waited for input,
    compute: float | None  # computed,
    communication: float | None  # spent in exposed communication,
    other: float | None  # and in the rest (optimizer update, callbacks)
    overlap: float | None  # communication hidden behind compute, seconds
    read_bytes: float | None  # /proc/<pid>/io read_bytes of the rank and its loaders
    rchar: float | None  # /proc/<pid>/io rchar of the same processes
    timed_input_wait: float | None  # input wait over its timed steps only
    cpu_seconds: float | None  # CPU time of the rank and its loaders over the epoch
    au_seconds: float | None  # wall time of the steps its AU is over (profiled ranks: the
    au_idle: float | None  # epoch's steps after its first), and the accelerator's idle time
    step_times_ns: tuple[int, ...]  # its step events' times
    step_images: float  # the images of its step events (a step without images counts 0)
    timed_step_work: TimedWork | None  # its step events with both images and seconds
    # learning (collector.analysis.learning): its epoch_end's mean training loss, whether
    # that was NaN or Inf (line protocol carries neither: the loss is then absent), top-1
    loss: float | None = None
    loss_not_finite: bool = False
    top1: float | None = None

    @property
    def ended(self) -> bool:
        """True once the rank sent the epoch's ``epoch_end``."""
        return self.end_ns is not None

    @property
    def has_anatomy(self) -> bool:
        """True when its ``epoch_end`` carries the step seconds and all four of their parts."""
        return self.seconds is not None and None not in (
            self.input_wait,
            self.compute,
            self.communication,
            self.other,
        )


@dataclass(frozen=True)
class RunModel:
    """A run's events, read once (``read_run``), and every rank's epochs decoded from them."""

    run_id: str
    run: RunInfo | None  # the run's record; None for a run the store does not know
    live: bool  # run_is_live(run): an epoch not ended yet is running, not interrupted
    epoch_events: tuple[WorkloadEvent, ...]  # run and epoch events, in the store's order
    records: tuple[RankEpochRecord, ...]  # one per (host, rank, epoch), by epoch, host, rank
    # each rank's epoch_start events as (time_ns, epoch), in the order the store gave them
    epoch_starts: dict[tuple[str, int], tuple[tuple[int, int], ...]]

    @property
    def open_since_ns(self) -> int | None:
        """The earliest ``epoch_start`` of a rank's epoch that has no ``epoch_end`` (an open
        epoch); None when every epoch a rank started is ended."""
        return min(
            (r.start_ns for r in self.records if r.start_ns is not None and not r.ended),
            default=None,
        )

    @property
    def ranks(self) -> set[tuple[str, int]]:
        """The (host, rank) of every rank that sent a run or epoch event."""
        return {(event.host, event.rank) for event in self.epoch_events}


# what an epoch_end carries, in RankEpochRecord's order (images .. cpu_seconds)
EPOCH_END_FIELDS = (
    Workload.IMAGES,
    Workload.SECONDS,
    Workload.TIMED_IMAGES,
    Workload.TIMED_SECONDS,
    Workload.STEP,
    Workload.INPUT_WAIT_SECONDS,
    Workload.COMPUTE_SECONDS,
    Workload.COMMUNICATION_SECONDS,
    Workload.OTHER_STEP_SECONDS,
    Workload.OVERLAP_SECONDS,
    Workload.PROCESS_READ_BYTES,
    Workload.PROCESS_RCHAR_BYTES,
    Workload.TIMED_INPUT_WAIT_SECONDS,
    Workload.CPU_SECONDS,
    Workload.AU_STEP_SECONDS,
    Workload.AU_IDLE_SECONDS,
)
_NOT_ENDED = (None,) * len(EPOCH_END_FIELDS)


def _record(
    key: RankEpochKey,
    start_ns: int | None,
    end: WorkloadEvent | None,
    steps: list[WorkloadEvent],
) -> RankEpochRecord:
    """The record of one rank's epoch: its ``epoch_end``'s fields decoded here, once."""
    carried = _NOT_ENDED if end is None else [event_number(end, n) for n in EPOCH_END_FIELDS]
    step_images = 0.0
    timed: TimedWork | None = None
    for step in steps:
        images = event_number(step, Workload.IMAGES)
        seconds = event_number(step, Workload.SECONDS)
        step_images += images or 0.0
        if images is not None and seconds is not None:
            timed = (timed or TimedWork(0.0, 0.0)) + TimedWork(images, seconds)
    return RankEpochRecord(
        *key,
        start_ns,
        end.time_ns if end is not None else None,
        *carried,
        tuple(step.time_ns for step in steps),
        step_images,
        timed,
        **_learning(end),
    )


def _learning(end: WorkloadEvent | None) -> dict[str, object]:
    """The learning fields of an ``epoch_end`` (none when the epoch has not ended)."""
    if end is None:
        return {}
    return {
        "loss": event_number(end, Workload.LOSS),
        "loss_not_finite": bool(event_number(end, Workload.LOSS_NOT_FINITE)),
        "top1": event_number(end, Workload.TOP1),
    }


def run_model(
    epoch_events: Iterable[WorkloadEvent],
    open_steps: Iterable[WorkloadEvent] = (),
    run: RunInfo | None = None,
    run_id: str | None = None,
) -> RunModel:
    """The model of a run from its events as read: its run and epoch events and the steps
    of its open epochs (any events will do: each kind is put where it belongs). ``run``: its
    record, which says whether it is live (None: live)."""
    events = tuple(epoch_events)
    steps = tuple(open_steps)
    if steps:
        walked: Iterable[WorkloadEvent] = sorted(events + steps, key=lambda e: (e.time_ns, e.rank))
    else:
        walked = events
    starts: dict[RankEpochKey, int] = {}
    ends: dict[RankEpochKey, WorkloadEvent] = {}
    step_events: dict[RankEpochKey, list[WorkloadEvent]] = defaultdict(list)
    marks: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for event, epoch in assign_epochs(walked):
        key = (event.host, event.rank, epoch)
        if event.event == Event.EPOCH_START:
            previous = starts.get(key)
            starts[key] = event.time_ns if previous is None else min(previous, event.time_ns)
            marks[(event.host, event.rank)].append((event.time_ns, epoch))
        elif event.event == Event.EPOCH_END:
            ends[key] = event
        else:
            step_events[key].append(event)
    keys = sorted(set(starts) | set(ends) | set(step_events), key=lambda k: (k[2], k[0], k[1]))
    if run_id is None:
        run_id = run.run_id if run is not None else (events[0].run_id if events else "")
    return RunModel(
        run_id=run_id,
        run=run,
        live=run_is_live(run),
        epoch_events=tuple(e for e in events if e.event != Event.STEP),
        records=tuple(
            _record(key, starts.get(key), ends.get(key), step_events.get(key, [])) for key in keys
        ),
        epoch_starts={key: tuple(value) for key, value in marks.items()},
    )


def read_run(store: ReadStore, run: str | RunInfo) -> RunModel:
    """The model of ``run`` (its id, or its record), read from ``store`` once: its record,
    its run and epoch events and, when an epoch is still open, the steps since the first
    open epoch began (a finished run's steps are never read)."""
    info = store.run(run) if isinstance(run, str) else run
    run_id = run if isinstance(run, str) else run.run_id
    events = run_events(store, run_id, EPOCH_KINDS)
    model = run_model(events, (), info, run_id)
    since_ns = model.open_since_ns
    if since_ns is None:
        return model
    return run_model(events, run_events(store, run_id, (Event.STEP,), since_ns - 1), info, run_id)
