"""Who else is on the node: its busiest processes since the previous sample, cheaply.

Measurement ``process`` (``contract.schema.Process``): each sample, the top ``TOP``
processes by CPU seconds and the top ``TOP`` by storage bytes (read + write) since the
previous sample, one point each (a process in both lists once). Tags: ``pid``,
``command`` (``comm``), ``user`` (the real uid's name, when it resolves) and ``job_id``
(the Slurm job whose cgroup holds it, at Slurm's own places in a path of
``/proc/<pid>/cgroup`` only: ``contract.procfs.slurm_job``, the jobs sampler's rule).
Fields: the process's own counters (CPU seconds since it started,
``read_bytes``/``write_bytes``), the rates since the previous sample and the parent's pid.

What a sample costs: one ``pread`` of ``/proc/<pid>/stat`` per process (utime, stime:
the ranking by CPU), on a file kept open since the process was first seen (an open procfs
file stays bound to its process: no path lookup, no open/close, no start-time check). A
process with one thread is read through ``/proc/<pid>/schedstat`` first (the thread's run
time in ns, kept open too; the kernel makes it in half the time of a stat line): while
that has not changed the thread has not run, so it used no CPU and made no thread, and
its stat line is not read. (The run time read before each stat line is the one kept, so a
thread made after it changes it again.) A
listing of /proc only when a pid was allocated since the last listings (``loadavg``'s
last pid; otherwise the known processes are the live ones, less those whose read fails);
``/proc/<pid>/io`` (kept open too) only for the ``IO_CANDIDATES`` processes that used the
most CPU since the previous sample (a process that did I/O made system calls); and
``status`` (uid) and ``cgroup`` (job) when a process is first reported, and again when its
``(comm)`` changed (an exec or a rename) or after ``RETAG_REPORTS`` reports (a move to
another cgroup is seen within that many reports). At
most a quarter of the soft open-file limit is kept open; beyond, files are opened at each
read, with the same results.

What it cannot see:

- I/O of a process that used no CPU tick (10 ms) since the previous sample, or of one
  whose ``/proc/<pid>/io`` is not readable (another user's, without root): no I/O rate;
- a process's first sample with I/O read only gives the reading (no rate yet);
- processes that started and ended between two samples;
- CPU time in ticks (``SC_CLK_TCK``, usually 100 a second): a rate below 0.01 s a tick
  reads zero;
- a one-thread process that began running a few ms before a sample, before the
  scheduler's next tick updated its run time, is counted at the next sample (its
  cumulative CPU is not lost, only moved by one sample).

The first sample only reads (no rates, no points). A process is keyed by (pid, start
time), so a reused pid is another process. Parsers are pure functions of text.
"""

from __future__ import annotations

import logging
import os
import resource
import unicodedata
from collections.abc import Callable, Iterable

from agent.samplers.base import ProcFile, Roots
from agent.samplers.jobs import parse_proc_cgroup_job, parse_status_uid, user_name
from contract import procfs
from contract.point import Point
from contract.procfs import pid_stat_counters, pid_stat_ticks_threads, stat_name
from contract.schema import Process, Tag

log = logging.getLogger(__name__)

TOP = 5  # processes per list (CPU, storage I/O)
IO_CANDIDATES = 32  # the most CPU-active processes whose /proc/<pid>/io is read
RETAG_REPORTS = 30  # a reported process's user and job are read again after this many reports
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
NS_PER_SECOND = 1_000_000_000


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


def parse_loadavg_last_pid(text: str) -> int:
    """``/proc/loadavg``'s last field: the pid the kernel allocated last (to a process or
    a thread) in the reader's pid namespace. Raises ValueError on other text."""
    words = text.split()
    if len(words) != 5:
        raise ValueError("not a loadavg line")
    return int(words[4])


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


STAT_BUFFER = 4096  # a stat line is at most ~1.1 kB (a 15-byte name, 52 numbers)
RUNTIME_BUFFER = 128  # schedstat: three numbers
IO_BUFFER = 1024


class _Process:
    """One process between samples. ``stat_fd`` and ``io_fd`` are its ``/proc/<pid>``
    files kept open and re-read with ``pread``: an open procfs file stays bound to the
    process it was opened for (reads fail with ESRCH once it has exited, even if its pid
    is taken by a new one), so a kept file needs neither a path lookup nor a check of
    the start time at each sample."""

    __slots__ = (
        "io",
        "io_fd",
        "key",
        "one_thread",
        "reports",
        "runtime",
        "runtime_fd",
        "stat",
        "stat_fd",
        "tagged_name",
        "tags",
        "ticks",
    )

    def __init__(self, key: tuple[int, int], stat_fd: int | None, stat: bytes, ticks: int):
        self.key = key
        self.stat_fd = stat_fd
        self.stat = stat  # the latest stat line (the name and parent are read from it)
        self.ticks = ticks
        # ``schedstat`` kept open, and its line when the stat line was last read, while
        # the process has one thread (b"": stat must be read; see ProcessesSampler._scan)
        self.runtime_fd: int | None = None
        self.runtime = b""
        self.one_thread = False
        self.io_fd: int | None = None
        self.io: tuple[int, int] | None = None  # the last (read_bytes, write_bytes) read
        self.tags: dict[str, str] | None = None  # filled when first reported, and again
        self.tagged_name = b""  # when the (comm) they were read with changes (exec, rename)
        self.reports = 0  # or after RETAG_REPORTS reports (a move to another cgroup)


class ProcessesSampler:
    name = "processes"

    def __init__(
        self,
        roots: Roots,
        users: Callable[[int], str | None] = user_name,
        top: int = TOP,
        clock_ticks: int | None = None,
        open_files: int | None = None,
    ) -> None:
        self._proc = str(roots.proc)
        self._users = users
        self._user_names: dict[int, str] = {}
        self._top = top
        self._ticks_per_second = clock_ticks or os.sysconf("SC_CLK_TCK")
        # files kept open at most: a quarter of the soft open-file limit (the jobs sampler
        # keeps up to half); beyond, a file is opened at each read
        self._open_limit = (
            resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 4 if open_files is None else open_files
        )
        self._open = 0
        self._processes: dict[str, _Process] = {}  # by pid, as /proc lists it
        self._last_ns: int | None = None
        self._loadavg = ProcFile(roots.proc / "loadavg")
        self._last_pid: int | None = None  # loadavg's, when the pids were last listed
        self._listed_unchanged = False  # ... and it had not changed since the listing before
        self._own_namespace = self._in_own_pid_namespace()
        self._schedstat = True  # /proc/<pid>/schedstat is there (CONFIG_SCHED_INFO)

    def _in_own_pid_namespace(self) -> bool:
        """Whether the /proc read is of this process's own pid namespace (``self`` is this
        process's pid there): only then does its ``loadavg`` tell about its pids."""
        try:
            return os.readlink(f"{self._proc}/self") == str(os.getpid())
        except OSError:
            return False

    def available(self) -> bool:
        for pid in self._pids():
            if _read_small(f"{self._proc}/{pid}/stat") is not None:
                return True
        log.info("processes sampler off: no readable %s/<pid>/stat", self._proc)
        return False

    def _pids_now(self) -> list[str] | Iterable[str]:
        """The pids to read: /proc's listing, or the pids known from the previous sample
        when no pid was allocated since the last two listings (``loadavg``'s last pid
        unchanged: no process or thread was created; those that ended fail to read)."""
        text = self._loadavg.read() if self._own_namespace else None
        try:
            last_pid = parse_loadavg_last_pid(text) if text is not None else None
        except ValueError:
            last_pid = None
        unchanged = last_pid is not None and last_pid == self._last_pid
        if unchanged and self._listed_unchanged:
            return list(self._processes)
        # a pid is allocated a moment before its process shows in /proc: skip listing only
        # once a listing was taken a whole interval after the last allocation
        self._listed_unchanged = unchanged
        self._last_pid = last_pid
        return self._pids()

    def _pids(self) -> list[str]:
        try:
            return [name for name in os.listdir(self._proc) if name.isdigit()]
        except OSError:
            return []

    def _scan(self) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], _Process]]:
        """Reads every process's stat: the CPU ticks each used since the previous sample
        (a process new since then: all its ticks), for those that used any, and each
        busy process's state."""
        before, now = self._processes, {}
        busy: dict[tuple[int, int], int] = {}
        busy_processes: dict[tuple[int, int], _Process] = {}
        pread = os.pread
        for pid in self._pids_now():
            process = before.pop(pid, None)
            data = runtime = b""
            if process is not None and process.stat_fd is not None:
                if process.one_thread and process.runtime_fd is not None:
                    try:
                        runtime = pread(process.runtime_fd, RUNTIME_BUFFER, 0)
                    except OSError:
                        runtime = b""
                    if runtime and runtime == process.runtime:  # one thread, not run since
                        now[pid] = process
                        continue
                try:
                    data = pread(process.stat_fd, STAT_BUFFER, 0)
                except OSError:
                    data = b""  # it exited; its pid may be another process's now
                if data and data == process.stat:  # idle: the same line as last time
                    process.runtime = runtime
                    now[pid] = process
                    continue
            try:
                if data:
                    ticks, threads = pid_stat_ticks_threads(data)
                else:
                    reopened, data, ticks = self._reopen(pid, process)
                    if reopened is not process:  # another process: not its schedstat
                        process, runtime = reopened, b""
                    threads = pid_stat_ticks_threads(data)[1]
            except (OSError, ValueError):
                self._forget(process)
                continue  # ended meanwhile, or a damaged line
            process.one_thread = threads == 1
            # schedstat as read *before* this stat line: compared at the next sample
            process.runtime = runtime if process.one_thread else b""
            if process.one_thread and process.runtime_fd is None and process.stat_fd is not None:
                process.runtime_fd = self._open_runtime(pid)
            process.stat = data
            if ticks > process.ticks:
                busy[process.key] = ticks - process.ticks
                busy_processes[process.key] = process
            process.ticks = ticks
            now[pid] = process
        for gone in before.values():
            self._forget(gone)
        self._processes = now
        return busy, busy_processes

    def _open_runtime(self, pid: str) -> int | None:
        """``<pid>/schedstat`` opened and kept, or None (not kept, or no such file)."""
        if not self._schedstat:
            return None
        fd = self._open_file(f"{self._proc}/{pid}/schedstat")
        if fd is None:
            # stat there, schedstat not: a kernel without CONFIG_SCHED_INFO
            self._schedstat = not os.path.exists(f"{self._proc}/{pid}/stat")
            return None
        if not self._keep(fd):
            os.close(fd)
            return None
        return fd

    def _reopen(self, pid: str, process: _Process | None) -> tuple[_Process, bytes, int]:
        """Reads ``<pid>/stat`` by its path: the process it belongs to now (``process``
        when still the same one, by its start time), the line and its CPU ticks. Raises
        OSError or ValueError when there is no such process any more."""
        fd, data, (_, ticks, start) = self._open_stat(pid)
        key = (int(pid), start)
        if process is not None and process.key == key:
            self._close(process.stat_fd)
            process.stat_fd = fd
            return process, data, ticks
        self._forget(process)
        return _Process(key, fd, data, 0), data, ticks

    def _open_stat(self, pid: str) -> tuple[int | None, bytes, tuple[int, int, int]]:
        """Opens and reads ``<pid>/stat``: the descriptor when kept, the line and its
        numbers. Raises OSError or ValueError when the process is gone."""
        fd = os.open(f"{self._proc}/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.pread(fd, STAT_BUFFER, 0)
            numbers = pid_stat_counters(data)
        except (OSError, ValueError):
            os.close(fd)
            raise
        if self._keep(fd):
            return fd, data, numbers
        os.close(fd)
        return None, data, numbers

    def _open_file(self, path: str) -> int | None:
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None

    def _keep(self, fd: int) -> bool:
        """Whether ``fd`` stays open (counted): within the limit and a procfs file (size
        0, regenerated at each read; a regular file, as in a captured tree, is opened at
        each read so that a replaced one is seen)."""
        if self._open < self._open_limit and os.fstat(fd).st_size == 0:
            self._open += 1
            return True
        return False

    def _close(self, fd: int | None) -> None:
        if fd is not None:
            os.close(fd)
            self._open -= 1

    def _forget(self, process: _Process | None) -> None:
        if process is not None:
            self._close(process.stat_fd)
            self._close(process.io_fd)
            self._close(process.runtime_fd)
            process.stat_fd = process.io_fd = process.runtime_fd = None
            process.runtime = b""

    def sample(self, now_ns: int) -> list[Point]:
        cpu, processes = self._scan()
        last_ns, self._last_ns = self._last_ns, now_ns
        if last_ns is None or now_ns <= last_ns:
            return []
        seconds = (now_ns - last_ns) / NS_PER_SECOND
        io_grown = self._io_growth([processes[key] for key in top_keys(cpu, IO_CANDIDATES)])
        chosen = top_keys(cpu, self._top)
        io_total = {key: read + write for key, (read, write) in io_grown.items()}
        chosen += [key for key in top_keys(io_total, self._top) if key not in chosen]
        return [
            self._point(processes[key], cpu[key], io_grown.get(key), seconds, now_ns)
            for key in chosen
        ]

    def _io_growth(self, candidates: list[_Process]) -> dict[tuple[int, int], tuple[int, int]]:
        """(read, write) bytes since the process's previous I/O reading, for the candidates
        whose ``io`` can be read and was read before; every reading is kept."""
        grown: dict[tuple[int, int], tuple[int, int]] = {}
        for process in candidates:
            io = self._read_io(process)
            if io is None:
                continue
            if process.io is not None:
                grown[process.key] = (max(io[0] - process.io[0], 0), max(io[1] - process.io[1], 0))
            process.io = io
        return grown

    def _read_io(self, process: _Process) -> tuple[int, int] | None:
        fd = process.io_fd
        if fd is None:
            fd = self._open_file(f"{self._proc}/{process.key[0]}/io")
            if fd is None:
                return None  # gone, or not ours to read
            if self._keep(fd):
                process.io_fd = fd
        try:
            data = os.pread(fd, IO_BUFFER, 0)
        except OSError:
            return None
        finally:
            if fd != process.io_fd:
                os.close(fd)
        try:
            return procfs.pid_io_counters(data)
        except ValueError:
            return None

    def _point(
        self,
        process: _Process,
        ticks: float,
        io_grown: tuple[int, int] | None,
        seconds: float,
        now_ns: int,
    ) -> Point:
        name = stat_name(process.stat)
        if process.tags is None or name != process.tagged_name or process.reports >= RETAG_REPORTS:
            process.tags = self._tags(process.key[0], process.stat)
            process.tagged_name, process.reports = name, 0
        process.reports += 1
        fields: dict[str, int | float] = {
            Process.CPU_SECONDS: process.ticks / self._ticks_per_second,
            Process.CPU_SECONDS_PER_SECOND: ticks / self._ticks_per_second / seconds,
            Process.PPID: float(pid_stat_counters(process.stat)[0]),
        }
        if process.io is not None:
            fields[Process.READ_BYTES], fields[Process.WRITE_BYTES] = process.io
        if io_grown is not None:
            fields[Process.READ_BYTES_PER_SECOND] = io_grown[0] / seconds
            fields[Process.WRITE_BYTES_PER_SECOND] = io_grown[1] / seconds
        return Point(Process.NAME, dict(process.tags), fields, now_ns)

    def _user(self, uid: int) -> str | None:
        """The name of ``uid``, looked up once (a uid that does not resolve is looked up
        again next time: a directory service may know it later)."""
        name = self._user_names.get(uid)
        if name is None:
            name = self._users(uid)
            if name is not None:
                self._user_names[uid] = name
        return name

    def _tags(self, pid: int, stat: bytes) -> dict[str, str]:
        command = procfs.parse_stat(stat.decode(errors="replace")).command
        tags = {Tag.PID: str(pid), Tag.COMMAND: clean_command(command) or "?"}
        status = _read_small(f"{self._proc}/{pid}/status")
        uid = parse_status_uid(status) if status is not None else None
        user = self._user(uid) if uid is not None else None
        if user:
            tags[Tag.USER] = clean_command(user)
        cgroup = _read_small(f"{self._proc}/{pid}/cgroup")
        job_id = parse_proc_cgroup_job(cgroup) if cgroup is not None else None
        if job_id:
            tags[Tag.JOB_ID] = job_id
        return tags


SAMPLER = ProcessesSampler
