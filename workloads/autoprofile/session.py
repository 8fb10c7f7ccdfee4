"""One profiled process's events: run, epochs and steps, from whatever recognised them.

A ``Session`` starts (``run_start``) at the first training step it is told of, so only
processes that train become ranks. Epoch edges may be learnt late (a DataLoader is known
to be the training one only at its first optimizer step; an epoch ends after the
validation that follows it): each event carries the time it happened (``EventWriter.emit``
with ``time_ns``), not the time it was learnt; a moment that may turn out to be an edge
is stamped with an agent edge sample when it happens (``edge_ns``), so the edge is exact.
The run ends at interpreter exit: ``failed`` after an uncaught exception or a non-zero
``sys.exit``, else ``finished``.

Every image of an epoch is counted (no warm-up steps: ``timed_images == images``). The
accelerator utilisation (AU) leaves each epoch's first step out, as MLPerf Storage and DLIO
do (``au_step_seconds``, ``au_idle_seconds``): a pass's first step holds its loader's start
(workers started, or a persistent one's prefetch restarted), not the steady state. The
accelerator is idle while a step waits for input, or, for an emulated accelerator (DLIO),
whenever it is not doing its emulated compute (``Session.step``'s ``accelerator_busy``).

A step's time runs from the previous step's end (or the epoch's start) on the
``perf_counter`` clock. Given the step's marks (``workloads.record.anatomy.StepMarks``) it is split
into input wait, compute, communication and the rest exactly as the bundled workloads split
theirs (``split_step``); ``epoch_end`` carries their sums, and the rank's own reads over the
epoch (``ProcessTreeIo``: ``/proc/<pid>/io`` of the rank and its data-loading children)
and their CPU seconds (``ProcessTreeCpu``), with the same fields
(``workloads.record.timing``); every step being timed, the timed steps' input wait (the
AU's) is the epoch's.
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from workloads.autoprofile.config import ProfileConfig
from workloads.record.anatomy import (
    ZERO,
    ProcessIo,
    ProcessTreeIo,
    StepAnatomy,
    StepMarks,
    add,
    split_step,
)
from workloads.record.cputime import GroupThrottling, ProcessTreeCpu, TreeThrottling

DELIVERY_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class Placement:
    rank: int
    world_size: int
    local_rank: int
    local_size: int


# (rank, world size, local rank, local size) variables of each launcher, most specific first
LAUNCHER_ENV = (
    ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),  # torchrun
    ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),  # MPICH, Intel MPI
)  # fmt: skip
SLURM_ENV = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE")


def _int(environ: dict[str, str], name: str) -> int | None:
    text = environ.get(name, "").split("(")[0]  # SLURM_NTASKS_PER_NODE may read "2(x3)"
    return int(text) if text.isdigit() else None


def placement_from(environ: dict[str, str], distributed: tuple[int, int] | None) -> Placement:
    """Where this process sits: a launcher's variables, else ``torch.distributed`` once
    initialised (``distributed``: its rank and world size), else Slurm's, else 0 of 1."""
    for rank_name, size_name, local_name, local_size_name in LAUNCHER_ENV:
        rank, size = _int(environ, rank_name), _int(environ, size_name)
        if rank is not None and size is not None:
            local = _int(environ, local_name)
            local_size = _int(environ, local_size_name)
            return Placement(rank, size, rank if local is None else local, local_size or size)
    if distributed is not None:
        rank, size = distributed
        # torch.multiprocessing.spawn on one host: ranks are its processes
        return Placement(rank, size, rank, size)
    rank, size = _int(environ, SLURM_ENV[0]), _int(environ, SLURM_ENV[1])
    if rank is not None and size is not None:
        local = _int(environ, SLURM_ENV[2])
        return Placement(rank, size, rank if local is None else local,
                         _int(environ, SLURM_ENV[3]) or size)  # fmt: skip
    return Placement(0, 1, 0, 1)


def torch_distributed() -> tuple[int, int] | None:
    """(rank, world size) of an initialised ``torch.distributed``, never importing torch."""
    distributed = sys.modules.get("torch.distributed")
    try:
        if distributed is not None and distributed.is_available() and distributed.is_initialized():
            return distributed.get_rank(), distributed.get_world_size()
    except Exception:
        return None
    return None


@dataclass
class Epoch:
    number: int
    start_ns: int
    steps: int = 0
    images: int = 0
    seconds: float = 0.0
    input_wait: float = 0.0
    anatomy: StepAnatomy | None = ZERO  # the steps' parts summed; None once a step had none
    au_seconds: float = 0.0  # wall time of the steps after the first (AU's)
    au_idle: float = 0.0  # and the accelerator's idle time in them
    io_at_start: ProcessIo | None = None  # the rank's reads when the epoch began
    cpu_at_start: float | None = None  # CPU seconds of the rank and its loaders by then
    throttling_at_start: dict[Path, GroupThrottling] | None = None  # their quota groups'
    loader_workers_started: int | None = None  # by its training loader at its start
    loss_sum: object = None  # a float, or a framework scalar summed without a device sync
    losses: int = 0
    end_ns: int | None = None  # the latest time the epoch is known to have run to
    loss: float | None = None  # a mean the framework reports itself (Keras)
    top1: float | None = None
    top5: float | None = None


class Session:
    def __init__(
        self, config: ProfileConfig, clock_ns=time.time_ns, clock=time.perf_counter
    ) -> None:
        self.config = config
        self.clock_ns = clock_ns
        self.clock = clock  # steps' durations and the anatomy's marks
        self.writer = None
        self.placement: Placement | None = None
        self.epoch: Epoch | None = None
        self.epochs_done = 0
        self.global_step = 0
        self.failed = False
        # who names the epochs and steps instead of the recognition of PyTorch loops: the
        # script itself (workloads.track: "track") or Lightning's callbacks ("lightning")
        self.driver: str | None = None
        self._read_io: ProcessTreeIo | None = None
        self._read_cpu: ProcessTreeCpu | None = None
        self._read_throttling: TreeThrottling | None = None
        self._agent_edges: object = False  # AgentEdges | None, once asked
        self._residency: object = False  # DatasetResidency | None, once built
        self._mark = 0.0
        self._lock = threading.RLock()

    @property
    def started(self) -> bool:
        return self.writer is not None

    @property
    def explicit(self) -> bool:
        """Something other than the recognition of PyTorch loops names the epochs."""
        return self.driver is not None

    # --- the run -------------------------------------------------------------------
    def start(
        self,
        framework: str,
        model: str | None,
        batch_size: int | None,
        at_ns: int | None = None,
        loader: object = None,
        residency: dict[str, int] | None = None,
    ) -> None:
        """``run_start`` for this process, as a rank (once); ``at_ns``: when its training
        began, if before now; ``loader``: the training's data loader, if known (its workers
        are recorded); ``residency``: the data set's residency at ``at_ns``
        (``residency_fields`` then), else measured now."""
        with self._lock:
            if self.started:
                return
            from contract.schema import Event, Workload
            from workloads.record.cpus import cpu_fields
            from workloads.record.events import EventWriter, make_sink
            from workloads.record.spec import token_from_env
            from workloads.train.placement import host_memory_bytes

            self.placement = placement_from(dict(os.environ), torch_distributed())
            rank = self.placement.rank
            sink = make_sink(self.config.collector_url, token_from_env(),
                             self.config.spool_dir(rank), None)  # fmt: skip
            self.writer = EventWriter(sink, self.config.run_id, rank, framework,
                                      socket.gethostname(), edges=self._edges)  # fmt: skip
            self.writer.emit(Event.RUN_START, {
                Workload.MODEL: model or "unknown",
                Workload.BATCH_SIZE: batch_size,
                Workload.WORLD_SIZE: self.placement.world_size,
                Workload.LOCAL_SIZE: self.placement.local_size,
                Workload.DATA_FORMAT: self.config.data_format,
                Workload.DATASET_IMAGES: self.config.dataset_images,
                Workload.DATASET_BYTES: self.config.dataset_bytes,
                Workload.HOST_MEMORY_BYTES: host_memory_bytes(),
                Workload.WARMUP_STEPS: 0,
                Workload.TARGET_TOP1: self.config.target_top1,
                **cpu_fields(getattr(loader, "num_workers", None),
                             getattr(loader, "persistent_workers", None)),
                **(residency if residency is not None else self.residency_fields()),
            }, at_ns)  # fmt: skip
            atexit.register(self.finish)

    def residency_fields(self) -> dict[str, int]:
        """The data set's page-cache residency now, from a host's first rank with
        ``--data-dir`` (``workloads.record.timing`` sends the same); {} otherwise. Asked
        before the process is known to train too: a loader's workers read ahead of the
        first step, so the run's start is measured when its first pass began."""
        from contract.schema import Workload

        if self._residency is False:
            self._residency = None
            placement = self.placement or placement_from(dict(os.environ), torch_distributed())
            local_rank = placement.local_rank
            if self.config.data_dir and local_rank == 0:
                from workloads.train.datasets import DatasetError, describe
                from workloads.train.pagecache import DatasetResidency

                try:
                    info = describe(Path(self.config.data_dir))
                except (DatasetError, OSError) as error:
                    print(f"epochscope: no page-cache residency of {self.config.data_dir}: "
                          f"{error}", file=sys.stderr, flush=True)  # fmt: skip
                else:
                    self._residency = DatasetResidency(info.paths("train") + info.paths("val"))
        if self._residency is None:
            return {}
        now = self._residency.measure()  # type: ignore[attr-defined]
        return {Workload.DATASET_CACHED_BYTES: now.resident_bytes,
                Workload.DATASET_FILES_BYTES: now.total_bytes}  # fmt: skip

    @property
    def _edges(self):
        """The local agent's edge samples (``workloads.record.events.AgentEdges``), one for the
        process: an agent that did not answer once is not asked again."""
        if self._agent_edges is False:
            from workloads.record.events import AgentEdges

            self._agent_edges = AgentEdges.from_environment()
        return self._agent_edges

    def edge_ns(self) -> int:
        """Now, as an edge sample of the local agent stamps it (the node's counters are read
        at this instant: an epoch edge placed here is exact), else the clock's now. Asked
        where an edge may turn out to be one, before it is known to be (the first pass of
        a DataLoader is known to be the training epoch only at its first optimizer step)."""
        edges = self._edges
        sampled = edges.sample() if edges is not None else None
        return sampled or self.clock_ns()

    # --- epochs and steps ----------------------------------------------------------
    def epoch_start(
        self,
        start_ns: int | None = None,
        start: float | None = None,
        io: ProcessIo | None = None,
        cpu: float | None = None,
    ) -> Epoch:
        """A new epoch from ``start_ns`` (default: now, stamped with the local agent's edge
        sample, as the bundled runs' edges are; ``start``: the same instant on ``clock``),
        with the rank's reads ``io`` at that instant (default: read now); ends the open one
        first."""
        from contract.schema import Event, Workload

        with self._lock:
            self.epoch_end()
            self.epochs_done += 1
            io_now = io if io is not None else self.process_io()
            cpu_now = cpu if cpu is not None else self.process_cpu()
            self.epoch = Epoch(self.epochs_done, start_ns or 0, io_at_start=io_now,
                               cpu_at_start=cpu_now,
                               throttling_at_start=self.process_throttling())  # fmt: skip
            self._mark = self.clock() if start is None else start
            point = self.writer.emit(Event.EPOCH_START, {Workload.EPOCH: self.epoch.number},
                                     start_ns)  # fmt: skip
            self.epoch.start_ns = point.time_ns
            return self.epoch

    @property
    def step_start(self) -> float:
        """When the step under way began (the previous one's end), on ``clock``."""
        return self._mark

    def process_io(self) -> ProcessIo | None:
        """The reads so far of this process and the data loaders below it (None where
        ``/proc/<pid>/io`` cannot be read); asked before the process is known to train too,
        at the start of each DataLoader pass, for an epoch recognised only later."""
        if self._read_io is None or self._read_io.pid != os.getpid():  # a fork's own
            self._read_io = ProcessTreeIo()
        return self._read_io()

    def process_cpu(self) -> float | None:
        """CPU seconds so far of this process and the data loaders below it, read where
        ``process_io`` is (``workloads.record.cputime``)."""
        if self._read_cpu is None or self._read_cpu.pid != os.getpid():
            self._read_cpu = ProcessTreeCpu()
        return self._read_cpu()

    def process_throttling(self) -> dict[Path, GroupThrottling]:
        """The CPU quota groups of this process and its data loaders, read where
        ``process_cpu`` is (``workloads.record.cputime.TreeThrottling``)."""
        if self._read_throttling is None or self._read_throttling.pid != os.getpid():
            self._read_throttling = TreeThrottling()
        return self._read_throttling()

    def step(
        self,
        images: int,
        input_wait: float | None = None,
        loss: object = None,
        marks: StepMarks | None = None,
        end: tuple[int, float] | None = None,
        accelerator_busy: float | None = None,
    ) -> None:
        """One training step ended now (or at ``end``: ``clock_ns`` and ``clock`` readings),
        on ``images`` images; its time runs from the previous step's end (or the epoch's
        start), so waiting for input counts.

        ``marks`` (on ``clock``): where the step's time went, split by ``split_step`` into
        the four parts of the anatomy (its input wait then replaces ``input_wait``).
        ``accelerator_busy``: an emulated accelerator's work in the step, in seconds (DLIO's
        configured computation time): the rest of the step is its idle time in AU; else the
        accelerator is idle only while the step waits for input."""
        from contract.schema import Event, Workload
        from workloads.record.timing import anatomy_fields

        with self._lock:
            epoch = self.epoch or self.epoch_start()
            now_ns, now = end if end is not None else (self.clock_ns(), self.clock())
            parts = split_step(self._mark, now, marks) if marks is not None else None
            seconds = max(0.0, now - self._mark)
            self._mark, epoch.end_ns = now, now_ns
            if parts is not None:
                input_wait = parts.input_wait
            self.global_step += 1
            epoch.steps += 1
            epoch.images += images
            epoch.seconds += seconds
            epoch.input_wait += input_wait or 0.0
            epoch.anatomy = None if epoch.anatomy is None or parts is None else (
                add(epoch.anatomy, parts)
            )  # fmt: skip
            if epoch.steps > 1 and parts is not None:
                epoch.au_seconds += seconds
                epoch.au_idle += (
                    parts.input_wait if accelerator_busy is None
                    else max(0.0, seconds - accelerator_busy)
                )  # fmt: skip
            if loss is not None:
                epoch.loss_sum = loss if epoch.loss_sum is None else epoch.loss_sum + loss
                epoch.losses += 1
            if self._sends(epoch.steps):
                self.writer.emit(Event.STEP, {
                    Workload.EPOCH: epoch.number,
                    Workload.STEP: self.global_step,
                    Workload.IMAGES: images,
                    Workload.SECONDS: seconds,
                    Workload.INPUT_WAIT_SECONDS: input_wait,
                    Workload.LOSS: scalar(loss),
                    **anatomy_fields(parts),
                }, now_ns)  # fmt: skip

    def step_is_sent(self) -> bool:
        """The next step will be sent as a ``step`` event (its loss is read then)."""
        steps = self.epoch.steps if self.epoch is not None else 0
        return self._sends(steps + 1)

    def _sends(self, step_in_epoch: int) -> bool:
        """Every ``step_every``-th step of an epoch is sent, and its first: what restarts
        with each epoch (loader workers, an iterator) shows only in the first step, which
        the ``epoch_restart`` finding compares with the epoch's others."""
        return step_in_epoch == 1 or step_in_epoch % self.config.step_every == 0

    def extend_epoch(self, end_ns: int | None = None) -> None:
        """The open epoch ran until ``end_ns`` (validation after its steps)."""
        with self._lock:
            if self.epoch is not None:
                self.epoch.end_ns = end_ns or self.clock_ns()

    def epoch_end(self, end_ns: int | None = None, now: bool = False) -> None:
        """``epoch_end`` of the open epoch, at ``end_ns`` or the latest time it ran to;
        ``now``: it ends now (stamped with the agent's edge sample)."""
        from contract.schema import Event, Workload
        from workloads.record.cputime import throttling_fields
        from workloads.record.timing import (
            anatomy_fields,
            io_fields,
            loss_fields,
            timed_anatomy_fields,
        )

        with self._lock:
            epoch, self.epoch = self.epoch, None
            if epoch is None:
                return
            io_now = self.process_io()
            reads = None
            if io_now is not None and epoch.io_at_start is not None:
                reads = io_now - epoch.io_at_start
            cpu_now = self.process_cpu()
            throttling = throttling_fields(epoch.throttling_at_start, self.process_throttling())
            cpu_seconds = None
            if cpu_now is not None and epoch.cpu_at_start is not None:
                cpu_seconds = cpu_now - epoch.cpu_at_start
            loss = epoch.loss
            if loss is None and epoch.losses:
                loss = scalar(epoch.loss_sum) / epoch.losses
            self.writer.emit(Event.EPOCH_END, {
                Workload.EPOCH: epoch.number,
                Workload.STEP: self.global_step,
                Workload.IMAGES: epoch.images,
                Workload.SECONDS: epoch.seconds,
                Workload.TIMED_IMAGES: epoch.images,
                Workload.TIMED_SECONDS: epoch.seconds,
                Workload.INPUT_WAIT_SECONDS: epoch.input_wait,
                # every step is timed here (no warm-up steps): the AU's input wait
                Workload.TIMED_INPUT_WAIT_SECONDS: epoch.input_wait,
                **anatomy_fields(epoch.anatomy if epoch.steps else None),
                **timed_anatomy_fields(epoch.anatomy if epoch.steps else None),
                **au_fields(epoch),
                **io_fields(reads),
                **loss_fields(loss),
                Workload.TOP1: epoch.top1,
                Workload.TOP5: epoch.top5,
                **self.residency_fields(),
                Workload.CPU_SECONDS: cpu_seconds,
                Workload.LOADER_WORKERS_STARTED: epoch.loader_workers_started,
                **throttling,
            }, None if now else end_ns or epoch.end_ns or self.clock_ns())  # fmt: skip

    def finish(self) -> None:
        """The open epoch's end, ``run_end`` and delivery (at interpreter exit)."""
        from contract.schema import Event, RunState, Workload

        with self._lock:
            if not self.started or self.writer is None:
                return
            self.epoch_end()
            state = RunState.FAILED if self.failed else RunState.FINISHED
            self.writer.emit(Event.RUN_END, {Workload.STATE: state,
                                             Workload.STEP: self.global_step})  # fmt: skip
            writer, self.writer = self.writer, None
        if not writer.close(DELIVERY_TIMEOUT_SECONDS):
            from workloads.record.delivery import holds_events, resend_command
            from workloads.record.spec import TOKEN_FILE_ENV

            spool = self.config.spool_dir(self.placement.rank if self.placement else 0)
            if not holds_events(spool):  # none reached the disk: no directory to name
                print(f"epochscope: events not delivered to {self.config.collector_url}, and "
                      "none kept on disk to resend", file=sys.stderr)  # fmt: skip
                return
            command = resend_command(spool, self.config.collector_url,
                                     os.environ.get(TOKEN_FILE_ENV))  # fmt: skip
            print(f"epochscope: events not yet delivered stay in {spool}; send them with: "
                  f"{command}", file=sys.stderr)  # fmt: skip


def au_fields(epoch: Epoch) -> dict[str, float]:
    """AU's steps (all but the epoch's first), when every step of the epoch had its parts."""
    from contract.schema import Workload

    if epoch.anatomy is None or epoch.steps < 2:
        return {}
    return {Workload.AU_STEP_SECONDS: epoch.au_seconds,
            Workload.AU_IDLE_SECONDS: epoch.au_idle}  # fmt: skip


def scalar(value: object) -> float | None:
    """A float from a float or a one-element tensor (read only when an event needs it)."""
    if value is None:
        return None
    item = getattr(value, "item", None)
    try:
        return float(item() if callable(item) else value)
    except (TypeError, ValueError):
        return None


_session: Session | None = None
_session_lock = threading.Lock()


def current() -> Session | None:
    """This process's session, or None when it is not under ``workloads profile``."""
    global _session
    if _session is None:
        config = ProfileConfig.from_env()
        if config is None:
            return None
        with _session_lock:
            if _session is None:
                _session = Session(config)
                _watch_exit(_session)
    return _session


def _watch_exit(session: Session) -> None:
    """Mark the run failed on an uncaught exception or a non-zero ``sys.exit`` (what
    ``torch.multiprocessing.spawn``'s workers call when the function raised)."""
    previous_hook = sys.excepthook
    exit_function = sys.exit

    def excepthook(kind, value, traceback) -> None:
        session.failed = True
        previous_hook(kind, value, traceback)

    def exit(status: object = None) -> None:
        if status not in (None, 0):
            session.failed = True
        exit_function(status)

    sys.excepthook = excepthook
    sys.exit = exit
