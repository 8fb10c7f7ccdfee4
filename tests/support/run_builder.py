"""Builds the points of a synthetic training run: workload events from every rank and node
samples from every host, with traffic rates that are constant within each epoch so the
expected per-epoch numbers can be worked out by hand.

No GPU, InfiniBand HCA or NFS client exists on the test machine, so the samples here stand
in for what the agent would have written; they go through a real store's write path.

Devices written per host (to check what node totals include and exclude):
- disk ``sda`` (kind disk) carries ``disk_read``/``disk_write``; its partition ``sda1`` and
  ``loop0`` (virtual) repeat the same traffic and must not be counted again;
- NFS mount ``/data`` carries ``nfs_server_read``/``nfs_app_read``; ``/data-again``
  (``duplicate_of=/data``) repeats it and must not be counted again;
- InfiniBand ``mlx5_0`` port 1 carries ``ib_rcv``/``ib_xmit`` (only if either is non-zero);
- ``eth0`` (physical) carries ``net_rx``/``net_tx``; ``lo`` carries 1 GB/s that must not count;
- ``memory.cached_bytes`` grows by ``cache_growth`` B/s; ``pgmajfault`` by ``major_faults``/s;
  ``page_cache_drops`` and ``file_refault_bytes`` by ``cache_drops``/s and ``file_refault``
  B/s, written only when an epoch gives either (an agent on a kernel that counts them);
- CPU counters: ``cpus`` CPUs, ``cpu_busy`` and ``cpu_iowait`` fractions of CPU time
  (busy is split 80% user / 20% system; the rest is idle);
- one GPU per local rank at ``gpu_util`` percent.

Slurm jobs (``job()``): the jobs sampler's ``job`` and ``slurm_job`` series of a job on
its hosts, sampled every ``sample_interval_s`` from the job's start to its end (first
sample at the start), CPU seconds and process I/O growing at constant rates from zero,
memory flat; ``gpu_processes`` GPUs get a ``gpu_process`` series over the job. A job made
with ``of_run=True`` is the run's own: its ``run_start`` names it (``slurm_job_id``).

A run with other devices or other traffic (the dashboard benchmark's: every field of every
measurement, with noise) passes its own ``sampler``: the builder then gives the run's
timeline, its events, and the points of whatever series the sampler makes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from contract.point import Point
from contract.schema import (
    Cpu,
    Disk,
    DiskKind,
    Event,
    FieldName,
    Gpu,
    GpuProcess,
    Infiniband,
    InterfaceKind,
    Job,
    JobInfo,
    Memory,
    Net,
    Nfs,
    RunState,
    Tag,
    Workload,
)
from workloads.record.timing import loss_fields

NS = 1_000_000_000
T0_NS = 1_700_000_000 * NS  # 2023-11-14T22:13:20Z

RATE_KEYS = (
    "disk_read",
    "disk_write",
    "nfs_server_read",
    "nfs_app_read",
    "ib_rcv",
    "ib_xmit",
    "net_rx",
    "net_tx",
    "cache_growth",
    "major_faults",
    "cache_drops",
    "file_refault",
    "cpu_busy",
    "cpu_iowait",
    "gpu_util",
)
IDLE_RATES = {key: 0.0 for key in RATE_KEYS} | {"cpu_busy": 0.02, "gpu_util": 0.0}

Rate = float | dict[str, float] | Callable[[str], float]
# the step anatomy of a rank's epoch: (input wait, compute, communication) shares of its
# seconds (the rest is "other"), or a function of (host, rank) giving them
Shares = tuple[float, float, float] | Callable[[str, int], tuple[float, float, float]]
# one sampled series of a host: (measurement, tags other than the host, field -> its value
# at each sample time)
SampledSeries = tuple[str, dict[str, str], dict[FieldName, np.ndarray]]
# a host's sampled series at the given times (ns, the host's clock)
Sampler = Callable[[str, np.ndarray], list[SampledSeries]]


@dataclass
class EpochSpec:
    seconds: float
    images_per_rank: int
    rates: dict[str, Rate]
    step_seconds_pattern: tuple[float, ...] | None  # relative step durations, repeated
    top1: float | None
    shares: Shares | None = None
    reads: tuple[int, int] | None = None  # each rank's (read_bytes, rchar) in the epoch
    steps: int | None = None  # step events in the epoch (default: the run's steps_per_epoch)
    loss: float | None = None  # the ranks' mean training loss; NaN or Inf: loss_not_finite
    end_fields: dict[str, object] | None = None  # more epoch_end fields, every rank's


@dataclass
class JobSpec:
    """A Slurm job on some hosts, its times from the run's ``t0_ns`` (true time)."""

    job_id: str
    hosts: tuple[str, ...]
    start_s: float
    seconds: float
    cpus: int  # allocated (cpuset)
    cpus_busy: float  # CPU seconds per second the job used
    memory_limit_bytes: float | None
    memory_bytes: float
    memory_peak_bytes: float
    read_bytes_per_s: float
    write_bytes_per_s: float
    refault_bytes_per_s: float | None  # file refaults (None: not sent, an older kernel)
    user: str
    uid: str
    account: str | None
    partition: str
    gpus: tuple[str, ...]
    gpu_processes: tuple[str, ...]  # the GPUs a process ran on


@dataclass
class RunBuilder:
    run_id: str
    framework: str = "tensorflow"
    hosts: tuple[str, ...] = ("node1",)
    ranks_per_host: int = 1
    t0_ns: int = T0_NS
    skew_s: dict[str, float] = field(default_factory=dict)  # host clock minus true time
    sample_interval_s: float = 1.0
    pad_s: float = 5.0  # samples before the run starts and after it ends
    cpus: int = 8
    model: str = "resnet50"
    batch_size: int = 64
    precision: str = "fp32"
    data_format: str = "tfrecord"
    dataset_images: int = 1_281_167
    dataset_bytes: int = 143_000_000_000
    host_memory_bytes: int = 384_000_000_000
    warmup_steps: int = 0
    warmup_step_events: bool = True  # False: as the workloads send them, timed steps only
    target_top1: float | None = None
    steps_per_epoch: int = 4
    state: str = RunState.FINISHED
    write_samples: bool = True
    gpus: bool = True  # False: CPU ranks, no GPU samples
    nfs: bool = True  # False: no NFS mount on the hosts (no nfs samples)
    nic: str = "eth0"
    nic_kind: str = InterfaceKind.PHYSICAL  # VIRTUAL: a container's or namespace's veth
    image_size: int = 224
    sampler: Sampler | None = None  # None: the devices and rates described above
    epochs: list[EpochSpec] = field(default_factory=list)
    jobs: list[JobSpec] = field(default_factory=list)
    slurm_job_id: str | None = None  # the run's job: run_start's slurm_job_id
    num_classes: int | None = None  # run_start's num_classes (None: not sent)
    run_start_fields: dict[str, object] = field(default_factory=dict)  # more run_start fields

    def epoch(
        self,
        seconds: float,
        images_per_rank: int,
        *,
        step_pattern: tuple[float, ...] | None = None,
        top1: float | None = None,
        shares: Shares | None = None,
        reads: tuple[int, int] | None = None,
        steps: int | None = None,
        loss: float | None = None,
        end_fields: dict[str, object] | None = None,
        **rates: Rate,
    ) -> RunBuilder:
        unknown = set(rates) - set(RATE_KEYS)
        if unknown:
            raise ValueError(f"unknown rates {sorted(unknown)}")
        self.epochs.append(
            EpochSpec(
                seconds,
                images_per_rank,
                rates,
                step_pattern,
                top1,
                shares,
                reads,
                steps,
                loss,
                end_fields,
            )
        )
        return self

    def job(
        self,
        job_id: str,
        *,
        hosts: tuple[str, ...] | None = None,
        start_s: float = 0.0,
        seconds: float = 10.0,
        cpus: int = 4,
        cpus_busy: float = 1.0,
        memory_limit_bytes: float | None = 8e9,
        memory_bytes: float = 1e9,
        memory_peak_bytes: float = 1.5e9,
        read_bytes_per_s: float = 0.0,
        write_bytes_per_s: float = 0.0,
        refault_bytes_per_s: float | None = None,
        user: str = "alice",
        uid: str = "1000",
        account: str | None = "proj",
        partition: str = "gpu",
        gpus: tuple[str, ...] = (),
        gpu_processes: tuple[str, ...] = (),
        of_run: bool = False,
    ) -> RunBuilder:
        """A Slurm job's series on ``hosts`` (default: the run's); ``of_run``: the run's own."""
        self.jobs.append(
            JobSpec(
                job_id,
                hosts or self.hosts,
                start_s,
                seconds,
                cpus,
                cpus_busy,
                memory_limit_bytes,
                memory_bytes,
                memory_peak_bytes,
                read_bytes_per_s,
                write_bytes_per_s,
                refault_bytes_per_s,
                user,
                uid,
                account,
                partition,
                gpus,
                gpu_processes,
            )
        )
        if of_run:
            self.slurm_job_id = job_id
        return self

    def job_times(self, spec: JobSpec, host: str) -> np.ndarray:
        """A job's sample times on ``host``'s clock: its start, then every interval to its end."""
        start = self.t0_ns + round(spec.start_s * NS) + self.skew_ns(host)
        step = round(self.sample_interval_s * NS)
        return np.arange(start, start + round(spec.seconds * NS) + 1, step, dtype=np.int64)

    def job_series(self, spec: JobSpec, host: str, times: np.ndarray) -> list[SampledSeries]:
        since = (times - times[0]) / NS
        usage: dict[FieldName, np.ndarray] = {
            Job.CPU_SECONDS: spec.cpus_busy * since,
            Job.MEMORY_BYTES: np.full(times.shape, spec.memory_bytes),
            Job.MEMORY_PEAK_BYTES: np.full(times.shape, spec.memory_peak_bytes),
            Job.PROCESS_READ_BYTES: np.round(spec.read_bytes_per_s * since),
            Job.PROCESS_WRITE_BYTES: np.round(spec.write_bytes_per_s * since),
            Job.PROCESSES: np.full(times.shape, 3.0),
        }
        if spec.refault_bytes_per_s is not None:
            usage[Job.FILE_REFAULT_BYTES] = np.round(spec.refault_bytes_per_s * since)
        info: dict[FieldName, np.ndarray] = {
            JobInfo.INFO: np.ones(times.shape),
            JobInfo.ALLOCATED_CPUS: np.full(times.shape, float(spec.cpus)),
        }
        if spec.memory_limit_bytes is not None:
            info[JobInfo.ALLOCATED_MEMORY_BYTES] = np.full(times.shape, spec.memory_limit_bytes)
        tags = {Tag.JOB_ID: spec.job_id, Tag.UID: spec.uid, Tag.USER: spec.user}
        tags |= {Tag.PARTITION: spec.partition}
        if spec.account:
            tags[Tag.ACCOUNT] = spec.account
        if spec.gpus:
            tags[Tag.GPUS] = ",".join(spec.gpus)
            info[JobInfo.ALLOCATED_GPUS] = np.full(times.shape, float(len(spec.gpus)))
        series: list[SampledSeries] = [
            (Job.NAME, {Tag.JOB_ID: spec.job_id}, usage),
            (JobInfo.NAME, tags, info),
        ]
        for gpu in spec.gpu_processes:
            series.append(
                (
                    GpuProcess.NAME,
                    {
                        Tag.GPU: gpu,
                        Tag.UUID: f"GPU-{host}-{gpu}",
                        Tag.PID: "4242",
                        Tag.JOB_ID: spec.job_id,  # the agent joins the pid to its job
                    },
                    {GpuProcess.MEMORY_USED_BYTES: np.full(times.shape, 1e9)},
                )
            )
        return series

    def job_points(self) -> list[Point]:
        """Every job's points on every one of its hosts."""
        out: list[Point] = []
        for spec in self.jobs:
            for host in spec.hosts:
                times = self.job_times(spec, host)
                out += series_points(host, self.job_series(spec, host, times), times)
        return out

    # -- timeline -------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return len(self.hosts) * self.ranks_per_host

    def epoch_bounds_true_ns(self) -> list[tuple[int, int]]:
        bounds, t = [], self.t0_ns
        for spec in self.epochs:
            end = t + round(spec.seconds * NS)
            bounds.append((t, end))
            t = end
        return bounds

    def end_true_ns(self) -> int:
        bounds = self.epoch_bounds_true_ns()
        return bounds[-1][1] if bounds else self.t0_ns

    def skew_ns(self, host: str) -> int:
        return round(self.skew_s.get(host, 0.0) * NS)

    def _rate(self, spec_rates: dict[str, Rate], key: str, host: str) -> float:
        value = spec_rates.get(key, IDLE_RATES[key])
        if callable(value):
            return float(value(host))
        if isinstance(value, dict):
            return float(value.get(host, IDLE_RATES[key]))
        return float(value)

    def _segments(self, host: str, key: str) -> tuple[np.ndarray, np.ndarray]:
        """Boundaries (host clock, ns) and the rate in force after each boundary."""
        skew = self.skew_ns(host)
        times, rates = [], []
        for (start, _end), spec in zip(self.epoch_bounds_true_ns(), self.epochs, strict=True):
            times.append(start + skew)
            rates.append(self._rate(spec.rates, key, host))
        times.append(self.end_true_ns() + skew)
        rates.append(IDLE_RATES[key])
        return np.array(times, dtype=np.int64), np.array(rates, dtype=np.float64)

    def sample_times(self, host: str) -> np.ndarray:
        skew = self.skew_ns(host)
        first = self.t0_ns + skew - round(self.pad_s * NS)
        last = self.end_true_ns() + skew + round(self.pad_s * NS)
        step = round(self.sample_interval_s * NS)
        return np.arange(first, last + 1, step, dtype=np.int64)

    def cumulative(self, host: str, key: str, at_ns: np.ndarray) -> np.ndarray:
        """Integral of the rate from the first sample to each time (exact: rates are
        piecewise constant)."""
        bounds, rates = self._segments(host, key)
        origin = int(self.sample_times(host)[0])
        knots = np.concatenate(([origin], bounds))
        slopes = np.concatenate(([IDLE_RATES[key]], rates))
        durations = np.diff(knots) / NS
        at_knots = np.concatenate(([0.0], np.cumsum(slopes[:-1] * durations)))
        index = np.searchsorted(knots, at_ns, side="right") - 1
        return at_knots[index] + slopes[index] * (at_ns - knots[index]) / NS

    def level(self, host: str, key: str, at_ns: np.ndarray) -> np.ndarray:
        """The piecewise-constant rate itself at each time (for gauges)."""
        bounds, rates = self._segments(host, key)
        index = np.searchsorted(bounds, at_ns, side="right") - 1
        return np.where(index < 0, IDLE_RATES[key], rates[np.clip(index, 0, None)])

    # -- points ---------------------------------------------------------------------------
    def points(self) -> list[Point]:
        out = self.event_points()
        if self.write_samples:
            for host in self.hosts:
                out += self.host_points(host)
            out += self.job_points()
        return out

    def config_fields(self, host_index: int) -> dict[str, object]:
        fields: dict[str, object] = {
            Workload.EVENT: Event.RUN_START,
            Workload.MODEL: self.model,
            Workload.BATCH_SIZE: self.batch_size,
            Workload.WORLD_SIZE: self.world_size,
            Workload.LOCAL_SIZE: self.ranks_per_host,
            Workload.PRECISION: self.precision,
            Workload.DATA_FORMAT: self.data_format,
            Workload.DATASET_IMAGES: self.dataset_images,
            Workload.DATASET_BYTES: self.dataset_bytes,
            Workload.IMAGE_SIZE: self.image_size,
            Workload.HOST_MEMORY_BYTES: self.host_memory_bytes,
            Workload.WARMUP_STEPS: self.warmup_steps,
        }
        if self.target_top1 is not None:
            fields[Workload.TARGET_TOP1] = self.target_top1
        if self.num_classes is not None:
            fields[Workload.NUM_CLASSES] = self.num_classes
        if self.slurm_job_id is not None:
            fields[Workload.SLURM_JOB_ID] = self.slurm_job_id
            fields[Workload.SLURM_STEP_ID] = "0"
        return fields | self.run_start_fields

    def event_points(self) -> list[Point]:
        out: list[Point] = []
        for host_index, host in enumerate(self.hosts):
            skew = self.skew_ns(host)
            for local in range(self.ranks_per_host):
                rank = host_index * self.ranks_per_host + local
                tags = {
                    Tag.HOST: host,
                    Tag.RUN_ID: self.run_id,
                    Tag.RANK: str(rank),
                    Tag.FRAMEWORK: self.framework,
                }

                def event(time_ns: int, fields: dict[str, object], tags=tags) -> Point:
                    return Point(Workload.NAME, dict(tags), fields, time_ns)

                out.append(event(self.t0_ns + skew, self.config_fields(host_index)))
                step_number = 0
                bounds = self.epoch_bounds_true_ns()
                for number, ((start, end), spec) in enumerate(
                    zip(bounds, self.epochs, strict=True), start=1
                ):
                    out.append(
                        event(start + skew, {Workload.EVENT: Event.EPOCH_START, "epoch": number})
                    )
                    timed_images, timed_seconds = 0, 0.0
                    for step_time, step_seconds, images in self._steps(start, end, spec):
                        step_number += 1
                        if step_number > self.warmup_steps:  # as workloads.record.timing times
                            timed_images += images
                            timed_seconds += step_seconds
                        elif not self.warmup_step_events:
                            continue
                        out.append(
                            event(
                                step_time + skew,
                                {
                                    Workload.EVENT: Event.STEP,
                                    Workload.EPOCH: number,
                                    Workload.STEP: step_number,
                                    Workload.IMAGES: images,
                                    Workload.SECONDS: step_seconds,
                                    **self._step_parts(spec, host, rank, step_seconds),
                                },
                            )
                        )
                    end_fields: dict[str, object] = {
                        Workload.EVENT: Event.EPOCH_END,
                        Workload.EPOCH: number,
                        Workload.IMAGES: spec.images_per_rank,
                        Workload.SECONDS: spec.seconds,
                        Workload.TIMED_IMAGES: timed_images,
                        Workload.TIMED_SECONDS: timed_seconds,
                    }
                    if spec.top1 is not None:
                        end_fields[Workload.TOP1] = spec.top1
                    if spec.loss is not None:  # as workloads.record.timing.loss_fields sends it
                        end_fields |= loss_fields(spec.loss)
                    end_fields |= self._anatomy_fields(spec, host, rank, step_number)
                    end_fields |= self._timed_parts(spec, host, rank, timed_seconds)
                    end_fields |= spec.end_fields or {}
                    out.append(event(end + skew, end_fields))
                if self.state != RunState.LIVE:
                    out.append(
                        event(
                            self.end_true_ns() + skew,
                            {Workload.EVENT: Event.RUN_END, Workload.STATE: self.state},
                        )
                    )
        return out

    @staticmethod
    def _step_parts(spec: EpochSpec, host: str, rank: int, seconds: float) -> dict[str, float]:
        """The four parts of ``seconds`` at the epoch's shares for this rank (none without)."""
        if spec.shares is None:
            return {}
        shares = spec.shares(host, rank) if callable(spec.shares) else spec.shares
        wait, compute, communication = (share * seconds for share in shares)
        return {
            Workload.INPUT_WAIT_SECONDS: wait,
            Workload.COMPUTE_SECONDS: compute,
            Workload.COMMUNICATION_SECONDS: communication,
            Workload.OTHER_STEP_SECONDS: seconds - wait - compute - communication,
        }

    def _timed_parts(
        self, spec: EpochSpec, host: str, rank: int, timed_seconds: float
    ) -> dict[str, float]:
        """The timed steps' input wait, at the epoch's shares."""
        parts = self._step_parts(spec, host, rank, timed_seconds)
        if not parts or not timed_seconds:
            return {}
        return {Workload.TIMED_INPUT_WAIT_SECONDS: parts[Workload.INPUT_WAIT_SECONDS]}

    def _anatomy_fields(
        self, spec: EpochSpec, host: str, rank: int, step_number: int
    ) -> dict[str, object]:
        fields: dict[str, object] = {}
        if spec.shares is not None:
            fields[Workload.STEP] = step_number
            fields |= self._step_parts(spec, host, rank, spec.seconds)
        if spec.reads is not None:
            fields[Workload.PROCESS_READ_BYTES] = spec.reads[0]
            fields[Workload.PROCESS_RCHAR_BYTES] = spec.reads[1]
        return fields

    def _steps(self, start: int, end: int, spec: EpochSpec) -> list[tuple[int, float, int]]:
        """(end time, seconds, images) of each step: the epoch split into its steps
        (``steps``, default ``steps_per_epoch``) whose durations follow the pattern."""
        count = self.steps_per_epoch if spec.steps is None else spec.steps
        pattern = spec.step_seconds_pattern or (1.0,)
        weights = np.array([pattern[i % len(pattern)] for i in range(count)], dtype=float)
        durations = weights / weights.sum() * (end - start)
        ends = start + np.cumsum(durations)
        images = spec.images_per_rank // count
        return [
            (round(float(t)), float(d / NS), images) for t, d in zip(ends, durations, strict=True)
        ]

    def host_points(self, host: str) -> list[Point]:
        times, series = self.host_series(host)
        return series_points(host, series, times)

    def host_series(self, host: str) -> tuple[np.ndarray, list[SampledSeries]]:
        """The host's sample times and its series at those times (``sampler``'s, or the
        devices described above)."""
        times = self.sample_times(host)
        sampler = self.sampler or self.device_series
        return times, sampler(host, times)

    def device_series(self, host: str, times: np.ndarray) -> list[SampledSeries]:
        """The devices described above, at the epochs' rates."""
        columns: list[SampledSeries] = []

        def add(
            measurement: str, tags: dict[str, str], fields: dict[FieldName, np.ndarray]
        ) -> None:
            columns.append((measurement, tags, fields))

        def counter(key: str, base: float = 0.0) -> np.ndarray:
            return np.round(base + self.cumulative(host, key, times))

        disk = {
            Disk.READ_BYTES: counter("disk_read", 1e9),
            Disk.WRITE_BYTES: counter("disk_write", 1e8),
        }
        add(Disk.NAME, {Tag.DEVICE: "sda", Tag.KIND: DiskKind.DISK}, disk)
        add(Disk.NAME, {Tag.DEVICE: "sda1", Tag.KIND: DiskKind.PARTITION}, disk)
        add(Disk.NAME, {Tag.DEVICE: "loop0", Tag.KIND: DiskKind.VIRTUAL}, disk)

        nfs = {
            Nfs.SERVER_READ_BYTES: counter("nfs_server_read", 5e8),
            Nfs.APP_READ_BYTES: counter("nfs_app_read", 6e8),
        }
        nfs_tags = {Tag.SERVER: "filer", Tag.EXPORT: "/export", Tag.NFS_VERSION: "4.1"}
        if self.nfs:
            add(Nfs.NAME, {Tag.MOUNTPOINT: "/data", **nfs_tags}, nfs)
            add(
                Nfs.NAME,
                {Tag.MOUNTPOINT: "/data-again", Tag.DUPLICATE_OF: "/data", **nfs_tags},
                nfs,
            )

        has_ib = any(
            self._rate(spec.rates, key, host)
            for spec in self.epochs
            for key in ("ib_rcv", "ib_xmit")
        )
        if has_ib:
            add(
                Infiniband.NAME,
                {Tag.DEVICE: "mlx5_0", Tag.PORT: "1"},
                {
                    Infiniband.RCV_BYTES: counter("ib_rcv", 4e9),
                    Infiniband.XMIT_BYTES: counter("ib_xmit", 3e9),
                },
            )
        add(
            Net.NAME,
            {Tag.INTERFACE: self.nic, Tag.KIND: self.nic_kind},
            {Net.RX_BYTES: counter("net_rx", 2e9), Net.TX_BYTES: counter("net_tx", 1e9)},
        )
        loopback = np.round((times - times[0]) / NS * 1e9)
        add(
            Net.NAME,
            {Tag.INTERFACE: "lo", Tag.KIND: InterfaceKind.LOOPBACK},
            {Net.RX_BYTES: loopback, Net.TX_BYTES: loopback},
        )
        memory = {
            Memory.CACHED_BYTES: 2e9 + self.cumulative(host, "cache_growth", times),
            Memory.PGMAJFAULT: counter("major_faults", 1000),
        }
        if any({"cache_drops", "file_refault"} & set(spec.rates) for spec in self.epochs):
            memory[Memory.PAGE_CACHE_DROPS] = counter("cache_drops", 3)
            memory[Memory.FILE_REFAULT_BYTES] = counter("file_refault", 4096e3)
        add(Memory.NAME, {}, memory)
        elapsed = (times - times[0]) / NS * self.cpus
        busy = self.cumulative(host, "cpu_busy", times) * self.cpus
        iowait = self.cumulative(host, "cpu_iowait", times) * self.cpus
        add(
            Cpu.NAME,
            {},
            {
                Cpu.USER_SECONDS: 0.8 * busy,
                Cpu.SYSTEM_SECONDS: 0.2 * busy,
                Cpu.NICE_SECONDS: np.zeros_like(busy),
                Cpu.IOWAIT_SECONDS: iowait,
                Cpu.IDLE_SECONDS: elapsed - busy - iowait,
                Cpu.IRQ_SECONDS: np.zeros_like(busy),
                Cpu.SOFTIRQ_SECONDS: np.zeros_like(busy),
                Cpu.STEAL_SECONDS: np.zeros_like(busy),
            },
        )
        gpu = self.level(host, "gpu_util", times)
        for index in range(self.ranks_per_host if self.gpus else 0):
            add(
                Gpu.NAME,
                {Tag.GPU: str(index), Tag.UUID: f"GPU-{host}-{index}", Tag.NAME: "Tesla V100"},
                {Gpu.UTILIZATION_PERCENT: gpu},
            )
        return columns


def series_points(
    host: str,
    series: list[SampledSeries],
    times: np.ndarray,
    start: int = 0,
    stop: int | None = None,
) -> list[Point]:
    """The points of a host's sampled ``series`` at ``times[start:stop]``, as the agent
    writes them: counters in whole units as integers (CPU seconds aside), the rest as
    floats."""
    tagged = [
        (measurement, {Tag.HOST: host, **tags}, fields) for measurement, tags, fields in series
    ]
    points = []
    for i, time_ns in enumerate(times[start:stop].tolist(), start=start):
        for measurement, tags, fields in tagged:
            values: dict[str, object] = {}
            for name, array in fields.items():
                value = float(array[i])
                whole = name.is_counter and name.unit != "seconds"
                values[name] = int(value) if whole else value
            points.append(Point(measurement, tags, values, time_ns))
    return points
