"""One parser per ``/proc`` file and cgroup fact, shared by the agent and the workloads.

Why here, in ``contract``: the agent may import only ``contract`` and ``netserve``
(docs/layout.md, tests/test_layering.py) and ``workloads/record`` must agree with the
agent on what a process's stat line, I/O counters, Slurm job and memory limit *are*
(one quantity, one parser). The functions are pure (text in, named tuple out), as
``contract.cpulist`` is for CPU lists; the only reader, :func:`memory_limit_bytes`,
takes the cgroup root as a parameter so tests point it at captured trees.

A Slurm job is found in a cgroup path only where Slurm puts it, anchored:

- cgroup v1: ``/slurm[_<node>]/uid_<uid>/job_<id>/...`` (a controller's hierarchy);
- cgroup v2: ``/system.slice/[<node>_]slurmstepd.scope/job_<id>/...`` (the unified
  tree; ``<node>_`` where slurmd runs several nodes on one host).

A ``job_<id>`` anywhere else (a user's ``/user.slice/.../job_4242``) is not a job.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

UNLIMITED_MEMORY_FLOOR = 1 << 62  # v1 writes "no limit" as ~2^63 rounded to a page
_V1_JOB = re.compile(r"(?:^|/)slurm(?:_[^/]+)?/uid_([0-9]+)/job_([0-9A-Za-z]+)(?:/|$)")
_V2_JOB = re.compile(r"(?:^|/)system\.slice/(?:[^/]+_)?slurmstepd\.scope/job_([0-9A-Za-z]+)(?:/|$)")


class ProcStat(NamedTuple):
    """What one ``/proc/<pid>/stat`` line tells (man 5 proc)."""

    command: str  # comm: at most 15 bytes, may hold spaces and parentheses
    state: str
    ppid: int
    ticks: int  # utime + stime, clock ticks
    children_ticks: int  # cutime + cstime of reaped children, clock ticks
    threads: int
    start: int  # starttime, ticks after boot: with the pid, the process's identity


class ProcIo(NamedTuple):
    """``/proc/<pid>/io``: ``rchar`` (bytes read by syscalls, page cache included) and
    ``read_bytes``/``write_bytes`` (what the process caused storage to fetch/write)."""

    rchar: int
    read_bytes: int
    write_bytes: int


class CgroupLine(NamedTuple):
    """One ``/proc/<pid>/cgroup`` line: ``<hierarchy id>:<controllers>:<path>``."""

    hierarchy: int
    controllers: tuple[str, ...]  # () for the v2 line
    path: str


class SlurmJob(NamedTuple):
    """The Slurm job a cgroup path lies in; ``uid`` only v1's path says."""

    job_id: str
    uid: int | None


def parse_stat(text: str) -> ProcStat:
    """``/proc/<pid>/stat``. The name runs to the *last* ')'; fields are counted after
    it. Raises ValueError on a damaged or short line."""
    opening, closing = text.find("("), text.rfind(")")
    if opening < 0 or closing < opening:
        raise ValueError("no (comm) in stat")
    words = text[closing + 2 :].split()
    if len(words) < 20:
        raise ValueError(f"short stat line: {len(words)} fields after the name, 20 needed")
    # after the name, from 0: state(0) ppid(1) ... utime(11) stime(12) cutime(13)
    # cstime(14) ... num_threads(17) ... starttime(19)
    return ProcStat(
        command=text[opening + 1 : closing],
        state=words[0],
        ppid=int(words[1]),
        ticks=int(words[11]) + int(words[12]),
        children_ticks=int(words[13]) + int(words[14]),
        threads=int(words[17]),
        start=int(words[19]),
    )


# The stat line as bytes, for the processes sampler's every-tick reads (no decoding, only
# the numbers it needs); the field positions are parse_stat's.


def stat_name(data: bytes) -> bytes:
    """The ``(comm)`` of a ``/proc/<pid>/stat`` line, as bytes: compared at each report to
    see a rename or an exec without decoding the line."""
    return data[data.find(b"(") + 1 : data.rfind(b")")]


def _words_after_name(data: bytes, needed: int) -> list[bytes]:
    """The words of a ``/proc/<pid>/stat`` line after ``(comm)``, at least ``needed`` of
    them (the rest left in the last). Raises ValueError on a damaged line."""
    closing = data.rfind(b")")
    if closing < 0:
        raise ValueError("no (comm) in stat")
    words = data[closing + 2 :].split(None, needed)
    if len(words) < needed:
        raise ValueError("short stat line")
    return words


def pid_stat_counters(data: bytes) -> tuple[int, int, int]:
    """The numbers of a ``/proc/<pid>/stat`` line read every tick, as bytes: (ppid, CPU
    ticks (utime + stime), start time); what :func:`parse_stat` gives, without the
    name and without decoding. Raises ValueError on a damaged line."""
    words = _words_after_name(data, 20)
    return int(words[1]), int(words[11]) + int(words[12]), int(words[19])


def pid_stat_ticks_threads(data: bytes) -> tuple[int, int]:
    """(CPU ticks (utime + stime), number of threads) of a ``/proc/<pid>/stat`` line.
    Raises ValueError on a damaged line."""
    words = _words_after_name(data, 18)
    return int(words[11]) + int(words[12]), int(words[17])


def pid_io_counters(data: bytes) -> tuple[int, int]:
    """``(read_bytes, write_bytes)`` of a ``/proc/<pid>/io`` text as bytes, read every
    tick: what :func:`parse_io` gives, without splitting every line or decoding. Raises
    ValueError without them (a kernel without task I/O accounting)."""
    return _io_value(data, b"\nread_bytes:"), _io_value(data, b"\nwrite_bytes:")


def _io_value(data: bytes, key: bytes) -> int:
    # anchored at a line start: "cancelled_write_bytes:" is not "write_bytes:"
    if data.startswith(key[1:]):
        start = len(key) - 1
    elif (found := data.find(key)) >= 0:
        start = found + len(key)
    else:
        raise ValueError(f"no {key[1:-1].decode()} in io")
    end = data.find(b"\n", start)
    return int(data[start : end if end >= 0 else None])


def parse_io(text: str) -> ProcIo:
    """``/proc/<pid>/io`` (``name: value`` lines). Raises KeyError without
    ``read_bytes``/``write_bytes`` (a kernel without task I/O accounting)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        value = value.strip()
        if value.isdigit():
            values[name.strip()] = int(value)
    return ProcIo(values.get("rchar", 0), values["read_bytes"], values["write_bytes"])


def parse_environ(data: bytes) -> dict[str, str]:
    """``/proc/<pid>/environ``: NUL-separated ``NAME=value`` pairs."""
    environment: dict[str, str] = {}
    for entry in data.split(b"\0"):
        name, equals, value = entry.partition(b"=")
        if equals and name:
            environment[name.decode(errors="replace")] = value.decode(errors="replace")
    return environment


def parse_cgroup(text: str) -> list[CgroupLine]:
    """``/proc/<pid>/cgroup``; lines that do not have three fields are skipped."""
    lines = []
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3 or not fields[0].isdigit():
            continue
        controllers = tuple(name for name in fields[1].split(",") if name)
        lines.append(CgroupLine(int(fields[0]), controllers, fields[2]))
    return lines


def slurm_job_of_path(path: str) -> SlurmJob | None:
    """The Slurm job of one cgroup path, only at Slurm's own places (module docstring)."""
    match = _V1_JOB.search(path)
    if match:
        return SlurmJob(match.group(2), int(match.group(1)))
    match = _V2_JOB.search(path)
    if match:
        return SlurmJob(match.group(1), None)
    return None


def slurm_job(text: str) -> SlurmJob | None:
    """The Slurm job of a process from its ``/proc/<pid>/cgroup``, or None."""
    for line in parse_cgroup(text):
        job = slurm_job_of_path(line.path)
        if job is not None:
            return job
    return None


def parse_memory_limit(text: str) -> int | None:
    """A memory cgroup's limit file (v2 ``memory.max``, v1 ``memory.limit_in_bytes``):
    bytes, or None for no limit ("max", or v1's ~2^63)."""
    value = text.strip()
    if value == "max":
        return None
    limit = int(value)
    return None if limit >= UNLIMITED_MEMORY_FLOOR else limit


def memory_limit_bytes(cgroup_text: str, cgroup_root: Path) -> int | None:
    """The memory limit a process lives under: from its cgroup (``cgroup_text``, its
    ``/proc/<pid>/cgroup``) up to the root, the smallest limit set in the memory
    hierarchy (v1 ``<root>/memory/<path>``, v2 ``<root>/<path>`` or
    ``<root>/unified/<path>``). None when no ancestor sets one or none is readable."""
    limits: list[int] = []
    for line in parse_cgroup(cgroup_text):
        if line.controllers and "memory" not in line.controllers:
            continue
        if line.controllers:
            bases, name = [cgroup_root / "memory"], "memory.limit_in_bytes"
        else:
            bases, name = [cgroup_root, cgroup_root / "unified"], "memory.max"
        for base in bases:
            directory = base / line.path.lstrip("/")
            while True:
                try:
                    limit = parse_memory_limit((directory / name).read_text())
                except (OSError, ValueError):
                    limit = None
                if limit is not None:
                    limits.append(limit)
                if directory == base:
                    break
                directory = directory.parent
    return min(limits) if limits else None
