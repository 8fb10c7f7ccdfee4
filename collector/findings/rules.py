"""The rules over a run's per-epoch view: storage, cache, fabric, input and scaling.

Each rule is a *detection*, ``detect_<rule>(context) -> evidence | None``, a function of a
``RunContext`` (the run, its events, its per-epoch report, and the store for the rules that
compare runs) returning the rule's typed evidence (``collector.findings.evidence``: a
frozen dataclass of the values as measured, units in the field names), then its
*wording*, ``collector.findings.words.words(evidence) -> Finding`` (title, explanation,
severity, and the declared report column that shows it), a pure function of the evidence.
``RULES`` are those two joined; ``DETECTORS`` the detections by rule name. The rules
encode what the published studies found by hand:

``cache_warmup``
    Storage reads are high in epoch 1 and fall to at most ``SETTLED_READ_FRACTION`` of that
    afterwards: later epochs are served from the page cache. The reads judged are the
    training's own (its ranks' ``/proc/<pid>/io``) when every rank sent them, else the
    hosts' (disk plus NFS server, every process's). Warning when the data set is smaller
    than ``MLPERF_STORAGE_RAM_MULTIPLE`` x RAM, since those later epochs then measure
    memory, not storage.
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
    From the run's configuration alone: a data set below 5 x a host's RAM cannot measure
    storage past the first epoch (MLPerf Storage's rule); warning when it fits outright.
``dataset_evicted``
    After the first epoch, a host-epoch's own reads (its ranks' ``/proc/<pid>/io``) brought
    in at least ``EVICTED_SHARE`` of the data set (and ``MIN_EVICTED_BYTES``) beyond what the
    page cache kept: read + cached at its start - cached at its end (measured). The data set
    left the cache and was read again, whatever the edges say (both can be 100% when an
    epoch re-read what was evicted in it): another job's memory, the job's memory cgroup
    limit, a neighbour's ``drop_caches``, the kernel's proactive reclaim. The kernel's
    counters over the epoch name which (``eviction_cause``: the host's drops, and the
    run's own Slurm job's refaults, else the host's). Such a host-epoch did not stay
    cached for ``storage_bound``, and ``cache_warmup`` does not say the epochs after the
    first were served from memory.
``fabric_carries_storage``
    Receive minus send on the fabric (InfiniBand, else the NICs) is within
    ``FABRIC_MATCH_TOLERANCE`` of the NFS read rate: gradients are sent and received in equal
    amounts, so the surplus received is the data set crossing the same fabric.
``storage_bound``
    Epochs with high iowait (or the ranks waiting for input at least ``INPUT_WAIT_SHARE``
    of their step time: on a shared node others' work hides iowait), unstable step
    throughput (coefficient of variation of the steps' images/s) and high storage reads at
    once (at least ``MIN_STORAGE_MBPS``, or however slow where the epoch brought a quarter
    of the data set into the page cache, measured, or read it again, ``dataset_evicted``):
    training waits on storage (the Caffe2 behaviour while uncached). Storage reads judged as
    ``cache_warmup`` does.
    A host-epoch whose data set was measured at least ``CACHED_PERCENT`` cached at its start
    and end, and that did not read it again, read none of it from storage, and is never one.
``input_bound``
    CPU saturated while the GPUs are mostly idle: the input pipeline (decoding,
    augmentation) cannot feed the GPUs.
``epoch_restart``
    In epochs after the first, an epoch's first timed step takes at least
    ``EPOCH_RESTART_RATIO`` times the median of the epoch's other timed steps and its extra
    time is at least ``EPOCH_RESTART_SHARE`` of the epoch (the stored step events, per
    rank): something restarts with every epoch, in PyTorch the DataLoader's worker
    processes unless ``persistent_workers=True``.
``scaling_loss``
    Scaling efficiency below ``SCALING_EFFICIENCY_FLOOR`` against the group's 1-GPU
    baseline, or, when both this run and the reference run (a run on fewer nodes, else the
    1-GPU run) have a step anatomy, each rank at least ``SCALING_LOSS_MIN_FRACTION`` slower
    than the reference's. Explained by the step anatomy when both have one
    (``collector.findings.anatomy.scaling_attribution``: the images/s lost, the scaling
    table's ideal - actual, split into more all-reduce, more input wait, slower compute and
    the rest, with the fabric's bytes per step), else by the resources that *grew* against
    the reference run: fabric bytes per image, storage reads per node (judged as
    ``cache_warmup`` does, the same reads for both runs), CPU and GPU utilisation. Runs
    compare only within one scaling group (framework, model, precision, batch per rank,
    data format, image size).
``precision_read_demand``
    The run reads storage in its first epoch at least ``PRECISION_READ_RATIO`` times as
    fast as a like run at another precision (``like_for_precision``: model, framework,
    data set, batch per rank, image size, world size and nodes), whichever precision is
    the faster reader (study 003: FP16 read 1.28x as fast as FP32). The reads compared
    are the training's own when both runs' ranks sent them, else the hosts'.

Every finding carries ``evidence``, the numbers behind it (the evidence as JSON), and
``chart``, the report column (and dashboard chart) that shows it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from collector.analysis import residency
from collector.analysis.epochs import BYTES_PER_MB, EpochAmounts, EpochReport, EpochRow
from collector.analysis.jobs import refaults_by_job, run_job_id
from collector.analysis.run import RunModel
from collector.analysis.scaling import GroupKey, RunFacts, scaling_groups
from collector.findings.context import RunContext, complete_epochs
from collector.findings.evidence import (
    CACHED_PERCENT,
    CPU_SATURATED_PERCENT,
    EPOCH_RESTART_RATIO,
    EPOCH_RESTART_SHARE,
    EVICTED_SHARE,
    FABRIC_MATCH_TOLERANCE,
    FIRST_EPOCH_DATASET_SHARE,
    GPU_LOW_PERCENT,
    INPUT_WAIT_SHARE,
    IOWAIT_HIGH_PERCENT,
    MIN_EVICTED_BYTES,
    MIN_FIRST_EPOCH_READ_BYTES,
    MIN_NETWORK_STORAGE_MBPS,
    MIN_STEPS_FOR_CV,
    MIN_STEPS_FOR_RESTART,
    MIN_STORAGE_MBPS,
    MLPERF_STORAGE_RAM_MULTIPLE,
    PRECISION_READ_RATIO,
    REFAULT_SHARE,
    RESOURCE_CHANGE_RATIO,
    SCALING_LOSS_MIN_FRACTION,
    SETTLED_READ_FRACTION,
    STEP_CV_UNSTABLE,
    STORAGE_HIGH_SHARE_OF_PEAK,
    UTILISATION_CHANGE_POINTS,
    BusyHostEpoch,
    CacheWarmup,
    DatasetCachedBeforeRun,
    DatasetEvicted,
    DatasetFitsInMemory,
    EpochRestart,
    EvictedHostEpoch,
    FabricCarriesStorage,
    InputBound,
    PrecisionReadDemand,
    RateGrowth,
    ResourceUse,
    RestartEpoch,
    ScalingLoss,
    StorageBound,
    StorageReads,
    UnstableHostEpoch,
    UtilisationGrowth,
)
from collector.store.api import RunInfo, StepTable
from contract.markers import ALL_HOSTS
from contract.schema import SYNTHETIC_DATA, RunState, Workload


def _config_number(config: dict[str, Any], name: str) -> float | None:
    value = config.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value > 0 else None


# --------------------------------------------------------------------------------------
# cache warm-up and data set size
# --------------------------------------------------------------------------------------


def _memory_fit(config: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    dataset = _config_number(config, Workload.DATASET_BYTES)
    memory = _config_number(config, Workload.HOST_MEMORY_BYTES)
    ratio = dataset / memory if dataset and memory else None
    return dataset, memory, ratio


def judged_reads(*reports: EpochReport) -> StorageReads:
    """Which storage reads the rules judge, decided here for all of them: the training's own
    (the report's ``training_read_bytes``, which is ``collector.analysis.anatomy.epoch_reads``) when
    every host's ranks sent them in every complete epoch of every report given (the run's,
    and the run it is compared with), else the hosts' disk and NFS-server reads. On a busy
    node other processes' reads hide the training's, which its own ``/proc/<pid>/io``
    counts alone; two runs are compared on the same kind of reads."""
    for report in reports:
        complete = complete_epochs(report)
        rows = [r for r in report.rows if r.host != ALL_HOSTS and r.epoch in complete]
        if not rows or any(row.training_read_bytes is None for row in rows):
            return StorageReads.HOSTS
    return StorageReads.TRAINING if reports else StorageReads.HOSTS


def _read_bytes(row: EpochRow, reads: StorageReads) -> int | None:
    if reads == StorageReads.TRAINING:
        return row.training_read_bytes
    return row.storage_read_bytes


def _read_mbps(row: EpochRow, reads: StorageReads) -> float | None:
    if reads == StorageReads.TRAINING:
        return _mbps(row.training_read_bytes, row.seconds)
    return row.storage_read_mbps


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
    dataset, memory, ratio = _memory_fit(context.config)
    if ratio is None or ratio >= MLPERF_STORAGE_RAM_MULTIPLE:
        return None
    totals = context.totals()
    return DatasetFitsInMemory(
        dataset_bytes=dataset,
        host_memory_bytes=memory,
        dataset_to_memory_ratio=ratio,
        dataset_cached_at_end_percent=totals[-1].dataset_cached_end_percent if totals else None,
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
    out = []
    for row, amounts, files, evicted in found:
        jobs = by_job.get((row.host, amounts.start_ns, amounts.end_ns))
        refaults = judged_refaults(row, jobs, run_job)
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
                cause=eviction_cause(row, refaults),
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


# --------------------------------------------------------------------------------------
# fabric carries storage
# --------------------------------------------------------------------------------------


def detect_fabric_carries_storage(context: RunContext) -> FabricCarriesStorage | None:
    matches, compared = [], 0
    for row, amounts in context.hosts_rows():
        storage = row.nfs_server_read_mbps
        surplus = row.rx_minus_tx_mbps
        if storage is None or surplus is None or storage < MIN_NETWORK_STORAGE_MBPS:
            continue
        compared += 1
        difference = abs(surplus - storage) / storage
        if difference <= FABRIC_MATCH_TOLERANCE:
            matches.append((row, amounts, difference))
    if not matches:
        return None
    row, amounts, difference = max(matches, key=lambda m: m[0].nfs_server_read_mbps)
    rcv, xmit = (
        (row.ib_rcv_mbps, row.ib_xmit_mbps)
        if amounts.fabric == "ib"
        else (_mbps(row.net_rx_bytes, row.seconds), _mbps(row.net_tx_bytes, row.seconds))
    )
    return FabricCarriesStorage(
        host=row.host,
        epoch=row.epoch,
        fabric=amounts.fabric,
        rcv_mbps=rcv,
        xmit_mbps=xmit,
        rx_minus_tx_mbps=row.rx_minus_tx_mbps,
        nfs_server_read_mbps=row.nfs_server_read_mbps,
        relative_difference=difference,
        matching_host_epochs=len(matches),
        compared_host_epochs=compared,
    )


def _mbps(value: int | None, seconds: float) -> float | None:
    if value is None or not seconds:
        return None
    return round(value / seconds / BYTES_PER_MB, 3)


# --------------------------------------------------------------------------------------
# storage bound and input bound
# --------------------------------------------------------------------------------------


def step_epochs(steps: StepTable, model: RunModel) -> np.ndarray:
    """Each step's epoch (float64, NaN for none), as ``collector.analysis.run.assign_epochs``
    gives it: its own ``epoch`` field, else the epoch of its (host, rank)'s latest
    ``epoch_start`` at or before it (``model.epoch_starts``)."""
    epochs = np.trunc(steps.epoch)  # assign_epochs takes int(epoch)
    missing = np.flatnonzero(np.isnan(epochs))
    if not missing.size:
        return epochs
    hosts = steps.host_names()
    for key, in_order in model.epoch_starts.items():
        marks = sorted(in_order, key=lambda mark: mark[0])  # of two at one time, the later wins
        rows = missing[(hosts[missing] == key[0]) & (steps.rank[missing] == key[1])]
        times = np.array([time_ns for time_ns, _ in marks], dtype=np.int64)
        numbers = np.array([float(epoch) for _, epoch in marks] + [math.nan])
        latest = np.searchsorted(times, steps.time_ns[rows], side="right") - 1
        epochs[rows] = numbers[latest]  # -1 (none yet) picks the NaN at the end
    return epochs


def timed_step_rows(steps: StepTable, epochs: np.ndarray, warmup_steps: int) -> np.ndarray:
    """The rows of the steps that find an epoch (``epochs``: ``step_epochs``) after each
    rank's first ``warmup_steps`` of them, in table order."""
    rows = np.flatnonzero(~np.isnan(epochs))
    if not rows.size:
        return rows
    # each step's place among its (host, rank)'s steps with an epoch, from 0
    order, starts = _stable_groups(steps.host_index[rows], steps.rank[rows])
    place = np.empty(rows.size, dtype=np.int64)
    place[order] = np.arange(rows.size) - np.repeat(starts, np.diff(starts, append=rows.size))
    return rows[place >= warmup_steps]


def step_rates(
    steps: StepTable, model: RunModel, warmup_steps: int
) -> dict[tuple[str, int], list[float]]:
    """Images/s of every step after each rank's warm-up, per (host, epoch): the steps that
    find an epoch (``step_epochs``) count towards their rank's warm-up; those with a
    numeric ``images`` and a positive ``seconds`` give a rate. Rates are in step order."""
    epochs = step_epochs(steps, model)
    rows = timed_step_rows(steps, epochs, warmup_steps)
    with np.errstate(invalid="ignore"):
        rows = rows[~np.isnan(steps.images[rows]) & (steps.seconds[rows] > 0)]
    if not rows.size:
        return {}
    with np.errstate(over="ignore"):  # (a step of 1e-300 s: inf, as Python's division gives)
        rates = steps.images[rows] / steps.seconds[rows]
    order, starts = _stable_groups(steps.host_index[rows], epochs[rows])
    return {
        (steps.hosts[steps.host_index[rows[first]]], int(epochs[rows[first]])): group.tolist()
        for first, group in zip(order[starts], np.split(rates[order], starts[1:]), strict=True)
    }


def _stable_groups(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by equal keys: the order that puts each group's rows together (keeping
    their order within it), and where each group starts in that order."""
    group = np.zeros(keys[0].size, dtype=np.int64)
    for key in keys:  # a number per distinct combination (at most rows**2 of them)
        values, code = np.unique(key, return_inverse=True)
        group = group * values.size + code
    order = np.argsort(group, kind="stable")
    starts = np.flatnonzero(np.diff(group[order], prepend=-1))
    return order, starts


def coefficient_of_variation(values: list[float]) -> float | None:
    if len(values) < MIN_STEPS_FOR_CV:
        return None
    array = np.asarray(values, dtype=float)
    mean = array.mean()
    return float(array.std() / mean) if mean > 0 else None


def _dataset_stayed_cached(row: EpochRow, evicted: set[tuple[str, int]]) -> bool:
    """The data set was measured in the host's page cache at the epoch's start and end, and
    the epoch did not read it again (``evicted``: host-epochs that did): it read none of it
    from storage."""
    start, end = row.dataset_cached_start_percent, row.dataset_cached_end_percent
    if (row.host, row.epoch) in evicted:
        return False
    return start is not None and end is not None and min(start, end) >= CACHED_PERCENT


def _dataset_came_in(row: EpochRow) -> bool:
    """The epoch brought at least ``FIRST_EPOCH_DATASET_SHARE`` of the data set into the
    host's page cache (measured): it read that much of it from storage, however slowly."""
    start, end = row.dataset_cached_start_percent, row.dataset_cached_end_percent
    return start is not None and end is not None and end - start >= 100 * FIRST_EPOCH_DATASET_SHARE


def _waited(row: EpochRow) -> bool:
    """The host's CPUs waited on I/O, or its ranks waited for input: on a shared node other
    processes' work fills the idle time iowait would show, the ranks' own input wait not."""
    iowait, input_wait = row.iowait_percent, row.input_wait_percent
    return (iowait is not None and iowait >= IOWAIT_HIGH_PERCENT) or (
        input_wait is not None and input_wait >= 100 * INPUT_WAIT_SHARE
    )


def _nfs_ceiling_percent(row: EpochRow) -> float | None:
    """The NFS server reads' share of the measured NFS ceiling where NFS brought more
    than the local disks (the data set is on an NFS mount), else None: then the disk's
    ceiling is the one the reads are judged against."""
    nfs, disk = row.nfs_server_read_bytes, row.disk_read_bytes or 0
    if nfs is None or nfs <= disk:
        return None
    return row.nfs_read_ceiling_percent


def detect_storage_bound(context: RunContext) -> StorageBound | None:
    """Storage reads (``judged_reads``) high, iowait high and step throughput unstable in the
    same host-epochs."""
    reads = judged_reads(context.report)
    rows = [row for row, _ in context.hosts_rows()]
    rates = {(r.host, r.epoch): _read_mbps(r, reads) for r in rows}
    storage = [rate for rate in rates.values() if rate is not None]
    if not storage:
        return None
    peak = max(storage)
    evicted = evicted_epochs(context)

    def reading(row: EpochRow) -> bool:
        rate = rates[(row.host, row.epoch)]
        if rate is None or rate < STORAGE_HIGH_SHARE_OF_PEAK * peak:
            return False
        came_in = _dataset_came_in(row) or (row.host, row.epoch) in evicted
        return rate >= MIN_STORAGE_MBPS or came_in

    candidates = [
        row
        for row in rows
        if reading(row) and _waited(row) and not _dataset_stayed_cached(row, evicted)
    ]
    if not candidates:  # no step event is read for a run that never waited on storage
        return None
    candidate_keys = {(row.host, row.epoch) for row in candidates}
    warmup = int(_config_number(context.config, Workload.WARMUP_STEPS) or 0)
    step_images = step_rates(context.steps(), context.model, warmup)
    bound: list[UnstableHostEpoch] = []
    calm: list[float] = []
    for row in rows:
        cv = coefficient_of_variation(step_images.get((row.host, row.epoch), []))
        if cv is None:
            continue
        if (row.host, row.epoch) in candidate_keys and cv >= STEP_CV_UNSTABLE:
            bound.append(
                UnstableHostEpoch(
                    host=row.host,
                    epoch=row.epoch,
                    iowait_percent=row.iowait_percent,
                    step_images_per_second_cv=cv,
                    storage_read_mbps=rates[(row.host, row.epoch)],
                    dataset_cached_start_percent=row.dataset_cached_start_percent,
                    dataset_cached_end_percent=row.dataset_cached_end_percent,
                    input_wait_percent=row.input_wait_percent,
                    disk_read_ceiling_percent=row.disk_read_ceiling_percent,
                    nfs_read_ceiling_percent=_nfs_ceiling_percent(row),
                )
            )
        elif not reading(row):
            calm.append(cv)
    if not bound:
        return None
    return StorageBound(
        epochs=sorted({b.epoch for b in bound}),
        host_epochs=bound[:20],
        worst=max(bound, key=lambda b: b.step_images_per_second_cv),
        cv_without_storage_reads=float(np.mean(calm)) if calm else None,
        reads_judged=reads,
    )


def detect_input_bound(context: RunContext) -> InputBound | None:
    hits = [
        row
        for row, _ in context.hosts_rows()
        if row.cpu_util_percent is not None
        and row.gpu_util_percent is not None
        and row.cpu_util_percent >= CPU_SATURATED_PERCENT
        and row.gpu_util_percent <= GPU_LOW_PERCENT
    ]
    if not hits:
        return None
    return InputBound(
        hosts=sorted({row.host for row in hits}),
        epochs=sorted({row.epoch for row in hits}),
        cpu_util_percent_mean=float(np.mean([row.cpu_util_percent for row in hits])),
        gpu_util_percent_mean=float(np.mean([row.gpu_util_percent for row in hits])),
        host_epochs=[
            BusyHostEpoch(r.host, r.epoch, r.cpu_util_percent, r.gpu_util_percent)
            for r in hits[:20]
        ],
    )


# --------------------------------------------------------------------------------------
# epoch restart
# --------------------------------------------------------------------------------------


def _restart_on_rank(epoch: int, seconds: np.ndarray) -> RestartEpoch | None:
    """A rank's timed steps of one epoch, in order: the first against the others' median."""
    if seconds.size < 1 + MIN_STEPS_FOR_RESTART:
        return None
    first, median = float(seconds[0]), float(np.median(seconds[1:]))
    total = float(seconds.sum())
    if median <= 0 or total <= 0:
        return None
    extra = first - median
    return RestartEpoch(epoch, first, median, extra, total, extra / total)


def detect_epoch_restart(context: RunContext) -> EpochRestart | None:
    """In epochs after the first, each epoch's first timed step (after the run's warm-up
    steps) against the median of the epoch's other timed steps, per rank from the stored
    step events; per epoch the median rank's. Found where the first step takes at least
    ``EPOCH_RESTART_RATIO`` times the median and its extra time is at least
    ``EPOCH_RESTART_SHARE`` of the epoch's timed steps."""
    complete = complete_epochs(context.report)
    if len(complete) < 2:
        return None
    steps = context.steps()
    epochs = step_epochs(steps, context.model)
    warmup = int(_config_number(context.config, Workload.WARMUP_STEPS) or 0)
    rows = timed_step_rows(steps, epochs, warmup)
    with np.errstate(invalid="ignore"):
        rows = rows[steps.seconds[rows] > 0]
    first_epoch = min(complete)
    rows = rows[np.isin(epochs[rows], [e for e in complete if e != first_epoch])]
    if not rows.size:
        return None
    # in time order within each (host, rank, epoch)
    rows = rows[np.argsort(steps.time_ns[rows], kind="stable")]
    order, starts = _stable_groups(steps.host_index[rows], steps.rank[rows], epochs[rows])
    by_epoch: dict[int, list[RestartEpoch]] = {}
    for group in np.split(rows[order], starts[1:]):
        epoch = int(epochs[group[0]])
        found = _restart_on_rank(epoch, steps.seconds[group])
        if found is not None:
            by_epoch.setdefault(epoch, []).append(found)
    hits = []
    for epoch in sorted(by_epoch):
        ranks = sorted(by_epoch[epoch], key=lambda r: r.extra_share)
        middle = ranks[len(ranks) // 2]  # the median rank (the upper one of two)
        if (
            middle.first_step_seconds >= EPOCH_RESTART_RATIO * middle.other_steps_median_seconds
            and middle.extra_share >= EPOCH_RESTART_SHARE
        ):
            hits.append(middle)
    if not hits:
        return None
    return EpochRestart(
        epochs=hits,
        epochs_checked=len(by_epoch),
        extra_seconds_mean=float(np.mean([h.extra_seconds for h in hits])),
        extra_share_mean=float(np.mean([h.extra_share for h in hits])),
        framework=context.run.framework,
        loader_workers=_config_int(context.config, Workload.LOADER_WORKERS),
        persistent_workers=_config_flag(context.config, Workload.PERSISTENT_WORKERS),
    )


def _config_count(config: dict[str, Any], name: str) -> float | None:
    """A count or flag of the run's configuration, 0 included; None when not sent."""
    value = config.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _config_int(config: dict[str, Any], name: str) -> int | None:
    value = _config_count(config, name)
    return None if value is None else int(value)


def _config_flag(config: dict[str, Any], name: str) -> bool | None:
    value = _config_count(config, name)
    return None if value is None else bool(value)


# --------------------------------------------------------------------------------------
# scaling loss
# --------------------------------------------------------------------------------------


def resource_use(report: EpochReport, nodes: int, reads: StorageReads) -> ResourceUse:
    """A run's fabric bytes per image, storage reads per node (``reads``: the training's own
    or the hosts'), CPU and GPU utilisation over its complete epochs."""
    complete = complete_epochs(report)
    fabric_bytes = images = 0.0
    fabric_seen = False
    for row, amounts in zip(report.rows, report.amounts, strict=True):
        if row.host == ALL_HOSTS or row.epoch not in complete:
            continue
        images += amounts.images
        if amounts.fabric:
            rx, tx = ("ib_rcv", "ib_xmit") if amounts.fabric == "ib" else ("net_rx", "net_tx")
            moved = amounts.values.get(rx, math.nan) + amounts.values.get(tx, math.nan)
            if not math.isnan(moved):
                fabric_bytes += moved
                fabric_seen = True
    totals = [r for r in report.total_rows() if r.epoch in complete]
    seconds = sum(r.seconds for r in totals)
    storage = [_read_bytes(r, reads) for r in totals if _read_bytes(r, reads) is not None]

    def weighted(column: str) -> float | None:
        pairs = [(getattr(r, column), r.seconds) for r in totals if getattr(r, column) is not None]
        weight = sum(s for _, s in pairs)
        return round(sum(v * s for v, s in pairs) / weight, 2) if weight else None

    return ResourceUse(
        fabric_bytes_per_image=round(fabric_bytes / images, 1) if fabric_seen and images else None,
        storage_read_mbps_per_node=round(sum(storage) / seconds / BYTES_PER_MB / nodes, 3)
        if storage and seconds and nodes
        else None,
        cpu_util_percent=weighted("cpu_util_percent"),
        gpu_util_percent=weighted("gpu_util_percent"),
    )


def grown(reference: ResourceUse, current: ResourceUse) -> list[RateGrowth | UtilisationGrowth]:
    """The resources whose use *grew* from the reference run to this one: only those can
    explain a loss of throughput (one that fell, e.g. storage reads per node once more nodes
    cache the data set, is not a cause)."""
    changes: list[RateGrowth | UtilisationGrowth] = []
    for name in ("fabric_bytes_per_image", "storage_read_mbps_per_node"):
        before, after = getattr(reference, name), getattr(current, name)
        if before is None or after is None:
            continue
        if before == 0:
            grew = after > 0
            ratio = None
        else:
            ratio = after / before
            grew = ratio >= RESOURCE_CHANGE_RATIO
        if grew:
            changes.append(RateGrowth(name, before, after, ratio or None))
    for name in ("cpu_util_percent", "gpu_util_percent"):
        before, after = getattr(reference, name), getattr(current, name)
        if before is None or after is None:
            continue
        if after - before >= UTILISATION_CHANGE_POINTS:
            changes.append(UtilisationGrowth(name, before, after, after - before))
    return changes


def detect_scaling_loss(context: RunContext) -> ScalingLoss | None:
    """Throughput lost to scaling, explained by the step anatomy when this run and its
    reference run both have one, else by the resources that grew."""
    key = GroupKey.of(context.run)
    facts = context.group_facts()
    table = scaling_groups(context.store, list(facts.values())).get(key, [])
    me = next((m for m in table if m.run_id == context.run.run_id), None)
    if me is None or me.row.gpus <= 1 or not me.row.images_per_second:
        return None
    mine = facts[context.run.run_id]
    found = ScalingLoss(
        gpus=me.row.gpus,
        nodes=me.row.nodes,
        images_per_second=me.row.images_per_second,
        ideal=me.row.ideal,
        efficiency_percent=me.row.efficiency_percent,
        scope=me.row.scope,
        lost_images_per_second=me.row.lost_images_per_second,
        on_gpus=resource_use(context.report, mine.nodes, StorageReads.HOSTS).gpu_util_percent
        is not None,
    )
    reference = _reference_run(mine, list(facts.values()))
    attribution = None
    if reference is not None:
        from collector.findings.anatomy import scaling_attribution  # builds on this module

        attribution = scaling_attribution(context, reference, me.row.lost_images_per_second)
    slower = attribution is not None and (
        attribution.lost_fraction_per_rank >= SCALING_LOSS_MIN_FRACTION
    )
    if not found.below_floor and not slower:
        return None
    if reference is None:
        return found
    found = replace(
        found,
        reference_run=reference.run.run_id,
        reference_gpus=reference.gpus,
        reference_nodes=reference.nodes,
        across_nodes=reference.nodes != mine.nodes,
    )
    if attribution is not None:  # measured: the resources' growth is no explanation beside it
        return replace(found, attribution=attribution)
    ref_report = context.report_of(reference.run.run_id)
    reads = judged_reads(context.report, ref_report)
    ref_use = resource_use(ref_report, reference.nodes, reads)
    mine_use = resource_use(context.report, mine.nodes, reads)
    return replace(
        found,
        reads_judged=reads,
        reference_resources=ref_use,
        run_resources=mine_use,
        changed=grown(ref_use, mine_use),
    )


def _reference_run(mine: RunFacts, facts: list[RunFacts]) -> RunFacts | None:
    """A run of the group on fewer nodes to compare resources with: the single-node run
    with the most GPUs for a multi-node run, else the 1-GPU run."""
    usable = [f for f in facts if f.run.run_id != mine.run.run_id and f.throughput.source]
    if mine.nodes > 1:
        fewer = [f for f in usable if f.nodes < mine.nodes]
        if fewer:
            return max(fewer, key=lambda f: (-f.nodes, f.gpus, f.run.start_ns))
    single = [f for f in usable if f.gpus == 1]
    return max(single, key=lambda f: f.run.start_ns) if single else None


# --------------------------------------------------------------------------------------
# precision and read demand
# --------------------------------------------------------------------------------------


def _first_epoch_storage(report: EpochReport, reads: StorageReads) -> EpochRow | None:
    """The first complete epoch's ``*`` row that has storage reads of the kind judged."""
    complete = complete_epochs(report)
    totals = [
        r for r in report.total_rows() if r.epoch in complete and _read_mbps(r, reads) is not None
    ]
    return totals[0] if totals else None


def like_for_precision(run: RunInfo) -> tuple:
    """What must be equal for two runs' read rates to be compared across precisions: model,
    framework, data format, data set (bytes and images), batch per rank, image size, world
    size and node count. A missing value never matches (None is not equal to a number)."""
    key = GroupKey.of(run)
    config = run.config
    return (
        key.framework,
        key.model,
        key.data_format,
        _config_number(config, Workload.DATASET_BYTES) or object(),
        _config_number(config, Workload.DATASET_IMAGES) or object(),
        key.batch_size or object(),
        _config_number(config, Workload.IMAGE_SIZE) or object(),
        run.world_size or object(),
        len(run.hosts),
    )


def detect_precision_read_demand(context: RunContext) -> PrecisionReadDemand | None:
    """This run reads storage much faster in epoch 1 than a like run at another precision:
    the same training in every other respect (``like_for_precision``)."""
    mine = context.run
    shape = like_for_precision
    my_precision = GroupKey.of(mine).precision
    others = [
        r
        for r in context.store.runs()
        if r.run_id != mine.run_id
        and r.state != RunState.FAILED
        and shape(r) == shape(mine)
        and GroupKey.of(r).precision not in ("", my_precision)
    ]
    if not others:
        return None
    other = max(others, key=lambda r: r.start_ns)
    their_report = context.report_of(other.run_id)
    reads = judged_reads(context.report, their_report)
    first = _first_epoch_storage(context.report, reads)
    their_first = _first_epoch_storage(their_report, reads)
    if first is None or their_first is None:
        return None
    mbps, their_mbps = _read_mbps(first, reads), _read_mbps(their_first, reads)
    if mbps < MIN_STORAGE_MBPS or not their_mbps:
        return None
    ratio = mbps / their_mbps
    if ratio < PRECISION_READ_RATIO:
        return None
    return PrecisionReadDemand(
        precision=my_precision,
        other_run=other.run_id,
        other_precision=GroupKey.of(other).precision,
        batch_size=mine.config.get(Workload.BATCH_SIZE),
        other_batch_size=other.config.get(Workload.BATCH_SIZE),
        storage_read_mbps=mbps,
        other_storage_read_mbps=their_mbps,
        images_per_second=first.images_per_second,
        other_images_per_second=their_first.images_per_second,
        ratio=ratio,
        reads_judged=reads,
        epoch=first.epoch,
        nfs_read_most=(first.nfs_server_read_mbps or 0) >= (first.disk_read_mbps or 0),
    )
