"""Who else was on the training's hosts: the training's own CPU seconds per epoch, and the
node's busiest other processes over each epoch window.

The training's CPU seconds (``training_cpu``, per host and epoch) are the sum of its ranks'
``epoch_end`` ``cpu_seconds`` (each rank and its data loaders, ``workloads.record.cputime``),
when every rank of the host that ended the epoch sent them. The report sets them against
the host's CPU time (``collector.analysis.epochs``: ``training_cpu_percent``,
``other_cpu_percent``).

The other processes come from the agent's ``process`` series (``agent/samplers/processes.py``:
the top few by CPU and by storage I/O each tick). A process is the training's own when its
pid is a rank's (``run_start`` carries each rank's pid) or its parent's is (a data
loader); every other process is someone else's. Its amounts over a window are the growth
of its own counters (CPU seconds, read and write bytes) over the part of the window it was
sampled in: a process busy only between two of its samples is counted from its first
sample in the window, so a process that was among the busiest for a moment only is
undercounted, never invented.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from collector.analysis.counters import counter_increases
from collector.analysis.run import RunModel
from collector.store.api import ReadStore, SeriesData, SeriesInfo, event_number
from contract.schema import Event, Process, Tag, Workload

TRAINING_CPU = "training_cpu"  # the amount key of the training's CPU seconds


def epoch_cpu(model: RunModel) -> dict[tuple[str, int], dict[str, float]]:
    """The training's CPU seconds per (host, epoch): its ranks' ``epoch_end`` sums, when
    every rank of the host that ended the epoch sent them."""
    groups: dict[tuple[str, int], list[float | None]] = defaultdict(list)
    for record in model.records:
        if record.ended:
            groups[(record.host, record.epoch)].append(record.cpu_seconds)
    return {
        key: {TRAINING_CPU: sum(value or 0.0 for value in values)}
        for key, values in groups.items()
        if all(value is not None for value in values)
    }


def rank_pids(model: RunModel) -> dict[str, set[int]]:
    """The pids of the run's ranks per host, from their ``run_start`` events."""
    pids: dict[str, set[int]] = defaultdict(set)
    for event in model.epoch_events:
        if event.event == Event.RUN_START:
            pid = event_number(event, Workload.PID)
            if pid is not None:
                pids[event.host].add(int(pid))
    return dict(pids)


@dataclass(frozen=True)
class ProcessUse:
    """What one other process used in one window (a host's epoch)."""

    host: str
    pid: int
    command: str
    user: str | None
    job_id: str | None
    cpu_seconds: float
    read_bytes: float | None  # None: its /proc/<pid>/io was not readable
    write_bytes: float | None

    @property
    def name(self) -> tuple[str, int, str]:
        return (self.host, self.pid, self.command)


@dataclass(frozen=True)
class Window:
    host: str
    epoch: int
    start_ns: int
    end_ns: int


PROCESS_FIELDS = (Process.CPU_SECONDS, Process.READ_BYTES, Process.WRITE_BYTES, Process.PPID)


def _growth(series: SeriesData | None, window: Window) -> float:
    if series is None:
        return math.nan
    growth = counter_increases(series.times_ns, series.values, [window.start_ns], [window.end_ns])
    return float(growth[0])


def _parent(series: SeriesData | None) -> int | None:
    if series is None or not series.values.size:
        return None
    return int(series.values[-1])


def other_processes(
    store: ReadStore, model: RunModel, windows: Iterable[Window]
) -> dict[tuple[str, int], list[ProcessUse]]:
    """Per (host, epoch) window, the processes not the training's that the agent saw among
    the busiest, with what each used in the window, busiest first (one store read)."""
    windows = list(windows)
    if not windows:
        return {}
    hosts = {w.host for w in windows}
    own = rank_pids(model)
    by_process: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, SeriesInfo]] = defaultdict(
        dict
    )
    for field in PROCESS_FIELDS:
        for info in store.list_series(Process.NAME, field):
            if info.host in hosts:
                by_process[(info.host, tuple(sorted(info.tags.items())))][field] = info
    if not by_process:
        return {}
    wanted = [info for fields in by_process.values() for info in fields.values()]
    start = min(w.start_ns for w in windows)
    end = max(w.end_ns for w in windows)
    data = {s.info.series_id: s for s in store.read_series(wanted, start, end)}
    out: dict[tuple[str, int], list[ProcessUse]] = {}
    for window in windows:
        used = []
        for (host, tag_items), fields in by_process.items():
            if host != window.host:
                continue
            tags = dict(tag_items)
            pid = int(tags.get(Tag.PID, "0"))
            series = {name: data.get(info.series_id) for name, info in fields.items()}
            if pid in own.get(host, set()) or _parent(series.get(Process.PPID)) in own.get(
                host, set()
            ):
                continue
            cpu = _growth(series.get(Process.CPU_SECONDS), window)
            read = _growth(series.get(Process.READ_BYTES), window)
            write = _growth(series.get(Process.WRITE_BYTES), window)
            if not (cpu > 0 or read > 0 or write > 0):
                continue  # not seen busy in this window
            used.append(
                ProcessUse(
                    host,
                    pid,
                    tags.get(Tag.COMMAND, "?"),
                    tags.get(Tag.USER),
                    tags.get(Tag.JOB_ID),
                    cpu if cpu > 0 else 0.0,
                    None if math.isnan(read) else read,
                    None if math.isnan(write) else write,
                )
            )
        used.sort(key=lambda p: (-p.cpu_seconds, p.pid))
        out[(window.host, window.epoch)] = used
    return out
