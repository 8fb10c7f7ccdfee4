"""Where a training step's time goes: input wait, compute, communication and the rest.

A trainer marks up to four moments of each step on the recorder's clock (``StepMarks``):

- ``input_requested``: the step asks for its batch (default: the step's start; TensorFlow
  marks when its compiled step begins, so tracing and graph building before it are not
  taken for input wait);
- ``input_ready``: the next batch is in the trainer's hands (the wait before it is
  *input wait*: the input pipeline did not keep up);
- ``compute_done``: forward and backward are over, every local gradient is ready;
- ``communication_done``: the gradient all-reduce is over (the averaged gradients are in
  place).

The step ends at the recorder's ``step_done``. The step's wall time then splits into four
parts that add up to it exactly::

    start ── other ── input_requested ── input_wait ── input_ready ── compute ──
          compute_done ── communication ── communication_done ── other ── end

*communication* is the all-reduce time the step was left waiting for once its gradients
were ready (the *exposed* part). All-reduce that ran while backward was still computing is
counted once, in *compute*, and reported beside the sum as ``overlap``: the union of the
all-reduce intervals (``StepMarks.communication``) inside ``[input_ready, compute_done]``;
None when the trainer could not time its all-reduces one by one (Horovod, PyTorch DDP).

Marks out of order (a clock read late on another thread) are clamped into
``[start, end]`` and made monotonic, so the parts are never negative. A step without an
``input_ready`` mark has no anatomy (``split_step`` returns None); a missing
``compute_done`` is the communication mark (or the end), a missing
``communication_done`` is ``compute_done`` (no all-reduce: one process).

The rank's own I/O comes from ``/proc/<pid>/io`` of the rank process and every process
below it (PyTorch's DataLoader workers): ``read_bytes`` is what the kernel read from
storage for them, ``rchar`` every byte their read calls returned (page-cache hits too).
A child reaped by the rank has its counts added to the rank's own (the kernel does that
on wait), so the sum over the live tree grows monotonically.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract import procfs


@dataclass
class StepMarks:
    """One step's marks on the recorder's clock; None where a trainer gave none."""

    input_ready: float | None = None
    input_requested: float | None = None
    compute_done: float | None = None
    communication_done: float | None = None
    communication: list[tuple[float, float]] = field(default_factory=list)


@dataclass(frozen=True)
class StepAnatomy:
    input_wait: float
    compute: float
    communication: float  # exposed all-reduce
    other: float
    overlap: float | None  # all-reduce hidden behind backward; not part of the sum

    @property
    def total(self) -> float:
        return self.input_wait + self.compute + self.communication + self.other


ZERO = StepAnatomy(0.0, 0.0, 0.0, 0.0, 0.0)


def add(first: StepAnatomy, second: StepAnatomy) -> StepAnatomy:
    return StepAnatomy(
        first.input_wait + second.input_wait,
        first.compute + second.compute,
        first.communication + second.communication,
        first.other + second.other,
        None if first.overlap is None or second.overlap is None else first.overlap + second.overlap,
    )


def covered(intervals: list[tuple[float, float]], low: float, high: float) -> float:
    """Seconds of ``[low, high]`` covered by the union of ``intervals``."""
    clipped = sorted((max(low, a), min(high, b)) for a, b in intervals if b > low and a < high)
    total, reach = 0.0, low
    for begin, end in clipped:
        if end <= reach:
            continue
        total += end - max(begin, reach)
        reach = end
    return total


def split_step(start: float, end: float, marks: StepMarks) -> StepAnatomy | None:
    """The four parts of the step ``[start, end]`` (they add up to ``end - start``)."""
    if marks.input_ready is None:
        return None
    end = max(start, end)

    def clamp(value: float, low: float) -> float:
        return min(end, max(low, value))

    requested = start if marks.input_requested is None else clamp(marks.input_requested, start)
    ready = clamp(marks.input_ready, requested)
    computed_at = marks.compute_done
    if computed_at is None:
        computed_at = marks.communication_done if marks.communication_done is not None else end
    computed = clamp(computed_at, ready)
    communicated_at = marks.communication_done
    communicated = computed if communicated_at is None else clamp(communicated_at, computed)
    return StepAnatomy(
        input_wait=ready - requested,
        compute=computed - ready,
        communication=communicated - computed,
        other=(requested - start) + (end - communicated),
        overlap=covered(marks.communication, ready, computed) if marks.communication else None,
    )


# --------------------------------------------------------------------------------------
# PyTorch DistributedDataParallel: the all-reduce timed around backward
# --------------------------------------------------------------------------------------


class BackwardMarks:
    """The end of backward compute and of DDP's all-reduce, with no communication hook.

    ``watch(loss)`` before ``loss.backward()`` puts a pre-hook on the loss's autograd node
    (the graph's root, run first); the pre-hook queues a final callback of the autograd
    engine, which runs once every node of the graph has run: every local gradient is
    ready (``compute_done``). DDP queues its own final callback, which waits for every
    bucket's all-reduce and writes the averaged gradients, when its last bucket is ready,
    later than ours, so ours runs first; ``backward`` returns after DDP's
    (``backward_returned``: ``communication_done``). Torch is imported by the hook only.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.compute_done: float | None = None
        self.communication_done: float | None = None
        self._handle: Any = None

    def watch(self, loss: Any) -> None:
        self.compute_done = self.communication_done = None
        node = getattr(loss, "grad_fn", None)
        if node is not None and self._handle is None:
            self._handle = node.register_prehook(self._backward_began)

    def _backward_began(self, grad_outputs: object) -> None:
        from torch.autograd import Variable

        Variable._execution_engine.queue_callback(self._graph_done)

    def _graph_done(self) -> None:
        self.compute_done = self.clock()

    def backward_returned(self) -> None:
        self.communication_done = self.clock()
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


# --------------------------------------------------------------------------------------
# The rank's own reads, /proc/<pid>/io
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessIo:
    rchar: int = 0  # bytes returned by read-like calls, page cache included
    read_bytes: int = 0  # bytes the kernel fetched from storage for the process

    def __add__(self, other: ProcessIo) -> ProcessIo:
        return ProcessIo(self.rchar + other.rchar, self.read_bytes + other.read_bytes)

    def __sub__(self, other: ProcessIo) -> ProcessIo:
        return ProcessIo(self.rchar - other.rchar, self.read_bytes - other.read_bytes)


def children(pid: int, proc: Path = Path("/proc")) -> list[int] | None:
    """``pid``'s children from ``/proc/<pid>/task/*/children`` (a few bytes per thread),
    or None where the kernel has no such files (CONFIG_PROC_CHILDREN off)."""
    found: list[int] = []
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            found.extend(int(word) for word in (task / "children").read_text().split())
        except FileNotFoundError:
            return None
        except OSError:  # the thread ended meanwhile
            continue
    return found


def descendants(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """Every live process below ``pid`` (children, their children...).

    The ``children`` files cost a few bytes of reads per thread; scanning every
    ``/proc/<pid>/stat`` (the fallback) would itself add ~100 kB to the rank's ``rchar``."""
    direct = children(pid, proc)
    if direct is not None:
        found, queue = [], list(direct)
        while queue:
            child = queue.pop()
            found.append(child)
            queue.extend(children(child, proc) or [])
        return found
    parents: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = procfs.parse_stat((entry / "stat").read_text()).ppid
        except (OSError, ValueError):  # gone meanwhile
            continue
        parents.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        for child in parents.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


class ProcessTreeIo:
    """Reads of a process and its live descendants, minus this reader's own reads of
    /proc (finding the children may scan every ``/proc/<pid>/stat``: ~100 kB of ``rchar``
    per call, which is not the training's). Call it for the running total; None where
    ``/proc/<pid>/io`` cannot be read (another kernel, a locked-down /proc)."""

    def __init__(self, pid: int | None = None, proc: Path = Path("/proc")) -> None:
        self.pid = os.getpid() if pid is None else pid
        self.proc = proc
        self.own_reads = ProcessIo()

    def _read(self, pid: int) -> ProcessIo:
        """Raises OSError where the file cannot be read, KeyError where the kernel
        keeps no storage counts in it (no task I/O accounting)."""
        io = procfs.parse_io((self.proc / str(pid) / "io").read_text())
        return ProcessIo(io.rchar, io.read_bytes)

    def __call__(self) -> ProcessIo | None:
        try:
            before = self._read(self.pid)
        except (OSError, KeyError):
            return None
        below = ProcessIo()
        for child in descendants(self.pid, self.proc):
            try:
                below = below + self._read(child)
            except (OSError, KeyError):  # exited: its counts are in ours once we reap it
                continue
        try:
            after = self._read(self.pid)
        except (OSError, KeyError):
            return None
        self.own_reads = self.own_reads + (after - before)
        return after - self.own_reads + below
