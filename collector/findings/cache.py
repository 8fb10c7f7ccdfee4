"""Findings about the data set and the page cache: whether epoch 1 read it from storage and
later epochs from memory, whether it sat in the cache before the run, whether it fits a
host's RAM, and whether it left the cache and was read again.

``cache_warmup``
    Storage reads are high in epoch 1 and fall to at most ``SETTLED_READ_FRACTION`` of that
    afterwards: later epochs are served from the page cache. The reads judged are the
    training's own (its ranks' ``/proc/<pid>/io``) when every rank sent them, else the
    hosts' (disk plus NFS server, every process's). Info: an epoch 1 from storage and
    later epochs from the page cache is how a healthy training on a data set that fits in
    RAM runs. Where the data set is smaller than ``MLPERF_STORAGE_RAM_MULTIPLE`` x RAM it
    says that those later epochs measure memory, not storage: a caveat for whoever reads
    the run as a storage measurement (``dataset_fits_in_memory``'s), not a fault of the
    run; what a cold epoch 1 cost is ``startup``'s and ``storage_bound``'s to say.
    Where the ranks measured the data set's page-cache residency (``--data-dir``: mincore
    at run start and every epoch end), that decides instead: it fires when the data set
    went from under ``CACHED_PERCENT`` cached before the run to at least that at the end of
    the first epoch and stayed so at the start of every later epoch; the reads are its
    evidence, not its test (they include the libraries the ranks loaded).

``dataset_cached_before_run``
    At least ``CACHED_PERCENT`` of the data set sat in every host's page cache before the
    run (measured): epoch 1 read it from memory and tells nothing about storage, whatever
    storage reads the run made (libraries, model code); ``cache_warmup`` stays silent then.

``dataset_fits_in_memory``
    From the run's configuration alone: a data set below 5 x the memory a host gives the
    run cannot measure storage past the first epoch (MLPerf Storage's rule). That memory is
    the smaller of the host's RAM and the run's own memory limit
    (``collector.analysis.memory_limit``: a container's, a pod's, a Slurm job's), so a data
    set that fits in the RAM but not in the limit is said so, not said to fit. Nor is one
    smaller than the limit that the run measured evicted by it (``dataset_evicted``'s
    ``memory_limit`` cause): the ranks' own memory takes the rest of the limit (they send
    no resident memory, so the eviction is the evidence). Info where it only states the
    configuration: a set that fits in RAM is the healthy case of most trainings, and the
    sentence qualifies what its later epochs measure. Warning where it is the one finding
    that explains a cost: the set fits the host's RAM but not the run's own limit, so it is
    read from storage again every epoch, and no measured eviction (``dataset_evicted``,
    itself a warning that names the limit) says so already.

``dataset_evicted``
    After the first epoch, a host-epoch's own reads (its ranks' ``/proc/<pid>/io``) brought
    in at least ``EVICTED_SHARE`` of the data set (and ``MIN_EVICTED_BYTES``) beyond what the
    page cache kept: read + cached at its start - cached at its end (measured). The data set
    left the cache and was read again, whatever the edges say (both can be 100% when an
    epoch re-read what was evicted in it): another job's memory, the job's memory cgroup
    limit, a neighbour's ``drop_caches``, the kernel's proactive reclaim. The kernel's
    counters over the epoch name which (``eviction_cause``: the host's drops, and the
    run's own Slurm job's refaults, else the host's). Before those, the run's own memory
    limit on the host (``memory_limit_cause``): named with its size where the data set
    alone exceeds it, or where pages were reclaimed (or it is not known how they left) in a
    run whose limit is below the host's RAM: the kernel reclaims inside the run's memory
    cgroup when its processes plus its page cache reach the limit (the ranks send no
    resident memory, so their share is not weighed). Such a host-epoch did not stay
    cached for ``storage_bound``, and ``cache_warmup`` does not say the epochs after the
    first were served from memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collector.analysis import residency
from collector.analysis.epochs import EpochAmounts, EpochRow
from collector.analysis.jobs import refaults_by_job, run_job_id
from collector.analysis.memory_limit import host_memory_limits, run_memory_limit, usable_memory
from collector.findings.base import (
    BYTES_PER_MB,
    CACHED_PERCENT,
    DATASET_CACHED,
    DISK_READ,
    FIRST_EPOCH_DATASET_SHARE,
    IF_KNOWN,
    INFO,
    PAGE_CACHE_DELTA,
    READER,
    READS_TEXT,
    TRAINING_READ,
    WARNING,
    Finding,
    StorageReads,
    _bytes,
    _config_number,
    _mbps_text,
    _percent,
    _plural,
    _read_bytes,
    _read_mbps,
    digits,
    epoch_list,
    evidence_json,
    judged_reads,
    words,
)
from collector.findings.context import RunContext
from contract.schema import SYNTHETIC_DATA, Workload
from contract.units import format_fraction

SETTLED_READ_FRACTION = 0.10


# without the data set's size: epoch 1 read at least this much, later epochs a tenth of it
MIN_FIRST_EPOCH_READ_BYTES = 100 * BYTES_PER_MB


MLPERF_STORAGE_RAM_MULTIPLE = 5  # data set >= 5 x RAM to measure storage


# the data set evicted: after the first epoch, a host-epoch's own reads brought in at least
# this share of the data set beyond what the cache kept (read + cached at start - cached at
# end), and at least MIN_EVICTED_BYTES: the pages of libraries a rank first touches after
# epoch 1 count in its reads too (1.7 MB in epoch 2 of a PyTorch run here)
EVICTED_SHARE = 0.25


MIN_EVICTED_BYTES = 20 * BYTES_PER_MB


# The kernel's reclaim evicted the data set when the file refaults over the epoch come to
# at least this share of what the ranks read (every page read back after reclaim is one;
# measured here 0.99-1.0 of the bytes read again). The run's own Slurm job's refaults where
# the agent sampled its cgroup, else the host's: those count every job's files, so others'
# refaults can add to an invalidation's (0.44 of the bytes read beside a pip install).
REFAULT_SHARE = 0.75


@dataclass(frozen=True)
class CacheWarmup:
    """Storage reads high in epoch 1, then fallen: later epochs read from the page cache.
    The ``*storage_read*`` fields are the reads named by ``reads_judged``."""

    reads_judged: StorageReads = field(default=StorageReads.HOSTS, kw_only=True)
    first_epoch: int
    first_epoch_storage_read_bytes: float
    first_epoch_storage_read_mbps: float | None
    settled_from_epoch: int  # the first later epoch that read at most the settled limit
    settled_storage_read_bytes_mean: float = field(
        metadata=digits(0)
    )  # the second half of later epochs
    settled_to_first_ratio: float = field(metadata=digits(4))
    first_epoch_read_to_dataset_ratio: float | None = field(default=None, metadata=digits(3))
    storage_read_bytes_by_epoch: dict[int, float] = field(default_factory=dict)  # first 10
    # the hosts' disk and NFS reads beside the training's own, when those were judged
    hosts_storage_read_bytes_by_epoch: dict[int, float | None] | None = field(
        default=None, metadata=IF_KNOWN
    )
    first_epoch_page_cache_growth_bytes_per_host: float | None = field(
        default=None, metadata=digits(0)
    )
    page_cache_growth_to_dataset_ratio: float | None = field(default=None, metadata=digits(3))
    dataset_bytes: float | None = None
    host_memory_bytes: float | None = None
    dataset_to_memory_ratio: float | None = field(default=None, metadata=digits(3))
    # measured (mincore): the data set's share in the page cache before the run, at the
    # end of the first epoch, and at the start of each epoch (the first 10); None: the
    # ranks did not measure it, and the reads alone decided
    dataset_cached_before_run_percent: float | None = field(
        default=None, metadata={**IF_KNOWN, **digits(1)}
    )
    dataset_cached_after_first_epoch_percent: float | None = field(
        default=None, metadata={**IF_KNOWN, **digits(1)}
    )
    dataset_cached_start_percent_by_epoch: dict[int, float] | None = field(
        default=None, metadata=IF_KNOWN
    )

    @property
    def measured(self) -> bool:
        """The data set's residency was measured (and decided the finding)."""
        return self.dataset_cached_before_run_percent is not None

    @property
    def measures_memory(self) -> bool:
        """Later epochs measure memory: the data set is below MLPerf Storage's 5 x RAM."""
        ratio = self.dataset_to_memory_ratio
        return ratio is not None and ratio < MLPERF_STORAGE_RAM_MULTIPLE


@dataclass(frozen=True)
class DatasetCachedBeforeRun:
    """At least ``CACHED_PERCENT`` of the data set sat in every host's page cache before the
    run (measured with mincore): epoch 1 read it from memory, and its storage reads were
    other files (the libraries the ranks loaded)."""

    dataset_cached_before_run_percent: float = field(metadata=digits(1))  # the least host's
    dataset_files_bytes: float  # the data set's files (train and val) on one host
    first_epoch: int
    # what the training (or the hosts) read from storage in that epoch: not the data set
    first_epoch_storage_read_bytes: float | None
    reads_judged: StorageReads = StorageReads.HOSTS
    dataset_cached_start_percent_by_epoch: dict[int, float] = field(default_factory=dict)
    hosts_cached_before_run_percent: dict[str, float] | None = field(
        default=None, metadata=IF_KNOWN
    )  # several hosts: each one's
    dataset_to_memory_ratio: float | None = field(default=None, metadata=digits(4))


@dataclass(frozen=True)
class DatasetFitsInMemory:
    """The data set is below ``MLPERF_STORAGE_RAM_MULTIPLE`` x the memory a host gives the
    run: its RAM, or the run's own memory limit where that is smaller."""

    dataset_bytes: float
    host_memory_bytes: float
    # of the memory the run may use (usable_memory): the host's RAM or the run's limit
    dataset_to_memory_ratio: float = field(metadata=digits(3))
    required_ratio: int = MLPERF_STORAGE_RAM_MULTIPLE
    # measured: the data set's share in the page cache at the end of the run's last epoch
    dataset_cached_at_end_percent: float | None = field(
        default=None, metadata={**IF_KNOWN, **digits(1)}
    )
    # the run's own memory limit (its ranks' memory cgroup), where it is below the host's RAM
    memory_limit_bytes: int | None = field(default=None, metadata=IF_KNOWN)
    dataset_to_host_memory_ratio: float | None = field(
        default=None, metadata={**IF_KNOWN, **digits(3)}
    )
    # measured: the most of the data set a host-epoch read again after the run's own memory
    # limit evicted it (``dataset_evicted``'s memory_limit cause): its processes take the
    # rest of the limit, so the set did not fit beside them whatever its size against it
    evicted_by_limit_percent: float | None = field(default=None, metadata={**IF_KNOWN, **digits(1)})
    evicted_by_limit_epoch: int | None = field(default=None, metadata=IF_KNOWN)

    @property
    def fits(self) -> bool:
        return self.dataset_to_memory_ratio <= 1.0 and self.evicted_by_limit_percent is None

    @property
    def fits_host_memory_only(self) -> bool:
        """It fits in the host's RAM but not in the run's own limit."""
        ratio = self.dataset_to_host_memory_ratio
        return not self.fits and ratio is not None and ratio <= 1.0

    @property
    def explains_rereads(self) -> bool:
        """It is the one finding that explains a cost: the run's own limit makes it read a
        set the host's RAM holds from storage again every epoch, and no measured eviction
        (``dataset_evicted``, a warning naming the limit) says so already."""
        return self.fits_host_memory_only and self.evicted_by_limit_percent is None


@dataclass(frozen=True)
class EvictedHostEpoch:
    host: str
    epoch: int
    dataset_cached_start_percent: float = field(metadata=digits(1))
    dataset_cached_end_percent: float = field(metadata=digits(1))
    training_read_bytes: int  # the ranks' own reads from storage over the epoch
    # at least this much of the data set left the page cache during the epoch and was read
    # again: read + cached at the start - cached at the end
    evicted_bytes: float = field(metadata=digits(0))
    # of the data set's bytes: over 100 where pages left, were read and left again
    evicted_percent: float = field(metadata=digits(1))
    # the host's page cache over the epoch (every file's): a neighbour's memory shrinks it
    page_cache_delta_bytes: int | None = field(default=None, metadata=IF_KNOWN)
    # how the pages left (``eviction_cause``): drop_caches, reclaim, invalidated, or unknown
    # where the agent counted neither of the two below; memory_limit: the run's own limit
    # on the host (memory_limit_cause), named before the others
    cause: str = "unknown"
    memory_limit_bytes: int | None = field(default=None, metadata=IF_KNOWN)  # the run's, here
    page_cache_drops: int | None = field(default=None, metadata=IF_KNOWN)
    file_refault_bytes: int | None = field(default=None, metadata=IF_KNOWN)  # the host's
    # the refaults judged against the reads: the run's own job's ("job") or the host's
    refaults_judged: str | None = field(default=None, metadata=IF_KNOWN)
    refault_bytes_judged: float | None = field(default=None, metadata=IF_KNOWN)
    # whose pages came back after reclaim: each Slurm job sampled on the host -> its file
    # refaults over the epoch, most first (collector.analysis.jobs.refaults_by_job); None
    # where no job was sampled
    refaults_by_job: dict[str, float] | None = field(default=None, metadata=IF_KNOWN)


@dataclass(frozen=True)
class DatasetEvicted:
    """After the first epoch, the data set left a host's page cache and the ranks read it
    from storage again."""

    epochs: list[int]
    host_epochs: list[EvictedHostEpoch]
    worst: EvictedHostEpoch
    dataset_files_bytes: float  # the data set's files on one host
    dataset_to_memory_ratio: float | None = field(default=None, metadata=digits(3))
    run_job_id: str | None = field(default=None, metadata=IF_KNOWN)  # the run's Slurm job


def _memory_fit(config: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    dataset = _config_number(config, Workload.DATASET_BYTES)
    memory = _config_number(config, Workload.HOST_MEMORY_BYTES)
    ratio = dataset / memory if dataset and memory else None
    return dataset, memory, ratio


@dataclass(frozen=True)
class MeasuredResidency:
    """The data set's page-cache residency over the run's complete epochs, as measured
    (``collector.analysis.residency``): the least host's before the run, and per epoch the
    all-hosts share at its start and end."""

    before_run_percent: float  # the least cached host's, before the run
    hosts_before_run_percent: dict[str, float]
    start_percent: dict[int, float]  # the '*' rows'
    end_percent: dict[int, float]
    files_bytes: float  # the data set's files on one host


def measured_residency(context: RunContext) -> MeasuredResidency | None:
    """None unless every host that ran an epoch measured the data set before the run
    (``run_start``) and the first complete epoch was measured at its end."""
    totals = context.totals()
    if not totals or totals[0].dataset_cached_end_percent is None:
        return None
    measured = residency.before_run(context.model)
    hosts = {row.host for row, _ in context.hosts_rows()}
    if not hosts or not hosts <= set(measured):
        return None
    before = {
        host: round(float(residency.cached_percent(*measured[host])), 1) for host in sorted(hosts)
    }
    return MeasuredResidency(
        before_run_percent=min(before.values()),
        hosts_before_run_percent=before,
        start_percent={
            r.epoch: r.dataset_cached_start_percent
            for r in totals
            if r.dataset_cached_start_percent is not None
        },
        end_percent={
            r.epoch: r.dataset_cached_end_percent
            for r in totals
            if r.dataset_cached_end_percent is not None
        },
        files_bytes=max(files for _, files in measured.values()),
    )


def _warmed_up(measured: MeasuredResidency, first_epoch: int) -> bool:
    """Epoch 1 brought the data set into the page cache and every later epoch began with it
    there."""
    later = [value for epoch, value in measured.start_percent.items() if epoch > first_epoch]
    return (
        measured.before_run_percent < CACHED_PERCENT
        and measured.end_percent.get(first_epoch, 0.0) >= CACHED_PERCENT
        and bool(later)
        and min(later) >= CACHED_PERCENT
    )


def detect_cache_warmup(context: RunContext) -> CacheWarmup | None:
    """Epoch 1 read a large share of the data set from storage and later epochs little:
    decided on the data set's measured residency where the ranks measured it
    (``measured_residency``), else on the training's own reads when every rank sent them
    (``judged_reads``), else the hosts'. Not on random tensors (``--synthetic``): no data set
    was read, and what epoch 1 read was the start-up's (on an H200, 305 MB of torch's CUDA
    libraries, which this rule took for a data set settling in the cache)."""
    if context.config.get(Workload.DATA_FORMAT) == SYNTHETIC_DATA:
        return None
    reads = judged_reads(context.report)
    totals = [r for r in context.totals() if _read_bytes(r, reads) is not None]
    measured = measured_residency(context)
    if measured is not None:
        totals = context.totals()  # residency decides: the reads are only evidence
    if len(totals) < 2:
        return None
    by_epoch = {r.epoch: _read_bytes(r, reads) or 0 for r in totals}
    first, later = totals[0], totals[1:]
    first_bytes = by_epoch[first.epoch]
    dataset, memory, ratio = _memory_fit(context.config)
    settled = later[len(later) // 2 :]  # the second half of the later epochs
    settled_mean = float(np.mean([by_epoch[r.epoch] for r in settled]))
    if measured is not None:
        if not _warmed_up(measured, first.epoch) or evicted_epochs(context):
            return None
        settled_from = next(
            r.epoch for r in later if measured.start_percent.get(r.epoch, 0) >= CACHED_PERCENT
        )
    else:
        if dataset:
            if first_bytes <= 0 or first_bytes < FIRST_EPOCH_DATASET_SHARE * dataset:
                return None
            settled_limit = SETTLED_READ_FRACTION * min(dataset, first_bytes)
        else:
            if first_bytes < MIN_FIRST_EPOCH_READ_BYTES:
                return None
            settled_limit = SETTLED_READ_FRACTION * first_bytes
        if settled_mean > settled_limit:
            return None
        settled_from = next(r.epoch for r in later if by_epoch[r.epoch] <= settled_limit)
    hosts = max(1, len(context.run.hosts))
    growth = first.page_cache_delta_bytes
    return CacheWarmup(
        reads_judged=reads,
        first_epoch=first.epoch,
        first_epoch_storage_read_bytes=first_bytes,
        first_epoch_storage_read_mbps=_read_mbps(first, reads),
        settled_from_epoch=settled_from,
        settled_storage_read_bytes_mean=settled_mean,
        settled_to_first_ratio=settled_mean / first_bytes if first_bytes else 0.0,
        first_epoch_read_to_dataset_ratio=first_bytes / dataset if dataset else None,
        storage_read_bytes_by_epoch={r.epoch: by_epoch[r.epoch] for r in totals[:10]},
        hosts_storage_read_bytes_by_epoch=(
            {r.epoch: r.storage_read_bytes for r in totals[:10]}
            if reads == StorageReads.TRAINING
            else None
        ),
        first_epoch_page_cache_growth_bytes_per_host=(
            growth / hosts if growth is not None else None
        ),
        page_cache_growth_to_dataset_ratio=(
            growth / hosts / dataset if growth is not None and dataset else None
        ),
        dataset_bytes=dataset,
        host_memory_bytes=memory,
        dataset_to_memory_ratio=ratio,
        dataset_cached_before_run_percent=measured.before_run_percent if measured else None,
        dataset_cached_after_first_epoch_percent=(
            measured.end_percent.get(first.epoch) if measured else None
        ),
        dataset_cached_start_percent_by_epoch=(
            dict(list(measured.start_percent.items())[:10]) if measured else None
        ),
    )


def detect_dataset_cached_before_run(context: RunContext) -> DatasetCachedBeforeRun | None:
    """The data set was (measured) in every host's page cache before the run."""
    measured = measured_residency(context)
    if measured is None or measured.before_run_percent < CACHED_PERCENT:
        return None
    reads = judged_reads(context.report)
    first = context.totals()[0]
    _, _, ratio = _memory_fit(context.config)
    several = len(measured.hosts_before_run_percent) > 1
    return DatasetCachedBeforeRun(
        dataset_cached_before_run_percent=measured.before_run_percent,
        dataset_files_bytes=measured.files_bytes,
        first_epoch=first.epoch,
        first_epoch_storage_read_bytes=_read_bytes(first, reads),
        reads_judged=reads,
        dataset_cached_start_percent_by_epoch=dict(list(measured.start_percent.items())[:10]),
        hosts_cached_before_run_percent=measured.hosts_before_run_percent if several else None,
        dataset_to_memory_ratio=ratio,
    )


def detect_dataset_fits_in_memory(context: RunContext) -> DatasetFitsInMemory | None:
    dataset, memory, host_ratio = _memory_fit(context.config)
    limit = run_memory_limit(context.model)
    usable = usable_memory(memory, limit)
    if dataset is None or memory is None or usable is None:
        return None
    ratio = dataset / usable
    if ratio >= MLPERF_STORAGE_RAM_MULTIPLE:
        return None
    limited = limit is not None and limit < memory
    totals = context.totals()
    by_limit = (
        [e for e in evicted_host_epochs(context) if e.cause == "memory_limit"] if limited else []
    )
    worst = max(by_limit, key=lambda e: e.evicted_bytes, default=None)
    return DatasetFitsInMemory(
        dataset_bytes=dataset,
        host_memory_bytes=memory,
        dataset_to_memory_ratio=ratio,
        dataset_cached_at_end_percent=totals[-1].dataset_cached_end_percent if totals else None,
        memory_limit_bytes=limit if limited else None,
        dataset_to_host_memory_ratio=host_ratio if limited else None,
        evicted_by_limit_percent=worst.evicted_percent if worst else None,
        evicted_by_limit_epoch=worst.epoch if worst else None,
    )


def evicted_bytes(row: EpochRow, files_bytes: float) -> float | None:
    """At least how much of the data set left the host's page cache during the epoch and
    was read again: the ranks' own reads plus the bytes cached at its start less those
    cached at its end; None where the residency or the ranks' reads were not measured."""
    start, end = row.dataset_cached_start_percent, row.dataset_cached_end_percent
    read = row.training_read_bytes
    if start is None or end is None or read is None or files_bytes <= 0:
        return None
    return max(0.0, read + (start - end) / 100 * files_bytes)


def judged_refaults(
    row: EpochRow, jobs: dict[str, float] | None, run_job: str | None
) -> tuple[str, float] | None:
    """The file refaults to judge a host-epoch's eviction by: the run's own Slurm job's
    where the agent sampled its cgroup on the host (its own pages only), else the host's
    (every job's); None where neither was counted."""
    if run_job is not None and jobs and run_job in jobs:
        return "job", jobs[run_job]
    if row.file_refault_bytes is None:
        return None
    return "host", float(row.file_refault_bytes)


def eviction_cause(row: EpochRow, refaults: tuple[str, float] | None) -> str:
    """How the data set's pages left the host's page cache in this epoch, from the kernel's
    counters over it: ``drop_caches`` (someone wrote 1 or 3 to vm.drop_caches),
    ``reclaim`` (the ranks' reads were mostly refaults, ``REFAULT_SHARE``: pages the
    kernel's reclaim had evicted; memory ran short, a cgroup's limit, DAMON pageout),
    ``invalidated`` (neither: posix_fadvise DONTNEED, ``vmtouch -e``, the files rewritten),
    ``unknown`` where the agent counted neither."""
    if row.page_cache_drops is None or refaults is None:
        return "unknown"
    if row.page_cache_drops > 0:
        return "drop_caches"
    if refaults[1] >= REFAULT_SHARE * (row.training_read_bytes or 0):
        return "reclaim"
    return "invalidated"


def memory_limit_cause(
    cause: str, files_bytes: float, limit_bytes: int | None, host_memory_bytes: float | None
) -> bool:
    """The run's own memory limit on the host evicted the data set: the data set's files
    alone exceed it, or the kernel reclaimed them (or how they left is not known) while the
    limit is below the host's RAM, so the run's cgroup reached its limit before the host ran
    short. A drop_caches is named as such."""
    if limit_bytes is None or cause == "drop_caches":
        return False
    if files_bytes > limit_bytes:
        return True
    below_ram = host_memory_bytes is not None and limit_bytes < host_memory_bytes
    return below_ram and cause in ("reclaim", "unknown")


def _evicted_rows(context: RunContext) -> list[tuple[EpochRow, EpochAmounts, float, float]]:
    """The host-epochs after the first whose ranks read the data set again (``evicted_bytes``
    at least ``EVICTED_SHARE`` of it and ``MIN_EVICTED_BYTES``): (row, its amounts, the
    data set's bytes on the host, the bytes evicted). From the report alone."""
    measured = measured_residency(context)
    if measured is None:
        return []
    files_by_host = {
        host: files for host, (_, files) in residency.before_run(context.model).items()
    }
    first_epoch = context.totals()[0].epoch
    found = []
    for row, amounts in context.hosts_rows():
        if row.epoch <= first_epoch:
            continue
        files = files_by_host.get(row.host, measured.files_bytes)
        evicted = evicted_bytes(row, files)
        if evicted is None or evicted < max(EVICTED_SHARE * files, MIN_EVICTED_BYTES):
            continue
        found.append((row, amounts, files, evicted))
    return found


def evicted_epochs(context: RunContext) -> set[tuple[str, int]]:
    """(host, epoch) of each host-epoch that read the data set again (``_evicted_rows``)."""
    return {(row.host, row.epoch) for row, _, _, _ in _evicted_rows(context)}


def evicted_host_epochs(context: RunContext) -> list[EvictedHostEpoch]:
    """``_evicted_rows`` with how the pages left each (``eviction_cause``) and whose came
    back, by Slurm job (one store read)."""
    found = _evicted_rows(context)
    by_job = refaults_by_job(
        context.store, [(row.host, a.start_ns, a.end_ns) for row, a, _, _ in found]
    )
    run_job = run_job_id(context.run)
    limits = host_memory_limits(context.model)
    _, host_memory, _ = _memory_fit(context.config)
    out = []
    for row, amounts, files, evicted in found:
        jobs = by_job.get((row.host, amounts.start_ns, amounts.end_ns))
        refaults = judged_refaults(row, jobs, run_job)
        cause = eviction_cause(row, refaults)
        limit = limits.get(row.host)
        if memory_limit_cause(cause, files, limit, host_memory):
            cause = "memory_limit"
        out.append(
            EvictedHostEpoch(
                host=row.host,
                epoch=row.epoch,
                dataset_cached_start_percent=row.dataset_cached_start_percent or 0.0,
                dataset_cached_end_percent=row.dataset_cached_end_percent or 0.0,
                training_read_bytes=row.training_read_bytes or 0,
                evicted_bytes=evicted,
                evicted_percent=100 * evicted / files,
                page_cache_delta_bytes=row.page_cache_delta_bytes,
                cause=cause,
                memory_limit_bytes=limit,
                page_cache_drops=row.page_cache_drops,
                file_refault_bytes=row.file_refault_bytes,
                refaults_judged=refaults[0] if refaults else None,
                refault_bytes_judged=refaults[1] if refaults else None,
                refaults_by_job=jobs,
            )
        )
    return out


def detect_dataset_evicted(context: RunContext) -> DatasetEvicted | None:
    """The data set left a host's page cache after the first epoch and was read again."""
    evicted = evicted_host_epochs(context)
    measured = measured_residency(context)
    if not evicted or measured is None:
        return None
    _, _, ratio = _memory_fit(context.config)
    return DatasetEvicted(
        epochs=sorted({e.epoch for e in evicted}),
        host_epochs=evicted[:20],
        worst=max(evicted, key=lambda e: e.evicted_bytes),
        dataset_files_bytes=measured.files_bytes,
        dataset_to_memory_ratio=ratio,
        run_job_id=run_job_id(context.run),
    )


READS_CHART = {StorageReads.TRAINING: TRAINING_READ, StorageReads.HOSTS: DISK_READ}


def _cached_by_epoch(by_epoch: dict[int, float]) -> str:
    """``epoch 1 100%, epoch 2 100%``: the data set's share cached as each epoch began."""
    return ", ".join(f"epoch {epoch} {_percent(value)}" for epoch, value in by_epoch.items())


@words.register
def word_cache_warmup(found: CacheWarmup) -> Finding:
    dataset = found.dataset_bytes
    growth = found.first_epoch_page_cache_growth_bytes_per_host
    of_what = f"of the data set ({_bytes(dataset)})" if dataset else "of that"
    rate = found.first_epoch_storage_read_mbps
    took = (
        f"{READS_TEXT[found.reads_judged]} took "
        f"{_bytes(found.first_epoch_storage_read_bytes)} from storage"
        + (f" at {_mbps_text(rate)} MB/s" if rate is not None else "")
    )
    if found.measured:
        later = {
            epoch: value
            for epoch, value in (found.dataset_cached_start_percent_by_epoch or {}).items()
            if epoch > found.first_epoch
        }
        explanation = (
            f"The data set was {_percent(found.dataset_cached_before_run_percent)} in the page "
            f"cache before the run and {_percent(found.dataset_cached_after_first_epoch_percent)}"
            f" at the end of epoch {found.first_epoch} (measured with mincore): epoch "
            f"{found.first_epoch} read it from storage; {took}. The later epochs began with "
            f"it cached ({_cached_by_epoch(later)}): they were served from the page cache and "
            f"read {_bytes(found.settled_storage_read_bytes_mean)} from storage on average."
        )
        title = (
            f"Epoch {found.first_epoch} read the data set from storage; later epochs ran from "
            "the page cache"
        )
    else:
        explanation = (
            f"In epoch {found.first_epoch} {took}; by epoch {found.settled_from_epoch} they had "
            f"fallen below {format_fraction(SETTLED_READ_FRACTION)} {of_what}, and the last "
            f"epochs read {_bytes(found.settled_storage_read_bytes_mean)} on average. The data "
            "set is being served from the page cache after the first pass."
        )
        title = f"Storage reads stop after epoch {found.first_epoch}: later epochs run from cache"
    if growth is not None and growth > 0:
        explanation += (
            f" The page cache grew by {_bytes(growth)} per host during epoch "
            f"{found.first_epoch}" + (f" (data set: {_bytes(dataset)})." if dataset else ".")
        )
    if found.measures_memory:
        explanation += (
            f" With a {_bytes(dataset)} data set and {_bytes(found.host_memory_bytes)} of RAM per "
            "host, the epochs after the first measure memory, not storage: to measure storage "
            f"the data set must be at least {MLPERF_STORAGE_RAM_MULTIPLE}x RAM (MLPerf "
            "Storage), or the caches must be dropped before every epoch."
        )
    return Finding(
        rule="cache_warmup",
        severity=INFO,
        title=title,
        explanation=explanation,
        evidence=evidence_json(found),
        chart=DATASET_CACHED if found.measured else READS_CHART[found.reads_judged],
    )


@words.register
def word_dataset_cached_before_run(found: DatasetCachedBeforeRun) -> Finding:
    read = found.first_epoch_storage_read_bytes
    explanation = (
        f"Before the run {_percent(found.dataset_cached_before_run_percent)} of the data set's "
        f"{_bytes(found.dataset_files_bytes)} sat in "
        + ("every host's" if found.hosts_cached_before_run_percent else "the host's")
        + f" page cache (measured with mincore): epoch {found.first_epoch} read it from "
        "memory, not from storage, so no epoch of this run tells anything about storage "
        f"(as each epoch began: {_cached_by_epoch(found.dataset_cached_start_percent_by_epoch)})."
    )
    if read:
        explanation += (
            f" The {_bytes(read)} {READER[found.reads_judged]} read from storage in epoch "
            f"{found.first_epoch} were other files, not the data set: the libraries, model and "
            "code the ranks loaded."
        )
    explanation += (
        " To measure storage, run with --drop-caches (the data set is evicted before the run)."
    )
    return Finding(
        rule="dataset_cached_before_run",
        severity=INFO,
        title="The data set was already in the page cache before the run: epoch 1 read it "
        "from memory",
        explanation=explanation,
        evidence=evidence_json(found),
        chart=DATASET_CACHED,
    )


@words.register
def word_dataset_evicted(found: DatasetEvicted) -> Finding:
    worst = found.worst
    explanation = (
        f"On {worst.host}, {_percent(worst.dataset_cached_start_percent)} of the data set's "
        f"{_bytes(found.dataset_files_bytes)} was in the page cache as epoch {worst.epoch} "
        f"began and {_percent(worst.dataset_cached_end_percent)} as it ended (measured with "
        f"mincore), and the training's own processes read {_bytes(worst.training_read_bytes)} "
        f"from storage in it: at least {_bytes(worst.evicted_bytes)} "
        f"({_percent(worst.evicted_percent)} of the data set"
        + (": some pages left more than once" if worst.evicted_percent > 100 else "")
        + ") left the cache during the epoch "
        "(read + cached at the start - cached at the end), and what the ranks read of it "
        "after that came from storage again."
    )
    if len(found.host_epochs) > 1:
        explanation += (
            f" {len(found.host_epochs)} host-epochs did so, in epoch{_plural(found.epochs)} "
            f"{epoch_list(found.epochs)}."
        )
    if worst.page_cache_delta_bytes is not None:
        explanation += (
            f" The host's page cache (every file's) changed by "
            f"{'-' if worst.page_cache_delta_bytes < 0 else '+'}"
            f"{_bytes(abs(worst.page_cache_delta_bytes))} over that epoch."
        )
    explanation += _eviction_cause(worst, found.dataset_to_memory_ratio, found.dataset_files_bytes)
    explanation += _whose_refaults(worst, found.run_job_id)
    explanation += (
        " Those epochs measure storage, not memory, and do not compare with epochs that found "
        "the data set cached."
    )
    return Finding(
        rule="dataset_evicted",
        severity=WARNING,
        title=f"The data set left the page cache during epoch{_plural(found.epochs)} "
        f"{epoch_list(found.epochs)}, after the first",
        explanation=explanation,
        evidence=evidence_json(found),
        chart=TRAINING_READ,
    )


def _whose_refaults(worst: EvictedHostEpoch, run_job: str | None) -> str:
    """The Slurm jobs on the host whose file pages came back after reclaim in the epoch."""
    jobs = {job: b for job, b in (worst.refaults_by_job or {}).items() if b > 0}
    if not jobs or worst.cause != "reclaim":
        return ""
    named = [
        f"job {job} (this run's) {_bytes(b)}" if job == run_job else f"job {job} {_bytes(b)}"
        for job, b in list(jobs.items())[:5]
    ]
    text = f" Whose pages came back on {worst.host}, by Slurm job: {', '.join(named)}."
    if run_job is not None and list(jobs) == [run_job]:
        text += (
            " Only this run's job lost pages: its own memory limit, most likely (the page "
            "cache its ranks read counts against it; Slurm's --mem)."
        )
    return text


def _eviction_cause(worst: EvictedHostEpoch, ratio: float | None, files_bytes: float) -> str:
    """What took the pages, as the kernel's counters over the epoch tell it
    (``rules.eviction_cause``)."""
    refaulted = _bytes(worst.refault_bytes_judged or 0)
    where = (
        "by this run's job (its memory cgroup's workingset_refault_file)"
        if worst.refaults_judged == "job"
        else "on the host (vmstat workingset_refault_file, every job's files)"
    )
    if worst.cause == "memory_limit":
        limit = worst.memory_limit_bytes or 0
        how = (
            f"the data set's files alone ({_bytes(files_bytes)}) exceed it"
            if files_bytes > limit
            else f"the kernel reclaimed its pages (of the {_bytes(worst.training_read_bytes)} "
            f"the ranks read, {refaulted} were read back {where}) while the host has more RAM"
            if worst.refaults_judged is not None
            else "its limit is below the host's RAM, so the run's cgroup runs short first"
        )
        return (
            f" The run's own memory limit took them: its ranks on {worst.host} may use "
            f"{_bytes(limit)} (their memory cgroup's limit: a container's, a pod's or a Slurm "
            "job's), and the page cache they read counts against it beside their processes' "
            f"memory: {how}. Raise the limit by the data set's size, or expect every epoch "
            "to read it from storage."
        )
    if worst.cause == "drop_caches":
        times = worst.page_cache_drops or 0
        return (
            f" The host's page cache was dropped {times} time{'s' if times != 1 else ''} "
            "during that epoch (vm.drop_caches: root's echo 1 or 3 > "
            "/proc/sys/vm/drop_caches, as some job prologs and epilogs, benchmarks and "
            "admins' scripts do)."
        )
    if worst.cause == "reclaim":
        return (
            f" The kernel's reclaim took them: of the {_bytes(worst.training_read_bytes)} "
            f"the ranks read, {refaulted} were file pages it had evicted, read back {where}. "
            "Memory ran short: other jobs' memory on the node, this job's memory cgroup "
            "limit (its page cache counts against it), or the kernel's proactive reclaim "
            "(DAMON pageout)."
        )
    if worst.cause == "invalidated":
        return (
            " Neither a drop_caches (none counted on the host) nor the kernel's reclaim "
            f"(of the {_bytes(worst.training_read_bytes)} the ranks read, only {refaulted} "
            f"were pages it had evicted, read back {where}) took them: they were "
            "invalidated, as posix_fadvise DONTNEED, vmtouch -e or rewriting the files "
            "does, by another job or by this one."
        )
    lead = (
        f" The data set fits in a host's RAM ({ratio:.2g}x), so something else took the "
        "memory or dropped the pages:"
        if ratio is not None and ratio <= 1.0
        else " Something took the memory or dropped the pages:"
    )
    return lead + (
        " other jobs' memory on the node, this job's memory cgroup limit (its page cache "
        "counts against it), a drop_caches or vmtouch -e run by another job, or the kernel's "
        "proactive reclaim (DAMON pageout)."
    )


@words.register
def word_dataset_fits_in_memory(found: DatasetFitsInMemory) -> Finding:
    limit = found.memory_limit_bytes
    if found.fits_host_memory_only:
        title = (
            f"The data set fits in the host's RAM but not in the run's {_bytes(limit)} memory limit"
        )
    elif limit is not None:
        title = (
            f"The data set fits in the run's {_bytes(limit)} memory limit"
            if found.fits
            else f"The data set is less than {MLPERF_STORAGE_RAM_MULTIPLE}x the run's memory limit"
        )
    else:
        title = (
            "The data set fits in a host's RAM"
            if found.fits
            else f"The data set is less than {MLPERF_STORAGE_RAM_MULTIPLE}x a host's RAM"
        )
    memory = f"each host has {_bytes(found.host_memory_bytes)} of RAM"
    if limit is not None:
        memory += (
            f" and the run's ranks may use {_bytes(limit)} of it (their memory cgroup's limit:"
            " a container's, a pod's or a Slurm job's; their page cache counts against it)"
        )
    explanation = (
        f"The data set is {_bytes(found.dataset_bytes)} and {memory} "
        f"({found.dataset_to_memory_ratio:.2g}x"
        + (" its limit). " if limit is not None else "). ")
        + (
            "After the first epoch the page cache can hold all of it, so throughput measures "
            "memory, not storage. "
            if found.fits
            else f"It fits the limit's size, not beside the ranks' own memory: epoch "
            f"{found.evicted_by_limit_epoch} read {_percent(found.evicted_by_limit_percent)} of "
            "it from storage again after the limit evicted it (dataset_evicted). "
            if found.evicted_by_limit_percent is not None and found.dataset_to_memory_ratio <= 1.0
            else "Part of it is read from storage again in every epoch, the rest stays in "
            "the page cache between epochs. "
            if found.fits_host_memory_only
            else "A large part of it stays in the page cache between epochs. "
        )
        + (
            f"Measured: {_percent(found.dataset_cached_at_end_percent)} of it was in the page "
            "cache at the end of the run. "
            if found.dataset_cached_at_end_percent is not None
            else ""
        )
        + f"MLPerf Storage requires a data set of at least {MLPERF_STORAGE_RAM_MULTIPLE}x "
        "RAM to measure storage."
    )
    return Finding(
        rule="dataset_fits_in_memory",
        severity=WARNING if found.explains_rereads else INFO,
        title=title,
        explanation=explanation,
        evidence=evidence_json(found),
        chart=PAGE_CACHE_DELTA,
    )
