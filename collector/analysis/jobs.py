"""Slurm jobs as the agents saw them: per job and node, what it was given and what it used.

Read from the jobs sampler's series (``contract.schema.Job``, ``JobInfo``: docs/slurm.md)
and the runs' ``run_start`` ``slurm_job_id``. Every number is defined once, here:

``first`` / ``last``
    The job's first and last sample on a node (on the job: over its nodes).
``interval_seconds``
    The agent's sampling interval on that node: the median spacing of the job's samples.
``elapsed_seconds``
    ``last - first + interval``: a job is sampled from the first tick after its cgroup
    appears to the last tick before it goes, so the seen span is on average one interval
    short of the job's life; with the interval added the error is within one interval
    either way. None with a single sample (no interval).
``cpu_seconds``
    The job cgroup's CPU time at its last sample (the counter starts at zero with the
    cgroup; ``counters.counter_total``).
``allocated_cpu_seconds``
    ``allocated_cpus x elapsed_seconds`` (``allocated_cpus``: the cgroup's cpuset).
``cpu_efficiency``
    ``cpu_seconds / allocated_cpu_seconds`` (Slurm's ``seff`` "CPU Efficiency"): 1 when
    every allocated CPU was busy the whole time.
``memory_peak_bytes``
    The highest ``memory_peak_bytes`` sample (the cgroup's own high-water mark), else the
    highest ``memory_bytes``.
``memory_use_fraction``
    ``memory_peak_bytes / allocated_memory_bytes`` (the cgroup's limit); None without one.
``*_read_bytes``, ``*_write_bytes``, ``file_refault_bytes``
    The counters' totals at the last sample (block I/O where the cgroup counts it, the
    job's processes' ``/proc/<pid>/io``, and its file pages read back after the kernel's
    reclaim had evicted them: a job that keeps re-reading what its memory limit evicts).
``gpu_util_percent``
    The time-weighted mean ``utilization_percent`` of the job's GPUs (``gpus`` matched
    to the node's ``gpu`` series by index or UUID) over its span, averaged over them.
``gpus_without_process``
    The job's GPUs with no ``gpu_process`` sample in its span from a process of this job
    (a process tagged with another ``job_id`` is not this job's; one without the tag, from
    an agent that could not read its cgroup, still counts); None (not known) on a node
    whose agent sent no ``gpu_process`` sample at all (no GPU sampler, or NVML cannot list
    processes there).
``gpu_memory_peak_bytes``
    From the ``gpu_process`` samples tagged with the job (the agent joins NVML's pid to
    the job's cgroup): per GPU (or MIG device), the highest sum of the job's processes'
    ``memory_used_bytes`` at one reading; summed over the GPUs.
``gpu_process_sm_percent``
    The same samples' ``sm_utilization_percent``: per GPU, the mean over its readings of
    the sum over the job's processes; averaged over the job's GPUs (its ``gpus``, a GPU
    with no process of the job counting 0, else the GPUs its processes used). The job's
    own share of its GPUs, where ``gpu_util_percent`` is the GPUs' whoever used them.

A job over several nodes adds up CPU seconds, allocated CPU seconds and I/O over them, so
its CPU efficiency is ``sum(cpu_seconds) / sum(allocated_cpu_seconds)``; its memory is
that of the node nearest its limit (Slurm's ``--mem`` is per node). ``neighbours``: the
other jobs sampled on the same node at the same time, and the CPU seconds they used
meanwhile.

``refaults_by_job``
    Per window (a host-epoch), each job's ``file_refault_bytes`` growth on that host over
    it (``counters.counter_increase``): the job's file pages the kernel's reclaim had
    evicted and it read back. Jobs not sampled over the window are left out.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from collector.analysis.counters import NS_PER_SECOND, counter_increase, counter_total, gauge_means
from collector.store.api import ReadStore, RunInfo, SeriesData, SeriesInfo
from contract.schema import Gpu, GpuProcess, Job, JobInfo, Tag, Workload

ALL_TIME = (-(2**63), 2**63 - 1)
INFO_TAGS = (Tag.UID, Tag.USER, Tag.ACCOUNT, Tag.PARTITION, Tag.GPUS)


# --------------------------------------------------------------------------------------
# the numbers, each defined once
# --------------------------------------------------------------------------------------


def elapsed_seconds(first_ns: int, last_ns: int, interval_seconds: float | None) -> float | None:
    """The job's life from its samples: the seen span plus one sampling interval."""
    if interval_seconds is None:
        return None
    return (last_ns - first_ns) / NS_PER_SECOND + interval_seconds


def allocated_cpu_seconds(allocated_cpus: float | None, elapsed: float | None) -> float | None:
    if allocated_cpus is None or elapsed is None:
        return None
    return allocated_cpus * elapsed


def cpu_efficiency(cpu_seconds: float | None, allocated: float | None) -> float | None:
    """CPU seconds used over CPU seconds allocated (0..1, a little above from rounding)."""
    if cpu_seconds is None or not allocated:
        return None
    return cpu_seconds / allocated


def memory_use_fraction(peak_bytes: float | None, limit_bytes: float | None) -> float | None:
    if peak_bytes is None or not limit_bytes:
        return None
    return peak_bytes / limit_bytes


def _number(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _sum(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


# --------------------------------------------------------------------------------------
# what comes out
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobNode:
    """One job on one node."""

    job_id: str
    host: str
    first_ns: int
    last_ns: int
    samples: int
    interval_seconds: float | None
    uid: str | None = None
    user: str | None = None
    account: str | None = None
    partition: str | None = None
    gpus: tuple[str, ...] = ()
    allocated_cpus: float | None = None
    allocated_memory_bytes: float | None = None
    allocated_gpus: float | None = None
    cpu_seconds: float | None = None
    memory_peak_bytes: float | None = None
    block_read_bytes: float | None = None
    block_write_bytes: float | None = None
    process_read_bytes: float | None = None
    process_write_bytes: float | None = None
    file_refault_bytes: float | None = None
    gpu_util_percent: float | None = None
    gpus_without_process: tuple[str, ...] | None = None
    gpu_memory_peak_bytes: float | None = None
    gpu_process_sm_percent: float | None = None

    @property
    def elapsed_seconds(self) -> float | None:
        return elapsed_seconds(self.first_ns, self.last_ns, self.interval_seconds)

    @property
    def allocated_cpu_seconds(self) -> float | None:
        return allocated_cpu_seconds(self.allocated_cpus, self.elapsed_seconds)

    @property
    def cpu_efficiency(self) -> float | None:
        return cpu_efficiency(self.cpu_seconds, self.allocated_cpu_seconds)

    @property
    def memory_use_fraction(self) -> float | None:
        return memory_use_fraction(self.memory_peak_bytes, self.allocated_memory_bytes)


@dataclass(frozen=True)
class Neighbour:
    """Another job sampled on the same node while this one ran."""

    job_id: str
    host: str
    user: str | None
    overlap_seconds: float
    cpu_seconds: float | None  # the neighbour's CPU time during the overlap


@dataclass(frozen=True)
class JobReport:
    job_id: str
    nodes: tuple[JobNode, ...]  # by host
    runs: tuple[str, ...] = ()  # runs whose rank 0 named this job, oldest first
    neighbours: tuple[Neighbour, ...] = field(default=())

    def _first_known(self, name: str) -> str | None:
        return next((getattr(n, name) for n in self.nodes if getattr(n, name)), None)

    @property
    def user(self) -> str | None:
        return self._first_known("user")

    @property
    def uid(self) -> str | None:
        return self._first_known("uid")

    @property
    def account(self) -> str | None:
        return self._first_known("account")

    @property
    def partition(self) -> str | None:
        return self._first_known("partition")

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(n.host for n in self.nodes)

    @property
    def first_ns(self) -> int:
        return min(n.first_ns for n in self.nodes)

    @property
    def last_ns(self) -> int:
        return max(n.last_ns for n in self.nodes)

    @property
    def interval_seconds(self) -> float | None:
        intervals = [n.interval_seconds for n in self.nodes if n.interval_seconds is not None]
        return float(np.median(intervals)) if intervals else None

    @property
    def elapsed_seconds(self) -> float | None:
        return elapsed_seconds(self.first_ns, self.last_ns, self.interval_seconds)

    @property
    def allocated_cpus(self) -> float | None:
        return _sum(n.allocated_cpus for n in self.nodes)

    @property
    def cpu_seconds(self) -> float | None:
        return _sum(n.cpu_seconds for n in self.nodes)

    @property
    def allocated_cpu_seconds(self) -> float | None:
        return _sum(n.allocated_cpu_seconds for n in self.nodes)

    @property
    def cpu_efficiency(self) -> float | None:
        return cpu_efficiency(self.cpu_seconds, self.allocated_cpu_seconds)

    def _memory_node(self) -> JobNode | None:
        """The node nearest its memory limit (else the one with the highest peak)."""
        limited = [n for n in self.nodes if n.memory_use_fraction is not None]
        if limited:
            return max(limited, key=lambda n: n.memory_use_fraction or 0.0)
        peaked = [n for n in self.nodes if n.memory_peak_bytes is not None]
        return max(peaked, key=lambda n: n.memory_peak_bytes or 0.0) if peaked else None

    @property
    def memory_peak_bytes(self) -> float | None:
        node = self._memory_node()
        return None if node is None else node.memory_peak_bytes

    @property
    def allocated_memory_bytes(self) -> float | None:
        node = self._memory_node()
        return None if node is None else node.allocated_memory_bytes

    @property
    def memory_use_fraction(self) -> float | None:
        node = self._memory_node()
        return None if node is None else node.memory_use_fraction

    @property
    def allocated_gpus(self) -> float | None:
        return _sum(n.allocated_gpus for n in self.nodes)

    @property
    def gpu_util_percent(self) -> float | None:
        """Mean over the nodes' GPUs (each node's mean weighted by its GPUs)."""
        pairs = [
            (n.gpu_util_percent, len(n.gpus) or 1)
            for n in self.nodes
            if n.gpu_util_percent is not None
        ]
        if not pairs:
            return None
        return sum(u * w for u, w in pairs) / sum(w for _, w in pairs)

    @property
    def gpu_memory_peak_bytes(self) -> float | None:
        return _sum(n.gpu_memory_peak_bytes for n in self.nodes)

    @property
    def gpu_process_sm_percent(self) -> float | None:
        """Mean over the nodes' GPUs (each node's mean weighted by its GPUs)."""
        pairs = [
            (n.gpu_process_sm_percent, len(n.gpus) or 1)
            for n in self.nodes
            if n.gpu_process_sm_percent is not None
        ]
        if not pairs:
            return None
        return sum(u * w for u, w in pairs) / sum(w for _, w in pairs)

    def io_bytes(self, name: str) -> float | None:
        """``block_read_bytes``, ``process_write_bytes``... summed over the nodes."""
        return _sum(getattr(n, name) for n in self.nodes)


IO_FIELDS = (
    "block_read_bytes",
    "block_write_bytes",
    "process_read_bytes",
    "process_write_bytes",
    "file_refault_bytes",
)


# --------------------------------------------------------------------------------------
# reading the store
# --------------------------------------------------------------------------------------


def _job_of(info: SeriesInfo) -> str | None:
    return info.tags.get(Tag.JOB_ID)


def _list(
    store: ReadStore, measurement: str, fields: Iterable[str], job_id: str | None
) -> list[SeriesInfo]:
    found = []
    for name in fields:
        for info in store.list_series(measurement, name):
            job = _job_of(info)
            if job is not None and (job_id is None or job == job_id):
                found.append(info)
    return found


def _interval(times: np.ndarray) -> float | None:
    if times.size < 2:
        return None
    return float(np.median(np.diff(times))) / NS_PER_SECOND


def _node(
    job_id: str,
    host: str,
    usage: dict[str, SeriesData],
    info: list[SeriesData],
) -> JobNode | None:
    every = [d.times_ns for d in (*usage.values(), *info) if d.times_ns.size]
    if not every:
        return None
    times = np.unique(np.concatenate(every))
    # tags of the info series, the newest series' winning (labels appear once readable)
    tags: dict[str, str] = {}
    allocated: dict[str, float | None] = {}
    for data in sorted(info, key=lambda d: int(d.times_ns[-1]) if d.times_ns.size else 0):
        tags.update({k: v for k, v in data.info.tags.items() if k in INFO_TAGS and v})
        values = data.values[~np.isnan(data.values)]
        if values.size:
            allocated[data.info.field] = float(values[-1])

    def total(name: str) -> float | None:
        data = usage.get(name)
        return None if data is None else _number(counter_total(data.values))

    def highest(name: str) -> float | None:
        data = usage.get(name)
        if data is None or not np.isfinite(data.values).any():
            return None
        return float(np.nanmax(data.values))

    peak = highest(Job.MEMORY_PEAK_BYTES)
    gpus = tuple(g for g in tags.get(Tag.GPUS, "").split(",") if g)
    return JobNode(
        job_id=job_id,
        host=host,
        first_ns=int(times[0]),
        last_ns=int(times[-1]),
        samples=int(times.size),
        interval_seconds=_interval(times),
        uid=tags.get(Tag.UID),
        user=tags.get(Tag.USER),
        account=tags.get(Tag.ACCOUNT),
        partition=tags.get(Tag.PARTITION),
        gpus=gpus,
        allocated_cpus=allocated.get(JobInfo.ALLOCATED_CPUS),
        allocated_memory_bytes=allocated.get(JobInfo.ALLOCATED_MEMORY_BYTES),
        allocated_gpus=allocated.get(JobInfo.ALLOCATED_GPUS),
        cpu_seconds=total(Job.CPU_SECONDS),
        memory_peak_bytes=peak if peak is not None else highest(Job.MEMORY_BYTES),
        block_read_bytes=total(Job.BLOCK_READ_BYTES),
        block_write_bytes=total(Job.BLOCK_WRITE_BYTES),
        process_read_bytes=total(Job.PROCESS_READ_BYTES),
        process_write_bytes=total(Job.PROCESS_WRITE_BYTES),
        file_refault_bytes=total(Job.FILE_REFAULT_BYTES),
    )


def _gpu_matches(info: SeriesInfo, gpus: tuple[str, ...]) -> bool:
    return info.tags.get(Tag.GPU) in gpus or info.tags.get(Tag.UUID) in gpus


def _device(info: SeriesInfo) -> tuple[str, str]:
    return (info.tags.get(Tag.UUID) or info.tags.get(Tag.GPU, ""), info.tags.get(Tag.MIG, ""))


def device_sums(series: Iterable[SeriesData]) -> dict[tuple[str, str], np.ndarray]:
    """Per GPU or MIG device, the sum over processes of each reading (one reading of a
    device gives all its processes the same time); NaNs are left out."""
    by_device: dict[tuple[str, str], list[SeriesData]] = defaultdict(list)
    for data in series:
        by_device[_device(data.info)].append(data)
    sums: dict[tuple[str, str], np.ndarray] = {}
    for device, group in by_device.items():
        times = np.concatenate([d.times_ns for d in group])
        values = np.concatenate([d.values for d in group])
        known = ~np.isnan(values)
        if known.any():
            _, reading = np.unique(times[known], return_inverse=True)
            sums[device] = np.bincount(reading, weights=values[known])
    return sums


def job_gpu_use(
    memory: Iterable[SeriesData], sm: Iterable[SeriesData], gpus: int
) -> tuple[float | None, float | None]:
    """(``gpu_memory_peak_bytes``, ``gpu_process_sm_percent``) of one job on one node from
    its processes' samples; ``gpus``: the GPUs it was given (0: not said)."""
    memory_sums = device_sums(memory)
    peak = sum(float(v.max()) for v in memory_sums.values()) if memory_sums else None
    sm_sums = device_sums(sm)
    if not sm_sums:
        return peak, None
    share = sum(float(v.mean()) for v in sm_sums.values())
    return peak, share / max(gpus, len(sm_sums))


def _with_job_processes(store: ReadStore, node: JobNode) -> JobNode:
    """GPU memory and SM share of the job's own processes (``gpu_process`` ``job_id``)."""
    series = {
        name: [
            info
            for info in store.list_series(GpuProcess.NAME, name, node.host)
            if _job_of(info) == node.job_id
        ]
        for name in (GpuProcess.MEMORY_USED_BYTES, GpuProcess.SM_UTILIZATION_PERCENT)
    }
    if not any(series.values()):
        return node
    memory, sm = (store.read_series(infos, *ALL_TIME) if infos else [] for infos in series.values())
    peak, share = job_gpu_use(memory, sm, len(node.gpus))
    return replace(node, gpu_memory_peak_bytes=peak, gpu_process_sm_percent=share)


def _with_gpus(store: ReadStore, node: JobNode) -> JobNode:
    """The node's GPU utilisation and GPUs without a process, where the node says, and
    what the job's own processes used."""
    node = _with_job_processes(store, node)
    if not node.gpus:
        return node
    whole = [
        info
        for info in store.list_series(Gpu.NAME, Gpu.UTILIZATION_PERCENT, node.host)
        if Tag.MIG not in info.tags and _gpu_matches(info, node.gpus)
    ]
    means = [
        gauge_means(d.times_ns, d.values, [node.first_ns], [node.last_ns])[0]
        for d in store.read_series(whole, node.first_ns, node.last_ns)
    ]
    known = [m for m in means if not math.isnan(m)]
    utilisation = sum(known) / len(known) if known else None

    processes = store.list_series(GpuProcess.NAME, GpuProcess.MEMORY_USED_BYTES, node.host)
    without: tuple[str, ...] | None = None
    if processes:
        busy: set[str] = set()
        mine = [
            info
            for info in processes
            if _gpu_matches(info, node.gpus) and _job_of(info) in (None, node.job_id)
        ]
        for data in store.read_series(mine, node.first_ns, node.last_ns):
            inside = (data.times_ns >= node.first_ns) & (data.times_ns <= node.last_ns)
            if inside.any():
                busy.update(
                    g
                    for g in node.gpus
                    if g in (data.info.tags.get(Tag.GPU), data.info.tags.get(Tag.UUID))
                )
        without = tuple(g for g in node.gpus if g not in busy)
    return replace(node, gpu_util_percent=utilisation, gpus_without_process=without)


NodeKey = tuple[str, str]  # (host, job id)
# A job's node is finished once its host has samples of another job this many of its
# intervals after its last: the agent sends a host's samples in time order, so nothing of
# it can come later.
FINISHED_AFTER_INTERVALS = 3
KEPT_NODES_MAX = 50_000  # a kept node is ~1 kB


@dataclass
class KeptNodes:
    """Finished jobs' nodes from earlier calls on one store, each kept with the ids of
    the series it was read from: ``job_reports`` reads a kept node's samples again only
    when its series change."""

    nodes: dict[NodeKey, tuple[frozenset[int], JobNode]] = field(default_factory=dict)
    read: int = 0  # nodes read from their samples, for tests and the bench
    reused: int = 0


def _series_by_node(store: ReadStore, job_id: str | None) -> dict[NodeKey, list[SeriesInfo]]:
    found: dict[NodeKey, list[SeriesInfo]] = defaultdict(list)
    for info in [
        *_list(store, Job.NAME, Job.fields(), job_id),
        *_list(store, JobInfo.NAME, JobInfo.fields(), job_id),
    ]:
        found[(info.host, info.tags[Tag.JOB_ID])].append(info)
    return found


def _read_nodes(store: ReadStore, series: dict[NodeKey, list[SeriesInfo]]) -> list[JobNode]:
    """The nodes of ``series``, every sample of their series read (one job's series exist
    only while it ran), with their GPU use."""
    wanted = [info for infos in series.values() for info in infos]
    usage: dict[NodeKey, dict[str, SeriesData]] = defaultdict(dict)
    info: dict[NodeKey, list[SeriesData]] = defaultdict(list)
    for data in store.read_series(wanted, *ALL_TIME):
        key = (data.info.host, data.info.tags[Tag.JOB_ID])
        if data.info.measurement == Job.NAME:
            usage[key][data.info.field] = data
        else:
            info[key].append(data)
    nodes = []
    for host, job in sorted(series):
        node = _node(job, host, usage.get((host, job), {}), info.get((host, job), []))
        if node is not None:
            nodes.append(_with_gpus(store, node))
    return nodes


def job_nodes(
    store: ReadStore, job_id: str | None = None, kept: KeptNodes | None = None
) -> list[JobNode]:
    """Every job's nodes (or one job's), by host then job id. With ``kept``, a finished
    node kept from an earlier call is used as it is while its series are the same, and
    the nodes found finished now are kept."""
    series = _series_by_node(store, job_id)
    if kept is None:
        return _read_nodes(store, series)
    ids = {key: frozenset(info.series_id for info in infos) for key, infos in series.items()}
    reused = {
        key: kept.nodes[key][1]
        for key in series
        if key in kept.nodes and kept.nodes[key][0] == ids[key]
    }
    fresh = _read_nodes(store, {k: v for k, v in series.items() if k not in reused})
    kept.read += len(fresh)
    kept.reused += len(reused)
    nodes = [*reused.values(), *fresh]
    newest: dict[str, int] = {}
    for node in nodes:
        newest[node.host] = max(newest.get(node.host, node.last_ns), node.last_ns)
    if len(kept.nodes) > KEPT_NODES_MAX:
        kept.nodes.clear()  # a bound on memory: they are read again, once
    for node in fresh:
        if node.interval_seconds is not None and newest[node.host] - node.last_ns > (
            FINISHED_AFTER_INTERVALS * node.interval_seconds * NS_PER_SECOND
        ):
            kept.nodes[(node.host, node.job_id)] = (ids[(node.host, node.job_id)], node)
    return sorted(nodes, key=lambda n: (n.host, n.job_id))


def run_job_id(run: RunInfo) -> str | None:
    """The Slurm job the run's rank 0 ran in (``slurm_job_id`` of its run_start)."""
    job = run.config.get(Workload.SLURM_JOB_ID)
    return str(job) if job not in (None, "") else None


def job_runs(runs: Iterable[RunInfo]) -> dict[str, tuple[str, ...]]:
    """Run ids by the job their rank 0 ran in (``run_job_id``), oldest run first."""
    found: dict[str, list[RunInfo]] = defaultdict(list)
    for run in runs:
        job = run_job_id(run)
        if job is not None:
            found[job].append(run)
    return {
        job: tuple(r.run_id for r in sorted(members, key=lambda r: r.start_ns))
        for job, members in found.items()
    }


def job_reports(store: ReadStore, kept: KeptNodes | None = None) -> list[JobReport]:
    """Every job the agents saw, newest first (by its first sample); no neighbours
    (``job_report`` has them). ``kept``: finished jobs' nodes from earlier calls."""
    by_job: dict[str, list[JobNode]] = defaultdict(list)
    for node in job_nodes(store, None, kept):
        by_job[node.job_id].append(node)
    runs = job_runs(store.runs())
    reports = [JobReport(job, tuple(nodes), runs.get(job, ())) for job, nodes in by_job.items()]
    return sorted(reports, key=lambda r: (r.first_ns, r.job_id), reverse=True)


def neighbours(store: ReadStore, node: JobNode) -> list[Neighbour]:
    """The other jobs sampled on ``node``'s host between its first and last sample."""
    cpu = [
        info
        for info in store.list_series(Job.NAME, Job.CPU_SECONDS, node.host)
        if _job_of(info) not in (None, node.job_id)
    ]
    users = {
        _job_of(info): info.tags.get(Tag.USER)
        for info in store.list_series(JobInfo.NAME, JobInfo.INFO, node.host)
        if info.tags.get(Tag.USER)
    }
    found = []
    for data in store.read_series(cpu, node.first_ns, node.last_ns):
        if not data.times_ns.size:
            continue
        start = max(int(data.times_ns[0]), node.first_ns)
        end = min(int(data.times_ns[-1]), node.last_ns)
        if end <= start:
            continue
        job = data.info.tags[Tag.JOB_ID]
        used = counter_increase(data.times_ns, data.values, start, end)
        found.append(
            Neighbour(
                job_id=job,
                host=node.host,
                user=users.get(job),
                overlap_seconds=(end - start) / NS_PER_SECOND,
                cpu_seconds=_number(used),
            )
        )
    return sorted(found, key=lambda n: (n.host, n.job_id))


def job_report(store: ReadStore, job_id: str) -> JobReport | None:
    """One job, with its runs, its nodes' GPU check and its neighbours; None when no agent
    sampled it."""
    nodes = job_nodes(store, job_id)
    if not nodes:
        return None
    runs = job_runs(store.runs()).get(job_id, ())
    near = tuple(n for node in nodes for n in neighbours(store, node))
    return JobReport(job_id, tuple(nodes), runs, near)


def refaults_by_job(
    store: ReadStore, windows: Iterable[tuple[str, int, int]]
) -> dict[tuple[str, int, int], dict[str, float]]:
    """For each ``(host, start_ns, end_ns)`` window, the jobs sampled on that host over it
    with the bytes of their file pages read back after reclaim, most first (one store
    read)."""
    windows = list(windows)
    if not windows:
        return {}
    hosts = {host for host, _, _ in windows}
    wanted = [
        info
        for info in store.list_series(Job.NAME, Job.FILE_REFAULT_BYTES)
        if info.host in hosts and info.tags.get(Tag.JOB_ID)
    ]
    if not wanted:
        return {}
    start = min(w[1] for w in windows)
    end = max(w[2] for w in windows)
    series = store.read_series(wanted, start, end)
    out: dict[tuple[str, int, int], dict[str, float]] = {}
    for host, start_ns, end_ns in windows:
        grown = {}
        for data in series:
            if data.info.host != host:
                continue
            bytes_ = counter_increase(data.times_ns, data.values, start_ns, end_ns)
            if not math.isnan(bytes_):  # sampled over the window
                grown[data.info.tags[Tag.JOB_ID]] = bytes_
        out[(host, start_ns, end_ns)] = dict(sorted(grown.items(), key=lambda kv: -kv[1]))
    return out
