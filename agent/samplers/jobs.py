"""Every Slurm job on this node, from its cgroup: what it uses and who it is.

Measurements ``job`` (usage, tag ``job_id``) and ``slurm_job`` (one info series per job:
``uid``, ``user``, ``account``, ``partition``, ``gpus`` as tags, value 1, and what the
job was given). Fields: ``contract.schema.Job`` and ``JobInfo``; the whole story, with
what the agent cannot see, is in docs/slurm.md.

Where the jobs are (``<cgroup>`` is ``Roots.cgroup_root``, ``/sys/fs/cgroup``):

- cgroup v1 (``CgroupPlugin=cgroup/v1``): ``<cgroup>/<controller>/slurm[_<node>]/
  uid_<uid>/job_<id>/step_<step>/task_<n>``, for the controllers ``cpuacct``, ``memory``,
  ``cpuset`` and ``blkio`` (also when mounted together, ``cpu,cpuacct``);
- cgroup v2: ``<cgroup>[/unified]/system.slice/[<node>_]slurmstepd.scope/job_<id>/
  step_<step>/{slurm,user/task_<n>}``; the uid is that of a task process.

A job is a ``job_<id>`` directory; ``<id>`` is taken as Slurm spells it (digits, or a
letter-and-digit SLUID). A job whose directory is gone is not reported, and everything
the sampler kept about it is dropped. The parse functions below are pure functions of
text (``/proc`` files through ``contract.procfs``); the walk over the tree takes the root
as a parameter.

What is trusted: the cgroup (which job, and v1's uid) and the kernel's uid of the job's
processes over their environment, which any process may set. An environment is read only
from a process whose ``SLURM_JOB_ID`` is its cgroup's job (a disagreement is logged
once); ``SLURM_JOB_USER`` is stored only when it is the uid's name (or no uid is known);
``SLURM_JOB_UID`` only when no process's uid is readable. The GPUs come from that
environment alone (the sampler does not read the devices controller), so they are the
job's own word, from a process that lies in the job's cgroup.

A tick is cheap (docs/slurm.md, "Cost"; docs/performance.md, "Per-job sampling"): the scan
for jobs is redone only when a directory it listed gained or lost an entry (``signature``);
every file read at each tick is kept open and re-read with ``pread`` (``JobFiles``,
``FileBudget``) but ``cgroup.procs``, which cgroup v1 would serve stale from a kept file:
it is opened at each read, relative to its directory, which is kept open and whose
``fstat`` tells whether the job's subtree changed; a job process's ``stat`` and ``io`` are
parsed only when their bytes changed, and who the job is (its ``slurm_job`` tags) is
worked out once.
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import resource
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agent.samplers.base import PAGE_BYTES, ProcFile, Roots, read_text
from contract import procfs
from contract.cpulist import parse_cpu_list
from contract.point import Point
from contract.schema import Job, JobInfo, Tag

log = logging.getLogger(__name__)

V1_CONTROLLERS = ("cpuacct", "memory", "cpuset", "blkio")
_SLURM_DIR = re.compile(r"slurm(?:_[^/]+)?")
_UID_DIR = re.compile(r"uid_([0-9]+)")
_JOB_DIR = re.compile(r"job_([0-9A-Za-z]+)")
_STEPD_SCOPE = re.compile(r".*slurmstepd\.scope")
# The environment variables that name a job's GPUs, most specific first: SLURM_JOB_GPUS
# holds the node's own indices; CUDA_VISIBLE_DEVICES is renumbered from 0 when Slurm
# constrains devices (or holds UUIDs), so it is the last resort.
GPU_VARIABLES = ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class JobCgroup:
    """Where one job's cgroup is: one directory per v1 controller, or the v2 one."""

    job_id: str
    version: int  # 1 or 2
    dirs: dict[str, Path]  # v1: controller -> job dir; v2: {"": job dir}
    uid: int | None = None  # from uid_<uid> (v1 only)


@dataclass(frozen=True)
class ProcessIo:
    """One process's ``/proc/<pid>/io`` bytes and its parent."""

    ppid: int
    read_bytes: int
    write_bytes: int


# ---------------------------------------------------------------- parse functions


def parse_int(text: str) -> int:
    """A one-number cgroup file (``cpuacct.usage``, ``memory.current``)."""
    return int(text.strip())


def parse_flat_keyed(text: str) -> dict[str, int]:
    """``memory.stat``, ``cpu.stat``, ``cpuacct.stat``: "key value" lines."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[1].isdigit():
            values[words[0]] = int(words[1])
    return values


def parse_blkio(text: str) -> tuple[int, int]:
    """``blkio.throttle.io_service_bytes[_recursive]``: (read, write) over all devices.

    Rows are "<major>:<minor> Read|Write|Sync|Async|Discard|Total <bytes>"; the last
    line, "Total <bytes>", is the sum of everything and is skipped.
    """
    read = write = 0
    for line in text.splitlines():
        words = line.split()
        if len(words) != 3 or ":" not in words[0] or not words[2].isdigit():
            continue
        if words[1] == "Read":
            read += int(words[2])
        elif words[1] == "Write":
            write += int(words[2])
    return read, write


def parse_io_stat(text: str) -> tuple[int, int]:
    """v2 ``io.stat``: (rbytes, wbytes) summed over the device rows."""
    read = write = 0
    for line in text.splitlines():
        for word in line.split()[1:]:
            key, equals, value = word.partition("=")
            if equals and value.isdigit():
                if key == "rbytes":
                    read += int(value)
                elif key == "wbytes":
                    write += int(value)
    return read, write


def parse_pids(text: str | bytes) -> list[int]:
    """``cgroup.procs`` / ``tasks``: one pid a line (as text, or as the bytes read)."""
    return [int(line) for line in text.split() if line.isdigit()]


def parse_status_uid(text: str) -> int | None:
    """``/proc/<pid>/status``: the real uid (first number of the ``Uid:`` line)."""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            words = line.split()
            return int(words[1]) if len(words) > 1 and words[1].isdigit() else None
    return None


def job_of_cgroup_path(path: str) -> str | None:
    """The Slurm job a cgroup path lies in, at Slurm's own places only
    (:func:`contract.procfs.slurm_job_of_path`), else None."""
    job = procfs.slurm_job_of_path(path)
    return job.job_id if job is not None else None


def parse_proc_cgroup_job(text: str) -> str | None:
    """``/proc/<pid>/cgroup``: the process's Slurm job (:func:`contract.procfs.slurm_job`)."""
    job = procfs.slurm_job(text)
    return job.job_id if job is not None else None


def gpus_from_environment(environment: dict[str, str]) -> list[str] | None:
    """The job's GPUs as its environment names them (indices or ``GPU-<uuid>``s).

    None when no variable names any: no GPUs, or not said. ``NoDevFiles`` (Slurm's
    word for "GPUs requested, none bound") and empty lists are no GPUs.
    """
    for name in GPU_VARIABLES:
        value = environment.get(name)
        if value is None:
            continue
        gpus = [gpu.strip() for gpu in value.split(",") if gpu.strip()]
        if gpus and gpus != ["NoDevFiles"]:
            return gpus
        return []
    return None


def exited_io(
    previous: dict[tuple[int, int], ProcessIo], current: dict[tuple[int, int], ProcessIo]
) -> tuple[int, int]:
    """Bytes of processes that left between two readings and that the job must keep.

    A process reaped by a parent that is still in the job hands its counts to that
    parent (the kernel adds a reaped child's I/O to its parent's ``/proc/<pid>/io``):
    counting it again would count it twice. Any other process that left took its
    counts with it: the job keeps the last reading of them. Keys are (pid, starttime),
    so a reused pid is another process.
    """
    alive = {pid for pid, _ in current}
    read = write = 0
    for key, io in previous.items():
        if key in current or io.ppid in alive:
            continue
        read += io.read_bytes
        write += io.write_bytes
    return read, write


# ---------------------------------------------------------------- the tree


def _controller_dirs(root: Path, controller: str, seen: Seen | None = None) -> list[Path]:
    """The v1 hierarchy holding ``controller``: ``<root>/cpuacct`` or ``cpu,cpuacct``."""
    direct = root / controller
    if direct.is_dir():
        return [direct]
    if seen is not None:
        seen[str(root)] = signature(str(root))
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    return [Path(e.path) for e in entries if controller in e.name.split(",") and e.is_dir()]


Signature = tuple[int, int] | None  # a directory's (mtime_ns, nlink); None: not there


def signature(path: str) -> Signature:
    """What changes when a directory gains or loses an entry. On cgroupfs (kernfs) a
    directory's mtime stays put when a child cgroup is made or removed, but its link
    count follows its subdirectories; on a plain file system (captured trees) both do."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_nlink)


Seen = dict[str, Signature]  # the directories a scan listed, with their signatures


def _subdirs(
    path: Path, pattern: re.Pattern[str], seen: Seen | None = None
) -> Iterator[tuple[Path, re.Match[str]]]:
    if seen is not None:
        seen[str(path)] = signature(str(path))
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match and entry.is_dir(follow_symlinks=False):
            yield Path(entry.path), match


def find_jobs_v1(root: Path, seen: Seen | None = None) -> dict[str, JobCgroup]:
    """The jobs under the v1 hierarchies of ``root`` (a cgroup root), by job id;
    ``seen`` gets every directory listed."""
    dirs: dict[str, dict[str, Path]] = {}
    uids: dict[str, int] = {}
    for controller in V1_CONTROLLERS:
        for hierarchy in _controller_dirs(root, controller, seen):
            for slurm, _ in _subdirs(hierarchy, _SLURM_DIR, seen):
                for user, uid_match in _subdirs(slurm, _UID_DIR, seen):
                    for job, job_match in _subdirs(user, _JOB_DIR, seen):
                        job_id = job_match.group(1)
                        dirs.setdefault(job_id, {})[controller] = job
                        uids[job_id] = int(uid_match.group(1))
    return {
        job_id: JobCgroup(job_id, 1, controllers, uids.get(job_id))
        for job_id, controllers in dirs.items()
    }


def v2_roots(root: Path) -> list[Path]:
    """Where a unified hierarchy may be: ``root`` itself (pure v2) or ``root/unified``."""
    return [root, root / "unified"]


def find_jobs_v2(root: Path, seen: Seen | None = None) -> dict[str, JobCgroup]:
    """The jobs under ``[<node>_]slurmstepd.scope`` of the unified hierarchy."""
    jobs: dict[str, JobCgroup] = {}
    for unified in v2_roots(root):
        for scope, _ in _subdirs(unified / "system.slice", _STEPD_SCOPE, seen):
            for job, match in _subdirs(scope, _JOB_DIR, seen):
                jobs.setdefault(match.group(1), JobCgroup(match.group(1), 2, {"": job}))
    return jobs


def find_jobs(root: Path, seen: Seen | None = None) -> dict[str, JobCgroup]:
    """Every job under ``root``; a job seen in both (hybrid mounts) is taken from v1."""
    return {**find_jobs_v2(root, seen), **find_jobs_v1(root, seen)}


def unchanged(seen: Seen) -> bool:
    """Has no directory a scan listed gained or lost an entry (or come or gone) since?"""
    return all(signature(path) == before for path, before in seen.items())


def slurm_cgroups_present(root: Path) -> bool:
    """Has Slurm made its cgroups here (jobs or not)?"""
    for controller in V1_CONTROLLERS:
        for hierarchy in _controller_dirs(root, controller):
            if any(True for _ in _subdirs(hierarchy, _SLURM_DIR)):
                return True
    return any(
        any(True for _ in _subdirs(unified / "system.slice", _STEPD_SCOPE))
        for unified in v2_roots(root)
    )


def slurmd_running(proc: Path) -> bool:
    """Is a process called slurmd or slurmstepd running (``<proc>/<pid>/comm``)?"""
    try:
        entries = [e.name for e in os.scandir(proc) if e.name.isdigit()]
    except OSError:
        return False
    return any(
        (read_text(proc / pid / "comm") or "").strip() in ("slurmd", "slurmstepd")
        for pid in entries
    )


def job_top(job: JobCgroup) -> Path:
    """Where the job's processes are listed: v1 the hierarchy its CPU time is read from
    (``cpuacct``, else ``memory``: ``cpuset`` also holds slurmstepd in its step cgroups);
    v2 the job's one directory (slurmstepd in ``step_<s>/slurm`` included, as its CPU
    time is)."""
    top = next((job.dirs[c] for c in ("cpuacct", "memory", "") if c in job.dirs), None)
    return top if top is not None else next(iter(job.dirs.values()))


def walk_cgroups(top: str, seen: Seen) -> list[str]:
    """Every directory of the subtree at ``top`` (``top`` first), each one's signature
    in ``seen`` taken before it is listed, so that a change after is seen next time."""
    seen[top] = signature(top)
    try:
        entries = list(os.scandir(top))
    except OSError:
        return []
    found = [top]
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            found += walk_cgroups(entry.path, seen)
    return found


def lists_processes(job: JobCgroup) -> bool:
    """Whether the job's cgroup lists its processes (a live cgroup file system always
    does: ``cgroup.procs``), so that none listed means none is left."""
    return any((Path(directory) / "cgroup.procs").is_file() for directory in job.dirs.values())


# ---------------------------------------------------------------- the sampler


def user_name(uid: int) -> str | None:
    """The name of ``uid`` on this host, or None."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _parse(text: str | None, parse: Callable[[str], object]) -> object | None:
    if text is None:
        return None
    try:
        return parse(text)
    except (ValueError, IndexError, KeyError):
        return None


def _read(path: Path, parse: Callable[[str], object]) -> object | None:
    return _parse(read_text(path), parse)


Reader = Callable[[str, str], "str | None"]  # (controller, file name) -> the file's text


class FileBudget:
    """Opens the files read at every tick (``ProcFile``: kept open, re-read with pread),
    keeping at most ``limit`` of them open: half the process's soft open-file limit by
    default, so that thousands of job processes cannot exhaust it; beyond, files are
    opened at each read as before."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2 if limit is None else limit
        self.kept = 0

    def open(self, path: Path) -> ProcFile:
        keep = self.kept < self.limit
        self.kept += keep
        return ProcFile(path, keep=keep)

    def close(self, file: ProcFile) -> None:
        self.kept -= file.keep
        file.close()

    def open_directory(self, path: str) -> int | None:
        """A directory kept open (``O_DIRECTORY``) within the budget, else None."""
        if self.kept >= self.limit:
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        self.kept += 1
        return fd

    def close_directory(self, fd: int) -> None:
        self.kept -= 1
        os.close(fd)


class JobFiles:
    """One job's cgroup files, opened once, and the directories of its subtree, listed
    again only when one of them gains or loses a subdirectory (``signature``)."""

    def __init__(self, job: JobCgroup, budget: FileBudget) -> None:
        self.job = job
        self.lists_processes = lists_processes(job)
        self._budget = budget
        self._files: dict[tuple[str, str], ProcFile] = {}
        self._top = str(job_top(job))
        self._tree: Seen = {}
        # each directory of the subtree kept open (within the budget): its signature is
        # an fstat and its cgroup.procs opened relative to it, without a path lookup
        self._directory_fds: dict[str, int] = {}
        self._procs: list[tuple[str, int | None, bool]] = []  # (directory, fd, of a task_<n>)

    def read(self, controller: str, name: str) -> str | None:
        file = self._files.get((controller, name))
        if file is None:
            file = self._budget.open(self.job.dirs[controller] / name)
            self._files[(controller, name)] = file
        return file.read()

    def pids(self) -> tuple[list[int], list[int]]:
        """(every pid in the job's cgroups, the pids in its ``task_<n>`` cgroups: the
        job's own processes)."""
        if not self._tree or not self._tree_unchanged():
            self._list_tree()
        every: set[int] = set()
        tasks: list[int] = []
        for directory, directory_fd, of_task in self._procs:
            pids = parse_pids(_read_procs(directory, directory_fd))
            every.update(pids)
            if of_task:
                tasks.extend(pid for pid in pids if pid not in tasks)
        return sorted(every), tasks

    def _tree_unchanged(self) -> bool:
        """``unchanged(self._tree)``, by fstat of the directories kept open."""
        fds = self._directory_fds
        for directory, before in self._tree.items():
            fd = fds.get(directory)
            if fd is None:
                now = signature(directory)
            else:
                try:
                    info = os.fstat(fd)
                except OSError:
                    return False
                now = (info.st_mtime_ns, info.st_nlink)
            if now != before:
                return False
        return True

    def _list_tree(self) -> None:
        self._close_directories()
        self._tree = {}
        # cgroup.procs is opened at each read, never kept: cgroup v1 serves an open
        # cgroup.procs the pid list of its first read again until a second passes unread
        # (its pidlist cache), so a kept file re-read every tick under that would list
        # ended processes. Its directory is kept open instead.
        procs = []
        for directory in walk_cgroups(self._top, self._tree):
            if os.path.isfile(os.path.join(directory, "cgroup.procs")):
                fd = self._budget.open_directory(directory)
                if fd is not None:
                    self._directory_fds[directory] = fd
                procs.append((directory, fd, _is_task(directory)))
        self._procs = procs

    def _close_directories(self) -> None:
        for fd in self._directory_fds.values():
            self._budget.close_directory(fd)
        self._directory_fds.clear()
        self._procs = []

    def close(self) -> None:
        for file in self._files.values():
            self._budget.close(file)
        self._files.clear()
        self._close_directories()


PROCS_BUFFER = 16384


def _read_procs(directory: str, directory_fd: int | None) -> bytes:
    """A cgroup's ``cgroup.procs``, opened now (relative to its open directory when there
    is one); empty when it cannot be read (the cgroup went)."""
    try:
        if directory_fd is None:
            fd = os.open(os.path.join(directory, "cgroup.procs"), os.O_RDONLY | os.O_CLOEXEC)
        else:
            fd = os.open("cgroup.procs", os.O_RDONLY | os.O_CLOEXEC, dir_fd=directory_fd)
    except OSError:
        return b""
    try:
        chunks = [os.read(fd, PROCS_BUFFER)]
        while len(chunks[-1]) == PROCS_BUFFER:  # a short read is the end (seq_file)
            chunks.append(os.read(fd, PROCS_BUFFER))
        return b"".join(chunks)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _is_task(directory: str) -> bool:
    return os.path.basename(directory).startswith("task_")


def job_pids(job: JobCgroup) -> tuple[list[int], list[int]]:
    """(every pid in the job's cgroups, the pids in its ``task_<n>`` cgroups), read once."""
    files = JobFiles(job, FileBudget(0))
    try:
        return files.pids()
    finally:
        files.close()


@dataclass
class _JobState:
    processes: dict[tuple[int, int], ProcessIo] = field(default_factory=dict)
    carried_read: int = 0
    carried_write: int = 0
    last_read: int = 0
    last_write: int = 0
    environment: dict[str, str] | None = None  # SLURM_* of a job process, once read
    pid_files: dict[int, tuple[ProcFile, ProcFile]] = field(default_factory=dict)  # stat, io
    # each process's last (stat bytes, io bytes) and what they gave: an idle process's
    # unchanged files are not parsed again
    pid_readings: dict[int, tuple[bytes, bytes, tuple[int, int], ProcessIo]] = field(
        default_factory=dict
    )
    uid: int | None = None  # of the job's processes (v2), once read: it does not change
    allocation_texts: tuple[str | None, str | None] | None = None  # cpuset, memory limit
    allocation: dict[str, int | float] = field(default_factory=dict)  # parsed from them
    # the slurm_job tags and GPU fields, once the environment is read (they follow from it
    # and the uid alone)
    info: tuple[dict[str, str], dict[str, int | float]] | None = None


class JobsSampler:
    name = "jobs"

    def __init__(
        self,
        roots: Roots,
        users: Callable[[int], str | None] = user_name,
        budget: FileBudget | None = None,
    ) -> None:
        self._proc = roots.proc
        self._cgroup = roots.cgroup_root
        self._users = users
        self._user_names: dict[int, str] = {}  # looked up once per uid
        self._budget = budget or FileBudget()
        self._seen: Seen | None = None  # the last scan's directories; None: scan again
        self._cgroups: dict[str, JobFiles] = {}  # every job directory the scan found
        self._jobs: dict[str, _JobState] = {}  # the jobs reported (with processes)

    def available(self) -> bool:
        if slurm_cgroups_present(self._cgroup) or slurmd_running(self._proc):
            return True
        log.info(
            "jobs sampler off: no Slurm cgroups under %s and no slurmd under %s",
            self._cgroup,
            self._proc,
        )
        return False

    def _scan(self) -> None:
        """Find the jobs again: only when a directory the last scan listed changed."""
        if self._seen is not None and unchanged(self._seen):
            return
        self._seen = {}
        jobs = find_jobs(self._cgroup, self._seen)
        for job_id in list(self._cgroups):
            if job_id not in jobs:
                self._cgroups.pop(job_id).close()
                self._drop(job_id)
            elif self._cgroups[job_id].job != jobs[job_id]:
                # one more controller's directory (Slurm makes them one after another):
                # new files, the same job, its process I/O carried on
                self._cgroups.pop(job_id).close()
        for job_id, job in jobs.items():
            if job_id not in self._cgroups:
                self._cgroups[job_id] = JobFiles(job, self._budget)

    def _drop(self, job_id: str) -> None:
        state = self._jobs.pop(job_id, None)
        if state is not None:
            for files in state.pid_files.values():
                for file in files:
                    self._budget.close(file)

    def sample(self, now_ns: int) -> list[Point]:
        self._scan()
        points, gone = self._sample_jobs(list(self._cgroups), now_ns)
        if gone:
            # One job's cgroup went: another may have come in its place between two
            # ticks, leaving every link count as it was. Look again now.
            self._seen = None
            known = set(self._cgroups)
            self._scan()
            points += self._sample_jobs([j for j in self._cgroups if j not in known], now_ns)[0]
        return points

    def _sample_jobs(self, job_ids: list[str], now_ns: int) -> tuple[list[Point], bool]:
        """The jobs' points, and whether a job's cgroup was found gone."""
        points: list[Point] = []
        gone = False
        for job_id in sorted(job_ids, key=_job_order):
            files = self._cgroups[job_id]
            pids, tasks = files.pids()
            if files.lists_processes and not pids:
                # no process left: ended while being read, or a stale cgroup (a slurmstepd
                # killed with SIGKILL leaves its job's behind), whose other files are not
                # read every tick for nothing
                gone = gone or not job_dir_exists(files.job)
                self._drop(job_id)
                continue
            state = self._jobs.setdefault(job_id, _JobState())
            usage, info = self._sample_job(files, state, pids, tasks)
            if not files.lists_processes and not job_dir_exists(files.job):
                gone = True  # ended while being read
                self._drop(job_id)
                continue
            points.append(Point(Job.NAME, {Tag.JOB_ID: job_id}, usage, now_ns))
            points.append(Point(JobInfo.NAME, info[0], info[1], now_ns))
        return points, gone

    def _sample_job(
        self, files: JobFiles, state: _JobState, pids: list[int], tasks: list[int]
    ) -> tuple[dict[str, int | float], tuple[dict[str, str], dict[str, int | float]]]:
        job = files.job
        usage = cgroup_usage(job, files.read)
        texts = allocation_texts(job, files.read)
        if texts != state.allocation_texts:  # parsed again only when a file changed
            state.allocation_texts, state.allocation = texts, allocation_fields(*texts)
        limits = state.allocation
        usage[Job.PROCESSES] = float(len(pids))
        usage.update(self._process_io(pids, state))
        if state.environment is None:
            state.environment = self._environment(job.job_id, tasks or pids)
        info = state.info
        if info is None or state.environment is None or Tag.USER not in info[0]:
            # built again until the job's user is known (its environment read, its uid's
            # name resolved), then kept: none of it changes during the job
            state.info = info = self._info(job, state, tasks or pids)
        tags, gpu_fields = info
        return usage, (dict(tags), {JobInfo.INFO: 1.0, **limits, **gpu_fields})

    def _info(
        self, job: JobCgroup, state: _JobState, pids: list[int]
    ) -> tuple[dict[str, str], dict[str, int | float]]:
        """The ``slurm_job`` tags and the GPU fields: who the job is."""
        environment = state.environment or {}
        if state.uid is None:
            state.uid = job.uid if job.uid is not None else self._process_uid(pids)
        uid = state.uid
        if uid is None and environment.get("SLURM_JOB_UID", "").isdigit():
            # any process may set it: taken only where no process's uid is readable
            uid = int(environment["SLURM_JOB_UID"])
        tags = {Tag.JOB_ID: job.job_id}
        if uid is not None:
            tags[Tag.UID] = str(uid)
        user = trusted_user(uid, environment.get("SLURM_JOB_USER"), self._user_name)
        if user:
            tags[Tag.USER] = user
        for variable, tag in (
            ("SLURM_JOB_ACCOUNT", Tag.ACCOUNT),
            ("SLURM_JOB_PARTITION", Tag.PARTITION),
        ):
            if environment.get(variable):
                tags[tag] = environment[variable]
        fields: dict[str, int | float] = {}
        gpus = gpus_from_environment(environment)
        if gpus is not None:
            tags[Tag.GPUS] = ",".join(gpus)
            fields[JobInfo.ALLOCATED_GPUS] = float(len(gpus))
        return tags, fields

    def _user_name(self, uid: int) -> str | None:
        """The name of ``uid``, looked up once (one that does not resolve is looked up
        again next time: a directory service may know it later), as the processes
        sampler does."""
        name = self._user_names.get(uid)
        if name is None:
            name = self._users(uid)
            if name is not None:
                self._user_names[uid] = name
        return name

    def _pid_files(self, pid: int, state: _JobState) -> tuple[ProcFile, ProcFile]:
        files = state.pid_files.get(pid)
        if files is None:
            directory = self._proc / str(pid)
            files = (self._budget.open(directory / "stat"), self._budget.open(directory / "io"))
            state.pid_files[pid] = files
        return files

    def _process_io(self, pids: Iterable[int], state: _JobState) -> dict[str, int | float]:
        current: dict[tuple[int, int], ProcessIo] = {}
        listed = set(pids)
        readings = state.pid_readings
        for pid in listed:
            stat_file, io_file = self._pid_files(pid, state)
            stat, io = stat_file.read_bytes(), io_file.read_bytes()
            if stat is None or io is None:
                readings.pop(pid, None)
                continue
            last = readings.get(pid)
            if last is not None and last[0] == stat and last[1] == io:
                current[last[2]] = last[3]  # an idle process: nothing to parse
                continue
            try:
                ppid, _, start = procfs.pid_stat_counters(stat)
                read, write = procfs.pid_io_counters(io)
            except ValueError:
                readings.pop(pid, None)
                continue
            key, process = (pid, start), ProcessIo(ppid, read, write)
            readings[pid] = (stat, io, key, process)
            current[key] = process
        for pid in [pid for pid in state.pid_files if pid not in listed]:
            readings.pop(pid, None)
            for file in state.pid_files.pop(pid):
                self._budget.close(file)
        if not current and not state.processes:
            return {}  # no readable /proc/<pid>/io: no field, not a zero
        read, write = exited_io(state.processes, current)
        state.carried_read += read
        state.carried_write += write
        state.processes = current
        # A child read just before it was reaped and its parent just after would count
        # twice for one tick; never let the counter step back.
        total_read = state.carried_read + sum(io.read_bytes for io in current.values())
        total_write = state.carried_write + sum(io.write_bytes for io in current.values())
        state.last_read = max(state.last_read, total_read)
        state.last_write = max(state.last_write, total_write)
        return {Job.PROCESS_READ_BYTES: state.last_read, Job.PROCESS_WRITE_BYTES: state.last_write}

    def _environment(self, job_id: str, pids: list[int]) -> dict[str, str] | None:
        """SLURM_*/CUDA_* of the first job process whose environment names this job."""
        for pid in pids:
            try:
                data = (self._proc / str(pid) / "environ").read_bytes()
            except OSError:
                continue
            environment = procfs.parse_environ(data)
            said = environment.get("SLURM_JOB_ID")
            if said is not None and said != job_id:
                _warn_once(f"pid {pid} of job {job_id}'s cgroup says SLURM_JOB_ID={said}")
            if said == job_id:
                return {
                    name: value
                    for name, value in environment.items()
                    if name.startswith("SLURM_") or name in GPU_VARIABLES
                }
        return None

    def _process_uid(self, pids: list[int]) -> int | None:
        """The uid of the job's processes (the kernel's word), None if none is readable."""
        for pid in pids:
            uid = _read(self._proc / str(pid) / "status", parse_status_uid)
            if isinstance(uid, int):
                return uid
        return None


def trusted_user(
    uid: int | None, environment_user: str | None, users: Callable[[int], str | None]
) -> str | None:
    """The job's user name: the uid's (from the cgroup or the processes); the
    environment's ``SLURM_JOB_USER`` only where no uid is known (a name the uid's
    cannot confirm is not stored; one that disagrees is logged once)."""
    name = users(uid) if uid is not None else None
    if name is None:
        return environment_user if uid is None or environment_user is None else None
    if environment_user and environment_user != name:
        _warn_once(f"SLURM_JOB_USER={environment_user!r} disagrees with uid {uid} ({name!r})")
    return name


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning("jobs sampler: %s; the cgroup's uid is kept", message)


def _job_order(job_id: str) -> tuple[int, str]:
    return (int(job_id), "") if job_id.isdigit() else (1 << 62, job_id)


def job_dir_exists(job: JobCgroup) -> bool:
    return any(path.is_dir() for path in job.dirs.values())


def _read_file(job: JobCgroup) -> Reader:
    return lambda controller, name: read_text(job.dirs[controller] / name)


def keyed_value(text: str, key: str) -> int | None:
    """One key's value in a "key value" file (``memory.stat``), without parsing it all."""
    needle = f"\n{key} "
    if text.startswith(needle[1:]):
        start = len(needle) - 1
    elif (at := text.find(needle)) >= 0:
        start = at + len(needle)
    else:
        return None
    end = text.find("\n", start)
    value = text[start : end if end >= 0 else None].strip()
    return int(value) if value.isdigit() else None


def _refaults(fields: dict[str, int | float], stat: str, key: str) -> None:
    """The job's file refaults (a count of pages; 5.9+ kernels print it), in bytes."""
    pages = keyed_value(stat, key)
    if pages is not None:
        fields[Job.FILE_REFAULT_BYTES] = pages * PAGE_BYTES


def cgroup_usage(job: JobCgroup, read: Reader | None = None) -> dict[str, int | float]:
    """The job's ``job`` fields from its cgroup files; a missing file gives no field."""
    read = read or _read_file(job)
    fields: dict[str, int | float] = {}
    if job.version == 1:
        if "cpuacct" in job.dirs:
            usage_ns = _parse(read("cpuacct", "cpuacct.usage"), parse_int)
            if isinstance(usage_ns, int):
                fields[Job.CPU_SECONDS] = usage_ns / 1e9
        if "memory" in job.dirs:
            _gauge(fields, Job.MEMORY_BYTES, read("memory", "memory.usage_in_bytes"))
            _gauge(fields, Job.MEMORY_PEAK_BYTES, read("memory", "memory.max_usage_in_bytes"))
            stat = read("memory", "memory.stat")
            if stat is not None:
                cache = keyed_value(stat, "total_cache")  # total_: with children
                if cache is None:
                    cache = keyed_value(stat, "cache")
                if cache is not None:
                    fields[Job.CACHE_BYTES] = float(cache)
                _refaults(fields, stat, "total_workingset_refault_file")
        if "blkio" in job.dirs:
            for name in (
                "blkio.throttle.io_service_bytes_recursive",
                "blkio.throttle.io_service_bytes",
            ):
                io = _parse(read("blkio", name), parse_blkio)
                if isinstance(io, tuple):
                    fields[Job.BLOCK_READ_BYTES], fields[Job.BLOCK_WRITE_BYTES] = io
                    break
        return fields
    cpu = _parse(read("", "cpu.stat"), parse_flat_keyed)
    if isinstance(cpu, dict) and "usage_usec" in cpu:
        fields[Job.CPU_SECONDS] = cpu["usage_usec"] / 1e6
    _gauge(fields, Job.MEMORY_BYTES, read("", "memory.current"))
    _gauge(fields, Job.MEMORY_PEAK_BYTES, read("", "memory.peak"))  # Linux 5.19+
    stat = read("", "memory.stat")
    file_cache = None if stat is None else keyed_value(stat, "file")
    if file_cache is not None:
        fields[Job.CACHE_BYTES] = float(file_cache)
    if stat is not None:
        _refaults(fields, stat, "workingset_refault_file")
    io = _parse(read("", "io.stat"), parse_io_stat)
    if isinstance(io, tuple):
        fields[Job.BLOCK_READ_BYTES], fields[Job.BLOCK_WRITE_BYTES] = io
    return fields


def cgroup_allocation(job: JobCgroup, read: Reader | None = None) -> dict[str, int | float]:
    """The ``slurm_job`` fields the cgroup tells: CPUs in its cpuset, its memory limit."""
    return allocation_fields(*allocation_texts(job, read or _read_file(job)))


def allocation_texts(job: JobCgroup, read: Reader) -> tuple[str | None, str | None]:
    """The texts of the job's cpuset and memory limit files (None: not there)."""
    if job.version == 1:
        cpus_text = read("cpuset", "cpuset.cpus") if "cpuset" in job.dirs else None
        limit_text = read("memory", "memory.limit_in_bytes") if "memory" in job.dirs else None
    else:
        cpus_text = read("", "cpuset.cpus.effective")
        if cpus_text is None:
            cpus_text = read("", "cpuset.cpus")
        limit_text = read("", "memory.max")
    return cpus_text, limit_text


def allocation_fields(cpus_text: str | None, limit_text: str | None) -> dict[str, int | float]:
    """:func:`cgroup_allocation`'s fields from :func:`allocation_texts`."""
    fields: dict[str, int | float] = {}
    cpus = _parse(cpus_text, parse_cpu_list)
    if isinstance(cpus, set) and cpus:
        fields[JobInfo.ALLOCATED_CPUS] = float(len(cpus))
    limit = _parse(limit_text, procfs.parse_memory_limit)
    if isinstance(limit, int):
        fields[JobInfo.ALLOCATED_MEMORY_BYTES] = float(limit)
    return fields


def _gauge(fields: dict[str, int | float], name: str, text: str | None) -> None:
    value = _parse(text, parse_int)
    if isinstance(value, int):
        fields[name] = float(value)


SAMPLER = JobsSampler
