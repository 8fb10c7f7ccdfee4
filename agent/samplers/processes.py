"""Who else is on the node: its busiest processes since the previous sample, cheaply.

Measurement ``process`` (``contract.schema.Process``): each sample, the top ``TOP``
processes by CPU seconds and the top ``TOP`` by storage bytes (read + write) since the
previous sample, one point each (a process in both lists once). Tags: ``pid``,
``command`` (``comm``), ``user`` (the real uid's name, when it resolves) and ``job_id``
(the Slurm job whose cgroup holds it: a ``job_<id>`` component of a path in
``/proc/<pid>/cgroup``, as ``agent.samplers.jobs`` finds jobs). Fields: the process's
own counters (CPU seconds since it started, ``read_bytes``/``write_bytes``), the rates
since the previous sample and the parent's pid.

What a sample costs: one read of ``/proc/<pid>/stat`` per process (utime, stime: the
ranking by CPU); ``/proc/<pid>/io`` only for the ``IO_CANDIDATES`` processes that used
the most CPU since the previous sample (a process that did I/O made system calls); and
``status`` (uid) and ``cgroup`` (job) once per reported process, kept while it lives.

What it cannot see:

- I/O of a process that used no CPU tick (10 ms) since the previous sample, or of one
  whose ``/proc/<pid>/io`` is not readable (another user's, without root): no I/O rate;
- a process's first sample with I/O read only gives the reading (no rate yet);
- processes that started and ended between two samples;
- CPU time in ticks (``SC_CLK_TCK``, usually 100 a second): a rate below 0.01 s a tick
  reads zero.

The first sample only reads (no rates, no points). A process is keyed by (pid, start
time), so a reused pid is another process. Parsers are pure functions of text.
"""

from __future__ import annotations

import logging
import os
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from agent.samplers.base import Roots
from agent.samplers.jobs import parse_proc_io, parse_status_uid, user_name
from contract.point import Point
from contract.schema import Process, Tag

log = logging.getLogger(__name__)

TOP = 5  # processes per list (CPU, storage I/O)
IO_CANDIDATES = 32  # the most CPU-active processes whose /proc/<pid>/io is read
_JOB_IN_PATH = re.compile(r"/job_([0-9A-Za-z]+)(?:/|$)")
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
NS_PER_SECOND = 1_000_000_000


@dataclass(frozen=True)
class PidStat:
    """What one ``/proc/<pid>/stat`` line tells: the name, the parent, CPU ticks (user +
    system) and the start time (ticks after boot; with the pid, the process's identity)."""

    command: str
    ppid: int
    ticks: int
    start: int


def parse_pid_stat(text: str) -> PidStat:
    """``/proc/<pid>/stat``. The name, in parentheses, may hold spaces and parentheses
    itself: it runs to the *last* ')'. Raises ValueError on a damaged line."""
    opening, closing = text.find("("), text.rfind(")")
    if opening < 0 or closing < opening:
        raise ValueError("no (comm) in stat")
    words = text[closing + 2 :].split()
    if len(words) < 20:
        raise ValueError("short stat line")
    # after the name: state ppid pgrp ... utime(12) stime(13) ... starttime(20), from 1
    return PidStat(text[opening + 1 : closing], int(words[1]), int(words[11]) + int(words[12]),
                   int(words[19]))  # fmt: skip


def parse_cgroup_job_id(text: str) -> str | None:
    """The Slurm job of a process from ``/proc/<pid>/cgroup`` (``id:controllers:path``
    lines, v1 and v2): the id of the first ``job_<id>`` path component, or None."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        match = _JOB_IN_PATH.search(path)
        if match:
            return match.group(1)
    return None


def clean_command(command: str) -> str:
    """A process name as a tag can hold it: any process may name itself with control or
    bidirectional characters, which the collector refuses; each becomes '?'."""
    return "".join(
        "?" if char in _BIDI or unicodedata.category(char) == "Cc" else char for char in command
    )


def top_keys(amounts: dict[tuple[int, int], float], count: int) -> list[tuple[int, int]]:
    """The ``count`` keys with the largest positive amounts, largest first (pid breaks
    ties, so the order is stable)."""
    busy = [(amount, key) for key, amount in amounts.items() if amount > 0]
    busy.sort(key=lambda pair: (-pair[0], pair[1]))
    return [key for _, key in busy[:count]]


def _read_small(path: str) -> str | None:
    """A small procfs file's text, or None (the process is gone, or not ours to read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 8192).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass
class _Known:
    """What the sampler keeps about a process between samples."""

    stat: PidStat
    io: tuple[int, int] | None = None  # the last (read_bytes, write_bytes) read
    tags: dict[str, str] | None = None  # filled once, when first reported


class ProcessesSampler:
    name = "processes"

    def __init__(
        self,
        roots: Roots,
        users: Callable[[int], str | None] = user_name,
        top: int = TOP,
        clock_ticks: int | None = None,
    ) -> None:
        self._proc = str(roots.proc)
        self._users = users
        self._top = top
        self._ticks_per_second = clock_ticks or os.sysconf("SC_CLK_TCK")
        self._known: dict[tuple[int, int], _Known] = {}
        self._last_ns: int | None = None

    def available(self) -> bool:
        for pid in self._pids():
            if _read_small(f"{self._proc}/{pid}/stat") is not None:
                return True
        log.info("processes sampler off: no readable %s/<pid>/stat", self._proc)
        return False

    def _pids(self) -> list[str]:
        try:
            return [entry.name for entry in os.scandir(self._proc) if entry.name.isdigit()]
        except OSError:
            return []

    def _scan(self) -> dict[tuple[int, int], PidStat]:
        found: dict[tuple[int, int], PidStat] = {}
        for pid in self._pids():
            text = _read_small(f"{self._proc}/{pid}/stat")
            if text is None:
                continue  # ended meanwhile
            try:
                stat = parse_pid_stat(text)
            except ValueError:
                continue
            found[(int(pid), stat.start)] = stat
        return found

    def sample(self, now_ns: int) -> list[Point]:
        current = self._scan()
        previous, last_ns = self._known, self._last_ns
        cpu: dict[tuple[int, int], float] = {}
        for key, stat in current.items():
            before = previous.get(key)
            # a process new since the last sample used all its ticks since then
            cpu[key] = float(stat.ticks - (before.stat.ticks if before is not None else 0))
        self._known = {}
        for key, stat in current.items():
            known = previous.get(key) or _Known(stat)
            known.stat = stat
            self._known[key] = known
        self._last_ns = now_ns
        if last_ns is None or now_ns <= last_ns:
            return []
        seconds = (now_ns - last_ns) / NS_PER_SECOND
        io_grown = self._io_growth(top_keys(cpu, IO_CANDIDATES))
        chosen = top_keys(cpu, self._top)
        io_total = {key: read + write for key, (read, write) in io_grown.items()}
        chosen += [key for key in top_keys(io_total, self._top) if key not in chosen]
        return [self._point(key, cpu[key], io_grown.get(key), seconds, now_ns) for key in chosen]

    def _io_growth(
        self, candidates: list[tuple[int, int]]
    ) -> dict[tuple[int, int], tuple[int, int]]:
        """(read, write) bytes since the process's previous I/O reading, for the candidates
        whose ``io`` can be read and was read before; every reading is kept."""
        grown: dict[tuple[int, int], tuple[int, int]] = {}
        for key in candidates:
            text = _read_small(f"{self._proc}/{key[0]}/io")
            if text is None:
                continue
            try:
                io = parse_proc_io(text)
            except (ValueError, KeyError):
                continue
            known = self._known[key]
            if known.io is not None:
                grown[key] = (max(io[0] - known.io[0], 0), max(io[1] - known.io[1], 0))
            known.io = io
        return grown

    def _point(
        self,
        key: tuple[int, int],
        ticks: float,
        io_grown: tuple[int, int] | None,
        seconds: float,
        now_ns: int,
    ) -> Point:
        known = self._known[key]
        if known.tags is None:
            known.tags = self._tags(key[0], known.stat.command)
        fields: dict[str, int | float] = {
            Process.CPU_SECONDS: known.stat.ticks / self._ticks_per_second,
            Process.CPU_SECONDS_PER_SECOND: ticks / self._ticks_per_second / seconds,
            Process.PPID: float(known.stat.ppid),
        }
        if known.io is not None:
            fields[Process.READ_BYTES], fields[Process.WRITE_BYTES] = known.io
        if io_grown is not None:
            fields[Process.READ_BYTES_PER_SECOND] = io_grown[0] / seconds
            fields[Process.WRITE_BYTES_PER_SECOND] = io_grown[1] / seconds
        return Point(Process.NAME, dict(known.tags), fields, now_ns)

    def _tags(self, pid: int, command: str) -> dict[str, str]:
        tags = {Tag.PID: str(pid), Tag.COMMAND: clean_command(command) or "?"}
        status = _read_small(f"{self._proc}/{pid}/status")
        uid = parse_status_uid(status) if status is not None else None
        user = self._users(uid) if uid is not None else None
        if user:
            tags[Tag.USER] = clean_command(user)
        cgroup = _read_small(f"{self._proc}/{pid}/cgroup")
        job_id = parse_cgroup_job_id(cgroup) if cgroup is not None else None
        if job_id:
            tags[Tag.JOB_ID] = job_id
        return tags


SAMPLER = ProcessesSampler
