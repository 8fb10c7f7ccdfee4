"""Whole-node CPU time from ``<proc>/stat``.

Measurement ``cpu``, no tags beyond ``host``. Fields (see ``contract.schema.Cpu``):

=================  =======  =======  ================================================
field              kind     unit     source
=================  =======  =======  ================================================
user_seconds       counter  seconds  ``cpu`` line, column 1 (user; includes guest)
nice_seconds       counter  seconds  column 2 (nice; includes guest_nice)
system_seconds     counter  seconds  column 3
idle_seconds       counter  seconds  column 4
iowait_seconds     counter  seconds  column 5 (Linux 2.5.41+)
irq_seconds        counter  seconds  column 6 (2.6.0+)
softirq_seconds    counter  seconds  column 7 (2.6.0+)
steal_seconds      counter  seconds  column 8 (2.6.11+)
cpus_online        gauge    count    number of ``cpuN`` lines
=================  =======  =======  ================================================

The kernel prints ticks of USER_HZ; we divide by ``os.sysconf("SC_CLK_TCK")``. These
counters stay floats, unlike the integer byte counters elsewhere: whole seconds would
quantise a 1 Hz rate into 0 or 1 CPU-seconds per second and hide everything between.

The aggregate ``cpu`` line sums every *possible* CPU, offline ones included, while
``cpuN`` lines exist only for online CPUs (numbering may have gaps); so taking the
aggregate keeps a CPU going offline from making the totals fall. Idle and iowait can
still step backwards (iowait is sampled per CPU and the kernel documents it as
unreliable; idle switches source when a CPU goes offline), so the sampler keeps the
highest value it has seen per field and its output never decreases: a backwards step
reads as a zero rate, never a negative one. A kernel with fewer columns gives fewer
fields, never zeros. Guest time is already inside user/nice and is not reported.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from agent.samplers.base import ProcFile, Roots
from agent.samplers.host_common import ProblemLog, to_ints
from contract.point import Point
from contract.schema import Cpu, FieldName

log = logging.getLogger(__name__)

# The aggregate line's columns in kernel order, as far as we report them.
COLUMN_FIELDS: tuple[FieldName, ...] = (
    Cpu.USER_SECONDS,
    Cpu.NICE_SECONDS,
    Cpu.SYSTEM_SECONDS,
    Cpu.IDLE_SECONDS,
    Cpu.IOWAIT_SECONDS,
    Cpu.IRQ_SECONDS,
    Cpu.SOFTIRQ_SECONDS,
    Cpu.STEAL_SECONDS,
)


@dataclass(frozen=True)
class CpuTimes:
    """The aggregate ``cpu`` line in ticks (as many columns as the kernel printed)."""

    ticks: tuple[int, ...]
    cpus_online: int


def parse_stat(text: str) -> CpuTimes:
    """Parse ``/proc/stat``. Raises ValueError when there is no usable ``cpu`` line.

    Per-CPU lines are only counted: their numbers are not used. Lines that are not
    about CPUs (intr, ctxt, softirq...) are ignored.
    """
    ticks: tuple[int, ...] | None = None
    cpus_online = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.startswith("cpu"):
            continue
        label, _, rest = line.partition(" ")
        if label == "cpu":
            values = to_ints(rest.split())
            if not values:
                raise ValueError(f"line {number}: the cpu line is not all numbers; no sample")
            ticks = tuple(values)
        elif label[3:].isascii() and label[3:].isdigit():
            cpus_online += 1
    if ticks is None:
        raise ValueError("no aggregate 'cpu' line; no sample")
    return CpuTimes(ticks=ticks, cpus_online=cpus_online)


class CpuSampler:
    name = Cpu.NAME

    def __init__(self, roots: Roots, clock_ticks: int | None = None) -> None:
        self._path = roots.proc / "stat"
        self._file = ProcFile(self._path)
        self._clock_ticks = clock_ticks or os.sysconf("SC_CLK_TCK")
        self._highest: list[int] = []  # per column, the highest tick count seen
        self._problems = ProblemLog(log, self._path)

    def available(self) -> bool:
        return self._read() is not None

    def sample(self, now_ns: int) -> list[Point]:
        times = self._read()
        if times is None:
            return []
        self._keep_highest(times.ticks)
        fields: dict[str, int | float] = {
            field: ticks / self._clock_ticks
            for field, ticks in zip(COLUMN_FIELDS, self._highest[: len(times.ticks)], strict=False)
        }
        fields[Cpu.CPUS_ONLINE] = float(times.cpus_online)
        return [Point(Cpu.NAME, {}, fields, now_ns)]

    def _read(self) -> CpuTimes | None:
        text = self._file.read()
        if text is None:
            return None
        try:
            return parse_stat(text)
        except ValueError as error:
            self._problems.report([str(error)])
            return None

    def _keep_highest(self, ticks: tuple[int, ...]) -> None:
        grown = self._highest + [0] * max(0, len(ticks) - len(self._highest))
        for index, value in enumerate(ticks):
            grown[index] = max(grown[index], value)
        self._highest = grown


SAMPLER = CpuSampler
